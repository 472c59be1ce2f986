//! Several proxies: the primary killed under load (a new primary is elected, clients with
//! several endpoints fail over, the old primary rejoins as a non-primary), and the primary cut
//! off into a minority by a network partition (the minority refuses metadata changes, the
//! majority elects a primary, one map after healing).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gristmill_core::{Bck, Provider};
use gristmill_tests::proxies::{Partition, ProxiesCluster, ProxiesSpec};
use gristmill_tests::{Cluster, content};

/// Keepalive every 250 ms, 8 retries: a 2 s failure window.
const INTERVAL_MS: u64 = 250;
const RETRIES: u32 = 8;

fn spec(proxies: usize, targets: usize, ips: Vec<String>) -> ProxiesSpec {
    ProxiesSpec {
        proxies,
        targets,
        ips,
        node_args: vec!["--keepalive-interval-ms".into(), INTERVAL_MS.to_string()],
        proxy_args: vec!["--keepalive-retries".into(), RETRIES.to_string()],
        admin_password: None,
    }
}

fn window() -> Duration {
    Duration::from_millis(INTERVAL_MS * RETRIES as u64)
}

/// A client with several proxy endpoints: on a connection error it tries the next one.
struct Failover {
    http: reqwest::Client,
    urls: Vec<String>,
    current: AtomicUsize,
}

impl Failover {
    async fn send(
        &self,
        build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, String> {
        let start = self.current.load(Ordering::Relaxed);
        let mut errors = Vec::new();
        for k in 0..self.urls.len() {
            let i = (start + k) % self.urls.len();
            match build(&self.http, &self.urls[i]).send().await {
                Ok(r) => {
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(r);
                }
                Err(e) => errors.push(format!("{}: {e}", self.urls[i])),
            }
        }
        Err(errors.join("; "))
    }
}

/// Size of load object `i`.
fn len_of(i: u64) -> usize {
    1000 + (i as usize * 7919) % 60_000
}

/// One client request of the load (a failed one counts as inside a failure window when
/// [started, ended] overlaps it).
struct Op {
    started: Instant,
    ended: Instant,
    ok: bool,
    what: String,
}

/// Runs PUT + GET (verified) of new objects through `client` until `stop`; counts successes
/// in `done`.
fn start_load(
    client: Arc<Failover>,
    bucket: &'static str,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<(Vec<Op>, Vec<u64>)> {
    tokio::spawn(async move {
        let mut ops = Vec::new();
        let mut acked = Vec::new();
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let len = len_of(i);
            let started = Instant::now();
            let body = content(i, len);
            let r = client
                .send(|h, u| {
                    h.put(format!("{u}/v1/objects/{bucket}/obj-{i}"))
                        .body(body.clone())
                })
                .await;
            let ok = matches!(&r, Ok(r) if r.status().is_success());
            ops.push(Op {
                started,
                ended: Instant::now(),
                ok,
                what: format!("PUT obj-{i}: {:?}", r.as_ref().map(|r| r.status())),
            });
            if ok {
                acked.push(i);
                done.fetch_add(1, Ordering::Relaxed);
                // Read back an acknowledged object (the one just written, or an earlier one).
                let j = acked[(i as usize * 31) % acked.len()];
                let started = Instant::now();
                let r = client
                    .send(|h, u| h.get(format!("{u}/v1/objects/{bucket}/obj-{j}")))
                    .await;
                let ok = match r {
                    Ok(r) if r.status().is_success() => r
                        .bytes()
                        .await
                        .is_ok_and(|b| b[..] == content(j, len_of(j))[..]),
                    _ => false,
                };
                ops.push(Op {
                    started,
                    ended: Instant::now(),
                    ok,
                    what: format!("GET obj-{j}"),
                });
            }
            i += 1;
        }
        (ops, acked)
    })
}

async fn wait_count(done: &AtomicUsize, n: usize, c: &ProxiesCluster) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while done.load(Ordering::Relaxed) < n {
        assert!(
            Instant::now() < deadline,
            "the load stalled at {} requests; proxy logs:\n{}",
            done.load(Ordering::Relaxed),
            c.more_proxies[0].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_via(c: &ProxiesCluster, proxy_url: &str, bucket: &str) -> reqwest::Response {
    c.http
        .post(format!("{proxy_url}/v1/buckets/{bucket}?provider=ais"))
        .json(&serde_json::json!({"action": "create-bck"}))
        .send()
        .await
        .unwrap()
}

async fn bucket_names(c: &ProxiesCluster, proxy_url: &str) -> Vec<String> {
    let v: Vec<serde_json::Value> = c
        .http
        .get(format!("{proxy_url}/v1/buckets"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut names: Vec<String> = v
        .iter()
        .map(|b| b["name"].as_str().unwrap_or("").to_owned())
        .collect();
    names.sort();
    names
}

/// Waits until every proxy lists exactly `want` buckets.
async fn same_buckets(c: &ProxiesCluster, proxies: &[String], want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut all = Vec::new();
        for u in proxies {
            all.push(bucket_names(c, u).await);
        }
        if all.iter().all(|names| names == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "proxies list different buckets: {all:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Acceptance: kill -9 the primary of 3 proxies under a PUT+GET load from a client with the 3
/// endpoints → a new primary within the failure window plus an election, no failed request
/// outside [kill, new primary], metadata changes work through every proxy, the old primary
/// comes back as a non-primary and every node holds one map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_kill9_under_load_fails_over() {
    let mut c = Cluster::start_proxies(spec(3, 3, Vec::new()))
        .await
        .unwrap();
    let first = c.smap().await.unwrap();
    let all = ProxiesCluster::node_urls(&first);
    let first = c
        .one_map(
            &all,
            |m| m.pmap.len() == 3 && m.tmap.len() == 3,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let old = first.proxy_si.daemon_id.clone();
    assert_eq!(first.proxy_si.url(), c.proxy_urls[0]);
    c.create_bucket("load").await.unwrap();

    let client = Arc::new(Failover {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        urls: c.proxy_urls.clone(),
        current: AtomicUsize::new(0),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let load = start_load(client.clone(), "load", stop.clone(), done.clone());
    wait_count(&done, 30, &c).await;

    let killed = Instant::now();
    c.proxy.kill9();
    let survivors = c.proxy_urls[1..].to_vec();
    let elected_map = c
        .one_map(
            &survivors,
            |m| m.proxy_si.daemon_id != old,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let elected = Instant::now();
    let took = elected - killed;
    let new = elected_map.proxy_si.daemon_id.clone();
    assert!(
        !elected_map.pmap.contains_key(&old),
        "dead primary still in the map"
    );
    assert!(elected_map.term >= 1);

    let after = done.load(Ordering::Relaxed);
    wait_count(&done, after + 30, &c).await;
    stop.store(true, Ordering::Relaxed);
    let (ops, acked) = load.await.unwrap();
    let failed: Vec<&Op> = ops.iter().filter(|o| !o.ok).collect();
    let outside: Vec<&str> = failed
        .iter()
        .filter(|o| o.ended < killed || o.started > elected)
        .map(|o| o.what.as_str())
        .collect();
    assert!(
        outside.is_empty(),
        "failed requests outside the failover window: {outside:?}"
    );
    // Every acknowledged object is intact, read through the survivors.
    for i in &acked {
        let r = client
            .send(|h, u| h.get(format!("{u}/v1/objects/load/obj-{i}")))
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "obj-{i}");
        assert!(
            r.bytes().await.unwrap()[..] == content(*i, len_of(*i))[..],
            "obj-{i} corrupt"
        );
    }

    // Metadata changes through every surviving proxy: a non-primary forwards them to the new
    // primary and answers itself (no redirect for the client to follow, or to lose its token
    // on) — bucket creation and an ETL definition, which used to be refused off the primary.
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (k, u) in survivors.iter().enumerate() {
        let r = no_redirects
            .post(format!("{u}/v1/buckets/after-{k}?provider=ais"))
            .json(&serde_json::json!({"action": "create-bck"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "create via {u}");
        let r = no_redirects
            .put(format!("{u}/v1/etl"))
            .json(
                &serde_json::json!({"name": format!("etl-{k}"), "runtime": "command",
                "command": ["cat"]}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "ETL via {u}: {}", r.text().await.unwrap());
    }

    // The CLI with the three endpoints (the first one dead) fails over.
    let endpoints = c.proxy_urls.join(",");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(gristmill_tests::gristd_bin().with_file_name("grist"))
            .args(["bucket", "create", "ais://cli-failover"])
            .env("GRIST_ENDPOINT", endpoints)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "grist with several endpoints: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The old primary comes back: it finds the newer map and rejoins as a non-primary.
    c.proxy.start().unwrap();
    let nodes: Vec<String> = c
        .proxy_urls
        .iter()
        .cloned()
        .chain(elected_map.tmap.values().map(|n| n.url().to_owned()))
        .collect();
    let last = c
        .one_map(
            &nodes,
            |m| m.proxy_si.daemon_id == new && m.pmap.contains_key(&old) && m.tmap.len() == 3,
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\nold primary:\n{}", c.proxy.log_tail()));
    let r = create_via(&c, &c.proxy_urls[0], "rejoined").await;
    assert!(
        r.status().is_success(),
        "create via the old primary: {}",
        r.status()
    );
    same_buckets(
        &c,
        &c.proxy_urls,
        &["after-0", "after-1", "cli-failover", "load", "rejoined"],
    )
    .await;
    println!(
        "failover: new primary {new} after {took:?} (window {:?}); {} client requests, {} failed \
         (all inside the window), {} acknowledged objects intact; final map v{} term {}",
        window(),
        ops.len(),
        failed.len(),
        acked.len(),
        last.version,
        last.term
    );
}

/// Acceptance: each node on its own loopback address; nftables cuts the primary and one target
/// off from the other 2 proxies and 3 targets. The minority refuses metadata changes (503 no
/// quorum), the majority elects a primary and accepts changes; after healing, every node
/// holds one map and the old primary is a non-primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_primary_minority_refuses_changes_and_heals() {
    let a = 100 + rand::random::<u8>() % 100;
    let b = 1 + rand::random::<u8>() % 250;
    let ips: Vec<String> = (1..=7).map(|x| format!("127.{a}.{b}.{x}")).collect();
    let c = Cluster::start_proxies(spec(3, 4, ips.clone()))
        .await
        .unwrap();
    let first = c.smap().await.unwrap();
    let all = ProxiesCluster::node_urls(&first);
    let first = c
        .one_map(
            &all,
            |m| m.pmap.len() == 3 && m.tmap.len() == 4,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let all = ProxiesCluster::node_urls(&first);
    let old = first.proxy_si.daemon_id.clone();
    c.create_bucket("before").await.unwrap();

    // Proxy 0 (the primary) and target 0 against everyone else.
    let minority = vec![ips[0].clone(), ips[3].clone()];
    let majority: Vec<String> = ips
        .iter()
        .filter(|ip| !minority.contains(ip))
        .cloned()
        .collect();
    let on = |ip: &String| {
        all.iter()
            .find(|u| u.contains(&format!("//{ip}:")))
            .unwrap()
            .clone()
    };
    let majority_urls: Vec<String> = majority.iter().map(on).collect();
    let p0 = c.proxy_urls[0].clone();

    let cut = Partition::cut(&minority, &majority).unwrap();
    let started = Instant::now();
    let elected = c
        .one_map(
            &majority_urls,
            |m| m.proxy_si.daemon_id != old,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let took = started.elapsed();
    let new = elected.proxy_si.daemon_id.clone();

    // The minority side still has its old primary, which refuses changes.
    let mine = c.map_of(&p0).await.unwrap();
    assert_eq!(
        mine.proxy_si.daemon_id, old,
        "the minority cannot know of the election"
    );
    let r = create_via(&c, &p0, "minority").await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 503, "minority change: {text}");
    assert!(text.contains("no quorum"), "{text}");
    let r = c
        .http
        .delete(format!("{p0}/v1/buckets/before?provider=ais"))
        .json(&serde_json::json!({"action": "destroy-bck"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "minority destroy");

    // The majority accepts changes, through either of its proxies.
    for u in &c.proxy_urls[1..] {
        let name = format!("majority-{}", u.rsplit(':').next().unwrap());
        let r = create_via(&c, u, &name).await;
        let status = r.status();
        assert!(
            status.is_success(),
            "majority change via {u}: {status} {}",
            r.text().await.unwrap()
        );
    }

    // Heal: one map everywhere, the old primary a non-primary of it, both sides' nodes in it.
    cut.heal();
    let healed = Instant::now();
    let last = c
        .one_map(
            &all,
            |m| m.proxy_si.daemon_id == new && m.pmap.len() == 3 && m.tmap.len() == 4,
            Duration::from_secs(90),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\nold primary:\n{}", c.proxy.log_tail()));
    let mut want: Vec<String> = c.proxy_urls[1..]
        .iter()
        .map(|u| format!("majority-{}", u.rsplit(':').next().unwrap()))
        .chain(["before".to_owned()])
        .collect();
    want.sort();
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    same_buckets(&c, &c.proxy_urls, &want).await;
    // And a change through the old primary now works (it forwards to the new one).
    let r = create_via(&c, &p0, "healed").await;
    assert!(r.status().is_success(), "after healing: {}", r.status());
    println!(
        "partition: majority elected {new} after {took:?} (window {:?}); minority refused with \
         503; one map v{} term {} on all 7 nodes {:?} after healing",
        window(),
        last.version,
        last.term,
        healed.elapsed()
    );
}

/// Stretch of the elastic scenario: `mirror.copies = 2`, 3 proxies + 4 targets, the load's
/// client failing over across the 3 proxies; kill -9 a target and the primary proxy at once.
/// A new primary is elected, it removes the dead target, no acknowledged object is lost or
/// corrupt, requests fail only until the map without the dead nodes reached every node, and
/// re-replication restores two copies of every object on its first two HRW targets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_2_survive_kill9_of_a_target_and_the_primary() {
    let mut c = Cluster::start_proxies(spec(3, 4, Vec::new()))
        .await
        .unwrap();
    let first = c.smap().await.unwrap();
    let all = ProxiesCluster::node_urls(&first);
    let first = c
        .one_map(
            &all,
            |m| m.pmap.len() == 3 && m.tmap.len() == 4,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let old = first.proxy_si.daemon_id.clone();
    c.create_bucket("cp").await.unwrap();
    c.grist_ok(&["bucket", "props", "set", "ais://cp", "mirror.copies=2"]);

    let client = Arc::new(Failover {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        urls: c.proxy_urls.clone(),
        current: AtomicUsize::new(0),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let load = start_load(client.clone(), "cp", stop.clone(), done.clone());
    wait_count(&done, 30, &c).await;

    // The victim: target 2 (its id from its state dir).
    let victim_id = std::fs::read_to_string(c.dir.path().join("target-2").join("node_id"))
        .unwrap()
        .trim()
        .to_owned();
    let killed = Instant::now();
    c.targets[2].kill9();
    c.proxy.kill9();
    let live: Vec<String> = c.proxy_urls[1..]
        .iter()
        .cloned()
        .chain(
            first
                .tmap
                .values()
                .filter(|n| n.daemon_id != victim_id)
                .map(|n| n.url().to_owned()),
        )
        .collect();
    let settled_map = c
        .one_map(
            &live,
            |m| {
                m.proxy_si.daemon_id != old && !m.tmap.contains_key(&victim_id) && m.tmap.len() == 3
            },
            Duration::from_secs(90),
        )
        .await
        .unwrap();
    let settled = Instant::now();

    let after = done.load(Ordering::Relaxed);
    wait_count(&done, after + 30, &c).await;
    stop.store(true, Ordering::Relaxed);
    let (ops, acked) = load.await.unwrap();
    let failed: Vec<&Op> = ops.iter().filter(|o| !o.ok).collect();
    let outside: Vec<&str> = failed
        .iter()
        .filter(|o| o.ended < killed || o.started > settled)
        .map(|o| o.what.as_str())
        .collect();
    assert!(
        outside.is_empty(),
        "failed requests outside [kill, map without the dead nodes everywhere]: {outside:?}"
    );
    for i in &acked {
        let r = client
            .send(|h, u| h.get(format!("{u}/v1/objects/cp/obj-{i}")))
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "acknowledged obj-{i} lost");
        assert!(
            r.bytes().await.unwrap()[..] == content(*i, len_of(*i))[..],
            "obj-{i} corrupt"
        );
    }

    // Two copies of every acknowledged object, on its first two HRW targets.
    let bck = Bck::new("cp", Provider::Ais).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut holders: std::collections::HashMap<String, Vec<String>> = Default::default();
        for t in settled_map.tmap.values() {
            for name in c.names_on(t.url(), "cp").await {
                holders.entry(name).or_default().push(t.daemon_id.clone());
            }
        }
        let wrong: Vec<String> = acked
            .iter()
            .map(|i| format!("obj-{i}"))
            .filter(|name| {
                let mut want: Vec<String> = settled_map
                    .owners(&bck.object_uname(name), 2)
                    .iter()
                    .map(|n| n.daemon_id.clone())
                    .collect();
                want.sort();
                let mut have = holders.get(name).cloned().unwrap_or_default();
                have.sort();
                have != want
            })
            .collect();
        if wrong.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} objects without their two HRW copies, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "copies=2, 3 proxies: target and primary killed; new primary {} and the dead target \
         out of the map on every live node after {:?}; {} requests, {} failed (all inside that \
         window); {} acknowledged objects intact, 2 HRW copies of each restored",
        settled_map.proxy_si.daemon_id,
        settled - killed,
        ops.len(),
        failed.len(),
        acked.len()
    );
}
