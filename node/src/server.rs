//! HTTP server plumbing shared by proxies and targets (feature `server`): the serve loop with
//! TCP_NODELAY and graceful shutdown, JSON error responses, request metrics and `/metrics`.

use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use gristmill_core::error::ApiError;

/// How long in-flight requests get to finish after shutdown is requested.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` fires, then drains for at most [`SHUTDOWN_GRACE`],
/// with default [`gristmill_core::limits::Limits`] and no TLS.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_with(
        listener,
        app,
        shutdown,
        crate::conn::ServeOptions::default(),
    )
    .await
}

/// [`serve`] with limits and TLS: the accept loop in [`crate::conn`].
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
    opts: crate::conn::ServeOptions,
) -> std::io::Result<()> {
    crate::conn::serve(listener, app, shutdown, opts).await
}

/// The process-wide Prometheus recorder (see [`crate::metrics`]).
pub fn metrics_handle() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    crate::metrics::handle()
}

/// `GET /metrics`.
pub async fn metrics_endpoint() -> Response {
    let body = crate::metrics::render();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        body,
    )
        .into_response()
}

pub use crate::metrics::track_requests;

/// `GET /v1/health`: liveness (the process answers).
pub async fn health() -> StatusCode {
    StatusCode::OK
}

/// `GET /v1/health?ready=true`: whether the node can serve now. Each role decides
/// (`not_ready`: why not); plain `/v1/health` stays a liveness probe.
#[derive(Debug, Default, serde::Deserialize)]
pub struct HealthQuery {
    #[serde(default)]
    pub ready: Option<String>,
}

impl HealthQuery {
    pub fn wants_readiness(&self) -> bool {
        self.ready
            .as_deref()
            .is_some_and(|v| v == "true" || v == "1" || v.is_empty())
    }
}

/// The readiness answer: 200 `{"ready":true}`, or 503 with the reason as the error message
/// (and `Retry-After: 1`).
pub fn readiness(not_ready: Option<String>) -> Response {
    match not_ready {
        None => (
            StatusCode::OK,
            axum::Json(serde_json::json!({"ready": true})),
        )
            .into_response(),
        Some(why) => {
            let mut resp = ApiError::new(
                gristmill_core::ErrorKind::Unavailable,
                format!("not ready: {why}"),
            )
            .into_response();
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            resp
        }
    }
}

/// A 307 to `location` (object requests go to their owner this way).
/// [`redirect`] to a location built for it (its bytes become the header without a copy).
pub fn redirect_to(location: String) -> Response {
    let mut resp = StatusCode::TEMPORARY_REDIRECT.into_response();
    if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(location)) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

pub fn redirect(location: &str) -> Response {
    let mut resp = StatusCode::TEMPORARY_REDIRECT.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// Whether the client accepts msgpack (the `aistore` SDK asks for it on listings).
pub fn wants_msgpack(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(gristmill_core::api::header::MSGPACK))
}

/// A listing page in msgpack when the client asks for it, JSON otherwise.
pub fn encode_page(
    page: &gristmill_core::api::ListObjectsPage,
    headers: &axum::http::HeaderMap,
) -> Response {
    if wants_msgpack(headers) {
        (
            [(header::CONTENT_TYPE, gristmill_core::api::header::MSGPACK)],
            page.to_msgpack(),
        )
            .into_response()
    } else {
        axum::Json(page).into_response()
    }
}

/// Object routes without an object name: a clear 400 rather than an unmatched-route 404.
pub async fn empty_object_name() -> ApiError {
    ApiError::bad_request("invalid object name: empty")
}

/// JSON answers for requests no route takes: unknown paths (404) and wrong methods (405).
pub fn with_fallbacks<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .fallback(|req: Request| async move {
            ApiError::not_found(format!(
                "no such endpoint: {} {}",
                req.method(),
                req.uri().path()
            ))
        })
        .method_not_allowed_fallback(|req: Request| async move {
            ApiError::new(
                gristmill_core::error::ErrorKind::MethodNotAllowed,
                format!("{} is not allowed on {}", req.method(), req.uri().path()),
            )
        })
}

/// Reads another node's error answer into the one error type (see [`ApiError::from_peer`]).
pub async fn peer_error(resp: reqwest::Response, what: &str) -> ApiError {
    let status = resp.status().as_u16();
    let body = resp.bytes().await.unwrap_or_default();
    ApiError::from_peer(status, &body, what)
}
