//! One reader for every format: walk members in archive order, read one by name, list,
//! copy a selection into another shard, or group members into samples.

use std::io::{self, Read, Seek, Write};

use crate::error::{Result, ShardError};
use crate::format::Format;
use crate::limits::Limits;
use crate::member::Member;
use crate::sample::{SampleData, Samples, group_samples};
use crate::select::Selector;
use crate::tarball::{Seekable, Source, Streamed, TarParser};
use crate::writer::ShardWriter;
use crate::zipfile::ZipShard;

/// A member being read: its description, and its data through `Read`.
///
/// The data is streamed from the archive (never buffered whole). Errors that come out of
/// `read` carry a [`ShardError`]: convert them back with `ShardError::from(io_error)`.
/// Dropping an entry without reading it is fine: the reader skips (or seeks over) the rest.
pub struct Entry<'a> {
    member: Member,
    data: Box<dyn Read + 'a>,
}

impl Entry<'_> {
    /// What the archive says about this member.
    pub fn member(&self) -> &Member {
        &self.member
    }

    /// Reads the whole member into memory. Its size is bounded by
    /// [`Limits::max_member_size`]; the allocation grows with the data actually read.
    pub fn read_to_vec(&mut self) -> Result<Vec<u8>> {
        let cap = usize::try_from(self.member.size.min(1 << 20)).unwrap_or(0);
        let mut buf = Vec::with_capacity(cap);
        self.data.read_to_end(&mut buf)?;
        if buf.len() as u64 != self.member.size {
            return Err(ShardError::malformed(format!(
                "member {:?} has {} bytes, not {}",
                self.member.name,
                buf.len(),
                self.member.size
            )));
        }
        Ok(buf)
    }
}

impl Read for Entry<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.data.read(buf)
    }
}

/// What each format's reader does; `ShardReader` hides which one it is.
trait Entries {
    fn next_entry(&mut self) -> Result<Option<Entry<'_>>>;
    fn find(&mut self, name: &str) -> Result<Option<Entry<'_>>>;
    fn list(&mut self) -> Result<Vec<Member>>;
}

/// The current tar member's data.
struct TarData<'a, S>(&'a mut TarParser<S>);

impl<S: Source> Read for TarData<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read_data(buf)
    }
}

impl<S: Source> Entries for TarParser<S> {
    fn next_entry(&mut self) -> Result<Option<Entry<'_>>> {
        let Some(parsed) = self.next_member()? else {
            return Ok(None);
        };
        Ok(Some(Entry {
            member: parsed.member,
            data: Box::new(TarData(self)),
        }))
    }

    fn find(&mut self, name: &str) -> Result<Option<Entry<'_>>> {
        loop {
            match self.next_member()? {
                None => return Ok(None),
                Some(p) if p.member.is_file() && p.member.name == name => {
                    return Ok(Some(Entry {
                        member: p.member,
                        data: Box::new(TarData(self)),
                    }));
                }
                Some(_) => {}
            }
        }
    }

    fn list(&mut self) -> Result<Vec<Member>> {
        let mut members = Vec::new();
        while let Some(p) = self.next_member()? {
            members.push(p.member);
        }
        Ok(members)
    }
}

/// Zip members walked in central-directory order.
struct ZipEntries<R> {
    shard: ZipShard<R>,
    next: usize,
}

impl<R: Read + Seek> ZipEntries<R> {
    fn entry(&mut self, index: usize) -> Result<Entry<'_>> {
        let member = self.shard.members()[index].clone();
        let data: Box<dyn Read + '_> = if member.is_file() {
            self.shard.open_member(index)?
        } else {
            Box::new(io::empty())
        };
        Ok(Entry { member, data })
    }
}

impl<R: Read + Seek> Entries for ZipEntries<R> {
    fn next_entry(&mut self) -> Result<Option<Entry<'_>>> {
        if self.next >= self.shard.members().len() {
            return Ok(None);
        }
        self.next += 1;
        self.entry(self.next - 1).map(Some)
    }

    fn find(&mut self, name: &str) -> Result<Option<Entry<'_>>> {
        match self.shard.index_of(name) {
            Some(i) if self.shard.members()[i].is_file() => self.entry(i).map(Some),
            _ => Ok(None),
        }
    }

    fn list(&mut self) -> Result<Vec<Member>> {
        Ok(self.shard.members().to_vec())
    }
}

/// Reads a shard of any [`Format`]: members in archive order with their data streamed,
/// one member by name, a listing, a selection, or WebDataset samples.
///
/// Blocking (`std::io`): run it on a blocking thread. Every read is bounded by the
/// [`Limits`] given at open; an archive that breaks them, or is malformed or unsafe, stops
/// the reader with an error (and every later call errors too).
pub struct ShardReader<'r> {
    format: Format,
    inner: Box<dyn Entries + Send + 'r>,
}

impl<'r> ShardReader<'r> {
    /// Opens a shard in a seekable source (a file). Plain tar seeks over the data it does not
    /// read; zip reads its central directory (and checks it) now.
    pub fn open<R: Read + Seek + Send + 'r>(
        format: Format,
        src: R,
        limits: Limits,
    ) -> Result<Self> {
        let inner: Box<dyn Entries + Send + 'r> = match format {
            Format::Tar => {
                let src = Seekable::new(src)?;
                let base = src.position();
                Box::new(TarParser::new(src, base, limits))
            }
            Format::Tgz | Format::TarLz4 => Box::new(TarParser::new(
                Streamed::new(format, src, limits)?,
                0,
                limits,
            )),
            Format::Zip => Box::new(ZipEntries {
                shard: ZipShard::open(src, limits)?,
                next: 0,
            }),
        };
        Ok(ShardReader { format, inner })
    }

    /// Reads a tar-family shard from a plain stream (a socket, a pipe); zip is refused with
    /// [`ShardError::Unsupported`] since its directory is at the end.
    pub fn stream<R: Read + Send + 'r>(format: Format, src: R, limits: Limits) -> Result<Self> {
        let parser = TarParser::new(Streamed::new(format, src, limits)?, 0, limits);
        Ok(ShardReader {
            format,
            inner: Box::new(parser),
        })
    }

    /// The format being read.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The next member (files and directories, in archive order), or `None` at the end.
    pub fn next_entry(&mut self) -> Result<Option<Entry<'_>>> {
        self.inner.next_entry()
    }

    /// The file member named exactly `name` (AIStore's `archpath`). Zip looks it up in its
    /// directory; tar scans forward from the current position, skipping data, and stops at
    /// the first match (so a later duplicate is not seen: the tar index is the path that
    /// checks a whole archive). Directories are not returned.
    pub fn find(&mut self, name: &str) -> Result<Entry<'_>> {
        self.inner
            .find(name)?
            .ok_or_else(|| ShardError::NotFound(name.to_owned()))
    }

    /// Every member, in archive order, including directories (as Python lists them). Reads
    /// no member data for plain tar and zip.
    pub fn list(mut self) -> Result<Vec<Member>> {
        self.inner.list()
    }

    /// Copies every file member that `selector` matches into `out`, in archive order; returns
    /// how many (AIStore's `archregx` + `archmode`). Unmatched data is skipped, not copied.
    pub fn copy_matching<W: Write>(
        &mut self,
        selector: &Selector,
        out: &mut ShardWriter<W>,
    ) -> Result<u64> {
        let mut copied = 0;
        while let Some(mut entry) = self.next_entry()? {
            if !entry.member.is_file() || !selector.matches(&entry.member.name) {
                continue;
            }
            let (name, size) = (entry.member.name.clone(), entry.member.size);
            out.append(&name, size, &mut entry)?;
            copied += 1;
        }
        Ok(copied)
    }

    /// The file members grouped into WebDataset samples, data read into memory: see
    /// [`group_samples`] for the rules. At most `max_sample_bytes` of one sample are held.
    pub fn into_samples(
        self,
        max_sample_bytes: u64,
    ) -> Samples<impl Iterator<Item = Result<(String, SampleData)>> + 'r> {
        let mut reader = self;
        let files = std::iter::from_fn(move || {
            loop {
                match reader.next_entry() {
                    Err(e) => return Some(Err(e)),
                    Ok(None) => return None,
                    Ok(Some(mut entry)) => {
                        if !entry.member.is_file() {
                            continue;
                        }
                        let name = entry.member.name.clone();
                        return Some(entry.read_to_vec().map(|b| (name, SampleData::Bytes(b))));
                    }
                }
            }
        });
        group_samples(files, max_sample_bytes)
    }
}

/// Lists a shard's members: a shorthand for [`ShardReader::open`] + [`ShardReader::list`].
pub fn list_members<R: Read + Seek + Send>(
    format: Format,
    src: R,
    limits: Limits,
) -> Result<Vec<Member>> {
    ShardReader::open(format, src, limits)?.list()
}
