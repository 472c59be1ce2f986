//! Resilver: attach / detach / disable / enable mountpaths of a running target under a
//! continuous GET load and concurrent PUTs (`grist storage mountpath ...`), checked on disk:
//! afterwards every object has exactly one data file, on its HRW mountpath.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use gristmill_core::job::JobStatus;
use gristmill_core::{Bck, hrw};
use gristmill_tests::{Cluster, content};
use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;

use super::{get, list_all, put};

const BUCKET: &str = "resilver";
const N: usize = 1500;

fn size_of(i: usize) -> usize {
    // Mostly small; every 50th object is larger than the read-at-lookup limit (128 KiB).
    if i.is_multiple_of(50) {
        300_000 + i
    } else {
        1024 + (i * 37) % 8192
    }
}

fn name_of(i: usize) -> String {
    format!("obj/{i:05}")
}

/// A continuous GET load on the initial objects, checking every byte.
struct Load {
    stop: Arc<AtomicBool>,
    gets: Arc<AtomicU64>,
    failed: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(c: &Cluster, workers: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let gets = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..workers)
            .map(|w| {
                let (stop, gets, failed) = (stop.clone(), gets.clone(), failed.clone());
                let http = c.http.clone();
                let endpoint = c.endpoint.clone();
                tokio::spawn(async move {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
                    while !stop.load(Ordering::Relaxed) {
                        let i = rng.random_range(0..N);
                        let url = format!("{endpoint}/v1/objects/{BUCKET}/{}", name_of(i));
                        let outcome = match http.get(&url).send().await {
                            Ok(r) if r.status().is_success() => match r.bytes().await {
                                Ok(b) if b[..] == content(i as u64, size_of(i))[..] => Ok(()),
                                Ok(b) => Err(format!("wrong bytes ({} bytes)", b.len())),
                                Err(e) => Err(format!("body: {e}")),
                            },
                            Ok(r) => Err(format!(
                                "{} {}",
                                r.status(),
                                r.text().await.unwrap_or_default()
                            )),
                            Err(e) => Err(e.to_string()),
                        };
                        gets.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = outcome {
                            failed.lock().await.push(format!("{}: {e}", name_of(i)));
                        }
                    }
                })
            })
            .collect();
        Self {
            stop,
            gets,
            failed,
            tasks,
        }
    }

    /// Stops the load; returns (GETs done, failures).
    async fn finish(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let failed = self.failed.lock().await.clone();
        (self.gets.load(Ordering::Relaxed), failed)
    }
}

/// PUTs during a resilver: new objects `live/<round>-<i>` and overwrites of `ow/<k>` with a
/// growing version; remembers what was acknowledged.
struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<BTreeMap<String, Vec<u8>>>,
}

const OVERWRITTEN: usize = 20;

fn overwrite_body(k: usize, version: u64) -> Vec<u8> {
    format!("ow {k} version {version:08}").into_bytes()
}

impl Writer {
    fn start(c: &Cluster, round: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (http, endpoint, round) = (c.http.clone(), c.endpoint.clone(), round.to_owned());
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            let mut acked = BTreeMap::new();
            let mut i = 0u64;
            while !stop2.load(Ordering::Relaxed) || i < 40 {
                let (name, body) = if i.is_multiple_of(2) {
                    let name = format!("live/{round}-{i}");
                    (name, content(1_000_000 + i, 2048 + i as usize))
                } else {
                    let k = (i as usize / 2) % OVERWRITTEN;
                    (format!("ow/{k}"), overwrite_body(k, i))
                };
                let r = http
                    .put(format!("{endpoint}/v1/objects/{BUCKET}/{name}"))
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "PUT {name}: {}", r.status());
                acked.insert(name, body);
                i += 1;
            }
            acked
        });
        Self { stop, task }
    }

    async fn finish(self) -> BTreeMap<String, Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// Object names by the hash their data file is named after.
fn by_name_hash(names: &BTreeSet<String>) -> HashMap<String, String> {
    names
        .iter()
        .map(|n| {
            let h = xxhash_rust::xxh3::xxh3_128(n.as_bytes());
            (format!("{h:032x}"), n.clone())
        })
        .collect()
}

/// Every data file under `<mp>/obj`, as object names (files of unknown objects fail).
fn objects_on(mp: &Path, hashes: &HashMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![mp.join("obj")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
                continue;
            }
            let file = e.file_name().to_string_lossy().into_owned();
            let stem = file.split('.').next().unwrap_or_default().to_owned();
            let name = hashes
                .get(&stem)
                .unwrap_or_else(|| panic!("data file {} of no known object", e.path().display()));
            out.push(name.clone());
        }
    }
    out
}

/// Checks that each object has exactly one data file, on its HRW mountpath among `enabled`,
/// and that `others` hold none. Returns the count per enabled mountpath.
fn check_placement(
    enabled: &[PathBuf],
    others: &[PathBuf],
    names: &BTreeSet<String>,
) -> Vec<usize> {
    let bck = Bck::new(BUCKET, gristmill_core::bucket::Provider::Ais).unwrap();
    let hashes = by_name_hash(names);
    let canon: Vec<PathBuf> = enabled
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap())
        .collect();
    let digests: Vec<u64> = canon
        .iter()
        .map(|p| hrw::digest(&p.to_string_lossy()))
        .collect();
    let mut seen: HashMap<String, Vec<usize>> = HashMap::new();
    let mut counts = vec![0; enabled.len()];
    for (i, mp) in enabled.iter().enumerate() {
        for n in objects_on(mp, &hashes) {
            seen.entry(n).or_default().push(i);
            counts[i] += 1;
        }
    }
    for mp in others {
        let left = objects_on(mp, &hashes);
        assert!(
            left.is_empty(),
            "{} still holds {} objects, e.g. {:?}",
            mp.display(),
            left.len(),
            &left[..left.len().min(3)]
        );
    }
    for n in names {
        let want = hrw::pick(
            hrw::digest(&format!("{}/{n}", bck.uname())),
            digests.iter().copied(),
        )
        .unwrap();
        let at = seen.get(n).cloned().unwrap_or_default();
        assert_eq!(
            at,
            vec![want],
            "{n}: data files on mountpaths {at:?}, HRW says {want}"
        );
    }
    assert_eq!(seen.len(), names.len(), "data files of unexpected objects");
    counts
}

async fn mountpaths_of(c: &Cluster, url: &str) -> serde_json::Value {
    c.http
        .get(format!("{url}/v1/daemon?what=mountpaths"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn list_of(v: &serde_json::Value, key: &str) -> Vec<PathBuf> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| PathBuf::from(p.as_str().unwrap()))
        .collect()
}

/// Runs `grist storage mountpath <verb> TARGET PATH --wait --json` (blocking, on a blocking
/// thread so the load keeps running) and returns the resilver job's final status.
async fn mountpath(c: &Cluster, verb: &str, target: &str, path: &Path) -> JobStatus {
    let bin = gristmill_tests::gristd_bin().with_file_name("grist");
    let args = [
        "--json".to_owned(),
        "storage".into(),
        "mountpath".into(),
        verb.into(),
        target.into(),
        path.display().to_string(),
        "--wait".into(),
        "--timeout".into(),
        "3m".into(),
    ];
    let endpoint = c.endpoint.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&bin)
            .args(&args)
            .env("GRIST_ENDPOINT", endpoint)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "grist storage mountpath {verb} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("job status {stdout}: {e}"))
}

fn moved(s: &JobStatus) -> u64 {
    s.objects - s.skipped - s.errors
}

/// The job's run time in seconds (for the printed figures only).
fn secs(s: &JobStatus) -> f64 {
    (s.end_ns - s.start_ns) as f64 / 1e9
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mountpath_attach_detach_disable_enable_under_load() {
    let mut c = Cluster::start(1, 2).await.unwrap();
    c.create_bucket(BUCKET).await.unwrap();
    let smap = c.smap().await.unwrap();
    let (tid, tnode) = smap.tmap.iter().next().unwrap();
    let (tid, turl) = (tid.clone(), tnode.url().to_owned());

    // N objects, 16 PUTs at a time.
    let puts = futures::stream::iter(0..N).map(|i| {
        let c = &c;
        async move {
            let r = put(c, BUCKET, &name_of(i), content(i as u64, size_of(i))).await;
            assert!(r.status().is_success(), "PUT {i}: {}", r.status());
        }
    });
    futures::StreamExt::buffer_unordered(puts, 16)
        .collect::<Vec<()>>()
        .await;
    for k in 0..OVERWRITTEN {
        assert!(
            put(&c, BUCKET, &format!("ow/{k}"), overwrite_body(k, 0))
                .await
                .status()
                .is_success()
        );
    }
    let mut names: BTreeSet<String> = (0..N).map(name_of).collect();
    names.extend((0..OVERWRITTEN).map(|k| format!("ow/{k}")));
    let mps = c.mountpaths[0].clone();
    check_placement(&mps, &[], &names);
    let mut last: BTreeMap<String, Vec<u8>> = BTreeMap::new();

    // Attach a third mountpath under GET load and concurrent PUTs.
    let mp2 = mps[0].parent().unwrap().join("mp2");
    let load = Load::start(&c, 8);
    let writer = Writer::start(&c, "attach");
    let status = mountpath(&c, "attach", &tid, &mp2).await;
    let acked = writer.finish().await;
    let (gets, failed) = load.finish().await;
    assert!(
        failed.is_empty(),
        "{} of {gets} GETs failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert_eq!(status.errors, 0, "{status:?}");
    names.extend(acked.keys().cloned());
    last.extend(acked);
    let all = [mps[0].clone(), mps[1].clone(), mp2.clone()];
    let counts = check_placement(&all, &[], &names);
    let ratio = counts[2] as f64 / names.len() as f64;
    println!(
        "attach: resilver moved {} of {} objects ({:.3}, expected ~1/3) in {:.2} s; per mountpath {counts:?}; {gets} GETs, 0 failed",
        moved(&status),
        N + OVERWRITTEN,
        moved(&status) as f64 / (N + OVERWRITTEN) as f64,
        secs(&status)
    );
    assert!(
        (0.25..0.42).contains(&ratio),
        "new mountpath holds {ratio:.3} of the objects"
    );
    assert_eq!(
        list_all(&c, BUCKET, 1000)
            .await
            .into_iter()
            .collect::<BTreeSet<_>>(),
        names
    );
    // The resilver shows up in `grist job show` like any job.
    let jobs = c.grist_ok(&["job", "show", "resilver"]);
    assert!(jobs.contains(&status.id), "{jobs}");

    // Detach mountpath 0 under load: its objects move, none stays, it leaves the set.
    let load = Load::start(&c, 8);
    let writer = Writer::start(&c, "detach");
    let status = mountpath(&c, "detach", &tid, &mps[0]).await;
    let acked = writer.finish().await;
    let (gets, failed) = load.finish().await;
    assert!(
        failed.is_empty(),
        "{} of {gets} GETs failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert_eq!(status.errors, 0, "{status:?}");
    names.extend(acked.keys().cloned());
    last.extend(acked);
    let enabled = [mps[1].clone(), mp2.clone()];
    check_placement(&enabled, &[mps[0].clone()], &names);
    println!(
        "detach: resilver moved {} objects in {:.2} s; {gets} GETs, 0 failed",
        moved(&status),
        secs(&status)
    );
    let v = mountpaths_of(&c, &turl).await;
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap();
    assert_eq!(
        list_of(&v, "available"),
        vec![canon(&mps[1]), canon(&mp2)],
        "{v}"
    );
    assert!(
        list_of(&v, "waiting_dd").is_empty() && list_of(&v, "disabled").is_empty(),
        "{v}"
    );

    // Disable mountpath 1: its objects move to mp2; it stays listed as disabled. Enable it:
    // they come back.
    let load = Load::start(&c, 4);
    let status = mountpath(&c, "disable", &tid, &mps[1]).await;
    assert_eq!(status.errors, 0, "{status:?}");
    check_placement(
        std::slice::from_ref(&mp2),
        &[mps[1].clone(), mps[0].clone()],
        &names,
    );
    let v = mountpaths_of(&c, &turl).await;
    assert_eq!(list_of(&v, "disabled"), vec![canon(&mps[1])], "{v}");
    // The last enabled mountpath cannot go.
    let refused = c.grist(&[
        "storage",
        "mountpath",
        "disable",
        &tid,
        &mp2.display().to_string(),
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("last enabled mountpath"));
    let status = mountpath(&c, "enable", &tid, &mps[1]).await;
    assert_eq!(status.errors, 0, "{status:?}");
    println!(
        "disable/enable: enable moved {} objects back in {:.2} s",
        moved(&status),
        secs(&status)
    );
    let (gets, failed) = load.finish().await;
    assert!(
        failed.is_empty(),
        "{} of {gets} GETs failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    check_placement(&enabled, &[mps[0].clone()], &names);

    // Every acknowledged PUT is there with its last content.
    for (name, body) in &last {
        let r = get(&c, BUCKET, name).await;
        assert!(r.status().is_success(), "{name}: {}", r.status());
        assert_eq!(&r.bytes().await.unwrap()[..], &body[..], "{name}");
    }

    // Restart: the set survives (mountpath 0 stays detached although still given by
    // --mountpath), and every object is still served.
    c.targets[0].stop();
    c.restart_target(0).await.unwrap();
    let smap = c.smap().await.unwrap();
    let turl = smap.tmap[&tid].url().to_owned();
    let v = mountpaths_of(&c, &turl).await;
    assert_eq!(
        list_of(&v, "available"),
        vec![canon(&mps[1]), canon(&mp2)],
        "{v}"
    );
    assert_eq!(v["resilver_pending"], false, "{v}");
    check_placement(&enabled, &[mps[0].clone()], &names);
    for i in (0..N).step_by(7) {
        let r = get(&c, BUCKET, &name_of(i)).await;
        assert!(r.status().is_success());
        assert_eq!(
            r.bytes().await.unwrap()[..],
            content(i as u64, size_of(i))[..]
        );
    }
    assert_eq!(
        list_all(&c, BUCKET, 1000)
            .await
            .into_iter()
            .collect::<BTreeSet<_>>(),
        names
    );
    let shown = c.grist_ok(&["storage", "mountpath", "show", &tid]);
    assert!(
        shown.contains(&mp2.display().to_string()) || shown.contains("mp2"),
        "{shown}"
    );

    // Bad input: clear errors.
    let bad = c
        .http
        .put(format!("{turl}/v1/daemon/mountpaths"))
        .json(&serde_json::json!({"action": "explode-mp", "value": "/tmp/x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let unknown = c
        .http
        .put(format!("{turl}/v1/daemon/mountpaths"))
        .json(&serde_json::json!({"action": "detach-mp", "value": "/nonexistent/mp"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let relative = c
        .http
        .put(format!("{turl}/v1/daemon/mountpaths"))
        .json(&serde_json::json!({"action": "attach-mp", "value": "relative/dir"}))
        .send()
        .await
        .unwrap();
    assert_eq!(relative.status(), 400);
}

use futures::StreamExt as _;

/// kill -9 of the target right after an attach (the resilver is running or about to), then a
/// restart: the pending resilver runs again and every object ends on its HRW mountpath.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resilver_interrupted_by_kill9_resumes_after_restart() {
    let mut c = Cluster::start(1, 2).await.unwrap();
    c.create_bucket(BUCKET).await.unwrap();
    let smap = c.smap().await.unwrap();
    let turl = smap.tmap.values().next().unwrap().url().to_owned();
    let tid = smap.tmap.keys().next().unwrap().clone();
    let puts = futures::stream::iter(0..N).map(|i| {
        let c = &c;
        async move {
            let r = put(c, BUCKET, &name_of(i), content(i as u64, size_of(i))).await;
            assert!(r.status().is_success(), "PUT {i}: {}", r.status());
        }
    });
    puts.buffer_unordered(16).collect::<Vec<()>>().await;
    let names: BTreeSet<String> = (0..N).map(name_of).collect();
    let mps = c.mountpaths[0].clone();
    let mp2 = mps[0].parent().unwrap().join("mp2");
    let r = c
        .http
        .put(format!("{turl}/v1/daemon/mountpaths"))
        .json(&serde_json::json!({"action": "attach-mp", "value": mp2}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let job: serde_json::Value = r.json().await.unwrap();
    c.targets[0].kill9();
    c.restart_target(0).await.unwrap();
    let smap = c.smap().await.unwrap();
    let turl = smap.tmap[&tid].url().to_owned();
    // Wait (bounded) until the resumed resilver settled the set.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let resumed = loop {
        let v = mountpaths_of(&c, &turl).await;
        if v["resilver_pending"] == false {
            break v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "resilver still pending: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(list_of(&resumed, "available").len(), 3, "{resumed}");
    // The resumed resilver (same change, same job id) did the rest.
    let snaps: Vec<gristmill_core::job::JobSnap> = c
        .http
        .get(format!("{turl}/v1/jobs"))
        .query(&[("id", job["job"].as_str().unwrap())])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let after = snaps
        .first()
        .map_or(0, |s| s.objects - s.skipped - s.errors);
    let all = [mps[0].clone(), mps[1].clone(), mp2.clone()];
    let counts = check_placement(&all, &[], &names);
    println!(
        "kill -9 right after attach: the resumed resilver moved {after} objects after the restart; every object is on its HRW mountpath, per mountpath {counts:?}"
    );
    for i in (0..N).step_by(5) {
        let r = get(&c, BUCKET, &name_of(i)).await;
        assert!(r.status().is_success());
        assert_eq!(
            r.bytes().await.unwrap()[..],
            content(i as u64, size_of(i))[..]
        );
    }
    assert_eq!(
        list_all(&c, BUCKET, 1000)
            .await
            .into_iter()
            .collect::<BTreeSet<_>>(),
        names
    );
}
