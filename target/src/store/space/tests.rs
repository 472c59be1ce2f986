use super::*;
use crate::store::index::IndexOp;
use crate::store::meta::ObjectMeta;
use bytes::Bytes;
use gristmill_core::Provider;

fn body(len: usize) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + use<> {
    futures::stream::iter([Ok(Bytes::from(vec![7u8; len]))])
}

fn bmd_with(bck: &Bck) -> BucketMetadata {
    let mut bmd = BucketMetadata {
        version: 1,
        ..Default::default()
    };
    bmd.buckets.insert(
        bck.uname(),
        gristmill_core::BucketRecord {
            bck: bck.clone(),
            props: Default::default(),
        },
    );
    bmd
}

/// A pass evicts the least recently read objects by the index's access order and reads about
/// what it evicts: with 300 cached objects read in a shuffled order and a cache limit 10 over
/// its low mark, exactly the 10 read longest ago go, and the pass reads one page of the order,
/// not the records (the native bucket's records are not in the order at all).
#[tokio::test]
async fn a_pass_evicts_the_least_recently_read_by_the_access_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let cached = Bck::new("remote", Provider::Aws).unwrap();
    let native = Bck::new("native", Provider::Ais).unwrap();
    let names: Vec<String> = (0..300).map(|i| format!("o{i:03}")).collect();
    for name in &names {
        store
            .put(&cached, name, body(100), Default::default())
            .await
            .unwrap();
    }
    for i in 0..50 {
        store
            .put(&native, &format!("n{i}"), body(100), Default::default())
            .await
            .unwrap();
    }
    // Read in an order unlike the names' (i * 7 mod 300): the object at position p of the
    // reads was read at base + p.
    let base = now_ns() + 1;
    let order: Vec<&String> = (0..300).map(|i| &names[(i * 7) % 300]).collect();
    let touches = order
        .iter()
        .enumerate()
        .map(|(p, n)| (cached.uname(), (*n).clone(), base + p as i64))
        .collect();
    let index = store.mountpaths()[0].index.clone();
    index.apply(IndexOp::Touch(touches)).await.unwrap();
    let entries = index.by_atime_entries().unwrap();
    assert_eq!(entries.len(), 300, "only the cached bucket is ordered");
    let by_order: Vec<&str> = entries.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(
        by_order,
        order.iter().map(|n| n.as_str()).collect::<Vec<_>>()
    );

    // Limit 29,592 bytes: 30,000 cached is over 99 % of it; 98 % is 29,000, so 1,000 bytes
    // (10 objects) must go. Marks this high keep the test's filesystem out of it.
    let config = SpaceConfig {
        high_wm: 99,
        low_wm: 98,
        out_of_space: 100,
        dont_evict_time: Duration::ZERO,
        max_cache_bytes: 29_592,
        ..Default::default()
    };
    let space = Space::new(SharedSpaceConfig::new(config), store.clone());
    // The reads are stamped just after now: let the pass's cutoff (now, with a
    // dont_evict_time of 0) pass them.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let done = space.evict(&bmd_with(&cached), false, &[]).await;
    assert_eq!((done.objects, done.bytes), (10, 1000));
    assert!(
        done.examined <= 256,
        "read {} entries of the order to evict 10",
        done.examined
    );
    for (p, name) in order.iter().enumerate() {
        let held = index.get(&cached.uname(), name).unwrap().is_some();
        assert_eq!(held, p >= 10, "{name} read at position {p}");
    }
    let left: Vec<String> = index
        .by_atime_entries()
        .unwrap()
        .into_iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(
        left,
        order[10..].iter().map(|n| (*n).clone()).collect::<Vec<_>>()
    );
}

/// The access order holds exactly the cached buckets' records, whatever changed them: puts,
/// overwrites, reads, deletes, tombstones, a resilver's compare-and-swap, a dropped bucket —
/// and an index written before the order existed gets it when opened.
#[tokio::test]
async fn the_access_order_follows_every_change_of_a_record() {
    use crate::store::index::BuryGen;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mp0");
    let store = Store::open(std::slice::from_ref(&path)).await.unwrap();
    let a = Bck::new("a", Provider::Aws).unwrap();
    let b = Bck::new("b", Provider::Ht).unwrap();
    let native = Bck::new("n", Provider::Ais).unwrap();
    for bck in [&a, &b, &native] {
        for i in 0..20 {
            store
                .put(bck, &format!("x{i}"), body(i), Default::default())
                .await
                .unwrap();
        }
    }
    let index = store.mountpaths()[0].index.clone();
    let expect = |index: &crate::store::index::ObjectIndex| {
        let mut records = Vec::new();
        index
            .for_each(|m| {
                if !m.bucket.starts_with("ais/@#") {
                    records.push((m.bucket, m.name, m.atime_ns, m.size));
                }
            })
            .unwrap();
        let mut entries = index.by_atime_entries().unwrap();
        records.sort();
        entries.sort();
        assert_eq!(entries, records);
        records.len()
    };
    assert_eq!(expect(&index), 40);
    store
        .put(&a, "x1", body(5), Default::default())
        .await
        .unwrap();
    store.touch(&a.uname(), "x2");
    store.touch(&b.uname(), "x3");
    store.flush_atimes().await.unwrap();
    store.delete(&a, "x4").await.unwrap();
    index
        .apply(IndexOp::Bury {
            bucket: b.uname(),
            name: "x5".into(),
            generation: BuryGen::Next { floor: 0 },
        })
        .await
        .unwrap();
    let mut moved = index.get(&a.uname(), "x6").unwrap().unwrap();
    let file = moved.file.clone();
    moved.size = 99;
    moved.atime_ns += 1;
    index
        .apply(IndexOp::PutIf {
            meta: moved,
            expect: Some(file),
        })
        .await
        .unwrap();
    assert_eq!(expect(&index), 38);
    store.drop_bucket(&b).await.unwrap();
    assert_eq!(expect(&index), 19);

    // An index from before the order: drop the order's table and its mark, then reopen.
    drop(index);
    drop(store);
    let v1 = redb::TableDefinition::<&[u8], u64>::new("by_atime");
    let facts = redb::TableDefinition::<&str, u64>::new("index_meta");
    without_the_order(&path, |_| {}).await;
    let store = Store::open(std::slice::from_ref(&path)).await.unwrap();
    assert_eq!(expect(&store.mountpaths()[0].index), 19);

    // An index of a binary whose order held sizes only (`by_atime`): the new order is built,
    // and the old one goes with its mark, so that binary would rebuild its own after a
    // downgrade.
    drop(store);
    without_the_order(&path, |tx| {
        tx.open_table(v1)
            .unwrap()
            .insert(b"x".as_slice(), 1)
            .unwrap();
        let mut marks = tx.open_table(facts).unwrap();
        marks.insert("by_atime", 1).unwrap();
        marks.insert("objects_len", 40).unwrap();
    })
    .await;
    let store = Store::open(std::slice::from_ref(&path)).await.unwrap();
    assert_eq!(expect(&store.mountpaths()[0].index), 19);
    drop(store);
    {
        let db = open_released(&path.join("index.redb")).await;
        let tx = db.begin_read().unwrap();
        assert!(tx.open_table(v1).is_err(), "the old order is gone");
        assert!(
            tx.open_table(facts)
                .unwrap()
                .get("by_atime")
                .unwrap()
                .is_none()
        );
    }
    let store = Store::open(std::slice::from_ref(&path)).await.unwrap();

    // A downgrade: a binary without the order deletes one record and stores two new ones
    // behind its back; the next open finds the records out of step and rebuilds the order.
    let some = store.mountpaths()[0]
        .index
        .get(&a.uname(), "x6")
        .unwrap()
        .unwrap();
    drop(store);
    let added: Vec<ObjectMeta> = ["new1", "new2"]
        .into_iter()
        .map(|name| {
            let mut meta = some.clone();
            meta.name = name.into();
            meta.atime_ns += 7;
            meta
        })
        .collect();
    change_records_raw(&path, &a.uname(), "x6", &added).await;
    let store = Store::open(std::slice::from_ref(&path)).await.unwrap();
    assert_eq!(expect(&store.mountpaths()[0].index), 20);

    // One removed behind the order's back and none added: the count is the same, so the
    // next open keeps the order with a stale entry; an eviction that picks it drops it (and
    // the data file it names, an orphan now), hiding nothing that exists.
    let x7 = store.mountpaths()[0]
        .index
        .get(&a.uname(), "x7")
        .unwrap()
        .unwrap();
    drop(store);
    let mut new3 = some.clone();
    new3.name = "new3".into();
    change_records_raw(&path, &a.uname(), "x7", &[new3]).await;
    let store = Store::open(&[path]).await.unwrap();
    let mp = store.mountpaths()[0].clone();
    let stale = |mp: &Arc<crate::store::Mountpath>| {
        mp.index
            .by_atime_entries()
            .unwrap()
            .iter()
            .any(|e| e.1 == "x7")
    };
    assert!(stale(&mp));
    let freed = store
        .evict_picked(&mp, &a.uname(), vec![("x7".into(), x7.atime_ns)])
        .await
        .unwrap();
    assert_eq!(freed.len(), 1);
    assert_eq!(freed[0].file, x7.file);
    assert!(!stale(&mp), "the stale entry went");
    assert!(mp.index.get(&a.uname(), "new3").unwrap().is_some());
}

/// Removes the access order and the index's facts from a dropped store's index (as written
/// before the order existed), then lets `then` add what an older binary would have left.
async fn without_the_order(
    mountpath: &std::path::Path,
    then: impl FnOnce(&redb::WriteTransaction),
) {
    let db = open_released(&mountpath.join("index.redb")).await;
    let tx = db.begin_write().unwrap();
    tx.delete_table(redb::TableDefinition::<&[u8], &[u8]>::new("by_atime_v2"))
        .unwrap();
    tx.delete_table(redb::TableDefinition::<&str, u64>::new("index_meta"))
        .unwrap();
    then(&tx);
    tx.commit().unwrap();
}

/// Changes records of a dropped store's index the way a binary without the access order
/// would: removes `removed` and stores `added`, in the records table only.
async fn change_records_raw(
    path: &std::path::Path,
    bucket: &str,
    removed: &str,
    added: &[ObjectMeta],
) {
    let db = open_released(&path.join("index.redb")).await;
    let tx = db.begin_write().unwrap();
    {
        let def = redb::TableDefinition::<&[u8], &[u8]>::new("objects");
        let mut objects = tx.open_table(def).unwrap();
        let key = crate::store::index::object_key(bucket, removed);
        objects.remove(key.as_slice()).unwrap();
        for meta in added {
            let key = crate::store::index::object_key(bucket, &meta.name);
            objects
                .insert(key.as_slice(), meta.encode().as_slice())
                .unwrap();
        }
    }
    tx.commit().unwrap();
}

/// The index file of a store just dropped, opened raw once its committer let go of it.
async fn open_released(file: &std::path::Path) -> redb::Database {
    for _ in 0..500 {
        match redb::Database::open(file) {
            Ok(db) => return db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("{} is still open", file.display());
}

/// An eviction removes a picked record only if it was not read or rewritten since the pass
/// picked it (its stored access time is still the picked one), and then its data file.
#[tokio::test]
async fn an_object_read_after_it_was_picked_is_not_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("remote", Provider::Aws).unwrap();
    let uname = bck.uname();
    for name in ["read", "kept"] {
        store
            .put(&bck, name, body(10), Default::default())
            .await
            .unwrap();
    }
    let mp = store.mountpaths()[0].clone();
    let picked: Vec<(String, i64)> = mp
        .index
        .oldest(&uname, None, 10)
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.atime_ns))
        .collect();
    assert_eq!(picked.len(), 2);
    // Read after the pick and flushed: its stored access time moved on.
    let read = mp.index.get(&uname, "read").unwrap().unwrap();
    mp.index
        .apply(IndexOp::Touch(vec![(
            uname.clone(),
            "read".into(),
            read.atime_ns + 1,
        )]))
        .await
        .unwrap();
    let kept = mp.index.get(&uname, "kept").unwrap().unwrap();
    let freed = store.evict_picked(&mp, &uname, picked).await.unwrap();
    assert_eq!(
        freed.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["kept"]
    );
    assert!(mp.index.get(&uname, "kept").unwrap().is_none());
    // The data file waits for the removal to be durable.
    assert!(mp.path.join(&kept.file).exists());
    let mut unlinked = crate::store::removal::Unlinked::default();
    for meta in freed {
        unlinked.add(0, &mp, meta.file);
    }
    assert!(unlinked.remove_files().await);
    assert!(!mp.path.join(&kept.file).exists(), "the data file went");
    assert!(mp.index.get(&uname, "read").unwrap().is_some());
    assert!(mp.path.join(&read.file).exists());
    assert_eq!(store.bucket_usage(&uname), 10);
}

/// Fills still streaming count against the quota: a second fill that would pass it together
/// with one admitted before is refused (nothing here may be evicted), and admitted again once
/// the first one's reservation ends.
#[tokio::test]
async fn fills_in_flight_count_against_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("remote", Provider::Aws).unwrap();
    let mut bmd = bmd_with(&bck);
    let rec = bmd.buckets.get_mut(&bck.uname()).unwrap();
    rec.props.lru.quota = 100;
    let config = SpaceConfig {
        high_wm: 99,
        low_wm: 98,
        out_of_space: 100,
        ..Default::default()
    };
    let space = Space::new(SharedSpaceConfig::new(config), store.clone());
    let first = space.admit_cached(&bmd, &bck, "a", 60).await.unwrap();
    let refused = space.admit_cached(&bmd, &bck, "b", 60).await.unwrap_err();
    assert_eq!(refused.kind, ErrorKind::InsufficientStorage, "{refused:?}");
    assert!(refused.message.contains("quota"), "{}", refused.message);
    let small = space.admit_cached(&bmd, &bck, "c", 40).await.unwrap();
    drop(first);
    drop(small);
    let again = space.admit_cached(&bmd, &bck, "b", 60).await.unwrap();
    drop(again);
}

/// An object cached again between its eviction and the removal of its evicted data file (which
/// waits for a durable commit) keeps its new data, also when both copies had their metadata
/// patched: eviction leaves no tombstone, so the refill's record generation repeats the evicted
/// one's, and a patch once named its file after that generation — the same path as the evicted
/// file's (a review found it).
#[tokio::test]
async fn an_object_cached_again_before_its_evicted_file_went_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("remote", Provider::Aws).unwrap();
    let uname = bck.uname();
    let lock = crate::store::index::LockCheck {
        now_ns: now_ns(),
        bypass_governance: false,
    };
    let tag: std::collections::BTreeMap<String, String> = [("k".into(), "v".into())].into();
    let fill_and_patch = |len: usize| {
        let (store, bck, tag) = (store.clone(), bck.clone(), tag.clone());
        async move {
            store
                .put(&bck, "x", body(len), Default::default())
                .await
                .unwrap();
            store
                .patch_custom(&bck, "x", &tag, &[], 0, lock)
                .await
                .unwrap()
        }
    };
    let old = fill_and_patch(10).await;
    let mp = store.mountpaths()[0].clone();
    let freed = store
        .evict_picked(&mp, &uname, vec![("x".into(), old.atime_ns)])
        .await
        .unwrap();
    assert_eq!(freed.len(), 1);
    let new = fill_and_patch(20).await;
    assert_ne!(new.file, old.file, "a refill has a path of its own");
    let mut unlinked = crate::store::removal::Unlinked::default();
    for meta in freed {
        unlinked.add(0, &mp, meta.file);
    }
    assert!(unlinked.remove_files().await);
    let got = store.open_object(&bck, "x").await.unwrap();
    assert_eq!(got.meta.size, 20);
    assert!(mp.path.join(&new.file).exists(), "the new data file stays");
    assert!(!mp.path.join(&old.file).exists(), "the evicted one went");
}

/// Evicted files of a pass whose future was dropped before it removed them (an inline pass
/// runs in a cold GET, whose client may go away) still go, in the background.
#[tokio::test]
async fn evicted_files_of_a_dropped_pass_still_go() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("remote", Provider::Aws).unwrap();
    store
        .put(&bck, "x", body(10), Default::default())
        .await
        .unwrap();
    let mp = store.mountpaths()[0].clone();
    let meta = mp.index.get(&bck.uname(), "x").unwrap().unwrap();
    let freed = store
        .evict_picked(&mp, &bck.uname(), vec![("x".into(), meta.atime_ns)])
        .await
        .unwrap();
    let mut unlinked = crate::store::removal::Unlinked::default();
    for m in freed {
        unlinked.add(0, &mp, m.file);
    }
    let file = mp.path.join(&meta.file);
    assert!(file.exists());
    drop(unlinked);
    for _ in 0..500 {
        if !file.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!file.exists(), "the dropped pass's file went");
}

/// An evicted record is hidden from every read of the index the moment its eviction commits —
/// lookups, listings, the key-order scan, the walk of every record — while its removal waits
/// for the sweep; a write under its name replaces it, an access time flushed for it does not
/// bring it back, and a restart sweeps what a pass left.
#[tokio::test]
async fn an_evicted_record_is_hidden_until_the_sweep_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mp0");
    let store = Store::open(std::slice::from_ref(&path)).await.unwrap();
    let bck = Bck::new("remote", Provider::Aws).unwrap();
    let uname = bck.uname();
    for name in ["a", "b", "c", "d"] {
        store
            .put(&bck, name, body(10), Default::default())
            .await
            .unwrap();
    }
    let mp = store.mountpaths()[0].clone();
    let atime = |name: &str| mp.index.get(&uname, name).unwrap().unwrap().atime_ns;
    let picked = vec![("a".to_owned(), atime("a")), ("b".to_owned(), atime("b"))];
    let freed = store.evict_picked(&mp, &uname, picked).await.unwrap();
    assert_eq!(freed.len(), 2);
    assert_eq!(mp.index.evicted_pending().unwrap(), 2);
    let visible = |mp: &Arc<crate::store::Mountpath>| {
        let listed: Vec<String> = mp
            .index
            .list(&uname, "", "", 100, false)
            .unwrap()
            .into_iter()
            .map(|m| m.name)
            .collect();
        let scanned: Vec<String> = mp
            .index
            .scan_after(None, 1)
            .unwrap()
            .into_iter()
            .chain(mp.index.scan_after(None, 100).unwrap())
            .map(|(_, m)| m.name)
            .collect();
        let mut walked = Vec::new();
        mp.index.for_each(|m| walked.push(m.name)).unwrap();
        assert_eq!(scanned[1..], listed[..], "scan");
        assert_eq!(walked, listed, "walk");
        listed
    };
    assert_eq!(visible(&mp), ["c", "d"]);
    assert!(mp.index.get(&uname, "a").unwrap().is_none());
    assert!(store.open_object(&bck, "a").await.is_err());
    assert_eq!(store.bucket_usage(&uname), 20);

    // A refill of `b` replaces its hidden record; an access time flushed for `a` finds none.
    store
        .put(&bck, "b", body(30), Default::default())
        .await
        .unwrap();
    store.touch(&uname, "a");
    mp.index
        .apply(IndexOp::Touch(vec![(uname.clone(), "a".into(), i64::MAX)]))
        .await
        .unwrap();
    assert_eq!(visible(&mp), ["b", "c", "d"]);
    assert_eq!(mp.index.evicted_pending().unwrap(), 1);
    assert_eq!(mp.index.get(&uname, "b").unwrap().unwrap().size, 30);
    // The order holds the live records only, the refill's included.
    let mut ordered: Vec<String> = mp
        .index
        .by_atime_entries()
        .unwrap()
        .into_iter()
        .map(|e| e.1)
        .collect();
    ordered.sort();
    assert_eq!(ordered, ["b", "c", "d"]);

    mp.index.start_sweep();
    for _ in 0..500 {
        if mp.index.evicted_pending().unwrap() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(mp.index.evicted_pending().unwrap(), 0);
    assert_eq!(visible(&mp), ["b", "c", "d"]);
    assert_eq!(mp.index.get(&uname, "b").unwrap().unwrap().size, 30);

    // Evicted, then the process stops before a sweep: the next open sweeps it.
    let freed = store
        .evict_picked(&mp, &uname, vec![("c".to_owned(), atime("c"))])
        .await
        .unwrap();
    assert_eq!(freed.len(), 1);
    mp.index.sync().await.unwrap();
    drop(mp);
    drop(store);
    open_released(&path.join("index.redb")).await;
    let store = Store::open(std::slice::from_ref(&path)).await.unwrap();
    let mp = store.mountpaths()[0].clone();
    assert_eq!(visible(&mp), ["b", "d"]);
    for _ in 0..500 {
        if mp.index.evicted_pending().unwrap() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(mp.index.evicted_pending().unwrap(), 0);
    assert_eq!(visible(&mp), ["b", "d"]);
}
