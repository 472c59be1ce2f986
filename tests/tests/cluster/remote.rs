//! Remote buckets: cold GET, validation, write-through, listing, `ht://`, backend errors and
//! out-of-space, against SeaweedFS behind the counting relay of `backend`.

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gristmill_tests::{Cluster, content, free_port};
use tokio::net::TcpStream;

use super::backend::*;
use aws_sdk_s3::primitives::ByteStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cold_get_one_download_streamed_to_all_and_broken_download_caches_nothing() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-cold").send().await.unwrap();
    const SIZE: usize = 256 << 20;
    let data = content(7, SIZE);
    let want = xxhash_rust::xxh3::xxh3_64(&data);
    put_direct(&s3, "gm-cold", "big.bin", data).await;
    let relay = Relay::start(&weed.endpoint).await;
    // One backend GET: parallel range download (tested below) off for this object size.
    let c = remote_cluster_with(&relay, 3, &[("GRISTD_COLD_GET_PARALLEL_ABOVE", "1GiB")]).await;

    // ~4 s of download: long enough to see clients streaming before it ends.
    relay.throttle.store(64 << 20, Ordering::SeqCst);
    let url = obj_url(&c, "gm-cold", "big.bin");
    let clients = (0..20).map(|_| {
        let (http, url, forwarded) = (c.http.clone(), url.clone(), relay.forwarded.clone());
        tokio::spawn(async move {
            let resp = http.get(&url).send().await.unwrap();
            assert!(resp.status().is_success(), "{}", resp.status());
            let mut body = resp.bytes_stream();
            let mut hash = xxhash_rust::xxh3::Xxh3::new();
            let mut len = 0usize;
            let mut forwarded_at_first_byte = None;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.unwrap();
                if forwarded_at_first_byte.is_none() && !chunk.is_empty() {
                    forwarded_at_first_byte = Some(forwarded.load(Ordering::SeqCst));
                }
                hash.update(&chunk);
                len += chunk.len();
            }
            (
                hash.digest(),
                len,
                forwarded_at_first_byte.unwrap_or(u64::MAX),
            )
        })
    });
    let results = futures::future::join_all(clients).await;
    for r in results {
        let (got, len, at_first) = r.unwrap();
        assert!(
            got == want && len == SIZE,
            "a client got different bytes ({len} bytes)"
        );
        assert!(
            at_first < SIZE as u64,
            "first byte only after the download finished ({at_first} bytes forwarded)"
        );
    }
    assert_eq!(
        relay.object_gets.load(Ordering::SeqCst),
        1,
        "one backend GET"
    );
    relay.throttle.store(0, Ordering::SeqCst);

    // Warm: served locally, no backend GET.
    let warm = c
        .http
        .get(&url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(xxhash_rust::xxh3::xxh3_64(&warm) == want);
    drop(warm);
    assert_eq!(relay.object_gets.load(Ordering::SeqCst), 1);

    // The backend dies mid-download: the client gets an error, nothing is cached.
    let other = content(8, 16 << 20);
    put_direct(&s3, "gm-cold", "broken.bin", other.clone()).await;
    relay.throttle.store(4 << 20, Ordering::SeqCst);
    let url2 = obj_url(&c, "gm-cold", "broken.bin");
    let resp = c.http.get(&url2).send().await.unwrap();
    assert!(resp.status().is_success());
    let mut body = resp.bytes_stream();
    let mut received = 0usize;
    let mut failed = false;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(b) => {
                received += b.len();
                if received > 0 && !relay.down.load(Ordering::SeqCst) {
                    relay.kill();
                }
            }
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(
        failed || received < other.len(),
        "a broken download must not look complete"
    );
    // Not cached: with the backend still down the object cannot be served.
    let down = c.http.get(&url2).send().await.unwrap();
    assert!(
        down.status().is_server_error(),
        "served while backend down: {}",
        down.status()
    );
    // Backend back: the next GET downloads and serves it in full.
    relay.revive();
    relay.throttle.store(0, Ordering::SeqCst);
    let again = c.http.get(&url2).send().await.unwrap();
    assert!(again.status().is_success(), "{}", again.status());
    assert!(again.bytes().await.unwrap() == other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_validation_write_through_and_listing() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-wt").send().await.unwrap();
    put_direct(&s3, "gm-wt", "v.txt", b"version one".to_vec()).await;
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster(&relay).await;

    // Unknown remote bucket: 404 from the backend check.
    let missing = c
        .http
        .get(obj_url(&c, "gm-no-such-bucket", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let url = obj_url(&c, "gm-wt", "v.txt");
    let get = |u: String| {
        let http = c.http.clone();
        async move {
            let r = http.get(&u).send().await.unwrap();
            assert!(r.status().is_success(), "{}", r.status());
            r.bytes().await.unwrap().to_vec()
        }
    };
    assert_eq!(get(url.clone()).await, b"version one");
    put_direct(&s3, "gm-wt", "v.txt", b"version two, longer".to_vec()).await;
    assert_eq!(get(url.clone()).await, b"version one", "cached bytes");
    assert_eq!(
        get(format!("{url}&latest=true")).await,
        b"version two, longer"
    );
    assert_eq!(get(url.clone()).await, b"version two, longer");
    // Validation as a bucket property: every GET checks the remote.
    c.grist_ok(&[
        "bucket",
        "props",
        "set",
        "s3://gm-wt",
        "versioning.validate_warm_get=true",
    ]);
    put_direct(&s3, "gm-wt", "v.txt", b"version three".to_vec()).await;
    assert_eq!(get(url.clone()).await, b"version three");
    // Deleted remotely: without sync the cached copy is still served; with sync, 404 and
    // the cached copy is gone.
    put_direct(&s3, "gm-wt", "gone.txt", b"soon gone".to_vec()).await;
    let gone = obj_url(&c, "gm-wt", "gone.txt");
    assert_eq!(get(gone.clone()).await, b"soon gone");
    s3.delete_object()
        .bucket("gm-wt")
        .key("gone.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        get(gone.clone()).await,
        b"soon gone",
        "no sync: cached copy served"
    );
    let r = c
        .http
        .get(format!("{gone}&sync=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("deleted from the remote"));
    let cached = c.grist_ok(&["ls", "s3://gm-wt", "--cached", "--json"]);
    assert!(
        !cached.contains("gone.txt"),
        "cached copy removed: {cached}"
    );
    c.grist_ok(&[
        "bucket",
        "props",
        "set",
        "s3://gm-wt",
        "versioning.validate_warm_get=false",
    ]);

    // Write-through with the backend down: error, no local copy.
    let wurl = obj_url(&c, "gm-wt", "w.bin");
    let body = content(3, 300_000);
    relay.kill();
    let r = c.http.put(&wurl).body(body.clone()).send().await.unwrap();
    assert!(r.status().is_server_error(), "{}", r.status());
    let r = c.http.get(&wurl).send().await.unwrap();
    assert!(
        r.status().is_server_error(),
        "no local copy: {}",
        r.status()
    );
    // With it up: readable through Gristmill and directly from SeaweedFS.
    relay.revive();
    let r = c.http.put(&wurl).body(body.clone()).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let gets_before = relay.object_gets.load(Ordering::SeqCst);
    assert!(get(wurl.clone()).await == body);
    assert_eq!(
        relay.object_gets.load(Ordering::SeqCst),
        gets_before,
        "served from the committed local copy"
    );
    let direct = s3
        .get_object()
        .bucket("gm-wt")
        .key("w.bin")
        .send()
        .await
        .unwrap();
    assert!(direct.body.collect().await.unwrap().into_bytes().to_vec() == body);

    // Listing: the backend's names, cached ones flagged.
    put_direct(&s3, "gm-wt", "z-uncached.txt", b"z".to_vec()).await;
    let r = c
        .http
        .get(c.url("/v1/buckets/gm-wt?provider=aws"))
        .json(&serde_json::json!({"action": "list", "value": {"props": "name,size"}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let page: gristmill_core::api::ListObjectsPage = r.json().await.unwrap();
    let flags: Vec<(String, bool)> = page
        .entries
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                e.flags & gristmill_core::api::ENTRY_IS_CACHED != 0,
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            ("v.txt".to_string(), true),
            ("w.bin".to_string(), true),
            ("z-uncached.txt".to_string(), false)
        ]
    );

    // Write-through DELETE: gone on both sides.
    let r = c.http.delete(&wurl).send().await.unwrap();
    assert!(r.status().is_success());
    assert!(
        s3.head_object()
            .bucket("gm-wt")
            .key("w.bin")
            .send()
            .await
            .is_err()
    );
    assert_eq!(c.http.get(&wurl).send().await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ht_bucket_cold_get_from_http_origin() {
    let dir = tempfile::tempdir().unwrap();
    let data = content(11, 3 << 20);
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/file.bin"), &data).unwrap();
    let port = free_port();
    let mut server = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 -m http.server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "http.server did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let env = vec![("GRISTD_HT_ALLOW_PRIVATE".to_string(), "true".to_string())];
    let c = Cluster::start_full(2, 1, &[], &env).await.unwrap();
    let bucket = format!("127.0.0.1_{port}");
    let url = c.url(&format!("/v1/objects/{bucket}/sub/file.bin?provider=ht"));
    for _ in 0..2 {
        let r = c.http.get(&url).send().await.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        assert!(r.bytes().await.unwrap() == data);
    }
    let r = c
        .http
        .get(c.url(&format!("/v1/objects/{bucket}/nope?provider=ht")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Read-only.
    let r = c.http.put(&url).body("x").send().await.unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());

    // Without the opt-in, loopback origins are refused.
    let strict = Cluster::start(1, 1).await.unwrap();
    let r = strict
        .http
        .get(strict.url(&format!("/v1/objects/{bucket}/sub/file.bin?provider=ht")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let _ = server.kill();
    let _ = server.wait();
}

/// Backend unreachable, hung, failing with 5xx, or refusing our credentials: a clear 502, 504
/// or 403 with the backend's reason, within the configured timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_failures_are_clear_errors() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-err").send().await.unwrap();
    for k in ["a", "b", "c", "d"] {
        put_direct(&s3, "gm-err", k, b"x".to_vec()).await;
    }
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster_with(&relay, 1, &[("GRISTD_BACKEND_TIMEOUT_SECS", "2")]).await;
    let get = |key: &str| {
        let (http, url) = (c.http.clone(), obj_url(&c, "gm-err", key));
        async move {
            let started = Instant::now();
            let r = http.get(url).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.text().await.unwrap(), started.elapsed())
        }
    };
    assert_eq!(get("a").await.0, 200);

    relay.kill();
    let (status, msg, _) = get("b").await;
    // Refused connections are a 502; on a loaded machine the SDK's connect timeout may fire
    // first (504) — either way a clear gateway error naming the backend.
    assert!(status == 502 || status == 504, "{status}: {msg}");
    assert!(msg.contains("backend"), "{msg}");
    relay.revive();

    relay.stall.store(true, Ordering::SeqCst);
    let (status, msg, took) = get("c").await;
    assert_eq!(status, 504, "{msg}");
    assert!(
        took < Duration::from_secs(15),
        "took {took:?} with a 2 s timeout"
    );
    relay.stall.store(false, Ordering::SeqCst);

    relay.fail500.store(true, Ordering::SeqCst);
    let (status, msg, _) = get("d").await;
    assert!(status == 502 || status == 504, "{status}: {msg}");
    assert!(
        status == 504 || msg.contains("injected backend failure") || msg.contains("InternalError"),
        "{msg}"
    );
    relay.fail500.store(false, Ordering::SeqCst);
    assert_eq!(get("d").await.0, 200, "recovers once the backend does");

    // Wrong credentials: SeaweedFS refuses the signature; the client sees 403 and why.
    let wrong =
        remote_cluster_with(&relay, 1, &[("AWS_SECRET_ACCESS_KEY", "not-the-secret")]).await;
    let r = wrong
        .http
        .get(obj_url(&wrong, "gm-err", "a"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let msg = r.text().await.unwrap();
    assert_eq!(status, 403, "{msg}");
    assert!(msg.contains("backend"), "{msg}");
}

/// Past the out-of-space mark, PUTs and cold GETs fail with 507 and leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_space_refuses_puts_and_cold_gets_with_507() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-oos").send().await.unwrap();
    put_direct(&s3, "gm-oos", "cold.bin", content(5, 100_000)).await;
    let relay = Relay::start(&weed.endpoint).await;
    // Any filesystem with data on it is past a 1% mark.
    let marks = [
        ("GRISTD_LRU_LOW_WM", "0"),
        ("GRISTD_LRU_HIGH_WM", "1"),
        ("GRISTD_OUT_OF_SPACE_WM", "1"),
    ];
    let c = remote_cluster_with(&relay, 1, &marks).await;
    c.create_bucket("gm-native").await.unwrap();
    // Refused before its body is read: the server drops the connection afterwards, so this
    // request does not leave it in the client's pool for the next one.
    let r = c
        .http
        .put(c.url("/v1/objects/gm-native/x.bin"))
        .header("connection", "close")
        .body(content(1, 50_000))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 507);
    let msg = r.text().await.unwrap();
    assert!(msg.contains("out of space"), "{msg}");
    let r = c
        .http
        .get(c.url("/v1/objects/gm-native/x.bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "nothing stored");

    let r = c
        .http
        .get(obj_url(&c, "gm-oos", "cold.bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 507);
    assert!(r.text().await.unwrap().contains("out of space"));
    let cached = c.grist_ok(&["ls", "s3://gm-oos", "--cached", "--json"]);
    assert!(!cached.contains("cold.bin"), "nothing cached: {cached}");
}

/// A moto S3 server on a free port (a second S3 implementation); any credentials work.
struct Moto {
    child: std::process::Child,
    endpoint: String,
}

impl Moto {
    async fn start() -> Moto {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .to_owned();
        let bin = std::env::var_os("MOTO_SERVER_BIN")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| root.join(".venv/bin/moto_server"));
        assert!(
            bin.exists(),
            "moto not installed: `.venv/bin/python -m pip install 'moto[server]'`"
        );
        let port = free_port();
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting moto_server");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(Instant::now() < deadline, "moto did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn get_bytes(c: &Cluster, bucket: &str, obj: &str, provider: &str, ns: &str) -> Vec<u8> {
    let r = c
        .http
        .get(c.url(&format!("/v1/objects/{bucket}/{obj}")))
        .query(&[("provider", provider), ("namespace", ns)])
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "{}: {}",
        r.status(),
        r.text().await.unwrap()
    );
    r.bytes().await.unwrap().to_vec()
}

/// Two S3 implementations side by side: the default account on SeaweedFS, an account
/// (namespace `#moto`, AWS profile `moto` with its own endpoint) on moto, and a bucket whose
/// endpoint is a bucket property; plus another Gristmill cluster attached as `ais://@rem/...`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_bucket_endpoints_moto_and_a_remote_cluster() {
    let weed = Weed::start().await;
    let moto = Moto::start().await;
    let sw = weed.client();
    let mo = s3_client(&moto.endpoint);
    for s3 in [&sw, &mo] {
        s3.create_bucket().bucket("gm-same").send().await.unwrap();
    }
    put_direct(&sw, "gm-same", "who.txt", b"seaweedfs".to_vec()).await;
    put_direct(&mo, "gm-same", "who.txt", b"moto".to_vec()).await;
    mo.create_bucket()
        .bucket("gm-motoonly")
        .send()
        .await
        .unwrap();
    put_direct(&mo, "gm-motoonly", "x.txt", b"only in moto".to_vec()).await;

    // Another cluster to attach.
    let other = Cluster::start(1, 1).await.unwrap();
    other.create_bucket("src").await.unwrap();
    for i in 0..20 {
        let r = other
            .http
            .put(other.url(&format!("/v1/objects/src/o{i:02}")))
            .body(content(500 + i, 10_000))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }

    let aws = tempfile::tempdir().unwrap();
    let creds = aws.path().join("credentials");
    let config = aws.path().join("config");
    std::fs::write(
        &creds,
        "[moto]\naws_access_key_id = testing\naws_secret_access_key = testing\n",
    )
    .unwrap();
    std::fs::write(
        &config,
        format!(
            "[profile moto]\nregion = us-east-1\nendpoint_url = {}\n",
            moto.endpoint
        ),
    )
    .unwrap();
    let relay = Relay::start(&weed.endpoint).await;
    let remote_ais = format!("rem={}", other.endpoint);
    let c = remote_cluster_with(
        &relay,
        2,
        &[
            ("AWS_SHARED_CREDENTIALS_FILE", creds.to_str().unwrap()),
            ("AWS_CONFIG_FILE", config.to_str().unwrap()),
            ("GRISTD_REMOTE_AIS", remote_ais.as_str()),
        ],
    )
    .await;

    // Same bucket name, two accounts on two servers: two separate caches.
    assert_eq!(
        get_bytes(&c, "gm-same", "who.txt", "aws", "").await,
        b"seaweedfs"
    );
    assert_eq!(
        get_bytes(&c, "gm-same", "who.txt", "aws", "#moto").await,
        b"moto"
    );
    assert_eq!(
        get_bytes(&c, "gm-same", "who.txt", "aws", "").await,
        b"seaweedfs"
    );
    let buckets: Vec<serde_json::Value> = c
        .http
        .get(c.url("/v1/buckets?provider=aws"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(buckets.len(), 2, "{buckets:?}");
    // Write-through into the moto account.
    let r = c
        .http
        .put(c.url("/v1/objects/gm-same/new.txt"))
        .query(&[("provider", "aws"), ("namespace", "#moto")])
        .body("written through")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let got = mo
        .get_object()
        .bucket("gm-same")
        .key("new.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        &got.body.collect().await.unwrap().into_bytes()[..],
        b"written through"
    );
    // An unknown account is refused with the reason.
    let r = c
        .http
        .get(c.url("/v1/objects/gm-same/who.txt"))
        .query(&[("provider", "aws"), ("namespace", "#nobody")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("no AWS profile"));

    // A remote bucket added with its endpoint as a property.
    let endpoint_props = serde_json::json!({"action": "create-bck", "value": {"extra": {"aws": {"endpoint": moto.endpoint}}}});
    let r = c
        .http
        .post(c.url("/v1/buckets/gm-motoonly?provider=aws"))
        .json(&endpoint_props)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    assert_eq!(
        get_bytes(&c, "gm-motoonly", "x.txt", "aws", "").await,
        b"only in moto"
    );

    // A client talking to a target directly (HRW direct mode) may name a remote bucket no
    // proxy has seen yet: the target has the primary add it.
    mo.create_bucket().bucket("gm-direct").send().await.unwrap();
    put_direct(&mo, "gm-direct", "d.txt", b"direct".to_vec()).await;
    let t0 = c.first_target_url().await;
    let r = c
        .http
        .get(format!("{t0}/v1/objects/gm-direct/d.txt"))
        .query(&[("provider", "aws"), ("namespace", "#moto")])
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(&r.bytes().await.unwrap()[..], b"direct");

    // Another cluster's bucket: cold GET, listing with cached flags, prefetch, write-through.
    assert!(get_bytes(&c, "src", "o03", "ais", "@rem").await == content(503, 10_000));
    let names = c.grist_ok(&["ls", "ais://@rem/src", "--json"]);
    let entries: Vec<serde_json::Value> = serde_json::from_str(&names).unwrap();
    assert_eq!(entries.len(), 20);
    let cached = c.grist_ok(&["ls", "ais://@rem/src", "--cached", "--json"]);
    assert!(
        cached.contains("o03") && !cached.contains("o04"),
        "{cached}"
    );
    let out = c.grist_ok(&["prefetch", "ais://@rem/src", "--wait", "--json"]);
    let job: gristmill_core::job::JobStatus = serde_json::from_str(&out).unwrap();
    assert_eq!((job.objects, job.skipped, job.errors), (20, 1, 0), "{out}");
    let r = c
        .http
        .put(c.url("/v1/objects/src/from-c1"))
        .query(&[("provider", "ais"), ("namespace", "@rem")])
        .body(content(9, 70_000))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let back = other
        .http
        .get(other.url("/v1/objects/src/from-c1"))
        .send()
        .await
        .unwrap();
    assert!(back.bytes().await.unwrap() == content(9, 70_000));
}

/// Above the threshold a cold GET splits into parallel range requests — one per part, however
/// many clients read at once — while clients still get their first bytes early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_cold_get_downloads_parts_in_parallel() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-par").send().await.unwrap();
    const SIZE: usize = (64 << 20) + 123;
    let data = content(21, SIZE);
    put_direct(&s3, "gm-par", "big.bin", data.clone()).await;
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster_with(
        &relay,
        1,
        &[
            ("GRISTD_COLD_GET_PARALLEL_ABOVE", "8MiB"),
            ("GRISTD_COLD_GET_CHUNK", "4MiB"),
            ("GRISTD_COLD_GET_WORKERS", "4"),
        ],
    )
    .await;
    relay.throttle.store(64 << 20, Ordering::SeqCst);
    let url = obj_url(&c, "gm-par", "big.bin");
    let clients = (0..5).map(|_| {
        let (http, url, forwarded) = (c.http.clone(), url.clone(), relay.forwarded.clone());
        tokio::spawn(async move {
            let resp = http.get(&url).send().await.unwrap();
            assert!(resp.status().is_success(), "{}", resp.status());
            let mut body = resp.bytes_stream();
            let mut got = Vec::with_capacity(SIZE);
            let mut at_first = None;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.unwrap();
                if at_first.is_none() && !chunk.is_empty() {
                    at_first = Some(forwarded.load(Ordering::SeqCst));
                }
                got.extend_from_slice(&chunk);
            }
            (got, at_first.unwrap_or(u64::MAX))
        })
    });
    for r in futures::future::join_all(clients).await {
        let (got, at_first) = r.unwrap();
        assert!(got == data, "different bytes ({} of {SIZE})", got.len());
        assert!(
            at_first < SIZE as u64,
            "first byte only after the whole download"
        );
    }
    // 17 parts of 4 MiB (the last holds 123 bytes): the first from the opening GET, 16 ranges.
    assert_eq!(relay.object_gets.load(Ordering::SeqCst), 17);
    relay.throttle.store(0, Ordering::SeqCst);
    let warm = c
        .http
        .get(&url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(warm == data);
    assert_eq!(
        relay.object_gets.load(Ordering::SeqCst),
        17,
        "served from the cache"
    );
}

/// Cold GET validation by the backend's checksum (`checksum.validate_cold_get`, on by
/// default): SeaweedFS stores the CRC32 the SDK sent with the PUT and returns it with
/// `x-amz-checksum-mode: ENABLED`. One byte flipped on the wire (the relay) is caught: the
/// client never gets a complete body and nothing is cached. The check used the CRC, not the
/// ETag's MD5. With validation off the flip is not checked (and is cached: what the property
/// trades away).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cold_get_checks_the_backends_crc_and_caches_nothing_corrupt() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-crc").send().await.unwrap();
    let data = content(21, 5 << 20);
    put_direct(&s3, "gm-crc", "obj.bin", data.clone()).await;
    put_direct(&s3, "gm-crc", "unchecked.bin", data.clone()).await;
    let stored = s3
        .head_object()
        .bucket("gm-crc")
        .key("obj.bin")
        .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert!(
        stored.checksum_crc32().is_some(),
        "the origin keeps a CRC32"
    );
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster_with(&relay, 1, &[("GRISTD_COLD_GET_PARALLEL_ABOVE", "1GiB")]).await;
    let smap = c.smap().await.unwrap();
    let complete = |url: String| {
        let c = &c;
        async move { super::coldfill::get_complete(c, &url).await }
    };
    let url = obj_url(&c, "gm-crc", "obj.bin");

    relay.corrupt_gets.store(1, Ordering::SeqCst);
    let got = complete(url.clone()).await;
    assert_eq!(
        relay.corrupted.load(Ordering::SeqCst),
        1,
        "the relay flipped a byte"
    );
    assert!(
        got.is_none(),
        "a body with a flipped byte was served complete"
    );
    let mismatch = r#"grist_cold_get_checksum_mismatch_total{algo="crc32"}"#;
    assert_eq!(super::scrub::metric(&c, &smap, mismatch).await, 1);
    // Nothing cached: the next GET downloads again, gets the good bytes, and caches them.
    let before = relay.object_gets.load(Ordering::SeqCst);
    assert!(complete(url.clone()).await.as_deref() == Some(&data[..]));
    assert_eq!(relay.object_gets.load(Ordering::SeqCst), before + 1);
    assert!(complete(url.clone()).await.as_deref() == Some(&data[..]));
    assert_eq!(
        relay.object_gets.load(Ordering::SeqCst),
        before + 1,
        "cached"
    );
    let validated = |algo: &str| format!(r#"grist_cold_get_validated_total{{algo="{algo}"}}"#);
    assert_eq!(
        super::scrub::metric(&c, &smap, &validated("crc32")).await,
        1
    );
    assert_eq!(super::scrub::metric(&c, &smap, &validated("md5")).await, 0);

    // Validation off: the flipped byte goes through unchecked.
    c.grist_ok(&[
        "bucket",
        "props",
        "set",
        "s3://gm-crc",
        "checksum.validate_cold_get=false",
    ]);
    relay.corrupt_gets.store(1, Ordering::SeqCst);
    let got = complete(obj_url(&c, "gm-crc", "unchecked.bin"))
        .await
        .unwrap();
    assert_eq!(relay.corrupted.load(Ordering::SeqCst), 2);
    assert!(
        got != data,
        "validation off: the flipped byte is not caught"
    );
    assert_eq!(super::scrub::metric(&c, &smap, mismatch).await, 1);
}

/// The workspace root (for `.venv/bin/...` clients).
fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// The body of a GetObject answer (which must have succeeded).
async fn body_of<E: std::fmt::Debug>(
    out: Result<aws_sdk_s3::operation::get_object::GetObjectOutput, E>,
) -> Vec<u8> {
    out.unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes()
        .to_vec()
}

/// Runs a client from the venv with S3 credentials for Gristmill's S3 front; its stdout.
fn venv_client(bin: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(workspace_root().join(".venv/bin").join(bin))
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "gristmill")
        .env("AWS_SECRET_ACCESS_KEY", "gristmill-secret")
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    assert!(
        out.status.success(),
        "{bin} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Issue 18: an `s3://` bucket on SeaweedFS read and written through Gristmill's S3 API by
/// aws-sdk-s3, boto3 and s5cmd: the first GET downloads once, later GETs (and ranges) are
/// served from the cache, the listing shows the remote's objects and the cache shows which
/// are cached, PUT and DELETE write through. A native bucket of the same name takes the name
/// over; an `s3_alias` property reaches the remote one again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_bucket_through_the_s3_api() {
    let weed = Weed::start().await;
    let direct = weed.client();
    direct
        .create_bucket()
        .bucket("gm-front")
        .send()
        .await
        .unwrap();
    let a = content(1, 300_000);
    put_direct(&direct, "gm-front", "a", a.clone()).await;
    put_direct(&direct, "gm-front", "b", b"bee".to_vec()).await;
    put_direct(&direct, "gm-front", "dir/c", b"sea".to_vec()).await;
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster(&relay).await;
    // The bucket joins the cluster on first access, as on the native API.
    c.grist_ok(&["ls", "s3://gm-front"]);
    // Gristmill's own S3 front (auth off: its built-in key).
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::new()
            .behavior_version_latest()
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .endpoint_url(&c.endpoint)
            .force_path_style(true)
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "gristmill",
                "gristmill-secret",
                None,
                None,
                "test",
            ))
            .build(),
    );
    let read = |key: &'static str| {
        let s3 = s3.clone();
        async move { body_of(s3.get_object().bucket("gm-front").key(key).send().await).await }
    };

    let before = relay.object_gets.load(Ordering::SeqCst);
    assert_eq!(read("a").await, a, "cold GET");
    assert_eq!(relay.object_gets.load(Ordering::SeqCst), before + 1);
    assert_eq!(read("a").await, a, "warm GET");
    let part = s3
        .get_object()
        .bucket("gm-front")
        .key("a")
        .range("bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(part.content_length(), Some(1000));
    assert_eq!(body_of(Ok::<_, ()>(part)).await.as_slice(), &a[1000..2000]);
    let head = s3
        .head_object()
        .bucket("gm-front")
        .key("a")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(a.len() as i64));
    assert_eq!(
        relay.object_gets.load(Ordering::SeqCst),
        before + 1,
        "served from the cache"
    );

    // The listing has the remote's objects; the cache has only what was read.
    let listed = s3
        .list_objects_v2()
        .bucket("gm-front")
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["a", "b", "dir/c"]);
    let cached = c.grist_ok(&["ls", "s3://gm-front", "--cached"]);
    assert!(
        cached.contains('a') && !cached.contains("dir/c"),
        "{cached}"
    );
    let buckets = s3.list_buckets().send().await.unwrap();
    assert!(
        buckets
            .buckets()
            .iter()
            .any(|b| b.name() == Some("gm-front"))
    );

    // Writes go through to SeaweedFS.
    s3.put_object()
        .bucket("gm-front")
        .key("new")
        .body(ByteStream::from_static(b"written through"))
        .send()
        .await
        .unwrap();
    let there = direct
        .get_object()
        .bucket("gm-front")
        .key("new")
        .send()
        .await;
    assert_eq!(body_of(there).await.as_slice(), b"written through");
    s3.delete_object()
        .bucket("gm-front")
        .key("b")
        .send()
        .await
        .unwrap();
    assert!(
        direct
            .head_object()
            .bucket("gm-front")
            .key("b")
            .send()
            .await
            .is_err()
    );
    let refused = s3
        .create_multipart_upload()
        .bucket("gm-front")
        .key("m")
        .send()
        .await;
    assert!(
        refused.is_err(),
        "multipart into a remote bucket is refused, not cached only"
    );

    // boto3 and s5cmd, unmodified, through the same front.
    let boto = venv_client(
        "python",
        &[
            "-c",
            "import boto3, sys; s3 = boto3.client('s3', endpoint_url=sys.argv[1]); \
             s3.put_object(Bucket='gm-front', Key='from-boto3', Body=b'boto3 bytes'); \
             sys.stdout.write(s3.get_object(Bucket='gm-front', Key='dir/c')['Body'].read().decode())",
            &c.endpoint,
        ],
    );
    assert_eq!(boto, b"sea");
    let got = venv_client(
        "s5cmd",
        &[
            "--endpoint-url",
            &c.endpoint,
            "cat",
            "s3://gm-front/from-boto3",
        ],
    );
    assert_eq!(got, b"boto3 bytes");
    let ls = venv_client(
        "s5cmd",
        &["--endpoint-url", &c.endpoint, "ls", "s3://gm-front/*"],
    );
    let ls = String::from_utf8_lossy(&ls);
    assert!(
        ls.contains("from-boto3") && ls.contains("new") && !ls.contains(" b\n"),
        "{ls}"
    );
    let there = direct
        .get_object()
        .bucket("gm-front")
        .key("from-boto3")
        .send()
        .await;
    assert!(there.is_ok(), "boto3's PUT reached SeaweedFS");

    // A native bucket of the same name takes the name; an alias reaches the remote one.
    c.create_bucket("gm-front").await.unwrap();
    let shadowed = s3.get_object().bucket("gm-front").key("a").send().await;
    assert_eq!(
        shadowed
            .err()
            .and_then(|e| e.into_service_error().meta().code().map(str::to_owned)),
        Some("NoSuchKey".to_owned())
    );
    c.grist_ok(&[
        "bucket",
        "props",
        "set",
        "s3://gm-front",
        "s3_alias=gm-front-remote",
    ]);
    let by_alias = s3
        .get_object()
        .bucket("gm-front-remote")
        .key("a")
        .send()
        .await;
    assert_eq!(body_of(by_alias).await.as_slice(), &a[..]);
    assert_eq!(
        relay.object_gets.load(Ordering::SeqCst),
        before + 2,
        "one more download: dir/c for boto3"
    );
}

/// Issue 18: `s3://` credentials come from the standard AWS chain. A target whose only
/// credentials are a web identity token file and a role (EKS IRSA), with `AWS_ENDPOINT_URL`
/// pointing at moto (whose STS answers AssumeRoleWithWebIdentity), reads a bucket; a named
/// profile whose credentials come from a `credential_process` that hands out keys expiring
/// in two seconds is asked again as they expire (refreshed, not cached past expiry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_credential_chain_web_identity_and_refresh() {
    let moto = Moto::start().await;
    let mo = s3_client(&moto.endpoint);
    mo.create_bucket().bucket("gm-wi").send().await.unwrap();
    for i in 0..3 {
        put_direct(&mo, "gm-wi", &format!("o{i}"), content(900 + i, 5000)).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJnbSJ9.c2ln").unwrap();
    // A credential process that counts its runs and hands out 2-second credentials.
    let runs = dir.path().join("runs");
    let script = dir.path().join("creds.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho run >> {}\nexp=$(date -u -d '+2 seconds' +%Y-%m-%dT%H:%M:%SZ)\n\
             printf '{{\"Version\":1,\"AccessKeyId\":\"testing\",\"SecretAccessKey\":\"testing\",\"SessionToken\":\"t\",\"Expiration\":\"%s\"}}' \"$exp\"\n",
            runs.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.path().join("config");
    std::fs::write(
        &config,
        format!(
            "[profile expiring]\nregion = us-east-1\nendpoint_url = {}\ncredential_process = {}\n",
            moto.endpoint,
            script.display()
        ),
    )
    .unwrap();
    let env: Vec<(String, String)> = [
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.to_str().unwrap()),
        (
            "AWS_ROLE_ARN",
            "arn:aws:iam::123456789012:role/gristmill-cache",
        ),
        ("AWS_ROLE_SESSION_NAME", "gristmill"),
        ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_CONFIG_FILE", config.to_str().unwrap()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let c = Cluster::start_full(1, 1, &[], &env).await.unwrap();
    // No keys anywhere but the token: the chain assumed the role through moto's STS.
    assert_eq!(
        get_bytes(&c, "gm-wi", "o0", "aws", "").await,
        content(900, 5000)
    );

    // The profile's process runs again once its credentials expire.
    let count = || {
        std::fs::read_to_string(&runs)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    assert_eq!(
        get_bytes(&c, "gm-wi", "o1", "aws", "#expiring").await,
        content(901, 5000)
    );
    let first = count();
    assert!(first >= 1, "the credential process ran");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        get_bytes(&c, "gm-wi", "o2", "aws", "#expiring").await,
        content(902, 5000)
    );
    assert!(
        count() > first,
        "expired credentials were fetched again ({first} runs before, {} after)",
        count()
    );
}

/// With cluster users, a remote bucket — added on first use, so nobody owns it — is opened to
/// anonymous readers only by an admin: a user who may write to it is refused
/// PutBucketPolicy/PutBucketAcl over S3 (403, as over the native API), and anonymous reads
/// stay closed until the admin's policy allows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_an_admin_opens_an_unowned_remote_bucket_to_anonymous_reads() {
    use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
    use gristmill_tests::secure::{SecureCluster, SecureOptions};
    let weed = Weed::start().await;
    let backend = weed.client();
    backend
        .create_bucket()
        .bucket("gm-pol")
        .send()
        .await
        .unwrap();
    put_direct(&backend, "gm-pol", "k", b"remote bytes".to_vec()).await;
    let env = [
        ("GRISTD_S3_ENDPOINT", weed.endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_REGION", "us-east-1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let c = SecureCluster::start(SecureOptions {
        targets: 1,
        auth: true,
        env,
        ..Default::default()
    })
    .await
    .unwrap();
    // The admin reads it natively: the remote bucket is added, with no owner.
    let r = c.http.get(obj_url(&c, "gm-pol", "k")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let writer = c.add_user("w", &["write:gm-pol"], true).await.unwrap();
    let admin = c.add_user("a", &["admin"], true).await.unwrap();
    let s3 = |key: &str, secret: &str| {
        aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .endpoint_url(&c.endpoint)
                .region(Region::new("us-east-1"))
                .credentials_provider(Credentials::new(key, secret, None, None, "test"))
                .force_path_style(true)
                .build(),
        )
    };
    let writer = s3(&writer.s3_access_key, &writer.s3_secret_key);
    let admin = s3(&admin.s3_access_key, &admin.s3_secret_key);
    let anonymous = reqwest::Client::new();
    let anonymous_get = || async {
        anonymous
            .get(c.url("/gm-pol/k"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::gm-pol/*"}]}"#;
    // The writer may write to it, not open it.
    let got = writer.get_object().bucket("gm-pol").key("k").send().await;
    assert!(got.is_ok(), "{got:?}");
    let e = writer
        .put_bucket_policy()
        .bucket("gm-pol")
        .policy(policy)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        e.raw_response().map(|r| r.status().as_u16()),
        Some(403),
        "{e:?}"
    );
    let e = writer
        .put_bucket_acl()
        .bucket("gm-pol")
        .acl(aws_sdk_s3::types::BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        e.raw_response().map(|r| r.status().as_u16()),
        Some(403),
        "{e:?}"
    );
    assert_eq!(anonymous_get().await, 403);
    admin
        .put_bucket_policy()
        .bucket("gm-pol")
        .policy(policy)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous_get().await, 200);
}
