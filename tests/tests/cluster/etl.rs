//! ETL on real clusters: a Python ETL (numpy) and a command ETL (`gzip`) inline and composed,
//! an offline bucket transform with an extension map and planted bad inputs, hostile
//! transforms (endless loop, huge allocation, exit, reading secrets or the data directory,
//! opening a socket), and an HTTP ETL served by a small Python web server.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gristmill_core::job::{JobState, JobStatus};
use gristmill_core::{Bck, Provider};
use gristmill_shard::Format;
use gristmill_tests::{Cluster, content, free_port};

use super::shards::{members_of, shard};

const NUMPY_ETL: &str = r#"
import numpy as np

def transform(data, path, args):
    if data.startswith(b"BAD"):
        raise ValueError("cannot decode " + path)
    a = np.frombuffer(data, dtype=np.uint8).astype(np.uint16)
    return ((a * 3 + 7) % 256).astype(np.uint8)[::-1].tobytes()
"#;

/// What `NUMPY_ETL` computes, in Rust.
fn numpy_etl(data: &[u8]) -> Vec<u8> {
    data.iter()
        .rev()
        .map(|b| ((*b as u16 * 3 + 7) % 256) as u8)
        .collect()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut child = std::process::Command::new("gzip")
        .args(["-c", "-n"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let feed = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    feed.join().unwrap().unwrap();
    out.stdout
}

fn code_file(dir: &tempfile::TempDir, name: &str, code: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, code).unwrap();
    p.display().to_string()
}

async fn put_all(c: &Cluster, bucket: &str, objects: Vec<(String, Vec<u8>)>) {
    futures::stream::iter(objects)
        .map(|(name, body)| {
            let (http, url) = (
                c.http.clone(),
                c.url(&format!("/v1/objects/{bucket}/{name}")),
            );
            async move {
                let r = http.put(url).body(body).send().await.unwrap();
                assert!(r.status().is_success(), "{}", r.status());
            }
        })
        .buffer_unordered(32)
        .collect::<()>()
        .await;
}

async fn get_etl(c: &Cluster, bucket: &str, name: &str, etl: &str, args: &str) -> (u16, Vec<u8>) {
    let r = c
        .http
        .get(c.url(&format!("/v1/objects/{bucket}/{name}")))
        .query(&[("etl_name", etl), ("etl_args", args)])
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
}

fn grist_blocking(c: &Cluster, args: &[&str]) -> String {
    c.grist_ok(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_and_command_etls_inline_and_composed() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("etl-in").await.unwrap();
    let objects: Vec<(String, Vec<u8>)> = (0..1000)
        .map(|i| {
            (
                format!("o-{i:04}"),
                content(i, 2048 + (i as usize % 7) * 100),
            )
        })
        .collect();
    put_all(&c, "etl-in", objects.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let code = code_file(&dir, "numeric.py", NUMPY_ETL);
    grist_blocking(
        &c,
        &[
            "etl",
            "init",
            "--name",
            "numeric",
            "--code",
            &code,
            "--workers",
            "3",
        ],
    );
    grist_blocking(
        &c,
        &["etl", "init", "--name", "gz", "--command", "gzip -c -n"],
    );
    let shown = grist_blocking(&c, &["etl", "show", "--json"]);
    assert!(shown.contains("numeric") && shown.contains("gz"), "{shown}");

    // 1,000 objects across 3 targets: the same bytes as the function run locally.
    let results: Vec<(String, u16, Vec<u8>)> = futures::stream::iter(objects.iter().cloned())
        .map(|(name, _)| {
            let c = &c;
            async move {
                let (status, body) = get_etl(c, "etl-in", &name, "numeric", "").await;
                (name, status, body)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let by_name: HashMap<&str, &Vec<u8>> = objects.iter().map(|(n, d)| (n.as_str(), d)).collect();
    for (name, status, body) in &results {
        assert_eq!(*status, 200, "{name}: {}", String::from_utf8_lossy(body));
        assert!(
            body == &numpy_etl(by_name[name.as_str()]),
            "{name}: wrong bytes"
        );
    }
    // The command ETL, and the two composed (numeric, then gzip).
    for (name, data) in objects.iter().step_by(20) {
        let (status, body) = get_etl(&c, "etl-in", name, "gz", "").await;
        assert_eq!(status, 200);
        assert!(body == gzip(data), "{name}: gzip differs");
        let (status, body) = get_etl(&c, "etl-in", name, "numeric,gz", "").await;
        assert_eq!(status, 200);
        assert!(body == gzip(&numpy_etl(data)), "{name}: pipeline differs");
    }
    // Through the CLI too.
    let out = dir.path().join("one.out");
    grist_blocking(
        &c,
        &[
            "etl",
            "object",
            "numeric",
            "ais://etl-in/o-0007",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(&out).unwrap(), numpy_etl(&objects[7].1));
    let stats: serde_json::Value =
        serde_json::from_str(&grist_blocking(&c, &["etl", "show", "numeric"])).unwrap();
    assert!(stats["objects"].as_u64().unwrap() >= 1000, "{stats}");

    // Stop: refused with a clear error; start: works again.
    grist_blocking(&c, &["etl", "stop", "numeric"]);
    let (status, body) = get_etl(&c, "etl-in", "o-0001", "numeric", "").await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("numeric"));
    grist_blocking(&c, &["etl", "start", "numeric"]);
    assert_eq!(get_etl(&c, "etl-in", "o-0001", "numeric", "").await.0, 200);
    grist_blocking(&c, &["etl", "rm", "gz"]);
    assert_eq!(get_etl(&c, "etl-in", "o-0001", "gz", "").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn offline_transform_with_extension_map_lists_bad_inputs() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("etl-src").await.unwrap();
    let bad: BTreeSet<usize> = [17, 2500, 4999].into();
    let objects: Vec<(String, Vec<u8>)> = (0..5000)
        .map(|i| {
            let mut body = content(i as u64, 700);
            if bad.contains(&i) {
                body[..3].copy_from_slice(b"BAD");
            }
            (format!("img-{i:04}.jpg"), body)
        })
        .collect();
    put_all(&c, "etl-src", objects.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let code = code_file(&dir, "numeric.py", NUMPY_ETL);
    grist_blocking(&c, &["etl", "init", "--name", "numeric", "--code", &code]);

    let started = grist_blocking(
        &c,
        &[
            "etl",
            "bucket",
            "numeric",
            "ais://etl-src",
            "ais://etl-dst",
            "--ext",
            "{jpg:npy}",
            "--json",
        ],
    );
    let id = serde_json::from_str::<serde_json::Value>(&started).unwrap()["job"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut saw_progress = false;
    let done = loop {
        let s: JobStatus = c
            .http
            .get(c.url(&format!("/v1/jobs/{id}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if s.state != JobState::Running {
            break s;
        }
        saw_progress |= s.objects > 0 && s.total_objects.is_some_and(|t| s.objects < t);
        tokio::time::sleep(Duration::from_millis(30)).await;
    };
    assert!(saw_progress, "progress was never visible");
    assert_eq!((done.objects, done.errors), (5000, 3), "{done:?}");
    let failed: BTreeSet<String> = done.error_samples().map(|e| e.name.clone()).collect();
    let want: BTreeSet<String> = bad.iter().map(|i| format!("img-{i:04}.jpg")).collect();
    assert_eq!(failed, want);
    assert!(
        done.error_samples()
            .all(|e| e.error.contains("numeric") && e.error.contains("ValueError"))
    );
    // The same list through `grist etl show errors NAME JOB`.
    let listed = grist_blocking(&c, &["etl", "show", "errors", "numeric", &id, "--json"]);
    let listed: Vec<serde_json::Value> = serde_json::from_str(&listed).unwrap();
    let listed: BTreeSet<String> = listed
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, want);
    let table = grist_blocking(&c, &["etl", "show", "errors", "numeric", &id]);
    assert!(
        table.contains("img-2500.jpg") && table.contains("ValueError"),
        "{table}"
    );
    let other = c.grist(&["etl", "show", "errors", "gz", &id]);
    assert!(
        !other.status.success(),
        "a job of another ETL must be refused"
    );

    // Every output exactly once, on its HRW owner.
    let smap = c.smap().await.unwrap();
    let dst = Bck::new("etl-dst", Provider::Ais).unwrap();
    let mut seen = BTreeSet::new();
    for t in smap.tmap.values() {
        let names = c.names_on(t.url(), "etl-dst").await;
        for name in names {
            assert_eq!(
                smap.owner(&dst.object_uname(&name)).unwrap().daemon_id,
                t.daemon_id,
                "{} is not on its owner",
                name
            );
            assert!(seen.insert(name), "duplicate output");
        }
    }
    assert_eq!(seen.len(), 4997);
    assert!(seen.iter().all(|n| n.ends_with(".npy")));
    let r = c
        .http
        .get(c.url("/v1/objects/etl-dst/img-0042.npy"))
        .send()
        .await
        .unwrap();
    assert!(r.bytes().await.unwrap() == numpy_etl(&objects[42].1));
}

const HOSTILE_ETL: &str = r#"
import ctypes, os, socket, subprocess, threading

def transform(data, path, args):
    if path == "loop":
        while True:
            pass
    if path == "alloc":
        block = bytearray(4 << 30)
        return bytes(block[:1])
    if path == "exit":
        os._exit(3)
    if path == "shadow":
        return open("/etc/shadow", "rb").read()
    if path in ("datadir", "statedir"):
        return open(args, "rb").read()
    if path == "socket":
        s = socket.create_connection(("127.0.0.1", int(args)), timeout=2)
        return b"connected"
    if path == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"x", ("127.0.0.1", int(args)))
        return b"sent"
    if path == "userns":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
            raise OSError(ctypes.get_errno(), "unshare refused")
        return b"unshared"
    if path == "good-spawn":
        # Threads and child processes work (clone3 falls back to clone under seccomp).
        out = []
        t = threading.Thread(target=lambda: out.append(data.upper()))
        t.start()
        t.join()
        subprocess.run(["true"], check=True)
        return out[0]
    if path == "good-tmp":
        # Temporary files work: the sandbox's scratch directory is TMPDIR.
        import tempfile
        with tempfile.TemporaryFile() as f:
            f.write(data)
            f.seek(0)
            return f.read().upper()
    return data.upper()
"#;

/// Finds one object data file under a mountpath.
fn some_data_file(mp: &std::path::Path) -> String {
    let mut stack = vec![mp.join("obj")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                return p.display().to_string();
            }
        }
    }
    panic!("no data file under {}", mp.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_transforms_fail_their_object_and_nothing_else() {
    // Under root, workers run as `nobody` (and Landlock where the kernel has it).
    let c = Cluster::start(1, 1).await.unwrap();
    hostile_cases(&c).await;
}

/// The same hostile cases with every node running as an unprivileged user (uid 10001): the
/// worker cannot switch user, so Landlock (`gristd etl-sandbox`) is what refuses the data,
/// the state directory and TCP — exactly as under root.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_transforms_refused_when_gristd_is_not_root() {
    let c = Cluster::start_unprivileged(1, 1, 10001).await.unwrap();
    let pid = c.targets[0].pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid.split_whitespace().skip(1).all(|id| id != "0"),
        "the target must not run as root: {uid}"
    );
    hostile_cases(&c).await;
    let log = c.targets[0].log_text();
    assert!(
        log.contains("landlock: Some(") && log.contains("seccomp: true"),
        "the target confines workers with Landlock and seccomp: {}",
        c.targets[0].log_tail()
    );
}

/// Transforms that loop, allocate, exit, read what they must not (`/etc/shadow`, a data
/// file of another bucket, a file of the target's state directory), connect to the proxy,
/// send UDP to it or make a user namespace: each fails its object with an error that names the ETL, and the ETL and the target keep
/// serving.
async fn hostile_cases(c: &Cluster) {
    // Another bucket's object, stored before the ETL's bucket has any: the only data file.
    c.create_bucket("secret").await.unwrap();
    put_all(c, "secret", vec![("key".into(), b"the secret".to_vec())]).await;
    let data_file = some_data_file(&c.mountpaths[0][0]);
    c.create_bucket("h").await.unwrap();
    let names = [
        "loop",
        "alloc",
        "exit",
        "shadow",
        "datadir",
        "statedir",
        "socket",
        "udp",
        "userns",
        "good-1",
        "good-2",
        "good-tmp",
        "good-spawn",
    ];
    put_all(
        c,
        "h",
        names
            .iter()
            .map(|n| (n.to_string(), format!("payload of {n}").into_bytes()))
            .collect(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let code = code_file(&dir, "hostile.py", HOSTILE_ETL);
    grist_blocking(
        c,
        &[
            "etl",
            "init",
            "--name",
            "hostile",
            "--code",
            &code,
            "--timeout",
            "3",
            "--memory",
            "1GiB",
            "--workers",
            "2",
        ],
    );
    let state_file = c.dir.path().join("target-0").join("smap.json");
    assert!(state_file.exists(), "{}", state_file.display());
    let state_file = state_file.display().to_string();
    let proxy_port = c.endpoint.rsplit(':').next().unwrap().to_owned();

    let hostile = [
        "loop", "alloc", "exit", "shadow", "datadir", "statedir", "socket", "udp", "userns",
    ]
    .map(|name| {
        let args = match name {
            "datadir" => data_file.clone(),
            "statedir" => state_file.clone(),
            "socket" | "udp" => proxy_port.clone(),
            _ => String::new(),
        };
        async move {
            let started = Instant::now();
            let (status, body) = get_etl(c, "h", name, "hostile", &args).await;
            (
                name,
                status,
                String::from_utf8_lossy(&body).into_owned(),
                started.elapsed(),
            )
        }
    });
    // Other requests keep being served while the hostile ones run.
    let control = async {
        let deadline = Instant::now() + Duration::from_secs(4);
        let mut served = 0;
        while Instant::now() < deadline {
            let started = Instant::now();
            let r = c
                .http
                .get(c.url("/v1/objects/h/good-1"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "a plain GET stalled"
            );
            served += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        served
    };
    let (results, served) = tokio::join!(futures::future::join_all(hostile), control);
    assert!(served > 10);
    for (name, status, body, took) in results {
        assert!(status >= 500, "{name}: {status} {body}");
        assert!(
            body.contains("hostile"),
            "{name}: error does not name the ETL: {body}"
        );
        assert!(took < Duration::from_secs(15), "{name}: took {took:?}");
        match name {
            "loop" => assert_eq!(status, 504, "{body}"),
            "alloc" => assert!(
                body.contains("MemoryError") || body.contains("died"),
                "{body}"
            ),
            "exit" => assert!(body.contains("died"), "{body}"),
            "shadow" | "datadir" | "statedir" => {
                assert!(body.contains("PermissionError"), "{body}");
                assert!(!body.contains("the secret"), "{body}");
            }
            "socket" => assert!(body.contains("Error"), "{body}"),
            // Seccomp: no UDP socket at all (a network namespace alone lets it be made), and
            // no new user namespace.
            "udp" => assert!(body.contains("PermissionError"), "{body}"),
            "userns" => assert!(body.contains("[Errno 1] unshare refused"), "{body}"),
            _ => unreachable!(),
        }
    }
    // The ETL keeps working for good objects (workers were replaced).
    for good in ["good-1", "good-2", "good-tmp", "good-spawn"] {
        let (status, body) = get_etl(c, "h", good, "hostile", "").await;
        assert_eq!(status, 200);
        assert_eq!(
            body,
            format!("PAYLOAD OF {}", good.to_uppercase()).into_bytes()
        );
    }
    let stats: serde_json::Value =
        serde_json::from_str(&grist_blocking(c, &["etl", "show", "hostile"])).unwrap();
    let restarts: u64 = stats["targets"]
        .as_object()
        .unwrap()
        .values()
        .map(|t| t["restarts"].as_u64().unwrap())
        .sum();
    assert!(
        restarts >= 2,
        "loop and exit replaced their workers: {stats}"
    );
}

const HTTP_ETL_SERVER: &str = r#"
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers["Content-Length"])
        body = self.rfile.read(n)[::-1]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_etl_inline_and_offline() {
    let port = free_port();
    let mut server = std::process::Command::new("python3")
        .args(["-c", HTTP_ETL_SERVER, &port.to_string()])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "ETL server did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = Cluster::start(2, 1).await.unwrap();
    c.create_bucket("web").await.unwrap();
    let objects: Vec<(String, Vec<u8>)> = (0..50)
        .map(|i| (format!("w/{i:02}.txt"), content(i, 3000)))
        .collect();
    put_all(&c, "web", objects.clone()).await;
    let url = format!("http://127.0.0.1:{port}");
    grist_blocking(&c, &["etl", "init", "--name", "rev", "--url", &url]);
    let (status, body) = get_etl(&c, "web", "w/03.txt", "rev", "").await;
    assert_eq!(status, 200);
    let mut want = objects[3].1.clone();
    want.reverse();
    assert_eq!(body, want);
    // Above the read-ahead size the object streams to the service (with its length, which
    // this server needs) and the answer streams back.
    let big = content(77, 3 << 20);
    put_all(&c, "web", vec![("big.bin".into(), big.clone())]).await;
    let (status, body) = get_etl(&c, "web", "big.bin", "rev", "").await;
    assert_eq!(status, 200);
    assert!(
        body.iter().rev().eq(big.iter()),
        "streamed http ETL result differs"
    );
    let r = c
        .http
        .delete(c.url("/v1/objects/web/big.bin"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let out = grist_blocking(
        &c,
        &[
            "etl",
            "bucket",
            "rev",
            "ais://web",
            "ais://web-out",
            "--wait",
            "--json",
        ],
    );
    let job: JobStatus = serde_json::from_str(&out).unwrap();
    assert_eq!((job.objects, job.errors), (50, 0));
    let r = c
        .http
        .get(c.url("/v1/objects/web-out/w/49.txt"))
        .send()
        .await
        .unwrap();
    let mut want = objects[49].1.clone();
    want.reverse();
    assert!(r.bytes().await.unwrap() == want);
    let _ = server.kill();
    let _ = server.wait();
}

const SHOUT_ETL: &str = r#"
import gmdep_shout

def transform(data, path, args):
    return gmdep_shout.shout(data)
"#;

/// A wheel of a one-module package (`gmdep_shout.shout(b) = b.upper() + b"!"`), made by
/// `python/tests/wheelutil.py`: what pip installs from a path, without any index.
fn shout_wheel(dir: &std::path::Path) -> String {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/tests/wheelutil.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(dir)
        .args([
            "gmdep_shout",
            "def shout(b):\n    return b.upper() + b'!'\n",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Each target's `dependencies` state of an ETL (`grist etl show NAME`).
fn dependency_states(c: &Cluster, etl: &str) -> Vec<String> {
    let shown: serde_json::Value =
        serde_json::from_str(&grist_blocking(c, &["etl", "show", etl])).unwrap();
    shown["targets"]
        .as_object()
        .map(|m| {
            m.values()
                .map(|t| t["dependencies"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_dependencies_are_installed_on_every_target() {
    // Workers may run as another user: the environments' directory must be readable by it.
    let envs = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        envs.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let env = [(
        "GRISTD_ETL_ENV_DIR".to_owned(),
        envs.path().display().to_string(),
    )];
    let c = Cluster::start_full(3, 1, &[], &env).await.unwrap();
    c.create_bucket("deps").await.unwrap();
    let objects: Vec<(String, Vec<u8>)> = (0..60)
        .map(|i| (format!("t-{i:02}"), format!("sample {i} text").into_bytes()))
        .collect();
    put_all(&c, "deps", objects.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let code = code_file(&dir, "shout.py", SHOUT_ETL);
    let wheel = shout_wheel(dir.path());
    grist_blocking(
        &c,
        &[
            "etl", "init", "--name", "shout", "--code", &code, "--deps", &wheel,
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let states = dependency_states(&c, "shout");
        if states.len() == 3 && states.iter().all(|s| s == "ready") {
            break;
        }
        assert!(
            states.iter().all(|s| !s.starts_with("failed")),
            "{states:?}\n{}",
            grist_blocking(&c, &["etl", "logs", "shout"])
        );
        assert!(Instant::now() < deadline, "not ready: {states:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for (name, data) in &objects {
        let (status, body) = get_etl(&c, "deps", name, "shout", "").await;
        assert_eq!(status, 200, "{name}: {}", String::from_utf8_lossy(&body));
        let mut want = data.to_ascii_uppercase();
        want.push(b'!');
        assert_eq!(body, want, "{name}");
    }
    // One environment for the three targets (content-addressed; no temporaries left), and a
    // second ETL with the same list uses it too.
    let listing = || -> Vec<String> {
        std::fs::read_dir(envs.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let first = listing();
    assert!(first.len() == 1 && first[0].starts_with("py-"), "{first:?}");
    grist_blocking(
        &c,
        &[
            "etl", "init", "--name", "shout2", "--code", &code, "--deps", &wheel,
        ],
    );
    let (status, body) = get_etl(&c, "deps", "t-07", "shout2", "").await;
    assert_eq!((status, body), (200, b"SAMPLE 7 TEXT!".to_vec()));
    assert_eq!(listing(), first);

    // A requirement pip cannot install: the ETL's objects fail naming it and the cause; the
    // targets say so; pip's words are in the ETL's log; other ETLs keep working.
    grist_blocking(
        &c,
        &[
            "etl",
            "init",
            "--name",
            "broken",
            "--code",
            &code,
            "--deps",
            "/nonexistent/gm_missing-1.0-py3-none-any.whl",
        ],
    );
    let (status, body) = get_etl(&c, "deps", "t-01", "broken", "").await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 502, "{text}");
    assert!(
        text.contains("broken") && text.contains("installing dependencies"),
        "{text}"
    );
    let states = dependency_states(&c, "broken");
    assert!(states.iter().any(|s| s.starts_with("failed")), "{states:?}");
    let logs = grist_blocking(&c, &["etl", "logs", "broken"]);
    assert!(logs.contains("gm_missing"), "{logs}");
    assert_eq!(get_etl(&c, "deps", "t-02", "shout", "").await.0, 200);

    // Only requirements: a pip option is refused up front.
    let r = c
        .http
        .put(c.url("/v1/etl"))
        .json(
            &serde_json::json!({"name": "evil", "runtime": "python", "code": SHOUT_ETL,
            "dependencies": ["--index-url=http://127.0.0.1:9/simple"]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("pip requirement"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn get_batch_items_go_through_an_etl() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("gbe").await.unwrap();
    let mut objects: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| {
            (
                format!("o-{i:02}"),
                content(100 + i, 3000 + i as usize * 50),
            )
        })
        .collect();
    let mut bad = content(7, 500);
    bad[..3].copy_from_slice(b"BAD");
    objects.push(("bad-0".into(), bad));
    let members: Vec<(String, Vec<u8>)> = (0..10)
        .map(|m| (format!("{m:02}.jpg"), content(200 + m, 1000)))
        .collect();
    objects.push(("s.tar".into(), shard(Format::Tar, &members)));
    put_all(&c, "gbe", objects.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let code = code_file(&dir, "numeric.py", NUMPY_ETL);
    grist_blocking(&c, &["etl", "init", "--name", "numeric", "--code", &code]);
    grist_blocking(
        &c,
        &["etl", "init", "--name", "gz", "--command", "gzip -c -n"],
    );
    let by_name: HashMap<String, Vec<u8>> = objects.iter().cloned().collect();

    // Objects (across the 3 targets) and shard members, interleaved and out of order, a
    // missing object and one the ETL refuses; with coer both become `__404__/` entries.
    let mut items: Vec<(serde_json::Value, String, Option<Vec<u8>>)> = Vec::new();
    for i in (0..40).rev() {
        let name = format!("o-{i:02}");
        let data = by_name[&name].clone();
        items.push((
            serde_json::json!({"objname": name}),
            format!("gbe/{name}"),
            Some(data),
        ));
        if i % 4 == 0 {
            let (m, d) = &members[i / 4];
            items.push((
                serde_json::json!({"objname": "s.tar", "archpath": m}),
                format!("gbe/s.tar/{m}"),
                Some(d.clone()),
            ));
        }
    }
    items.insert(
        5,
        (
            serde_json::json!({"objname": "none"}),
            "__404__/gbe/none".into(),
            None,
        ),
    );
    items.insert(
        20,
        (
            serde_json::json!({"objname": "bad-0"}),
            "__404__/gbe/bad-0".into(),
            None,
        ),
    );
    let batch = |etl: &str, coer: bool, strm: bool, items: &[&serde_json::Value]| {
        let req = serde_json::json!({"in": items, "mime": ".tar", "coer": coer, "strm": strm});
        c.http
            .get(c.url("/v1/ml/moss/gbe"))
            .query(&[("etl_name", etl)])
            .json(&req)
            .send()
    };
    let all: Vec<&serde_json::Value> = items.iter().map(|(v, _, _)| v).collect();
    let r = batch("numeric", true, true, &all).await.unwrap();
    assert_eq!(r.status(), 200);
    let got = members_of(Format::Tar, r.bytes().await.unwrap().to_vec());
    assert_eq!(got.len(), items.len());
    for (k, ((name, body), (_, want_name, want))) in got.iter().zip(&items).enumerate() {
        assert_eq!(name, want_name, "entry {k}");
        match want {
            Some(data) => assert!(body == &numpy_etl(data), "entry {k} ({name}): wrong bytes"),
            None => assert!(body.is_empty(), "entry {k}"),
        }
    }

    // A pipeline: numeric, then gzip.
    let good: Vec<&serde_json::Value> = items
        .iter()
        .filter(|(_, _, d)| d.is_some())
        .map(|(v, _, _)| v)
        .collect();
    let r = batch("numeric,gz", false, true, &good).await.unwrap();
    assert_eq!(r.status(), 200);
    let got = members_of(Format::Tar, r.bytes().await.unwrap().to_vec());
    let wanted: Vec<&Vec<u8>> = items.iter().filter_map(|(_, _, d)| d.as_ref()).collect();
    assert_eq!(got.len(), wanted.len());
    for ((name, body), data) in got.iter().zip(wanted) {
        assert!(body == &gzip(&numpy_etl(data)), "{name}: pipeline differs");
    }

    // The CLI: `grist batch --etl`.
    let list = dir.path().join("items.txt");
    std::fs::write(&list, "o-03\ns.tar\t02.jpg\n").unwrap();
    let out = dir.path().join("out.tar");
    grist_blocking(
        &c,
        &[
            "batch",
            "ais://gbe",
            "-f",
            list.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--etl",
            "numeric",
        ],
    );
    let got = members_of(Format::Tar, std::fs::read(&out).unwrap());
    assert_eq!(got[0].0, "gbe/o-03");
    assert!(got[0].1 == numpy_etl(&by_name["o-03"]));
    assert!(got[1].1 == numpy_etl(&members[2].1));

    // Up front: an unknown ETL is a 404 naming it; the multipart answer cannot carry
    // transformed sizes, so it is a 400.
    let r = batch("nosuch", false, true, &good).await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("nosuch"));
    let r = batch("numeric", false, false, &good).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("strm"));
}

/// A streaming transform: XOR with a key byte, piece by piece; `args` may make it fail at once
/// or after some output.
const XOR_STREAM_ETL: &str = r#"
TABLE = bytes(b ^ 0x5A for b in range(256))

def transform_stream(reader, writer, path, args):
    if args == "fail-first":
        raise ValueError("refusing " + path)
    done = 0
    while True:
        piece = reader.read(1 << 20)
        if not piece:
            break
        writer.write(piece.translate(TABLE))
        done += len(piece)
        if args == "fail-late" and done >= (64 << 20):
            raise ValueError("broke after %d bytes" % done)
"#;

/// The big test object: 4 MiB blocks of `base`, each starting with its block number (so
/// blocks out of order show), and what the XOR transform makes of it.
struct BigObject {
    base: Vec<u8>,
    xored: Vec<u8>,
}

impl BigObject {
    const BLOCK: usize = 4 << 20;

    fn new() -> Self {
        let base = content(42, Self::BLOCK);
        let xored = base.iter().map(|b| b ^ 0x5A).collect();
        Self { base, xored }
    }

    /// `len` bytes from `start`, of the object (`xored` false) or of its transform.
    fn bytes(&self, start: u64, len: usize, xored: bool) -> Vec<u8> {
        let src = if xored { &self.xored } else { &self.base };
        let mut out = Vec::with_capacity(len);
        let mut at = start;
        while out.len() < len {
            let (block, off) = (at / Self::BLOCK as u64, (at % Self::BLOCK as u64) as usize);
            let n = (Self::BLOCK - off).min(len - out.len());
            let from = out.len();
            out.extend_from_slice(&src[off..off + n]);
            for p in off..(off + n).min(8) {
                let b = block.to_be_bytes()[p];
                out[from + p - off] = if xored { b ^ 0x5A } else { b };
            }
            at += n as u64;
        }
        out
    }
}

/// A streamed GET through ETL `etl`.
async fn get_streamed(c: &Cluster, path: &str, etl: &str, args: &str) -> reqwest::Response {
    c.http
        .get(c.url(path))
        .query(&[("etl_name", etl), ("etl_args", args)])
        .send()
        .await
        .unwrap()
}

/// Reads a body to its end, checking each piece against `want(offset, len)`; returns its length.
async fn check_stream(
    r: reqwest::Response,
    what: &str,
    want: impl Fn(u64, usize) -> Vec<u8>,
) -> u64 {
    assert_eq!(r.status(), 200, "{what}");
    let mut stream = r.bytes_stream();
    let mut at = 0u64;
    while let Some(piece) = stream.next().await {
        let piece = piece.unwrap();
        let end = at + piece.len() as u64;
        assert!(
            piece[..] == want(at, piece.len())[..],
            "{what}: bytes {at}..{end} differ"
        );
        at = end;
    }
    at
}

/// Reads a body until it ends or breaks: (bytes read, whether it broke).
async fn read_until_broken(r: reqwest::Response) -> (u64, bool) {
    let mut stream = r.bytes_stream();
    let mut got = 0u64;
    while let Some(piece) = stream.next().await {
        match piece {
            Ok(p) => got += p.len() as u64,
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streaming_etls_pass_objects_larger_than_the_whole_object_limit() {
    const SIZE: u64 = 600 << 20; // above the 512 MiB whole-object limit
    let big = std::sync::Arc::new(BigObject::new());
    let c = Cluster::start(2, 1).await.unwrap();
    c.create_bucket("st").await.unwrap();
    let src = big.clone();
    let body = futures::stream::iter((0..SIZE).step_by(BigObject::BLOCK)).map(move |at| {
        let len = BigObject::BLOCK.min((SIZE - at) as usize);
        Ok::<_, std::io::Error>(src.bytes(at, len, false))
    });
    // A streamed body cannot follow the proxy's redirect: straight to the owner.
    let smap = c.smap().await.unwrap();
    let bck = Bck::new("st", Provider::Ais).unwrap();
    let owner = smap
        .owner(&bck.object_uname("big.bin"))
        .unwrap()
        .url()
        .to_owned();
    let r = c
        .http
        .put(format!("{owner}/v1/objects/st/big.bin"))
        .header(reqwest::header::CONTENT_LENGTH, SIZE)
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    put_all(&c, "st", vec![("small".into(), b"tiny".to_vec())]).await;
    let dir = tempfile::tempdir().unwrap();
    let code = code_file(&dir, "xor.py", XOR_STREAM_ETL);
    grist_blocking(&c, &["etl", "init", "--name", "xor", "--code", &code]);
    let peak_before: Vec<u64> = c.targets.iter().map(|t| t.peak_rss().unwrap()).collect();

    // 600 MiB through the transform: every byte right, and no target grew by the object.
    let r = get_streamed(&c, "/v1/objects/st/big.bin", "xor", "").await;
    let n = check_stream(r, "xor", |at, len| big.bytes(at, len, true)).await;
    assert_eq!(n, SIZE);
    for (t, before) in c.targets.iter().zip(&peak_before) {
        let after = t.peak_rss().unwrap();
        eprintln!(
            "{}: peak RSS {} -> {} MiB",
            t.name,
            before >> 20,
            after >> 20
        );
        assert!(
            after < 256 << 20,
            "{}: peak RSS {} MiB",
            t.name,
            after >> 20
        );
    }

    // A transform that fails at once: a clean 502 naming the ETL and the error.
    let r = get_streamed(&c, "/v1/objects/st/big.bin", "xor", "fail-first").await;
    assert_eq!(r.status(), 502);
    let text = r.text().await.unwrap();
    assert!(text.contains("xor") && text.contains("refusing"), "{text}");
    // One that fails midway: the body is cut, never a short answer that looks complete.
    let r = get_streamed(&c, "/v1/objects/st/big.bin", "xor", "fail-late").await;
    assert_eq!(r.status(), 200);
    let (got, broke) = read_until_broken(r).await;
    assert!(
        broke && got < SIZE,
        "a failed transform must not end cleanly ({got} bytes)"
    );
    // The ETL keeps working, whole (small objects, offline) and streamed.
    let (status, body) = get_etl(&c, "st", "small", "xor", "").await;
    assert_eq!(status, 200);
    assert_eq!(body, b"tiny".iter().map(|b| b ^ 0x5A).collect::<Vec<u8>>());
    // A per-object command streams too: 600 MiB through `tr`, byte for byte.
    grist_blocking(
        &c,
        &["etl", "init", "--name", "upper", "--command", "tr a-z A-Z"],
    );
    let r = get_streamed(&c, "/v1/objects/st/big.bin", "upper", "").await;
    let n = check_stream(r, "tr", |at, len| {
        big.bytes(at, len, false).to_ascii_uppercase()
    })
    .await;
    assert_eq!(n, SIZE);
    // A command that fails after its output (exit 3 once it has copied 1 MB): the body is cut.
    let r = c
        .http
        .put(c.url("/v1/etl"))
        .json(&serde_json::json!({"name": "quitter", "runtime": "command",
            "command": ["sh", "-c", "head -c 1000000; exit 3"]}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let r = get_streamed(&c, "/v1/objects/st/big.bin", "quitter", "").await;
    let (got, broke) = read_until_broken(r).await;
    // (The cut may drop the last pieces in flight: never more than the program wrote.)
    assert!(
        broke && got <= 1_000_000,
        "exit 3 must cut the body ({got} bytes)"
    );
    for t in &c.targets {
        let peak = t.peak_rss().unwrap();
        assert!(peak < 256 << 20, "{}: peak RSS {} MiB", t.name, peak >> 20);
    }

    // A client that stops reading early costs the worker (it is mid-object), nothing else.
    for _ in 0..2 {
        let r = get_streamed(&c, "/v1/objects/st/big.bin", "xor", "").await;
        assert_eq!(r.status(), 200);
        let mut stream = r.bytes_stream();
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first[..8], big.bytes(0, 8, true)[..]);
    }
}
