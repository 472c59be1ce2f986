//! Corrupt bytes are never served: bytes flipped in object files on disk (owners' and
//! replicas' copies) are detected by GET (small objects before any byte, streamed ones by a
//! broken body) and by the scrub job, quarantined and repaired from a replica or re-fetched
//! from the remote; a native object without a replica is an error, never its bytes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gristmill_core::job::{JobState, JobStatus};
use gristmill_core::{Bck, ClusterMap, Provider};
use gristmill_tests::{Cluster, content};

use super::backend::*;

const SMALL: usize = 4096;
/// Above the target's read-with-lookup limit (128 KiB): served by the streamed path.
pub(super) const LARGE: usize = 3 * 1024 * 1024 + 123;

/// Every data file under the `obj/` trees of one target's mountpaths.
pub(super) fn data_files(mountpaths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = mountpaths.iter().map(|m| m.join("obj")).collect();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Where each target keeps its data: daemon id → its mountpaths.
pub(super) async fn mountpaths_by_id(
    c: &Cluster,
    smap: &ClusterMap,
) -> Vec<(String, Vec<PathBuf>)> {
    let mut out = Vec::new();
    for node in smap.tmap.values() {
        let v: serde_json::Value = c
            .http
            .get(format!("{}/v1/daemon?what=mountpaths", node.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mps = v["available"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| PathBuf::from(p.as_str().unwrap()))
            .collect();
        out.push((node.daemon_id.clone(), mps));
    }
    out
}

/// The data files (per holder id) whose bytes are exactly `data`.
pub(super) fn copies_of(layout: &[(String, Vec<PathBuf>)], data: &[u8]) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for (id, mps) in layout {
        for f in data_files(mps) {
            if std::fs::metadata(&f).is_ok_and(|m| m.len() == data.len() as u64)
                && std::fs::read(&f).is_ok_and(|b| b == data)
            {
                out.push((id.clone(), f));
            }
        }
    }
    out
}

/// Flips one byte of a file in place.
pub(super) fn flip(file: &Path, at: usize) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at as u64).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, at as u64).unwrap();
    f.sync_all().unwrap();
}

/// The holder ids of an object in HRW order (owner first).
fn holders(smap: &ClusterMap, bucket: &str, name: &str, copies: usize) -> Vec<String> {
    let bck = Bck::new(bucket, Provider::Ais).unwrap();
    smap.owners(&bck.object_uname(name), copies)
        .into_iter()
        .map(|n| n.daemon_id.clone())
        .collect()
}

/// The copy of `data` held by `id`.
fn copy_on(layout: &[(String, Vec<PathBuf>)], id: &str, data: &[u8]) -> PathBuf {
    copies_of(layout, data)
        .into_iter()
        .find(|(h, _)| h == id)
        .unwrap_or_else(|| panic!("no copy on {id}"))
        .1
}

pub(super) async fn put(c: &Cluster, bucket: &str, name: &str, data: &[u8]) {
    let r = c
        .http
        .put(c.url(&format!("/v1/objects/{bucket}/{name}")))
        .body(data.to_vec())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "PUT {name}: {}", r.status());
}

/// A GET's outcome: the status and the whole body, or `None` when the body broke.
pub(super) async fn get(c: &Cluster, url: &str) -> (u16, Option<Vec<u8>>) {
    let r = c.http.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let mut body = r.bytes_stream();
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(b) => out.extend_from_slice(&b),
            Err(_) => return (status, None),
        }
    }
    (status, Some(out))
}

pub(super) fn obj(c: &Cluster, bucket: &str, name: &str) -> String {
    c.url(&format!("/v1/objects/{bucket}/{name}"))
}

/// GETs until a complete 200 arrives (a streamed GET that found corruption breaks; the
/// repair runs behind it). Every complete 200 must carry exactly `want`.
async fn get_until_good(c: &Cluster, url: &str, want: &[u8]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut broken = 0;
    loop {
        let (status, body) = get(c, url).await;
        match body {
            Some(b) if status == 200 => {
                assert!(b == want, "a complete 200 with wrong bytes from {url}");
                return broken;
            }
            _ => broken += 1,
        }
        assert!(
            Instant::now() < deadline,
            "{url}: no good GET after {broken} tries"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `grist scrub ARGS --wait --json` and returns the ended job and whether grist
/// succeeded.
async fn scrub(c: &Cluster, args: &[&str]) -> (JobStatus, bool) {
    let mut all = vec!["--json".to_owned(), "scrub".to_owned()];
    all.extend(args.iter().map(|a| a.to_string()));
    all.push("--wait".into());
    let endpoint = c.endpoint.clone();
    let out = tokio::task::spawn_blocking(move || {
        let bin = gristmill_tests::gristd_bin().with_file_name("grist");
        std::process::Command::new(bin)
            .args(&all)
            .env("GRIST_ENDPOINT", endpoint)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let status: JobStatus = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "grist scrub: bad JSON ({e}): {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(status.state, JobState::Finished, "{status:?}");
    (status, out.status.success())
}

/// Whether any target's index still lists the object.
async fn listed_anywhere(c: &Cluster, smap: &ClusterMap, bucket: &str, name: &str) -> bool {
    for node in smap.tmap.values() {
        if c.names_on(node.url(), bucket)
            .await
            .iter()
            .any(|n| n == name)
        {
            return true;
        }
    }
    false
}

fn counter(s: &JobStatus, k: &str) -> u64 {
    s.counters.get(k).copied().unwrap_or(0)
}

pub(super) async fn metric(c: &Cluster, smap: &ClusterMap, name: &str) -> u64 {
    let mut sum = 0.0;
    for node in smap.tmap.values() {
        let text = c
            .http
            .get(format!("{}/metrics", node.url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for line in text.lines().filter(|l| l.starts_with(name)) {
            sum += line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    sum as u64
}

/// (a) copies = 2: the owner's copy of a small and of a streamed object flipped → GETs
/// return exactly the right bytes (the streamed one may break once, never complete wrong),
/// and the owner's copy is repaired from the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn corrupt_owner_copy_is_never_served_and_is_repaired_from_the_replica() {
    let c = Cluster::start(4, 1).await.unwrap();
    c.create_bucket("scra").await.unwrap();
    c.grist_ok(&["bucket", "props", "set", "ais://scra", "mirror.copies=2"]);
    let small = content(1, SMALL);
    let large = content(2, LARGE);
    put(&c, "scra", "small", &small).await;
    put(&c, "scra", "large", &large).await;
    let smap = c.smap().await.unwrap();
    let layout = mountpaths_by_id(&c, &smap).await;
    for (name, data) in [("small", &small), ("large", &large)] {
        let hs = holders(&smap, "scra", name, 2);
        let found: Vec<String> = copies_of(&layout, data).into_iter().map(|c| c.0).collect();
        assert_eq!(found.len(), 2, "{name}: two copies");
        assert!(
            hs.iter().all(|h| found.contains(h)),
            "{name} on its HRW pair"
        );
        // Flip a byte in the owner's copy: near the end for the streamed one, so most of the
        // body would already be sent when the mismatch shows.
        let at = data.len() - 10;
        flip(&copy_on(&layout, &hs[0], data), at);
    }

    let (status, body) = get(&c, &obj(&c, "scra", "small")).await;
    assert_eq!(status, 200);
    assert!(body.unwrap() == small, "small: exactly the right bytes");
    let broken = get_until_good(&c, &obj(&c, "scra", "large"), &large).await;
    println!("scrub (a): streamed GET broke {broken} time(s) before the repaired copy was served");

    // The owner holds a good copy again (a fresh file), the corrupt one is in quarantine.
    for (name, data) in [("small", &small), ("large", &large)] {
        let hs = holders(&smap, "scra", name, 2);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found: Vec<String> = copies_of(&layout, data).into_iter().map(|c| c.0).collect();
            if found.len() == 2 && hs.iter().all(|h| found.contains(h)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: owner copy not repaired: {found:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let q = layout
            .iter()
            .find(|(id, _)| *id == hs[0])
            .map(|(_, mps)| mps[0].join("quarantine"))
            .unwrap();
        assert!(
            std::fs::read_dir(&q).is_ok_and(|d| d.count() >= 1),
            "{name}: quarantined file in {}",
            q.display()
        );
    }
    assert!(metric(&c, &smap, "grist_corrupt_objects_total").await >= 2);
    assert!(metric(&c, &smap, "grist_repaired_objects_total").await >= 2);
    // A scrub now finds nothing.
    let (s, ok) = scrub(&c, &["ais://scra"]).await;
    assert!(ok);
    assert_eq!(
        (counter(&s, "corrupt"), s.objects, s.errors),
        (0, 4, 0),
        "{s:?}"
    );
}

/// (b) copies = 1: a flipped object is an error — never its bytes — and scrub reports one
/// it finds as unrepairable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn corrupt_object_without_replica_is_an_error_and_scrub_reports_it() {
    let c = Cluster::start(3, 1).await.unwrap();
    c.create_bucket("scrb").await.unwrap();
    let small = content(3, SMALL);
    let large = content(4, LARGE);
    let other = content(5, SMALL);
    put(&c, "scrb", "small", &small).await;
    put(&c, "scrb", "large", &large).await;
    put(&c, "scrb", "other", &other).await;
    put(&c, "scrb", "fine", &content(6, SMALL)).await;
    let smap = c.smap().await.unwrap();
    let layout = mountpaths_by_id(&c, &smap).await;
    for data in [&small, &large, &other] {
        let copies = copies_of(&layout, data);
        assert_eq!(copies.len(), 1);
        flip(&copies[0].1, 100);
    }

    let r = c.http.get(obj(&c, "scrb", "small")).send().await.unwrap();
    assert_eq!(r.status(), 500);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("corrupt") && text.contains("no replica"),
        "clear error: {text}"
    );
    // The streamed one: a broken body or an error, never a complete 200.
    for _ in 0..3 {
        let (status, body) = get(&c, &obj(&c, "scrb", "large")).await;
        assert!(
            status != 200 || body.is_none(),
            "corrupt streamed object served complete"
        );
    }
    // Never served afterwards either.
    let (status, _) = get(&c, &obj(&c, "scrb", "small")).await;
    assert_ne!(status, 200);
    // The streamed one's quarantine runs behind its broken GET: once it lands, the object
    // is gone (404, its record dropped), and it never comes back as a complete 200 meanwhile.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get(&c, &obj(&c, "scrb", "large")).await;
        assert!(
            status != 200 || body.is_none(),
            "corrupt streamed object served"
        );
        if status == 404 && !listed_anywhere(&c, &smap, "scrb", "large").await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "large: not quarantined ({status})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (s, ok) = scrub(&c, &["ais://scrb"]).await;
    assert!(
        !ok,
        "grist scrub fails when an object could not be repaired"
    );
    assert_eq!(
        (
            counter(&s, "corrupt"),
            counter(&s, "unrepairable"),
            s.errors
        ),
        (1, 1, 1),
        "{s:?}"
    );
    let bad: Vec<&str> = s.error_samples().map(|e| e.name.as_str()).collect();
    assert_eq!(bad, ["other"]);
    assert!(
        s.error_samples().all(|e| e.error.contains("no replica")),
        "{s:?}"
    );
    let (status, _) = get(&c, &obj(&c, "scrb", "other")).await;
    assert_ne!(status, 200);
    let (status, body) = get(&c, &obj(&c, "scrb", "fine")).await;
    assert_eq!((status, body), (200, Some(content(6, SMALL))));

    // The property is honoured: with `checksum.validate_warm_get=false` a plain GET is not
    // verified (the opt-out), `?validate_checksum=true` still is.
    c.grist_ok(&[
        "bucket",
        "props",
        "set",
        "ais://scrb",
        "checksum.validate_warm_get=false",
    ]);
    let fine = content(6, SMALL);
    flip(&copies_of(&layout, &fine)[0].1, 7);
    let (status, body) = get(&c, &obj(&c, "scrb", "fine")).await;
    assert_eq!(status, 200);
    assert!(body.unwrap() != fine, "unverified GET with validation off");
    let r = c
        .http
        .get(format!(
            "{}?validate_checksum=true",
            obj(&c, "scrb", "fine")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
}

/// (c) copies = 2: several flipped copies, owners' and replicas' (one streamed) → scrub
/// reports exactly those and repairs them; `--no-repair` only reports; a second scrub finds
/// none and every copy is good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scrub_finds_and_repairs_exactly_the_flipped_copies() {
    let c = Cluster::start(4, 1).await.unwrap();
    c.create_bucket("scrc").await.unwrap();
    c.grist_ok(&["bucket", "props", "set", "ais://scrc", "mirror.copies=2"]);
    let mut objects: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| (format!("o-{i:02}"), content(100 + i, SMALL + i as usize)))
        .collect();
    objects.push(("big".into(), content(99, LARGE)));
    for (name, data) in &objects {
        put(&c, "scrc", name, data).await;
    }
    let smap = c.smap().await.unwrap();
    let layout = mountpaths_by_id(&c, &smap).await;
    // Owners' copies of o-00..o-02, replicas' copies of o-03, o-04 and big.
    let mut flipped = Vec::new();
    for (i, (name, data)) in objects.iter().enumerate() {
        let which = match (i, name.as_str()) {
            (0..=2, _) => 0,
            (3..=4, _) | (_, "big") => 1,
            _ => continue,
        };
        let hs = holders(&smap, "scrc", name, 2);
        flip(&copy_on(&layout, &hs[which], data), data.len() / 2);
        flipped.push(name.clone());
    }
    flipped.sort();

    // Report only: the same six, nothing changed.
    let (s, ok) = scrub(&c, &["ais://scrc", "--no-repair"]).await;
    assert!(!ok);
    let mut found: Vec<String> = s.error_samples().map(|e| e.name.clone()).collect();
    found.sort();
    assert_eq!(found, flipped);
    assert_eq!((counter(&s, "corrupt"), counter(&s, "repaired")), (6, 0));

    let t0 = Instant::now();
    let (s, ok) = scrub(&c, &["ais://scrc", "--progress"]).await;
    let took = t0.elapsed();
    assert!(ok, "{s:?}");
    assert_eq!(s.objects, 42, "every copy read: {s:?}");
    assert_eq!(
        (
            counter(&s, "corrupt"),
            counter(&s, "repaired"),
            counter(&s, "unrepairable"),
            s.errors
        ),
        (6, 6, 0, 0),
        "{s:?}"
    );
    println!(
        "scrub (c): {} copies, {} bytes read, 6 corrupt, 6 repaired in {took:?}",
        s.objects, s.bytes
    );

    let (s, ok) = scrub(&c, &["ais://scrc"]).await;
    assert!(ok);
    assert_eq!((counter(&s, "corrupt"), s.objects), (0, 42), "{s:?}");
    for (name, data) in &objects {
        let hs = holders(&smap, "scrc", name, 2);
        let mut found: Vec<String> = copies_of(&layout, data).into_iter().map(|c| c.0).collect();
        found.sort();
        let mut want = hs.clone();
        want.sort();
        assert_eq!(found, want, "{name}: two good copies on its HRW pair");
        let (status, body) = get(&c, &obj(&c, "scrc", name)).await;
        assert!(
            status == 200 && body.as_deref() == Some(&data[..]),
            "{name}"
        );
    }
}

/// (d) A cached s3:// object flipped on disk is re-fetched from the remote by GET, and by
/// scrub.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn corrupt_cached_object_is_refetched_from_the_remote() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-scrub").send().await.unwrap();
    let small = content(7, SMALL);
    let large = content(8, LARGE);
    put_direct(&s3, "gm-scrub", "small", small.clone()).await;
    put_direct(&s3, "gm-scrub", "large", large.clone()).await;
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster(&relay).await;
    for (name, data) in [("small", &small), ("large", &large)] {
        let (status, body) = get(&c, &obj_url(&c, "gm-scrub", name)).await;
        assert!(
            status == 200 && body.as_deref() == Some(&data[..]),
            "cold {name}"
        );
    }
    let smap = c.smap().await.unwrap();
    let layout = mountpaths_by_id(&c, &smap).await;
    let gets = |relay: &Relay| relay.object_gets.load(std::sync::atomic::Ordering::SeqCst);
    let before = gets(&relay);

    // GET: the small one is re-fetched before any byte; the streamed one may break once.
    for (name, data) in [("small", &small), ("large", &large)] {
        let copies = copies_of(&layout, data);
        assert_eq!(copies.len(), 1, "{name} cached once");
        flip(&copies[0].1, data.len() - 1);
        let broken = get_until_good(&c, &obj_url(&c, "gm-scrub", name), data).await;
        if name == "small" {
            assert_eq!(broken, 0);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while copies_of(&layout, data).len() != 1 {
            assert!(
                Instant::now() < deadline,
                "{name}: cached copy not restored"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(gets(&relay) >= before + 2, "re-fetched from the remote");

    // Scrub: flip both cached copies again; both re-fetched.
    for data in [&small, &large] {
        flip(&copies_of(&layout, data)[0].1, 0);
    }
    let (s, ok) = scrub(&c, &["s3://gm-scrub"]).await;
    assert!(ok, "{s:?}");
    assert_eq!(
        (counter(&s, "corrupt"), counter(&s, "repaired"), s.errors),
        (2, 2, 0),
        "{s:?}"
    );
    for (name, data) in [("small", &small), ("large", &large)] {
        assert_eq!(copies_of(&layout, data).len(), 1, "{name} re-cached");
        let (status, body) = get(&c, &obj_url(&c, "gm-scrub", name)).await;
        assert!(
            status == 200 && body.as_deref() == Some(&data[..]),
            "{name}"
        );
    }
}
