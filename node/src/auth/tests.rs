use super::client::*;
use super::gate::*;
use super::redirects::*;
use super::routes::*;
use super::tokens::*;
use super::*;
use aws_lc_rs::hmac;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use gristmill_core::api::ActionMsg;
use gristmill_core::bmd::BucketMetadata;
use gristmill_core::bucket::Bck;
use gristmill_core::bucket::Provider;
use gristmill_core::error::{ApiError, ErrorKind};
use gristmill_core::users::{Need, PasswordHash, S3Key, User};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn keys() -> Keys {
    Keys::from_secret(&[7u8; 32])
}

fn user(name: &str, roles: &[&str]) -> User {
    User {
        name: name.into(),
        roles: roles.iter().map(|r| r.parse().unwrap()).collect(),
        password: None,
        s3_keys: vec![],
        generation: 3,
        created: String::new(),
    }
}

#[test]
fn passwords_verify_and_need_the_secret() {
    let k = keys();
    let h = k.hash_password("hunter2");
    assert!(k.verify_password("hunter2", &h));
    assert!(!k.verify_password("hunter3", &h));
    assert!(!Keys::from_secret(&[8u8; 32]).verify_password("hunter2", &h));
}

#[test]
fn tokens_expire_and_do_not_cross_clusters() {
    let k = keys();
    let (t, exp) = k
        .issue_token(&user("u", &["admin"]), Duration::from_secs(60))
        .unwrap();
    assert!(exp > now_secs());
    let c = k.verify_token(&t).unwrap();
    assert_eq!((c.sub.as_str(), c.generation), ("u", 3));
    assert_eq!(
        Keys::from_secret(&[8u8; 32]).verify_token(&t).unwrap_err(),
        Refused::BadSignature
    );
    // Tampered payload: the signature no longer matches.
    let mut parts: Vec<String> = t.split('.').map(str::to_owned).collect();
    let payload = String::from_utf8(B64.decode(&parts[1]).unwrap()).unwrap();
    parts[1] = B64.encode(payload.replace("\"u\"", "\"admin\""));
    assert!(k.verify_token(&parts.join(".")).is_err());
    assert_eq!(k.verify_token("x.y.z").unwrap_err(), Refused::Malformed);
    // An expired token (signed by hand with exp in the past).
    let claims = Claims {
        sub: "u".into(),
        iss: ISSUER.into(),
        iat: 1,
        exp: now_secs() - 5,
        generation: 3,
    };
    let old = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &k.jwt_encode,
    )
    .unwrap();
    assert_eq!(k.verify_token(&old).unwrap_err(), Refused::Expired);
    // "alg": "none" is refused.
    let none = format!(
        "{}.{}.",
        B64.encode(r#"{"alg":"none","typ":"JWT"}"#),
        B64.encode(serde_json::to_vec(&claims).unwrap())
    );
    assert!(k.verify_token(&none).is_err());
}

#[test]
fn intra_signatures_bind_method_and_path() {
    let k = keys();
    let v = k.sign_intra("p1", "PUT", "/v1/metasync");
    assert_eq!(k.verify_intra(&v, "PUT", "/v1/metasync").unwrap(), "p1");
    assert_eq!(
        k.verify_intra(&v, "PUT", "/v1/jobs").unwrap_err(),
        Refused::BadSignature
    );
    assert_eq!(
        k.verify_intra(&v, "GET", "/v1/metasync").unwrap_err(),
        Refused::BadSignature
    );
    assert!(
        k.verify_intra("v1 p1 1 AAAA", "PUT", "/v1/metasync")
            .is_err()
    );
    assert!(k.verify_intra("garbage", "PUT", "/").is_err());
}

#[test]
fn path_redirects_bind_the_path_and_never_pass_for_an_object() {
    let k = keys();
    let none = HashMap::new();
    let q = query_params(Some(&k.redirect_path_query(
        "bob",
        "GET",
        "/v1/ml/moss",
        &none,
    )));
    assert_eq!(
        k.verify_redirect_path(&q, "GET", "/v1/ml/moss").unwrap(),
        "bob"
    );
    assert!(k.verify_redirect_path(&q, "GET", "/v1/ml/moss/b").is_err());
    assert!(k.verify_redirect_path(&q, "PUT", "/v1/ml/moss").is_err());
    let b = Bck::new("path", Provider::Ais).unwrap();
    assert!(k.verify_redirect(&q, "GET", &b, "/v1/ml/moss").is_err());
}

#[test]
fn node_to_node_operations_are_internal_by_path_never_by_flag() {
    // Every internal object operation has its own route, classified internal.
    for m in [
        Method::GET,
        Method::HEAD,
        Method::PUT,
        Method::DELETE,
        Method::POST,
    ] {
        assert_eq!(
            classify(TARGET_ROUTES, &m, "/v1/internal/objects/b/o/x"),
            Access::Internal,
            "{m}"
        );
    }
    // No user route takes a node-only flag: the handlers refuse them (400) before
    // anything else, and the gate's table names no flag at all.
    for flag in gristmill_core::api::NODE_ONLY_PARAMS {
        let keys = [String::from("provider"), flag.to_string()];
        let e = gristmill_core::api::refuse_node_only_params(keys.iter()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadRequest, "{flag}");
    }
    let fine = [String::from("provider"), String::from("tfwd")];
    assert!(gristmill_core::api::refuse_node_only_params(fine.iter()).is_ok());
    // Every user-reachable object route stays a user route, and nothing under
    // /v1/internal/ is reachable with a user's access class.
    for r in TARGET_ROUTES.iter().chain(PROXY_ROUTES) {
        if r.path.starts_with("/v1/internal/") {
            assert_eq!(r.access, Access::Internal, "{}", r.path);
        }
    }
}

#[test]
fn redirect_signatures_cover_the_whole_query() {
    let k = keys();
    let b = Bck::new("b", Provider::Ais).unwrap();
    let asked = HashMap::from([
        ("provider".to_string(), "ais".to_string()),
        ("etl_name".to_string(), "resize".to_string()),
    ]);
    let signed = k.redirect_query("alice", "GET", &b, "x", &asked);
    let url = format!("provider=ais&etl_name=resize&pid=p1&{signed}");
    let q = query_params(Some(&url));
    assert_eq!(k.verify_redirect(&q, "GET", &b, "x").unwrap(), "alice");
    // A target's forward mark may be added on the way.
    let mut fwd = q.clone();
    fwd.insert(gristmill_core::api::query::FORWARDED.into(), "7".into());
    assert_eq!(k.verify_redirect(&fwd, "GET", &b, "x").unwrap(), "alice");
    for (key, value) in [("replica", "1"), ("etl_name", "other"), ("latest", "true")] {
        let mut changed = q.clone();
        changed.insert(key.into(), value.into());
        assert_eq!(
            k.verify_redirect(&changed, "GET", &b, "x").unwrap_err(),
            Refused::WrongTarget,
            "{key}={value} added to a signed URL"
        );
    }
    let mut dropped = q.clone();
    dropped.remove("etl_name");
    assert!(k.verify_redirect(&dropped, "GET", &b, "x").is_err());
    let path = k.redirect_path_query("bob", "GET", "/v1/ml/moss", &asked);
    let mut pq = query_params(Some(&format!("provider=ais&etl_name=resize&{path}")));
    assert!(k.verify_redirect_path(&pq, "GET", "/v1/ml/moss").is_ok());
    pq.insert("etl_args".into(), "x".into());
    assert!(k.verify_redirect_path(&pq, "GET", "/v1/ml/moss").is_err());
}

#[test]
fn redirects_bind_object_method_and_time() {
    let k = keys();
    let b = Bck::new("b", Provider::Ais).unwrap();
    let none = HashMap::new();
    let q = query_params(Some(
        &k.redirect_query("alice", "GET", &b, "x/y.jpg", &none),
    ));
    assert_eq!(
        k.verify_redirect(&q, "GET", &b, "x/y.jpg").unwrap(),
        "alice"
    );
    assert_eq!(
        k.verify_redirect(&q, "GET", &b, "x/z.jpg").unwrap_err(),
        Refused::WrongTarget
    );
    assert_eq!(
        k.verify_redirect(&q, "PUT", &b, "x/y.jpg").unwrap_err(),
        Refused::WrongTarget
    );
    let other = Bck::new("c", Provider::Ais).unwrap();
    assert!(k.verify_redirect(&q, "GET", &other, "x/y.jpg").is_err());
    let mut forged = q.clone();
    forged.insert(REDIRECT_USER.into(), "admin".into());
    assert!(k.verify_redirect(&forged, "GET", &b, "x/y.jpg").is_err());
    let mut later = q.clone();
    let exp: u64 = q[REDIRECT_EXPIRES].parse().unwrap();
    later.insert(REDIRECT_EXPIRES.into(), (exp + 3600).to_string());
    assert!(k.verify_redirect(&later, "GET", &b, "x/y.jpg").is_err());
    let mut short = Keys::from_secret(&[7u8; 32]);
    short.redirect_ttl = Duration::ZERO;
    // TTL 0 still signs for one second; a past expiry is refused.
    let past = HashMap::from([
        (REDIRECT_EXPIRES.to_string(), "10".to_string()),
        (REDIRECT_USER.to_string(), "alice".to_string()),
        (
            REDIRECT_SIG.to_string(),
            B64.encode(
                hmac::sign(
                    &k.redirect,
                    Keys::redirect_data(
                        "alice",
                        10,
                        "GET",
                        &Keys::object_scope(&b, "x/y.jpg", &HashMap::new()),
                    )
                    .as_bytes(),
                )
                .as_ref(),
            ),
        ),
    ]);
    assert_eq!(
        short
            .verify_redirect(&past, "GET", &b, "x/y.jpg")
            .unwrap_err(),
        Refused::Expired
    );
}

#[test]
fn s3_secrets_are_derived() {
    let k = keys();
    let key = k.new_s3_key();
    assert!(key.access_key.starts_with("GM") && key.access_key.len() == 20);
    assert_eq!(k.s3_secret(&key), k.s3_secret(&key));
    assert_eq!(k.s3_secret(&key).len(), 40);
    assert_ne!(
        k.s3_secret(&key),
        Keys::from_secret(&[8u8; 32]).s3_secret(&key)
    );
}

#[test]
fn classification() {
    let c = |m: Method, p: &str| classify(PROXY_ROUTES, &m, p);
    assert_eq!(c(Method::GET, "/v1/objects/b/x/y"), Access::Object);
    assert_eq!(c(Method::PUT, "/v1/objects/b/x"), Access::Object);
    assert_eq!(c(Method::GET, "/v1/objects/b"), Access::Authenticated);
    assert_eq!(c(Method::HEAD, "/v1/buckets/b"), Access::BucketRead);
    assert_eq!(c(Method::POST, "/v1/buckets/b"), Access::BucketAction);
    assert_eq!(c(Method::PUT, "/v1/metasync"), Access::Internal);
    assert_eq!(c(Method::GET, "/v1/health"), Access::Public);
    assert_eq!(c(Method::HEAD, "/v1/health"), Access::Public);
    assert_eq!(c(Method::GET, "/v1/nonexistent"), Access::Internal);
    assert_eq!(c(Method::GET, "/metrics"), Access::ClusterRead);
    assert_eq!(c(Method::PUT, "/metrics"), Access::S3);
    assert_eq!(c(Method::PUT, "/bucket/key"), Access::S3);
    assert_eq!(c(Method::GET, "/"), Access::S3);
    assert_eq!(c(Method::PUT, "/v1/cluster"), Access::Admin);
    assert_eq!(c(Method::DELETE, "/v1/jobs/j1"), Access::Admin);
    let t = |m: Method, p: &str| classify(TARGET_ROUTES, &m, p);
    assert_eq!(t(Method::GET, "/v1/buckets/b"), Access::Internal);
    assert_eq!(t(Method::POST, "/v1/jobs"), Access::Internal);
    assert_eq!(t(Method::PUT, "/v1/mpu/b/o"), Access::Internal);
    assert!(!path_matches(
        "/v1/objects/{bucket}/{*object}",
        "/v1/objects/b/"
    ));
    assert!(!path_matches("/v1/etl/{name}", "/v1/etl/"));
}

#[test]
fn bucket_actions() {
    let b = Bck::new("src", Provider::Ais).unwrap();
    let none = HashMap::new();
    let msg = |a: &str, v: serde_json::Value| ActionMsg {
        action: a.into(),
        name: String::new(),
        value: v,
    };
    assert_eq!(
        action_needs(
            &Method::POST,
            &b,
            &msg("create-bck", serde_json::Value::Null),
            &none
        )
        .unwrap(),
        vec![Need::Write(b.clone())]
    );
    let dst = HashMap::from([("bck_to".to_string(), "ais://dst".to_string())]);
    assert_eq!(
        action_needs(
            &Method::POST,
            &b,
            &msg("copy-bck", serde_json::json!({})),
            &dst
        )
        .unwrap(),
        vec![
            Need::Read(b.clone()),
            Need::Write(Bck::new("dst", Provider::Ais).unwrap())
        ]
    );
    assert_eq!(
        action_needs(
            &Method::POST,
            &b,
            &msg("mystery", serde_json::Value::Null),
            &none
        )
        .unwrap(),
        vec![Need::Admin]
    );
}

/// A node that cannot confirm its users with the leader answers 503 + Retry-After (a state
/// that passes), not a 403 that clients give up on (the nemesis run counted hundreds of 403s
/// during leader changes before).
#[tokio::test]
async fn credentials_judged_without_a_leader_get_503_with_retry_after() {
    use tower::ServiceExt as _;
    let gate = Gate::new(
        Arc::new(keys()),
        TARGET_ROUTES,
        Arc::new(|| Arc::new(BucketMetadata::default())),
    )
    .with_fresh(Arc::new(|| {
        Box::pin(async { Err("no leader is known".to_owned()) })
    }));
    let app = gate.protect(Router::new().route(
        "/v1/objects/{bucket}/{*object}",
        axum::routing::put(|| async { "stored" }),
    ));
    let resp = app
        .oneshot(
            Request::builder()
                .method(Method::PUT)
                .uri("/v1/objects/b/o")
                .header(header::AUTHORIZATION, "Bearer some-token")
                .body(Body::from("x"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
}
