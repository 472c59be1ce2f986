//! The cache-fill path of cold GETs (`target/src/read/cold.rs`): the remote's MD5 ETag is checked on
//! a thread of its own and a mismatch is never served as a complete body nor cached; a good
//! copy is cached once; cache fills commit their index entry without an fsync, so a target
//! killed with SIGKILL right after may lose entries (they are fetched again) but never serves
//! a torn copy, and its startup scan leaves exactly one data file per cached object.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use gristmill_tests::{Cluster, content};
use md5::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An HTTP origin (for `ht://` buckets) serving fixed objects with the ETag it is told to
/// send, counting GETs per path.
struct Origin {
    port: u16,
    gets: Arc<Mutex<HashMap<String, usize>>>,
}

impl Origin {
    async fn start(objects: HashMap<String, (Vec<u8>, String)>) -> Origin {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let gets: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let objects = Arc::new(objects);
        let counts = gets.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let (objects, counts) = (objects.clone(), counts.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let mut first = text.split_whitespace();
                    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
                    let Some((body, etag)) = objects.get(path) else {
                        let _ = s
                            .write_all(
                                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                            )
                            .await;
                        return;
                    };
                    if method == "GET" {
                        *counts.lock().unwrap().entry(path.to_owned()).or_default() += 1;
                    }
                    let hdr = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nETag: \"{etag}\"\r\n\
                         Last-Modified: Mon, 30 Nov 2026 10:00:00 GMT\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    if s.write_all(hdr.as_bytes()).await.is_err() || method != "GET" {
                        return;
                    }
                    for part in body.chunks(64 * 1024) {
                        if s.write_all(part).await.is_err() {
                            return;
                        }
                    }
                    let _ = s.shutdown().await;
                });
            }
        });
        Origin { port, gets }
    }

    fn gets(&self, path: &str) -> usize {
        self.gets.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn bucket(&self) -> String {
        format!("127.0.0.1_{}", self.port)
    }
}

fn md5_hex(data: &[u8]) -> String {
    let mut h = md5::Md5::new();
    h.update(data);
    format!("{:x}", h.finalize())
}

/// GETs `url`; Some(bytes) only when the status and the whole body stream succeeded.
pub(super) async fn get_complete(c: &Cluster, url: &str) -> Option<Vec<u8>> {
    let r = c.http.get(url).send().await.unwrap();
    if !r.status().is_success() {
        return None;
    }
    let mut body = r.bytes_stream();
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk.ok()?);
    }
    Some(out)
}

/// Data files under a target's mountpaths (`obj/`), and files left in `tmp/`.
fn files_on_disk(c: &Cluster, target: usize) -> (usize, usize) {
    fn count(dir: &std::path::Path) -> usize {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return 0;
        };
        rd.map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                count(&e.path())
            } else {
                1
            }
        })
        .sum()
    }
    let mps = &c.mountpaths[target];
    (
        mps.iter().map(|m| count(&m.join("obj"))).sum(),
        mps.iter().map(|m| count(&m.join("tmp"))).sum(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_fill_checks_md5_and_survives_kill9_without_torn_copies() {
    const N: usize = 24;
    let good = content(1, 3 << 20);
    let bad = content(2, 3 << 20);
    let mut objects = HashMap::new();
    objects.insert("/good".to_owned(), (good.clone(), md5_hex(&good)));
    // The ETag is the MD5 of other bytes: what a corrupted transfer looks like. (Names without
    // dots: the ht backend percent-encodes every non-alphanumeric byte of the path.)
    objects.insert("/bad".to_owned(), (bad.clone(), md5_hex(&good)));
    let many: Vec<Vec<u8>> = (0..N)
        .map(|i| content(100 + i as u64, (i * 97_531) % (2 << 20)))
        .collect();
    for (i, body) in many.iter().enumerate() {
        objects.insert(format!("/many/{i}"), (body.clone(), md5_hex(body)));
    }
    let origin = Origin::start(objects).await;
    let env = vec![("GRISTD_HT_ALLOW_PRIVATE".to_string(), "true".to_string())];
    let mut c = Cluster::start_full(1, 2, &[], &env).await.unwrap();
    let (endpoint, bucket) = (c.endpoint.clone(), origin.bucket());
    let url = |name: &str| format!("{endpoint}/v1/objects/{bucket}/{name}?provider=ht");

    // A mismatched MD5: never a complete body, never cached (each GET goes to the origin).
    for round in 1..=2 {
        let got = get_complete(&c, &url("bad")).await;
        assert!(
            got.is_none(),
            "round {round}: a body whose MD5 does not match the ETag was served complete"
        );
        assert_eq!(origin.gets("/bad"), round, "bad must not be cached");
    }

    // A good one: complete, cached after one download.
    for _ in 0..2 {
        assert!(get_complete(&c, &url("good")).await.unwrap() == good);
    }
    assert_eq!(origin.gets("/good"), 1);

    // Many fills at once, then SIGKILL right away: the relaxed index commits may be lost.
    let urls: Vec<String> = (0..N).map(|i| url(&format!("many/{i}"))).collect();
    let c_ref = &c;
    let bodies: Vec<Option<Vec<u8>>> = futures::stream::iter(urls.iter())
        .map(|u| async move { get_complete(c_ref, u).await })
        .buffered(8)
        .collect()
        .await;
    for (i, b) in bodies.iter().enumerate() {
        assert!(
            b.as_deref() == Some(&many[i][..]),
            "many/{i} on the first GET"
        );
    }
    c.targets[0].kill9();
    c.restart_target(0).await.unwrap();

    // Every object is served whole: from its copy, or fetched again.
    for (i, u) in urls.iter().enumerate() {
        assert!(
            get_complete(&c, u).await.as_deref() == Some(&many[i][..]),
            "many/{i} after the restart"
        );
        let fetched = origin.gets(&format!("/many/{i}"));
        assert!(
            (1..=2).contains(&fetched),
            "many/{i} fetched {fetched} times"
        );
    }
    assert!(get_complete(&c, &url("good")).await.unwrap() == good);
    // Now all cached: no more downloads.
    let before: usize = (0..N).map(|i| origin.gets(&format!("/many/{i}"))).sum();
    for (i, u) in urls.iter().enumerate() {
        assert!(get_complete(&c, u).await.as_deref() == Some(&many[i][..]));
    }
    let after: usize = (0..N).map(|i| origin.gets(&format!("/many/{i}"))).sum();
    assert_eq!(before, after, "served from the cache after the refetch");
    // One data file per cached object (the startup scan removed orphans), no temp files.
    let (data_files, tmp_files) = files_on_disk(&c, 0);
    assert_eq!(data_files, N + 1, "data files on the target");
    assert_eq!(tmp_files, 0, "temp files on the target");
}
