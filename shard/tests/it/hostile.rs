//! A corpus of hostile archives: each one ends in a clear error of the right kind, nothing
//! panics, and memory stays bounded (checked in a child process).

use std::io::{self, Cursor, Read};
use std::process::Command;

use gristmill_shard::{
    Format, Limits, ShardError, ShardReader, ShardWriter, TarIndex, list_members,
};

use crate::util::{MTIME, RawTar, Rng, build, compress, pax_record, raw_header, read_all};

/// Which error a case must end in.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Malformed,
    Unsafe,
    Limit,
    Unsupported,
}

fn kind_of(e: &ShardError) -> Option<Kind> {
    match e {
        ShardError::Malformed(_) => Some(Kind::Malformed),
        ShardError::Unsafe { .. } => Some(Kind::Unsafe),
        ShardError::LimitExceeded(_) => Some(Kind::Limit),
        ShardError::Unsupported(_) => Some(Kind::Unsupported),
        _ => None,
    }
}

/// Reads a tar three ways (seekable, streamed as tgz, streamed as tar.lz4) plus the index
/// builder, and checks each fails with `want`.
fn assert_tar_fails(what: &str, tar: &[u8], want: Kind) {
    assert_tar_fails_with(what, tar, want, Limits::default());
}

fn assert_tar_fails_with(what: &str, tar: &[u8], want: Kind, limits: Limits) {
    for format in [Format::Tar, Format::Tgz, Format::TarLz4] {
        let bytes = compress(format, tar);
        match read_all(format, &bytes, limits) {
            Ok(m) => panic!(
                "{what} ({format}): read {} members, expected {want:?}",
                m.len()
            ),
            Err(e) => assert_eq!(kind_of(&e), Some(want), "{what} ({format}): {e}"),
        }
    }
    match TarIndex::build(Cursor::new(tar), limits) {
        Ok(_) => panic!("{what} (index): built, expected {want:?}"),
        Err(e) => assert_eq!(kind_of(&e), Some(want), "{what} (index): {e}"),
    }
}

#[test]
fn unsafe_names_links_and_devices() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("dot-dot", RawTar::new().file("../x", b"evil").finish()),
        (
            "inner dot-dot",
            RawTar::new().file("a/../../b", b"evil").finish(),
        ),
        (
            "backslash dot-dot",
            RawTar::new().file("a\\..\\..\\b", b"evil").finish(),
        ),
        (
            "absolute",
            RawTar::new().file("/etc/passwd", b"root::0:0").finish(),
        ),
        ("empty name", RawTar::new().file("", b"x").finish()),
        (
            "symlink",
            RawTar::new().header(raw_header(b"link", 0, b'2')).finish(),
        ),
        (
            "hardlink",
            RawTar::new().header(raw_header(b"hard", 0, b'1')).finish(),
        ),
        (
            "char device",
            RawTar::new().header(raw_header(b"tty", 0, b'3')).finish(),
        ),
        (
            "block device",
            RawTar::new().header(raw_header(b"sda", 0, b'4')).finish(),
        ),
        (
            "fifo",
            RawTar::new().header(raw_header(b"pipe", 0, b'6')).finish(),
        ),
        (
            "pax path escapes",
            RawTar::new()
                .pax(&pax_record("path", b"../../evil"))
                .file("benign", b"x")
                .finish(),
        ),
        (
            "pax path absolute",
            RawTar::new()
                .pax(&pax_record("path", b"/etc/cron.d/x"))
                .file("benign", b"x")
                .finish(),
        ),
        (
            "pax path with NUL",
            RawTar::new()
                .pax(&pax_record("path", b"a\0b"))
                .file("benign", b"x")
                .finish(),
        ),
        (
            "GNU long name absolute",
            RawTar::new()
                .header(raw_header(b"././@LongLink", 12, b'L'))
                .data(b"/etc/shadow\0")
                .file("benign", b"x")
                .finish(),
        ),
        (
            "duplicate names",
            RawTar::new()
                .file("a.jpg", b"1")
                .file("b.jpg", b"2")
                .file("a.jpg", b"3")
                .finish(),
        ),
        (
            "duplicate via long name",
            RawTar::new()
                .file("a.jpg", b"1")
                .header(raw_header(b"././@LongLink", 6, b'L'))
                .data(b"a.jpg\0")
                .file("other", b"2")
                .finish(),
        ),
    ];
    for (what, tar) in &cases {
        assert_tar_fails(what, tar, Kind::Unsafe);
    }
}

#[test]
fn pax_and_gnu_extension_abuse() {
    let malformed: Vec<(&str, Vec<u8>)> = vec![
        (
            "pax size disagrees with header size",
            RawTar::new()
                .pax(&pax_record("size", b"100"))
                .header(raw_header(b"a", 10, b'0'))
                .data(&[0; 10])
                .finish(),
        ),
        (
            "two pax headers",
            RawTar::new()
                .pax(&pax_record("path", b"x"))
                .pax(&pax_record("path", b"y"))
                .file("a", b"1")
                .finish(),
        ),
        (
            "repeated pax record",
            RawTar::new()
                .pax(&[pax_record("path", b"x"), pax_record("path", b"y")].concat())
                .file("a", b"1")
                .finish(),
        ),
        (
            "two long names",
            RawTar::new()
                .header(raw_header(b"././@LongLink", 2, b'L'))
                .data(b"x\0")
                .header(raw_header(b"././@LongLink", 2, b'L'))
                .data(b"y\0")
                .file("a", b"1")
                .finish(),
        ),
        (
            "long name and pax path",
            RawTar::new()
                .header(raw_header(b"././@LongLink", 2, b'L'))
                .data(b"x\0")
                .pax(&pax_record("path", b"y"))
                .file("a", b"1")
                .finish(),
        ),
        (
            "dangling pax header",
            RawTar::new().pax(&pax_record("path", b"x")).finish(),
        ),
        (
            "bad pax record",
            RawTar::new().pax(b"99 path=x\n").file("a", b"1").finish(),
        ),
        (
            "directory with data",
            RawTar::new()
                .header(raw_header(b"d/", 600, b'5'))
                .data(&[0; 600])
                .finish(),
        ),
        (
            "file named like a directory",
            RawTar::new().file("x/", b"1").finish(),
        ),
        (
            "name not UTF-8",
            RawTar::new()
                .header(raw_header(b"\xff\xfe", 0, b'0'))
                .finish(),
        ),
        ("bad checksum", {
            let mut t = RawTar::new().file("a", b"1").finish();
            t[0] ^= 1;
            t
        }),
        ("bad size field", {
            let mut h = raw_header(b"a", 0, b'0');
            h[124..136].copy_from_slice(b"9999zzzz999\0");
            crate::util::checksum(&mut h);
            RawTar::new().header(h).finish()
        }),
        ("empty input", Vec::new()),
    ];
    for (what, tar) in &malformed {
        assert_tar_fails(what, tar, Kind::Malformed);
    }

    let limits: Vec<(&str, Vec<u8>)> = vec![
        (
            "huge pax size",
            RawTar::new()
                .pax(&pax_record("size", b"1000000000000000"))
                .file("a", b"")
                .finish(),
        ),
        (
            "huge pax header",
            RawTar::new()
                .header(raw_header(b"././@PaxHeader", 100 << 20, b'x'))
                .finish(),
        ),
        (
            "huge GNU long name",
            RawTar::new()
                .header(raw_header(b"././@LongLink", 1 << 40, b'L'))
                .finish(),
        ),
        (
            "huge base-256 size",
            RawTar::new()
                .header(raw_header(b"a", 1 << 50, b'0'))
                .finish(),
        ),
        ("name too long", {
            let long = format!("{}\0", "n/".repeat(3000));
            RawTar::new()
                .header(raw_header(b"././@LongLink", long.len() as u64, b'L'))
                .data(long.as_bytes())
                .file("a", b"")
                .finish()
        }),
    ];
    for (what, tar) in &limits {
        assert_tar_fails(what, tar, Kind::Limit);
    }

    let unsupported: Vec<(&str, Vec<u8>)> = vec![
        (
            "GNU sparse",
            RawTar::new().header(raw_header(b"s", 0, b'S')).finish(),
        ),
        (
            "pax sparse",
            RawTar::new()
                .pax(&pax_record("GNU.sparse.map", b"0,1"))
                .file("a", b"1")
                .finish(),
        ),
        (
            "volume label",
            RawTar::new().header(raw_header(b"vol", 0, b'V')).finish(),
        ),
        (
            "global pax path",
            RawTar::new()
                .header(raw_header(b"pax_global_header", 10, b'g'))
                .data(&pax_record("path", b"x"))
                .file("a", b"1")
                .finish(),
        ),
    ];
    for (what, tar) in &unsupported {
        assert_tar_fails(what, tar, Kind::Unsupported);
    }
}

#[test]
fn benign_extensions_are_read() {
    // A pax size with a zero header size (how Python and Go write members of 8 GiB+).
    let tar = RawTar::new()
        .pax(&pax_record("size", b"5"))
        .header(raw_header(b"a", 0, b'0'))
        .data(b"12345")
        .file("b", b"after")
        .finish();
    let got = read_all(Format::Tar, &tar, Limits::default()).unwrap();
    assert_eq!(got[0].1, b"12345");
    assert_eq!(got[1].1, b"after");
    // `git archive`'s global header (a comment) is consumed, not listed, like tarfile does.
    let records = pax_record("comment", b"0123456789abcdef");
    let tar = RawTar::new()
        .header(raw_header(b"pax_global_header", records.len() as u64, b'g'))
        .data(&records)
        .file("a", b"1")
        .finish();
    let names: Vec<String> = list_members(Format::Tar, Cursor::new(&tar), Limits::default())
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, ["a"]);
    // An archive of only the end marker is empty, not an error (tarfile agrees).
    assert!(
        list_members(Format::Tar, Cursor::new(vec![0u8; 1024]), Limits::default())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn limits_are_enforced() {
    let tar = build(
        Format::Tar,
        &[("a", &[1; 100]), ("b", &[2; 100]), ("c", &[3; 100])],
    );
    let tight = |f: fn(&mut Limits)| {
        let mut l = Limits::default();
        f(&mut l);
        l
    };
    assert_tar_fails_with("members", &tar, Kind::Limit, tight(|l| l.max_members = 2));
    assert_tar_fails_with(
        "member size",
        &tar,
        Kind::Limit,
        tight(|l| l.max_member_size = 99),
    );
    assert_tar_fails_with(
        "total",
        &tar,
        Kind::Limit,
        tight(|l| l.max_total_expanded = 250),
    );
    let zip = build(
        Format::Zip,
        &[("a", &[1; 100]), ("b", &[2; 100]), ("c", &[3; 100])],
    );
    for limits in [
        tight(|l| l.max_members = 2),
        tight(|l| l.max_member_size = 99),
        tight(|l| l.max_total_expanded = 250),
    ] {
        let e = read_all(Format::Zip, &zip, limits).unwrap_err();
        assert_eq!(kind_of(&e), Some(Kind::Limit), "{e}");
    }
}

#[test]
fn decompression_bombs_stop_early() {
    let zeros = vec![0u8; 64 << 20];
    // Zip: refused from the directory alone, before inflating anything.
    let zip = build(Format::Zip, &[("bomb.bin", &zeros)]);
    eprintln!("zip bomb: {} bytes -> {} bytes", zip.len(), zeros.len());
    let e = ShardReader::open(Format::Zip, Cursor::new(&zip), Limits::default())
        .err()
        .unwrap();
    assert_eq!(kind_of(&e), Some(Kind::Limit), "{e}");
    // Tgz: the stream is cut once the ratio shows, after little more than RATIO_FLOOR.
    let tgz = build(Format::Tgz, &[("bomb.bin", &zeros)]);
    let e = read_all(Format::Tgz, &tgz, Limits::default()).unwrap_err();
    assert_eq!(kind_of(&e), Some(Kind::Limit), "{e}");
    // LZ4 cannot pass ~255:1, so its bound is the total expansion.
    let lz4 = build(Format::TarLz4, &[("bomb.bin", &zeros)]);
    let limits = Limits {
        max_total_expanded: 16 << 20,
        ..Limits::default()
    };
    let e = read_all(Format::TarLz4, &lz4, limits).unwrap_err();
    assert_eq!(kind_of(&e), Some(Kind::Limit), "{e}");
}

/// A zip written by hand: local entries, then a central directory whose entries may point
/// anywhere, with any Unix mode and flags.
struct RawZip {
    bytes: Vec<u8>,
    locals: Vec<(u32, Vec<u8>, Vec<u8>)>,
    central: Vec<u8>,
    count: u16,
}

impl RawZip {
    fn new() -> Self {
        RawZip {
            bytes: Vec::new(),
            locals: Vec::new(),
            central: Vec::new(),
            count: 0,
        }
    }

    /// A stored local entry; returns its index.
    fn local(&mut self, name: &[u8], data: &[u8]) -> usize {
        let offset = self.bytes.len() as u32;
        let crc = crc32fast::hash(data);
        let b = &mut self.bytes;
        b.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        b.extend_from_slice(&20u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes()); // flags
        b.extend_from_slice(&0u16.to_le_bytes()); // stored
        b.extend_from_slice(&0u16.to_le_bytes()); // time
        b.extend_from_slice(&0x21u16.to_le_bytes()); // 1980-01-01
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(name);
        b.extend_from_slice(data);
        self.locals.push((offset, name.to_vec(), data.to_vec()));
        self.locals.len() - 1
    }

    /// A central-directory entry for local entry `i`, under `name`, with `mode`, `flags`,
    /// `method` and declared uncompressed size (`None`: the real one).
    fn central(
        &mut self,
        i: usize,
        name: &[u8],
        mode: u32,
        flags: u16,
        method: u16,
        size: Option<u32>,
    ) {
        let (offset, _, data) = &self.locals[i];
        let c = &mut self.central;
        c.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        c.extend_from_slice(&((3u16 << 8) | 20).to_le_bytes()); // made by Unix
        c.extend_from_slice(&20u16.to_le_bytes());
        c.extend_from_slice(&flags.to_le_bytes());
        c.extend_from_slice(&method.to_le_bytes());
        c.extend_from_slice(&0u16.to_le_bytes());
        c.extend_from_slice(&0x21u16.to_le_bytes());
        c.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
        c.extend_from_slice(&(data.len() as u32).to_le_bytes());
        c.extend_from_slice(&size.unwrap_or(data.len() as u32).to_le_bytes());
        c.extend_from_slice(&(name.len() as u16).to_le_bytes());
        c.extend_from_slice(&0u16.to_le_bytes()); // extra
        c.extend_from_slice(&0u16.to_le_bytes()); // comment
        c.extend_from_slice(&0u16.to_le_bytes()); // disk
        c.extend_from_slice(&0u16.to_le_bytes()); // internal attrs
        c.extend_from_slice(&(mode << 16).to_le_bytes());
        c.extend_from_slice(&offset.to_le_bytes());
        c.extend_from_slice(name);
        self.count += 1;
    }

    /// Each local entry listed once under its own name, as a regular file.
    fn plain(names: &[(&str, &[u8])]) -> Vec<u8> {
        let mut z = RawZip::new();
        for (n, d) in names {
            let i = z.local(n.as_bytes(), d);
            z.central(i, n.as_bytes(), 0o100_644, 0, 0, None);
        }
        z.finish()
    }

    fn finish(mut self) -> Vec<u8> {
        let cd_offset = self.bytes.len() as u32;
        let cd_len = self.central.len() as u32;
        self.bytes.extend_from_slice(&self.central);
        let b = &mut self.bytes;
        b.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&self.count.to_le_bytes());
        b.extend_from_slice(&self.count.to_le_bytes());
        b.extend_from_slice(&cd_len.to_le_bytes());
        b.extend_from_slice(&cd_offset.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        self.bytes
    }
}

#[test]
fn hostile_zips() {
    // The hand-made writer is right: a plain zip reads.
    let ok = RawZip::plain(&[("a.txt", b"hello"), ("b/c.txt", b"x")]);
    assert_eq!(
        read_all(Format::Zip, &ok, Limits::default()).unwrap().len(),
        2
    );

    let mut cases: Vec<(&str, Vec<u8>, Kind)> = vec![
        ("dot-dot", RawZip::plain(&[("../evil", b"x")]), Kind::Unsafe),
        (
            "absolute",
            RawZip::plain(&[("/etc/passwd", b"x")]),
            Kind::Unsafe,
        ),
        (
            "NUL in name",
            RawZip::plain(&[("a\0b", b"x")]),
            Kind::Unsafe,
        ),
        ("empty name", RawZip::plain(&[("", b"x")]), Kind::Unsafe),
        (
            "duplicate names",
            RawZip::plain(&[("a", b"1"), ("a", b"2")]),
            Kind::Unsafe,
        ),
        (
            "directory with data",
            RawZip::plain(&[("d/", b"data")]),
            Kind::Malformed,
        ),
        ("empty input", Vec::new(), Kind::Malformed),
        (
            "random tail",
            b"PK\x03\x04 not really a zip".to_vec(),
            Kind::Malformed,
        ),
    ];
    let mut overlap = RawZip::new();
    let i = overlap.local(b"a", &[7; 1000]);
    overlap.central(i, b"a", 0o100_644, 0, 0, None);
    overlap.central(i, b"b", 0o100_644, 0, 0, None);
    cases.push(("overlapping entries", overlap.finish(), Kind::Unsafe));

    let mut inside = RawZip::new();
    let i = inside.local(b"outer", &[1; 100]);
    inside.central(i, b"outer", 0o100_644, 0, 0, None);
    // A second directory entry whose local header offset lies inside the first's data.
    let mut z = inside;
    z.locals
        .push((z.locals[0].0 + 40, b"inner".to_vec(), vec![1; 10]));
    z.central(1, b"inner", 0o100_644, 0, 0, None);
    cases.push(("entry inside another", z.finish(), Kind::Malformed));

    for (what, mode) in [
        ("symlink", 0o120_777),
        ("fifo", 0o010_644),
        ("device", 0o020_644),
    ] {
        let mut z = RawZip::new();
        let i = z.local(b"x", b"/etc/passwd");
        z.central(i, b"x", mode, 0, 0, None);
        cases.push((what, z.finish(), Kind::Unsafe));
    }
    let mut enc = RawZip::new();
    let i = enc.local(b"x", b"secret");
    enc.bytes[6] = 1; // the local header says encrypted too
    enc.central(i, b"x", 0o100_644, 1, 0, None);
    cases.push(("encrypted", enc.finish(), Kind::Unsupported));
    let mut bz = RawZip::new();
    let i = bz.local(b"x", b"BZh9");
    bz.bytes[8] = 12; // bzip2 in the local header too
    bz.central(i, b"x", 0o100_644, 0, 12, None);
    cases.push(("bzip2", bz.finish(), Kind::Unsupported));
    let mut lie = RawZip::new();
    let i = lie.local(b"x", b"0123456789");
    lie.central(i, b"x", 0o100_644, 0, 0, Some(4));
    cases.push(("size lie", lie.finish(), Kind::Malformed));

    for (what, zip, want) in &cases {
        match read_all(Format::Zip, zip, Limits::default()) {
            Ok(m) => panic!("{what}: read {} members, expected {want:?}", m.len()),
            Err(e) => assert_eq!(kind_of(&e), Some(*want), "{what}: {e}"),
        }
    }
}

/// Opens, walks and reads everything; the outcome must be Ok or an archive error, never
/// an I/O error (the bytes are in memory) and never a panic.
fn survive(format: Format, bytes: &[u8]) -> Result<usize, ShardError> {
    let limits = Limits {
        max_total_expanded: 64 << 20,
        ..Limits::default()
    };
    let result = read_all(format, bytes, limits).map(|m| m.len());
    if let Err(e) = &result {
        assert!(kind_of(e).is_some(), "{format}: {e}");
    }
    if format == Format::Tar {
        let _ = TarIndex::build(Cursor::new(bytes), limits);
    }
    if format.is_tar() {
        // The streamed path too, with a reader that hands out bytes one at a time.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let Some((first, rest)) = self.0.split_first() else {
                    return Ok(0);
                };
                if buf.is_empty() {
                    return Ok(0);
                }
                buf[0] = *first;
                self.0 = rest;
                Ok(1)
            }
        }
        if let Ok(mut r) = ShardReader::stream(format, Trickle(bytes), limits) {
            while let Ok(Some(mut e)) = r.next_entry() {
                if e.read_to_vec().is_err() {
                    break;
                }
            }
        }
    }
    result
}

fn corpus_base(format: Format) -> Vec<u8> {
    let long = format!("{}/x.bin", "q".repeat(150));
    build(
        format,
        &[
            ("a/1.jpg", &[1; 700]),
            ("a/1.cls", b"7"),
            (&long, b"long"),
            ("e", b""),
        ],
    )
}

#[test]
fn truncated_archives_fail_cleanly_at_every_cut() {
    for format in Format::ALL {
        let full = corpus_base(format);
        let mut ok_cuts = 0;
        for cut in 0..full.len() {
            match survive(format, &full[..cut]) {
                // Never a partial listing: a prefix that reads, reads everything (a cut in
                // the second end-of-archive block, or in a gzip trailer never reached).
                Ok(n) => {
                    assert_eq!(n, 4, "{format} cut at {cut} read a partial archive");
                    ok_cuts += 1;
                }
                Err(e) => assert!(
                    matches!(e, ShardError::Malformed(_)),
                    "{format} cut at {cut}: {e}"
                ),
            }
        }
        assert!(
            ok_cuts <= 512,
            "{format}: {ok_cuts} truncated prefixes read"
        );
        eprintln!(
            "{format}: {} cut points, {} refused, {ok_cuts} complete",
            full.len(),
            full.len() - ok_cuts
        );
    }
}

#[test]
fn random_bytes_and_bit_flips_never_panic() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for format in Format::ALL {
        for _ in 0..300 {
            let n = rng.below(3000) as usize;
            let _ = survive(format, &rng.bytes(n));
        }
        // Random bytes behind a valid magic, so the parsers get past the first check.
        for _ in 0..300 {
            let mut b = corpus_base(format)[..8].to_vec();
            let n = rng.below(2000) as usize;
            b.extend(rng.bytes(n));
            let _ = survive(format, &b);
        }
        let base = corpus_base(format);
        for _ in 0..1500 {
            let mut b = base.clone();
            for _ in 0..=rng.below(4) {
                let i = rng.below(b.len() as u64) as usize;
                b[i] ^= 1 << rng.below(8);
            }
            let _ = survive(format, &b);
        }
    }
    for _ in 0..500 {
        let n = rng.below(400) as usize;
        let _ = TarIndex::from_bytes(&rng.bytes(n));
    }
}

/// Runs the memory-heavy hostile reads in a child process and checks its peak RSS, so
/// other tests running in parallel threads do not blur the measurement.
#[test]
fn hostile_reads_use_bounded_memory() {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "hostile::memory_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GRISTMILL_SHARD_MEMORY_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed:\n{stderr}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "child did not run"
    );
    eprintln!("{}", stderr.trim());
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Gzip members of zeros, concatenated: `parts` × 16 MiB expanded from a few KiB each.
fn gzip_zeros(parts: usize) -> Vec<u8> {
    use std::io::Write;
    let mut one = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    one.write_all(&vec![0u8; 16 << 20]).unwrap();
    let one = one.finish().unwrap();
    one.repeat(parts)
}

#[test]
#[ignore = "run by hostile_reads_use_bounded_memory in a child process"]
fn memory_child() {
    if std::env::var_os("GRISTMILL_SHARD_MEMORY_CHILD").is_none() {
        return;
    }
    let before = peak_rss_kib();
    let no_ratio = Limits {
        max_ratio: u64::MAX,
        ..Limits::default()
    };

    // 1. Extension headers that claim a terabyte: refused before any allocation.
    for ty in [b'L', b'x', b'K'] {
        let tar = RawTar::new()
            .header(raw_header(b"././@LongLink", 1 << 40, ty))
            .finish();
        let tgz = compress(Format::Tgz, &tar);
        assert!(read_all(Format::Tgz, &tgz, no_ratio).is_err());
    }

    // 2. A tgz member of 1 GiB of zeros (from ~1 MiB of gzip), streamed through: memory
    //    stays flat whatever the size.
    let header = compress(Format::Tgz, &raw_header(b"zeros.bin", 1 << 30, b'0'));
    let mut tgz = header;
    tgz.extend(gzip_zeros(64));
    tgz.extend(compress(Format::Tgz, &[0u8; 1024]));
    let mut r = ShardReader::open(Format::Tgz, Cursor::new(&tgz), no_ratio).unwrap();
    let mut e = r.next_entry().unwrap().unwrap();
    let n = io::copy(&mut e, &mut io::sink()).unwrap();
    assert_eq!(n, 1 << 30);
    drop(e);
    drop(r);
    // With the default ratio limit it stops after a few MiB.
    let e = read_all(Format::Tgz, &tgz, Limits::default()).unwrap_err();
    assert!(matches!(e, ShardError::LimitExceeded(_)), "{e}");

    // 3. A member whose declared size is far beyond its data: `read_to_vec` does not
    //    trust the size for its allocation.
    let tar = RawTar::new()
        .header(raw_header(b"liar", 8 << 30, b'0'))
        .data(&[1; 4096])
        .finish();
    let mut r = ShardReader::stream(Format::Tar, Cursor::new(&tar), Limits::default()).unwrap();
    let mut e = r.next_entry().unwrap().unwrap();
    assert!(e.read_to_vec().is_err());
    drop(e);
    drop(r);

    // 4. A zip whose central directory claims a million entries in a tiny file.
    let mut zip = RawZip::plain(&[("a", b"x")]);
    let n = zip.len();
    zip[n - 12..n - 10].copy_from_slice(&u16::MAX.to_le_bytes());
    zip[n - 14..n - 12].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(read_all(Format::Zip, &zip, Limits::default()).is_err());

    // 5. Many members with long names through the duplicate check.
    let mut w = ShardWriter::new(Format::Tar, Vec::new(), MTIME);
    for i in 0..20_000 {
        w.append_bytes(&format!("{}/{i}", "n".repeat(200)), b"")
            .unwrap();
    }
    let tar = w.finish().unwrap();
    assert_eq!(
        list_members(Format::Tar, Cursor::new(&tar), Limits::default())
            .unwrap()
            .len(),
        20_000
    );
    drop(tar);

    let peak = peak_rss_kib();
    eprintln!(
        "memory child: peak RSS {} MiB (at start {} MiB)",
        peak / 1024,
        before / 1024
    );
    assert!(peak < 200 * 1024, "peak RSS {peak} KiB");
}
