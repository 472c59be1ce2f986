//! The proxy's router without sockets (`tower::ServiceExt::oneshot`): a primary with no
//! targets, its state in a temp dir.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use crate::{Proxy, ProxyConfig};

async fn proxy() -> (tempfile::TempDir, Arc<Proxy>, axum::Router) {
    let dir = tempfile::tempdir().unwrap();
    let config = ProxyConfig {
        state_dir: dir.path().to_owned(),
        public_url: String::new(),
        join_url: String::new(),
        keepalive_interval: std::time::Duration::from_secs(2),
        s3_users: Vec::new(),
        keepalive_retries: 3,
        suspect_grace: std::time::Duration::ZERO,
        restart_grace: std::time::Duration::from_secs(600),
        s3_listen: None,
        s3_domain: None,
        serve: Default::default(),
        admin_password: None,
        raft: Default::default(),
        ui_dir: None,
    };
    let p = Arc::new(
        Proxy::start(&config, "http://127.0.0.1:1".into())
            .await
            .unwrap(),
    );
    crate::leader::found_or_import(&p).await.unwrap();
    let s3 = crate::s3::service(p.clone(), &[], None);
    let app = crate::http::router(p.clone(), s3);
    (dir, p, app)
}

async fn call(app: &axum::Router, method: &str, uri: &str, body: &str) -> (StatusCode, String) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn health_and_unknown_paths() {
    let (_dir, _p, app) = proxy().await;
    assert_eq!(call(&app, "GET", "/v1/health", "").await.0, StatusCode::OK);
    let (status, body) = call(&app, "GET", "/v1/nope", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn node_only_flags_are_refused_on_user_routes() {
    let (_dir, _p, app) = proxy().await;
    for flag in ["replica=1", "rebalance=true", "nofb=true"] {
        for method in ["GET", "PUT", "DELETE"] {
            let (status, body) = call(&app, method, &format!("/v1/objects/b/x?{flag}"), "").await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} ?{flag}: {body}");
        }
    }
}

#[tokio::test]
async fn bucket_lifecycle_and_objects_without_targets() {
    let (_dir, p, app) = proxy().await;
    let (status, body) = call(&app, "PUT", "/v1/objects/b", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "empty object name: {body}");
    let (status, body) = call(&app, "GET", "/v1/objects/missing/x", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = call(&app, "POST", "/v1/buckets/b1", r#"{"action":"create-bck"}"#).await;
    assert_eq!(status, StatusCode::OK, "create: {body}");
    assert!(p.bmd().buckets.keys().any(|k| k.ends_with("/b1")));
    let (status, body) = call(&app, "GET", "/v1/buckets/", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("b1"), "{body}");
    // A bucket but no target to own the object.
    let (status, body) = call(&app, "GET", "/v1/objects/b1/x", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
}
