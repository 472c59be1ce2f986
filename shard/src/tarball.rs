//! Tar, read and written by hand: one header parser for ustar, pax and GNU archives over a
//! streamed source (decompressing, data skipped by reading) or a seekable one (data skipped
//! by seeking, which is what makes the member index cheap).
//!
//! Names follow Python's `tarfile` (3.11) exactly for valid archives, because datasets are
//! built and checked with it: the ustar prefix is joined with `/`, directory names lose their
//! trailing slashes, a GNU long name or a pax `path` replaces the header name, a pax `size`
//! replaces the header size. Where `tarfile` is lenient in ways that let two readers see two
//! different archives, this parser refuses instead (see [`TarParser::next_member`]).

use std::io::{self, Read, Seek, SeekFrom};

use flate2::read::MultiGzDecoder;
use lz4_flex::frame::FrameDecoder;

use crate::error::{Result, ShardError};
use crate::format::Format;
use crate::limits::{Limits, MAX_EXTENSION_SIZE, NameSet, Tally, validate_member_name};
use crate::member::{Member, MemberKind};

/// Tar's unit: headers are one block, data is padded to whole blocks.
pub(crate) const BLOCK: u64 = 512;

/// Bytes of padding after `size` bytes of data.
pub(crate) fn padding(size: u64) -> u64 {
    (BLOCK - size % BLOCK) % BLOCK
}

/// The bytes of a header field up to its first NUL.
fn nts(field: &[u8]) -> &[u8] {
    field
        .iter()
        .position(|b| *b == 0)
        .map_or(field, |n| &field[..n])
}

/// A numeric header field, as Python's `tarfile.nti` reads it: octal text (NUL/space
/// padded, empty = 0) or GNU base-256 (first byte 0x80). Negative base-256 (0xff) and
/// values past u64 are refused.
pub(crate) fn parse_number(field: &[u8]) -> Option<u64> {
    match field.first() {
        Some(0x80) => field[1..].iter().try_fold(0u64, |n, b| {
            n.checked_mul(256)
                .and_then(|n| n.checked_add(u64::from(*b)))
        }),
        Some(0xff) => None,
        _ => {
            let text = std::str::from_utf8(nts(field)).ok()?;
            let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
            if text.is_empty() {
                return Some(0);
            }
            if !text.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                return None;
            }
            u64::from_str_radix(text, 8).ok()
        }
    }
}

/// Whether a 512-byte block is a tar header: its checksum field matches the unsigned or
/// the signed byte sum (both exist in the wild; `tarfile` accepts both).
pub(crate) fn header_checksum_ok(block: &[u8]) -> bool {
    if block.len() != BLOCK as usize || block.iter().all(|b| *b == 0) {
        return false;
    }
    let Some(stored) = parse_number(&block[148..156]) else {
        return false;
    };
    let rest = block[..148].iter().chain(&block[156..]);
    let unsigned: u64 = 256 + rest.clone().map(|b| u64::from(*b)).sum::<u64>();
    let signed: i64 = 256 + rest.map(|b| i64::from(*b as i8)).sum::<i64>();
    stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed)
}

/// A source of archive bytes that can skip forward.
pub(crate) trait Source: Read {
    /// Skips `n` bytes; an archive that ends first is truncated.
    fn skip(&mut self, n: u64) -> Result<()>;
}

/// A seekable source: skipping member data is one seek, nothing is read.
pub(crate) struct Seekable<R> {
    inner: R,
    pos: u64,
    len: u64,
}

impl<R: Read + Seek> Seekable<R> {
    /// Starts at the reader's current position (usually 0).
    pub(crate) fn new(mut inner: R) -> Result<Self> {
        let pos = inner.stream_position()?;
        let len = inner.seek(SeekFrom::End(0))?;
        inner.seek(SeekFrom::Start(pos))?;
        Ok(Seekable { inner, pos, len })
    }

    /// The absolute position the next read starts at.
    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// The source's total length, measured at open.
    pub(crate) fn source_len(&self) -> u64 {
        self.len
    }
}

impl<R: Read> Read for Seekable<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read + Seek> Source for Seekable<R> {
    fn skip(&mut self, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let target = self
            .pos
            .checked_add(n)
            .filter(|t| *t <= self.len)
            .ok_or_else(|| ShardError::malformed("truncated archive"))?;
        self.inner.seek(SeekFrom::Start(target))?;
        self.pos = target;
        Ok(())
    }
}

/// Counts the compressed bytes a decoder pulls, for the ratio check, and marks the errors
/// of the source itself so they are not mistaken for corrupt compressed data.
struct Counted<R> {
    inner: R,
    count: u64,
}

/// An error of the source under a decoder (a disk), passed through the decoder.
#[derive(Debug)]
struct SourceError(io::Error);

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SourceError {}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf).map_err(|e| match e.kind() {
            io::ErrorKind::Interrupted => e,
            kind => io::Error::new(kind, SourceError(e)),
        })?;
        self.count += n as u64;
        Ok(n)
    }
}

/// Sorts a decoder's error: the source's own errors keep their meaning (a disk error is
/// I/O), anything the decoder itself complains about is a corrupt stream.
fn decoder_error(format: Format, e: io::Error) -> ShardError {
    if e.get_ref().is_some_and(|inner| inner.is::<SourceError>()) {
        let kind = e.kind();
        return match e.into_inner().map(|inner| inner.downcast::<SourceError>()) {
            Some(Ok(source)) => ShardError::from_archive_io(source.0),
            _ => ShardError::from_archive_io(io::Error::from(kind)),
        };
    }
    match e.kind() {
        io::ErrorKind::UnexpectedEof => ShardError::malformed(format!("truncated {format} stream")),
        _ => ShardError::Malformed(format!("corrupt {format} stream: {e}")),
    }
}

enum Decoder<R: Read> {
    /// Uncompressed: reads go straight to the source.
    Plain(R),
    Gz(Box<MultiGzDecoder<Counted<R>>>),
    Lz4(Box<FrameDecoder<Counted<R>>>),
}

/// A streamed source: decompresses (gzip, including concatenated members as `gzip -d` and
/// Python do; LZ4 frames) and stops the stream once it expands past the limits.
pub(crate) struct Streamed<R: Read> {
    decoder: Decoder<R>,
    out: u64,
    limits: Limits,
}

impl<R: Read> Streamed<R> {
    pub(crate) fn new(format: Format, inner: R, limits: Limits) -> Result<Self> {
        let counted = Counted { inner, count: 0 };
        let decoder = match format {
            Format::Tar => Decoder::Plain(counted.inner),
            Format::Tgz => Decoder::Gz(Box::new(MultiGzDecoder::new(counted))),
            Format::TarLz4 => Decoder::Lz4(Box::new(FrameDecoder::new(counted))),
            Format::Zip => {
                return Err(ShardError::Unsupported(
                    "zip needs a seekable source (its directory is at the end)".into(),
                ));
            }
        };
        Ok(Streamed {
            decoder,
            out: 0,
            limits,
        })
    }

    fn consumed(&self) -> Option<u64> {
        match &self.decoder {
            Decoder::Plain(_) => None,
            Decoder::Gz(d) => Some(d.get_ref().count),
            Decoder::Lz4(d) => Some(d.get_ref().count),
        }
    }
}

impl<R: Read> Read for Streamed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (n, format) = match &mut self.decoder {
            Decoder::Plain(r) => (r.read(buf), Format::Tar),
            Decoder::Gz(d) => (d.read(buf), Format::Tgz),
            Decoder::Lz4(d) => (d.read(buf), Format::TarLz4),
        };
        let n = n.map_err(|e| match (e.kind(), format) {
            (io::ErrorKind::Interrupted, _) => e,
            (_, Format::Tar) => ShardError::from_archive_io(e).into_io(),
            _ => decoder_error(format, e).into_io(),
        })?;
        self.out += n as u64;
        if let Some(consumed) = self.consumed() {
            self.limits
                .check_expansion(self.out, consumed)
                .map_err(ShardError::into_io)?;
        }
        Ok(n)
    }
}

impl<R: Read> Source for Streamed<R> {
    fn skip(&mut self, n: u64) -> Result<()> {
        let copied = io::copy(&mut self.by_ref().take(n), &mut io::sink())
            .map_err(ShardError::from_archive_io)?;
        if copied < n {
            return Err(ShardError::malformed("truncated archive"));
        }
        Ok(())
    }
}

/// A member header as parsed, with where it sits in the archive.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub(crate) member: Member,
    /// Offset of the member's first header block (its pax or long-name header, if any).
    pub(crate) header_offset: u64,
    /// Offset of the member's data.
    pub(crate) data_offset: u64,
}

/// What extension headers said about the member that follows them.
#[derive(Default)]
struct Pending {
    pax: Option<Pax>,
    long_name: Option<Vec<u8>>,
    long_link: bool,
}

impl Pending {
    fn any(&self) -> bool {
        self.pax.is_some() || self.long_name.is_some() || self.long_link
    }
}

/// The pax records we act on.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    size: Option<u64>,
    mtime: Option<u64>,
    linkpath: bool,
    sparse: bool,
}

impl Pax {
    /// Parses `"<len> <key>=<value>\n"` records strictly: a record whose length does not
    /// add up, or a repeated `path`/`size`, is malformed (readers would disagree on it).
    fn parse(data: &[u8]) -> Result<Pax> {
        let bad = |why: &str| ShardError::malformed(format!("bad pax header: {why}"));
        let mut pax = Pax::default();
        let mut pos = 0usize;
        while pos < data.len() {
            let rest = &data[pos..];
            if rest.iter().all(|b| *b == 0) {
                // NUL padding inside the declared size: some writers leave it.
                break;
            }
            let space = rest
                .iter()
                .take(21)
                .position(|b| *b == b' ')
                .ok_or_else(|| bad("no record length"))?;
            let len: usize = std::str::from_utf8(&rest[..space])
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("record length is not a number"))?;
            if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
                return Err(bad("record length does not match"));
            }
            let record = &rest[space + 1..len - 1];
            let eq = record
                .iter()
                .position(|b| *b == b'=')
                .ok_or_else(|| bad("record without '='"))?;
            let (key, value) = (&record[..eq], &record[eq + 1..]);
            match key {
                b"path" | b"size" if seen(key, &pax) => {
                    return Err(bad("repeated path or size"));
                }
                b"path" => pax.path = Some(value.to_vec()),
                b"size" => {
                    let size = std::str::from_utf8(value)
                        .ok()
                        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| bad("size is not a number"))?;
                    pax.size = Some(size);
                }
                b"mtime" => pax.mtime = Some(parse_pax_time(value)),
                b"linkpath" => pax.linkpath = true,
                k if k.starts_with(b"GNU.sparse.") => pax.sparse = true,
                _ => {}
            }
            pos += len;
        }
        Ok(pax)
    }
}

/// Whether a `path` or `size` record was already given.
fn seen(key: &[u8], pax: &Pax) -> bool {
    match key {
        b"path" => pax.path.is_some(),
        _ => pax.size.is_some(),
    }
}

/// A pax time (`1700000000.25`) in whole seconds; like Python, nonsense reads as 0.
fn parse_pax_time(value: &[u8]) -> u64 {
    let text = std::str::from_utf8(value).unwrap_or("");
    let whole = text.split('.').next().unwrap_or("");
    whole.parse::<u64>().unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Headers,
    Done,
    Failed,
}

/// Walks tar headers one member at a time; the current member's data is read through
/// [`TarParser::read_data`] and whatever is left unread is skipped (seeked over when the
/// source can) on the next call.
pub(crate) struct TarParser<S> {
    src: S,
    limits: Limits,
    tally: Tally,
    names: NameSet,
    /// Absolute position of the archive's first byte in the source.
    base: u64,
    /// Bytes of the archive consumed so far.
    offset: u64,
    /// Unread data bytes of the current member, then its padding.
    remaining: u64,
    pad: u64,
    state: State,
    /// Where the end-of-archive marker starts (or the source ended), once reached.
    end: Option<u64>,
    /// A global pax `mtime` applies to every later member, as in `tarfile`.
    global_mtime: Option<u64>,
}

impl<S: Source> TarParser<S> {
    pub(crate) fn new(src: S, base: u64, limits: Limits) -> Self {
        TarParser {
            src,
            limits,
            tally: Tally::default(),
            names: NameSet::default(),
            base,
            offset: 0,
            remaining: 0,
            pad: 0,
            state: State::Headers,
            end: None,
            global_mtime: None,
        }
    }

    /// The source being parsed.
    pub(crate) fn source(&self) -> &S {
        &self.src
    }

    /// Absolute offset of the end-of-archive marker, known once `next_member` returned
    /// `None`: appending to a tar overwrites from here.
    pub(crate) fn end_offset(&self) -> Option<u64> {
        self.end.map(|e| self.base + e)
    }

    /// The next member, or `None` at the end of the archive. Refused (and the parser stops):
    /// bad checksums, truncation, links and devices, unsafe or duplicate names, sparse and
    /// unknown entry types, two extension headers of a kind for one member, both a GNU long
    /// name and a pax path, a pax size that disagrees with a nonzero header size, a directory
    /// with data (`tarfile` would not skip it), names that are not UTF-8.
    pub(crate) fn next_member(&mut self) -> Result<Option<Parsed>> {
        match self.state {
            State::Done => return Ok(None),
            State::Failed => {
                return Err(ShardError::malformed(
                    "archive reading already failed; reopen it",
                ));
            }
            State::Headers => {}
        }
        let result = self.advance();
        match &result {
            Err(_) => self.state = State::Failed,
            Ok(None) => self.state = State::Done,
            Ok(Some(_)) => {}
        }
        result
    }

    /// Reads the current member's data; `Ok(0)` at its end.
    pub(crate) fn read_data(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buf.is_empty() || self.state != State::Headers {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        match self.src.read(&mut buf[..want]) {
            Ok(0) => {
                self.state = State::Failed;
                Err(ShardError::malformed("truncated member data").into_io())
            }
            Ok(n) => {
                self.remaining -= n as u64;
                self.offset += n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                self.state = State::Failed;
                Err(ShardError::from_archive_io(e).into_io())
            }
        }
    }

    fn advance(&mut self) -> Result<Option<Parsed>> {
        let skip = self.remaining.saturating_add(self.pad);
        self.src.skip(skip)?;
        self.offset = self.offset.saturating_add(skip);
        (self.remaining, self.pad) = (0, 0);

        let header_offset = self.offset;
        let mut pending = Pending::default();
        loop {
            let block_offset = self.offset;
            let Some(block) = self.read_block()? else {
                if pending.any() {
                    return Err(ShardError::malformed("extension header at end of archive"));
                }
                // tarfile takes a clean EOF for the end; a writer always ends with zero
                // blocks, so without one the archive was cut at a member boundary.
                return Err(ShardError::malformed(if block_offset == 0 {
                    "empty archive"
                } else {
                    "truncated archive: no end-of-archive marker"
                }));
            };
            if block.iter().all(|b| *b == 0) {
                if pending.any() {
                    return Err(ShardError::malformed("extension header without a member"));
                }
                self.end = Some(block_offset);
                return Ok(None);
            }
            if !header_checksum_ok(&block) {
                return Err(ShardError::malformed(format!(
                    "bad tar header checksum at offset {block_offset}"
                )));
            }
            let size = parse_number(&block[124..136])
                .ok_or_else(|| ShardError::malformed("bad size field in tar header"))?;
            match block[156] {
                b'x' | b'X' => {
                    let data = self.read_extension(size)?;
                    if pending.pax.replace(Pax::parse(&data)?).is_some() {
                        return Err(ShardError::malformed("two pax headers for one member"));
                    }
                }
                b'g' => {
                    let global = Pax::parse(&self.read_extension(size)?)?;
                    if global.path.is_some()
                        || global.size.is_some()
                        || global.linkpath
                        || global.sparse
                    {
                        return Err(ShardError::Unsupported(
                            "global pax header that sets a path, size or sparse map".into(),
                        ));
                    }
                    if global.mtime.is_some() {
                        self.global_mtime = global.mtime;
                    }
                }
                b'L' => {
                    let data = self.read_extension(size)?;
                    if pending.long_name.replace(nts(&data).to_vec()).is_some() {
                        return Err(ShardError::malformed("two GNU long names for one member"));
                    }
                }
                b'K' => {
                    self.read_extension(size)?;
                    if std::mem::replace(&mut pending.long_link, true) {
                        return Err(ShardError::malformed("two GNU long links for one member"));
                    }
                }
                _ => return self.member(&block, size, pending, header_offset).map(Some),
            }
        }
    }

    /// One header block; `None` if the source ends exactly at a block boundary.
    fn read_block(&mut self) -> Result<Option<[u8; BLOCK as usize]>> {
        let mut block = [0u8; BLOCK as usize];
        let mut filled = 0;
        while filled < block.len() {
            match self.src.read(&mut block[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ShardError::from_archive_io(e)),
            }
        }
        self.offset += filled as u64;
        match filled {
            0 => Ok(None),
            n if n == block.len() => Ok(Some(block)),
            _ => Err(ShardError::malformed("truncated tar header")),
        }
    }

    /// The data of an extension header (pax records, a long name), bounded in size.
    fn read_extension(&mut self, size: u64) -> Result<Vec<u8>> {
        if size > MAX_EXTENSION_SIZE {
            return Err(ShardError::limit(format!(
                "tar extension header of {size} bytes (limit {MAX_EXTENSION_SIZE})"
            )));
        }
        let mut data = vec![0u8; size as usize];
        self.src
            .read_exact(&mut data)
            .map_err(ShardError::from_archive_io)?;
        let pad = padding(size);
        self.src.skip(pad)?;
        self.offset += size + pad;
        Ok(data)
    }

    fn member(
        &mut self,
        block: &[u8; BLOCK as usize],
        header_size: u64,
        pending: Pending,
        header_offset: u64,
    ) -> Result<Parsed> {
        let typeflag = block[156];
        let short = nts(&block[0..100]);
        let prefix = nts(&block[345..500]);
        let is_dir = typeflag == b'5' || (typeflag == 0 && short.ends_with(b"/"));

        // The name, built in tarfile's order.
        let mut name: Vec<u8> = short.to_vec();
        if !prefix.is_empty() {
            name = [prefix, b"/", &name].concat();
        }
        if is_dir {
            trim_slashes(&mut name);
        }
        let pax = pending.pax.unwrap_or_default();
        if let Some(long) = pending.long_name {
            if pax.path.is_some() {
                return Err(ShardError::malformed(
                    "member has both a GNU long name and a pax path",
                ));
            }
            name = long;
            if is_dir && name.ends_with(b"/") {
                name.pop();
            }
        }
        if let Some(path) = pax.path {
            name = path;
            trim_slashes(&mut name);
        }
        let name = String::from_utf8(name).map_err(|e| {
            ShardError::malformed(format!(
                "member name {:?} is not UTF-8",
                String::from_utf8_lossy(e.as_bytes())
            ))
        })?;

        let kind = match typeflag {
            b'0' | b'7' | 0 if !is_dir => MemberKind::File,
            b'5' | 0 => MemberKind::Dir,
            b'1' => return Err(ShardError::unsafe_member(&name, "hard link")),
            b'2' => return Err(ShardError::unsafe_member(&name, "symbolic link")),
            b'3' | b'4' => return Err(ShardError::unsafe_member(&name, "device file")),
            b'6' => return Err(ShardError::unsafe_member(&name, "FIFO")),
            b'S' => return Err(ShardError::Unsupported("GNU sparse file".into())),
            t => {
                return Err(ShardError::Unsupported(format!(
                    "tar entry type {:?} of {name:?}",
                    char::from(t)
                )));
            }
        };
        if pax.sparse {
            return Err(ShardError::Unsupported("GNU sparse file (pax)".into()));
        }
        validate_member_name(&name)?;
        if kind == MemberKind::File && name.ends_with('/') {
            return Err(ShardError::malformed(format!(
                "file {name:?} is named like a directory"
            )));
        }

        let mut size = header_size;
        if let Some(pax_size) = pax.size {
            // pax overrides the header (tar >= 0.4.45, tarfile); a nonzero header size that
            // says otherwise is how archives smuggle members past one reader or another.
            if header_size != 0 && header_size != pax_size {
                return Err(ShardError::malformed(format!(
                    "pax size {pax_size} disagrees with header size {header_size} for {name:?}"
                )));
            }
            size = pax_size;
        }
        if kind == MemberKind::Dir && size != 0 {
            return Err(ShardError::malformed(format!(
                "directory {name:?} carries {size} bytes of data"
            )));
        }
        let mode = parse_number(&block[100..108])
            .ok_or_else(|| ShardError::malformed("bad mode field in tar header"))?;
        let mtime = match pax.mtime.or(self.global_mtime) {
            Some(t) => t,
            None => parse_number(&block[136..148])
                .ok_or_else(|| ShardError::malformed("bad mtime field in tar header"))?,
        };

        self.limits.admit(&mut self.tally, &name, size)?;
        if !self.names.insert(&name) {
            return Err(ShardError::unsafe_member(&name, "duplicate member name"));
        }
        self.remaining = size;
        self.pad = padding(size);
        Ok(Parsed {
            member: Member {
                name,
                size,
                mode: (mode & 0o7777) as u32,
                mtime,
                kind,
            },
            header_offset: self.base + header_offset,
            data_offset: self.base + self.offset,
        })
    }
}

fn trim_slashes(name: &mut Vec<u8>) {
    while name.last() == Some(&b'/') {
        name.pop();
    }
}

/// Writes `value` as zero-padded octal filling all but the last byte of `field` (a NUL);
/// false if it does not fit.
fn put_octal(field: &mut [u8], value: u64) -> bool {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    if text.len() > width {
        return false;
    }
    field[..width].copy_from_slice(text.as_bytes());
    field[width] = 0;
    true
}

/// Largest size or mtime a ustar header holds (11 octal digits).
pub(crate) const USTAR_MAX_NUMBER: u64 = 0o77_777_777_777;

/// Encodes a ustar header block. `name` must fit (100 bytes) and the numbers too; the
/// writer moves anything bigger into a pax header first.
pub(crate) fn ustar_header(
    name: &[u8],
    size: u64,
    mode: u32,
    mtime: u64,
    typeflag: u8,
) -> [u8; BLOCK as usize] {
    let mut h = [0u8; BLOCK as usize];
    let n = name.len().min(100);
    h[..n].copy_from_slice(&name[..n]);
    put_octal(&mut h[100..108], u64::from(mode));
    put_octal(&mut h[108..116], 0);
    put_octal(&mut h[116..124], 0);
    put_octal(&mut h[124..136], size.min(USTAR_MAX_NUMBER));
    put_octal(&mut h[136..148], mtime.min(USTAR_MAX_NUMBER));
    h[156] = typeflag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    put_octal(&mut h[329..337], 0);
    put_octal(&mut h[337..345], 0);
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    // The customary form: six digits, NUL, space.
    put_octal(&mut h[148..155], sum);
    h[155] = b' ';
    h
}

/// One pax record, `"<len> <key>=<value>\n"`, where `<len>` counts itself.
pub(crate) fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3;
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    let mut rec = format!("{len} {key}=").into_bytes();
    rec.extend_from_slice(value);
    rec.push(b'\n');
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_like_tarfile() {
        assert_eq!(parse_number(b"0000644\0"), Some(0o644));
        assert_eq!(parse_number(b"  644 \0"), Some(0o644));
        assert_eq!(parse_number(b"\0\0\0\0"), Some(0));
        assert_eq!(parse_number(b"        "), Some(0));
        assert_eq!(parse_number(b"0000009\0"), None);
        assert_eq!(parse_number(b"-1\0"), None);
        let mut b256 = [0u8; 12];
        b256[0] = 0x80;
        b256[11] = 5;
        b256[10] = 1;
        assert_eq!(parse_number(&b256), Some(261));
        assert_eq!(parse_number(&[0xff; 12]), None);
        let mut huge = [0xffu8; 12];
        huge[0] = 0x80;
        assert_eq!(parse_number(&huge), None);
    }

    #[test]
    fn headers_round_trip() {
        let h = ustar_header(b"a/b.txt", 1234, 0o644, 1_700_000_000, b'0');
        assert!(header_checksum_ok(&h));
        assert_eq!(parse_number(&h[124..136]), Some(1234));
        assert_eq!(parse_number(&h[136..148]), Some(1_700_000_000));
        assert_eq!(nts(&h[..100]), b"a/b.txt");
        let mut bad = h;
        bad[0] ^= 1;
        assert!(!header_checksum_ok(&bad));
        // v7: no magic, still a valid checksum.
        let mut v7 = h;
        v7[257..265].fill(0);
        v7[148..156].fill(b' ');
        let sum: u64 = v7.iter().map(|b| u64::from(*b)).sum();
        put_octal(&mut v7[148..155], sum);
        assert!(header_checksum_ok(&v7));
        assert_eq!(Format::from_magic(&v7), Some(Format::Tar));
    }

    #[test]
    fn pax_records_count_their_own_length() {
        for n in [
            0usize, 1, 5, 85, 86, 87, 95, 96, 97, 990, 995, 996, 1000, 5000,
        ] {
            let v = vec![b'x'; n];
            let r = pax_record("path", &v);
            let len: usize = std::str::from_utf8(&r[..r.iter().position(|b| *b == b' ').unwrap()])
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(len, r.len(), "{n}");
            let p = Pax::parse(&r).unwrap();
            assert_eq!(p.path.unwrap(), v);
        }
    }

    #[test]
    fn pax_parsing_is_strict() {
        let mut two = pax_record("path", b"a");
        two.extend(pax_record("path", b"b"));
        assert!(Pax::parse(&two).is_err());
        assert!(Pax::parse(b"5 a=b").is_err());
        assert!(Pax::parse(b"99 path=x\n").is_err());
        assert!(Pax::parse(b"x path=x\n").is_err());
        assert!(Pax::parse(&pax_record("size", b"12a")).is_err());
        assert_eq!(
            Pax::parse(&pax_record("size", b"12")).unwrap().size,
            Some(12)
        );
        assert_eq!(
            Pax::parse(&pax_record("mtime", b"1700000000.5"))
                .unwrap()
                .mtime,
            Some(1_700_000_000)
        );
        assert!(
            Pax::parse(&pax_record("GNU.sparse.map", b"0,1"))
                .unwrap()
                .sparse
        );
    }
}
