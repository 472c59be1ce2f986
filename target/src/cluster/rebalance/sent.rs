//! What a rebalance has delivered, kept on disk (`state_dir/rebalance.sent`), so a target
//! killed halfway does not send it all again when it comes back.
//!
//! The file starts with a header naming the placement (active targets and their weights)
//! and the mountpaths the walk ran under; then one line per delivered record — mountpath
//! position, bucket, stored name, data file — appended batch by batch, in walk (key) order,
//! and flushed to disk before the walk goes on. A rebalance under the same placement and
//! mountpaths (the target restarted, or rejoined the same map) resumes: its walk merges the
//! index with the log, and a misplaced record whose very data file is logged is confirmed
//! with its owners (a HEAD each: an owner restored from an older state may lack it) and
//! counted as already moved instead of being sent again. Everything else is sent — records
//! written since (a hinted copy, a rewrite under a new data file) included, since the walk
//! still reads the whole index: the index read is cheap, the transfers are what a resume
//! saves.
//! Any other rebalance starts the file over. The copies the log names are dropped when the
//! rebalance completes, and the file goes with them.
//!
//! A job for one bucket (`make-n-copies`) keeps its log in an unlinked file: nothing to
//! resume, and nothing left behind by a crash.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::index::object_key;
use crate::store::meta::ObjectMeta;

/// The log's file in a target's state directory.
pub(crate) const FILE: &str = "rebalance.sent";

/// What a log was written under: a rebalance resumes only the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Under {
    pub placement: Vec<String>,
    pub mountpaths: Vec<PathBuf>,
}

/// One delivered record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Position of its mountpath in [`Under::mountpaths`].
    pub m: usize,
    /// Bucket uname.
    pub b: String,
    /// Stored name.
    pub n: String,
    /// Data file: a rewrite since has another.
    pub f: String,
}

impl Entry {
    pub fn of(m: usize, meta: &ObjectMeta) -> Self {
        Self {
            m,
            b: meta.bucket.clone(),
            n: meta.name.clone(),
            f: meta.file.clone(),
        }
    }

    fn key(&self) -> Vec<u8> {
        object_key(&self.b, &self.n)
    }
}

/// The log of one rebalance run.
pub(crate) struct SentLog {
    file: File,
    /// Entries a previous run logged, for the merge with this run's walk (`None`: a fresh
    /// run, or all of them passed).
    resumed: Option<Resumed>,
    /// How many this run appended.
    pub appended: u64,
}

struct Resumed {
    lines: std::io::Lines<BufReader<File>>,
    /// The next logged entry not yet passed by the walk.
    next: Option<Entry>,
    /// Lines the previous run logged.
    logged: u64,
}

impl SentLog {
    /// Opens the log for a rebalance under `under`: resumed when the file was written under
    /// the same, started over otherwise.
    pub fn open(state_dir: &Path, under: &Under) -> std::io::Result<Self> {
        let path = state_dir.join(FILE);
        let header = match File::open(&path) {
            Ok(f) => BufReader::new(f)
                .lines()
                .next()
                .transpose()?
                .and_then(|l| serde_json::from_str::<Under>(&l).ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if header.as_ref() == Some(under) {
            let mut file = OpenOptions::new().read(true).append(true).open(&path)?;
            // A torn last line (killed mid-append) must not swallow the next entry.
            if file.seek(SeekFrom::End(-1))? > 0 {
                let mut last = [0u8];
                std::io::Read::read_exact(&mut file, &mut last)?;
                if last[0] != b'\n' {
                    file.write_all(b"\n")?;
                }
            }
            // (a torn last line counts: a figure for the log, not for the merge)
            let logged = BufReader::new(File::open(&path)?).lines().skip(1).count() as u64;
            let mut lines = BufReader::new(File::open(&path)?).lines();
            lines.next(); // the header
            let mut resumed = Resumed {
                lines,
                next: None,
                logged,
            };
            resumed.advance()?;
            return Ok(Self {
                file,
                resumed: Some(resumed),
                appended: 0,
            });
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        writeln!(file, "{}", serde_json::to_string(under)?)?;
        file.sync_all()?;
        Ok(Self {
            file,
            resumed: None,
            appended: 0,
        })
    }

    /// A log in an unlinked file under `dir`: for a run that never resumes.
    pub fn anonymous(dir: &Path) -> std::io::Result<Self> {
        let path = dir.join(format!(".{FILE}.{}", uuid::Uuid::new_v4().simple()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        writeln!(&file, "{{}}")?; // a header line, as in a named log
        Ok(Self {
            file,
            resumed: None,
            appended: 0,
        })
    }

    /// Whether a previous run delivered this very record (same data file). The walk asks in
    /// key order per mountpath, mountpaths in order; entries it passes are forgotten.
    pub fn delivered_before(&mut self, m: usize, key: &[u8], meta: &ObjectMeta) -> bool {
        let Some(r) = self.resumed.as_mut() else {
            return false;
        };
        while let Some(e) = &r.next {
            let ord = e.m.cmp(&m).then_with(|| e.key().as_slice().cmp(key));
            match ord {
                std::cmp::Ordering::Less => {
                    if r.advance().is_err() {
                        self.resumed = None;
                        return false;
                    }
                }
                std::cmp::Ordering::Equal => return e.f == meta.file,
                std::cmp::Ordering::Greater => return false,
            }
        }
        false
    }

    /// Entries the previous run logged (0 for a fresh run).
    pub fn resumed_from(&self) -> u64 {
        self.resumed.as_ref().map_or(0, |r| r.logged)
    }

    /// Appends delivered records and flushes them to disk before the walk goes on.
    pub fn append(&mut self, entries: &mut [Entry]) -> std::io::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        entries.sort_by_key(|e| (e.m, e.key()));
        let mut w = BufWriter::new(&self.file);
        for e in entries.iter() {
            serde_json::to_writer(&mut w, e)?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
        drop(w);
        self.file.sync_data()?;
        self.appended += entries.len() as u64;
        Ok(())
    }

    /// Every entry logged, by this run and the one it resumed, in order (for the drops).
    pub fn entries(&self) -> std::io::Result<impl Iterator<Item = std::io::Result<Entry>> + use<>> {
        let mut f = self.file.try_clone()?;
        f.seek(SeekFrom::Start(0))?;
        Ok(BufReader::new(f).lines().skip(1).map(|l| {
            let l = l?;
            serde_json::from_str(&l).map_err(std::io::Error::other)
        }))
    }

    /// The rebalance completed and its copies are dropped: nothing to resume.
    pub fn remove(state_dir: &Path) {
        let _ = std::fs::remove_file(state_dir.join(FILE));
    }
}

impl Resumed {
    fn advance(&mut self) -> std::io::Result<()> {
        self.next = match self.lines.next().transpose()? {
            // A torn last line (a crash mid-append) ends what was logged.
            Some(l) => serde_json::from_str(&l).ok(),
            None => None,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(bucket: &str, name: &str, file: &str) -> ObjectMeta {
        ObjectMeta {
            bucket: bucket.into(),
            name: name.into(),
            size: 1,
            cksum_type: String::new(),
            cksum_value: String::new(),
            version: String::new(),
            atime_ns: 0,
            mtime_ns: 0,
            file: file.into(),
            custom: Default::default(),
            generation: 1,
        }
    }

    #[test]
    fn a_run_under_the_same_placement_resumes_and_any_other_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let under = Under {
            placement: vec!["t1".into(), "t2".into()],
            mountpaths: vec!["/a".into(), "/b".into()],
        };
        let mut log = SentLog::open(dir.path(), &under).unwrap();
        assert_eq!(log.resumed_from(), 0);
        let sent = [
            (0, meta("ais/b", "x", "f1")),
            (0, meta("ais/b", "y", "f2")),
            (1, meta("ais/b", "a", "f3")),
        ];
        let mut entries: Vec<_> = sent.iter().map(|(m, x)| Entry::of(*m, x)).collect();
        log.append(&mut entries).unwrap();
        drop(log);
        // A torn line at the end (killed mid-append) is ignored.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(FILE))
            .unwrap();
        f.write_all(b"{\"m\":1,\"b\":\"ais/").unwrap();
        drop(f);

        let mut log = SentLog::open(dir.path(), &under).unwrap();
        let key = |m: &ObjectMeta| object_key(&m.bucket, &m.name);
        let w = meta("ais/b", "w", "f0");
        assert!(!log.delivered_before(0, &key(&w), &w), "never sent");
        assert!(log.delivered_before(0, &key(&sent[0].1), &sent[0].1));
        let rewritten = meta("ais/b", "y", "f9");
        assert!(
            !log.delivered_before(0, &key(&rewritten), &rewritten),
            "rewritten since: another data file"
        );
        assert!(log.delivered_before(1, &key(&sent[2].1), &sent[2].1));
        assert_eq!(log.resumed_from(), 4, "three entries and a torn line");
        let mut more = vec![Entry::of(1, &meta("ais/b", "z", "f4"))];
        log.append(&mut more).unwrap();
        assert_eq!(
            log.entries().unwrap().filter(|e| e.is_ok()).count(),
            4,
            "the torn line does not swallow the next entry"
        );
        drop(log);

        let other = Under {
            placement: vec!["t1".into(), "t2".into(), "t3".into()],
            ..under
        };
        let mut log = SentLog::open(dir.path(), &other).unwrap();
        assert_eq!(log.resumed_from(), 0);
        assert!(!log.delivered_before(0, &key(&sent[0].1), &sent[0].1));
        assert_eq!(log.entries().unwrap().count(), 0);
    }
}
