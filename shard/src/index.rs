//! The member index of an uncompressed tar: where each member's headers and data are, built
//! by one pass over the headers that seeks over all data. With it, reading a member of a
//! 2 GiB shard is one seek and one read, and `archregx` needs no scan.

use std::io::{self, Read, Seek, SeekFrom};

use serde::{Deserialize, Serialize};

use crate::error::{Result, ShardError};
use crate::limits::{Limits, MAX_NAME_LEN, validate_member_name};
use crate::member::{Member, MemberKind};
use crate::sample::{SampleData, Samples, group_samples};
use crate::select::Selector;
use crate::tarball::{BLOCK, Seekable, TarParser};

/// Where one member sits in the tar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// The member name (as listed; see [`Member::name`]).
    pub name: String,
    /// Offset of the member's first header block, its pax or long-name header if it has
    /// one: the member occupies `header_offset .. data_offset + size` rounded up to 512.
    pub header_offset: u64,
    /// Offset of the member's data.
    pub data_offset: u64,
    /// Data length.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, Unix seconds.
    pub mtime: u64,
    /// File or directory.
    pub kind: MemberKind,
}

impl IndexEntry {
    /// The member as a listing shows it.
    pub fn member(&self) -> Member {
        Member {
            name: self.name.clone(),
            size: self.size,
            mode: self.mode,
            mtime: self.mtime,
            kind: self.kind,
        }
    }
}

/// The serialized shape of a [`TarIndex`] (serde), without the lookup table.
#[derive(Serialize, Deserialize)]
struct IndexData {
    source_size: u64,
    source_tag: String,
    end_offset: u64,
    entries: Vec<IndexEntry>,
}

/// Member offsets of one uncompressed tar, for reads without a scan.
///
/// Persist it beside the shard with [`TarIndex::to_bytes`] (compact, versioned,
/// checksummed) or any serde format; before use, check [`TarIndex::is_current`] against the
/// shard's size and the tag the server stored (e.g. the object's checksum or version), since
/// an index of another version of the shard reads garbage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "IndexData", into = "IndexData")]
pub struct TarIndex {
    source_size: u64,
    source_tag: String,
    end_offset: u64,
    entries: Vec<IndexEntry>,
    /// Entry positions sorted by name, for lookups; rebuilt, never stored.
    by_name: Vec<u32>,
}

impl TarIndex {
    /// Builds the index of the tar in `src`, from its current position: reads every header
    /// (with the checks and limits of [`crate::ShardReader`]) and seeks over all data.
    pub fn build<R: Read + Seek>(src: R, limits: Limits) -> Result<TarIndex> {
        let src = Seekable::new(src)?;
        let base = src.position();
        let mut parser = TarParser::new(src, base, limits);
        let mut entries = Vec::new();
        while let Some(p) = parser.next_member()? {
            entries.push(IndexEntry {
                name: p.member.name,
                header_offset: p.header_offset,
                data_offset: p.data_offset,
                size: p.member.size,
                mode: p.member.mode,
                mtime: p.member.mtime,
                kind: p.member.kind,
            });
        }
        let end_offset = parser.end_offset().unwrap_or(base);
        let source_size = parser_len(&parser);
        IndexData {
            source_size,
            source_tag: String::new(),
            end_offset,
            entries,
        }
        .try_into()
    }

    /// Size in bytes of the tar the index was built from.
    pub fn source_size(&self) -> u64 {
        self.source_size
    }

    /// The tag recorded with [`TarIndex::set_source_tag`] (empty by default).
    pub fn source_tag(&self) -> &str {
        &self.source_tag
    }

    /// Records which version of the shard this index describes (a checksum, a version id).
    pub fn set_source_tag(&mut self, tag: impl Into<String>) {
        self.source_tag = tag.into();
    }

    /// Whether the index describes a shard of this size and tag.
    pub fn is_current(&self, source_size: u64, source_tag: &str) -> bool {
        self.source_size == source_size && self.source_tag == source_tag
    }

    /// Offset of the end-of-archive marker: appending members overwrites from here (write
    /// them, then a new trailer, with a [`crate::ShardWriter`] positioned at this offset).
    pub fn end_offset(&self) -> u64 {
        self.end_offset
    }

    /// Every member in archive order, directories included.
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// The member (file or directory) named exactly `name`; O(log n).
    pub fn get(&self, name: &str) -> Option<&IndexEntry> {
        let i = self
            .by_name
            .binary_search_by(|i| self.entries[*i as usize].name.as_str().cmp(name))
            .ok()?;
        Some(&self.entries[self.by_name[i] as usize])
    }

    /// The file members `selector` matches, in archive order.
    pub fn select<'a>(&'a self, selector: &'a Selector) -> impl Iterator<Item = &'a IndexEntry> {
        self.entries
            .iter()
            .filter(|e| e.kind == MemberKind::File && selector.matches(&e.name))
    }

    /// The file members grouped into WebDataset samples with byte ranges (nothing is read).
    pub fn samples(&self) -> Samples<impl Iterator<Item = Result<(String, SampleData)>> + '_> {
        let files = self
            .entries
            .iter()
            .filter(|e| e.kind == MemberKind::File)
            .map(|e| {
                Ok((
                    e.name.clone(),
                    SampleData::Range {
                        offset: e.data_offset,
                        size: e.size,
                    },
                ))
            });
        group_samples(files, u64::MAX)
    }

    /// The compact binary form: magic `GMTI`, a version byte, LEB128 varints, and a CRC-32
    /// of everything before it at the end.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.entries.len() * 48);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        put_varint(&mut out, self.source_size);
        put_varint(&mut out, self.end_offset);
        put_bytes(&mut out, self.source_tag.as_bytes());
        put_varint(&mut out, self.entries.len() as u64);
        for e in &self.entries {
            put_bytes(&mut out, e.name.as_bytes());
            put_varint(&mut out, e.header_offset);
            put_varint(&mut out, e.data_offset - e.header_offset);
            put_varint(&mut out, e.size);
            put_varint(&mut out, u64::from(e.mode));
            put_varint(&mut out, e.mtime);
            out.push(match e.kind {
                MemberKind::File => 0,
                MemberKind::Dir => 1,
            });
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes [`TarIndex::to_bytes`]. Corrupt bytes are [`ShardError::Malformed`]; an index
    /// written by another version of this code is [`ShardError::Unsupported`] (rebuild it).
    pub fn from_bytes(bytes: &[u8]) -> Result<TarIndex> {
        let bad = |why: &str| ShardError::malformed(format!("tar index: {why}"));
        if bytes.len() < MAGIC.len() + 1 + 4 {
            return Err(bad("too short"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return Err(bad("checksum mismatch"));
        }
        if &body[..4] != MAGIC {
            return Err(bad("not an index"));
        }
        if body[4] != VERSION {
            return Err(ShardError::Unsupported(format!(
                "tar index version {} (this build reads {VERSION})",
                body[4]
            )));
        }
        let mut r = Cursor { buf: &body[5..] };
        let source_size = r.varint()?;
        let end_offset = r.varint()?;
        let source_tag = r.string(MAX_NAME_LEN)?;
        let count = r.varint()?;
        // Each entry takes at least 7 bytes: the count cannot make us allocate more than
        // the input justifies.
        if count > (r.buf.len() / 7) as u64 {
            return Err(bad("entry count larger than the data"));
        }
        let mut entries = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let name = r.string(MAX_NAME_LEN)?;
            let header_offset = r.varint()?;
            let data_offset = header_offset
                .checked_add(r.varint()?)
                .ok_or_else(|| bad("offset overflow"))?;
            let size = r.varint()?;
            let mode = u32::try_from(r.varint()?).map_err(|_| bad("mode out of range"))?;
            let mtime = r.varint()?;
            let kind = match r.byte()? {
                0 => MemberKind::File,
                1 => MemberKind::Dir,
                _ => return Err(bad("unknown member kind")),
            };
            entries.push(IndexEntry {
                name,
                header_offset,
                data_offset,
                size,
                mode,
                mtime,
                kind,
            });
        }
        if !r.buf.is_empty() {
            return Err(bad("trailing bytes"));
        }
        IndexData {
            source_size,
            source_tag,
            end_offset,
            entries,
        }
        .try_into()
    }
}

/// The length of the source the parser reads, via its seekable wrapper.
fn parser_len<R: Read + Seek>(parser: &TarParser<Seekable<R>>) -> u64 {
    parser.source().source_len()
}

impl TryFrom<IndexData> for TarIndex {
    type Error = ShardError;

    /// Checks what readers of the index rely on: names are safe and unique, every member
    /// lies inside the source and after its header, and fits the lookup table.
    fn try_from(d: IndexData) -> Result<TarIndex> {
        let bad = |why: String| ShardError::malformed(format!("tar index: {why}"));
        if d.entries.len() > u32::MAX as usize {
            return Err(bad("too many entries".into()));
        }
        for e in &d.entries {
            validate_member_name(&e.name)?;
            let end = e.data_offset.checked_add(e.size);
            if e.data_offset < e.header_offset.saturating_add(BLOCK)
                || end.is_none_or(|end| end > d.source_size)
                || (e.kind == MemberKind::Dir && e.size != 0)
            {
                return Err(bad(format!("entry {:?} out of bounds", e.name)));
            }
        }
        let mut by_name: Vec<u32> = (0..d.entries.len() as u32).collect();
        by_name.sort_unstable_by(|a, b| {
            d.entries[*a as usize]
                .name
                .cmp(&d.entries[*b as usize].name)
        });
        if let Some(w) = by_name
            .windows(2)
            .find(|w| d.entries[w[0] as usize].name == d.entries[w[1] as usize].name)
        {
            return Err(ShardError::unsafe_member(
                &d.entries[w[0] as usize].name,
                "duplicate member name",
            ));
        }
        Ok(TarIndex {
            source_size: d.source_size,
            source_tag: d.source_tag,
            end_offset: d.end_offset,
            entries: d.entries,
            by_name,
        })
    }
}

impl From<TarIndex> for IndexData {
    fn from(i: TarIndex) -> IndexData {
        IndexData {
            source_size: i.source_size,
            source_tag: i.source_tag,
            end_offset: i.end_offset,
            entries: i.entries,
        }
    }
}

const MAGIC: &[u8; 4] = b"GMTI";
const VERSION: u8 = 1;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A bounds-checked reader over the encoded index.
struct Cursor<'a> {
    buf: &'a [u8],
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8> {
        let (&b, rest) = self
            .buf
            .split_first()
            .ok_or_else(|| ShardError::malformed("tar index: truncated"))?;
        self.buf = rest;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                return Err(ShardError::malformed("tar index: varint overflow"));
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ShardError::malformed("tar index: varint too long"))
    }

    fn string(&mut self, max: usize) -> Result<String> {
        let len = self.varint()?;
        if len > max as u64 || len > self.buf.len() as u64 {
            return Err(ShardError::malformed("tar index: bad string length"));
        }
        let (s, rest) = self.buf.split_at(len as usize);
        self.buf = rest;
        String::from_utf8(s.to_vec())
            .map_err(|_| ShardError::malformed("tar index: name is not UTF-8"))
    }
}

/// Reads one member through its index entry: one seek, then `entry.size` bytes. A source
/// that ends early (the shard changed under its index) is [`ShardError::Malformed`].
pub fn read_member_at<R: Read + Seek>(mut src: R, entry: &IndexEntry) -> Result<MemberAt<R>> {
    src.seek(SeekFrom::Start(entry.data_offset))?;
    Ok(MemberAt {
        inner: src.take(entry.size),
        left: entry.size,
    })
}

/// The data of one indexed member; see [`read_member_at`].
pub struct MemberAt<R> {
    inner: io::Take<R>,
    left: u64,
}

impl<R: Read> Read for MemberAt<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(ShardError::malformed("shard is shorter than its index says").into_io());
        }
        self.left -= n as u64;
        Ok(n)
    }
}
