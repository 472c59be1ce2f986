//! Zero-copy warm GETs (`sendfile`, see `node/src/zero_copy.rs`): byte-identical answers for
//! whole, range, multi-range (answered whole) and empty objects; HTTP/1.1 kept exact on a
//! connection that mixes zero-copy bodies with heads, errors, pipelining and `close`; and the
//! documented verification policy — the first whole read after the node cached the object's
//! record is checked, a later one goes zero-copy, `?validate_checksum=true` always checks, and
//! a restart checks again.

use std::time::Duration;

use gristmill_tests::{Cluster, content};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::scrub::{LARGE, copies_of, flip, get, metric, mountpaths_by_id, obj, put};

/// Above the read-with-lookup limit (128 KiB) by one byte: the smallest streamed object.
const JUST_STREAMED: usize = 128 * 1024 + 1;

/// GET with a `Range` header: (status, Content-Range, body).
async fn get_range(c: &Cluster, url: &str, range: &str) -> (u16, Option<String>, Vec<u8>) {
    let r = c.http.get(url).header("range", range).send().await.unwrap();
    let status = r.status().as_u16();
    let cr = r
        .headers()
        .get("content-range")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, cr, r.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zero_copy_gets_return_exact_bytes_for_whole_range_and_empty_objects() {
    let c = Cluster::start(2, 1).await.unwrap();
    c.create_bucket("zc").await.unwrap();
    let objects = [
        ("empty", Vec::new()),
        ("small", content(1, 4096)),
        ("edge", content(2, JUST_STREAMED)),
        ("large", content(3, LARGE)),
    ];
    for (name, data) in &objects {
        put(&c, "zc", name, data).await;
    }
    let before = metric(&c, &c.smap().await.unwrap(), "grist_get_zero_copy_total").await;
    for (name, data) in &objects {
        let url = obj(&c, "zc", name);
        // The first whole read is the verified one; the next ones go zero-copy.
        for round in 0..3 {
            let (status, body) = get(&c, &url).await;
            assert_eq!(status, 200, "{name} round {round}");
            assert!(body.as_deref() == Some(&data[..]), "{name} round {round}");
        }
        let len = data.len() as u64;
        if len == 0 {
            let (status, _, body) = get_range(&c, &url, "bytes=0-").await;
            assert!(
                status == 416 || (status == 200 && body.is_empty()),
                "{status}"
            );
            continue;
        }
        let cases = [
            (0, 0),
            (len / 2, len - 1),
            (len.saturating_sub(77), len - 1),
            (1, len.min(131_999) - 1),
        ];
        for (from, to) in cases {
            if from > to {
                continue;
            }
            for spec in [format!("bytes={from}-{to}"), format!("bytes={from}-")] {
                let end = if spec.ends_with('-') { len - 1 } else { to };
                let (status, cr, body) = get_range(&c, &url, &spec).await;
                assert_eq!(status, 206, "{name} {spec}");
                assert_eq!(
                    cr.unwrap(),
                    format!("bytes {from}-{end}/{len}"),
                    "{name} {spec}"
                );
                assert!(
                    body == data[from as usize..=end as usize],
                    "{name} {spec}: wrong bytes"
                );
            }
        }
        let suffix = format!("bytes=-{}", len.min(77));
        let (status, _, body) = get_range(&c, &url, &suffix).await;
        assert_eq!(status, 206);
        assert!(body == data[data.len() - (len.min(77) as usize)..]);
        // Several ranges are answered with the whole object (RFC 9110 allows it).
        let (status, cr, body) = get_range(&c, &url, "bytes=0-1,3-4").await;
        assert_eq!((status, cr), (200, None), "{name} multi-range");
        assert!(body == *data, "{name} multi-range: the whole object");
        let (status, _, _) = get_range(&c, &url, &format!("bytes={len}-")).await;
        assert_eq!(status, 416, "{name}: a range past the end");
    }
    let smap = c.smap().await.unwrap();
    let used = metric(&c, &smap, "grist_get_zero_copy_total").await - before;
    // 2 streamed objects x (2 whole re-reads + 8 ranges + suffix + multi-range) at least.
    // At least one GET per streamed object and case (the page cache could in principle drop
    // a file between the write and the read; then that GET is copied, not wrong).
    assert!(used >= 12, "zero-copy served {used} GETs");
    println!("warm_get: {used} GETs went zero-copy");
}

/// One response read off a raw HTTP/1.1 connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Splits `raw` into responses; `heads` marks which requests were HEADs (no body). `None`
/// while some response is incomplete.
fn parse_answers(mut raw: &[u8], heads: &[bool]) -> Option<Vec<Answer>> {
    let mut out = Vec::new();
    for &head in heads {
        let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
        let text = std::str::from_utf8(&raw[..end]).unwrap();
        let mut lines = text.split("\r\n");
        let status: u16 = lines.next().unwrap()[9..12].parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .map(|l| {
                let (k, v) = l.split_once(':').unwrap();
                (k.trim().to_owned(), v.trim().to_owned())
            })
            .collect();
        raw = &raw[end + 4..];
        let mut a = Answer {
            status,
            headers,
            body: Vec::new(),
        };
        assert!(a.header("transfer-encoding").is_none(), "{a:?}");
        if !head && status != 304 {
            let len: usize = a.header("content-length").unwrap().parse().unwrap();
            a.body = raw.get(..len)?.to_vec();
            raw = &raw[len..];
        }
        out.push(a);
    }
    assert!(
        raw.is_empty(),
        "{} stray bytes after the last response",
        raw.len()
    );
    Some(out)
}

/// Keep-alive, pipelining, HEAD, errors, 304 and `Connection: close` on one plain connection
/// to the target, mixing zero-copy bodies with everything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http11_stays_exact_around_zero_copy_bodies() {
    let c = Cluster::start(1, 1).await.unwrap();
    c.create_bucket("zk").await.unwrap();
    let large = content(7, LARGE);
    let edge = content(8, JUST_STREAMED);
    put(&c, "zk", "large", &large).await;
    put(&c, "zk", "edge", &edge).await;
    for name in ["large", "edge"] {
        get(&c, &obj(&c, "zk", name)).await; // the verified first read
    }
    let smap = c.smap().await.unwrap();
    let target = smap.tmap.values().next().unwrap().url();
    let addr = target.trim_start_matches("http://").to_owned();
    let path = |name: &str| format!("/v1/objects/zk/{name}");
    let etag = c
        .http
        .head(obj(&c, "zk", "large"))
        .send()
        .await
        .unwrap()
        .headers()
        .get("etag")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let requests = [
        (
            format!("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", path("large")),
            false,
        ),
        (
            format!("HEAD {} HTTP/1.1\r\nHost: t\r\n\r\n", path("large")),
            true,
        ),
        (
            format!(
                "GET {} HTTP/1.1\r\nHost: t\r\nRange: bytes=5-1000004\r\n\r\n",
                path("large")
            ),
            false,
        ),
        (
            format!("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", path("missing")),
            false,
        ),
        (
            format!(
                "GET {} HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n",
                path("large")
            ),
            false,
        ),
        (
            format!("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", path("edge")),
            false,
        ),
        (
            format!(
                "GET {} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                path("large")
            ),
            false,
        ),
    ];
    // All at once (pipelined), then the same one by one on a kept-alive connection.
    for pipelined in [true, false] {
        let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let mut raw = Vec::new();
        if pipelined {
            let all: String = requests.iter().map(|(r, _)| r.as_str()).collect();
            tcp.write_all(all.as_bytes()).await.unwrap();
        } else {
            for (i, (r, head)) in requests.iter().enumerate() {
                tcp.write_all(r.as_bytes()).await.unwrap();
                // Read this answer whole before sending the next request.
                let heads: Vec<bool> = requests[..=i].iter().map(|(_, h)| *h).collect();
                let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
                loop {
                    let mut buf = vec![0u8; 1 << 20];
                    let n = tokio::time::timeout_at(deadline, tcp.read(&mut buf))
                        .await
                        .expect("an answer in time")
                        .unwrap();
                    raw.extend_from_slice(&buf[..n]);
                    if n == 0 || parse_answers(&raw, &heads).is_some() {
                        break;
                    }
                }
                let _ = head;
            }
        }
        // The last request asked to close: the server ends the connection after it.
        tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut raw))
            .await
            .expect("the server closes after `Connection: close`")
            .unwrap();
        let heads: Vec<bool> = requests.iter().map(|(_, h)| *h).collect();
        let answers = parse_answers(&raw, &heads).expect("every response complete");
        let what = if pipelined { "pipelined" } else { "one by one" };
        assert_eq!(answers[0].status, 200, "{what}");
        assert!(answers[0].body == large, "{what}: whole");
        assert_eq!(answers[1].status, 200);
        assert_eq!(
            answers[1].header("content-length"),
            Some(LARGE.to_string().as_str())
        );
        assert_eq!(answers[2].status, 206);
        assert!(answers[2].body == large[5..=1_000_004], "{what}: range");
        assert_eq!(answers[3].status, 404, "{what}: {:?}", answers[3]);
        assert!(String::from_utf8_lossy(&answers[3].body).contains("missing"));
        assert_eq!(answers[4].status, 304);
        assert_eq!(answers[5].status, 200);
        assert!(answers[5].body == edge, "{what}: edge");
        assert!(answers[6].body == large, "{what}: last");
    }
}

/// What the documented policy verifies is never served corrupt: the first whole read after a
/// write, any read with `?validate_checksum=true`, and the first whole read after a restart —
/// for streamed objects and for small ones (read whole before they are sent); a small
/// object's later plain reads skip the check and go zero-copy, as streamed ones do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_the_policy_verifies_never_serve_a_corrupt_copy() {
    let mut c = Cluster::start(1, 1).await.unwrap();
    c.create_bucket("zv").await.unwrap();
    let broken_or_refused = |status: u16, body: &Option<Vec<u8>>| status != 200 || body.is_none();

    for (size, kind, seed) in [(LARGE, "large", 11), (16 * 1024, "small", 21)] {
        // (after the restart of the round before: the target's address is new)
        let smap = c.smap().await.unwrap();
        let layout = mountpaths_by_id(&c, &smap).await;
        // (1) Flipped before its first read: that read is verified.
        let first = content(seed, size);
        put(&c, "zv", &format!("first-{kind}"), &first).await;
        flip(&copies_of(&layout, &first)[0].1, size - 3);
        let (status, body) = get(&c, &obj(&c, "zv", &format!("first-{kind}"))).await;
        assert!(
            broken_or_refused(status, &body),
            "{kind}: corrupt first read served"
        );

        // (2) Verified once, then flipped: an explicit check still catches it.
        let later = content(seed + 1, size);
        let url = obj(&c, "zv", &format!("later-{kind}"));
        put(&c, "zv", &format!("later-{kind}"), &later).await;
        let zero_copy = metric(&c, &smap, "grist_get_zero_copy_total").await;
        let (status, body) = get(&c, &url).await;
        assert!(status == 200 && body.as_deref() == Some(&later[..]));
        assert_eq!(
            metric(&c, &smap, "grist_get_zero_copy_total").await,
            zero_copy,
            "{kind}: the verified first read was not zero-copy"
        );
        let (status, body) = get(&c, &url).await;
        assert!(status == 200 && body.as_deref() == Some(&later[..]));
        assert_eq!(
            metric(&c, &smap, "grist_get_zero_copy_total").await,
            zero_copy + 1,
            "{kind}: a read after the verified one goes zero-copy"
        );
        flip(&copies_of(&layout, &later)[0].1, 17);
        let checked = format!("{url}?validate_checksum=true");
        let (status, body) = get(&c, &checked).await;
        assert!(
            broken_or_refused(status, &body),
            "{kind}: explicit check served corrupt"
        );

        // (3) Verified once, flipped, node restarted: the first read after it is verified again.
        let restarted = content(seed + 2, size);
        put(&c, "zv", &format!("restarted-{kind}"), &restarted).await;
        let url = obj(&c, "zv", &format!("restarted-{kind}"));
        let (status, body) = get(&c, &url).await;
        assert!(status == 200 && body.as_deref() == Some(&restarted[..]));
        let file = copies_of(&layout, &restarted)[0].1.clone();
        let back_before = c.targets[0]
            .log_text()
            .matches("back in the cluster")
            .count();
        c.targets[0].stop();
        flip(&file, 4096);
        c.restart_target(0).await.unwrap();
        let (status, body) = get(&c, &obj(&c, "zv", &format!("restarted-{kind}"))).await;
        assert!(
            broken_or_refused(status, &body),
            "{kind}: corrupt read after restart served"
        );
        // A restarted target checks its copies against the index until placement is
        // confirmed (reads then skip the record cache): the next round starts after that.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while c.targets[0]
            .log_text()
            .matches("back in the cluster")
            .count()
            <= back_before
        {
            assert!(
                std::time::Instant::now() < deadline,
                "not back after its restart"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Zero-copy bodies stay whole and exact while their objects are overwritten: readers on
/// kept-alive connections GET objects (1 MiB) that a writer keeps replacing; every answer is
/// a complete copy of one of the versions written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zero_copy_gets_stay_whole_while_objects_are_overwritten() {
    const N: usize = 6;
    const VERSIONS: u64 = 5;
    const SIZE: usize = (1 << 20) + 3;
    let c = Cluster::start(2, 1).await.unwrap();
    c.create_bucket("zo").await.unwrap();
    let version = |i: usize, v: u64| content(1000 * i as u64 + v, SIZE);
    let digests: std::collections::HashSet<u64> = (0..N)
        .flat_map(|i| (0..VERSIONS).map(move |v| (i, v)))
        .map(|(i, v)| xxhash_rust::xxh3::xxh3_64(&version(i, v)))
        .collect();
    for i in 0..N {
        put(&c, "zo", &format!("o{i}"), &version(i, 0)).await;
    }
    let smap = c.smap().await.unwrap();
    let before = metric(&c, &smap, "grist_get_zero_copy_total").await;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..6)
        .map(|r| {
            let (http, done, digests) = (c.http.clone(), done.clone(), digests.clone());
            let urls: Vec<String> = (0..N).map(|i| obj(&c, "zo", &format!("o{i}"))).collect();
            tokio::spawn(async move {
                let mut reads = 0usize;
                let mut k = r;
                while !done.load(std::sync::atomic::Ordering::SeqCst) || reads < 20 {
                    k = (k + 7) % N;
                    let resp = http.get(&urls[k]).send().await.unwrap();
                    assert_eq!(resp.status(), 200);
                    let body = resp.bytes().await.expect("a whole body");
                    assert_eq!(body.len(), SIZE, "o{k}: short body");
                    let d = xxhash_rust::xxh3::xxh3_64(&body);
                    assert!(digests.contains(&d), "o{k}: bytes of no version");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for v in 1..VERSIONS {
        for i in 0..N {
            put(&c, "zo", &format!("o{i}"), &version(i, v)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut reads = 0;
    for r in readers {
        reads += r.await.unwrap();
    }
    let used = metric(&c, &smap, "grist_get_zero_copy_total").await - before;
    println!("warm_get: {reads} GETs during overwrites, {used} zero-copy");
    assert!(used > 0, "no GET went zero-copy");
}
