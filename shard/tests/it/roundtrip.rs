//! Writing and reading back every format: listings, data, lookups, selections, samples,
//! determinism, and other readers (the `tar` crate, the `lz4` tool) agreeing with ours.

use std::io::{Cursor, Read};
use std::process::Command;

use gristmill_shard::{
    Format, Limits, MatchMode, MemberKind, SampleData, Selector, ShardError, ShardReader,
    ShardWriter, list_members,
};
use proptest::prelude::*;

use crate::util::{MTIME, build, read_all};

fn sample_members() -> Vec<(String, Vec<u8>)> {
    vec![
        ("train/0001.jpg".into(), vec![1; 3000]),
        ("train/0001.cls".into(), b"7".to_vec()),
        ("train/0002.jpg".into(), vec![2; 512]),
        ("train/0002.cls".into(), b"3".to_vec()),
        ("empty.txt".into(), Vec::new()),
        (format!("{}/long-name.bin", "d".repeat(150)), vec![9; 100]),
        ("ünïcødé/ファイル.txt".into(), "héllo".as_bytes().to_vec()),
    ]
}

fn build_owned(format: Format, members: &[(String, Vec<u8>)]) -> Vec<u8> {
    let refs: Vec<(&str, &[u8])> = members
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    build(format, &refs)
}

#[test]
fn every_format_round_trips() {
    let members = sample_members();
    for format in Format::ALL {
        let bytes = build_owned(format, &members);
        assert_eq!(Format::from_magic(&bytes), Some(format), "{format}");
        let got = read_all(format, &bytes, Limits::default()).unwrap();
        assert_eq!(got.len(), members.len(), "{format}");
        for ((m, data), (name, want)) in got.iter().zip(&members) {
            assert_eq!(&m.name, name, "{format}");
            assert_eq!(data, want, "{format} {name}");
            assert_eq!(m.size, want.len() as u64);
            assert_eq!(m.kind, MemberKind::File);
            assert_eq!(m.mode, 0o644);
            assert_eq!(m.mtime, MTIME, "{format}");
        }
        // Streaming works for the tar family and refuses zip.
        let streamed = ShardReader::stream(format, Cursor::new(&bytes), Limits::default());
        match format {
            Format::Zip => assert!(matches!(streamed, Err(ShardError::Unsupported(_)))),
            _ => assert_eq!(streamed.unwrap().list().unwrap().len(), members.len()),
        }
    }
}

#[test]
fn output_is_deterministic() {
    let members = sample_members();
    for format in Format::ALL {
        assert_eq!(
            build_owned(format, &members),
            build_owned(format, &members),
            "{format}"
        );
    }
}

#[test]
fn find_reads_one_member_by_exact_name() {
    let members = sample_members();
    for format in Format::ALL {
        let bytes = build_owned(format, &members);
        let mut r = ShardReader::open(format, Cursor::new(&bytes), Limits::default()).unwrap();
        let mut e = r.find("train/0002.jpg").unwrap();
        assert_eq!(e.read_to_vec().unwrap(), vec![2; 512]);
        let mut r = ShardReader::open(format, Cursor::new(&bytes), Limits::default()).unwrap();
        assert!(matches!(r.find("train/0002"), Err(ShardError::NotFound(_))));
        let mut r = ShardReader::open(format, Cursor::new(&bytes), Limits::default()).unwrap();
        let mut e = r.find("ünïcødé/ファイル.txt").unwrap();
        let mut s = String::new();
        e.read_to_string(&mut s).unwrap();
        assert_eq!(s, "héllo");
    }
}

#[test]
fn copy_matching_builds_a_shard_of_the_selection() {
    let members = sample_members();
    for format in Format::ALL {
        let bytes = build_owned(format, &members);
        let mut r = ShardReader::open(format, Cursor::new(&bytes), Limits::default()).unwrap();
        let sel = Selector::new(MatchMode::WdsKey, "train/0001").unwrap();
        let mut out = ShardWriter::new(Format::Tar, Vec::new(), MTIME);
        assert_eq!(r.copy_matching(&sel, &mut out).unwrap(), 2);
        let tar = out.finish().unwrap();
        let got = read_all(Format::Tar, &tar, Limits::default()).unwrap();
        let names: Vec<&str> = got.iter().map(|(m, _)| m.name.as_str()).collect();
        assert_eq!(names, ["train/0001.jpg", "train/0001.cls"]);
        assert_eq!(got[0].1, vec![1; 3000]);
    }
}

#[test]
fn samples_group_by_key() {
    let members = sample_members();
    for format in Format::ALL {
        let bytes = build_owned(format, &members);
        let r = ShardReader::open(format, Cursor::new(&bytes), Limits::default()).unwrap();
        let samples: Vec<_> = r.into_samples(1 << 20).map(|s| s.unwrap()).collect();
        let keys: Vec<&str> = samples.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys[..3], ["train/0001", "train/0002", "empty"]);
        assert_eq!(samples[0].files.len(), 2);
        assert_eq!(samples[0].files[0].ext, "jpg");
        assert_eq!(samples[0].files[1].data, SampleData::Bytes(b"7".to_vec()));
    }
}

#[test]
fn directories_are_listed_like_python() {
    // A tar directory written by GNU tar / Python: type '5', trailing slash in the header.
    let tar = crate::util::RawTar::new()
        .header(crate::util::raw_header(b"dir/", 0, b'5'))
        .file("dir/a.txt", b"a")
        .finish();
    let list = list_members(Format::Tar, Cursor::new(&tar), Limits::default()).unwrap();
    assert_eq!(list[0].name, "dir");
    assert_eq!(list[0].kind, MemberKind::Dir);
    assert_eq!(list[1].name, "dir/a.txt");
    // `find` only returns files.
    let mut r = ShardReader::open(Format::Tar, Cursor::new(&tar), Limits::default()).unwrap();
    assert!(matches!(r.find("dir"), Err(ShardError::NotFound(_))));
}

#[test]
fn large_sizes_and_times_use_pax() {
    // A member whose header size field cannot hold its size is described by pax; check the
    // writer's header without streaming 8 GiB: a reader that fails after the header.
    struct Boom;
    impl Read for Boom {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("stop"))
        }
    }
    let mut w = ShardWriter::new(Format::Tar, Vec::new(), MTIME);
    assert!(w.append("big.bin", 9 << 30, &mut Boom).is_err());
    let out = w.finish().unwrap();
    assert_eq!(out[156], b'x');
    let records = String::from_utf8_lossy(&out[512..1024]);
    assert!(records.contains("size=9663676416\n"), "{records}");
    assert_eq!(&out[1024 + 124..1024 + 136], b"00000000000\0");
    assert_eq!(&out[1024..1031], b"big.bin");
    // mtime past 2242 also travels in pax; small files still read back.
    let mut w = ShardWriter::new(Format::Tar, Vec::new(), 1 << 40);
    w.append_bytes("a", b"x").unwrap();
    let tar = w.finish().unwrap();
    let list = list_members(Format::Tar, Cursor::new(&tar), Limits::default()).unwrap();
    assert_eq!(list[0].mtime, 1 << 40);
}

#[test]
fn the_tar_crate_reads_what_we_write() {
    let members = sample_members();
    let bytes = build_owned(Format::Tar, &members);
    let mut archive = tar::Archive::new(Cursor::new(&bytes));
    let mut seen = Vec::new();
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        seen.push((name, data));
    }
    assert_eq!(seen, members);
}

#[test]
fn the_lz4_tool_reads_what_we_write() {
    if Command::new("lz4").arg("--version").output().is_err() {
        eprintln!("lz4 tool not installed; skipping");
        return;
    }
    let members = sample_members();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("x.tar.lz4");
    std::fs::write(&src, build_owned(Format::TarLz4, &members)).unwrap();
    let out = dir.path().join("x.tar");
    let status = Command::new("lz4")
        .arg("-d")
        .arg("-q")
        .arg(&src)
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::read(&out).unwrap(),
        build_owned(Format::Tar, &members)
    );
    // And we read what the tool writes (its default 4 MiB blocks).
    let back = dir.path().join("y.tar.lz4");
    let status = Command::new("lz4")
        .arg("-q")
        .arg("-f")
        .arg(&out)
        .arg(&back)
        .status()
        .unwrap();
    assert!(status.success());
    let got = read_all(
        Format::TarLz4,
        &std::fs::read(&back).unwrap(),
        Limits::default(),
    )
    .unwrap();
    assert_eq!(got.len(), members.len());
}

#[test]
fn types_cross_threads() {
    // The server moves readers and writers into blocking tasks and shares indexes.
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<ShardReader<'static>>();
    send::<ShardWriter<std::fs::File>>();
    send::<gristmill_shard::TarIndex>();
    sync::<gristmill_shard::TarIndex>();
    sync::<Selector>();
    send::<ShardError>();
    sync::<ShardError>();
}

fn name_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec("[a-zA-Z0-9_é-]{1,40}", 1..6).prop_map(|parts| parts.join("/"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_members_round_trip(
        members in proptest::collection::btree_map(name_strategy(), proptest::collection::vec(any::<u8>(), 0..3000), 0..12),
        format_index in 0usize..4,
    ) {
        let format = Format::ALL[format_index];
        let members: Vec<(String, Vec<u8>)> = members.into_iter().collect();
        let bytes = build_owned(format, &members);
        let got = read_all(format, &bytes, Limits::default()).unwrap();
        let got: Vec<(String, Vec<u8>)> = got.into_iter().map(|(m, d)| (m.name, d)).collect();
        prop_assert_eq!(got, members);
    }
}
