//! What every fuzz target does with an archive: open it, walk every member, read all data,
//! list it, group it into samples; any outcome but a panic (or an I/O error on in-memory
//! bytes) is fine.

use std::io::{Cursor, Read};

use gristmill_shard::{Format, Limits, ShardError, ShardReader};

/// Small limits keep each run fast; the limit checks themselves are exercised too.
pub fn limits() -> Limits {
    Limits {
        max_members: 10_000,
        max_member_size: 8 << 20,
        max_total_expanded: 32 << 20,
        max_ratio: 500,
    }
}

/// Fails loudly if an in-memory archive produced an I/O error: every failure must be one of
/// the archive kinds the server maps to a 4xx.
fn check(e: ShardError) {
    assert!(
        !matches!(e, ShardError::Io(_)),
        "I/O error from memory: {e}"
    );
}

/// Opens `bytes` as `format` (seekable), walks and reads everything, lists, and samples.
pub fn exercise(format: Format, bytes: &[u8]) {
    match ShardReader::open(format, Cursor::new(bytes), limits()) {
        Ok(mut r) => loop {
            match r.next_entry() {
                Ok(Some(mut e)) => {
                    let mut sink = Vec::new();
                    if let Err(err) = e.read_to_end(&mut sink) {
                        check(ShardError::from(err));
                        break;
                    }
                    assert_eq!(sink.len() as u64, e.member().size);
                }
                Ok(None) => break,
                Err(e) => {
                    check(e);
                    break;
                }
            }
        },
        Err(e) => check(e),
    }
    if let Ok(r) = ShardReader::open(format, Cursor::new(bytes), limits()) {
        if let Err(e) = r.list() {
            check(e);
        }
    }
    if let Ok(r) = ShardReader::open(format, Cursor::new(bytes), limits()) {
        for s in r.into_samples(16 << 20) {
            if let Err(e) = s {
                check(e);
            }
        }
    }
    if format.is_tar() {
        if let Ok(mut r) = ShardReader::stream(format, bytes, limits()) {
            while let Ok(Some(_)) = r.next_entry() {}
        }
    }
}

/// `data` as a tar compressed into `format` (so the tar parser is reached through the
/// decoder), or, if the first byte is odd, the raw bytes as that format (the decoder
/// itself).
pub fn exercise_compressed(format: Format, data: &[u8]) {
    use std::io::Write;
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        exercise(format, rest);
        return;
    }
    let compressed = match format {
        Format::Tgz => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let _ = e.write_all(rest);
            e.finish().unwrap_or_default()
        }
        _ => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            let _ = e.write_all(rest);
            e.finish().unwrap_or_default()
        }
    };
    exercise(format, &compressed);
}
