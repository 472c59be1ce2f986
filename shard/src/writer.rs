//! Writing shards: members streamed from readers of known size into any format, with
//! deterministic bytes (the same members and mtime give the same archive).

use std::io::{self, Read, Write};

use flate2::Compression;
use flate2::write::GzEncoder;
use lz4_flex::frame::{BlockSize, FrameEncoder, FrameInfo};
use zip::write::{SimpleFileOptions, StreamWriter};
use zip::{CompressionMethod, ZIP64_BYTES_THR, ZipWriter};

use crate::error::{Result, ShardError};
use crate::format::Format;
use crate::limits::{NameSet, validate_member_name};
use crate::tarball::{BLOCK, USTAR_MAX_NUMBER, padding, pax_record, ustar_header};
use crate::zipfile::unix_to_dos;

/// Permission bits of every written member: ownership and modes of the source are not
/// carried into shards (uid/gid are 0, no user or group names).
const MODE: u32 = 0o644;

/// Writes tar members: a ustar header, preceded by a pax header when the name is longer
/// than 100 bytes or not ASCII (as Python does) or a number does not fit.
struct TarWriter<W> {
    out: W,
}

impl<W: Write> TarWriter<W> {
    fn append(&mut self, name: &str, size: u64, mtime: u64, data: &mut dyn Read) -> Result<()> {
        let name_fits = name.len() <= 100 && name.is_ascii();
        let mut records = Vec::new();
        if !name_fits {
            records.extend(pax_record("path", name.as_bytes()));
        }
        if size > USTAR_MAX_NUMBER {
            records.extend(pax_record("size", size.to_string().as_bytes()));
        }
        if mtime > USTAR_MAX_NUMBER {
            records.extend(pax_record("mtime", mtime.to_string().as_bytes()));
        }
        if !records.is_empty() {
            let len = records.len() as u64;
            self.out
                .write_all(&ustar_header(b"././@PaxHeader", len, MODE, mtime, b'x'))?;
            self.out.write_all(&records)?;
            self.pad(len)?;
        }
        let short = if name_fits {
            name.as_bytes().to_vec()
        } else {
            fallback_name(name)
        };
        let header_size = if size > USTAR_MAX_NUMBER { 0 } else { size };
        self.out
            .write_all(&ustar_header(&short, header_size, MODE, mtime, b'0'))?;
        copy_exact(name, size, data, &mut self.out)?;
        self.pad(size)
    }

    fn pad(&mut self, size: u64) -> Result<()> {
        let zeros = [0u8; BLOCK as usize];
        self.out.write_all(&zeros[..padding(size) as usize])?;
        Ok(())
    }

    /// Two zero blocks end the archive (no padding to a 10 KiB record: readers do not
    /// need it, and appends rewrite from the first zero block).
    fn finish(mut self) -> Result<W> {
        self.out.write_all(&[0u8; 2 * BLOCK as usize])?;
        Ok(self.out)
    }
}

/// The ustar name field for a member whose real name is in a pax header: what a reader
/// without pax support would see. ASCII-only, at most 100 bytes, and never an unsafe path
/// (truncation could otherwise cut `x/..y` to `x/..`).
fn fallback_name(name: &str) -> Vec<u8> {
    let mut short: Vec<u8> = name
        .bytes()
        .map(|b| if b.is_ascii() { b } else { b'_' })
        .take(100)
        .collect();
    while short.last() == Some(&b'/') {
        short.pop();
    }
    let safe = std::str::from_utf8(&short).is_ok_and(|s| validate_member_name(s).is_ok());
    if safe {
        short
    } else {
        b"././@LongName".to_vec()
    }
}

/// Copies exactly `size` bytes of a member's data; a short source is the caller's error.
fn copy_exact(name: &str, size: u64, data: &mut dyn Read, out: &mut dyn Write) -> Result<()> {
    let copied = io::copy(&mut data.take(size), out)?;
    if copied < size {
        return Err(ShardError::Invalid(format!(
            "data for {name:?} ended after {copied} of {size} bytes"
        )));
    }
    Ok(())
}

enum Sink<W: Write> {
    Tar(TarWriter<W>),
    Tgz(TarWriter<GzEncoder<W>>),
    TarLz4(TarWriter<FrameEncoder<W>>),
    Zip(Box<ZipWriter<StreamWriter<W>>>),
}

/// Writes a shard of any [`Format`] to a plain `Write` (a file, a socket, an HTTP body),
/// one member at a time, streaming each member's data from a reader.
///
/// Output is deterministic: every member gets the caller's `mtime`, mode 0644, uid/gid 0,
/// no user/group names; gzip headers carry no time or name; zip entries are deflated at
/// the default level. Tar members are ustar, with a pax header for long or non-ASCII names
/// and sizes of 8 GiB or more. Zip is written as a stream (the `zip` crate's
/// `new_stream`): sizes and CRCs follow each entry in a data descriptor, so no seeking is
/// needed; entries of 4 GiB or more use zip64. LZ4 is the frame format with 256 KiB blocks
/// and a content checksum (AIStore's default block size; `lz4 -d` reads it).
///
/// If `append` fails, the output is unusable: discard it.
pub struct ShardWriter<W: Write> {
    format: Format,
    sink: Sink<W>,
    mtime: u64,
    names: NameSet,
    /// Repeated names are written rather than refused (tar family only).
    allow_duplicates: bool,
}

impl<W: Write> ShardWriter<W> {
    /// Starts a shard; `mtime` (Unix seconds) is stamped on every member.
    pub fn new(format: Format, out: W, mtime: u64) -> Self {
        let sink = match format {
            Format::Tar => Sink::Tar(TarWriter { out }),
            Format::Tgz => Sink::Tgz(TarWriter {
                out: GzEncoder::new(out, Compression::default()),
            }),
            Format::TarLz4 => {
                let info = FrameInfo::new()
                    .block_size(BlockSize::Max256KB)
                    .content_checksum(true);
                Sink::TarLz4(TarWriter {
                    out: FrameEncoder::with_frame_info(info, out),
                })
            }
            Format::Zip => Sink::Zip(Box::new(ZipWriter::new_stream(out))),
        };
        ShardWriter {
            format,
            sink,
            mtime,
            names: NameSet::default(),
            allow_duplicates: false,
        }
    }

    /// The format being written.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Writes a name that was already written instead of refusing it: for streams such as
    /// get-batch output, where one item may be asked for twice. Tar family only (a tar may
    /// repeat names; readers keep the last); zip still refuses duplicates.
    pub fn allow_duplicate_names(mut self) -> Self {
        self.allow_duplicates = self.format.is_tar();
        self
    }

    /// Adds a file member with `size` bytes read from `data` (exactly `size`: fewer is
    /// [`ShardError::Invalid`], more are left unread). Names must pass
    /// [`crate::validate_member_name`], must not end in `/` and must not repeat.
    pub fn append(&mut self, name: &str, size: u64, data: &mut dyn Read) -> Result<()> {
        validate_member_name(name).map_err(|e| ShardError::Invalid(e.to_string()))?;
        if name.ends_with('/') {
            return Err(ShardError::Invalid(format!(
                "file member {name:?} ends with '/'"
            )));
        }
        if !self.names.insert(name) && !self.allow_duplicates {
            return Err(ShardError::Invalid(format!(
                "duplicate member name {name:?}"
            )));
        }
        let mtime = self.mtime;
        match &mut self.sink {
            Sink::Tar(t) => t.append(name, size, mtime, data),
            Sink::Tgz(t) => t.append(name, size, mtime, data),
            Sink::TarLz4(t) => t.append(name, size, mtime, data),
            Sink::Zip(z) => {
                let options = SimpleFileOptions::default()
                    .compression_method(CompressionMethod::Deflated)
                    .last_modified_time(unix_to_dos(mtime))
                    .unix_permissions(MODE)
                    .large_file(size >= ZIP64_BYTES_THR);
                z.start_file(name, options).map_err(write_error)?;
                copy_exact(name, size, data, z.as_mut())
            }
        }
    }

    /// Adds a file member from memory.
    pub fn append_bytes(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let mut data = bytes;
        self.append(name, bytes.len() as u64, &mut data)
    }

    /// Ends the archive (tar trailer, compressor end, zip central directory) and returns
    /// the output.
    pub fn finish(self) -> Result<W> {
        match self.sink {
            Sink::Tar(t) => t.finish(),
            Sink::Tgz(t) => Ok(t.finish()?.finish()?),
            Sink::TarLz4(t) => t
                .finish()?
                .finish()
                .map_err(|e| ShardError::Io(io::Error::other(e))),
            Sink::Zip(z) => Ok(z.finish().map_err(write_error)?.into_inner()),
        }
    }
}

/// Errors from the zip writer are about the output (or a bug), not about an archive.
fn write_error(e: zip::result::ZipError) -> ShardError {
    match e {
        zip::result::ZipError::Io(e) => ShardError::from(e),
        other => ShardError::Io(io::Error::other(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_names_are_safe() {
        assert_eq!(fallback_name("naïve.txt"), b"na__ve.txt");
        let long = format!("x/{}", ".".repeat(2) + &"y".repeat(200));
        let cut = fallback_name(&long);
        assert_eq!(cut.len(), 100);
        let trap = format!("{}/..y", "d".repeat(97));
        assert_eq!(fallback_name(&trap), b"././@LongName");
    }

    #[test]
    fn refuses_bad_names_and_short_data() {
        let mut w = ShardWriter::new(Format::Tar, Vec::new(), 0);
        for bad in ["", "../x", "/abs", "dir/"] {
            assert!(
                matches!(w.append_bytes(bad, b"x"), Err(ShardError::Invalid(_))),
                "{bad:?}"
            );
        }
        w.append_bytes("a", b"x").unwrap();
        assert!(matches!(
            w.append_bytes("a", b"y"),
            Err(ShardError::Invalid(_))
        ));
        let mut short: &[u8] = b"abc";
        assert!(matches!(
            w.append("b", 10, &mut short),
            Err(ShardError::Invalid(_))
        ));
    }
}
