//! Any proxy serves any request: a request that changes cluster metadata (buckets, ETLs,
//! users, jobs the primary coordinates, membership actions) reaching a proxy that is not the
//! primary is *forwarded* to the primary, after this proxy's gate checked the client, and the
//! primary's answer is relayed. The hop is signed as this node, so the client's token never
//! has to survive a redirect (clients drop it on a redirect to another host), and a client
//! is never sent to a primary that just died: during an election it gets a 503 to retry.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderName, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gristmill_core::{ApiError, ErrorKind};

use crate::meta::Proxy;

/// Marks a forwarded request: a proxy that gets one while not the primary (maps disagree for
/// a moment) answers 503 instead of forwarding it again.
const FORWARDED: HeaderName = HeaderName::from_static("x-grist-forwarded-by");
/// Largest body forwarded (reshard specs and ETL code are the large ones).
const MAX_BODY: usize = 64 << 20;
/// Some forwarded actions wait for a job (evicting a remote bucket).
const TIMEOUT: Duration = Duration::from_secs(900);

/// Wraps the proxy's routes (inside the auth gate) with the forwarding.
pub(crate) fn to_primary(proxy: &Arc<Proxy>, app: Router) -> Router {
    app.layer(axum::middleware::from_fn_with_state(proxy.clone(), forward))
}

/// Whether only the primary may serve `method path`.
pub(crate) fn primary_only(method: &Method, path: &str) -> bool {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let changes = matches!(
        *method,
        Method::PUT | Method::POST | Method::DELETE | Method::PATCH
    );
    match segs.as_slice() {
        // Bucket create/destroy/props and the jobs started on a bucket.
        ["v1", "buckets", _] => changes,
        // Job control and membership actions.
        ["v1", "cluster"] => *method == Method::PUT,
        ["v1", "etl"] => *method == Method::PUT,
        ["v1", "etl", _] => *method == Method::DELETE,
        ["v1", "etl", _, _] => *method == Method::POST,
        ["v1", "sort"] => *method == Method::POST,
        ["v1", "auth", "users", _] => matches!(*method, Method::PUT | Method::DELETE),
        _ => false,
    }
}

async fn forward(State(p): State<Arc<Proxy>>, req: Request, next: Next) -> Response {
    if p.is_primary() || !primary_only(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    to_primary_once(&p, req)
        .await
        .unwrap_or_else(|e| e.into_response())
}

/// Relays `req` to the primary unless another proxy already forwarded it here (maps disagree
/// for a moment): then 503, never a second hop.
pub(crate) async fn to_primary_once(p: &Proxy, req: Request) -> Result<Response, ApiError> {
    if let Some(by) = req.headers().get(&FORWARDED) {
        return Err(ApiError::unavailable(format!(
            "{} was forwarded here by {}, but this proxy is not the primary either: retry",
            req.uri().path(),
            by.to_str().unwrap_or("?")
        )));
    }
    relay(p, req).await
}

/// Sends `req` to the primary as this node and relays the answer.
async fn relay(p: &Proxy, req: Request) -> Result<Response, ApiError> {
    let primary = p.primary_url();
    if primary.is_empty() {
        return Err(ApiError::unavailable(
            "no primary proxy is known (an election is under way): retry",
        ));
    }
    let url = format!(
        "{primary}{}",
        req.uri().path_and_query().map_or("", |pq| pq.as_str())
    );
    let (parts, body) = req.into_parts();
    // Who the request acts for travels as a node-only header: a user's own request says who
    // they are (a client's copy of the header is dropped); a node's keeps what it said.
    let on_behalf_of = match parts.extensions.get::<gristmill_node::auth::Principal>() {
        Some(gristmill_node::auth::Principal::User(name)) => Some(name.clone()),
        _ => parts
            .headers
            .get(gristmill_core::api::header::ON_BEHALF_OF)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    let body = axum::body::to_bytes(body, MAX_BODY).await.map_err(|e| {
        ApiError::new(
            ErrorKind::PayloadTooLarge,
            format!("request body over {MAX_BODY} bytes: {e}"),
        )
    })?;
    let mut out = p
        .http
        .request(parts.method.clone(), &url)
        .timeout(TIMEOUT)
        .header(&FORWARDED, p.id.as_str())
        .body(body);
    for (name, value) in &parts.headers {
        // The node's own signature replaces the client's credentials on this hop.
        if !per_hop(name)
            && !matches!(*name, header::HOST | header::AUTHORIZATION)
            && *name != FORWARDED
            && name.as_str() != gristmill_core::api::header::ON_BEHALF_OF
        {
            out = out.header(name, value);
        }
    }
    if let Some(user) = on_behalf_of {
        out = out.header(gristmill_core::api::header::ON_BEHALF_OF, user);
    }
    let resp = out.send().await.map_err(|e| {
        ApiError::unavailable(format!(
            "the primary proxy at {primary} is unreachable ({}); a new primary may be being elected: retry",
            e.without_url()
        ))
    })?;
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.map_err(|e| {
        ApiError::unavailable(format!(
            "the primary proxy at {primary} broke off its answer: {}",
            e.without_url()
        ))
    })?;
    let mut answer = (status, bytes).into_response();
    for (name, value) in &headers {
        if !per_hop(name) {
            answer.headers_mut().insert(name, value.clone());
        }
    }
    Ok(answer)
}

/// Headers that describe one connection or one message's framing, not the request: each hop
/// sets its own.
fn per_hop(name: &HeaderName) -> bool {
    matches!(
        *name,
        header::CONTENT_LENGTH | header::CONNECTION | header::TRANSFER_ENCODING
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_changes_are_primary_only() {
        for (m, p) in [
            (Method::POST, "/v1/buckets/b"),
            (Method::DELETE, "/v1/buckets/b"),
            (Method::PATCH, "/v1/buckets/b/"),
            (Method::PUT, "/v1/cluster"),
            (Method::PUT, "/v1/etl"),
            (Method::DELETE, "/v1/etl/x"),
            (Method::POST, "/v1/etl/x/stop"),
            (Method::POST, "/v1/sort"),
            (Method::PUT, "/v1/auth/users/alice"),
        ] {
            assert!(primary_only(&m, p), "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, "/v1/buckets/b"),
            (Method::HEAD, "/v1/buckets/b"),
            (Method::PUT, "/v1/objects/b/o"),
            (Method::GET, "/v1/cluster"),
            (Method::GET, "/v1/etl/x"),
            (Method::POST, "/v1/auth/login"),
            (Method::POST, "/v1/cluster/keepalive"),
            (Method::DELETE, "/v1/jobs/j1"),
            (Method::PUT, "/b/o"),
        ] {
            assert!(!primary_only(&m, p), "{m} {p}");
        }
    }
}
