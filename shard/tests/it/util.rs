//! Helpers shared by the integration tests: archives built in memory, raw tar headers for
//! hostile cases, a counting reader.

use std::io::{self, Cursor, Read, Seek, SeekFrom};

use gristmill_shard::{Format, Limits, Member, ShardError, ShardReader, ShardWriter};

/// A fixed mtime so written archives are comparable.
pub const MTIME: u64 = 1_700_000_000;

/// An archive of `members` in `format`, written by `ShardWriter`.
pub fn build(format: Format, members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = ShardWriter::new(format, Vec::new(), MTIME);
    for (name, data) in members {
        w.append_bytes(name, data).unwrap();
    }
    w.finish().unwrap()
}

/// Every member with its data, read through `ShardReader::open`.
pub fn read_all(
    format: Format,
    bytes: &[u8],
    limits: Limits,
) -> Result<Vec<(Member, Vec<u8>)>, ShardError> {
    let mut r = ShardReader::open(format, Cursor::new(bytes), limits)?;
    let mut out = Vec::new();
    while let Some(mut e) = r.next_entry()? {
        let data = e.read_to_vec()?;
        out.push((e.member().clone(), data));
    }
    Ok(out)
}

/// One ustar header block with any bytes as the name and any type flag, checksummed.
pub fn raw_header(name: &[u8], size: u64, typeflag: u8) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], MTIME);
    h[156] = typeflag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    checksum(&mut h);
    h
}

/// Recomputes a header's checksum after its fields were edited.
pub fn checksum(h: &mut [u8; 512]) {
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    octal(&mut h[148..155], sum);
    h[155] = b' ';
}

/// Zero-padded octal filling all but the last byte (a NUL); base-256 when too big.
pub fn octal(field: &mut [u8], v: u64) {
    let w = field.len() - 1;
    let s = format!("{v:0w$o}");
    if s.len() <= w {
        field[..w].copy_from_slice(s.as_bytes());
        field[w] = 0;
    } else {
        field.fill(0);
        field[0] = 0x80;
        let n = field.len();
        field[n - 8..].copy_from_slice(&v.to_be_bytes());
    }
}

/// A pax record that counts its own length.
pub fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3;
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    let mut r = format!("{len} {key}=").into_bytes();
    r.extend_from_slice(value);
    r.push(b'\n');
    r
}

/// A raw tar: blocks as given (headers and data), each data chunk padded, plus a trailer.
pub struct RawTar(pub Vec<u8>);

impl RawTar {
    pub fn new() -> Self {
        RawTar(Vec::new())
    }
    pub fn header(mut self, h: [u8; 512]) -> Self {
        self.0.extend_from_slice(&h);
        self
    }
    pub fn data(mut self, d: &[u8]) -> Self {
        self.0.extend_from_slice(d);
        let pad = (512 - d.len() % 512) % 512;
        self.0.extend(std::iter::repeat_n(0u8, pad));
        self
    }
    pub fn file(self, name: &str, d: &[u8]) -> Self {
        self.header(raw_header(name.as_bytes(), d.len() as u64, b'0'))
            .data(d)
    }
    pub fn pax(self, records: &[u8]) -> Self {
        self.header(raw_header(b"././@PaxHeader", records.len() as u64, b'x'))
            .data(records)
    }
    pub fn finish(mut self) -> Vec<u8> {
        self.0.extend_from_slice(&[0u8; 1024]);
        self.0
    }
}

/// The same bytes as another format (tgz, tar.lz4) of a raw tar.
pub fn compress(format: Format, tar: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match format {
        Format::Tar => tar.to_vec(),
        Format::Tgz => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(tar).unwrap();
            e.finish().unwrap()
        }
        Format::TarLz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(tar).unwrap();
            e.finish().unwrap()
        }
        Format::Zip => panic!("not a tar"),
    }
}

/// Counts bytes read and seeks made through a reader.
pub struct Counting<R> {
    pub inner: R,
    pub bytes_read: u64,
    pub seeks: u64,
}

impl<R> Counting<R> {
    pub fn new(inner: R) -> Self {
        Counting {
            inner,
            bytes_read: 0,
            seeks: 0,
        }
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes_read += n as u64;
        Ok(n)
    }
}

impl<R: Seek> Seek for Counting<R> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.seeks += 1;
        self.inner.seek(pos)
    }
}

/// A small deterministic generator (xorshift64*), so corpora are reproducible.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
