use super::*;
use bytes::Bytes;
use gristmill_core::{Bck, Provider};

fn body(s: &str) -> futures::stream::Iter<std::vec::IntoIter<Result<Bytes, std::io::Error>>> {
    futures::stream::iter(vec![Ok(Bytes::from(s.to_owned()))])
}

async fn read(store: &Store, bck: &Bck, name: &str) -> String {
    let open = store.open_object(bck, name).await.unwrap();
    String::from_utf8(open.data.unwrap().to_vec()).unwrap()
}

#[tokio::test]
async fn quarantined_copies_are_kept_then_purged() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with_state(&[dir.path().join("mp0")], None, Default::default())
        .await
        .unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();
    for n in ["old", "new"] {
        store
            .put(&bck, n, body(n), Default::default())
            .await
            .unwrap();
        let meta = store.head(&bck, n).unwrap();
        assert!(store.quarantine(&bck, &meta).await.unwrap());
    }
    let qdir = dir.path().join("mp0").join("quarantine");
    let files: Vec<_> = std::fs::read_dir(&qdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2);
    // One quarantined eight days ago (by its modification time, set when it moved there).
    let old = files
        .iter()
        .find(|p| std::fs::read_to_string(p).unwrap() == "old")
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(old)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(8 * 86400))
        .unwrap();
    let week = std::time::Duration::from_secs(7 * 86400);
    assert_eq!(store.purge_quarantine(week).unwrap(), (1, 3));
    let left: Vec<String> = std::fs::read_dir(&qdir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(left, ["new"]);
}

#[tokio::test]
async fn attach_moves_misplaced_and_newer_writes_win() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("mountpaths.json");
    let mp0 = dir.path().join("mp0");
    let store =
        Store::open_with_state(std::slice::from_ref(&mp0), Some(&state), Default::default())
            .await
            .unwrap();
    let bck = Bck::new("b", Provider::Ais).unwrap();
    for i in 0..60 {
        let n = format!("o{i}");
        store
            .put(&bck, &n, body(&format!("v1 {n}")), Default::default())
            .await
            .unwrap();
    }
    let changed = store
        .change_mountpath(MpAction::Attach, &dir.path().join("mp1"))
        .await
        .unwrap();
    assert!(changed.resilver && store.resilver_pending());
    let misplaced = store.misplaced().await.unwrap();
    assert!(
        !misplaced.is_empty() && misplaced.len() < 60,
        "{}",
        misplaced.len()
    );
    // Before the move: readable from the old mountpath; a newer PUT goes to the HRW one
    // and clears the old copy.
    let first = misplaced[0].meta.name.clone();
    assert_eq!(read(&store, &bck, &first).await, format!("v1 {first}"));
    store
        .put(&bck, &first, body("v2"), Default::default())
        .await
        .unwrap();
    // A delete during the resilver removes the copy wherever it is.
    let second = misplaced[1].meta.name.clone();
    store.delete(&bck, &second).await.unwrap();
    let mut moved = 0;
    for m in &misplaced {
        match store.move_object(m).await.unwrap() {
            Moved::Moved(_) => moved += 1,
            Moved::DroppedOlder | Moved::Changed => {
                assert!(
                    m.meta.name == first || m.meta.name == second,
                    "{}",
                    m.meta.name
                )
            }
        }
    }
    assert_eq!(moved, misplaced.len() - 2);
    assert!(store.misplaced().await.unwrap().is_empty());
    assert_eq!(read(&store, &bck, &first).await, "v2");
    assert!(store.head(&bck, &second).is_err());
    assert_eq!(
        store.list(&bck, "", "", 1000, false).await.unwrap().len(),
        59
    );
    store.finish_resilver(changed.epoch, true).await.unwrap();
    assert!(!store.resilver_pending());

    // Detach mp0: everything moves to mp1, then mp0 leaves the set and stays out when
    // given again at start.
    let changed = store
        .change_mountpath(MpAction::Detach, &mp0)
        .await
        .unwrap();
    for m in store.misplaced().await.unwrap() {
        assert!(matches!(
            store.move_object(&m).await.unwrap(),
            Moved::Moved(_)
        ));
    }
    let dropped = store.finish_resilver(changed.epoch, true).await.unwrap();
    assert_eq!(dropped.len(), 1);
    assert_eq!(store.mountpaths().len(), 1);
    assert_eq!(
        store.list(&bck, "", "", 1000, false).await.unwrap().len(),
        59
    );
    drop(misplaced); // the scan's entries held the detached mountpath open
    // Attached again (its index file was closed when it left the set): objects move back.
    let changed = store
        .change_mountpath(MpAction::Attach, &mp0)
        .await
        .unwrap();
    assert!(changed.resilver);
    for m in store.misplaced().await.unwrap() {
        assert!(matches!(
            store.move_object(&m).await.unwrap(),
            Moved::Moved(_)
        ));
    }
    store.finish_resilver(changed.epoch, true).await.unwrap();
    assert_eq!(store.mountpaths().len(), 2);
    let changed = store
        .change_mountpath(MpAction::Detach, &mp0)
        .await
        .unwrap();
    for m in store.misplaced().await.unwrap() {
        store.move_object(&m).await.unwrap();
    }
    store.finish_resilver(changed.epoch, true).await.unwrap();
    drop(store);
    let (plan, _) = plan(std::slice::from_ref(&mp0), Some(&state)).unwrap();
    assert_eq!(plan.len(), 1);
    assert!(plan[0].0.ends_with("mp1"));
}

#[tokio::test]
async fn refuses_bad_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mp0 = dir.path().join("mp0");
    let store = Store::open(std::slice::from_ref(&mp0)).await.unwrap();
    let err = |r: Result<Changed, StoreError>| match r {
        Err(StoreError::Api(e)) => e.message,
        other => panic!("expected an error, got {other:?}"),
    };
    assert!(err(store.change_mountpath(MpAction::Disable, &mp0).await).contains("last"));
    assert!(err(store.change_mountpath(MpAction::Detach, &mp0).await).contains("last"));
    assert!(
        err(store
            .change_mountpath(MpAction::Attach, &mp0.join("inner"))
            .await)
        .contains("overlaps")
    );
    assert!(
        err(store
            .change_mountpath(MpAction::Enable, Path::new("/no/such/mp"))
            .await)
        .contains("not a mountpath")
    );
    assert!(
        err(store
            .change_mountpath(MpAction::Attach, Path::new("rel/dir"))
            .await)
        .contains("absolute")
    );
}
