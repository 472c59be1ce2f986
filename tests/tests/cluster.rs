//! Integration tests: real `gristd` processes on 127.0.0.1, driven over HTTP.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use futures::StreamExt;
use gristmill_core::api::ListObjectsPage;
use gristmill_core::{Bck, hrw};
use gristmill_tests::{Cluster, content};
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "cluster/auth.rs"]
mod auth;
#[path = "cluster/backend.rs"]
mod backend;
#[path = "cluster/chunks.rs"]
mod chunks;
#[path = "cluster/coldfill.rs"]
mod coldfill;
#[path = "cluster/control_plane.rs"]
mod control_plane;
#[path = "cluster/crates.rs"]
mod crates;
#[path = "cluster/elastic.rs"]
mod elastic;
#[path = "cluster/etl.rs"]
mod etl;
#[path = "cluster/exact.rs"]
mod exact;
#[path = "cluster/hardening.rs"]
mod hardening;
#[path = "cluster/jobs.rs"]
mod jobs;
#[path = "cluster/ops.rs"]
mod ops;
#[path = "cluster/proxies.rs"]
mod proxies;
#[path = "cluster/remote.rs"]
mod remote;
#[path = "cluster/resilver.rs"]
mod resilver;
#[path = "cluster/restarts.rs"]
mod restarts;
#[path = "cluster/returns.rs"]
mod returns;
#[path = "cluster/s3.rs"]
mod s3;
#[path = "cluster/s3_targets.rs"]
mod s3_targets;
#[path = "cluster/scale.rs"]
mod scale;
#[path = "cluster/scrub.rs"]
mod scrub;
#[path = "cluster/shards.rs"]
mod shards;
#[path = "cluster/tls.rs"]
mod tls;
#[path = "cluster/warm_get.rs"]
mod warm_get;

async fn put(c: &Cluster, bucket: &str, name: &str, body: Vec<u8>) -> reqwest::Response {
    c.http
        .put(c.url(&format!("/v1/objects/{bucket}/{name}")))
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn get(c: &Cluster, bucket: &str, name: &str) -> reqwest::Response {
    c.http
        .get(c.url(&format!("/v1/objects/{bucket}/{name}")))
        .send()
        .await
        .unwrap()
}

async fn list_all(c: &Cluster, bucket: &str, page_size: u64) -> Vec<String> {
    let mut names = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let body = serde_json::json!({"action": "list", "value": {
            "pagesize": page_size, "continuation_token": token, "props": "name,size"}});
        let r = c
            .http
            .get(c.url(&format!("/v1/buckets/{bucket}")))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        let page: ListObjectsPage = r.json().await.unwrap();
        assert!(page.entries.len() as u64 <= page_size);
        assert!(
            !page.entries.is_empty() || page.continuation_token.is_empty(),
            "empty page with a continuation token"
        );
        names.extend(page.entries.into_iter().map(|e| e.name));
        pages += 1;
        if page.continuation_token.is_empty() {
            break;
        }
        token = page.continuation_token;
        assert!(pages < 100_000);
    }
    names
}

/// Object names in a spread of shapes: nested, unicode, spaces.
fn object_name(i: usize) -> String {
    match i % 5 {
        0 => format!("train/{:04}/img-{i}.jpg", i / 50),
        1 => format!("val/ü-{i}.bin"),
        2 => format!("flat-{i}"),
        3 => format!("deep/a/b/c/{i}.txt"),
        _ => format!("sp ace/{i}"),
    }
}

fn encode(name: &str) -> String {
    name.split('/')
        .map(|s| {
            s.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Acceptance: 1,000 objects of random sizes (0 B – 4 MiB) PUT through the proxy read back
/// byte-identical, placed on the targets and mountpaths HRW names, and listed exactly once in
/// order with page size 7.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_objects_roundtrip_placement_and_paging() {
    let c = Cluster::start(3, 2).await.unwrap();
    let bck = c.create_bucket("data").await.unwrap();
    let smap = c.smap().await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // Log-uniform sizes cover every order of magnitude from 0 B to 4 MiB.
    let sizes: Vec<usize> = (0..1000)
        .map(|i| match i {
            0 => 0,
            1 => 4 << 20,
            _ => (2f64.powf(rng.random_range(0.0..22.0)) as usize).min(4 << 20),
        })
        .collect();

    let c = &c;
    let sizes = &sizes;
    futures::stream::iter(0..1000)
        .for_each_concurrent(16, |i| async move {
            let name = object_name(i);
            let r = put(c, "data", &encode(&name), content(i as u64, sizes[i])).await;
            assert!(r.status().is_success(), "PUT {name}: {}", r.status());
        })
        .await;

    let canon: Vec<Vec<String>> = c
        .mountpaths
        .iter()
        .map(|mps| {
            mps.iter()
                .map(|p| std::fs::canonicalize(p).unwrap().display().to_string())
                .collect()
        })
        .collect();
    let mut used_targets = BTreeSet::new();
    let mut used_mountpaths = BTreeSet::new();
    for (i, &size) in sizes.iter().enumerate() {
        let name = object_name(i);
        let r = get(c, "data", &encode(&name)).await;
        assert_eq!(r.status(), 200, "GET {name}");
        let node = r.headers()["ais-node-id"].to_str().unwrap().to_owned();
        let location = r.headers()["ais-location"].to_str().unwrap().to_owned();
        let body = r.bytes().await.unwrap();
        assert!(body[..] == content(i as u64, size)[..], "content of {name}");

        let uname = bck.object_uname(&name);
        let owner = smap.owner(&uname).unwrap();
        assert_eq!(node, owner.daemon_id, "{name} served by a non-owner");
        // Mountpath by HRW over the owner's mountpath paths.
        let owner_idx: usize = c
            .targets
            .iter()
            .position(|t| {
                let state = c.dir.path().join(&t.name);
                let id = std::fs::read_to_string(state.join("node_id")).unwrap();
                id.trim() == owner.daemon_id
            })
            .unwrap();
        let mps = &canon[owner_idx];
        let want = hrw::pick(hrw::digest(&uname), mps.iter().map(|m| hrw::digest(m))).unwrap();
        assert!(
            location.ends_with(&format!(":{}", mps[want])),
            "{name}: {location}"
        );
        used_targets.insert(node);
        used_mountpaths.insert(location);
    }
    assert_eq!(used_targets.len(), 3);
    assert_eq!(used_mountpaths.len(), 6);

    let names = list_all(c, "data", 7).await;
    let mut expected: Vec<String> = (0..1000).map(object_name).collect();
    expected.sort();
    assert_eq!(
        names, expected,
        "page-size-7 listing must return each name once, in order"
    );
}

/// Acceptance: kill -9 a target in the middle of PUTs, restart it: no partial object is ever
/// readable and every acknowledged object is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_puts_leaves_no_partial_objects() {
    let mut c = Cluster::start(1, 2).await.unwrap();
    c.create_bucket("crash").await.unwrap();
    let target_url = c.first_target_url().await;

    // One slow streamed PUT that is guaranteed to be mid-body when the target dies.
    let slow_url = format!("{target_url}/v1/objects/crash/slow?provider=ais");
    let slow = tokio::spawn(async move {
        let stream = futures::stream::unfold(0u32, |i| async move {
            if i == 64 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some((Ok::<_, std::io::Error>(vec![b'x'; 64 * 1024]), i + 1))
        });
        reqwest::Client::new()
            .put(slow_url)
            .header("content-length", (64 * 64 * 1024).to_string())
            .body(reqwest::Body::wrap_stream(stream))
            .send()
            .await
    });
    // Many concurrent ordinary PUTs racing the kill.
    let http = c.http.clone();
    let base = c.endpoint.clone();
    let writers = tokio::spawn(async move {
        let mut acked = Vec::new();
        let mut tried = Vec::new();
        let jobs = (0..200).map(|i| {
            let http = http.clone();
            let url = format!("{base}/v1/objects/crash/obj-{i}");
            async move {
                let r = http.put(url).body(content(i, 256 * 1024)).send().await;
                (i, matches!(r, Ok(ref r) if r.status().is_success()))
            }
        });
        let mut s = futures::stream::iter(jobs).buffer_unordered(8);
        while let Some((i, ok)) = s.next().await {
            tried.push(i);
            if ok {
                acked.push(i);
            }
        }
        (acked, tried)
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    c.targets[0].kill9();
    let (acked, tried) = writers.await.unwrap();
    let slow_result = slow.await.unwrap();
    assert!(
        !matches!(slow_result, Ok(ref r) if r.status().is_success()),
        "the slow PUT cannot have completed"
    );
    c.restart_target(0).await.unwrap();

    assert!(
        !acked.is_empty(),
        "some PUTs should have been acknowledged before the kill"
    );
    assert_eq!(
        get(&c, "crash", "slow").await.status(),
        404,
        "partial object visible"
    );
    for i in tried {
        let r = get(&c, "crash", &format!("obj-{i}")).await;
        match r.status().as_u16() {
            200 => {
                let body = r.bytes().await.unwrap();
                assert!(body[..] == content(i, 256 * 1024)[..], "obj-{i} corrupt");
            }
            404 => assert!(!acked.contains(&i), "acknowledged obj-{i} lost"),
            s => panic!("obj-{i}: unexpected status {s}"),
        }
    }
    // Startup scan removed the interrupted writes' temp files.
    for mp in &c.mountpaths[0] {
        let left: Vec<_> = std::fs::read_dir(mp.join("tmp")).unwrap().collect();
        assert!(left.is_empty(), "temp files left in {}", mp.display());
    }
}

/// Acceptance: restarting the whole playground keeps every bucket and object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playground_restart_keeps_buckets_and_objects() {
    let dir = tempfile::tempdir().unwrap();
    // The playground takes ports port..port+3; find 4 consecutive free ones.
    let port = loop {
        let p = gristmill_tests::free_port();
        if p < 60000 && (1..4).all(|i| std::net::TcpListener::bind(("127.0.0.1", p + i)).is_ok()) {
            break p;
        }
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let start = || {
        std::process::Command::new(gristmill_tests::gristd_bin())
            .args(["playground", "--port", &port.to_string(), "--data-dir"])
            .arg(dir.path())
            // Not a test about space: refuse writes only when the disk is really full.
            .env("GRISTD_OUT_OF_SPACE_WM", "100")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let http = reqwest::Client::new();
    let wait_up = || async {
        for _ in 0..600 {
            if let Ok(r) = http
                .get(format!("{endpoint}/v1/cluster?what=smap"))
                .send()
                .await
                && let Ok(m) = r.json::<gristmill_core::ClusterMap>().await
                && m.tmap.len() == 3
            {
                // Every target reachable.
                let mut up = 0;
                for t in m.tmap.values() {
                    if http
                        .get(format!("{}/v1/health", t.url()))
                        .send()
                        .await
                        .is_ok()
                    {
                        up += 1;
                    }
                }
                if up == 3 {
                    return m;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("playground did not come up");
    };
    let stop = |mut child: std::process::Child| {
        std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "playground exit: {status}");
    };

    let pg = start();
    let before = wait_up().await;
    for b in ["alpha", "beta"] {
        let r = http
            .post(format!("{endpoint}/v1/buckets/{b}"))
            .json(&serde_json::json!({"action": "create-bck"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        for i in 0..30 {
            let r = http
                .put(format!("{endpoint}/v1/objects/{b}/o{i}"))
                .body(content(i, 1000 + i as usize * 37))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
        }
    }
    stop(pg);

    let pg = start();
    let after = wait_up().await;
    let ids = |m: &gristmill_core::ClusterMap| m.tmap.keys().cloned().collect::<Vec<_>>();
    assert_eq!(ids(&before), ids(&after), "node ids must survive a restart");
    assert_eq!(before.proxy_si.daemon_id, after.proxy_si.daemon_id);
    for b in ["alpha", "beta"] {
        for i in 0..30 {
            let r = http
                .get(format!("{endpoint}/v1/objects/{b}/o{i}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{b}/o{i}");
            assert!(r.bytes().await.unwrap()[..] == content(i, 1000 + i as usize * 37)[..]);
        }
    }
    stop(pg);
}

/// Sends raw bytes to `addr` and returns the status line's code and the body.
pub(crate) async fn raw_request(addr: &str, request: &[u8], half_close: bool) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    if half_close {
        s.shutdown().await.unwrap();
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (code, body)
}

/// Acceptance: bad input gets a clear 4xx JSON error, leaves nothing behind, and the node
/// keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_nothing_is_left() {
    let c = Cluster::start(2, 1).await.unwrap();
    c.create_bucket("ok").await.unwrap();
    let json_error = |expect: u16| {
        move |status: u16, body: &str, what: &str| {
            assert_eq!(status, expect, "{what}: {body}");
            let v: serde_json::Value =
                serde_json::from_str(body).unwrap_or_else(|_| panic!("{what}: not JSON: {body}"));
            assert!(
                !v["message"].as_str().unwrap_or("").is_empty(),
                "{what}: no message"
            );
            assert_eq!(v["status"], expect, "{what}");
        }
    };

    // Invalid bucket names.
    for bad in ["bad%20name", "a%2Fb", &"x".repeat(65), "semi%3Bcolon"] {
        let r = c
            .http
            .post(c.url(&format!("/v1/buckets/{bad}")))
            .json(&serde_json::json!({"action": "create-bck"}))
            .send()
            .await
            .unwrap();
        let s = r.status().as_u16();
        json_error(400)(s, &r.text().await.unwrap(), bad);
    }
    let proxy_addr = c.endpoint.trim_start_matches("http://").to_owned();
    let req = "POST /v1/buckets/.. HTTP/1.1\r\nHost: x\r\nContent-Length: 24\r\nConnection: close\r\n\r\n{\"action\":\"create-bck\"}";
    let (code, body) = raw_request(&proxy_addr, req.as_bytes(), false).await;
    json_error(400)(code, &body, "bucket ..");
    // Invalid object names: `..` segments, NUL, over 1024 bytes, empty. Sent raw: URL
    // libraries would normalize the dot segments away before they reach the server.
    let long = "y".repeat(1025);
    for bad in [
        "a/../b",
        "..",
        "x/%2E%2E/y",
        "nul%00byte",
        long.as_str(),
        "dot/./x",
        "",
        "/",
    ] {
        for method in ["PUT", "GET", "HEAD", "DELETE"] {
            let path = if bad == "/" {
                "/v1/objects/ok".to_owned()
            } else {
                format!("/v1/objects/ok/{bad}")
            };
            let req = format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\ndata"
            );
            let (code, body) = raw_request(&proxy_addr, req.as_bytes(), false).await;
            if method == "HEAD" {
                assert_eq!(code, 400, "HEAD {bad:?}");
            } else {
                json_error(400)(code, &body, &format!("{method} {bad:?}"));
            }
        }
    }
    // Missing objects: GET and DELETE 404 with JSON; HEAD 404.
    let r = get(&c, "ok", "missing").await;
    let s = r.status().as_u16();
    let body = r.text().await.unwrap();
    json_error(404)(s, &body, "GET missing");
    assert!(body.contains("ais://ok/missing"), "{body}");
    let r = c
        .http
        .delete(c.url("/v1/objects/ok/missing"))
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    json_error(404)(s, &r.text().await.unwrap(), "DELETE missing");
    let r = c
        .http
        .head(c.url("/v1/objects/ok/missing"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Missing bucket.
    let r = get(&c, "nobucket", "x").await;
    let s = r.status().as_u16();
    let body = r.text().await.unwrap();
    json_error(404)(s, &body, "GET in missing bucket");
    assert!(body.contains("\\\"ais://nobucket\\\""), "{body}");
    // Existing bucket: 409.
    let r = c
        .http
        .post(c.url("/v1/buckets/ok"))
        .json(&serde_json::json!({"action": "create-bck"}))
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    json_error(409)(s, &r.text().await.unwrap(), "create existing");
    // Unknown provider.
    let r = c
        .http
        .get(c.url("/v1/objects/ok/x?provider=gopher"))
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    json_error(400)(s, &r.text().await.unwrap(), "unknown provider");
    // Unknown range: 416.
    put(&c, "ok", "small", b"0123456789".to_vec()).await;
    let r = c
        .http
        .get(c.url("/v1/objects/ok/small"))
        .header("range", "bytes=50-60")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 416);
    assert_eq!(r.headers()["content-range"], "bytes */10");

    // A body shorter than its Content-Length, sent straight to the owner.
    let bck = Bck::new("ok", gristmill_core::Provider::Ais).unwrap();
    let smap = c.smap().await.unwrap();
    let owner = smap.owner(&bck.object_uname("short")).unwrap();
    let addr = owner.url().trim_start_matches("http://").to_owned();
    let mut req = b"PUT /v1/objects/ok/short?provider=ais HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n".to_vec();
    req.extend_from_slice(&[b'z'; 500]);
    let (code, _) = raw_request(&addr, &req, true).await;
    assert!(code == 400 || code == 0, "short body answered {code}");
    assert_eq!(
        get(&c, "ok", "short").await.status(),
        404,
        "partial object visible"
    );
    // Malformed JSON action.
    let r = c
        .http
        .post(c.url("/v1/buckets/newb"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    json_error(400)(s, &r.text().await.unwrap(), "malformed action");

    // Still serving, and nothing of the refused writes was stored.
    assert!(
        put(&c, "ok", "after", b"fine".to_vec())
            .await
            .status()
            .is_success()
    );
    assert_eq!(get(&c, "ok", "after").await.bytes().await.unwrap(), "fine");
    assert_eq!(list_all(&c, "ok", 100).await, ["after", "small"]);
}

/// A target that receives an object it does not own forwards it to the owner; a stale
/// metadata push is ignored; HEAD, range GET and DELETE behave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_api_forwarding_ranges_and_stale_metadata() {
    let c = Cluster::start(3, 1).await.unwrap();
    let bck = c.create_bucket("fw").await.unwrap();
    let smap = c.smap().await.unwrap();
    let name = "forward-me";
    let owner = smap.owner(&bck.object_uname(name)).unwrap().clone();
    let other = smap
        .tmap
        .values()
        .find(|t| t.daemon_id != owner.daemon_id)
        .unwrap();
    let r = c
        .http
        .put(format!("{}/v1/objects/fw/{name}?provider=ais", other.url()))
        .body(content(1, 100_000))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let r = c
        .http
        .get(format!("{}/v1/objects/fw/{name}", other.url()))
        .header("range", "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(r.headers()["ais-node-id"], owner.daemon_id.as_str());
    assert_eq!(r.headers()["content-range"], "bytes 10-19/100000");
    assert!(
        r.headers().get("ais-checksum-value").is_none(),
        "no whole-object checksum on 206"
    );
    assert_eq!(r.bytes().await.unwrap()[..], content(1, 100_000)[10..20]);
    // Suffix range.
    let r = get_range(&c, "fw", name, "bytes=-5").await;
    assert_eq!(r, content(1, 100_000)[99_995..]);

    // HEAD through the proxy: size and checksum.
    let r = c
        .http
        .head(c.url(&format!("/v1/objects/fw/{name}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-length"], "100000");
    let want = format!(
        "{:016x}",
        xxhash_rust::xxh64::xxh64(&content(1, 100_000), 0)
    );
    assert_eq!(r.headers()["ais-checksum-value"], want.as_str());
    assert_eq!(r.headers()["ais-checksum-type"], "xxhash");
    // Checksum validation on GET.
    let r = c
        .http
        .get(c.url(&format!("/v1/objects/fw/{name}?validate_checksum=true")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Overwrite bumps the version.
    put(&c, "fw", name, b"v2".to_vec()).await;
    let r = c
        .http
        .head(c.url(&format!("/v1/objects/fw/{name}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["ais-version"], "2");

    // A stale cluster map pushed to a target is ignored.
    let mut stale = smap.clone();
    stale.version = 1;
    stale.tmap.clear();
    let r = c
        .http
        .put(format!("{}/v1/metasync", owner.url()))
        .json(&serde_json::json!({ "smap": stale }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let got: gristmill_core::ClusterMap = c
        .http
        .get(format!("{}/v1/daemon?what=smap", owner.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got.version, smap.version);
    assert_eq!(got.tmap.len(), 3);

    // DELETE, then 404; destroy bucket, then its objects are gone from listing and the bucket 404s.
    assert!(
        c.http
            .delete(c.url(&format!("/v1/objects/fw/{name}")))
            .send()
            .await
            .unwrap()
            .status()
            .is_success()
    );
    assert_eq!(get(&c, "fw", name).await.status(), 404);
    put(&c, "fw", "keep", b"k".to_vec()).await;
    let r = c
        .http
        .delete(c.url("/v1/buckets/fw"))
        .json(&serde_json::json!({"action": "destroy-bck"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(get(&c, "fw", "keep").await.status(), 404);
    c.create_bucket("fw").await.unwrap();
    assert!(
        list_all(&c, "fw", 100).await.is_empty(),
        "recreated bucket must be empty"
    );
    // Buckets listing.
    let v: Vec<HashMap<String, serde_json::Value>> = c
        .http
        .get(c.url("/v1/buckets"))
        .json(&serde_json::json!({"action": "list"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["name"], "fw");
}

async fn get_range(c: &Cluster, bucket: &str, name: &str, range: &str) -> Vec<u8> {
    let r = c
        .http
        .get(c.url(&format!("/v1/objects/{bucket}/{name}")))
        .header("range", range)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    r.bytes().await.unwrap().to_vec()
}

/// Metrics are exported in Prometheus format on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_every_node() {
    let c = Cluster::start(1, 1).await.unwrap();
    c.create_bucket("m").await.unwrap();
    put(&c, "m", "o", vec![1; 1000]).await;
    get(&c, "m", "o").await.bytes().await.unwrap();
    let smap = c.smap().await.unwrap();
    let t = smap.tmap.values().next().unwrap();
    let text = c
        .http
        .get(format!("{}/metrics", t.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "grist_requests_total{op=\"put\"}",
        "grist_requests_total{op=\"get\"}",
        "grist_request_duration_seconds_bucket",
        "grist_mountpath_capacity_bytes",
    ] {
        assert!(text.contains(want), "target metrics lack {want}:\n{text}");
    }
    let text = c
        .http
        .get(c.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("grist_requests_total"),
        "proxy metrics:\n{text}"
    );
}

/// Runs the `grist` CLI against the cluster; returns stdout, asserting success.
fn grist(c: &Cluster, args: &[&str]) -> String {
    c.grist_ok(args)
}

/// The `grist` CLI: buckets, put (file, directory, stdin), ls with props/prefix/page size and
/// JSON, get to file and stdout, object cat, rmo, show cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grist_cli_end_to_end() {
    let c = Cluster::start(3, 1).await.unwrap();
    let c = tokio::task::spawn_blocking(move || {
        let work = tempfile::tempdir().unwrap();
        let src = work.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        for i in 0..12 {
            let dir = if i % 2 == 0 {
                src.clone()
            } else {
                src.join("sub")
            };
            std::fs::write(
                dir.join(format!("f{i:02}.bin")),
                content(i, 1000 + i as usize),
            )
            .unwrap();
        }
        let single = work.path().join("single.txt");
        std::fs::write(&single, b"single file").unwrap();

        assert!(grist(&c, &["bucket", "create", "ais://cli"]).contains("created"));
        grist(&c, &["put", single.to_str().unwrap(), "ais://cli/one.txt"]);
        grist(
            &c,
            &[
                "put",
                "-r",
                "--progress",
                src.to_str().unwrap(),
                "ais://cli/tree/",
            ],
        );

        let listed: Vec<serde_json::Value> = serde_json::from_str(&grist(
            &c,
            &[
                "ls",
                "ais://cli",
                "--json",
                "--props",
                "all",
                "--page-size",
                "5",
            ],
        ))
        .unwrap();
        assert_eq!(listed.len(), 13);
        let names: Vec<&str> = listed.iter().map(|e| e["name"].as_str().unwrap()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(names.contains(&"tree/sub/f01.bin") && names.contains(&"tree/f00.bin"));
        assert!(
            listed
                .iter()
                .all(|e| e["checksum"].as_str().unwrap().len() == 16)
        );

        let sub: Vec<serde_json::Value> = serde_json::from_str(&grist(
            &c,
            &["ls", "ais://cli", "--json", "--prefix", "tree/sub/"],
        ))
        .unwrap();
        assert_eq!(sub.len(), 6);
        assert!(
            grist(&c, &["ls", "ais://cli", "--props", "name,size"]).contains("Listed 13 objects")
        );

        let out = work.path().join("got.bin");
        grist(
            &c,
            &["get", "ais://cli/tree/sub/f03.bin", out.to_str().unwrap()],
        );
        assert_eq!(std::fs::read(&out).unwrap(), content(3, 1003));
        assert_eq!(grist(&c, &["get", "ais://cli/one.txt", "-"]), "single file");
        assert_eq!(
            grist(&c, &["object", "cat", "ais://cli/one.txt"]),
            "single file"
        );

        grist(&c, &["rmo", "ais://cli/one.txt"]);
        let missing =
            std::process::Command::new(gristmill_tests::gristd_bin().with_file_name("grist"))
                .args(["get", "ais://cli/one.txt", "-"])
                .env("GRIST_ENDPOINT", &c.endpoint)
                .output()
                .unwrap();
        assert!(!missing.status.success());
        assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));

        let buckets: Vec<serde_json::Value> =
            serde_json::from_str(&grist(&c, &["ls", "--json"])).unwrap();
        assert_eq!(buckets.len(), 1);
        let smap: gristmill_core::ClusterMap =
            serde_json::from_str(&grist(&c, &["show", "cluster", "--json"])).unwrap();
        assert_eq!(smap.tmap.len(), 3);
        assert!(grist(&c, &["show", "cluster"]).contains("proxy (primary)"));
        let s3: serde_json::Value =
            serde_json::from_str(&grist(&c, &["show", "s3", "--json"])).unwrap();
        assert_eq!(s3["anonymous"], true);
        assert_eq!(s3["access_key"], "gristmill");
        assert_eq!(s3["endpoint"], c.endpoint.as_str());
        grist(&c, &["bucket", "rm", "ais://cli"]);
        c
    })
    .await
    .unwrap();
    let left: Vec<serde_json::Value> = c
        .http
        .get(c.url("/v1/buckets"))
        .json(&serde_json::json!({"action": "list"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(left.is_empty());
}

/// Settings reach a real node through the layers (file, then variables over it), and a wrong
/// value stops `gristd` at start with an error naming the setting instead of being ignored.
/// `grist get --prefix/--template` into a directory (1,000 objects, byte-identical, in
/// parallel), `grist rmo --prefix/--template` (refused without a yes, done with -y), the endpoint
/// from `$AIS_ENDPOINT` and from the CLI config file, completion scripts for three shells, and a
/// GET, a PUT and a listing retried across a proxy restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grist_many_objects_endpoints_and_completions() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("many").await.unwrap();
    futures::stream::iter(0..1000usize)
        .for_each_concurrent(32, |i| {
            let c = &c;
            async move {
                let r = put(
                    c,
                    "many",
                    &format!("p/{i:04}.bin"),
                    content(i as u64, 100 + i),
                )
                .await;
                assert!(r.status().is_success());
            }
        })
        .await;
    put(&c, "many", "other/x", b"not selected".to_vec()).await;
    let bin = gristmill_tests::gristd_bin().with_file_name("grist");
    let endpoint = c.endpoint.clone();
    tokio::task::spawn_blocking(move || {
        let work = tempfile::tempdir().unwrap();
        let run = |args: &[&str], env: &[(&str, &str)], stdin: &str| {
            use std::io::Write;
            let mut cmd = std::process::Command::new(&bin);
            cmd.args(args)
                .env_remove("GRIST_ENDPOINT")
                .env_remove("AIS_ENDPOINT")
                .env("GRIST_CONFIG", work.path().join("absent.toml"))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            for (k, v) in env {
                cmd.env(k, v);
            }
            let mut child = cmd.spawn().unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(stdin.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        };
        let ok = |out: std::process::Output| {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let env = [("GRIST_ENDPOINT", endpoint.as_str())];

        // 1,000 objects by prefix into a directory, named by the rest of their names.
        let dir = work.path().join("all");
        let d = dir.to_str().unwrap();
        let out = ok(run(
            &["--json", "get", "ais://many", "--prefix", "p/", d],
            &env,
            "",
        ));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (v["objects"].as_u64(), v["missing"].as_u64()),
            (Some(1000), Some(0))
        );
        for i in 0..1000usize {
            let got = std::fs::read(dir.join(format!("{i:04}.bin"))).unwrap();
            assert!(got == content(i as u64, 100 + i), "{i:04}.bin differs");
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1000);
        // A template: names not listed; the ones that do not exist are counted, not fatal.
        let dir2 = work.path().join("some");
        let out = ok(run(
            &[
                "--json",
                "get",
                "ais://many",
                "--template",
                "p/{0995..1004}.bin",
                dir2.to_str().unwrap(),
            ],
            &env,
            "",
        ));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (v["objects"].as_u64(), v["missing"].as_u64()),
            (Some(5), Some(5))
        );
        assert!(dir2.join("p/0999.bin").exists());

        // rmo by prefix: refused unless confirmed.
        let no = run(&["rmo", "ais://many", "--prefix", "p/00"], &env, "n\n");
        assert!(!no.status.success());
        let listed = |prefix: &str| {
            let out = ok(run(
                &["--json", "ls", "ais://many", "--prefix", prefix],
                &env,
                "",
            ));
            serde_json::from_str::<serde_json::Value>(&out)
                .unwrap()
                .as_array()
                .map_or(0, |a| a.len())
        };
        assert_eq!(listed("p/00"), 100);
        let out = ok(run(&["rmo", "ais://many", "--prefix", "p/00"], &env, "y\n"));
        assert!(out.contains("deleted 100 objects"), "{out}");
        let out = ok(run(
            &[
                "rmo",
                "ais://many",
                "--template",
                "p/{0100..0109}.bin",
                "-y",
            ],
            &env,
            "",
        ));
        assert!(out.contains("deleted 10 objects"), "{out}");
        assert_eq!(listed("p/"), 890);
        assert_eq!(listed("other/"), 1);

        // One object's properties; the bucket's summary.
        let out = ok(run(
            &["--json", "object", "show", "ais://many/p/0500.bin"],
            &env,
            "",
        ));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["size"], 600, "{out}");
        assert!(
            !v["checksum"]["value"].as_str().unwrap().is_empty(),
            "{out}"
        );
        assert!(
            ok(run(&["object", "show", "ais://many/p/0500.bin"], &env, "")).contains("checksum")
        );
        assert!(
            !run(&["object", "show", "ais://many/p/0000.bin"], &env, "")
                .status
                .success()
        );
        let out = ok(run(
            &["--json", "bucket", "summary", "ais://many"],
            &env,
            "",
        ));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let bytes: usize = (110..1000).map(|i| 100 + i).sum::<usize>() + "not selected".len();
        assert_eq!(
            (v["objects"].as_u64(), v["bytes"].as_u64()),
            (Some(891), Some(bytes as u64)),
            "{out}"
        );

        // ls --nr: one level, deeper names folded into their directory; --summary: counts.
        let names = |args: &[&str]| -> Vec<String> {
            let out = ok(run(args, &env, ""));
            serde_json::from_str::<Vec<serde_json::Value>>(&out)
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let top = names(&["--json", "ls", "ais://many", "--nr"]);
        assert_eq!(
            top.iter()
                .filter(|n| n.ends_with('/'))
                .cloned()
                .collect::<Vec<_>>(),
            ["other/", "p/"]
        );
        assert!(
            top.iter().all(|n| n.ends_with('/') || !n.contains('/')),
            "{top:?}"
        );
        let level = names(&["--json", "ls", "ais://many", "--prefix", "p/", "--nr"]);
        assert_eq!(level.len(), 890);
        assert!(
            level
                .iter()
                .all(|n| n.starts_with("p/") && !n.ends_with('/'))
        );
        let out = ok(run(
            &["--json", "ls", "ais://many", "--prefix", "p/", "--summary"],
            &env,
            "",
        ));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let p_bytes: usize = (110..1000).map(|i| 100 + i).sum();
        assert_eq!(
            (v["objects"].as_u64(), v["bytes"].as_u64()),
            (Some(890), Some(p_bytes as u64)),
            "{out}"
        );
        let out = ok(run(&["ls", "ais://many", "--nr"], &env, ""));
        assert!(out.contains("p/") && out.contains("other/"), "{out}");

        // The endpoint from $AIS_ENDPOINT, then from the config file.
        let out = ok(run(
            &["--json", "ls"],
            &[("AIS_ENDPOINT", endpoint.as_str())],
            "",
        ));
        assert!(out.contains("many"), "{out}");
        let config = work.path().join("config.toml");
        std::fs::write(&config, format!("endpoint = \"{endpoint}\"\n")).unwrap();
        let out = ok(run(
            &["--json", "ls"],
            &[("GRIST_CONFIG", config.to_str().unwrap())],
            "",
        ));
        assert!(out.contains("many"), "{out}");
        // Nothing at all: the default endpoint, where nothing listens here.
        assert!(!run(&["ls"], &[], "").status.success());

        // Completion scripts for three shells; bash's parses.
        for shell in ["bash", "zsh", "fish"] {
            let script = ok(run(&["completion", shell], &[], ""));
            assert!(
                script.contains("rmo") && script.contains("prefix"),
                "{shell}"
            );
        }
        let script = work.path().join("grist.bash");
        std::fs::write(&script, ok(run(&["completion", "bash"], &[], ""))).unwrap();
        let check = std::process::Command::new("bash")
            .arg("-n")
            .arg(&script)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    })
    .await
    .unwrap();

    // A GET sent while the proxy is down is retried (with a warning) until it is back.
    let mut c = c;
    c.proxy.stop();
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("0500.bin");
    let (bin, ep, f) = (
        gristmill_tests::gristd_bin().with_file_name("grist"),
        c.endpoint.clone(),
        file.clone(),
    );
    let grist_in_thread = |args: Vec<String>| {
        let (bin, ep) = (bin.clone(), ep.clone());
        std::thread::spawn(move || {
            std::process::Command::new(bin)
                .args(&args)
                .env("GRIST_ENDPOINT", ep)
                .output()
                .unwrap()
        })
    };
    let get = grist_in_thread(vec![
        "get".into(),
        "ais://many/p/0500.bin".into(),
        f.to_str().unwrap().into(),
    ]);
    // Listing and PUT retry too (the PUT first needs the map from the proxy).
    let upload = out.path().join("up.bin");
    std::fs::write(&upload, b"put while the proxy was down").unwrap();
    let put = grist_in_thread(vec![
        "put".into(),
        upload.to_str().unwrap().into(),
        "ais://many/retried.bin".into(),
    ]);
    let summary = grist_in_thread(vec![
        "--json".into(),
        "ls".into(),
        "ais://many".into(),
        "--prefix".into(),
        "p/".into(),
        "--summary".into(),
    ]);
    // A bucket create is not idempotent: retried only because its connection was refused
    // (the request never reached a node).
    let create = grist_in_thread(vec![
        "bucket".into(),
        "create".into(),
        "ais://made-while-down".into(),
    ]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.proxy.start().unwrap();
    for (what, handle) in [
        ("get", get),
        ("put", put),
        ("ls --summary", summary),
        ("bucket create", create),
    ] {
        let got = tokio::task::spawn_blocking(move || handle.join().unwrap())
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&got.stderr);
        assert!(got.status.success(), "{what}: {stderr}");
        assert!(stderr.contains("retrying"), "{what}: {stderr}");
        if what == "ls --summary" {
            let v: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
            assert_eq!(v["objects"], 890, "{v}");
        }
    }
    assert!(std::fs::read(&file).unwrap() == content(500, 600));
    let back = out.path().join("back.bin");
    let got = grist_in_thread(vec![
        "get".into(),
        "ais://many/retried.bin".into(),
        back.to_str().unwrap().into(),
    ])
    .join()
    .unwrap();
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert_eq!(
        std::fs::read(&back).unwrap(),
        b"put while the proxy was down"
    );
}

/// `grist config show|set` and `grist log show`: settings in force per node, a run-time change
/// that takes effect at once (out-of-space marks at 0 refuse PUTs with 507), kept across a
/// restart unless `--transient`, refused with the reason when inconsistent or fixed at start;
/// a node's log read through the proxy, with a line the change itself logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grist_config_and_log_commands() {
    let mut c = Cluster::start(2, 1).await.unwrap();
    let bck = c.create_bucket("cfg").await.unwrap();
    let put = |c: &Cluster, name: &str| {
        let (http, url) = (
            c.http.clone(),
            c.url(&format!("/v1/objects/{}/{name}", bck.name)),
        );
        async move {
            http.put(url)
                .body("x".repeat(1000))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert!(put(&c, "before").await.is_success());
    let t0 = c.target_id(0).await.unwrap();
    let t1 = c.target_id(1).await.unwrap();

    let shown: serde_json::Value =
        serde_json::from_str(&c.grist_ok(&["--json", "config", "show"])).unwrap();
    assert_eq!(shown.as_object().unwrap().len(), 3, "{shown}");
    assert_eq!(shown[&t0]["config"]["space.high_wm"], 90, "{shown}");
    let runtime = shown[&t0]["runtime"].as_array().unwrap();
    assert!(runtime.contains(&"space.out_of_space_wm".into()), "{shown}");
    // Proxies have no space settings.
    let proxy = shown
        .as_object()
        .unwrap()
        .keys()
        .find(|k| k.starts_with('p'))
        .unwrap();
    assert!(
        shown[proxy]["config"].get("space.high_wm").is_none(),
        "{shown}"
    );
    let table = c.grist_ok(&["config", "show"]);
    assert!(
        table.contains("space.high_wm") && table.contains("90"),
        "{table}"
    );

    // Inconsistent marks and settings fixed at start change nothing.
    let refused = c.grist(&["config", "set", "space.low_wm=95"]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && why.contains("low (95) <= high (90)"),
        "{why}"
    );
    let refused = c.grist(&["config", "set", "node.listen=127.0.0.1:1"]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && why.contains("at run time"),
        "{why}"
    );
    assert!(put(&c, "still-fine").await.is_success());

    // Every target refuses writes at once; the change is kept (and a transient one is not).
    let out = c.grist_ok(&[
        "config",
        "set",
        "space.low_wm=0",
        "space.high_wm=0",
        "space.out_of_space_wm=0",
    ]);
    assert!(out.contains(&t0) && out.contains(&t1), "{out}");
    for name in ["a", "b", "c", "d"] {
        assert_eq!(put(&c, name).await.as_u16(), 507, "{name}");
    }
    c.grist_ok(&["config", "set", &t1, "log.level=debug", "--transient"]);
    let one: serde_json::Value =
        serde_json::from_str(&c.grist_ok(&["--json", "config", "show", &t1])).unwrap();
    assert_eq!(one[&t1]["config"]["log.level"], "debug", "{one}");
    assert_eq!(one[&t1]["local"]["space.out_of_space_wm"], "0", "{one}");
    assert!(one[&t1]["local"].get("log.level").is_none(), "{one}");

    // The log: the change is in it, read through the proxy.
    let log = c.grist_ok(&["log", "show", &t1, "--lines", "50"]);
    assert!(log.contains("configuration changed"), "{log}");
    assert!(log.lines().count() <= 50, "{log}");
    let missing = c.grist(&["log", "show", "t-nobody"]);
    assert!(!missing.status.success());

    // Kept across a restart; the transient one is gone.
    c.targets[1].stop();
    c.restart_target(1).await.unwrap();
    let one: serde_json::Value =
        serde_json::from_str(&c.grist_ok(&["--json", "config", "show", &t1])).unwrap();
    assert_eq!(one[&t1]["config"]["space.out_of_space_wm"], 0, "{one}");
    assert_eq!(one[&t1]["config"]["log.level"], "info", "{one}");
    for name in ["e", "f", "g", "h"] {
        assert_eq!(put(&c, name).await.as_u16(), 507, "{name}");
    }
    c.grist_ok(&[
        "config",
        "set",
        "space.out_of_space_wm=99",
        "space.high_wm=90",
        "space.low_wm=75",
    ]);
    for name in ["a", "b", "c", "d"] {
        assert!(put(&c, name).await.is_success(), "{name}");
    }

    // `--json`: every command answers one JSON document (here: those that used to print
    // only text).
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("one.bin");
    std::fs::write(&file, b"json please").unwrap();
    let (file, back) = (
        file.to_str().unwrap().to_owned(),
        work.path().join("back.bin").to_str().unwrap().to_owned(),
    );
    let tmp_home = work.path().to_str().unwrap().to_owned();
    for args in [
        vec!["config", "set", "log.access=false"],
        vec!["log", "show", t0.as_str(), "--lines", "3"],
        vec!["bucket", "create", "ais://jsonb"],
        vec![
            "bucket",
            "props",
            "set",
            "ais://jsonb",
            "versioning.enabled=false",
        ],
        vec!["put", file.as_str(), "ais://jsonb/one.bin"],
        vec!["get", "ais://jsonb/one.bin", back.as_str()],
        vec!["rmo", "ais://jsonb/one.bin"],
        vec!["rmo", "ais://jsonb", "--prefix", "none/", "-y"],
        vec!["bucket", "rm", "ais://jsonb"],
    ] {
        let mut all = vec!["--json"];
        all.extend(&args);
        let out = c.grist_ok(&all);
        serde_json::from_str::<serde_json::Value>(&out)
            .unwrap_or_else(|e| panic!("grist {args:?}: not JSON ({e}): {out}"));
    }
    let out = std::process::Command::new(gristmill_tests::gristd_bin().with_file_name("grist"))
        .args(["--json", "auth", "logout"])
        .env("HOME", &tmp_home)
        .env("GRIST_ENDPOINT", &c.endpoint)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["removed"], false, "{v}");
}

/// `grist` against an endpoint that accepts connections and never answers: with
/// `--read-timeout 1s` a bucket create (not retried: it may have been acted on) fails with a
/// timeout instead of hanging; a malformed timeout is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grist_gives_up_on_an_endpoint_that_never_answers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    // Accepts and holds every connection, answering nothing (the thread ends with the test).
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let bin = gristmill_tests::gristd_bin().with_file_name("grist");
    let run = move |args: &'static [&'static str]| {
        let (bin, endpoint) = (bin.clone(), endpoint.clone());
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin)
                .args(args)
                .env("GRIST_ENDPOINT", endpoint)
                .output()
                .unwrap()
        })
    };
    let out = run(&["--read-timeout", "1s", "bucket", "create", "ais://never"])
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("timed out"), "{err}");
    assert!(!err.contains("retrying"), "{err}");
    let out = run(&["--read-timeout", "soon", "ls"]).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--read-timeout soon"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_layer_and_a_wrong_value_stops_the_node_at_start() {
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("gristd.toml");
    std::fs::write(
        &file,
        "[space]\nhigh_wm = 80\nlow_wm = 70\nmax_cache_bytes = \"3GiB\"\n",
    )
    .unwrap();
    let env = vec![
        ("GRISTD_CONFIG".to_string(), file.display().to_string()),
        ("GRISTD_LRU_LOW_WM".to_string(), "60".to_string()),
    ];
    let c = Cluster::start_full(1, 1, &[], &env).await.unwrap();
    let smap = c.smap().await.unwrap();
    let t = smap.tmap.values().next().unwrap();
    let space = c
        .get_json(&format!("{}/v1/daemon?what=space", t.url()))
        .await;
    let config = &space["config"];
    assert_eq!(config["high_wm"], 80, "from the file: {space}");
    assert_eq!(
        config["low_wm"], 60,
        "the variable wins over the file: {space}"
    );
    assert_eq!(config["max_cache_bytes"], 3u64 << 30, "{space}");

    // Each of these must make `gristd target` exit at once, saying which setting is wrong.
    let bad_file = scratch.path().join("bad.toml");
    std::fs::write(&bad_file, "[target]\nopen_files = \"many\"\n").unwrap();
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (
            vec![("GRISTD_OUT_OF_SPACE_WM", "50".into())],
            "out-of-space (50)",
        ),
        (
            vec![("GRISTD_COLD_GET_WORKERS", "0".into())],
            "backend.cold_get_workers",
        ),
        (vec![("GRISTD_OPEN_FILES", "lots".into())], "--open-files"),
        (
            vec![("GRISTD_REMOTE_AIS", "no-url".into())],
            "backend.remote_ais",
        ),
        (
            vec![("GRISTD_CONFIG", bad_file.display().to_string())],
            "open_files",
        ),
    ];
    for (env, needle) in cases {
        let state = scratch.path().join(format!("t-{}", env[0].0));
        let out = tokio::process::Command::new(gristmill_tests::gristd_bin())
            .args(["target", "--listen", "127.0.0.1:0", "--join", &c.endpoint])
            .arg("--state-dir")
            .arg(&state)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("gristd started serving despite a wrong setting")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{env:?}: exited {:?}", out.status);
        assert!(stderr.contains(needle), "{env:?}: {stderr}");
    }
    // The running target never saw any of it.
    assert_eq!(c.smap().await.unwrap().tmap.len(), 1);
}
