//! The target's router without sockets (`tower::ServiceExt::oneshot`): a target opened on a
//! temp dir, joined to a one-target map with one bucket, so routing and the object paths run
//! for real against its store.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gristmill_core::smap::{self, ClusterMap, Node};
use gristmill_core::{Bck, BucketMetadata, MetaSync, Provider};
use tower::ServiceExt;

use crate::{Target, TargetConfig};

async fn target() -> (tempfile::TempDir, Arc<Target>, axum::Router) {
    let dir = tempfile::tempdir().unwrap();
    let config = TargetConfig {
        state_dir: dir.path().join("state"),
        mountpaths: vec![dir.path().join("mp0")],
        public_url: String::new(),
        join_url: String::new(),
        keepalive_interval: std::time::Duration::from_secs(2),
        backend: Default::default(),
        // The default 95 % mark counts the host's whole disk, which CI's may pass.
        space: crate::SharedSpaceConfig::new(crate::SpaceConfig {
            out_of_space: 100,
            ..Default::default()
        }),
        store: Default::default(),
        quarantine_keep: std::time::Duration::from_secs(7 * 86_400),
        rebalance_bandwidth: 0,
        weight: crate::Weight::Fixed(0),
        etl: Default::default(),
        serve: Default::default(),
        s3: None,
    };
    std::fs::create_dir_all(&config.state_dir).unwrap();
    let url = "http://127.0.0.1:1".to_owned();
    let t = Target::open(&config, url.clone()).await.unwrap();
    // A map with this target alone (the proxy is never called: the bucket is already known).
    let mut map = ClusterMap::new(
        Node::new("p1", smap::PROXY, "http://127.0.0.1:2"),
        "uuid".into(),
        String::new(),
    );
    map.tmap
        .insert(t.id.clone(), Node::new(&t.id, smap::TARGET, &url));
    let mut bmd = BucketMetadata {
        version: 1,
        ..Default::default()
    };
    let bck = Bck::new("b", Provider::Ais).unwrap();
    bmd.buckets.insert(
        bck.uname(),
        gristmill_core::BucketRecord {
            bck,
            props: Default::default(),
        },
    );
    t.apply_metasync(MetaSync {
        smap: Some(map),
        bmd: Some(bmd),
    })
    .await
    .unwrap();
    let app = super::router(t.clone());
    (dir, t, app)
}

async fn call(app: &axum::Router, method: &str, uri: &str, body: &[u8]) -> (StatusCode, Vec<u8>) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::from(body.to_vec()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 64 << 20)
        .await
        .unwrap();
    (status, bytes.to_vec())
}

#[tokio::test]
async fn objects_round_trip_through_the_router() {
    let (_dir, _t, app) = target().await;
    assert_eq!(call(&app, "GET", "/v1/health", b"").await.0, StatusCode::OK);
    let (status, body) = call(&app, "PUT", "/v1/objects/b/dir/x", b"hello").await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let (status, body) = call(&app, "GET", "/v1/objects/b/dir/x", b"").await;
    assert_eq!((status, body.as_slice()), (StatusCode::OK, &b"hello"[..]));
    let (status, _) = call(&app, "DELETE", "/v1/objects/b/dir/x", b"").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&app, "GET", "/v1/objects/b/dir/x", b"").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn refusals_are_clear() {
    let (_dir, _t, app) = target().await;
    for flag in ["replica=1", "rebalance=true", "nofb=true"] {
        let (status, body) = call(&app, "PUT", &format!("/v1/objects/b/x?{flag}"), b"z").await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "?{flag}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let (status, _) = call(&app, "PUT", "/v1/objects/b", b"z").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "empty object name");
    let (status, _) = call(&app, "GET", "/v1/nope", b"").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A transfer without its generation is refused; nothing is stored.
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/internal/objects/b/y?transfer=rebalance",
        b"z",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(&app, "GET", "/v1/objects/b/y", b"").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// A returning target serves what its check judged: the index. A delete (here a tombstone a
/// rebalance brings) commits in the index before the record cache forgets the object; a GET
/// in between used to be served from the cache — the deleted object's old bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_target_never_serves_a_record_the_index_dropped() {
    let (_dir, t, app) = target().await;
    assert_eq!(
        call(&app, "PUT", "/v1/objects/b/o", b"old").await.0,
        StatusCode::OK
    );
    for _ in 0..2 {
        let (status, body) = call(&app, "GET", "/v1/objects/b/o", b"").await;
        assert_eq!((status, body.as_slice()), (StatusCode::OK, &b"old"[..]));
    }
    t.set_returning("test");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *crate::store::index::HOLD_FORGET.lock().unwrap() = Some(gate.clone());
    let bck = Bck::new("b", Provider::Ais).unwrap();
    let deleting = {
        let (t, bck) = (t.clone(), bck.clone());
        tokio::spawn(async move { t.store.delete(&bck, "o").await.map(|_| ()) })
    };
    // The index has dropped it; the cache has not yet.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while t.store.head(&bck, "o").is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the delete never committed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let (status, body) = call(&app, "GET", "/v1/objects/b/o", b"").await;
    *crate::store::index::HOLD_FORGET.lock().unwrap() = None;
    gate.add_permits(1000);
    deleting.await.unwrap().unwrap();
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "served {:?}",
        String::from_utf8_lossy(&body)
    );
}
