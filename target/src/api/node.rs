//! Node routes: `/v1/daemon` (map, metadata, mountpaths, space) and the S3 relay to the
//! primary proxy.

use super::route::Params;
use crate::ApiResult;
use crate::Target;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::response::{IntoResponse, Response};
use gristmill_core::ApiError;
use gristmill_core::api::query as q;
use std::sync::Arc;

/// `GET /v1/health`: liveness; with `?ready=true`, whether this target can take requests and
/// new objects: it is in the cluster map, not in maintenance, and has at least one mountpath
/// attached and writable (a probe file is created and removed in each one's `tmp/`).
pub(crate) async fn health(
    State(t): State<Arc<Target>>,
    Query(q): Query<gristmill_node::server::HealthQuery>,
) -> Response {
    if !q.wants_readiness() {
        return axum::http::StatusCode::OK.into_response();
    }
    gristmill_node::server::readiness(not_ready(&t).await)
}

async fn not_ready(t: &Target) -> Option<String> {
    use gristmill_core::smap::{FLAG_DECOMMISSION, FLAG_MAINTENANCE};
    let smap = t.smap();
    let Some(me) = smap.tmap.get(&t.id) else {
        return Some(format!(
            "target {} is not in the cluster map (version {}) yet",
            t.id, smap.version
        ));
    };
    if me.flags & (FLAG_MAINTENANCE | FLAG_DECOMMISSION) != 0 {
        return Some(format!(
            "target {} is in maintenance: it takes no new placements",
            t.id
        ));
    }
    let mountpaths: Vec<std::path::PathBuf> = t
        .store
        .mountpaths()
        .iter()
        .map(|m| m.path.clone())
        .collect();
    if mountpaths.is_empty() {
        return Some("no mountpath is attached".to_owned());
    }
    let probe = tokio::task::spawn_blocking(move || {
        for mp in mountpaths {
            let file = mp
                .join("tmp")
                .join(format!(".ready-{}", std::process::id()));
            let written = std::fs::write(&file, b"ready");
            let _ = std::fs::remove_file(&file);
            if let Err(e) = written {
                return Some(format!("mountpath {} is not writable: {e}", mp.display()));
            }
        }
        None
    })
    .await;
    probe.unwrap_or_else(|e| Some(format!("mountpath probe failed: {e}")))
}

pub(crate) async fn daemon(State(t): State<Arc<Target>>, Query(params): Params) -> ApiResult {
    match params.get(q::WHAT).map(String::as_str) {
        Some("smap") => Ok(axum::Json(t.smap().as_ref().clone()).into_response()),
        Some("bmd") => Ok(axum::Json(t.bmd().as_ref().clone()).into_response()),
        Some("snode") | None => Ok(axum::Json(t.node()).into_response()),
        Some("mountpaths") => Ok(axum::Json(crate::cluster::resilver::list(&t)).into_response()),
        Some("space") => Ok(axum::Json(t.space.report(&t.bmd())).into_response()),
        Some(other) => gristmill_node::settings::daemon_query(other, &params).unwrap_or_else(|| {
            Err(ApiError::bad_request(format!(
                "unknown ?what={other} (expected smap, bmd, snode, mountpaths, space, config, log)"
            )))
        }),
    }
}

/// Headers that describe one hop, not the message; never relayed.
pub(crate) const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
];

/// S3 requests sent to a target are relayed, streaming both ways, to the primary proxy, which
/// verifies the signature (the `Host` header is kept, so SigV4 still matches) and routes the
/// object to its owner. Unknown `/v1/` paths get the usual JSON 404.
pub(crate) async fn s3_relay(State(t): State<Arc<Target>>, req: Request) -> ApiResult {
    let path = req.uri().path();
    if path.starts_with("/v1/") || path == "/v1" {
        return Err(ApiError::not_found(format!(
            "no such endpoint: {} {path}",
            req.method()
        )));
    }
    let primary = t.smap().proxy_si.url().to_owned();
    if primary.is_empty() {
        return Err(ApiError::unavailable("not joined to a cluster yet"));
    }
    let url = format!(
        "{primary}{}",
        req.uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    // A client's request: it carries the client's credentials, never this node's.
    let mut out = t.relay.unsigned().request(req.method().clone(), url);
    for (name, value) in req.headers() {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out = out.header(name, value);
        }
    }
    let resp = out
        .body(reqwest::Body::wrap_stream(
            req.into_body().into_data_stream(),
        ))
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("relaying S3 request to the proxy: {e}")))?;
    let mut relayed = Response::builder().status(resp.status().as_u16());
    for (name, value) in resp.headers() {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            relayed = relayed.header(name.as_str(), value.as_bytes());
        }
    }
    relayed
        .body(Body::from_stream(resp.bytes_stream()))
        .map_err(|e| ApiError::internal(e.to_string()))
}
