//! The proxies' control plane on Raft: an acknowledged metadata change is never lost, whatever
//! proxies pause, die or get cut off; a proxy that lacks a committed change cannot lead; every
//! node ends with one map and one bucket metadata; never two leaders in one term.
//!
//! - the issue's scenario: pause B, change through A, pause A and C, resume B;
//! - a nemesis run (3 and 5 proxies + 3 targets): clients change buckets, bucket properties,
//!   users and ETLs, and PUT, DELETE and GET objects, through random proxies while the leader is
//!   killed (-9), paused beyond the election timeout and cut off with a minority (nftables), and
//!   a target is killed (-9), paused until it is removed and comes back, or restarted as in a
//!   rolling upgrade (`--no-rebalance`); every read and the final state are checked against
//!   the recorded history;
//! - failover: time to a new leader over 20 leader kills (p50 / p99 printed for
//!   docs/reliability.md; bounded loosely).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gristmill_tests::Cluster;
use gristmill_tests::proxies::{Partition, ProxiesCluster, ProxiesSpec};
use rand::Rng;
use serde_json::Value;

/// Keepalive every 250 ms, 8 retries: a 2 s failure window (as the other proxy tests).
fn spec(proxies: usize, targets: usize, ips: Vec<String>, extra: &[&str]) -> ProxiesSpec {
    ProxiesSpec {
        proxies,
        targets,
        ips,
        node_args: extra
            .iter()
            .map(|s| s.to_string())
            .chain(["--keepalive-interval-ms".into(), "250".into()])
            .collect(),
        proxy_args: vec!["--keepalive-retries".into(), "8".into()],
        admin_password: None,
    }
}

/// `GET /v1/raft/metrics` of one proxy.
async fn raft_metrics(http: &reqwest::Client, url: &str) -> Option<Value> {
    let r = http
        .get(format!("{url}/v1/raft/metrics"))
        .timeout(Duration::from_millis(500))
        .send()
        .await
        .ok()?;
    r.json().await.ok()
}

/// The proxy (index) that says it leads, with the highest term.
async fn leader(c: &ProxiesCluster) -> Option<usize> {
    let mut best: Option<(u64, usize)> = None;
    for (i, url) in c.proxy_urls.iter().enumerate() {
        if let Some(m) = raft_metrics(&c.http, url).await
            && m["state"] == "leader"
        {
            let term = m["term"].as_u64().unwrap_or(0);
            if best.is_none_or(|(t, _)| term > t) {
                best = Some((term, i));
            }
        }
    }
    best.map(|(_, i)| i)
}

/// A random cluster secret written under `dir`; its path, for `--cluster-secret-file`.
fn cluster_secret_file(dir: &std::path::Path) -> String {
    let path = dir.join("cluster.secret");
    let hex: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    std::fs::write(&path, hex).unwrap();
    path.display().to_string()
}

async fn wait_leader(c: &ProxiesCluster, within: Duration) -> usize {
    poll_until(within, Duration::from_millis(50), move || async move {
        leader(c).await.ok_or_else(|| "no leader".to_owned())
    })
    .await
}

/// Bucket names on the node at `url`, linearized on proxies (`/v1/buckets`).
async fn buckets_at(http: &reqwest::Client, url: &str) -> Result<BTreeSet<String>, String> {
    let r = http
        .get(format!("{url}/v1/buckets"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!(
            "{} {}",
            r.status(),
            r.text().await.unwrap_or_default()
        ));
    }
    let list: Vec<Value> = r.json().await.map_err(|e| e.to_string())?;
    Ok(list
        .iter()
        .filter_map(|b| b["name"].as_str().map(str::to_owned))
        .collect())
}

/// The bucket metadata a node holds (`/v1/daemon?what=bmd`: its own view).
async fn bmd_at(http: &reqwest::Client, url: &str) -> Value {
    http.get(format!("{url}/v1/daemon?what=bmd"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("bmd")
        .json()
        .await
        .expect("bmd json")
}

fn bucket_names(bmd: &Value) -> BTreeSet<String> {
    bmd["buckets"]
        .as_object()
        .map(|m| {
            m.values()
                .filter_map(|r| r["bck"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Every node (proxies and targets) holds the same bucket metadata version; returns it.
async fn one_bmd(c: &ProxiesCluster, urls: &[String], within: Duration) -> Value {
    poll_until(within, Duration::from_millis(200), move || async move {
        let mut all = Vec::new();
        for u in urls {
            all.push(bmd_at(&c.http, u).await);
        }
        let v = |b: &Value| (b["version"].as_u64(), b["term"].as_u64());
        if all.iter().all(|b| v(b) == v(&all[0])) {
            return Ok(all.swap_remove(0));
        }
        let versions: Vec<_> = all.iter().map(v).collect();
        Err(format!("bucket metadata differs: {versions:?}"))
    })
    .await
}

/// The issue's scenario. Proxy B paused; a bucket created through the leader A is acknowledged
/// by A and C; A and C paused, B resumed: B cannot lead (it lacks the committed change and
/// has no majority), it refuses changes and answers the bucket list with 503 — never with a
/// list that lacks the bucket. Everyone resumed: the bucket is on every proxy and target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_proxy_cannot_lead_without_an_acknowledged_change() {
    let mut c = Cluster::start_proxies(spec(3, 3, Vec::new(), &[]))
        .await
        .unwrap();
    let first = c.smap().await.unwrap();
    let all = ProxiesCluster::node_urls(&first);
    c.one_map(
        &all,
        |m| m.pmap.len() == 3 && m.tmap.len() == 3,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let a = wait_leader(&c, Duration::from_secs(30)).await;
    let (b, cc) = ((a + 1) % 3, (a + 2) % 3);
    let (url_a, url_b) = (c.proxy_urls[a].clone(), c.proxy_urls[b].clone());

    c.proxy_mut(b).signal("STOP");
    let asked = Instant::now();
    let r = c
        .http
        .post(format!("{url_a}/v1/buckets/x?provider=ais"))
        .json(&serde_json::json!({"action": "create-bck"}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "create x with B paused: {}",
        r.status()
    );
    println!(
        "create with one of three proxies paused: {:?}",
        asked.elapsed()
    );

    c.proxy_mut(a).signal("STOP");
    c.proxy_mut(cc).signal("STOP");
    c.proxy_mut(b).signal("CONT");
    // Several election timeouts (750–1500 ms) with B alone.
    let alone_until = Instant::now() + Duration::from_secs(6);
    let mut refusals = 0;
    while Instant::now() < alone_until {
        if let Some(m) = raft_metrics(&c.http, &url_b).await {
            assert_ne!(m["state"], "leader", "B became leader alone: {m}");
        }
        match buckets_at(&c.http, &url_b).await {
            Ok(names) => assert!(names.contains("x"), "B listed {names:?} without x"),
            Err(e) => {
                assert!(e.starts_with("503"), "B's list: {e}");
                refusals += 1;
            }
        }
        let r = c
            .http
            .post(format!("{url_b}/v1/buckets/y?provider=ais"))
            .json(&serde_json::json!({"action": "create-bck"}))
            .timeout(Duration::from_secs(15))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            503,
            "a change through B alone: {}",
            r.text().await.unwrap()
        );
    }
    assert!(refusals > 0);

    c.proxy_mut(a).signal("CONT");
    c.proxy_mut(cc).signal("CONT");
    let map = c
        .one_map(
            &all,
            |m| m.pmap.len() == 3 && m.tmap.len() == 3,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let all = ProxiesCluster::node_urls(&map);
    for url in &c.proxy_urls {
        // B's campaigns bumped the term: an election may still run (503 "no leader"), after
        // which every proxy answers.
        let names = eventually(|| buckets_at(&c.http, url)).await;
        assert_eq!(names, BTreeSet::from(["x".to_owned()]), "{url}");
    }
    let bmd = one_bmd(&c, &all, Duration::from_secs(30)).await;
    assert_eq!(bucket_names(&bmd), BTreeSet::from(["x".to_owned()]));
}

/// The first `Ok` of `f`, tried every `every` for at most `within`; after that the test fails
/// with the last error.
async fn poll_until<T, F, Fut>(within: Duration, every: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) => assert!(
                Instant::now() < deadline,
                "still failing after {within:?}: {e}"
            ),
        }
        tokio::time::sleep(every).await;
    }
}

/// The first success of `f` within 30 s.
async fn eventually<T, F, Fut>(f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    poll_until(Duration::from_secs(30), Duration::from_millis(200), f).await
}

/// One client operation and how it ended.
#[derive(Debug, Clone)]
struct Op {
    kind: &'static str,
    name: String,
    /// The value set (bucket properties: minutes of `lru.dont_evict_time`).
    value: u64,
    /// `Some(true)`: acknowledged (2xx); `Some(false)`: refused (4xx: nothing changed);
    /// `None`: 5xx or no answer (it may or may not have taken effect).
    acked: Option<bool>,
    /// When the answer came, in ms since the run started (the data client's; 0 otherwise).
    #[expect(dead_code, reason = "printed with a failing key's history")]
    at_ms: u64,
}

type History = Arc<Mutex<Vec<Op>>>;

/// A client of the nemesis run: its own buckets, users and ETLs, changed through random
/// proxies, one request at a time.
async fn client(
    k: usize,
    http: reqwest::Client,
    proxies: Vec<String>,
    history: History,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut created: Vec<String> = Vec::new();
    let mut users: Vec<String> = Vec::new();
    let mut etls: Vec<String> = Vec::new();
    let mut i = 0u64;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        i += 1;
        let (url, choice) = {
            let mut rng = rand::rng();
            (
                proxies[rng.random_range(0..proxies.len())].clone(),
                rng.random_range(0..10u8),
            )
        };
        let (kind, name, value, req) = match choice {
            0..=2 => {
                let name = format!("c{k}-b{i}");
                let req = http
                    .post(format!("{url}/v1/buckets/{name}?provider=ais"))
                    .json(&serde_json::json!({"action": "create-bck"}));
                ("create", name, 0, req)
            }
            3 if !created.is_empty() => {
                let name = created.remove(0);
                let req = http
                    .delete(format!("{url}/v1/buckets/{name}?provider=ais"))
                    .json(&serde_json::json!({"action": "destroy-bck"}));
                ("destroy", name, 0, req)
            }
            4 | 5 if !created.is_empty() => {
                let name = created[created.len() - 1].clone();
                let req = http
                    .patch(format!("{url}/v1/buckets/{name}?provider=ais"))
                    .json(&serde_json::json!({"action": "set-bprops",
                        "value": {"lru": {"dont_evict_time": format!("{i}m")}}}));
                ("props", name, i, req)
            }
            6 => {
                let name = format!("c{k}-u{i}");
                let req = http.put(format!("{url}/v1/auth/users/{name}")).json(
                    &serde_json::json!({"roles": ["cluster-read"], "password": "pw-nemesis-1"}),
                );
                ("user-add", name, 0, req)
            }
            7 if !users.is_empty() => {
                let name = users.remove(0);
                let req = http.delete(format!("{url}/v1/auth/users/{name}"));
                ("user-remove", name, 0, req)
            }
            8 => {
                let name = format!("c{k}-e{i}");
                let req = http.put(format!("{url}/v1/etl")).json(
                    &serde_json::json!({"name": name, "runtime": "command", "command": ["cat"]}),
                );
                ("etl-init", name, 0, req)
            }
            9 if !etls.is_empty() => {
                let name = etls.remove(0);
                let req = http.delete(format!("{url}/v1/etl/{name}"));
                ("etl-remove", name, 0, req)
            }
            _ => continue,
        };
        let acked = match req.timeout(Duration::from_secs(20)).send().await {
            Ok(r) if r.status().is_success() => Some(true),
            Ok(r) if r.status().is_client_error() => Some(false),
            _ => None,
        };
        if acked == Some(true) {
            match kind {
                "create" => created.push(name.clone()),
                "user-add" => users.push(name.clone()),
                "etl-init" => etls.push(name.clone()),
                _ => {}
            }
        }
        history.lock().unwrap().push(Op {
            kind,
            name,
            value,
            acked,
            at_ms: 0,
        });
        if acked.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What the data clients saw: wrong answers, and answers by method and status.
#[derive(Default)]
struct Tally {
    wrong: Mutex<Vec<String>>,
    answers: Mutex<BTreeMap<String, u64>>,
}

/// A data client of the nemesis run: PUTs (body = key and sequence number), DELETEs and GETs of
/// its own 16 keys in `nemesis-data` through random proxies, one request at a time. Every GET
/// and every 404 of a DELETE is judged against the key's history so far (while targets are
/// killed, paused until removed and restarted); wrong answers are collected, not panicked on.
async fn data_client(
    k: usize,
    http: reqwest::Client,
    proxies: Vec<String>,
    history: History,
    tally: Arc<Tally>,
    since: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let count = |what: String| *tally.answers.lock().unwrap().entry(what).or_default() += 1;
    let wrong = &tally.wrong;
    let mut seq = 0u64;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        seq += 1;
        let (url, key, choice) = {
            let mut rng = rand::rng();
            (
                proxies[rng.random_range(0..proxies.len())].clone(),
                format!("d{k}-o{}", rng.random_range(0..16u8)),
                rng.random_range(0..10u8),
            )
        };
        let object = format!("{url}/v1/objects/{NEMESIS_DATA}/{key}");
        let so_far = |history: &History| -> BTreeSet<Option<u64>> {
            let h = history.lock().unwrap();
            allowed_data(&h.iter().filter(|o| o.name == key).collect::<Vec<_>>())
        };
        match choice {
            0..=4 => {
                let r = http
                    .put(&object)
                    .body(data_body(&key, seq))
                    .timeout(Duration::from_secs(20))
                    .send()
                    .await;
                count(answer("PUT", &r));
                let r = match r {
                    Ok(r) if r.status() == 403 => {
                        count(format!("PUT 403: {}", r.text().await.unwrap_or_default()));
                        continue;
                    }
                    r => r,
                };
                let acked = match r {
                    Ok(r) if r.status().is_success() => Some(true),
                    Ok(r) if r.status().is_client_error() => Some(false),
                    _ => None,
                };
                history.lock().unwrap().push(Op {
                    kind: "put",
                    name: key,
                    value: seq,
                    acked,
                    at_ms: since.elapsed().as_millis() as u64,
                });
                if acked.is_none() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            5 | 6 => {
                let r = http
                    .delete(&object)
                    .timeout(Duration::from_secs(20))
                    .send()
                    .await;
                count(answer("DELETE", &r));
                let acked = match r {
                    Ok(r) if r.status().is_success() => Some(true),
                    Ok(r) if r.status() == 404 => {
                        // Absent: the history must allow it (a 404 of an object that was
                        // there is a lost write or a stale listing of the wrong node).
                        let allow = so_far(&history);
                        if !allow.contains(&None) {
                            wrong.lock().unwrap().push(format!(
                                "DELETE {key} at {} ms: 404, history allows {allow:?}",
                                since.elapsed().as_millis()
                            ));
                        }
                        Some(true)
                    }
                    Ok(r) if r.status().is_client_error() => Some(false),
                    _ => None,
                };
                history.lock().unwrap().push(Op {
                    kind: "delete",
                    name: key,
                    value: seq,
                    acked,
                    at_ms: since.elapsed().as_millis() as u64,
                });
                if acked.is_none() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            _ => {
                let r = http
                    .get(&object)
                    .timeout(Duration::from_secs(20))
                    .send()
                    .await;
                // `Some(None)`: 404; `Some(Some(body))`: 200; `None`: no judgeable answer.
                count(answer("GET", &r));
                let got = match r {
                    Ok(r) if r.status() == 404 => Some(None),
                    Ok(r) if r.status().is_success() => r.bytes().await.ok().map(Some),
                    _ => None,
                };
                let Some(got) = got else { continue };
                let allow = so_far(&history);
                let found = got.as_ref().map(|b| data_seq(&key, b));
                let ok = match found {
                    None => allow.contains(&None),
                    Some(Some(v)) => allow.contains(&Some(v)),
                    Some(None) => false,
                };
                if !ok {
                    let what = match found {
                        None => "404".to_owned(),
                        Some(Some(v)) => format!("PUT #{v}'s body"),
                        Some(None) => "a body no PUT wrote".to_owned(),
                    };
                    wrong.lock().unwrap().push(format!(
                        "GET {key} at {} ms: {what}, history allows {allow:?}",
                        since.elapsed().as_millis()
                    ));
                }
            }
        }
    }
}

/// `METHOD STATUS` of an answer, or `METHOD error` without one (for the run's tally).
fn answer(method: &str, r: &reqwest::Result<reqwest::Response>) -> String {
    match r {
        Ok(r) => format!("{method} {}", r.status().as_u16()),
        Err(_) => format!("{method} error"),
    }
}

const NEMESIS_DATA: &str = "nemesis-data";

/// An object's body in the nemesis run: its key and the sequence number of the PUT, repeated
/// to 4 KiB.
fn data_body(key: &str, seq: u64) -> Vec<u8> {
    format!("{key}={seq};").repeat(4096).into_bytes()[..4096].to_vec()
}

/// The sequence number a body carries; `None` when it is not a body written for `key` (torn,
/// mixed or another key's).
fn data_seq(key: &str, body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    let seq: u64 = text
        .strip_prefix(&format!("{key}="))?
        .split(';')
        .next()?
        .parse()
        .ok()?;
    (body == data_body(key, seq).as_slice()).then_some(seq)
}

/// What a data history allows: the state after the last acknowledged PUT or DELETE (absent if
/// none), or after any PUT or DELETE that got no answer (it may take effect at any time after
/// it was sent). `None` = absent, `Some(seq)` = that PUT's body.
fn allowed_data(ops: &[&Op]) -> BTreeSet<Option<u64>> {
    let effect = |op: &Op| (op.kind == "put").then_some(op.value);
    let mut out = BTreeSet::new();
    match ops.iter().rposition(|op| op.acked == Some(true)) {
        Some(i) => out.insert(effect(ops[i])),
        None => out.insert(None),
    };
    out.extend(
        ops.iter()
            .filter(|op| op.acked.is_none())
            .map(|op| effect(op)),
    );
    out
}

/// The data after the nemesis, once every target is back and placed: each key read through
/// every proxy is a state its history allows; no GET or DELETE during the run answered wrong.
async fn check_data(c: &ProxiesCluster, history: &History, tally: &Tally) {
    let history = history.lock().unwrap().clone();
    let acked = history.iter().filter(|o| o.acked == Some(true)).count();
    let unknown = history.iter().filter(|o| o.acked.is_none()).count();
    println!(
        "data: {} PUTs and DELETEs ({acked} acknowledged, {unknown} without an answer)",
        history.len()
    );
    assert!(acked >= 20, "too little data got through: {acked}");
    let mut by: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in &history {
        by.entry(op.name.as_str()).or_default().push(op);
    }
    let mut wrong = tally.wrong.lock().unwrap().clone();
    // Reads once the returns are reconciled: a returning target answers 503 until then.
    for url in &c.proxy_urls {
        for (key, ops) in &by {
            let allow = allowed_data(ops);
            let got = eventually(|| async {
                let r = c
                    .http
                    .get(format!("{url}/v1/objects/{NEMESIS_DATA}/{key}"))
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                match r.status().as_u16() {
                    404 => Ok(None),
                    200 => Ok(Some(data_seq(
                        key,
                        &r.bytes().await.map_err(|e| e.to_string())?,
                    ))),
                    s => Err(format!("GET {key}: {s}")),
                }
            })
            .await;
            let ok = match got {
                None => allow.contains(&None),
                Some(Some(v)) => allow.contains(&Some(v)),
                Some(None) => false,
            };
            if !ok {
                wrong.push(format!(
                    "after the run, GET {key} via {url}: {got:?}, history allows {allow:?}: {ops:?}"
                ));
            }
        }
    }
    let keys: BTreeSet<&str> = wrong
        .iter()
        .filter_map(|w| w.split_whitespace().nth(1))
        .collect();
    let histories: Vec<String> = keys
        .iter()
        .map(|k| format!("{k}: {:?}", by.get(k)))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} wrong answers: {wrong:#?}\nhistories: {histories:#?}",
        wrong.len()
    );
}

/// What the history allows for one object: the state after the last acknowledged operation,
/// or after any later one that got no answer. `None` in the set = absent.
fn allowed(ops: &[&Op]) -> BTreeSet<Option<u64>> {
    let effect = |op: &Op| -> Option<u64> {
        match op.kind {
            "create" | "user-add" | "etl-init" => Some(0),
            "props" => Some(op.value),
            _ => None,
        }
    };
    let last_acked = ops.iter().rposition(|op| op.acked == Some(true));
    let mut out = BTreeSet::new();
    match last_acked {
        Some(i) => {
            out.insert(effect(ops[i]));
        }
        None => {
            out.insert(None);
        }
    }
    for op in &ops[last_acked.map_or(0, |i| i + 1)..] {
        if op.acked.is_none() {
            out.insert(effect(op));
        }
    }
    out
}

/// Checks the final state against the history: every acknowledged change is there unless a
/// later acknowledged change overrode it; nothing else appears.
fn check_history(
    history: &[Op],
    buckets: &BTreeMap<String, u64>,
    users: &BTreeSet<String>,
    etls: &BTreeSet<String>,
) {
    let mut by: BTreeMap<(&str, &str), Vec<&Op>> = BTreeMap::new();
    for op in history {
        let family = match op.kind {
            "create" | "destroy" | "props" => "bucket",
            "user-add" | "user-remove" => "user",
            _ => "etl",
        };
        by.entry((family, op.name.as_str())).or_default().push(op);
    }
    let mut checked = 0;
    for ((family, name), ops) in &by {
        let found: Option<u64> = match *family {
            "bucket" => buckets.get(*name).copied(),
            "user" => users.contains(*name).then_some(0),
            _ => etls.contains(*name).then_some(0),
        };
        let mut allow = allowed(ops);
        if *family == "bucket" {
            // A bucket's value is its last props change; created without one it has none (0).
            let created_present = allow.iter().any(|v| v.is_some());
            if created_present {
                let props: Vec<u64> = ops
                    .iter()
                    .filter(|o| o.kind == "props" && o.acked != Some(false))
                    .map(|o| o.value)
                    .collect();
                allow.extend(props.into_iter().map(Some));
                allow.insert(Some(0));
            }
            if let Some(v) = found
                && v > 0
            {
                // The value must be the last acknowledged props change or a later unanswered one.
                let last_acked = ops
                    .iter()
                    .rposition(|o| o.kind == "props" && o.acked == Some(true));
                if let Some(i) = last_acked {
                    let later_maybe: BTreeSet<u64> = ops[i..]
                        .iter()
                        .filter(|o| o.kind == "props" && o.acked != Some(false))
                        .map(|o| o.value)
                        .collect();
                    assert!(
                        later_maybe.contains(&v),
                        "bucket {name}: dont_evict_time {v}m, but the last acknowledged props change set {}m: {ops:?}",
                        ops[i].value
                    );
                }
            }
            let present = found.is_some();
            let may_present = allow.iter().any(|v| v.is_some());
            let may_absent = allow.contains(&None);
            assert!(
                (present && may_present) || (!present && may_absent),
                "bucket {name}: present={present}, history allows {allow:?}: {ops:?}"
            );
        } else {
            let present = found.is_some();
            assert!(
                allow.iter().any(|v| v.is_some() == present),
                "{family} {name}: present={present}, history allows {allow:?}: {ops:?}"
            );
        }
        checked += 1;
    }
    // Nothing that no client asked for.
    for name in buckets.keys() {
        assert!(
            by.contains_key(&("bucket", name.as_str())),
            "unknown bucket {name}"
        );
    }
    assert!(checked > 0);
}

/// The nemesis run for `proxies` proxies and 3 targets, each node on its own loopback address.
async fn nemesis(proxies: usize, run_for: Duration) {
    let net = (
        100 + rand::random::<u8>() % 100,
        1 + rand::random::<u8>() % 250,
    );
    let ips: Vec<String> = (1..=proxies + 3)
        .map(|x| format!("127.{}.{}.{x}", net.0, net.1))
        .collect();
    let scratch = tempfile::tempdir().unwrap();
    let secret = cluster_secret_file(scratch.path());
    let mut sp = spec(
        proxies,
        3,
        ips.clone(),
        &["--auth", "--cluster-secret-file", &secret],
    );
    // A silent target is a suspect for 2 s (requests skip it, nothing moves) before it is
    // removed: a kill -9 for 3 s stays a suspect, a SIGSTOP for 6 s is removed and returns.
    sp.proxy_args.extend([
        "--admin-password".into(),
        "nemesis-admin-pw".into(),
        "--suspect-grace-ms".into(),
        "2000".into(),
    ]);
    sp.admin_password = Some("nemesis-admin-pw".into());
    let mut c = Cluster::start_proxies(sp).await.unwrap();
    let first = c.smap().await.unwrap();
    let all = ProxiesCluster::node_urls(&first);
    c.one_map(
        &all,
        |m| m.pmap.len() == proxies && m.tmap.len() == 3,
        Duration::from_secs(60),
    )
    .await
    .unwrap();

    // Leaders seen per term, sampled from every proxy.
    let leaders: Arc<Mutex<BTreeMap<u64, BTreeSet<String>>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (http, urls, leaders, stop) = (
            c.http.clone(),
            c.proxy_urls.clone(),
            leaders.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for u in &urls {
                    if let Some(m) = raft_metrics(&http, u).await
                        && m["state"] == "leader"
                    {
                        let term = m["term"].as_u64().unwrap_or(0);
                        let id = m["id"].to_string();
                        leaders.lock().unwrap().entry(term).or_default().insert(id);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let history: History = Arc::default();
    let clients: Vec<_> = (0..3)
        .map(|k| {
            tokio::spawn(client(
                k,
                c.http.clone(),
                c.proxy_urls.clone(),
                history.clone(),
                stop.clone(),
            ))
        })
        .collect();

    c.create_bucket(NEMESIS_DATA).await.unwrap();
    // Two copies: one target out at a time loses no object (with one copy a removed target's
    // objects are unavailable until it returns).
    let r = c
        .http
        .patch(c.url(&format!("/v1/buckets/{NEMESIS_DATA}?provider=ais")))
        .json(&serde_json::json!({"action": "set-bprops",
            "value": {"mirror": {"enabled": true, "copies": 2}}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let since = Instant::now();
    let data_history: History = Arc::default();
    let tally: Arc<Tally> = Arc::default();
    let data_clients: Vec<_> = (0..2)
        .map(|k| {
            tokio::spawn(data_client(
                k,
                c.http.clone(),
                c.proxy_urls.clone(),
                data_history.clone(),
                tally.clone(),
                since,
                stop.clone(),
            ))
        })
        .collect();
    let mut target_ids = Vec::new();
    for t in 0..3 {
        target_ids.push(c.target_id(t).await.unwrap());
    }

    let started = Instant::now();
    let mut round = 0;
    let mut actions = Vec::new();
    while started.elapsed() < run_for {
        println!("nemesis so far: {actions:?}");
        actions.push(format!("at {} ms:", since.elapsed().as_millis()));
        let l = wait_leader(&c, Duration::from_secs(60)).await;
        let t = rand::rng().random_range(0..3usize);
        match round % 6 {
            3 => {
                // Within the suspect grace: never removed.
                actions.push(format!("kill -9 target {t}, back after 3 s"));
                c.targets[t].kill9();
                tokio::time::sleep(Duration::from_secs(3)).await;
                c.targets[t].start().unwrap();
            }
            4 => {
                // Beyond the failure window and the suspect grace: removed, then back with
                // what it held.
                actions.push(format!("SIGSTOP target {t} for 6 s"));
                c.targets[t].signal("STOP");
                tokio::time::sleep(Duration::from_secs(6)).await;
                c.targets[t].signal("CONT");
            }
            5 => {
                // A rolling upgrade's step: marked restarting (nothing moves), stopped,
                // started; its re-join ends the restart.
                let r = c
                    .http
                    .put(format!("{}/v1/cluster", c.proxy_urls[l]))
                    .json(&serde_json::json!({"action": "start-maintenance",
                        "value": {"sid": target_ids[t], "skip_rebalance": true}}))
                    .timeout(Duration::from_secs(20))
                    .send()
                    .await;
                let status = r.map(|r| r.status().as_u16()).unwrap_or(0);
                actions.push(format!("restart target {t} (--no-rebalance: {status})"));
                tokio::time::sleep(Duration::from_millis(500)).await;
                c.targets[t].stop();
                tokio::time::sleep(Duration::from_secs(2)).await;
                c.targets[t].start().unwrap();
            }
            0 => {
                actions.push(format!("kill -9 proxy {l}"));
                c.proxy_mut(l).kill9();
                tokio::time::sleep(Duration::from_secs(3)).await;
                c.proxy_mut(l).start().unwrap();
            }
            1 => {
                actions.push(format!("SIGSTOP proxy {l} for 4 s"));
                c.proxy_mut(l).signal("STOP");
                tokio::time::sleep(Duration::from_secs(4)).await;
                c.proxy_mut(l).signal("CONT");
            }
            _ => {
                // The leader and one target against everyone else.
                let minority = vec![ips[l].clone(), ips[proxies].clone()];
                let majority: Vec<String> = ips
                    .iter()
                    .filter(|ip| !minority.contains(ip))
                    .cloned()
                    .collect();
                actions.push(format!("partition proxy {l} + target 0 for 5 s"));
                let cut = Partition::cut(&minority, &majority).unwrap();
                tokio::time::sleep(Duration::from_secs(5)).await;
                cut.heal();
            }
        }
        round += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for cl in clients.into_iter().chain(data_clients) {
        cl.await.unwrap();
    }
    sampler.await.unwrap();

    // Settle: one map with every proxy and target, one bucket metadata everywhere.
    let map = c
        .one_map_everywhere(
            |m| m.pmap.len() == proxies && m.tmap.len() == 3,
            Duration::from_secs(90),
        )
        .await;
    let map = match map {
        Ok(m) => m,
        Err(e) => {
            for i in 0..proxies {
                let n = c.proxy_mut(i);
                let state = n
                    .pid()
                    .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
                    .and_then(|st| {
                        st.lines()
                            .find(|l| l.starts_with("State:"))
                            .map(str::to_owned)
                    });
                let log = n.log_text();
                let starts = log.matches("raft member started").count();
                eprintln!(
                    "--- proxy {i}: {state:?}, {starts} starts:\n{}",
                    n.log_tail()
                );
                let dump = std::env::temp_dir().join(format!("nemesis-proxy-{i}.log"));
                let _ = std::fs::write(&dump, log);
            }
            panic!("{e}");
        }
    };
    let all = ProxiesCluster::node_urls(&map);
    let bmd = one_bmd(&c, &all, Duration::from_secs(60)).await;
    let mut lists = Vec::new();
    for url in &c.proxy_urls {
        lists.push(eventually(|| buckets_at(&c.http, url)).await);
    }
    assert!(
        lists.iter().all(|l| *l == lists[0]),
        "proxies list different buckets"
    );
    assert_eq!(lists[0], bucket_names(&bmd));

    let data_copies = bmd["buckets"]
        .as_object()
        .unwrap()
        .values()
        .find(|r| r["bck"]["name"] == NEMESIS_DATA)
        .map(|r| r["props"]["mirror"]["copies"].clone());
    assert_eq!(
        data_copies,
        Some(serde_json::json!(2)),
        "{NEMESIS_DATA} copies"
    );
    let buckets: BTreeMap<String, u64> = bmd["buckets"]
        .as_object()
        .unwrap()
        .values()
        .map(|r| {
            let name = r["bck"]["name"].as_str().unwrap().to_owned();
            let dont_evict = r["props"]["lru"]["dont_evict_time"]
                .as_str()
                .and_then(|s| s.strip_suffix('m'))
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            (name, dont_evict)
        })
        .filter(|(name, _)| name != NEMESIS_DATA)
        .collect();
    let users: BTreeSet<String> = bmd["users"]
        .as_object()
        .map(|m| m.keys().filter(|u| *u != "admin").cloned().collect())
        .unwrap_or_default();
    let etls: BTreeSet<String> = bmd["etls"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let history = history.lock().unwrap().clone();
    let acked = history.iter().filter(|o| o.acked == Some(true)).count();
    let unknown = history.iter().filter(|o| o.acked.is_none()).count();
    println!(
        "{proxies} proxies: {} operations ({acked} acknowledged, {unknown} without an answer), nemesis: {actions:?}",
        history.len()
    );
    assert!(
        acked >= 20,
        "too little got through: {acked} of {}",
        history.len()
    );
    check_history(&history, &buckets, &users, &etls);

    println!("data answers: {:?}", tally.answers.lock().unwrap());
    check_data(&c, &data_history, &tally).await;

    let leaders = leaders.lock().unwrap();
    for (term, ids) in leaders.iter() {
        assert_eq!(ids.len(), 1, "two leaders in term {term}: {ids:?}");
    }
    assert!(leaders.len() >= 2, "the leader never changed: {leaders:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nemesis_three_proxies_lose_no_acknowledged_change() {
    nemesis(3, Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nemesis_five_proxies_lose_no_acknowledged_change() {
    nemesis(5, Duration::from_secs(60)).await;
}

/// Time from a leader's kill -9 to a new leader that commits, over 20 kills (3 proxies).
/// Printed as p50 / p99 for docs/reliability.md; the bound is loose on purpose (a busy
/// machine must not make this fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_time_over_twenty_leader_kills() {
    let mut c = Cluster::start_proxies(spec(3, 1, Vec::new(), &[]))
        .await
        .unwrap();
    let mut times = Vec::new();
    for round in 0..20 {
        let l = wait_leader(&c, Duration::from_secs(60)).await;
        let killed = Instant::now();
        c.proxy_mut(l).kill9();
        // A new leader that commits: a bucket created through it.
        let took = loop {
            if let Some(n) = leader(&c).await
                && n != l
            {
                let r = c
                    .http
                    .post(format!(
                        "{}/v1/buckets/f{round}?provider=ais",
                        c.proxy_urls[n]
                    ))
                    .json(&serde_json::json!({"action": "create-bck"}))
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
                if r.is_ok_and(|r| r.status().is_success()) {
                    break killed.elapsed();
                }
            }
            assert!(
                killed.elapsed() < Duration::from_secs(60),
                "no new leader in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        times.push(took);
        c.proxy_mut(l).start().unwrap();
        // Back in the group before the next kill (two of three are needed to commit).
        let all = c.proxy_urls.clone();
        c.one_map(&all, |m| m.pmap.len() == 3, Duration::from_secs(60))
            .await
            .unwrap();
    }
    times.sort();
    let p50 = times[times.len() / 2];
    let p99 = times[times.len() - 1];
    println!(
        "failover over {} leader kills (heartbeat 150 ms, election timeout 750-1500 ms): p50 {p50:?}, p99 {p99:?}, all {times:?}",
        times.len()
    );
    assert!(p99 < Duration::from_secs(30), "{times:?}");
}

/// Voters of the Raft group as a proxy reports them.
async fn voters(http: &reqwest::Client, url: &str) -> usize {
    raft_metrics(http, url)
        .await
        .and_then(|m| m["voters"].as_array().map(Vec::len))
        .unwrap_or(0)
}

async fn create(http: &reqwest::Client, url: &str, name: &str) -> reqwest::StatusCode {
    http.post(format!("{url}/v1/buckets/{name}?provider=ais"))
        .json(&serde_json::json!({"action": "create-bck"}))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap()
        .status()
}

/// A 1-proxy cluster (the playground's shape) grows to 3 proxies — each joins as a learner,
/// is caught up and becomes a voter — and shrinks back with `remove-node`; changes commit at
/// every size and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_proxy_grows_to_three_voters_and_shrinks_back() {
    let c = Cluster::start_proxies(spec(1, 2, Vec::new(), &[]))
        .await
        .unwrap();
    let first = c.endpoint.clone();
    assert_eq!(voters(&c.http, &first).await, 1);
    assert!(create(&c.http, &first, "at-one").await.is_success());

    let mut joined = Vec::new();
    for i in 1..3 {
        let port = gristmill_tests::proxies::free_port_on("127.0.0.1");
        let url = format!("http://127.0.0.1:{port}");
        let node = gristmill_tests::NodeProcess::spawn(
            &format!("proxy-{i}"),
            vec![
                "proxy".into(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--state-dir".into(),
                c.dir
                    .path()
                    .join(format!("proxy-{i}"))
                    .display()
                    .to_string(),
                "--join".into(),
                first.clone(),
            ],
            Vec::new(),
            c.dir.path(),
        )
        .unwrap();
        joined.push((url, node));
    }
    let urls: Vec<String> = std::iter::once(first.clone())
        .chain(joined.iter().map(|(u, _)| u.clone()))
        .collect();
    let (http, urls_ref) = (&c.http, &urls);
    poll_until(
        Duration::from_secs(60),
        Duration::from_millis(200),
        move || async move {
            let mut counts = Vec::new();
            for u in urls_ref {
                counts.push(voters(http, u).await);
            }
            if counts.iter().all(|n| *n == 3) {
                return Ok(());
            }
            Err(format!("voters per proxy: {counts:?}"))
        },
    )
    .await;
    let map = c
        .one_map(&urls, |m| m.pmap.len() == 3, Duration::from_secs(60))
        .await
        .unwrap();
    // A change through the newest proxy (forwarded to the leader), read through every one.
    assert!(create(&c.http, &urls[2], "at-three").await.is_success());
    for u in &urls {
        let names = buckets_at(&c.http, u).await.unwrap();
        assert!(
            names.contains("at-one") && names.contains("at-three"),
            "{u}: {names:?}"
        );
    }

    // Shrink: remove the two that joined, then stop them.
    let ids: Vec<String> = map
        .pmap
        .values()
        .filter(|n| n.url() != first)
        .map(|n| n.daemon_id.clone())
        .collect();
    assert_eq!(ids.len(), 2);
    for id in &ids {
        let r = c
            .http
            .put(format!("{first}/v1/cluster"))
            .json(&serde_json::json!({"action": "remove-node", "value": {"sid": id}}))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "remove {id}: {}",
            r.text().await.unwrap()
        );
    }
    for (_, node) in &mut joined {
        node.stop();
    }
    let map = c
        .one_map(
            std::slice::from_ref(&first),
            |m| m.pmap.len() == 1,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(map.tmap.len(), 2);
    assert_eq!(voters(&c.http, &first).await, 1);
    assert!(create(&c.http, &first, "at-one-again").await.is_success());
    let names = buckets_at(&c.http, &first).await.unwrap();
    let want: BTreeSet<String> = ["at-one", "at-three", "at-one-again"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(names, want);
}

/// A proxy state dir written before the control plane ran on Raft (`smap.json`, `bmd.json`,
/// `removed.json`, a term from the old elections) is imported on first start: buckets, their
/// properties, users and ETLs are all there, targets accept the new maps (their term is not
/// below the old one), a removed node stays refused, and a restart does not import again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_format_state_dir_is_imported_on_first_start() {
    use gristmill_core::smap::{self, ClusterMap, Node};

    let port = gristmill_tests::proxies::free_port_on("127.0.0.1");
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::Builder::new()
        .prefix("gristmill-test-")
        .tempdir()
        .unwrap();
    let state = dir.path().join("proxy");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("node_id"), "poldprim").unwrap();
    let mut smap = ClusterMap::new(
        Node::new("poldprim", smap::PROXY, &url),
        "0123456789abcdef".into(),
        "2026-01-01T00:00:00Z".into(),
    );
    smap.version = 7;
    smap.term = 5;
    smap.pmap.insert(
        "pother".into(),
        Node::new("pother", smap::PROXY, "http://127.0.0.1:9"),
    );
    let bmd: Value = serde_json::json!({
        "version": 9, "uuid": "0123456789abcdef", "term": 5,
        "buckets": {
            "ais/@#/kept": {"bck": {"name": "kept", "provider": "ais", "namespace": {"uuid": "", "name": ""}},
                "props": {"provider": "ais", "created": 1, "bid": 3, "lru": {"dont_evict_time": "42m"}}}
        },
        "etls": {"upper": {"name": "upper", "runtime": "command", "command": ["cat"]}},
        "users": {"alice": {"name": "alice", "roles": ["cluster-read"], "generation": 4, "created": "2026-01-01T00:00:00Z"}}
    });
    std::fs::write(state.join("smap.json"), serde_json::to_vec(&smap).unwrap()).unwrap();
    std::fs::write(state.join("bmd.json"), serde_json::to_vec(&bmd).unwrap()).unwrap();
    std::fs::write(state.join("removed.json"), br#"["tgone"]"#).unwrap();

    let args = vec![
        "proxy".to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--state-dir".into(),
        state.display().to_string(),
    ];
    let mut proxy =
        gristmill_tests::NodeProcess::spawn("proxy", args, Vec::new(), dir.path()).unwrap();
    let mut targets = Vec::new();
    for i in 0..2 {
        let t = dir.path().join(format!("target-{i}"));
        targets.push(
            gristmill_tests::NodeProcess::spawn(
                &format!("target-{i}"),
                vec![
                    "target".into(),
                    "--listen".into(),
                    "127.0.0.1:0".into(),
                    "--state-dir".into(),
                    t.display().to_string(),
                    "--join".into(),
                    url.clone(),
                    "--mountpath".into(),
                    t.join("mp0").display().to_string(),
                ],
                Vec::new(),
                dir.path(),
            )
            .unwrap(),
        );
    }
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let map: ClusterMap = loop {
        if let Ok(r) = http.get(format!("{url}/v1/cluster?what=smap")).send().await
            && let Ok(m) = r.json::<ClusterMap>().await
            && m.tmap.len() == 2
        {
            break m;
        }
        assert!(Instant::now() < deadline, "{}", proxy.log_tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(map.uuid, "0123456789abcdef");
    assert!(
        map.version > 7 && map.term >= 5,
        "v{} term {}",
        map.version,
        map.term
    );
    assert_eq!(map.proxy_si.daemon_id, "poldprim");
    assert_eq!(map.pmap.len(), 1, "the old map's other proxies join again");
    // Targets take the imported cluster's maps (a term below 5 would have been refused):
    // each ends with the proxy's map.
    let deadline = Instant::now() + Duration::from_secs(30);
    'targets: loop {
        let now: ClusterMap = http
            .get(format!("{url}/v1/daemon?what=smap"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for t in now.tmap.values() {
            let theirs: ClusterMap = http
                .get(format!("{}/v1/daemon?what=smap", t.url()))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if (theirs.version, theirs.term) != (now.version, now.term) {
                assert!(
                    Instant::now() < deadline,
                    "target {} holds v{} term {}, proxy v{} term {}",
                    t.daemon_id,
                    theirs.version,
                    theirs.term,
                    now.version,
                    now.term
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue 'targets;
            }
        }
        break;
    }
    let bmd = bmd_at(&http, &url).await;
    assert_eq!(bucket_names(&bmd), BTreeSet::from(["kept".to_owned()]));
    let kept = bmd["buckets"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    assert_eq!(kept["props"]["lru"]["dont_evict_time"], "42m", "{kept}");
    assert!(bmd["etls"]["upper"].is_object(), "{bmd}");
    assert_eq!(bmd["users"]["alice"]["generation"], 4, "{bmd}");
    assert!(bmd["version"].as_u64().unwrap() >= 9);
    // The removed list came along.
    let r = http
        .post(format!("{url}/v1/cluster/join"))
        .json(&Node::new("tgone", smap::TARGET, "http://127.0.0.1:9"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "{}", r.text().await.unwrap());
    for name in ["smap.json", "bmd.json", "removed.json"] {
        assert!(!state.join(name).exists(), "{name} still there");
        assert!(
            state.join(format!("{name}.pre-raft")).exists(),
            "{name}.pre-raft missing"
        );
    }

    // A restart is a restart, not a second import.
    create(&http, &url, "after-import").await;
    proxy.stop();
    proxy.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(names) = buckets_at(&http, &url).await {
            assert_eq!(
                names,
                BTreeSet::from(["kept".to_owned(), "after-import".to_owned()])
            );
            break;
        }
        assert!(Instant::now() < deadline, "{}", proxy.log_tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(targets);
}

/// Read-your-writes across proxies: a bucket created through one proxy is listed at once
/// through another, and an object request for it through a third is redirected to its owner
/// (never 404), over the native and the S3 API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_through_one_proxy_is_seen_at_once_through_the_others() {
    let c = Cluster::start_proxies(spec(3, 2, Vec::new(), &[]))
        .await
        .unwrap();
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let p = &c.proxy_urls;
    for i in 0..30 {
        let name = format!("rw{i}");
        assert!(create(&c.http, &p[i % 3], &name).await.is_success());
        let names = buckets_at(&c.http, &p[(i + 1) % 3]).await.unwrap();
        assert!(names.contains(&name), "round {i}: {names:?}");
        let r = no_redirects
            .put(format!(
                "{}/v1/objects/{name}/o?provider=ais",
                p[(i + 2) % 3]
            ))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 307, "round {i}: {}", r.text().await.unwrap());
        let r = no_redirects
            .head(format!("{}/{name}", p[(i + 2) % 3]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "S3 HeadBucket, round {i}");
    }
}

/// Auth with several proxies: a user created through one proxy logs in at once through
/// another, and its token is accepted at once by a third (the gate looks again, after a
/// linearizable read, before refusing a valid token of a user it does not know yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_created_through_one_proxy_works_at_once_through_the_others() {
    let scratch = tempfile::tempdir().unwrap();
    let secret = cluster_secret_file(scratch.path());
    let mut sp = spec(
        3,
        1,
        Vec::new(),
        &["--auth", "--cluster-secret-file", &secret],
    );
    sp.proxy_args
        .extend(["--admin-password".into(), "users-admin-pw".into()]);
    sp.admin_password = Some("users-admin-pw".into());
    let c = Cluster::start_proxies(sp).await.unwrap();
    let p = &c.proxy_urls;
    for i in 0..10 {
        let name = format!("u{i}");
        let r = c
            .http
            .put(format!("{}/v1/auth/users/{name}", p[i % 3]))
            .json(&serde_json::json!({"roles": ["cluster-read"], "password": "pw-user-123"}))
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "add {name}: {}",
            r.text().await.unwrap()
        );
        let token =
            gristmill_tests::secure::login_at(&p[(i + 1) % 3], None, &name, "pw-user-123", "")
                .await
                .unwrap_or_else(|e| panic!("round {i}: login right after the create: {e}"));
        let r = gristmill_tests::secure::client(None, Some(&token))
            .get(format!("{}/v1/auth/whoami", p[(i + 2) % 3]))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "round {i}: whoami: {}", r.status());
    }
}

/// Issue 28: a follower proxy that was paused while a user was removed through the leader
/// never accepts that user's token once it resumes — not even on its first request: a proxy
/// whose state may be stale (no recent contact with a leader, or entries the leader committed
/// not yet applied) catches up with the leader before it judges a credential. (Before: the
/// resumed follower answered the removed user's requests from its stale applied state.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_follower_never_serves_a_removed_user() {
    let scratch = tempfile::tempdir().unwrap();
    let secret = cluster_secret_file(scratch.path());
    let mut sp = spec(
        3,
        1,
        Vec::new(),
        &["--auth", "--cluster-secret-file", &secret],
    );
    sp.proxy_args
        .extend(["--admin-password".into(), "users-admin-pw".into()]);
    sp.admin_password = Some("users-admin-pw".into());
    let mut c = Cluster::start_proxies(sp).await.unwrap();
    let (mut accepted, mut refused) = (0, 0);
    for round in 0..4 {
        let l = wait_leader(&c, Duration::from_secs(30)).await;
        let f = (l + 1 + round % 2) % 3;
        let (leader, follower) = (c.proxy_urls[l].clone(), c.proxy_urls[f].clone());
        let name = format!("gone{round}");
        let r = c
            .http
            .put(format!("{leader}/v1/auth/users/{name}"))
            .json(&serde_json::json!({"roles": ["cluster-read"], "password": "pw-user-123"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "add {name}: {}", r.status());
        let token = gristmill_tests::secure::login_at(&leader, None, &name, "pw-user-123", "")
            .await
            .unwrap();
        let whoami = || {
            gristmill_tests::secure::client(None, Some(&token))
                .get(format!("{follower}/v1/auth/whoami"))
                .timeout(Duration::from_secs(20))
                .send()
        };
        let r = whoami().await.unwrap();
        assert!(
            r.status().is_success(),
            "round {round}: before: {}",
            r.status()
        );

        c.proxy_mut(f).signal("STOP");
        let r = c
            .http
            .delete(format!("{leader}/v1/auth/users/{name}"))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "remove {name}: {}", r.status());
        c.proxy_mut(f).signal("CONT");
        // The very first requests after it resumes, then for a second more.
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            let status = whoami().await.unwrap().status();
            match status.as_u16() {
                401 | 403 => refused += 1,
                503 => {}
                s => {
                    accepted += 1;
                    eprintln!("round {round}: the paused follower answered {s} for a removed user");
                }
            }
        }
    }
    assert_eq!(
        accepted, 0,
        "a removed user was served ({refused} refusals)"
    );
    assert!(refused > 0);
}
