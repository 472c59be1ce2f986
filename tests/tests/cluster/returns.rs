//! Nodes that come back: a target leaves the map (SIGSTOP until the failure detector removes
//! it, `remove-node`, or kill -9 and a restart from an old snapshot of its mountpaths), objects
//! it holds are rewritten and deleted while it is out, then it returns. Judged on every object,
//! while it returns and after its rebalance: no stale bytes, no deleted object back, no
//! acknowledged write lost, and the listing exact.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gristmill_core::{Bck, Provider};
use gristmill_tests::{Cluster, content};

const N: usize = 240;
const SIZE: usize = 2048;

/// How the target is out of the cluster for a while.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Absence {
    /// SIGSTOP until the primary removes it for silence, then SIGCONT: it re-joins with
    /// everything it held.
    Paused,
    /// `grist cluster remove`, then `grist cluster add`: it ran throughout.
    Removed,
    /// kill -9 until removed, then restarted from a copy of its mountpaths taken before the
    /// last writes it acknowledged (copies = 2: those writes live on their replicas).
    OldSnapshot,
}

fn name(i: usize) -> String {
    format!("rt-{i:04}")
}

/// Object `i`'s bytes at write `v` (0: the fill).
fn bytes(i: usize, v: u64) -> Vec<u8> {
    content(((i as u64) << 8) | v, SIZE)
}

/// What a client may see of an object: exactly one state once the cluster settles; while the
/// target returns, one of the states a client could have caused.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Live(u64),
    Deleted,
    /// A DELETE answered 404 (copies = 1: nobody held it while its owner was out): the fill's
    /// bytes or gone, both are what a client could have caused.
    LiveOrDeleted(u64),
}

async fn put(c: &Cluster, bucket: &str, i: usize, v: u64) -> reqwest::StatusCode {
    c.http
        .put(c.url(&format!("/v1/objects/{bucket}/{}", name(i))))
        .body(bytes(i, v))
        .send()
        .await
        .unwrap()
        .status()
}

async fn delete(c: &Cluster, bucket: &str, i: usize) -> reqwest::StatusCode {
    c.http
        .delete(c.url(&format!("/v1/objects/{bucket}/{}", name(i))))
        .send()
        .await
        .unwrap()
        .status()
}

/// PUT or DELETE until acknowledged (a 503 while the map changes is retryable).
async fn until_done(mut op: impl AsyncFnMut() -> reqwest::StatusCode, what: &str) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = op().await;
        if status != reqwest::StatusCode::SERVICE_UNAVAILABLE {
            return status.as_u16();
        }
        assert!(Instant::now() < deadline, "{what}: 503 for 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What one GET through the proxy says, judged against `expect`: `Err` names a wrong answer;
/// `Ok(false)` a refusal (503) that says nothing.
async fn judge(
    http: &reqwest::Client,
    endpoint: &str,
    bucket: &str,
    i: usize,
    expect: &Expect,
) -> Result<bool, String> {
    let r = http
        .get(format!("{endpoint}/v1/objects/{bucket}/{}", name(i)))
        .send()
        .await
        .map_err(|e| format!("{}: {e}", name(i)))?;
    let status = r.status().as_u16();
    if status == 503 {
        let retry = r.headers().contains_key(reqwest::header::RETRY_AFTER);
        return if retry {
            Ok(false)
        } else {
            Err(format!("{}: 503 without Retry-After", name(i)))
        };
    }
    let body = r.bytes().await.map_err(|e| format!("{}: {e}", name(i)))?;
    let ok = match (status, expect) {
        (200, Expect::Live(v) | Expect::LiveOrDeleted(v)) => body.as_ref() == bytes(i, *v),
        (404, Expect::Deleted | Expect::LiveOrDeleted(_)) => true,
        _ => false,
    };
    if ok {
        return Ok(true);
    }
    let seen = if status == 200 {
        (0..4)
            .find(|v| body.as_ref() == bytes(i, *v))
            .map_or("other bytes".to_owned(), |v| format!("write {v}"))
    } else {
        format!("{status} {}", String::from_utf8_lossy(&body))
    };
    Err(format!("{}: expected {expect:?}, got {seen}", name(i)))
}

/// The proxy's listing of `bucket` (every page).
async fn listing(c: &Cluster, bucket: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let page: gristmill_core::api::ListObjectsPage = c
            .http
            .get(c.url(&format!("/v1/buckets/{bucket}")))
            .json(&serde_json::json!({"action": "list", "value": {"pagesize": 100, "continuation_token": token}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        names.extend(page.entries.into_iter().map(|e| e.name));
        if page.continuation_token.is_empty() {
            return names;
        }
        token = page.continuation_token;
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    let status = std::process::Command::new("cp")
        .args(["-a", &from.display().to_string(), &to.display().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "cp -a {from:?} {to:?}");
}

async fn a_target_comes_back(copies: usize, absence: Absence) {
    let mut c = Cluster::start_full(
        4,
        1,
        &["--keepalive-interval-ms", "500", "--keepalive-retries", "4"],
        &[("GRISTD_KEEPALIVE_INTERVAL_MS".into(), "500".into())],
    )
    .await
    .unwrap();
    let bucket = "rt";
    c.create_bucket(bucket).await.unwrap();
    if copies > 1 {
        c.grist_ok(&[
            "bucket",
            "props",
            "set",
            &format!("ais://{bucket}"),
            &format!("mirror.copies={copies}"),
        ]);
    }
    futures::stream::iter(0..N)
        .for_each_concurrent(16, |i| {
            let c = &c;
            async move { assert!(put(c, bucket, i, 0).await.is_success()) }
        })
        .await;
    let mut expect: BTreeMap<usize, Expect> = (0..N).map(|i| (i, Expect::Live(0))).collect();

    let victim = 1;
    let id = c.target_id(victim).await.unwrap();
    let smap = c.smap().await.unwrap();
    let url = smap.tmap[&id].url().to_owned();
    let bck = Bck::new(bucket, Provider::Ais).unwrap();
    // The victim's objects: it owns them (or holds a replica) before and after its absence.
    let held: Vec<usize> = (0..N)
        .filter(|i| {
            smap.owners(&bck.object_uname(&name(*i)), copies)
                .iter()
                .any(|o| o.daemon_id == id)
        })
        .collect();
    assert!(held.len() >= 40, "the victim holds {} objects", held.len());

    let snapshot = c.dir.path().join("snapshot");
    if absence == Absence::OldSnapshot {
        // A copy of its mountpath taken with the node down, then writes it acknowledges.
        c.targets[victim].stop();
        std::fs::create_dir_all(&snapshot).unwrap();
        copy_dir(&c.mountpaths[victim][0], &snapshot.join("mp0"));
        c.restart_target(victim).await.unwrap();
        super::elastic::rebalanced(&c).await;
        for &i in held.iter().step_by(5) {
            assert_eq!(
                until_done(async || put(&c, bucket, i, 1).await, "put").await,
                200
            );
            expect.insert(i, Expect::Live(1));
        }
    }

    // Out.
    match absence {
        Absence::Paused => c.targets[victim].signal("STOP"),
        Absence::Removed => {
            c.grist_ok(&["cluster", "remove", &id]);
        }
        Absence::OldSnapshot => c.targets[victim].kill9(),
    }
    let out = super::elastic::wait_member(&c, &id, false).await;
    println!("{absence:?}: {id} out of the map at v{}", out.version);

    // While it is out: rewrite some of its objects, rewrite-then-delete others, delete more,
    // and create new ones.
    let (mut rewritten, mut deleted) = (0, 0);
    for (k, &i) in held.iter().enumerate() {
        match k % 4 {
            0 => {
                assert_eq!(
                    until_done(async || put(&c, bucket, i, 2).await, "put").await,
                    200
                );
                expect.insert(i, Expect::Live(2));
                rewritten += 1;
            }
            1 => {
                assert_eq!(
                    until_done(async || put(&c, bucket, i, 3).await, "put").await,
                    200
                );
                let status = until_done(async || delete(&c, bucket, i).await, "delete").await;
                assert_eq!(status, 200, "{}: delete after a rewrite", name(i));
                expect.insert(i, Expect::Deleted);
                deleted += 1;
            }
            2 => {
                let status = until_done(async || delete(&c, bucket, i).await, "delete").await;
                let before = expect[&i].clone();
                expect.insert(
                    i,
                    match (status, before) {
                        (200, _) => Expect::Deleted,
                        // Nobody held it while its owner was out (copies = 1).
                        (404, Expect::Live(v)) if copies == 1 => Expect::LiveOrDeleted(v),
                        (s, b) => panic!("{}: delete answered {s} ({b:?})", name(i)),
                    },
                );
                deleted += 1;
            }
            _ => {}
        }
    }
    for i in N..N + 40 {
        assert_eq!(
            until_done(async || put(&c, bucket, i, 0).await, "put").await,
            200
        );
        expect.insert(i, Expect::Live(0));
    }
    println!("while out: {rewritten} rewritten, {deleted} deleted, 40 created");

    // Back.
    match absence {
        Absence::Paused => c.targets[victim].signal("CONT"),
        Absence::Removed => {
            c.grist_ok(&["cluster", "add", &url]);
        }
        Absence::OldSnapshot => {
            let mp = &c.mountpaths[victim][0];
            std::fs::remove_dir_all(mp).unwrap();
            copy_dir(&snapshot.join("mp0"), mp);
            c.targets[victim].start().unwrap();
        }
    }
    let back = super::elastic::wait_member(&c, &id, true).await;
    let url = back.tmap[&id].url().to_owned(); // a restarted target listens on a new port

    // While it returns and rebalances: every answer is one a client could have caused.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (http, endpoint, expect, stop) = (
            c.http.clone(),
            c.endpoint.clone(),
            expect.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let (mut ok, mut refused, mut wrong) = (0u64, 0u64, Vec::new());
            while !stop.load(Ordering::SeqCst) {
                for (i, e) in &expect {
                    match judge(&http, &endpoint, bucket, *i, e).await {
                        Ok(true) => ok += 1,
                        Ok(false) => refused += 1,
                        Err(w) => wrong.push(w),
                    }
                }
            }
            (ok, refused, wrong)
        })
    };
    super::elastic::rebalanced(&c).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let (ok, refused, wrong) = reader.await.unwrap();
    println!(
        "while it returned: {ok} right answers, {refused} refused (503), {} wrong",
        wrong.len()
    );
    if !wrong.is_empty() {
        for (i, t) in c.targets.iter().enumerate() {
            let log = t.log_text();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| !l.contains("DEBUG") || l.contains("rt-0"))
                .collect();
            eprintln!(
                "--- target {i}:\n{}",
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
    }
    assert!(
        wrong.is_empty(),
        "wrong answers while it returned: {wrong:#?}"
    );
    assert!(ok > 0);

    // After: every object exactly as acknowledged, and the listing exact.
    let mut settled: BTreeSet<String> = BTreeSet::new();
    for (i, e) in &expect {
        // Once settled, a 404-answered delete resolves one way; both are allowed.
        let deadline = Instant::now() + Duration::from_secs(20);
        let live = loop {
            match judge(&c.http, &c.endpoint, bucket, *i, e).await {
                Ok(true) => {
                    break c
                        .http
                        .head(c.url(&format!("/v1/objects/{bucket}/{}", name(*i))))
                        .send()
                        .await
                        .unwrap()
                        .status()
                        .is_success();
                }
                Ok(false) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Ok(false) => panic!("{}: still 503 after the rebalance", name(*i)),
                Err(w) => panic!("after the return: {w}"),
            }
        };
        if live {
            settled.insert(name(*i));
        }
    }
    let listed = listing(&c, bucket).await;
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(listed.len(), unique.len(), "a name listed twice");
    assert_eq!(unique, settled, "the listing differs from what GETs find");
    for (i, e) in &expect {
        match e {
            Expect::Live(_) => assert!(unique.contains(&name(*i)), "{} lost", name(*i)),
            Expect::Deleted => assert!(!unique.contains(&name(*i)), "{} came back", name(*i)),
            Expect::LiveOrDeleted(_) => {}
        }
    }
    let dropped = super::shards::metric(&c, &url, "grist_stale_copies_dropped_total").await;
    println!(
        "{absence:?} copies={copies}: {} objects settled, the returning target dropped {dropped} stale copies on reads",
        settled.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_target_returns_with_nothing_stale_copies_1() {
    a_target_comes_back(1, Absence::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_target_returns_with_nothing_stale_copies_2() {
    a_target_comes_back(2, Absence::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_removed_target_added_back_serves_nothing_stale_copies_1() {
    a_target_comes_back(1, Absence::Removed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_removed_target_added_back_serves_nothing_stale_copies_2() {
    a_target_comes_back(2, Absence::Removed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_restarted_from_an_old_snapshot_serves_nothing_stale() {
    a_target_comes_back(2, Absence::OldSnapshot).await;
}

/// Removed and added back between two of its keepalives, a target never sees a map without
/// itself; it must still learn it was out (its map entry says since when it is a member) and
/// check its copies. The holder of the newer copy is stopped, so the rebalance cannot mend the
/// stale copy first: the read is refused (503), never served stale. It failed before the map
/// said since when a node is a member (1 wrong read in 41,719 of the full test, in CI).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_removed_and_added_back_between_its_keepalives_serves_nothing_stale() {
    let c = Cluster::start_full(
        3,
        1,
        &[
            "--keepalive-interval-ms",
            "1000",
            "--keepalive-retries",
            "120",
        ],
        &[("GRISTD_KEEPALIVE_INTERVAL_MS".into(), "600000".into())],
    )
    .await
    .unwrap();
    let bucket = "rk";
    c.create_bucket(bucket).await.unwrap();
    for i in 0..60 {
        assert!(put(&c, bucket, i, 0).await.is_success());
    }
    let victim = 1;
    let id = c.target_id(victim).await.unwrap();
    let smap = c.smap().await.unwrap();
    let url = smap.tmap[&id].url().to_owned();
    let bck = Bck::new(bucket, Provider::Ais).unwrap();
    let i = (0..60)
        .find(|i| smap.owner(&bck.object_uname(&name(*i))).unwrap().daemon_id == id)
        .expect("the victim owns an object");
    let mut ids = Vec::new();
    for k in 0..3 {
        ids.push(c.target_id(k).await.unwrap());
    }

    c.grist_ok(&["cluster", "remove", &id]);
    let out = super::elastic::wait_member(&c, &id, false).await;
    assert_eq!(put(&c, bucket, i, 1).await, 200);
    let holder_id = out
        .owner(&bck.object_uname(&name(i)))
        .unwrap()
        .daemon_id
        .clone();
    let holder = ids.iter().position(|t| *t == holder_id).unwrap();

    // The newer copy's holder cannot answer, so nothing can mend the stale copy meanwhile.
    c.targets[holder].signal("STOP");
    let t0 = Instant::now();
    c.grist_ok(&["cluster", "add", &url]);
    super::elastic::wait_member(&c, &id, true).await;
    println!("added back in {:?}", t0.elapsed());
    let r = c
        .http
        .get(c.url(&format!("/v1/objects/{bucket}/{}", name(i))))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry = r.headers().contains_key(reqwest::header::RETRY_AFTER);
    let body = r.bytes().await.unwrap();
    c.targets[holder].signal("CONT");
    println!("read answered {status} after {:?}", t0.elapsed());
    assert!(
        status == 503 && retry,
        "{}: answered {status} ({}) while the newer copy's holder was stopped",
        name(i),
        if body.as_ref() == bytes(i, 0) {
            "the stale bytes".to_owned()
        } else {
            String::from_utf8_lossy(&body).into_owned()
        }
    );

    // Once the holder answers, the stale copy is dropped and the newer one served.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let expect = Expect::Live(1);
        match judge(&c.http, &c.endpoint, bucket, i, &expect).await {
            Ok(true) => break,
            Ok(false) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            other => panic!("after the holder resumed: {other:?}"),
        }
    }
    println!("the newer copy served after {:?}", t0.elapsed());
}
