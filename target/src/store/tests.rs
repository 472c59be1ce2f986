use super::*;
use crate::store::index::{BuryGen, GenRule};
use gristmill_core::Provider;

/// The Object Lock check of a metadata change (no object here has a retention).
const NO_LOCK_BYPASS: index::LockCheck = index::LockCheck {
    now_ns: 0,
    bypass_governance: false,
};

fn body(s: &str) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + use<> {
    futures::stream::iter([Ok(Bytes::from(s.to_owned()))])
}

async fn read(store: &Store, bck: &Bck, name: &str) -> String {
    let open = store.open_object(bck, name).await.unwrap();
    String::from_utf8(open.data.unwrap().to_vec()).unwrap()
}

fn transfer(generation: u64) -> PutOptions {
    PutOptions {
        generation: GenRule::IfNewer(generation),
        ..Default::default()
    }
}

/// Generations carry the cluster epoch: whatever is written or deleted under a newer map
/// orders after every copy and tombstone made under an older one, however many writes those
/// counted — a target that was out of the map comes back with nothing that can win.
#[tokio::test]
async fn generations_of_a_newer_epoch_order_after_everything_older() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();
    store.set_epoch(7);
    let mut last = 0;
    for i in 0..3 {
        let m = store
            .put(&bck, "x", body("old"), Default::default())
            .await
            .unwrap();
        assert_eq!(m.generation, epoch_floor(7) + 1 + i);
        assert_eq!(epoch_of(m.generation), 7);
        last = m.generation;
    }
    // A copy this target would hold from before (a returning target's) is epoch 7; another
    // target that owns the object under map 9 writes it once, without having seen it.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = Store::open(&[elsewhere.path().join("mp0")]).await.unwrap();
    other.set_epoch(9);
    let newer = other
        .put(&bck, "x", body("new"), Default::default())
        .await
        .unwrap();
    assert!(newer.generation > last);
    assert_eq!(newer.version, "1");
    // Sent back here, it replaces the older copy; a later copy of the older epoch cannot win.
    let sent = store
        .put(&bck, "x", body("new"), transfer(newer.generation))
        .await
        .unwrap();
    assert_eq!(sent.generation, newer.generation);
    let late = store.put(&bck, "x", body("old"), transfer(last)).await;
    assert!(matches!(late, Err(StoreError::Stale { .. })));
    // A delete under map 9 of an object written 1000 times under map 8 buries every copy of
    // map 8, and the epoch never goes back.
    other.set_epoch(8);
    let (_, tomb) = other
        .bury(&bck, "y", BuryGen::Next { floor: 0 })
        .await
        .unwrap();
    assert_eq!(tomb, epoch_floor(9) + 1);
    store.set_epoch(8);
    let old_y = store
        .put(&bck, "y", body("y"), Default::default())
        .await
        .unwrap();
    assert!(old_y.generation < tomb);
    let (removed, _) = store.bury(&bck, "y", BuryGen::Exact(tomb)).await.unwrap();
    assert!(
        removed.is_some(),
        "the newer epoch's tombstone buries the copy"
    );
    assert_eq!(read(&store, &bck, "x").await, "new");
}

#[tokio::test]
async fn generations_order_copies_and_tombstones_stop_late_transfers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();

    // Writes on the owner count up; the native version counts the object's writes.
    let first = store.put(&bck, "x", body("one"), Default::default()).await;
    let first = first.unwrap();
    assert_eq!((first.generation, first.version.as_str()), (1, "1"));
    let floor = PutOptions {
        generation: GenRule::Next { floor: 41 },
        ..Default::default()
    };
    let second = store.put(&bck, "x", body("two"), floor).await.unwrap();
    assert_eq!((second.generation, second.version.as_str()), (42, "2"));

    // A transfer of an older (or the same) generation changes nothing...
    for g in [1, 42] {
        let late = store.put(&bck, "x", body("old"), transfer(g)).await;
        assert!(
            matches!(late, Err(StoreError::Stale { current: 42 })),
            "{g}"
        );
        assert_eq!(read(&store, &bck, "x").await, "two");
    }
    // ...a newer one replaces the copy and keeps its generation.
    let newer = store.put(&bck, "x", body("three"), transfer(50)).await;
    assert_eq!(newer.unwrap().generation, 50);
    assert_eq!(read(&store, &bck, "x").await, "three");

    // A delete leaves a tombstone one past the copy; a late transfer of any older
    // generation does not bring the object back.
    let (removed, tomb) = store
        .bury(&bck, "x", BuryGen::Next { floor: 0 })
        .await
        .unwrap();
    assert_eq!((removed.unwrap().generation, tomb), (50, 51));
    assert_eq!(store.tombstone(&bck, "x").unwrap(), 51);
    let late = store.put(&bck, "x", body("old"), transfer(50)).await;
    assert!(matches!(late, Err(StoreError::Stale { current: 51 })));
    assert!(store.head(&bck, "x").is_err(), "a deleted object came back");
    // No data file of the refused copies is left behind.
    let files = walk_files(&dir.path().join("mp0").join("obj"));
    assert!(files.is_empty(), "{files:?}");
    // A write after the delete orders after its tombstone.
    let again = store.put(&bck, "x", body("four"), Default::default()).await;
    assert_eq!(again.unwrap().generation, 52);

    // A delete sent with an older tombstone than the copy here keeps the copy.
    let (removed, tomb) = store.bury(&bck, "x", BuryGen::Exact(10)).await.unwrap();
    assert!(removed.is_none());
    assert_eq!(tomb, 51);
    assert_eq!(read(&store, &bck, "x").await, "four");
    let (removed, _) = store.bury(&bck, "x", BuryGen::Exact(60)).await.unwrap();
    assert!(removed.is_some());

    // Records from before generations existed order by their native version.
    let legacy = ObjectMeta {
        generation: 0,
        version: "7".into(),
        ..second.clone()
    };
    assert_eq!(legacy.effective_gen(), 7);

    // Old tombstones are purged; fresh ones stay.
    assert_eq!(
        store
            .purge_tombstones(std::time::Duration::from_secs(3600))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .purge_tombstones(std::time::Duration::ZERO)
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.tombstone(&bck, "x").unwrap(), 0);
}

fn walk_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn fan_out_directories_are_created_with_their_parents() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("obj").join("aa").join("bb");
    create_fan_out_dir(&deep, true).unwrap();
    assert!(deep.is_dir());
    create_fan_out_dir(&deep, true).unwrap();
}

#[tokio::test]
async fn usage_counts_objects_and_bytes_through_overwrites_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let mps = [dir.path().join("mp0"), dir.path().join("mp1")];
    let store = Store::open(&mps).await.unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();
    let uname = bck.uname();
    for (name, data) in [("a", "1"), ("b", "22"), ("c", "333")] {
        store
            .put(&bck, name, body(data), Default::default())
            .await
            .unwrap();
    }
    // An overwrite replaces: one object, the new size.
    store
        .put(&bck, "c", body("4444"), Default::default())
        .await
        .unwrap();
    let _ = store
        .bury(&bck, "a", BuryGen::Next { floor: 0 })
        .await
        .unwrap();
    assert_eq!(store.object_counts()[&uname], 2);
    assert_eq!(store.usage()[&uname], 6);
}

#[tokio::test]
async fn patching_metadata_keeps_the_data_under_a_new_name_and_generation() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();
    let before = store
        .put(&bck, "x", body("payload"), Default::default())
        .await
        .unwrap();
    let set = std::collections::BTreeMap::from([("x-amz-tagging".to_owned(), "a=1".to_owned())]);
    let after = store
        .patch_custom(&bck, "x", &set, &[], 10, NO_LOCK_BYPASS)
        .await
        .unwrap();
    assert_eq!(after.generation, 11, "above the floor, like a write");
    assert_eq!(after.custom["x-amz-tagging"], "a=1");
    assert_eq!(
        (after.size, after.mtime_ns, &after.cksum_value),
        (before.size, before.mtime_ns, &before.cksum_value)
    );
    // A new name: whoever still holds the old record (a mountpath move, a rebalance drop)
    // sees that the object changed.
    assert_ne!(after.file, before.file);
    assert!(!dir.path().join("mp0").join(&before.file).exists());
    assert_eq!(read(&store, &bck, "x").await, "payload");
    let dropped = store.delete_if_file(&bck, "x", &before.file).await.unwrap();
    assert!(!dropped, "a drop of the old file leaves the patched record");
    assert_eq!(
        store.head(&bck, "x").unwrap().custom["x-amz-tagging"],
        "a=1"
    );
    // Removing the key.
    let removed = store
        .patch_custom(
            &bck,
            "x",
            &Default::default(),
            &["x-amz-tagging".to_owned()],
            0,
            NO_LOCK_BYPASS,
        )
        .await
        .unwrap();
    assert!(!removed.custom.contains_key("x-amz-tagging"));
    assert_eq!(removed.generation, 12);
}

fn versioned(id: &str, marker: bool) -> PutOptions {
    let mut custom = std::collections::BTreeMap::new();
    custom.insert(VERSION_ID_KEY.to_owned(), id.to_owned());
    if marker {
        custom.insert(DELETE_MARKER_KEY.to_owned(), "true".to_owned());
    }
    PutOptions {
        custom,
        ..Default::default()
    }
}

/// A listing without versions returns each current record once, whatever the number of
/// version slots after it, with prefix, start-after and limit; with versions, every record.
#[tokio::test]
async fn plain_listings_skip_every_version_slot() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();
    for (name, versions) in [("x", 5), ("x-a", 1), ("x/y", 3), ("y", 4)] {
        for _ in 0..versions {
            store
                .put(&bck, name, body(name), versioned(MINT_VERSION_ID, false))
                .await
                .unwrap();
        }
    }
    let names = |v: Vec<ObjectMeta>| v.into_iter().map(|m| m.name).collect::<Vec<_>>();
    let list = |prefix: &'static str, after: &'static str, limit, versions| {
        let store = &store;
        let bck = &bck;
        async move {
            names(
                store
                    .list(bck, prefix, after, limit, versions)
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(list("", "", 100, false).await, ["x", "x-a", "x/y", "y"]);
    assert_eq!(list("", "", 2, false).await, ["x", "x-a"]);
    assert_eq!(list("", "x", 100, false).await, ["x-a", "x/y", "y"]);
    assert_eq!(list("x/", "", 100, false).await, ["x/y"]);
    // A name equal to the prefix (a directory marker) comes once: a page that ended with it
    // resumes after it (it used to come again, and again with a page size of 1).
    store
        .put(&bck, "x/", body("marker"), PutOptions::default())
        .await
        .unwrap();
    assert_eq!(list("x/", "", 1, false).await, ["x/"]);
    assert_eq!(list("x/", "x/", 1, false).await, ["x/y"]);
    assert_eq!(list("x/", "x/y", 1, false).await, Vec::<String>::new());
    let all = list("", "", 100, true).await;
    assert_eq!(all.len(), 5 + 1 + 1 + 3 + 4);
    assert_eq!(all.iter().filter(|n| !n.contains('\0')).count(), 5);
}

/// The store's versioning rules, and the generation a write takes once the delete marker's
/// tombstone is gone (purged, or left on a past owner): above every version, so no slot is
/// reused and no version overwritten.
#[tokio::test]
async fn versions_keep_their_slots_after_the_tombstone_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();
    let id = |m: &ObjectMeta| index::version_id(m).to_owned();
    let v1 = store
        .put(&bck, "x", body("one"), versioned(MINT_VERSION_ID, false))
        .await
        .unwrap();
    let v2 = store
        .put(&bck, "x", body("two"), versioned(MINT_VERSION_ID, false))
        .await
        .unwrap();
    assert_ne!(id(&v1), id(&v2));
    let marker = store
        .put(&bck, "x", empty_body(), versioned(MINT_VERSION_ID, true))
        .await
        .unwrap();
    assert!(
        marker.name.starts_with("x\0"),
        "the marker lives in its slot"
    );
    assert!(store.head(&bck, "x").is_err(), "no current version");
    assert_eq!(store.versions(&bck, "x").unwrap().len(), 3);

    // Every tombstone forgotten: only the versions remember the generations.
    store
        .purge_tombstones(std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(store.tombstone(&bck, "x").unwrap(), 0);
    let v3 = store
        .put(&bck, "x", body("three"), versioned(MINT_VERSION_ID, false))
        .await
        .unwrap();
    assert!(
        v3.generation > marker.generation,
        "{} > {}",
        v3.generation,
        marker.generation
    );
    let v4 = store
        .put(&bck, "x", body("four"), versioned(MINT_VERSION_ID, false))
        .await
        .unwrap();
    let ids: Vec<String> = store.versions(&bck, "x").unwrap().iter().map(id).collect();
    assert_eq!(
        ids,
        [id(&v3), id(&marker), id(&v2), id(&v1)],
        "newest first, none lost"
    );
    for (v, want) in [(&v1, "one"), (&v2, "two"), (&v3, "three"), (&v4, "four")] {
        let found = store.find_version(&bck, "x", &id(v)).unwrap();
        assert_eq!(read(&store, &bck, &found.name).await, want);
    }

    // A null write replaces only the null version; deleting the current for good brings
    // the one before back.
    let null = store
        .put(&bck, "x", body("null"), versioned(NULL_VERSION_ID, false))
        .await
        .unwrap();
    assert_eq!(id(&null), NULL_VERSION_ID);
    let (gone, promoted) = store
        .delete_version(&bck, "x", NULL_VERSION_ID, None)
        .await
        .unwrap();
    assert_eq!(id(&gone), NULL_VERSION_ID);
    assert_eq!(id(&promoted.unwrap()), id(&v4));
    assert_eq!(read(&store, &bck, "x").await, "four");
}

/// In a versioned bucket, bytes count every version and objects only current ones: through
/// versioned writes, a delete marker, a null write over a noncurrent null version, a
/// permanent delete that makes the previous version current again.
#[tokio::test]
async fn usage_counts_current_objects_and_every_versions_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mps = [dir.path().join("mp0")];
    let store = Store::open(&mps).await.unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();
    let uname = bck.uname();
    let counts = |store: &Store| (store.object_counts()[&uname], store.usage()[&uname]);
    let put = |name: &'static str, data: &'static str, id: &'static str, marker: bool| {
        let (store, bck) = (&store, &bck);
        async move {
            let data = if marker {
                String::new()
            } else {
                data.to_owned()
            };
            let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(data))]);
            store
                .put(bck, name, stream, versioned(id, marker))
                .await
                .unwrap()
        }
    };
    put("x", "1", MINT_VERSION_ID, false).await;
    put("x", "22", MINT_VERSION_ID, false).await;
    put("y", "333", MINT_VERSION_ID, false).await;
    assert_eq!(counts(&store), (2, 6), "x (two versions) and y");
    put("y", "", MINT_VERSION_ID, true).await;
    assert_eq!(counts(&store), (1, 6), "y's latest is a delete marker");
    put("x", "4444", NULL_VERSION_ID, false).await;
    assert_eq!(counts(&store), (1, 10), "x has three versions");
    put("x", "55555", MINT_VERSION_ID, false).await;
    put("x", "6", NULL_VERSION_ID, false).await;
    assert_eq!(
        counts(&store),
        (1, 12),
        "the noncurrent null version (4 bytes) went"
    );
    store
        .delete_version(&bck, "x", NULL_VERSION_ID, None)
        .await
        .unwrap();
    assert_eq!(
        counts(&store),
        (1, 11),
        "the previous version is current again"
    );
    let marker = store.versions(&bck, "y").unwrap()[0].clone();
    store
        .delete_version(&bck, "y", index::version_id(&marker), None)
        .await
        .unwrap();
    assert_eq!(counts(&store), (2, 11), "y is back");
}

/// A permanent version delete waits (unavailable) while a resilver has moved the object's
/// current record to a new mountpath but not yet its versions: each mountpath would decide
/// alone which version becomes current. Once all are moved, it goes through.
#[tokio::test]
async fn version_deletes_wait_for_a_resilver_to_bring_the_versions_together() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();
    let mut ids: std::collections::HashMap<String, Vec<String>> = Default::default();
    for i in 0..16 {
        let name = format!("x{i}");
        for data in ["one", "two", "three"] {
            let m = store
                .put(&bck, &name, body(data), versioned(MINT_VERSION_ID, false))
                .await
                .unwrap();
            ids.entry(name.clone())
                .or_default()
                .push(index::version_id(&m).to_owned());
        }
    }
    let changed = store
        .change_mountpath(mountset::MpAction::Attach, &dir.path().join("mp1"))
        .await
        .unwrap();
    assert!(changed.resilver);
    // The resilver moves one object's current record before its versions.
    let misplaced = store.misplaced().await.unwrap();
    let current = misplaced
        .iter()
        .find(|m| !m.meta.name.contains('\0'))
        .expect("an object the new mountpath owns");
    let name = current.meta.name.clone();
    store.move_object(current).await.unwrap();
    let ids = &ids[&name];
    let err = store
        .delete_version(&bck, &name, &ids[1], None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, crate::StoreError::Api(e) if e.kind == gristmill_core::ErrorKind::Unavailable),
        "{err:?}"
    );
    for m in store.misplaced().await.unwrap() {
        store.move_object(&m).await.unwrap();
    }
    store
        .delete_version(&bck, &name, &ids[2], None)
        .await
        .unwrap();
    assert_eq!(
        read(&store, &bck, &name).await,
        "two",
        "v2 is current again"
    );
    let left: Vec<String> = store
        .versions(&bck, &name)
        .unwrap()
        .iter()
        .map(|m| index::version_id(m).to_owned())
        .collect();
    assert_eq!(left, [ids[0].clone()]);
}

fn empty_body() -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + use<> {
    futures::stream::iter(Vec::<Result<Bytes, std::io::Error>>::new())
}
