//! Placement at scale: capacity weights, and a 20-target cluster where adding one target moves
//! only its share of the objects.

use std::collections::BTreeMap;

use gristmill_core::ClusterMap;
use gristmill_tests::Cluster;

use super::elastic::{fill, name, rebalanced};

/// Which target holds each object of `bucket`, asking every target of `smap`.
async fn holders(c: &Cluster, smap: &ClusterMap, bucket: &str) -> BTreeMap<String, Vec<String>> {
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, t) in &smap.tmap {
        for n in c.names_on(t.url(), bucket).await {
            held.entry(n).or_default().push(id.clone());
        }
    }
    held
}

/// Every object is held once, by the target the map names (the same weighted rendezvous on
/// the test's side as on the servers').
fn assert_placed_by(smap: &ClusterMap, bucket: &str, held: &BTreeMap<String, Vec<String>>) {
    let bck = gristmill_core::Bck::new(bucket, gristmill_core::Provider::Ais).unwrap();
    for (n, ids) in held {
        let owner = smap.owner(&bck.object_uname(n)).unwrap();
        assert_eq!(
            ids,
            &vec![owner.daemon_id.clone()],
            "{n}: held by {ids:?}, owner {}",
            owner.daemon_id
        );
    }
}

/// Targets started with `--weight` (here `GRISTD_WEIGHT` 100, 100, 100 and 300) state it in
/// the map, and own objects in proportion: the heavy one about half of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn weighted_targets_own_shares_in_proportion() {
    const N: usize = 1200;
    let weights = [100u32, 100, 100, 300];
    let c = Cluster::start_each(4, 1, &[], |i| {
        vec![("GRISTD_WEIGHT".to_owned(), weights[i].to_string())]
    })
    .await
    .unwrap();
    let smap = c.wait_for_targets(4).await.unwrap();
    let mut stated: Vec<u32> = smap.tmap.values().map(|t| t.weight).collect();
    stated.sort();
    assert_eq!(stated, vec![100, 100, 100, 300], "weights in the map");
    fill(&c, "wt", N, 1).await;
    let held = holders(&c, &smap, "wt").await;
    assert_eq!(held.len(), N);
    assert_placed_by(&smap, "wt", &held);
    let heavy = smap.tmap.values().find(|t| t.weight == 300).unwrap();
    let on_heavy = held
        .values()
        .filter(|ids| ids[0] == heavy.daemon_id)
        .count();
    // Expected N/2 = 600; binomial sd ~17: a wide margin that unweighted HRW (N/4) fails.
    assert!(
        (510..=690).contains(&on_heavy),
        "the weight-300 target holds {on_heavy} of {N}"
    );
}

/// Twenty targets, then one more: the objects that move are about 1/N of them (between 0.5/N
/// and 2/N), all to the new target, and every object ends on its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adding_one_target_to_twenty_moves_only_its_share() {
    const N: usize = 2000;
    let mut c = Cluster::start(20, 1).await.unwrap();
    c.wait_for_targets(20).await.unwrap();
    fill(&c, "twenty", N, 1).await;
    let before_map = c.smap().await.unwrap();
    let before = holders(&c, &before_map, "twenty").await;
    assert_eq!(before.len(), N);
    assert_placed_by(&before_map, "twenty", &before);

    // A listing in pages of 100 names: each of the 20 targets is asked for a little more than
    // its share of a page, not for a whole page (that was 20 names fetched per name listed).
    let fetched = || super::shards::metric(&c, &c.endpoint, "grist_list_target_entries_total");
    let fetched_before = fetched().await;
    let mut listed = Vec::new();
    let mut token = String::new();
    loop {
        let body = serde_json::json!({"action": "list", "value": {
            "pagesize": 100, "continuation_token": token}});
        let r = c
            .http
            .get(c.url("/v1/buckets/twenty"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        let page: gristmill_core::api::ListObjectsPage = r.json().await.unwrap();
        assert!(
            page.entries.len() == 100 || page.continuation_token.is_empty(),
            "a page short of 100 names before the end: {}",
            page.entries.len()
        );
        listed.extend(page.entries.into_iter().map(|e| e.name));
        if page.continuation_token.is_empty() {
            break;
        }
        token = page.continuation_token;
    }
    let all: Vec<String> = (0..N).map(name).collect();
    assert_eq!(listed, all, "every name once, in order");
    let per_name = (fetched().await - fetched_before) as f64 / N as f64;
    println!("scale: listing over 20 targets fetched {per_name:.2} names per name listed");
    assert!(
        per_name < 5.0,
        "{per_name:.2} names fetched from targets per name listed"
    );

    c.add_target().await.unwrap();
    let (after_map, _) = rebalanced(&c).await;
    assert_eq!(after_map.tmap.len(), 21);
    let after = holders(&c, &after_map, "twenty").await;
    assert_eq!(after.len(), N, "every object still held");
    assert_placed_by(&after_map, "twenty", &after);
    let new_id = after_map
        .tmap
        .keys()
        .find(|id| !before_map.tmap.contains_key(*id))
        .unwrap();
    let moved: Vec<&String> = (0..N)
        .map(name)
        .filter(|n| before[n] != after[n])
        .map(|n| after.get_key_value(&n).unwrap().0)
        .collect();
    assert!(
        moved.iter().all(|n| &after[*n][0] == new_id),
        "objects moved between old targets"
    );
    let per = 1.0 / 21.0;
    let fraction = moved.len() as f64 / N as f64;
    println!(
        "scale: adding the 21st target moved {} of {N} objects ({fraction:.4}; 1/N = {per:.4})",
        moved.len()
    );
    assert!(
        (0.5 * per..=2.0 * per).contains(&fraction),
        "moved {fraction:.4} of the objects, not within [{:.4}, {:.4}]",
        0.5 * per,
        2.0 * per
    );
}

/// A target that comes back at once (killed and started before anyone marked it) with another
/// weight changes the map, and the rebalance moves what changed owner: every object ends on
/// the owner of the new map (a weight-only change used to look like no change of placement).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_back_with_another_weight_moves_what_changed_owner() {
    const N: usize = 600;
    let mut c = Cluster::start(3, 1).await.unwrap();
    c.wait_for_targets(3).await.unwrap();
    fill(&c, "rw", N, 1).await;
    let before = c.smap().await.unwrap();
    assert_placed_by(&before, "rw", &holders(&c, &before, "rw").await);
    let id = c.target_id(0).await.unwrap();
    c.targets[0].kill9();
    c.targets[0]
        .env
        .push(("GRISTD_WEIGHT".to_owned(), "400".to_owned()));
    c.targets[0].start().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let smap = c.smap().await.unwrap();
        if smap
            .tmap
            .get(&id)
            .is_some_and(|t| t.weight == 400 && !t.is_inactive())
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new weight never reached the map"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (after, _) = rebalanced(&c).await;
    let held = holders(&c, &after, "rw").await;
    assert_eq!(held.len(), N, "every object still held");
    assert_placed_by(&after, "rw", &held);
    let on_heavy = held.values().filter(|ids| ids[0] == id).count();
    // Weight 400 among two 100s: two thirds (400 expected); it held about a third before.
    assert!((340..=460).contains(&on_heavy), "{on_heavy} of {N}");
}

/// A target killed halfway through its rebalance resumes when it is back: what it delivered
/// before the kill is not sent again (counted by the receiver's
/// `grist_transfers_received_total` and the job's `already_moved`), at most the batch in
/// flight at the kill travels twice, and every object ends on its owner, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rebalance_killed_halfway_resumes_without_sending_again() {
    rebalance_killed_halfway(false).await;
}

/// The same, with the receiver wiped while the sender was down (a disk replaced, a restore
/// from an older state: same id, same placement): the log's deliveries are confirmed with
/// the owner, found missing and sent — nothing is dropped that the owner does not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resumed_rebalance_sends_what_a_wiped_owner_lost() {
    rebalance_killed_halfway(true).await;
}

async fn rebalance_killed_halfway(wipe_receiver: bool) {
    const N: usize = 600;
    const SIZE: usize = 32 * 1024;
    // 2 MiB/s: the ~300 objects of 32 KiB that move take ~5 s, so the kill lands mid-way.
    let mut c = Cluster::start_each(1, 1, &[], |_| {
        vec![("GRISTD_REBALANCE_BANDWIDTH".into(), "2MiB".into())]
    })
    .await
    .unwrap();
    c.wait_for_targets(1).await.unwrap();
    fill(&c, "resume", N, SIZE).await;
    c.add_target().await.unwrap();
    let smap = c.wait_for_targets(2).await.unwrap();
    let new_id = c.target_id(1).await.unwrap();
    // Counted by the receiver (the sender's counters die with it).
    let http = c.http.clone();
    let received = |url: String| {
        let http = http.clone();
        async move {
            let text = http
                .get(format!("{url}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            text.lines()
                .filter(|l| l.starts_with("grist_transfers_received_total{kind=\"rebalance\"}"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        }
    };
    let receiver = smap.tmap[&new_id].url().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while received(receiver.clone()).await < 100 {
        assert!(
            std::time::Instant::now() < deadline,
            "the rebalance never got going"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    c.targets[0].kill9();
    let before_kill = received(receiver.clone()).await;
    if wipe_receiver {
        c.targets[1].kill9();
        std::fs::remove_dir_all(&c.mountpaths[1][0]).unwrap();
        c.restart_target(1).await.unwrap();
    }

    let after_map = c.restart_target(0).await.unwrap();
    let receiver = after_map.tmap[&new_id].url().to_owned();
    // The restarted target's own share of the job (the receiver, whose placement did not
    // change, runs none: the proxy's aggregate waits 30 s for it).
    let old_id = c.target_id(0).await.unwrap();
    let job = loop {
        let r = c
            .http
            .get(c.url(&format!("/v1/jobs/rb{}", after_map.version)))
            .send()
            .await
            .unwrap();
        if r.status().is_success() {
            let j: gristmill_core::job::JobStatus = r.json().await.unwrap();
            if j.targets
                .iter()
                .any(|s| s.node == old_id && s.state == gristmill_core::job::JobState::Finished)
            {
                break j;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the resumed rebalance did not finish"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let held = holders(&c, &after_map, "resume").await;
    assert_eq!(held.len(), N, "every object still held");
    assert_placed_by(&after_map, "resume", &held);
    let moved = held.values().filter(|ids| ids[0] == new_id).count() as u64;
    let total = received(receiver).await;
    let already = job.counters.get("already_moved").copied().unwrap_or(0);
    println!(
        "resume (receiver wiped: {wipe_receiver}): {moved} objects moved; {before_kill} received before the kill, {total} after it{}; resumed job {:?}",
        if wipe_receiver { "" } else { " in all" },
        job.counters
    );
    assert!(
        before_kill < moved,
        "the kill came after the rebalance ({before_kill} of {moved})"
    );
    if wipe_receiver {
        assert_eq!(already, 0, "deliveries to the wiped owner counted as done");
        assert!(
            total >= moved,
            "the wiped owner got {total} of the {moved} it owns"
        );
    } else {
        assert!(
            total <= moved + 32,
            "{total} transfers for {moved} objects: the resumed run sent again what was delivered"
        );
        assert!(
            already + 32 >= before_kill,
            "the resumed run counted {already} already moved of {before_kill} delivered"
        );
    }
    for i in 0..N {
        let r = c
            .http
            .get(c.url(&format!("/v1/objects/resume/{}", name(i))))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{}", name(i));
        let body = r.bytes().await.unwrap();
        assert!(
            body == gristmill_tests::content(i as u64, SIZE),
            "{}: wrong bytes",
            name(i)
        );
    }
}
