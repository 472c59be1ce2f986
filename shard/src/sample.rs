//! WebDataset samples: the files of one training example, grouped by their shared key.

use serde::{Deserialize, Serialize};

use crate::error::{Result, ShardError};

/// Splits a member name into its WebDataset key and extension: the key is the directory
/// part plus the basename up to its first `.`, the extension is the rest of the basename
/// (without that dot). `train/n01/0001.seg.png` → (`train/n01/0001`, `seg.png`).
///
/// A basename without a dot, or starting with one, has no extension: the whole name is the
/// key. (WebDataset's loader skips such files; here they stay one-file samples, so
/// resharding never drops data.) AIStore's `cos.WdsKey` cuts at the *last* dot instead; the
/// two agree on names with one extension.
pub fn wds_key(name: &str) -> (&str, &str) {
    let base = name.rfind('/').map_or(0, |i| i + 1);
    match name[base..].find('.') {
        Some(dot) if dot > 0 => (&name[..base + dot], &name[base + dot + 1..]),
        _ => (name, ""),
    }
}

/// Where a sample file's bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleData {
    /// Read into memory (from a [`crate::ShardReader`]).
    Bytes(Vec<u8>),
    /// A byte range of the (uncompressed) tar, from a [`crate::TarIndex`]: read it with
    /// one seek when needed.
    Range {
        /// Offset of the data in the tar.
        offset: u64,
        /// Its length.
        size: u64,
    },
}

impl SampleData {
    /// The data's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            SampleData::Bytes(b) => b.len() as u64,
            SampleData::Range { size, .. } => *size,
        }
    }

    /// Whether the data is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One file of a sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleFile {
    /// The full member name.
    pub name: String,
    /// The extension ([`wds_key`]), e.g. `jpg`, `seg.png`, or empty.
    pub ext: String,
    /// The bytes or where they are.
    pub data: SampleData,
}

/// The files sharing one key, in archive order. Never split: all consecutive members with
/// the key are in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// The WebDataset key (`__key__`).
    pub key: String,
    /// Its files, in archive order.
    pub files: Vec<SampleFile>,
}

impl Sample {
    /// Total bytes of the sample's files.
    pub fn size(&self) -> u64 {
        self.files.iter().map(|f| f.data.len()).sum()
    }
}

/// Groups consecutive files with the same key into samples, WebDataset's `group_by_keys`
/// rule. A sample is only yielded once the next key (or the end) shows it is complete; if
/// the input fails mid-sample, the error is yielded instead of a partial sample, and the
/// iterator ends.
///
/// A key that comes back after other keys (a non-consecutive duplicate) starts a *new*
/// sample with the same key, exactly as WebDataset does; deciding whether that is an error
/// is the caller's (resharding's "duplicated records" policy). Two files with the same key
/// and extension in one sample (only possible with duplicate names, which readers refuse)
/// are [`ShardError::Malformed`]. Holding more than `max_sample_bytes` of in-memory data
/// in one sample is [`ShardError::LimitExceeded`] (ranges do not count: they are not held).
pub fn group_samples<I>(files: I, max_sample_bytes: u64) -> Samples<I::IntoIter>
where
    I: IntoIterator<Item = Result<(String, SampleData)>>,
{
    Samples {
        files: files.into_iter(),
        pending: None,
        max_bytes: max_sample_bytes,
        finished: false,
    }
}

/// The iterator of [`group_samples`].
pub struct Samples<I> {
    files: I,
    /// The first file of the next sample, read while looking for the end of this one.
    pending: Option<(String, SampleData)>,
    max_bytes: u64,
    finished: bool,
}

impl<I: Iterator<Item = Result<(String, SampleData)>>> Samples<I> {
    fn add(
        &self,
        sample: &mut Sample,
        held: &mut u64,
        name: String,
        data: SampleData,
    ) -> Result<()> {
        let ext = wds_key(&name).1.to_owned();
        if sample.files.iter().any(|f| f.ext == ext) {
            return Err(ShardError::malformed(format!(
                "sample {:?} has two {ext:?} files",
                sample.key
            )));
        }
        if let SampleData::Bytes(b) = &data {
            *held += b.len() as u64;
            if *held > self.max_bytes {
                return Err(ShardError::limit(format!(
                    "sample {:?} holds more than {} bytes",
                    sample.key, self.max_bytes
                )));
            }
        }
        sample.files.push(SampleFile { name, ext, data });
        Ok(())
    }

    fn next_sample(&mut self) -> Option<Result<Sample>> {
        let (name, data) = match self.pending.take() {
            Some(first) => first,
            None => match self.files.next()? {
                Ok(first) => first,
                Err(e) => return Some(Err(e)),
            },
        };
        let mut sample = Sample {
            key: wds_key(&name).0.to_owned(),
            files: Vec::new(),
        };
        let mut held = 0;
        if let Err(e) = self.add(&mut sample, &mut held, name, data) {
            return Some(Err(e));
        }
        loop {
            match self.files.next() {
                None => {
                    self.finished = true;
                    return Some(Ok(sample));
                }
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok((name, data))) => {
                    if wds_key(&name).0 != sample.key {
                        self.pending = Some((name, data));
                        return Some(Ok(sample));
                    }
                    if let Err(e) = self.add(&mut sample, &mut held, name, data) {
                        return Some(Err(e));
                    }
                }
            }
        }
    }
}

impl<I: Iterator<Item = Result<(String, SampleData)>>> Iterator for Samples<I> {
    type Item = Result<Sample>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        let next = self.next_sample();
        if !matches!(next, Some(Ok(_))) {
            self.finished = true;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_webdataset() {
        assert_eq!(wds_key("a/b/0001.jpg"), ("a/b/0001", "jpg"));
        assert_eq!(wds_key("0001.seg.png"), ("0001", "seg.png"));
        assert_eq!(wds_key("a.b/c.d.e"), ("a.b/c", "d.e"));
        assert_eq!(wds_key("a/noext"), ("a/noext", ""));
        assert_eq!(wds_key("a/.hidden"), ("a/.hidden", ""));
        assert_eq!(wds_key("x."), ("x", ""));
    }

    fn bytes(name: &str, n: usize) -> Result<(String, SampleData)> {
        Ok((name.to_owned(), SampleData::Bytes(vec![7; n])))
    }

    #[test]
    fn groups_consecutive_and_never_splits() {
        let files = vec![
            bytes("s/1.jpg", 3),
            bytes("s/1.cls", 1),
            bytes("s/2.jpg", 3),
            bytes("s/1.txt", 2),
            bytes("lonely", 0),
        ];
        let samples: Vec<Sample> = group_samples(files, 100).map(|s| s.unwrap()).collect();
        let shape: Vec<(&str, Vec<&str>)> = samples
            .iter()
            .map(|s| {
                (
                    s.key.as_str(),
                    s.files.iter().map(|f| f.ext.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("s/1", vec!["jpg", "cls"]),
                ("s/2", vec!["jpg"]),
                // Non-consecutive repeat of a key: a new sample, as in WebDataset.
                ("s/1", vec!["txt"]),
                ("lonely", vec![""]),
            ]
        );
        assert_eq!(samples[0].size(), 4);
    }

    #[test]
    fn errors_replace_partial_samples_and_end_iteration() {
        let files = vec![
            bytes("a.jpg", 1),
            bytes("b.jpg", 1),
            bytes("b.cls", 1),
            Err(ShardError::malformed("cut")),
            bytes("c.jpg", 1),
        ];
        let out: Vec<Result<Sample>> = group_samples(files, 100).collect();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].as_ref().unwrap().key, "a");
        assert!(out[1].is_err());
    }

    #[test]
    fn bounds_and_duplicates() {
        let big = vec![bytes("a.jpg", 60), bytes("a.png", 60)];
        let out: Vec<_> = group_samples(big, 100).collect();
        assert!(matches!(out[..], [Err(ShardError::LimitExceeded(_))]));
        let ranges = vec![
            Ok((
                "a.jpg".to_owned(),
                SampleData::Range {
                    offset: 512,
                    size: 1 << 40,
                },
            )),
            Ok((
                "a.png".to_owned(),
                SampleData::Range {
                    offset: 2048,
                    size: 1 << 40,
                },
            )),
        ];
        let out: Vec<_> = group_samples(ranges, 100).collect();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].as_ref().unwrap().size(), 2 << 40);
        let dup = vec![bytes("a.jpg", 1), bytes("a.jpg", 1)];
        let out: Vec<_> = group_samples(dup, 100).collect();
        assert!(matches!(out[..], [Err(ShardError::Malformed(_))]));
    }
}
