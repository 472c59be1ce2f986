//! An elastic cluster: a target joins under GET load (rebalance, GETs served from the previous
//! owner until objects move, listings exact throughout), maintenance moves a target's objects
//! away and back, a rebalance interrupted by kill -9 finishes after the restart, and a silent
//! target is detected and removed, then re-joins with its data.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gristmill_core::job::{JobKind, JobState, JobStatus};
use gristmill_core::{Bck, ClusterMap, Provider};
use gristmill_tests::{Cluster, content};

const KEEPALIVE: &[(&str, &str)] = &[("GRISTD_KEEPALIVE_INTERVAL_MS", "500")];

async fn cluster(targets: usize) -> Cluster {
    let env: Vec<(String, String)> = KEEPALIVE
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Cluster::start_full(
        targets,
        1,
        &["--keepalive-interval-ms", "500", "--keepalive-retries", "4"],
        &env,
    )
    .await
    .unwrap()
}

pub(super) fn name(i: usize) -> String {
    format!("el-{i:05}")
}

pub(super) async fn fill(c: &Cluster, bucket: &str, n: usize, size: usize) {
    c.create_bucket(bucket).await.unwrap();
    futures::stream::iter(0..n)
        .map(|i| {
            let (http, url) = (
                c.http.clone(),
                c.url(&format!("/v1/objects/{bucket}/{}", name(i))),
            );
            async move {
                let r = http
                    .put(url)
                    .body(content(i as u64, size))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
            }
        })
        .buffer_unordered(32)
        .collect::<()>()
        .await;
}

/// Waits until no target runs a rebalance and the rebalance of the current map version has
/// finished (on the targets that ran one: those whose placement changed, or that restarted).
pub(crate) async fn rebalanced(c: &Cluster) -> (ClusterMap, Option<JobStatus>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    // Map changes reach targets asynchronously: give them a moment to start.
    tokio::time::sleep(Duration::from_millis(300)).await;
    loop {
        let running: Vec<JobStatus> = c
            .http
            .get(c.url("/v1/jobs?kind=rebalance&running=true"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if running.is_empty() {
            let smap = c.smap().await.unwrap();
            let r = c
                .http
                .get(c.url(&format!("/v1/jobs/rb{}", smap.version)))
                .send()
                .await
                .unwrap();
            // Every map change here moves (or re-checks) objects: its rebalance must exist.
            if r.status().is_success() {
                let j: JobStatus = r.json().await.unwrap();
                assert_ne!(j.state, JobState::Aborted, "rebalance aborted: {j:?}");
                if j.state == JobState::Finished {
                    return (smap, Some(j));
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "rebalance did not finish: {running:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every object on its owner, once; returns objects per target.
async fn assert_placement(c: &Cluster, bucket: &str, n: usize) -> HashMap<String, usize> {
    let smap = c.smap().await.unwrap();
    let bck = Bck::new(bucket, Provider::Ais).unwrap();
    let mut seen = BTreeSet::new();
    let mut per = HashMap::new();
    for t in smap.tmap.values() {
        let names = c.names_on(t.url(), bucket).await;
        per.insert(t.daemon_id.clone(), names.len());
        for name in names {
            let owner = smap.owner(&bck.object_uname(&name)).unwrap();
            if owner.daemon_id != t.daemon_id {
                for (i, n) in c.targets.iter().enumerate() {
                    eprintln!("--- target {i} log:\n{}", n.log_tail());
                }
            }
            assert_eq!(owner.daemon_id, t.daemon_id, "{name} misplaced");
            assert!(
                seen.insert(name),
                "an object on two targets after rebalance"
            );
        }
    }
    if seen.len() != n {
        let notable = |log: String| -> String {
            log.lines()
                .filter(|l| {
                    [
                        "rebalance",
                        "decommission",
                        "removed",
                        "map",
                        "WARN",
                        "ERROR",
                    ]
                    .iter()
                    .any(|k| l.contains(k))
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        for (i, t) in c.targets.iter().enumerate() {
            eprintln!("--- target {i} log:\n{}", notable(t.log_text()));
        }
        eprintln!("--- proxy log:\n{}", notable(c.proxy.log_text()));
    }
    assert_eq!(seen.len(), n, "objects lost");
    per
}

/// The proxy's listing: every name exactly once.
async fn assert_listing(c: &Cluster, bucket: &str, n: usize) {
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let page: gristmill_core::api::ListObjectsPage = c
            .http
            .get(c.url(&format!("/v1/buckets/{bucket}")))
            .json(&serde_json::json!({"action": "list", "value": {"pagesize": 700, "continuation_token": token}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        names.extend(page.entries.into_iter().map(|e| e.name));
        if page.continuation_token.is_empty() {
            break;
        }
        token = page.continuation_token;
    }
    let unique: BTreeSet<_> = names.iter().collect();
    assert_eq!(
        (names.len(), unique.len()),
        (n, n),
        "listing not exactly once"
    );
}

/// GETs of random objects until stopped; returns (ok, failed).
fn get_load(
    c: &Cluster,
    bucket: &str,
    n: usize,
    size: usize,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    let (http, endpoint, bucket) = (c.http.clone(), c.endpoint.clone(), bucket.to_owned());
    let ok = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        let mut failed = Vec::new();
        let mut i = 0usize;
        while !stop.load(Ordering::SeqCst) {
            i = (i * 7919 + 13) % n;
            let url = format!("{endpoint}/v1/objects/{bucket}/{}", name(i));
            match http.get(&url).send().await {
                Ok(r) if r.status().is_success() => match r.bytes().await {
                    Ok(b) if b == content(i as u64, size) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => failed.push(format!("{}: bad body", name(i))),
                },
                Ok(r) => {
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    failed.push(format!("{}: {status} {body}", name(i)));
                }
                Err(e) => failed.push(format!("{}: {e}", name(i))),
            }
        }
        (ok.load(Ordering::Relaxed), failed)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn add_target_and_maintenance_under_get_load() {
    const N: usize = 2000;
    const SIZE: usize = 8192;
    let mut c = cluster(3).await;
    fill(&c, "el", N, SIZE).await;
    let before = c.smap().await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let load = get_load(&c, "el", N, SIZE, stop.clone());
    let added = c.add_target().await.unwrap();
    // Listings stay exact while objects move.
    assert_listing(&c, "el", N).await;
    let (smap, job) = rebalanced(&c).await;
    let job = job.expect("a rebalance for the join");
    assert_eq!(job.targets.len(), 4, "every target ran its share");
    assert_listing(&c, "el", N).await;
    let moved = job.objects - job.skipped;
    let ratio = moved as f64 / N as f64;
    println!("join: {moved} of {N} objects moved ({ratio:.3}; ideal 1/4 = 0.25)");
    assert!(
        (0.15..0.35).contains(&ratio),
        "moved {ratio:.3} of the objects"
    );
    let per = assert_placement(&c, "el", N).await;
    let new_id = smap
        .tmap
        .keys()
        .find(|id| !before.tmap.contains_key(*id))
        .unwrap()
        .clone();
    assert_eq!(
        per[&new_id], moved as usize,
        "exactly the moved objects are on the new target"
    );

    // Maintenance: the new target's objects move away; it keeps serving until they have.
    c.grist_ok(&["cluster", "maintenance", "start", &new_id]);
    let (_, job) = rebalanced(&c).await;
    assert_listing(&c, "el", N).await;
    let per = assert_placement(&c, "el", N).await;
    assert_eq!(per.get(&new_id).copied().unwrap_or(0), 0, "{job:?}");
    c.grist_ok(&["cluster", "maintenance", "stop", &new_id]);
    rebalanced(&c).await;
    assert_placement(&c, "el", N).await;

    stop.store(true, Ordering::SeqCst);
    let (ok, failed) = load.await.unwrap();
    println!("GET load: {ok} ok, {} failed", failed.len());
    assert!(ok > 100, "the load ran ({ok} GETs)");
    if !failed.is_empty() {
        // What the nodes said about the failed objects.
        let names: Vec<&str> = failed.iter().filter_map(|f| f.split(':').next()).collect();
        for node in std::iter::once(&c.proxy).chain(&c.targets) {
            for line in node.log_text().lines() {
                if names.iter().any(|n| line.contains(n)) {
                    eprintln!("{}: {line}", node.name);
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "failed GETs during rebalance: {:?}",
        &failed[..failed.len().min(10)]
    );
    let _ = added;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rebalance_interrupted_by_kill9_finishes_after_restart() {
    const N: usize = 3000;
    const SIZE: usize = 48 * 1024;
    let mut c = cluster(3).await;
    fill(&c, "kl", N, SIZE).await;
    c.add_target().await.unwrap();
    // Kill a sender as soon as its share of the rebalance is under way.
    let smap = c.smap().await.unwrap();
    let id = format!("rb{}", smap.version);
    let deadline = Instant::now() + Duration::from_secs(60);
    let victim_id = loop {
        let r = c
            .http
            .get(c.url(&format!("/v1/jobs/{id}")))
            .send()
            .await
            .unwrap();
        if r.status().is_success() {
            let s: JobStatus = r.json().await.unwrap();
            if let Some(t) = s
                .targets
                .iter()
                .find(|t| t.state == JobState::Running && t.objects > 0)
            {
                break t.node.clone();
            }
            assert!(
                s.state == JobState::Running,
                "rebalance finished before the kill: {s:?}"
            );
        }
        assert!(Instant::now() < deadline, "rebalance never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let idx = {
        let smap = c.smap().await.unwrap();
        let url = smap.tmap[&victim_id].url().to_owned();
        // Targets listen on port 0: find the process by its log's advertised URL.
        (0..c.targets.len())
            .find(|i| {
                let log = c.targets[*i].log_text();
                log.lines()
                    .rfind(|l| l.contains("target starting"))
                    .is_some_and(|l| l.contains(&url))
            })
            .expect("victim process")
    };
    c.targets[idx].kill9();
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.restart_target(idx).await.unwrap();
    rebalanced(&c).await;
    let jobs: serde_json::Value = c
        .http
        .get(c.url("/v1/jobs?kind=rebalance"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    println!("rebalance jobs after the restart: {jobs}");
    assert_placement(&c, "kl", N).await;
    assert_listing(&c, "kl", N).await;
    // Nothing lost or corrupt.
    let bad: Vec<usize> = futures::stream::iter(0..N)
        .map(|i| {
            let (http, url) = (
                c.http.clone(),
                c.url(&format!("/v1/objects/kl/{}", name(i))),
            );
            async move {
                let r = http.get(url).send().await.unwrap();
                (
                    i,
                    r.status().is_success() && r.bytes().await.unwrap() == content(i as u64, SIZE),
                )
            }
        })
        .buffer_unordered(16)
        .filter_map(|(i, ok)| async move { (!ok).then_some(i) })
        .collect()
        .await;
    assert!(bad.is_empty(), "lost or corrupt: {bad:?}");
    // And the next rebalance works.
    let some = c.smap().await.unwrap().tmap.keys().next().unwrap().clone();
    c.grist_ok(&["cluster", "maintenance", "start", &some]);
    rebalanced(&c).await;
    assert_placement(&c, "kl", N).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_target_is_removed_and_rejoins_with_its_data() {
    let mut c = cluster(3).await;
    fill(&c, "sl", 300, 1024).await;
    let before = c.smap().await.unwrap();
    let victim = c.targets[1].log_text();
    let victim = victim
        .lines()
        .rfind(|l| l.contains("target starting"))
        .unwrap_or("")
        .to_owned();
    let victim_id = before
        .tmap
        .values()
        .find(|n| victim.contains(n.url()))
        .expect("victim in the map")
        .daemon_id
        .clone();
    c.targets[1].kill9();
    let started = Instant::now();
    loop {
        let smap = c.smap().await.unwrap();
        if !smap.tmap.contains_key(&victim_id) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "silent target not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "silent target removed after {:?} (keepalive 500 ms x 4)",
        started.elapsed()
    );
    c.restart_target(1).await.unwrap();
    let smap = c.smap().await.unwrap();
    assert!(
        smap.tmap.contains_key(&victim_id),
        "re-joined with the same id"
    );
    rebalanced(&c).await;
    assert_placement(&c, "sl", 300).await;
}

/// `mirror.copies = 2` under a continuous PUT + GET load: kill -9 a target; no acknowledged
/// object is lost or corrupt, GETs fail only until the dead target is detected, and
/// re-replication restores two copies of everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_2_survive_a_kill9_under_load() {
    let mut c = cluster(4).await;
    c.create_bucket("cp").await.unwrap();
    c.grist_ok(&["bucket", "props", "set", "ais://cp", "mirror.copies=2"]);
    let acked: Arc<std::sync::Mutex<Vec<usize>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (http, endpoint, acked, stop) = (
            c.http.clone(),
            c.endpoint.clone(),
            acked.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let mut i = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let url = format!("{endpoint}/v1/objects/cp/{}", name(i));
                if let Ok(r) = http.put(&url).body(content(i as u64, 4096)).send().await
                    && r.status().is_success()
                {
                    acked.lock().unwrap().push(i);
                }
                i += 1;
            }
        })
    };
    let failures: Arc<std::sync::Mutex<Vec<Instant>>> = Arc::default();
    let reader = {
        let (http, endpoint, acked, stop, failures) = (
            c.http.clone(),
            c.endpoint.clone(),
            acked.clone(),
            stop.clone(),
            failures.clone(),
        );
        tokio::spawn(async move {
            let mut n = 0u64;
            let mut k = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let pick = {
                    let a = acked.lock().unwrap();
                    if a.is_empty() {
                        None
                    } else {
                        k = (k * 7919 + 13) % a.len();
                        Some(a[k])
                    }
                };
                let Some(i) = pick else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let ok = match http
                    .get(format!("{endpoint}/v1/objects/cp/{}", name(i)))
                    .timeout(Duration::from_secs(5))
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => {
                        r.bytes().await.is_ok_and(|b| b == content(i as u64, 4096))
                    }
                    _ => false,
                };
                if !ok {
                    failures.lock().unwrap().push(Instant::now());
                }
                n += 1;
            }
            n
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.targets[2].kill9();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let gets = reader.await.unwrap();
    let acked: Vec<usize> = acked.lock().unwrap().clone();
    let failures = failures.lock().unwrap().clone();
    let last_failure = failures.iter().max().map(|t| t.duration_since(killed));
    println!(
        "copies=2: {} acknowledged PUTs, {gets} GETs, {} failed GETs, last failure {:?} after the kill",
        acked.len(),
        failures.len(),
        last_failure
    );
    // Failed GETs only inside the detection window (4 × 500 ms) plus a map push.
    assert!(
        last_failure.is_none_or(|d| d < Duration::from_secs(5)),
        "GETs still failed {last_failure:?} after the kill"
    );
    let (smap, _) = rebalanced(&c).await;
    // Nothing acknowledged is lost or corrupt.
    let bad: Vec<usize> = futures::stream::iter(acked.clone())
        .map(|i| {
            let (http, url) = (
                c.http.clone(),
                c.url(&format!("/v1/objects/cp/{}", name(i))),
            );
            async move {
                let r = http.get(url).send().await.unwrap();
                (
                    i,
                    r.status().is_success() && r.bytes().await.unwrap() == content(i as u64, 4096),
                )
            }
        })
        .buffer_unordered(16)
        .filter_map(|(i, ok)| async move { (!ok).then_some(i) })
        .collect()
        .await;
    assert!(
        bad.is_empty(),
        "{} acknowledged objects lost or corrupt: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    // Two copies of everything again, on the first two HRW targets.
    let bck = Bck::new("cp", Provider::Ais).unwrap();
    let held = holders(&c, &smap, "cp").await;
    for i in &acked {
        let n = name(*i);
        let mut want: Vec<String> = smap
            .owners(&bck.object_uname(&n), 2)
            .iter()
            .map(|o| o.daemon_id.clone())
            .collect();
        want.sort();
        let got = held.get(&n).cloned().unwrap_or_default();
        assert_eq!(got, want, "{n}: copies not restored");
    }
}

/// Which targets hold each object of `bucket` (from every target's local listing).
async fn holders(c: &Cluster, smap: &ClusterMap, bucket: &str) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for t in smap.tmap.values() {
        for name in c.names_on(t.url(), bucket).await {
            out.entry(name).or_default().push(t.daemon_id.clone());
        }
    }
    for ids in out.values_mut() {
        ids.sort();
    }
    out
}

/// Setting `mirror.copies` on a bucket that already holds objects starts a make-n-copies job
/// (up 1 → 3, down 3 → 2, down to 1): each object ends on exactly its first N HRW targets, and
/// every object reads back intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changing_copies_of_an_existing_bucket_runs_make_n_copies() {
    const N: usize = 300;
    const SIZE: usize = 2048;
    let c = cluster(4).await;
    fill(&c, "mk", N, SIZE).await;
    let smap = c.smap().await.unwrap();
    let bck = Bck::new("mk", Provider::Ais).unwrap();
    for copies in [3usize, 2, 1] {
        let out = c.grist_ok(&[
            "--json",
            "bucket",
            "props",
            "set",
            "ais://mk",
            &format!("mirror.copies={copies}"),
            "--wait",
        ]);
        let json = &out[out.find('{').unwrap_or_else(|| panic!("no job in {out:?}"))..];
        let status: JobStatus = serde_json::from_str(json).unwrap();
        assert_eq!(status.kind, JobKind::MakeNCopies, "{out}");
        assert_eq!(status.state, JobState::Finished, "{status:?}");
        let held = holders(&c, &smap, "mk").await;
        assert_eq!(held.len(), N, "copies={copies}: objects missing");
        for (name, got) in &held {
            let mut want: Vec<String> = smap
                .owners(&bck.object_uname(name), copies)
                .iter()
                .map(|o| o.daemon_id.clone())
                .collect();
            want.sort();
            assert_eq!(got, &want, "copies={copies}: {name} on the wrong targets");
        }
        println!(
            "copies={copies}: job moved {} copies, skipped {}",
            status.objects, status.skipped
        );
    }
    // Same props again: nothing changes, no job.
    let out = c.grist_ok(&["bucket", "props", "set", "ais://mk", "mirror.copies=1"]);
    assert!(!out.contains("job"), "{out}");
    for i in (0..N).step_by(7) {
        let r = c
            .http
            .get(c.url(&format!("/v1/objects/mk/{}", name(i))))
            .send()
            .await
            .unwrap();
        assert_eq!(r.bytes().await.unwrap(), content(i as u64, SIZE));
    }
}

/// Waits until `id` is in (or out of) the cluster map.
pub(super) async fn wait_member(c: &Cluster, id: &str, member: bool) -> ClusterMap {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let smap = c.smap().await.unwrap();
        if smap.tmap.contains_key(id) == member {
            return smap;
        }
        assert!(Instant::now() < deadline, "{id} member={member} never");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `grist cluster decommission` moves a target's objects away and then drops it from the map;
/// `grist cluster remove` drops it at once; a removed target that keeps running stays out
/// (its keepalives and join retries are refused) until `grist cluster add URL` brings it back,
/// and the rebalance after that puts every object on its owner again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decommission_and_remove_stay_out_until_added_back() {
    const N: usize = 600;
    const SIZE: usize = 4096;
    let mut c = cluster(3).await;
    fill(&c, "dr", N, SIZE).await;
    let before = c.smap().await.unwrap();
    c.add_target().await.unwrap();
    let (smap, _) = rebalanced(&c).await;
    let (id, url) = smap
        .tmap
        .values()
        .find(|n| !before.tmap.contains_key(&n.daemon_id))
        .map(|n| (n.daemon_id.clone(), n.url().to_owned()))
        .unwrap();
    let per = assert_placement(&c, "dr", N).await;
    assert!(per[&id] > 0, "the new target got objects");

    c.grist_ok(&["cluster", "decommission", &id]);
    wait_member(&c, &id, false).await;
    assert_placement(&c, "dr", N).await;
    assert_listing(&c, "dr", N).await;
    assert!(
        c.names_on(&url, "dr").await.is_empty(),
        "objects left behind"
    );
    // Still running, still out: three detection windows (500 ms × 4) later.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        !c.smap().await.unwrap().tmap.contains_key(&id),
        "walked back in"
    );

    c.grist_ok(&["cluster", "add", &url]);
    wait_member(&c, &id, true).await;
    rebalanced(&c).await;
    let per = assert_placement(&c, "dr", N).await;
    if !per.contains_key(&id) {
        eprintln!("--- proxy log:\n{}", c.proxy.log_text());
    }
    assert!(
        per.get(&id).is_some_and(|n| *n > 0),
        "{id} added back: {per:?}"
    );

    // Remove at once: its objects are out of the cluster until it is added back.
    c.grist_ok(&["cluster", "remove", &id]);
    wait_member(&c, &id, false).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !c.smap().await.unwrap().tmap.contains_key(&id),
        "walked back in"
    );
    let refused = c.grist(&["cluster", "remove", &id]);
    assert!(!refused.status.success(), "removing an absent node");
    c.grist_ok(&["cluster", "add", &url]);
    wait_member(&c, &id, true).await;
    rebalanced(&c).await;
    assert_placement(&c, "dr", N).await;
    assert_listing(&c, "dr", N).await;
    for i in (0..N).step_by(13) {
        let r = c
            .http
            .get(c.url(&format!("/v1/objects/dr/{}", name(i))))
            .send()
            .await
            .unwrap();
        assert_eq!(r.bytes().await.unwrap(), content(i as u64, SIZE));
    }
}
/// A PUT of `data` to `url` that sends the first half of its body, then stalls until the
/// returned sender fires (or is dropped): a write admitted and placed now that commits later.
/// Checks that the PUT is still waiting half a second after it started.
pub(crate) async fn stalled_put(
    http: &reqwest::Client,
    url: String,
    data: &[u8],
) -> (
    tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (go_on, wait) = tokio::sync::oneshot::channel::<()>();
    let half = data.len() / 2;
    let (first, rest) = (data[..half].to_vec(), data[half..].to_vec());
    let body = futures::stream::once(async move { Ok::<_, std::io::Error>(first) }).chain(
        futures::stream::once(async move {
            let _ = wait.await;
            Ok(rest)
        }),
    );
    let put = tokio::spawn(
        http.put(url)
            .header(reqwest::header::CONTENT_LENGTH, data.len())
            .body(reqwest::Body::wrap_stream(body))
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!put.is_finished(), "the PUT waits for the rest of its body");
    (put, go_on)
}

/// Waits until target `t` has cluster map `version` or a newer one (pushes are not waited for).
pub(crate) async fn has_map(c: &Cluster, t: &gristmill_core::Node, version: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let theirs: ClusterMap = c
            .http
            .get(format!("{}/v1/daemon?what=smap", t.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if theirs.version >= version {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} has no map v{version}",
            t.daemon_id
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The id of the target process `i` (its state dir keeps it).
fn target_id(c: &Cluster, i: usize) -> String {
    std::fs::read_to_string(c.dir.path().join(format!("target-{i}")).join("node_id"))
        .unwrap()
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mirrored_put_that_cannot_reach_every_copy_changes_nothing() {
    // Issue 14 item 5: with mirror.copies = 2, a PUT whose replica target cannot take the
    // write — paused (SIGSTOP) or out of space — fails, and every node still serves the
    // previous bytes (or nothing). A long failure window keeps the paused target in the map.
    let env = vec![(
        "GRISTD_KEEPALIVE_INTERVAL_MS".to_string(),
        "1000".to_string(),
    )];
    let mut c = Cluster::start_full(
        3,
        1,
        &[
            "--keepalive-interval-ms",
            "1000",
            "--keepalive-retries",
            "90",
        ],
        &env,
    )
    .await
    .unwrap();
    c.create_bucket("mir").await.unwrap();
    c.grist_ok(&["bucket", "props", "set", "ais://mir", "mirror.copies=2"]);
    let smap = c.smap().await.unwrap();
    let bck = Bck::new("mir", Provider::Ais).unwrap();
    let refusing = target_id(&c, 2);
    // Objects whose replica (second HRW target) is the refusing one, and two never stored.
    let replica_on = |n: &String| smap.owners(&bck.object_uname(n), 2)[1].daemon_id == refusing;
    let names: Vec<String> = (0..400)
        .map(|i| format!("m-{i:04}"))
        .filter(replica_on)
        .take(4)
        .collect();
    let fresh: Vec<String> = (0..400)
        .map(|i| format!("m-new-{i:04}"))
        .filter(replica_on)
        .take(2)
        .collect();
    assert_eq!((names.len(), fresh.len()), (4, 2));
    for n in &names {
        let r = super::put(&c, "mir", n, b"previous".to_vec()).await;
        assert!(r.status().is_success());
    }
    let direct = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    for (round, how) in ["paused", "out of space"].iter().enumerate() {
        match round {
            0 => c.targets[2].signal("STOP"),
            _ => {
                c.targets[2].stop();
                for k in [
                    "GRISTD_LRU_LOW_WM",
                    "GRISTD_LRU_HIGH_WM",
                    "GRISTD_OUT_OF_SPACE_WM",
                ] {
                    c.targets[2].env.push((k.into(), "1".into()));
                }
                c.restart_target(2).await.unwrap();
            }
        }
        let puts = names.iter().chain(&fresh).map(|n| {
            let req = c
                .http
                .put(c.url(&format!("/v1/objects/mir/{n}")))
                .body(b"new bytes that must not show".to_vec());
            async move { (n, req.send().await.unwrap().status()) }
        });
        for (n, status) in futures::future::join_all(puts).await {
            assert!(
                status.is_server_error(),
                "{how}: {n}: PUT answered {status}"
            );
        }
        if round == 0 {
            // An S3 multipart upload over one of them, completed while the replica is
            // paused: the completion fails and the previous bytes stay (checked below).
            let s3 = anonymous_s3(&c);
            let key = &names[0];
            let up = s3
                .create_multipart_upload()
                .bucket("mir")
                .key(key)
                .send()
                .await
                .unwrap();
            let id = up.upload_id().unwrap();
            let part = s3
                .upload_part()
                .bucket("mir")
                .key(key)
                .upload_id(id)
                .part_number(1)
                .body(aws_sdk_s3::primitives::ByteStream::from(
                    b"multipart bytes that must not show".to_vec(),
                ))
                .send()
                .await
                .unwrap();
            let done = s3
                .complete_multipart_upload()
                .bucket("mir")
                .key(key)
                .upload_id(id)
                .multipart_upload(
                    aws_sdk_s3::types::CompletedMultipartUpload::builder()
                        .parts(
                            aws_sdk_s3::types::CompletedPart::builder()
                                .part_number(1)
                                .e_tag(part.e_tag().unwrap())
                                .build(),
                        )
                        .build(),
                )
                .send()
                .await;
            let err = done.expect_err("a multipart upload without its replica completed");
            let status = err.raw_response().map(|r| r.status().as_u16());
            assert!(
                status.is_some_and(|s| s >= 500),
                "{how}: CompleteMultipartUpload answered {status:?}: {err:?}"
            );
        }
        let smap_now = c.smap().await.unwrap();
        let mut checked = 0;
        for base in std::iter::once(c.endpoint.clone()).chain(
            smap_now
                .tmap
                .values()
                .filter(|t| round > 0 || t.daemon_id != refusing)
                .map(|t| t.url().to_owned()),
        ) {
            let via_proxy = base == c.endpoint;
            for n in &names {
                // Asking a target directly with a forward mark from a newer map: it serves
                // its own copy (a replica) or its owner's, never redirects.
                let url = if via_proxy {
                    format!("{base}/v1/objects/mir/{n}")
                } else {
                    format!("{base}/v1/objects/mir/{n}?tfwd=999999")
                };
                let client = if via_proxy { &c.http } else { &direct };
                let r = client.get(&url).send().await.unwrap();
                assert_eq!(r.status(), 200, "{how}: {url}");
                assert_eq!(&r.bytes().await.unwrap()[..], b"previous", "{how}: {url}");
                checked += 1;
            }
            for n in &fresh {
                let r = c
                    .http
                    .get(format!("{}/v1/objects/mir/{n}", c.endpoint))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 404, "{how}: a failed PUT of {n} is visible");
            }
        }
        if round == 0 {
            c.targets[2].signal("CONT");
        }
        println!(
            "mirrored PUT, replica {how}: 6 PUTs failed, {checked} GETs of the previous bytes"
        );
    }
    // The refusing target, back and with room, holds no trace of the refused writes; the
    // bucket takes writes again.
    c.targets[2].stop();
    c.targets[2].env.retain(|(k, _)| !k.ends_with("_WM"));
    let smap = c.restart_target(2).await.unwrap();
    let held = holders(&c, &smap, "mir").await;
    for n in &fresh {
        assert!(!held.contains_key(n), "{n} held by {:?}", held.get(n));
    }
    let r = c
        .http
        .get(format!(
            "{}/v1/objects/mir/{}?tfwd=999999",
            refusing_url(&c, &refusing).await,
            names[0]
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(&r.bytes().await.unwrap()[..], b"previous");
    let r = super::put(&c, "mir", &names[0], b"after".to_vec()).await;
    assert!(r.status().is_success());
}

async fn refusing_url(c: &Cluster, id: &str) -> String {
    c.smap().await.unwrap().tmap[id].url().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_while_unsettled_waits_for_every_target_to_answer() {
    // Issue 14: until the primary confirms every object is placed by the current map, a copy
    // may sit on any target of it (a map it never saw, an aborted rebalance). A DELETE must
    // order after every copy: a target that does not answer fails it (503) and changes
    // nothing; once it answers, the DELETE is final everywhere. A long failure window keeps
    // the paused target in the map.
    let env = vec![(
        "GRISTD_KEEPALIVE_INTERVAL_MS".to_string(),
        "1000".to_string(),
    )];
    let c = Cluster::start_full(
        3,
        1,
        &[
            "--keepalive-interval-ms",
            "1000",
            "--keepalive-retries",
            "90",
        ],
        &env,
    )
    .await
    .unwrap();
    fill(&c, "uns", 40, 1024).await;
    let paused = target_id(&c, 2);
    // A change while target 2 is paused: its rebalance cannot finish, so nobody is settled.
    c.targets[2].signal("STOP");
    let leaving = target_id(&c, 0);
    let r = c
        .http
        .put(c.url("/v1/cluster"))
        .json(&serde_json::json!({"action": "start-maintenance", "value": {"sid": leaving}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let smap = c.smap().await.unwrap();
    // The live targets have the new map (pushes are not waited for).
    for t in smap.tmap.values().filter(|t| t.daemon_id != paused) {
        has_map(&c, t, smap.version).await;
    }
    let bck = Bck::new("uns", Provider::Ais).unwrap();
    // Owned by target 1 under the new map (so its owner answers, and asks the paused one).
    let victims: Vec<String> = (0..40)
        .map(name)
        .filter(|n| {
            let owner = &smap.owner(&bck.object_uname(n)).unwrap().daemon_id;
            *owner != paused && *owner != leaving
        })
        .take(3)
        .collect();
    assert_eq!(victims.len(), 3);
    let get = |n: &String| c.http.get(c.url(&format!("/v1/objects/uns/{n}"))).send();
    for n in &victims {
        let r = c
            .http
            .delete(c.url(&format!("/v1/objects/uns/{n}")))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        if status != 503 {
            for t in &c.targets {
                eprintln!("--- {}:\n{}", t.name, t.log_tail());
            }
            eprintln!("--- proxy:\n{}", c.proxy.log_tail());
        }
        assert_eq!(status, 503, "DELETE {n} with a silent target: {text}");
        assert!(text.contains("did not answer"), "{text}");
        let r = get(n).await.unwrap();
        assert_eq!(r.status(), 200, "{n} after a refused DELETE");
        let i: usize = n.trim_start_matches("el-").parse().unwrap();
        assert_eq!(r.bytes().await.unwrap(), content(i as u64, 1024));
    }
    c.targets[2].signal("CONT");
    for n in &victims {
        let r = c
            .http
            .delete(c.url(&format!("/v1/objects/uns/{n}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "DELETE {n} once every target answers");
        assert_eq!(get(n).await.unwrap().status(), 404);
    }
    // Whatever moves now, the deleted objects stay deleted: on every node and in the listing.
    rebalanced(&c).await;
    let page: gristmill_core::api::ListObjectsPage = c
        .http
        .get(c.url("/v1/buckets/uns"))
        .json(&serde_json::json!({"action": "list", "value": {"pagesize": 100}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed: BTreeSet<String> = page.entries.into_iter().map(|e| e.name).collect();
    let expect: BTreeSet<String> = (0..40).map(name).filter(|n| !victims.contains(n)).collect();
    assert_eq!(listed, expect, "the listing after the deletes");
    let smap = c.smap().await.unwrap();
    for n in &victims {
        assert_eq!(get(n).await.unwrap().status(), 404, "{n} came back");
        for t in smap.tmap.values() {
            let names = c.names_on(t.url(), "uns").await;
            assert!(!names.contains(n), "{n} still on {}", t.daemon_id);
        }
    }
    assert_eq!(paused, smap.tmap[&paused].daemon_id);
}

/// An S3 client for a cluster without S3 users (anonymous access), that does not retry.
fn anonymous_s3(c: &Cluster) -> aws_sdk_s3::Client {
    use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&c.endpoint)
        .force_path_style(true)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            "gristmill",
            "gristmill-secret",
            None,
            None,
            "test",
        ))
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// A PUT the owner admitted under one map that commits after the next map arrived: the next
/// rebalance waits for it and moves the new version, so readers never get the version it
/// replaced — not after the primary declared every object placed, not after a later write
/// and a map change back. (Without the wait, the walk sent the old copy and the new one was
/// left on a target nobody asks: the GET after `placed` read the old version.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_put_admitted_under_the_old_map_is_moved_by_the_next_rebalance() {
    const SIZE: usize = 64 << 10;
    let c = cluster(3).await;
    fill(&c, "gate", 20, SIZE).await;
    let smap = c.smap().await.unwrap();
    let bck = Bck::new("gate", Provider::Ais).unwrap();
    let victim = name(7);
    let owner = smap.owner(&bck.object_uname(&victim)).unwrap().clone();
    let v1 = content(1_000, SIZE);
    let v2 = content(2_000, SIZE);

    // v1 goes straight to the owner, and stalls half-way until the map has changed.
    let (put, go_on) = stalled_put(
        &c.http,
        format!("{}/v1/objects/gate/{victim}", owner.url()),
        &v1,
    )
    .await;

    // The owner goes into maintenance: the object's owner is now another target.
    let r = c
        .http
        .put(c.url("/v1/cluster"))
        .json(
            &serde_json::json!({"action": "start-maintenance", "value": {"sid": owner.daemon_id}}),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let changed = c.smap().await.unwrap();
    let heir = changed.owner(&bck.object_uname(&victim)).unwrap().clone();
    assert_ne!(heir.daemon_id, owner.daemon_id);
    let rb = format!("rb{}", changed.version);
    // The owner has the new map and its rebalance, which is waiting for the PUT.
    has_map(&c, &owner, changed.version).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status: JobStatus = c
        .http
        .get(c.url(&format!("/v1/jobs/{rb}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        status.state,
        JobState::Running,
        "the rebalance waits for the write the old owner admitted under the old map: {status:?}"
    );
    assert!(
        owner_log_says(
            &c,
            &owner.daemon_id,
            "waiting for writes admitted under earlier maps"
        ),
        "the wait is logged"
    );

    go_on.send(()).unwrap();
    let r = put.await.unwrap().unwrap();
    assert!(
        r.status().is_success(),
        "PUT v1: {}",
        r.text().await.unwrap()
    );
    let (_, job) = rebalanced(&c).await;
    assert_eq!(job.unwrap().errors, 0);
    // Placed: the targets forget the earlier map and stop asking past owners.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let get = || async {
        let r = c
            .http
            .get(c.url(&format!("/v1/objects/gate/{victim}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap()
    };
    assert!(get().await == v1, "v1 after the rebalance and `placed`");
    assert!(
        c.names_on(heir.url(), "gate").await.contains(&victim),
        "v1 moved to the new owner"
    );
    assert!(
        !c.names_on(owner.url(), "gate").await.contains(&victim),
        "no copy left on the target in maintenance"
    );

    // A later write and the map changing back: the newest version wins everywhere.
    let r = c
        .http
        .put(c.url(&format!("/v1/objects/gate/{victim}")))
        .body(v2.clone())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let r = c
        .http
        .put(c.url("/v1/cluster"))
        .json(&serde_json::json!({"action": "stop-maintenance", "value": {"sid": owner.daemon_id}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    rebalanced(&c).await;
    assert!(get().await == v2, "v2 after the map changed back");
    assert_placement(&c, "gate", 20).await;
}

/// Whether the log of the target with id `id` contains `text`.
fn owner_log_says(c: &Cluster, id: &str, text: &str) -> bool {
    (0..c.targets.len())
        .filter(|i| target_id(c, *i) == id)
        .any(|i| c.targets[i].log_text().contains(text))
}
