//! Zip, through the `zip` crate: the central directory is read once, checked (duplicates,
//! overlapping entries, local headers that disagree with it), and each entry is described
//! and bounded before any data is read.

use std::io::{self, Read, Seek};

use zip::result::ZipError;
use zip::{CompressionMethod, DateTime, ZipArchive};

use crate::error::{Result, ShardError};
use crate::limits::{Limits, RATIO_FLOOR, Tally, validate_member_name};
use crate::member::{Member, MemberKind};

/// An open zip archive with its members described and checked.
pub(crate) struct ZipShard<R> {
    archive: ZipArchive<R>,
    members: Vec<Member>,
}

/// Maps the `zip` crate's errors onto ours.
pub(crate) fn zip_error(e: ZipError) -> ShardError {
    match e {
        ZipError::Io(e) => ShardError::from_archive_io(e),
        ZipError::InvalidArchive(msg) => ShardError::Malformed(msg.into_owned()),
        ZipError::UnsupportedArchive(msg) => ShardError::Unsupported(msg.to_owned()),
        ZipError::FileNotFound => ShardError::NotFound("zip member".into()),
        ZipError::CompressionMethodNotSupported(m) => {
            ShardError::Unsupported(format!("zip compression method {m}"))
        }
        other => ShardError::Malformed(other.to_string()),
    }
}

impl<R: Read + Seek> ZipShard<R> {
    /// Reads and checks the central directory. Costs one small read per entry (its local
    /// header, to find overlaps and disagreements); no member data is read.
    pub(crate) fn open(src: R, limits: Limits) -> Result<Self> {
        let mut archive = ZipArchive::new(src).map_err(zip_error)?;
        if archive.len() as u64 > limits.max_members {
            return Err(ShardError::limit(format!(
                "more than {} members",
                limits.max_members
            )));
        }
        if archive.has_duplicate_names() {
            return Err(ShardError::unsafe_member(
                "(central directory)",
                "duplicate member name",
            ));
        }
        if archive.has_overlapping_entries().map_err(zip_error)? {
            return Err(ShardError::unsafe_member(
                "(central directory)",
                "overlapping zip entries",
            ));
        }
        archive.validate_header_consistency().map_err(zip_error)?;

        let mut tally = Tally::default();
        let mut members = Vec::with_capacity(archive.len());
        for i in 0..archive.len() {
            let entry = archive.by_index_data(i).map_err(zip_error)?;
            let name = entry.name().map_err(zip_error)?.into_owned();
            let kind = if name.ends_with('/') {
                MemberKind::Dir
            } else {
                MemberKind::File
            };
            if entry.encrypted() {
                return Err(ShardError::Unsupported(format!(
                    "encrypted zip member {name:?}"
                )));
            }
            let unix_mode = entry.unix_mode();
            if let Some(mode) = unix_mode {
                match mode & 0o170_000 {
                    0o120_000 => return Err(ShardError::unsafe_member(&name, "symbolic link")),
                    0o020_000 | 0o060_000 => {
                        return Err(ShardError::unsafe_member(&name, "device file"));
                    }
                    0o010_000 => return Err(ShardError::unsafe_member(&name, "FIFO")),
                    0o140_000 => return Err(ShardError::unsafe_member(&name, "socket")),
                    _ => {}
                }
            }
            validate_member_name(&name)?;
            let size = entry.size();
            match kind {
                MemberKind::Dir if size != 0 => {
                    return Err(ShardError::malformed(format!(
                        "directory {name:?} carries {size} bytes of data"
                    )));
                }
                MemberKind::File => match entry.compression() {
                    CompressionMethod::Stored | CompressionMethod::Deflated => {}
                    other => {
                        return Err(ShardError::Unsupported(format!(
                            "zip compression {other:?} for {name:?}"
                        )));
                    }
                },
                MemberKind::Dir => {}
            }
            // The directory's sizes are checked up front: a bomb is refused before any
            // byte of it is inflated.
            if size > RATIO_FLOOR && size / entry.compressed_size().max(1) > limits.max_ratio {
                return Err(ShardError::limit(format!(
                    "member {name:?} compression ratio over {}:1 (a decompression bomb?)",
                    limits.max_ratio
                )));
            }
            limits.admit(&mut tally, &name, size)?;
            let default_mode = if kind == MemberKind::Dir {
                0o755
            } else {
                0o644
            };
            members.push(Member {
                name,
                size,
                mode: unix_mode
                    .map(|m| m & 0o7777)
                    .filter(|m| *m != 0)
                    .unwrap_or(default_mode),
                mtime: entry.last_modified().map_or(0, dos_to_unix),
                kind,
            });
        }
        Ok(ZipShard { archive, members })
    }

    /// Members in central-directory order (what `zipfile.namelist()` lists).
    pub(crate) fn members(&self) -> &[Member] {
        &self.members
    }

    /// The index of the file member with this exact name.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.archive
            .index_for_name(name)
            .filter(|i| self.members.get(*i).is_some_and(|m| m.name == name))
            .or_else(|| self.members.iter().position(|m| m.name == name))
    }

    /// A reader of member `index`'s data, inflated and CRC-checked.
    pub(crate) fn open_member(&mut self, index: usize) -> Result<Box<dyn Read + '_>> {
        let size = self
            .members
            .get(index)
            .ok_or_else(|| ShardError::NotFound(format!("zip member #{index}")))?
            .size;
        let file = self.archive.by_index(index).map_err(zip_error)?;
        Ok(Box::new(ZipData { file, left: size }))
    }
}

/// Member data; yields exactly what the directory declared, or an error.
struct ZipData<'a, R: Read> {
    file: zip::read::ZipFile<'a, R>,
    left: u64,
}

impl<R: Read> Read for ZipData<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf).map_err(|e| match e.kind() {
            io::ErrorKind::Interrupted => e,
            _ => ShardError::from_archive_io(e).into_io(),
        })?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(
                ShardError::malformed("zip member shorter than its declared size").into_io(),
            );
        }
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            ShardError::malformed("zip member longer than its declared size").into_io()
        })?;
        Ok(n)
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A zip (DOS) timestamp as Unix seconds, taking it as UTC.
fn dos_to_unix(t: DateTime) -> u64 {
    let days = days_from_civil(
        i64::from(t.year()),
        u32::from(t.month()),
        u32::from(t.day()),
    );
    let secs = days * 86_400
        + i64::from(t.hour()) * 3600
        + i64::from(t.minute()) * 60
        + i64::from(t.second());
    u64::try_from(secs).unwrap_or(0)
}

/// Unix seconds as a zip timestamp (UTC), clamped to what DOS time holds (1980–2107).
pub(crate) fn unix_to_dos(secs: u64) -> DateTime {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    if y < 1980 {
        return DateTime::default();
    }
    let (y, m, d, rem) = if y > 2107 {
        (2107, 12, 31, 86_399)
    } else {
        (y, m, d, rem)
    };
    DateTime::from_date_and_time(
        y as u16,
        m as u8,
        d as u8,
        (rem / 3600) as u8,
        (rem % 3600 / 60) as u8,
        (rem % 60) as u8,
    )
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dos_times_round_trip_to_even_seconds() {
        for t in [315_532_800u64, 1_700_000_000, 1_700_000_001, 4_000_000_000] {
            assert_eq!(dos_to_unix(unix_to_dos(t)), t - t % 2, "{t}");
        }
        assert_eq!(unix_to_dos(0), DateTime::default());
        assert_eq!(unix_to_dos(u64::MAX).year(), 2107);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
    }
}
