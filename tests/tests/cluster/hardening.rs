//! Limits and slow clients: slowloris heads, 10,000 headers, a 100 MB header, long URLs and
//! names, stalled bodies, clients that stop reading, too many connections from one address,
//! oversized S3 XML — each refused with a clear status (or the connection closed) while a
//! control GET keeps answering promptly, on the proxy and on a target reached directly.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gristmill_tests::{Cluster, content};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Short limits so the test takes seconds: 2 s to send a head, 2 s between body chunks,
/// 3 s of silence on a busy connection, 48 connections per client on targets.
const LIMITS: &str = "[limits]\nheader_read_timeout = \"2s\"\nbody_read_timeout = \"2s\"\n\
                      idle_timeout = \"3s\"\nmax_url_bytes = \"8KiB\"\n";

fn target_env() -> Vec<(String, String)> {
    [
        ("GRISTD_HEADER_READ_TIMEOUT", "2s"),
        ("GRISTD_BODY_READ_TIMEOUT", "2s"),
        ("GRISTD_IDLE_TIMEOUT", "3s"),
        ("GRISTD_MAX_CONNS_PER_CLIENT", "48"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// Reads a response head (status code) from a raw socket, within `limit`.
async fn read_status(s: &mut TcpStream, limit: Duration) -> Option<u16> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = Instant::now() + limit;
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&buf)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
}

/// Whether the server closed the socket (EOF or reset) within `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut chunk = [0u8; 65536];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// Control GETs in the background: records the slowest answer and any failure.
struct Control {
    stop: Arc<AtomicBool>,
    slowest_ms: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    done: tokio::task::JoinHandle<u64>,
}

impl Control {
    fn start(urls: Vec<String>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let slowest_ms = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let (s, w, f) = (stop.clone(), slowest_ms.clone(), failures.clone());
        let done = tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            let mut n = 0;
            while !s.load(Ordering::Relaxed) {
                for url in &urls {
                    let t = Instant::now();
                    let ok = matches!(http.get(url).send().await, Ok(r) if r.status().is_success());
                    if !ok {
                        f.fetch_add(1, Ordering::Relaxed);
                    }
                    w.fetch_max(t.elapsed().as_millis() as u64, Ordering::Relaxed);
                    n += 1;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            n
        });
        Self {
            stop,
            slowest_ms,
            failures,
            done,
        }
    }

    /// Stops and asserts every control request succeeded within `limit`.
    async fn check(self, limit: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let n = self.done.await.unwrap();
        let slowest = Duration::from_millis(self.slowest_ms.load(Ordering::Relaxed));
        assert!(n > 10, "too few control requests ran: {n}");
        assert_eq!(
            self.failures.load(Ordering::Relaxed),
            0,
            "control requests failed"
        );
        assert!(
            slowest < limit,
            "slowest control request took {slowest:?} (limit {limit:?})"
        );
    }
}

/// Slowloris heads, 10,000 headers and a 100 MB header against one node, while control GETs
/// run; every attack is refused or cut off.
async fn attack(addr: &str) {
    // 1. Slowloris: 40 connections each dribbling a request head, a byte every 300 ms. The
    //    node closes each one once the 2 s head timeout runs out.
    let mut slow = Vec::new();
    for _ in 0..40 {
        let addr = addr.to_owned();
        slow.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(&addr).await.unwrap();
            let head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            let started = Instant::now();
            for b in head.iter() {
                if s.write_all(&[*b]).await.is_err() {
                    return started.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                if started.elapsed() > Duration::from_secs(20) {
                    break;
                }
            }
            // Still writable after 20 s? Then see whether it is closed now.
            let closed = closed_within(&mut s, Duration::from_secs(1)).await;
            assert!(closed, "a slowloris connection lived for 20 s");
            started.elapsed()
        }));
    }

    // 2. 10,000 headers: 431.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..10_000 {
        req.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    let writer = {
        let (mut rd, mut wr) = s.into_split();
        let w = tokio::spawn(async move {
            let _ = wr.write_all(&req).await;
        });
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), rd.read(&mut buf))
            .await
            .expect("no answer to 10,000 headers")
            .unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(
            text.starts_with("HTTP/1.1 431"),
            "10,000 headers: expected 431, got {text:?}"
        );
        w
    };
    writer.abort();

    // 3. A 100 MB header: refused after a bounded read (431 or the connection cut), long
    //    before 100 MB are accepted.
    s = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let sent = Arc::new(AtomicU64::new(0));
    let sent2 = sent.clone();
    let w = tokio::spawn(async move {
        let _ = wr
            .write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ")
            .await;
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..100 {
            if wr.write_all(&chunk).await.is_err() {
                return;
            }
            sent2.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        let _ = wr.write_all(b"\r\n\r\n").await;
    });
    let mut buf = vec![0u8; 4096];
    let started = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(20), rd.read(&mut buf)).await;
    let text = match got {
        Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        Ok(Err(e)) => format!("reset: {e}"),
        Err(_) => panic!("100 MB header: no answer in 20 s"),
    };
    assert!(
        text.starts_with("HTTP/1.1 431") || text.starts_with("reset") || text.is_empty(),
        "100 MB header: expected 431 or a cut connection, got {text:?}"
    );
    let _ = tokio::time::timeout(Duration::from_secs(10), w).await;
    assert!(
        sent.load(Ordering::Relaxed) < 100 << 20,
        "the node swallowed a 100 MB header"
    );
    assert!(started.elapsed() < Duration::from_secs(20));

    for h in slow {
        let lived = h.await.unwrap();
        assert!(
            lived < Duration::from_secs(10),
            "a slowloris connection lived {lived:?} (head timeout 2 s)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_and_oversized_clients_are_refused_while_gets_keep_answering() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("limits.toml");
    std::fs::write(&conf, LIMITS).unwrap();
    let conf = conf.display().to_string();
    let c = Cluster::start_full(1, 1, &["--config", &conf], &target_env())
        .await
        .unwrap();
    c.create_bucket("hard").await.unwrap();
    let body = content(1, 4096);
    let r = c
        .http
        .put(c.url("/v1/objects/hard/ctl"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let smap = c.smap().await.unwrap();
    let target_url = smap.tmap.values().next().unwrap().url().to_owned();

    let control = Control::start(vec![
        c.url("/v1/health"),
        c.url("/v1/objects/hard/ctl"),
        format!("{target_url}/v1/objects/hard/ctl"),
    ]);
    let proxy = host_port(&c.endpoint);
    let target = host_port(&target_url);
    tokio::join!(attack(&proxy), attack(&target));
    control.check(Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_limit_answers_with_a_clear_status() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("limits.toml");
    std::fs::write(&conf, LIMITS).unwrap();
    let conf = conf.display().to_string();
    let c = Cluster::start_full(1, 1, &["--config", &conf], &target_env())
        .await
        .unwrap();
    c.create_bucket("lim").await.unwrap();
    let smap = c.smap().await.unwrap();
    let target_url = smap.tmap.values().next().unwrap().url().to_owned();
    let target = host_port(&target_url);
    let proxy = host_port(&c.endpoint);

    // URL over the 8 KiB limit: 414 with a JSON body.
    let long = format!("/v1/objects/lim/{}", "n".repeat(9000));
    let r = c.http.get(c.url(&long)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 414);
    let e: gristmill_core::ErrorBody = r.json().await.unwrap();
    assert_eq!(e.status, 414);
    // Object name over 1024 bytes (URL under the limit): 400.
    let r = c
        .http
        .put(c.url(&format!("/v1/objects/lim/{}", "n".repeat(1025))))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("1024-byte limit"));
    // Headers over 64 KiB in all (under hyper's buffer): 431.
    let mut req = c.http.get(c.url("/v1/health"));
    for i in 0..40 {
        req = req.header(format!("x-fill-{i}"), "f".repeat(2000));
    }
    assert_eq!(req.send().await.unwrap().status().as_u16(), 431);

    // A body that stops arriving: 408 after the 2 s gap, and nothing is stored.
    for addr in [&target, &proxy] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(
            b"PUT /v1/objects/lim/stalled HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789",
        )
        .await
        .unwrap();
        let started = Instant::now();
        let status = read_status(&mut s, Duration::from_secs(15)).await;
        if addr == &target {
            assert_eq!(status, Some(408), "stalled body on the target");
            assert!(started.elapsed() >= Duration::from_millis(1500));
        } else {
            // The proxy drains the body before its redirect: the same 408.
            assert_eq!(status, Some(408), "stalled body on the proxy");
        }
    }
    let r = c
        .http
        .get(format!("{target_url}/v1/objects/lim/stalled"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404, "a stalled PUT left an object");

    // A client that stops reading a large response: the connection is closed once nothing
    // moves for the 3 s idle limit.
    let big = content(2, 32 << 20);
    let r = c
        .http
        .put(format!("{target_url}/v1/objects/lim/big"))
        .body(big)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let mut s = TcpStream::connect(&target).await.unwrap();
    s.write_all(b"GET /v1/objects/lim/big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut got = 0usize;
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got += n,
            Err(_) => panic!("the stalled download was neither closed nor finished"),
        }
    }
    assert!(
        got < 32 << 20,
        "a client that stopped reading still got the whole object"
    );

    // Connections per client address: over 48 open ones the target answers 429 and closes.
    // (Opened all at once: idle ones are closed after the 2 s head timeout.)
    let mut socks = Vec::new();
    for _ in 0..80 {
        socks.push(TcpStream::connect(&target).await.unwrap());
    }
    let peeks = futures::future::join_all(socks.into_iter().map(|mut s| async move {
        let mut peek = [0u8; 64];
        match tokio::time::timeout(Duration::from_millis(500), s.read(&mut peek)).await {
            Ok(Ok(n)) if n > 0 => (Some(String::from_utf8_lossy(&peek[..n]).into_owned()), s),
            _ => (None, s),
        }
    }))
    .await;
    let mut open = Vec::new();
    let mut refused = 0;
    for (answer, s) in peeks {
        match answer {
            Some(text) => {
                assert!(text.starts_with("HTTP/1.1 429"), "{text:?}");
                refused += 1;
            }
            None => open.push(s),
        }
    }
    assert!(
        refused > 0,
        "80 connections from one address were all accepted"
    );
    assert!(open.len() <= 48, "{} connections accepted", open.len());
    drop(open);
    // Slots come back as connections close.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = c.http.get(format!("{target_url}/v1/health")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(Instant::now() < deadline, "the target did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // S3: an XML body over 2 MiB is refused with an S3 error, not parsed.
    let xml = format!(
        "<Delete>{}</Delete>",
        "<Object><Key>k</Key></Object>".repeat(80_000)
    );
    let r = c
        .http
        .post(c.url("/lim?delete"))
        .header("content-type", "application/xml")
        .body(xml)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let text = r.text().await.unwrap();
    assert!(text.contains("MaxMessageLengthExceeded"), "{text}");
    // Multipart part numbers outside 1..=10000: 400.
    let r = c
        .http
        .put(c.url("/lim/mp?partNumber=10001&uploadId=x"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // A huge page size is clamped, not an error.
    let r = c
        .http
        .get(c.url("/v1/buckets/lim"))
        .json(&serde_json::json!({"action": "list", "value": {"pagesize": 1_000_000_000u64}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let r = c
        .http
        .get(c.url("/lim?list-type=2&max-keys=100000000"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    // The proxy still serves.
    let r = c.http.get(c.url("/v1/health")).send().await.unwrap();
    assert!(r.status().is_success());
}

/// Reads one response head from a raw socket (lower-cased), within `limit`.
async fn read_head(s: &mut TcpStream, limit: Duration) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    let deadline = Instant::now() + limit;
    while !buf.ends_with(b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut byte)).await {
            Ok(Ok(1)) => buf.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&buf).to_ascii_lowercase()
}

/// A client that sent `Expect: 100-continue` and got a final answer before `100 Continue`
/// may never send its body (botocore then reuses the connection for its next request). The
/// node must close the connection: kept open, it read the next request's first bytes as
/// the withheld body, and that request failed (an S3 SignatureDoesNotMatch, once in CI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_before_100_continue_closes_the_connection() {
    let c = Cluster::start(1, 1).await.unwrap();
    c.create_bucket("cont").await.unwrap();
    let proxy = host_port(&c.endpoint);
    let smap = c.smap().await.unwrap();
    let target = host_port(smap.tmap.values().next().unwrap().url());
    let long_name = format!("PUT /v1/objects/cont/{} HTTP/1.1", "n".repeat(1025));
    let cases = [
        // S3 PUT to a bucket that does not exist: NoSuchBucket, body never read.
        (&proxy, "PUT /no-such-bucket/k HTTP/1.1", "404"),
        // Native PUT on the proxy: the redirect, body never read.
        (&proxy, "PUT /v1/objects/cont/k HTTP/1.1", "307"),
        // Native PUT on a target, name over 1024 bytes: refused before the body.
        (&target, long_name.as_str(), "400"),
    ];
    for (addr, line, status) in cases {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head =
            format!("{line}\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
        s.write_all(head.as_bytes()).await.unwrap();
        let answer = read_head(&mut s, Duration::from_secs(10)).await;
        assert!(
            answer.starts_with(&format!("http/1.1 {status}")),
            "{line}: {answer}"
        );
        assert!(answer.contains("connection: close"), "{line}: {answer}");
        // What botocore does next: another request, body never sent.
        let _ = s
            .write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
        let rest = String::from_utf8_lossy(&rest);
        assert!(
            !rest.contains("HTTP/1.1"),
            "{line}: the connection answered another request: {rest}"
        );
    }

    // The same requests with the body sent: the node reads it and keeps the connection.
    for (addr, line, status) in cases {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = format!("{line}\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
        s.write_all(head.as_bytes()).await.unwrap();
        let answer = read_head(&mut s, Duration::from_secs(10)).await;
        assert!(
            answer.starts_with(&format!("http/1.1 {status}")),
            "{line}: {answer}"
        );
        assert!(!answer.contains("connection: close"), "{line}: {answer}");
    }

    // A handler that asks for the body sends 100 Continue and keeps the connection.
    let mut s = TcpStream::connect(&target).await.unwrap();
    s.write_all(
        b"PUT /v1/objects/cont/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .await
    .unwrap();
    let interim = read_head(&mut s, Duration::from_secs(10)).await;
    assert!(interim.starts_with("http/1.1 100"), "{interim}");
    s.write_all(b"hello").await.unwrap();
    let answer = read_head(&mut s, Duration::from_secs(10)).await;
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(!answer.contains("connection: close"), "{answer}");
}
