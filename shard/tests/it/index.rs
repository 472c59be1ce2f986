//! The tar member index: built by seeking over data (measured), one-seek member reads,
//! persistence, and staleness.

use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom, Write};
use std::time::Instant;

use gristmill_shard::{
    Format, Limits, MatchMode, SampleData, Selector, ShardError, ShardReader, TarIndex,
    list_members, read_member_at,
};

use crate::util::{Counting, MTIME, build, raw_header};

/// Writes a sparse tar of `count` members of `size` bytes each: real headers, data left as
/// holes (zeros) except an 8-byte marker (the member number) at the start of each member.
/// No disk space or write time is spent on the data.
fn sparse_tar(file: &mut File, count: u64, size: u64) -> u64 {
    let stride = 512 + size.div_ceil(512) * 512;
    for i in 0..count {
        let at = i * stride;
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(&raw_header(
            format!("shard/{i:06}.bin").as_bytes(),
            size,
            b'0',
        ))
        .unwrap();
        file.write_all(&i.to_be_bytes()).unwrap();
    }
    let end = count * stride + 1024;
    file.set_len(end).unwrap();
    end
}

#[test]
fn index_of_a_2_gib_tar_reads_only_headers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.tar");
    let mut file = File::create(&path).unwrap();
    let (count, size) = (42u64, 50u64 << 20);
    let total = sparse_tar(&mut file, count, size);
    assert!(total > 2 << 30);

    let mut src = Counting::new(File::open(&path).unwrap());
    let started = Instant::now();
    let index = TarIndex::build(&mut src, Limits::default()).unwrap();
    let took = started.elapsed();
    eprintln!(
        "index of a {total}-byte tar: read {} bytes with {} seeks in {took:?}",
        src.bytes_read, src.seeks
    );
    assert_eq!(index.entries().len(), count as usize);
    // One header per member plus the first trailer block; nothing else.
    assert_eq!(src.bytes_read, (count + 1) * 512);
    assert!(src.bytes_read * 10_000 < total);
    assert_eq!(index.source_size(), total);
    assert_eq!(index.end_offset(), total - 1024);

    // Members at the start, middle and end: one seek, exactly the member's bytes.
    for i in [0u64, count / 2, count - 1] {
        let entry = index.get(&format!("shard/{i:06}.bin")).unwrap();
        let mut src = Counting::new(File::open(&path).unwrap());
        let mut data = read_member_at(&mut src, entry).unwrap();
        let mut marker = [0u8; 8];
        data.read_exact(&mut marker).unwrap();
        assert_eq!(u64::from_be_bytes(marker), i);
        let rest = std::io::copy(&mut data, &mut std::io::sink()).unwrap();
        assert_eq!(rest + 8, size);
        assert_eq!(src.seeks, 1);
        assert_eq!(src.bytes_read, size);
    }

    // Without an index, `find` on a plain tar still seeks over what it skips.
    let mut src = Counting::new(File::open(&path).unwrap());
    let mut r = ShardReader::open(Format::Tar, &mut src, Limits::default()).unwrap();
    let mut last = r.find(&format!("shard/{:06}.bin", count - 1)).unwrap();
    let mut marker = [0u8; 8];
    last.read_exact(&mut marker).unwrap();
    drop(last);
    drop(r);
    assert_eq!(u64::from_be_bytes(marker), count - 1);
    assert_eq!(src.bytes_read, count * 512 + 8);
}

#[test]
fn index_matches_listing_and_round_trips() {
    let long = format!("{}/x.bin", "p".repeat(200));
    let tar = build(
        Format::Tar,
        &[
            ("a/1.jpg", b"one"),
            ("a/1.cls", b"1"),
            ("a/2.jpg", b"two"),
            (&long, b"long"),
        ],
    );
    let mut index = TarIndex::build(Cursor::new(&tar), Limits::default()).unwrap();
    let listed = list_members(Format::Tar, Cursor::new(&tar), Limits::default()).unwrap();
    let from_index: Vec<_> = index.entries().iter().map(|e| e.member()).collect();
    assert_eq!(from_index, listed);

    // The long name has a pax header: header_offset points at it, data after both headers.
    let e = index.get(&long).unwrap();
    assert_eq!(e.data_offset - e.header_offset, 3 * 512);
    let mut s = String::new();
    read_member_at(Cursor::new(&tar), e)
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "long");

    index.set_source_tag("xxh3:0123");
    assert!(index.is_current(tar.len() as u64, "xxh3:0123"));
    assert!(!index.is_current(tar.len() as u64 + 512, "xxh3:0123"));
    assert!(!index.is_current(tar.len() as u64, "xxh3:9999"));

    let bytes = index.to_bytes();
    assert_eq!(TarIndex::from_bytes(&bytes).unwrap(), index);
    let json = serde_json::to_string(&index).unwrap();
    assert_eq!(serde_json::from_str::<TarIndex>(&json).unwrap(), index);
    eprintln!(
        "index of 4 members: {} bytes binary, {} bytes JSON",
        bytes.len(),
        json.len()
    );

    let sel = Selector::new(MatchMode::Suffix, ".jpg").unwrap();
    let picked: Vec<&str> = index.select(&sel).map(|e| e.name.as_str()).collect();
    assert_eq!(picked, ["a/1.jpg", "a/2.jpg"]);

    let samples: Vec<_> = index.samples().map(|s| s.unwrap()).collect();
    assert_eq!(samples.len(), 3);
    assert_eq!(samples[0].key, "a/1");
    let e1 = index.get("a/1.jpg").unwrap();
    assert_eq!(
        samples[0].files[0].data,
        SampleData::Range {
            offset: e1.data_offset,
            size: 3
        }
    );
}

#[test]
fn corrupt_or_foreign_indexes_are_refused() {
    let tar = build(Format::Tar, &[("a", b"x"), ("b", b"y")]);
    let bytes = TarIndex::build(Cursor::new(&tar), Limits::default())
        .unwrap()
        .to_bytes();
    for cut in 0..bytes.len() {
        assert!(TarIndex::from_bytes(&bytes[..cut]).is_err(), "cut {cut}");
    }
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x40;
        assert!(TarIndex::from_bytes(&b).is_err(), "flip {i}");
    }
    // A future version (with a valid checksum) asks for a rebuild.
    let mut future = bytes[..bytes.len() - 4].to_vec();
    future[4] = 2;
    let crc = crc32fast::hash(&future);
    future.extend_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        TarIndex::from_bytes(&future),
        Err(ShardError::Unsupported(_))
    ));
}

#[test]
fn a_shard_shorter_than_its_index_is_an_error() {
    let tar = build(Format::Tar, &[("a", &[5u8; 2000])]);
    let index = TarIndex::build(Cursor::new(&tar), Limits::default()).unwrap();
    let entry = index.get("a").unwrap();
    let mut data = read_member_at(Cursor::new(&tar[..1000]), entry).unwrap();
    let err = std::io::copy(&mut data, &mut std::io::sink()).unwrap_err();
    assert!(matches!(ShardError::from(err), ShardError::Malformed(_)));
}

#[test]
fn appending_at_the_end_offset_extends_the_tar() {
    let tar = build(Format::Tar, &[("a", b"1")]);
    let index = TarIndex::build(Cursor::new(&tar), Limits::default()).unwrap();
    let mut file = Cursor::new(tar);
    file.seek(SeekFrom::Start(index.end_offset())).unwrap();
    let mut w = gristmill_shard::ShardWriter::new(Format::Tar, &mut file, MTIME);
    w.append_bytes("b", b"2").unwrap();
    w.finish().unwrap();
    let names: Vec<String> = list_members(
        Format::Tar,
        Cursor::new(file.into_inner()),
        Limits::default(),
    )
    .unwrap()
    .into_iter()
    .map(|m| m.name)
    .collect();
    assert_eq!(names, ["a", "b"]);
}
