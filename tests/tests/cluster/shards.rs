//! Shards through a real cluster: reads inside shards of every format (`archpath`,
//! `archregx`), a 2 GiB tar read through its index (bytes read from disk counted), listings
//! that expand shards with exact paging, get-batch of 10,000 members in request order (and
//! `__404__` entries with `coer`), appends, archive jobs, reshard (200 × 500 × 3 samples into
//! ~64 MiB shards), hostile archives, and shards of a remote (S3) bucket.

use std::collections::HashSet;
use std::io::Cursor;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use gristmill_core::api::ListObjectsPage;
use gristmill_core::name::encode_path;
use gristmill_shard::{Format, Limits, ShardReader, ShardWriter, wds_key};
use gristmill_tests::{Cluster, content};
use rand::SeedableRng;
use rand::seq::{IndexedRandom, SliceRandom};
use xxhash_rust::xxh64::xxh64;

use super::backend::*;

pub(super) fn shard(format: Format, members: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut w = ShardWriter::new(format, Vec::new(), 1_700_000_000);
    for (n, d) in members {
        w.append_bytes(n, d).unwrap();
    }
    w.finish().unwrap()
}

/// Every file member of an archive, in archive order.
pub(super) fn members_of(format: Format, data: Vec<u8>) -> Vec<(String, Vec<u8>)> {
    let mut r = ShardReader::open(format, Cursor::new(data), Limits::default()).unwrap();
    let mut out = Vec::new();
    while let Some(mut e) = r.next_entry().unwrap() {
        if e.member().is_file() {
            let n = e.member().name.clone();
            out.push((n, e.read_to_vec().unwrap()));
        }
    }
    out
}

fn obj_path(bucket: &str, name: &str) -> String {
    format!("/v1/objects/{bucket}/{}", encode_path(name))
}

async fn put(c: &Cluster, bucket: &str, name: &str, body: Vec<u8>) {
    let r = c
        .http
        .put(c.url(&obj_path(bucket, name)))
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "PUT {name}: {}", r.status());
}

async fn get_q(c: &Cluster, bucket: &str, name: &str, q: &[(&str, &str)]) -> reqwest::Response {
    c.http
        .get(c.url(&obj_path(bucket, name)))
        .query(q)
        .send()
        .await
        .unwrap()
}

async fn ok_bytes(r: reqwest::Response) -> Vec<u8> {
    let status = r.status();
    let body = r.bytes().await.unwrap();
    assert!(
        status.is_success(),
        "{status}: {}",
        String::from_utf8_lossy(&body)
    );
    body.to_vec()
}

/// Sum of a counter's samples in a node's `/metrics`.
pub(super) async fn metric(c: &Cluster, node_url: &str, name: &str) -> u64 {
    let text = c
        .http
        .get(format!("{node_url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split([' ', '{']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn owner_url(c: &Cluster, bucket: &str, name: &str) -> String {
    let smap = c.smap().await.unwrap();
    let bck = gristmill_core::Bck::parse_uri(&format!("ais://{bucket}"))
        .unwrap()
        .0;
    smap.owner(&bck.object_uname(name))
        .unwrap()
        .url()
        .to_owned()
}

async fn wait_for(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A ustar header (the test writes the 2 GiB tar as a stream, not through ShardWriter).
fn ustar_header(name: &str, size: u64) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// Acceptance: `archpath` on a 2 GiB tar reads only the member — start, middle and end —
/// counted by `grist_archive_read_bytes_total` on the target; the index is built once (at
/// PUT), persisted beside the data, and still used after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archpath_on_a_2gib_tar_reads_only_the_member() {
    let mut c = Cluster::start(1, 1).await.unwrap();
    c.create_bucket("big").await.unwrap();
    const GIB: u64 = 1 << 30;
    let members: Vec<(&str, Vec<u8>)> = vec![
        ("start.bin", content(1, 65_537)),
        ("middle.bin", content(2, 70_001)),
        ("end.bin", content(3, 65_539)),
    ];
    enum Part {
        Data(Bytes),
        Zeros(u64),
    }
    let pad = |n: u64| (512 - n % 512) % 512;
    let mut parts = Vec::new();
    let mut total = 0u64;
    let fill = [GIB, GIB - 300 * 1024];
    for (i, (name, data)) in members.iter().enumerate() {
        let mut bytes = ustar_header(name, data.len() as u64);
        bytes.extend_from_slice(data);
        bytes.extend(std::iter::repeat_n(0u8, pad(data.len() as u64) as usize));
        total += bytes.len() as u64;
        parts.push(Part::Data(bytes.into()));
        if i < fill.len() {
            let h = ustar_header(&format!("fill-{i}"), fill[i]);
            total += 512 + fill[i];
            parts.push(Part::Data(h.into()));
            parts.push(Part::Zeros(fill[i]));
        }
    }
    parts.push(Part::Zeros(1024));
    total += 1024;
    assert!(total > 2 * GIB - (1 << 20));
    let zeros = Bytes::from(vec![0u8; 1 << 20]);
    let body = futures::stream::iter(parts).flat_map(move |p| {
        let chunks: Vec<Bytes> = match p {
            Part::Data(b) => vec![b],
            Part::Zeros(n) => {
                let mut v = Vec::new();
                let mut left = n;
                while left > 0 {
                    let k = left.min(zeros.len() as u64);
                    v.push(zeros.slice(..k as usize));
                    left -= k;
                }
                v
            }
        };
        futures::stream::iter(chunks.into_iter().map(Ok::<Bytes, std::io::Error>))
    });
    let target = owner_url(&c, "big", "huge.tar").await;
    let r = c
        .http
        .put(format!("{target}{}", obj_path("big", "huge.tar")))
        .header(reqwest::header::CONTENT_LENGTH, total)
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());

    // The PUT indexed the tar (headers only).
    wait_for("the index build", async || {
        metric(&c, &target, "grist_archive_index_builds_total").await >= 1
    })
    .await;
    let before = metric(&c, &target, "grist_archive_read_bytes_total").await;
    assert!(before < 64 * 1024, "the index build read {before} bytes");
    for (name, data) in &members {
        let t0 = Instant::now();
        let r = get_q(&c, "big", "huge.tar", &[("archpath", name)]).await;
        assert_eq!(
            r.headers()[reqwest::header::CONTENT_LENGTH],
            data.len().to_string().as_str()
        );
        assert_eq!(&ok_bytes(r).await, data, "{name}");
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "{name} took {:?}",
            t0.elapsed()
        );
    }
    let read = metric(&c, &target, "grist_archive_read_bytes_total").await - before;
    let want: u64 = members.iter().map(|(_, d)| d.len() as u64).sum();
    assert_eq!(read, want, "archpath reads exactly the members' bytes");
    // A range inside the last member.
    let r = c
        .http
        .get(c.url(&obj_path("big", "huge.tar")))
        .query(&[("archpath", "end.bin")])
        .header(reqwest::header::RANGE, "bytes=100-199")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(ok_bytes(r).await, members[2].1[100..200]);
    let r = get_q(&c, "big", "huge.tar", &[("archpath", "nope.bin")]).await;
    assert_eq!(r.status(), 404);

    // After a restart the index comes from its side file: no rebuild, no scan.
    c.targets[0].stop();
    let smap = c.restart_target(0).await.unwrap();
    let target = smap.tmap.values().next().unwrap().url().to_owned();
    let r = get_q(&c, "big", "huge.tar", &[("archpath", "middle.bin")]).await;
    assert_eq!(ok_bytes(r).await, members[1].1);
    assert_eq!(
        metric(&c, &target, "grist_archive_index_builds_total").await,
        0
    );
    assert_eq!(
        metric(&c, &target, "grist_archive_read_bytes_total").await,
        members[1].1.len() as u64
    );
}

fn sample_members() -> Vec<(String, Vec<u8>)> {
    vec![
        ("a/0001.jpg".into(), content(11, 3000)),
        ("a/0001.cls".into(), b"7\n".to_vec()),
        ("a/0002.jpg".into(), content(12, 3 << 20)),
        ("a/0002.cls".into(), b"8\n".to_vec()),
        ("empty.txt".into(), Vec::new()),
        (
            format!("deep/{}/long-name.bin", "d".repeat(120)),
            content(13, 777),
        ),
        ("ünïcode/ß.txt".into(), "grüße".as_bytes().to_vec()),
    ]
}

/// Every format: each member by `archpath` (the 3 MiB one streamed), `archregx` in every
/// mode, format by extension, by `archmime`, or by magic bytes; clear 4xx for mistakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archpath_and_archregx_in_every_format() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("fmt").await.unwrap();
    let members = sample_members();
    for format in Format::ALL {
        let data = shard(format, &members);
        let name = format!("s{}", format.extension());
        put(&c, "fmt", &name, data.clone()).await;
        // Without an extension: archmime, or the magic bytes.
        put(
            &c,
            "fmt",
            &format!("noext-{}", &format.extension()[1..]),
            data,
        )
        .await;
        for (m, d) in &members {
            let got = ok_bytes(get_q(&c, "fmt", &name, &[("archpath", m)]).await).await;
            assert_eq!(&got, d, "{name}:{m}");
        }
        let r = get_q(&c, "fmt", &name, &[("archpath", "a/0003.jpg")]).await;
        assert_eq!(r.status(), 404, "{name}");
        let mime = format.extension();
        let noext = format!("noext-{}", &mime[1..]);
        let got = ok_bytes(
            get_q(
                &c,
                "fmt",
                &noext,
                &[("archpath", "a/0001.jpg"), ("archmime", mime)],
            )
            .await,
        )
        .await;
        assert_eq!(got, members[0].1);
        let by_magic = get_q(&c, "fmt", &noext, &[("archpath", "a/0001.cls")]).await;
        assert_eq!(ok_bytes(by_magic).await, b"7\n", "{noext} by magic");

        let cases: [(&str, &str, &[&str]); 5] = [
            ("a/0002", "wdskey", &["a/0002.jpg", "a/0002.cls"]),
            (
                "a/",
                "prefix",
                &["a/0001.jpg", "a/0001.cls", "a/0002.jpg", "a/0002.cls"],
            ),
            (".cls", "suffix", &["a/0001.cls", "a/0002.cls"]),
            ("code", "substr", &["ünïcode/ß.txt"]),
            ("^a/000[12]\\.jpg$", "regexp", &["a/0001.jpg", "a/0002.jpg"]),
        ];
        for (expr, mode, want) in cases {
            let r = get_q(&c, "fmt", &name, &[("archregx", expr), ("archmode", mode)]).await;
            let got = members_of(Format::Tar, ok_bytes(r).await);
            let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, want, "{name} {mode} {expr}");
            for (n, d) in &got {
                assert_eq!(&members.iter().find(|(m, _)| m == n).unwrap().1, d);
            }
        }
        let r = get_q(
            &c,
            "fmt",
            &name,
            &[("archregx", "zzz"), ("archmode", "prefix")],
        )
        .await;
        assert_eq!(r.status(), 404);
        let r = get_q(&c, "fmt", &name, &[("archregx", "(unclosed")]).await;
        assert_eq!(r.status(), 400);
        let r = get_q(
            &c,
            "fmt",
            &name,
            &[("archregx", "a"), ("archmode", "bogus")],
        )
        .await;
        assert_eq!(r.status(), 400);
    }
    // Not a shard at all.
    put(&c, "fmt", "plain", b"just bytes".to_vec()).await;
    let r = get_q(&c, "fmt", "plain", &[("archpath", "x")]).await;
    assert_eq!(r.status(), 400);
}

async fn list_all(c: &Cluster, bucket: &str, prefix: &str, page: u64) -> Vec<(String, u32, u64)> {
    list_flags(c, bucket, prefix, page, gristmill_core::shards::LS_ARCH_DIR).await
}

async fn list_flags(
    c: &Cluster,
    bucket: &str,
    prefix: &str,
    page: u64,
    flags: u64,
) -> Vec<(String, u32, u64)> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let body = serde_json::json!({"action": "list", "value": {
            "pagesize": page, "continuation_token": token, "prefix": prefix,
            "flags": flags.to_string()}});
        let r = c
            .http
            .get(c.url(&format!("/v1/buckets/{bucket}")))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        let p: ListObjectsPage = r.json().await.unwrap();
        assert!(p.entries.len() as u64 <= page);
        out.extend(p.entries.into_iter().map(|e| (e.name, e.flags, e.size)));
        if p.continuation_token.is_empty() {
            return out;
        }
        token = p.continuation_token;
        assert!(out.len() < 100_000);
    }
}

/// Listing with `LsArchDir`: every shard is followed by its file members (`shard/member`,
/// flag `EntryInArch`), in one order for any page size — including names that sort between
/// a shard and its members (`a.tar-x`) or look like members (`a.tar/real`) — and a prefix
/// may reach into a shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_expands_shards_with_exact_paging() {
    let c = Cluster::start(3, 2).await.unwrap();
    c.create_bucket("ls").await.unwrap();
    let members = sample_members();
    let mut expected: Vec<(String, String)> = Vec::new(); // (sort key, display name)
    let mut add = |name: &str, files: &[(String, Vec<u8>)]| {
        expected.push((name.to_owned(), name.to_owned()));
        for (m, _) in files {
            expected.push((format!("{name}\0{m}"), format!("{name}/{m}")));
        }
    };
    for (i, format) in Format::ALL.iter().enumerate() {
        for j in 0..3 {
            let name = format!("d{j}/s{i}{}", format.extension());
            put(&c, "ls", &name, shard(*format, &members)).await;
            add(&name, &members);
        }
    }
    put(&c, "ls", "a.tar", shard(Format::Tar, &members[..3])).await;
    add("a.tar", &members[..3]);
    for plain in ["a.tar-x", "a.tar/real", "a", "zzz", "d1/x"] {
        put(&c, "ls", plain, b"x".to_vec()).await;
        add(plain, &[]);
    }
    put(&c, "ls", "broken.tar", b"not a tar at all".to_vec()).await;
    add("broken.tar", &[]);
    for i in 0..40 {
        let n = format!("p/{i:03}");
        put(&c, "ls", &n, vec![1; i]).await;
        add(&n, &[]);
    }
    expected.sort();
    let want: Vec<String> = expected.iter().map(|(_, d)| d.clone()).collect();
    let members_shown: HashSet<&str> = expected
        .iter()
        .filter(|(k, _)| k.contains('\0'))
        .map(|(_, d)| d.as_str())
        .collect();
    for page in [1, 3, 7, 50, 10_000] {
        let got = list_all(&c, "ls", "", page).await;
        let names: Vec<String> = got.iter().map(|e| e.0.clone()).collect();
        assert_eq!(names, want, "page size {page}");
        if page == 7 {
            for (name, flags, size) in &got {
                let in_arch = flags & (1 << 7) != 0;
                assert_eq!(in_arch, members_shown.contains(name.as_str()), "{name}");
                if name == "a.tar/a/0002.jpg" {
                    assert_eq!(*size, 3 << 20);
                }
                if name == "a.tar" {
                    assert!(flags & (1 << 9) != 0, "a.tar is flagged as an archive");
                }
            }
        }
    }
    // A prefix reaching into a shard: its matching members, plus real objects under it.
    let got: Vec<String> = list_all(&c, "ls", "a.tar/", 2)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    let want: Vec<String> = want
        .iter()
        .filter(|n| n.starts_with("a.tar/"))
        .cloned()
        .collect();
    assert_eq!(got, want);
    assert!(got.contains(&"a.tar/real".to_string()) && got.contains(&"a.tar/a/0001.jpg".into()));
    let got: Vec<String> = list_all(&c, "ls", "d1/s3.zip/a/0002", 1)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(got, ["d1/s3.zip/a/0002.cls", "d1/s3.zip/a/0002.jpg"]);
}

/// Acceptance: get-batch of 10,000 16 KiB members spread over 3 targets and 50 shards comes
/// back in request order, byte-identical; with 3 missing items and `coer` exactly those 3
/// are `__404__` entries; without `coer` the request fails up front with 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_batch_of_10000_members_in_order() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("gb").await.unwrap();
    let data = |s: usize, m: usize| content((s * 1000 + m) as u64, 16 * 1024);
    futures::stream::iter(0..50)
        .for_each_concurrent(8, |s| {
            let c = &c;
            async move {
                let members: Vec<(String, Vec<u8>)> = (0..200)
                    .map(|m| (format!("{s:02}/{m:03}.jpg"), data(s, m)))
                    .collect();
                put(
                    c,
                    "gb",
                    &format!("s-{s:04}.tar"),
                    shard(Format::Tar, &members),
                )
                .await;
            }
        })
        .await;
    let mut pairs: Vec<(usize, usize)> = (0..50)
        .flat_map(|s| (0..200).map(move |m| (s, m)))
        .collect();
    pairs.shuffle(&mut rand::rngs::StdRng::seed_from_u64(5));
    let item = |s: usize, m: usize| serde_json::json!({"objname": format!("s-{s:04}.tar"), "archpath": format!("{s:02}/{m:03}.jpg")});
    let items: Vec<serde_json::Value> = pairs.iter().map(|&(s, m)| item(s, m)).collect();
    let req = serde_json::json!({"in": items, "mime": ".tar", "strm": true});
    let t0 = Instant::now();
    let r = c
        .http
        .get(c.url("/v1/ml/moss/gb"))
        .json(&req)
        .send()
        .await
        .unwrap();
    let got = members_of(Format::Tar, ok_bytes(r).await);
    let took = t0.elapsed();
    assert_eq!(got.len(), 10_000);
    for (i, ((name, bytes), &(s, m))) in got.iter().zip(&pairs).enumerate() {
        assert_eq!(
            name,
            &format!("gb/s-{s:04}.tar/{s:02}/{m:03}.jpg"),
            "item {i}"
        );
        assert!(bytes == &data(s, m), "item {i} differs");
    }
    eprintln!("get-batch: 10,000 × 16 KiB in {took:?}");

    // Three missing: an object, a member of an existing shard, a member of a missing shard.
    let mut items = items;
    let holes = [
        (10, serde_json::json!({"objname": "none-1"})),
        (
            5000,
            serde_json::json!({"objname": "s-0007.tar", "archpath": "nope"}),
        ),
        (
            9999,
            serde_json::json!({"objname": "zzz.tar", "archpath": "m"}),
        ),
    ];
    for (at, it) in &holes {
        items.insert(*at, it.clone());
    }
    let req = serde_json::json!({"in": items, "coer": true, "strm": true});
    let r = c
        .http
        .get(c.url("/v1/ml/moss/gb"))
        .json(&req)
        .send()
        .await
        .unwrap();
    let got = members_of(Format::Tar, ok_bytes(r).await);
    assert_eq!(got.len(), 10_003);
    let missing: Vec<(usize, &str)> = got
        .iter()
        .enumerate()
        .filter(|(_, (n, _))| n.starts_with("__404__/"))
        .map(|(i, (n, _))| (i, n.as_str()))
        .collect();
    assert_eq!(
        missing,
        [
            (10, "__404__/gb/none-1"),
            (5000, "__404__/gb/s-0007.tar/nope"),
            (9999, "__404__/gb/zzz.tar/m")
        ]
    );
    assert!(
        got.iter()
            .filter(|(n, _)| n.starts_with("__404__/"))
            .all(|(_, d)| d.is_empty())
    );
    let req = serde_json::json!({"in": items, "strm": true});
    let r = c
        .http
        .get(c.url("/v1/ml/moss/gb"))
        .json(&req)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        404,
        "a missing item fails the request before any data"
    );

    // Other output formats, whole objects, ranges, object names only.
    let small: Vec<serde_json::Value> = vec![
        serde_json::json!({"objname": "s-0001.tar", "archpath": "01/005.jpg"}),
        serde_json::json!({"objname": "s-0002.tar", "archpath": "02/007.jpg", "start": 100, "length": 50}),
        serde_json::json!({"objname": "s-0003.tar", "bucket": "gb", "provider": "ais"}),
    ];
    for mime in [".tgz", ".tar.lz4", ".zip"] {
        let req = serde_json::json!({"in": small, "mime": mime, "onob": true, "strm": true});
        let r = c
            .http
            .get(c.url("/v1/ml/moss/gb"))
            .json(&req)
            .send()
            .await
            .unwrap();
        let got = members_of(Format::parse(mime).unwrap(), ok_bytes(r).await);
        assert_eq!(
            got[0],
            ("s-0001.tar/01/005.jpg".to_string(), data(1, 5)),
            "{mime}"
        );
        assert_eq!(got[1].1, data(2, 7)[100..150], "{mime}");
        assert_eq!(got[2].0, "s-0003.tar");
        assert_eq!(members_of(Format::Tar, got[2].1.clone()).len(), 200);
    }
    // Multipart (`strm: false`, AIStore's default): item metadata first, then the archive.
    let req = serde_json::json!({"in": [small[0], {"objname": "nope"}], "coer": true});
    let r = c
        .http
        .get(c.url("/v1/ml/moss/gb"))
        .json(&req)
        .send()
        .await
        .unwrap();
    let ct = r.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    let boundary = ct.split("boundary=").nth(1).unwrap().to_owned();
    let body = ok_bytes(r).await;
    let sep = format!("--{boundary}\r\n");
    let text = String::from_utf8_lossy(&body);
    let json_start = text.find("\r\n\r\n").unwrap() + 4;
    let json_end = text[json_start..].find("\r\n").unwrap() + json_start;
    let meta: serde_json::Value = serde_json::from_str(&text[json_start..json_end]).unwrap();
    assert_eq!(meta["out"][0]["size"], 16 * 1024);
    assert!(meta["out"][1]["err_msg"].as_str().unwrap().contains("nope"));
    let tar_at = body
        .windows(sep.len())
        .rposition(|w| w == sep.as_bytes())
        .unwrap()
        + sep.len();
    let tar_at = tar_at
        + body[tar_at..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap()
        + 4;
    let tar_end = body.len() - format!("\r\n--{boundary}--\r\n").len();
    let got = members_of(Format::Tar, body[tar_at..tar_end].to_vec());
    assert_eq!(got[0].1, data(1, 5));
    assert_eq!(got[1].0, "__404__/gb/nope");
    // The CLI.
    let list = c.dir.path().join("list.txt");
    std::fs::write(&list, "s-0004.tar\t04/001.jpg\ns-0004.tar\t04/000.jpg\n").unwrap();
    let out = c.dir.path().join("out.tar");
    c.grist_ok(&[
        "batch",
        "ais://gb",
        "-f",
        list.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let got = members_of(Format::Tar, std::fs::read(&out).unwrap());
    assert_eq!(got[0], ("gb/s-0004.tar/04/001.jpg".to_string(), data(4, 1)));
    assert_eq!(got[1].1, data(4, 0));
}

/// Appends (`PUT ?archpath=`) make new versions of the shard: created if missing, serialized
/// when concurrent, 409 for a name it has; the archive job packs one shard (and appends to
/// it) or a series of shards of a target size with names that never collide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_and_archive_jobs() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("ap").await.unwrap();
    let append = |shard: &'static str, member: String, body: Vec<u8>| {
        let c = &c;
        async move {
            c.http
                .put(c.url(&obj_path("ap", shard)))
                .query(&[("archpath", member.as_str())])
                .body(body)
                .send()
                .await
                .unwrap()
        }
    };
    for fmt in ["x.tar", "y.zip", "z.tgz"] {
        let r = append(fmt, "first.txt".into(), b"one".to_vec()).await;
        assert!(
            r.status().is_success(),
            "{fmt}: {}",
            r.text().await.unwrap()
        );
        let r = append(fmt, "second/2.bin".into(), content(2, 100_000)).await;
        assert!(r.status().is_success());
        let r = append(fmt, "first.txt".into(), b"again".to_vec()).await;
        assert_eq!(r.status(), 409, "{fmt}");
        let got = ok_bytes(get_q(&c, "ap", fmt, &[("archpath", "second/2.bin")]).await).await;
        assert_eq!(got, content(2, 100_000));
        let got = ok_bytes(get_q(&c, "ap", fmt, &[("archpath", "first.txt")]).await).await;
        assert_eq!(got, b"one");
    }
    // Concurrent appends all land.
    futures::stream::iter(0..20)
        .for_each_concurrent(20, |i| async move {
            let r = append(
                "x.tar",
                format!("par/{i:02}"),
                content(i, 1000 + i as usize),
            )
            .await;
            assert!(r.status().is_success());
        })
        .await;
    let whole = ok_bytes(get_q(&c, "ap", "x.tar", &[]).await).await;
    let got = members_of(Format::Tar, whole);
    assert_eq!(got.len(), 22);
    for i in 0..20u64 {
        let (_, d) = got
            .iter()
            .find(|(n, _)| n == &format!("par/{i:02}"))
            .unwrap();
        assert_eq!(d, &content(i, 1000 + i as usize));
    }

    // Archive job: one shard, from a template, members in template order.
    c.create_bucket("src").await.unwrap();
    for i in 0..30u64 {
        put(
            &c,
            "src",
            &format!("obj-{i:03}"),
            content(100 + i, 500 + 37 * i as usize),
        )
        .await;
    }
    let out = c.grist_ok(&[
        "archive",
        "bucket",
        "ais://src",
        "ais://arch/one.tar",
        "--template",
        "obj-{000..019}",
        "--wait",
        "--json",
    ]);
    assert!(out.contains("\"finished\""), "{out}");
    let got = members_of(
        Format::Tar,
        ok_bytes(get_q(&c, "arch", "one.tar", &[]).await).await,
    );
    let names: Vec<String> = got.iter().map(|(n, _)| n.clone()).collect();
    let want: Vec<String> = (0..20).map(|i| format!("obj-{i:03}")).collect();
    assert_eq!(names, want);
    for (i, (_, d)) in got.iter().enumerate() {
        assert_eq!(d, &content(100 + i as u64, 500 + 37 * i));
    }
    // AIStore's archive action, appending (`aate`) the rest with bucket names (`isbn`).
    let names: Vec<String> = (20..30).map(|i| format!("obj-{i:03}")).collect();
    let r = c
        .http
        .put(c.url("/v1/buckets/src"))
        .json(&serde_json::json!({"action": "archive", "value": {
            "archname": "one.tar", "objnames": names, "aate": true, "isbn": true,
            "tobck": {"name": "arch", "provider": "ais"}}}))
        .send()
        .await
        .unwrap();
    let id = ok_bytes(r).await;
    let id = String::from_utf8(id).unwrap();
    c.grist_ok(&["job", "wait", &id]);
    let got = members_of(
        Format::Tar,
        ok_bytes(get_q(&c, "arch", "one.tar", &[]).await).await,
    );
    assert_eq!(got.len(), 30);
    assert_eq!(got[29].0, "src/obj-029");
    assert_eq!(got[29].1, content(129, 500 + 37 * 29));

    // Series: each target packs its own objects; names interleave, never collide.
    let out = c.grist_ok(&[
        "archive",
        "bucket",
        "ais://src",
        "ais://arch/ser-{0000..}.tgz",
        "--shard-size",
        "4KiB",
        "--wait",
        "--json",
    ]);
    assert!(out.contains("\"finished\""), "{out}");
    let listed = list_all(&c, "arch", "ser-", 1000).await;
    let shards: Vec<&String> = listed
        .iter()
        .filter(|e| e.1 & (1 << 7) == 0)
        .map(|e| &e.0)
        .collect();
    assert!(shards.len() > 3, "{shards:?}");
    let mut seen = HashSet::new();
    for s in &shards {
        for (n, d) in members_of(Format::Tgz, ok_bytes(get_q(&c, "arch", s, &[]).await).await) {
            let i: u64 = n[4..].parse().unwrap();
            assert_eq!(d, content(100 + i, 500 + 37 * i as usize));
            assert!(seen.insert(n), "an object in two shards");
        }
    }
    assert_eq!(seen.len(), 30);
}

/// A hostile corpus through the API: clear 4xx, never a crash, and the node keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_shards_get_clear_4xx() {
    let c = Cluster::start(1, 1).await.unwrap();
    c.create_bucket("evil").await.unwrap();
    let good = shard(Format::Tar, &[("ok.txt".into(), b"fine".to_vec())]);
    let mut truncated = good.clone();
    truncated.truncate(700);
    let mut escape = ustar_header("../../etc/passwd", 4);
    escape.extend_from_slice(b"root");
    escape.extend(vec![0u8; 508 + 1024]);
    let mut link = ustar_header("link", 0);
    link[156] = b'2';
    link[148..156].copy_from_slice(b"        ");
    let sum: u32 = link.iter().map(|&b| u32::from(b)).sum();
    link[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    link.extend(vec![0u8; 1024]);
    let mut dup = Vec::new();
    for _ in 0..2 {
        dup.extend(ustar_header("same", 1));
        dup.push(b'x');
        dup.extend(vec![0u8; 511]);
    }
    dup.extend(vec![0u8; 1024]);
    // 256 MiB of zeros in a tgz: a ~1000:1 ratio, past the 500:1 bound.
    use std::io::Read as _;
    let bomb = {
        let mut w = ShardWriter::new(Format::Tgz, Vec::new(), 0);
        w.append("zeros", 256 << 20, &mut std::io::repeat(0).take(256 << 20))
            .unwrap();
        w.finish().unwrap()
    };
    let corpus: Vec<(&str, Vec<u8>, u16)> = vec![
        ("garbage.tar", content(9, 5000), 400),
        ("garbage.zip", content(10, 5000), 400),
        ("garbage.tgz", content(11, 5000), 400),
        ("truncated.tar", truncated, 400),
        ("escape.tar", escape, 400),
        ("link.tar", link, 400),
        ("dup.tar", dup, 400),
        ("bomb.tgz", bomb, 413),
    ];
    put(&c, "evil", "good.tar", good).await;
    for (name, data, status) in &corpus {
        put(&c, "evil", name, data.clone()).await;
        let r = get_q(&c, "evil", name, &[("archpath", "ok.txt")]).await;
        assert_eq!(
            r.status().as_u16(),
            *status,
            "{name}: {}",
            r.text().await.unwrap()
        );
        let r = get_q(
            &c,
            "evil",
            name,
            &[("archregx", "."), ("archmode", "regexp")],
        )
        .await;
        assert_eq!(r.status().as_u16(), *status, "{name} archregx");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(
            !body["message"].as_str().unwrap_or("").is_empty(),
            "{name}: a message"
        );
        // get-batch: without coer the request fails; with it, an `__404__` entry.
        let req = serde_json::json!({"in": [{"objname": name, "archpath": "ok.txt"}, {"objname": "good.tar", "archpath": "ok.txt"}], "strm": true});
        let r = c
            .http
            .get(c.url("/v1/ml/moss/evil"))
            .json(&req)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_client_error(), "{name}: {}", r.status());
        let req = serde_json::json!({"in": [{"objname": name, "archpath": "ok.txt"}, {"objname": "good.tar", "archpath": "ok.txt"}], "coer": true, "strm": true});
        let r = c
            .http
            .get(c.url("/v1/ml/moss/evil"))
            .json(&req)
            .send()
            .await
            .unwrap();
        let got = members_of(Format::Tar, ok_bytes(r).await);
        assert_eq!(got[0].0, format!("__404__/evil/{name}/ok.txt"));
        assert_eq!(got[1].1, b"fine");
    }
    // Appending to a broken shard is refused too.
    let r = c
        .http
        .put(c.url(&obj_path("evil", "garbage.tar")))
        .query(&[("archpath", "new")])
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // Still serving: a listing that expands shards, and plain reads.
    let listed = list_all(&c, "evil", "", 100).await;
    assert!(listed.iter().any(|e| e.0 == "good.tar/ok.txt"));
    assert!(listed.iter().any(|e| e.0 == "bomb.tgz"));
    let got = ok_bytes(get_q(&c, "evil", "good.tar", &[("archpath", "ok.txt")]).await).await;
    assert_eq!(got, b"fine");
}

/// Reads one whole output shard's samples: (key, [(name, size)]) in archive order.
fn samples_of(data: Vec<u8>) -> Vec<(String, Vec<(String, usize)>)> {
    let mut out: Vec<(String, Vec<(String, usize)>)> = Vec::new();
    for (n, d) in members_of(Format::Tar, data) {
        let key = wds_key(&n).0.to_owned();
        match out.last_mut() {
            Some((k, files)) if *k == key => files.push((n, d.len())),
            _ => out.push((key, vec![(n, d.len())])),
        }
    }
    out
}

/// Downloads a reshard's output shards (in name order) and checks: every input sample exactly
/// once, never split, sizes near the target; returns the keys in output order and each
/// shard's checksum.
async fn check_output(
    c: &Cluster,
    bucket: &str,
    prefix: &str,
    inputs: usize,
) -> (Vec<String>, Vec<String>) {
    let names: Vec<String> = list_flags(c, bucket, prefix, 10_000, 0)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert!(names.len() >= 3, "{names:?}");
    let mut keys = Vec::new();
    let mut seen = HashSet::new();
    let mut sums = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let r = get_q(c, bucket, n, &[]).await;
        sums.push(
            r.headers()["ais-checksum-value"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
        let data = ok_bytes(r).await;
        let len = data.len() as u64;
        if i + 1 < names.len() {
            assert!(
                ((64 << 20)..(64 << 20) + (64 << 10)).contains(&len),
                "{n}: {len} bytes"
            );
        }
        for (key, files) in samples_of(data) {
            assert_eq!(files.len(), 3, "{key} split or incomplete in {n}");
            let exts: Vec<&str> = files.iter().map(|f| wds_key(&f.0).1).collect();
            assert_eq!(exts, ["jpg", "cls", "json"]);
            assert_eq!(files[0].1, 512);
            assert!(seen.insert(key.clone()), "{key} twice");
            keys.push(key);
        }
    }
    assert_eq!(keys.len(), inputs, "every sample exactly once");
    (keys, sums)
}

/// Acceptance: reshard 200 input shards × 500 samples × 3 files into ~64 MiB shards: every
/// sample exactly once and never split; alphanumeric order (sorting with spills to disk),
/// seeded shuffle (the expected permutation), and the same seed gives the same output bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_200_shards_into_64mib_shards() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("in").await.unwrap();
    c.grist_ok(&[
        "archive",
        "gen-shards",
        "ais://in/in-{000..}.tar",
        "--count",
        "200",
        "--samples",
        "500",
        "--sample-size",
        "512",
        "--exts",
        "jpg,cls,json",
    ]);
    let reshard = |out: &str, extra: &[&str]| {
        let mut a = vec![
            "reshard",
            "ais://in",
            "--template",
            "in-{000..199}.tar",
            "--output",
            out,
            "--to",
            "ais://out",
            "--shard-size",
            "64MiB",
            "--wait",
            "--json",
        ];
        a.extend_from_slice(extra);
        let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        let (endpoint, bin) = (
            c.endpoint.clone(),
            gristmill_tests::gristd_bin().with_file_name("grist"),
        );
        async move {
            let t0 = Instant::now();
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new(bin)
                    .args(&a)
                    .env("GRIST_ENDPOINT", endpoint)
                    .output()
                    .unwrap()
            })
            .await
            .unwrap();
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(s["state"], "finished");
            assert!(s["objects"].as_u64().unwrap() >= 200);
            eprintln!("reshard {:?}: {:?}", s["id"], t0.elapsed());
        }
    };
    // Alphanumeric, with the coordinator's memory bounded to 20,000 records (5 sorted runs
    // spilled to disk and merged).
    reshard("alpha-{000..}", &["--max-mem-records", "20000"]).await;
    let (keys, _) = check_output(&c, "out", "alpha-", 100_000).await;
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "alphanumeric order");
    // Shuffle: the seeded permutation, whatever order records arrived in.
    reshard("shuf-{000..}", &["--algorithm", "shuffle", "--seed", "42"]).await;
    let (shuffled, sums) = check_output(&c, "out", "shuf-", 100_000).await;
    let mut want = keys.clone();
    let seed = xxh64(b"42", 0);
    want.sort_by_key(|k| (xxh64(k.as_bytes(), seed), k.clone()));
    assert_eq!(shuffled, want, "shuffle follows the seed");
    // Same seed, same output, byte for byte.
    reshard("again-{000..}", &["--algorithm", "shuffle", "--seed", "42"]).await;
    let (again, sums2) = check_output(&c, "out", "again-", 100_000).await;
    assert_eq!(again, shuffled);
    assert_eq!(sums, sums2, "same seed → identical shards");
    // Spot-check contents against the inputs.
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let picks: Vec<&String> = shuffled.choose_multiple(&mut rng, 20).collect();
    for key in picks {
        let shard_no: usize = key[7..13].parse().unwrap();
        let input = format!("in-{shard_no:03}.tar");
        let member = format!("{key}.jpg");
        let a = ok_bytes(get_q(&c, "in", &input, &[("archpath", &member)]).await).await;
        let req = serde_json::json!({"in": [{"objname": input, "archpath": member}], "strm": true});
        let r = c
            .http
            .get(c.url("/v1/ml/moss/in"))
            .json(&req)
            .send()
            .await
            .unwrap();
        assert_eq!(members_of(Format::Tar, ok_bytes(r).await)[0].1, a);
    }
}

/// Shards of a remote (S3) bucket: `archpath` cold-fetches the shard first; get-batch fetches
/// uncached items as needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_shards_are_fetched_then_read() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-shards").send().await.unwrap();
    let members = sample_members();
    put_direct(&s3, "gm-shards", "r.tar", shard(Format::Tar, &members)).await;
    put_direct(&s3, "gm-shards", "r.zip", shard(Format::Zip, &members)).await;
    put_direct(&s3, "gm-shards", "plain", b"plain object".to_vec()).await;
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster(&relay).await;
    let got = ok_bytes(
        c.http
            .get(obj_url(&c, "gm-shards", "r.tar"))
            .query(&[("archpath", "a/0002.jpg")])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(got, members[2].1);
    let req = serde_json::json!({"in": [
        {"objname": "r.zip", "archpath": "a/0001.jpg"},
        {"objname": "plain"},
        {"objname": "r.tar", "archpath": "empty.txt"},
        {"objname": "missing.tar", "archpath": "x"}], "coer": true, "strm": true});
    let r = c
        .http
        .get(c.url("/v1/ml/moss/gm-shards?provider=aws"))
        .json(&req)
        .send()
        .await
        .unwrap();
    let got = members_of(Format::Tar, ok_bytes(r).await);
    assert_eq!(
        got[0],
        (
            "gm-shards/r.zip/a/0001.jpg".to_string(),
            members[0].1.clone()
        )
    );
    assert_eq!(got[1].1, b"plain object");
    assert_eq!(got[2].1, b"");
    assert_eq!(got[3].0, "__404__/gm-shards/missing.tar/x");
    let gets = relay.object_gets.load(std::sync::atomic::Ordering::SeqCst);
    let again = c
        .http
        .get(obj_url(&c, "gm-shards", "r.tar"))
        .query(&[("archpath", "a/0001.cls")])
        .send()
        .await
        .unwrap();
    assert_eq!(ok_bytes(again).await, b"7\n");
    assert_eq!(
        relay.object_gets.load(std::sync::atomic::Ordering::SeqCst),
        gets,
        "a cached shard is read locally"
    );
}

/// Reshard variants on a small set: an external key → shard map (into .tgz), input order
/// (`none`), decreasing keys, a dry run, and a bad spec refused up front.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_key_map_input_order_and_dry_run() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("kin").await.unwrap();
    c.grist_ok(&[
        "archive",
        "gen-shards",
        "ais://kin/k-{0..}.tar",
        "--count",
        "4",
        "--samples",
        "10",
        "--sample-size",
        "100",
        "--exts",
        "jpg,cls",
    ]);
    let key = |s: u64, i: u64| format!("sample-{s:06}-{i:06}");
    // Even samples to evens.tgz, odd ones to odds.tgz.
    let (mut evens, mut odds) = (Vec::new(), Vec::new());
    for s in 0..4 {
        for i in 0..10 {
            if i % 2 == 0 {
                evens.push(key(s, i))
            } else {
                odds.push(key(s, i))
            }
        }
    }
    let ekm = c.dir.path().join("ekm.json");
    std::fs::write(
        &ekm,
        serde_json::json!({"evens": evens, "odds": odds}).to_string(),
    )
    .unwrap();
    c.grist_ok(&[
        "reshard",
        "ais://kin",
        "--template",
        "k-{0..3}.tar",
        "--output",
        "unused-{0..}",
        "--to",
        "ais://kout",
        "--ext",
        ".tgz",
        "--ekm",
        ekm.to_str().unwrap(),
        "--wait",
    ]);
    for (name, want) in [("evens.tgz", &evens), ("odds.tgz", &odds)] {
        let got = members_of(
            Format::Tgz,
            ok_bytes(get_q(&c, "kout", name, &[]).await).await,
        );
        let keys: Vec<String> = got
            .iter()
            .step_by(2)
            .map(|(n, _)| wds_key(n).0.to_owned())
            .collect();
        let mut sorted = want.clone();
        sorted.sort();
        assert_eq!(&keys, &sorted, "{name}");
        assert!(
            got.iter()
                .all(|(n, _)| want.contains(&wds_key(n).0.to_owned()))
        );
    }
    // Input order: shards as listed, samples as archived; 3 samples per output shard.
    c.grist_ok(&[
        "reshard",
        "ais://kin",
        "--template",
        "k-{0..3}.tar",
        "--output",
        "io-{00..}",
        "--to",
        "ais://kout",
        "--algorithm",
        "none",
        "--shard-size",
        "1",
        "--wait",
    ]);
    let outs: Vec<String> = list_flags(&c, "kout", "io-", 1000, 0)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(outs.len(), 40, "one sample per shard with a 1-byte target");
    let mut keys = Vec::new();
    for o in &outs {
        for (k, _) in samples_of(ok_bytes(get_q(&c, "kout", o, &[]).await).await) {
            keys.push(k);
        }
    }
    let want: Vec<String> = (0..4)
        .flat_map(|s| (0..10).map(move |i| key(s, i)))
        .collect();
    assert_eq!(keys, want);
    // Decreasing, dry run: plans but writes nothing.
    let out = c.grist_ok(&[
        "reshard",
        "ais://kin",
        "--template",
        "k-{0..3}.tar",
        "--output",
        "dry-{0..}",
        "--to",
        "ais://kout",
        "--decreasing",
        "--shard-size",
        "1KiB",
        "--dry-run",
        "--wait",
        "--json",
    ]);
    assert!(out.contains("\"finished\""), "{out}");
    assert!(list_flags(&c, "kout", "dry-", 1000, 0).await.is_empty());
    // Bad specs: no size and no key map; an unknown algorithm fails the job.
    let bad = c.grist(&[
        "reshard",
        "ais://kin",
        "--template",
        "k-{0..3}.tar",
        "--output",
        "x-{0..}",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("output_shard_size"));
}
