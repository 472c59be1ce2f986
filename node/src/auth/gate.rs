//! The gate: identifies each request's principal and checks what it may do (route class,\n//! bucket, action body, batch members) before any handler runs.

//! Access control: the one gate every request to a proxy or a target passes when auth is on.
//!
//! ```text
//!  client ── Bearer JWT ──▶ proxy gate ── route table → Need ── user's roles ──▶ handler
//!                              │ object requests: 307 + signed redirect (method, bucket,
//!                              │ object, user, expiry) — the target's gate checks it again
//!  node ── grist-node-auth (HMAC of method + path + expiry) ──▶ internal endpoints
//!  S3 client ── SigV4 (key → same users, secret derived from the cluster secret) ──▶ s3s
//! ```
//!
//! Everything derives from one **cluster secret** that every node reads from a file and no
//! client ever has: the JWT signing key, the intra-cluster request key, the redirect key, the
//! S3 secret derivation key and the password pepper are HMACs of it with distinct labels.
//!
//! The route tables ([`PROXY_ROUTES`], [`TARGET_ROUTES`]) classify every endpoint; a request
//! that matches no entry is treated as internal (only nodes may call it), so a new route that
//! nobody classified fails closed, and the route-table test fails until it is classified.
use super::*;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gristmill_core::api::ActionMsg;
use gristmill_core::bmd::BucketMetadata;
use gristmill_core::bucket::Bck;
use gristmill_core::error::{ApiError, ErrorKind};
use gristmill_core::users::{Need, User};
use redirects::redirect_principal;
pub use routes::{Access, Route, classify};
use std::collections::HashMap;
use std::sync::Arc;
pub use tokens::{Keys, Refused};

/// Largest get-batch body the gate reads to find its buckets (the handlers' limit too).
pub(crate) const MAX_BATCH_BODY: usize = 64 << 20;

/// Who made a request, once the gate has checked it. Handlers find it in the request
/// extensions when auth is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Another node of this cluster.
    Node(String),
    /// A user (by token, or by a redirect signed for it).
    User(String),
}

/// The gate's configuration on one node.
pub struct Gate {
    pub(crate) keys: Arc<Keys>,
    pub(crate) routes: &'static [Route],
    pub(crate) metadata: Arc<dyn Fn() -> Arc<BucketMetadata> + Send + Sync>,
    /// Brings `metadata` up to date (a proxy's linearizable read); asked once when a valid
    /// token names a user this node does not know yet, or a newer generation of it.
    pub(crate) refresh: Option<Refresh>,
    /// Makes sure `metadata` is current before a credential is judged by it (see
    /// [`Gate::with_fresh`]).
    pub(crate) fresh: Option<Fresh>,
}

/// See [`Gate::with_fresh`].
pub type Fresh = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// See [`Gate::with_refresh`].
pub type Refresh =
    Arc<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

impl Gate {
    pub fn new(
        keys: Arc<Keys>,
        routes: &'static [Route],
        metadata: Arc<dyn Fn() -> Arc<BucketMetadata> + Send + Sync>,
    ) -> Self {
        Self {
            keys,
            routes,
            metadata,
            refresh: None,
            fresh: None,
        }
    }

    /// A gate that, before refusing a valid token of a user it does not know (or of a newer
    /// generation than it knows), brings its metadata up to date once and looks again: a user
    /// created, or re-created, through another node moments ago is not refused.
    pub fn with_refresh(mut self, refresh: Refresh) -> Self {
        self.refresh = Some(refresh);
        self
    }

    /// A gate that, before it judges a request's credentials, makes sure its metadata is
    /// current (a proxy that was paused or cut off catches up with the leader first): a user
    /// removed, or a token revoked, through another node is never accepted on stale state.
    /// `Err` (no leader to catch up with) refuses the request with 503.
    pub fn with_fresh(mut self, fresh: Fresh) -> Self {
        self.fresh = Some(fresh);
        self
    }

    /// `router` with every request checked by this gate.
    pub fn protect(self, router: Router) -> Router {
        router.layer(axum::middleware::from_fn_with_state(Arc::new(self), check))
    }
}

/// Most of a refused request's body read before the refusal is answered.
const DRAIN_MAX: usize = 1 << 20;

/// Answers a refused request after reading (a bounded part of) its body: a client still
/// sending it when the refusal comes would otherwise meet a connection closed under it — a
/// broken pipe instead of the 401/403 that says why (`grist put` as a read-only user).
/// A client that waits for `100 Continue` has sent nothing yet: it gets the refusal at once
/// (and the connection closes, see `conn::handle`) instead of being asked to upload.
async fn refuse(req: Request, resp: Response) -> Response {
    if crate::conn::waits_for_continue(req.headers()) {
        return resp;
    }
    let drain = axum::body::to_bytes(req.into_body(), DRAIN_MAX);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), drain).await;
    resp
}

pub(crate) fn deny(status: StatusCode, message: String) -> Response {
    let kind = if status == StatusCode::UNAUTHORIZED {
        ErrorKind::Unauthorized
    } else {
        ErrorKind::Forbidden
    };
    let mut resp = ApiError::new(kind, message).into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"gristmill\""),
        );
    }
    resp
}

/// The answer while this node cannot confirm its users with the leader (a leader change, a
/// partition): 503 + Retry-After, a state that passes, not a 403 that clients give up on.
fn not_current(why: &str) -> Response {
    ApiError::unavailable(format!(
        "this node cannot tell whether its users are current ({why}); retry"
    ))
    .into_response()
}

/// Decoded query parameters (`+` is a space, as form decoding has it).
pub fn query_params(query: Option<&str>) -> HashMap<String, String> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// A path segment, percent-decoded as routing decodes it.
pub(crate) fn decode_segment(s: &str) -> Result<String, ApiError> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| ApiError::bad_request("path is not valid UTF-8"))
}

/// The bucket (and object name, for object paths) a request addresses.
pub(crate) fn target_of(
    path: &str,
    params: &HashMap<String, String>,
) -> Result<(Bck, Option<String>), ApiError> {
    let mut parts = path.splitn(5, '/'); // "", "v1", area, bucket, object
    let (_, _, _) = (parts.next(), parts.next(), parts.next());
    let bucket = decode_segment(parts.next().unwrap_or(""))?;
    let object = parts.next().map(decode_segment).transpose()?;
    let bck = Bck::from_request(
        &bucket,
        params
            .get(gristmill_core::api::query::PROVIDER)
            .map(String::as_str),
        params
            .get(gristmill_core::api::query::NAMESPACE)
            .map(String::as_str),
    )?;
    Ok((bck, object))
}

/// The destination bucket of a copy-like action: `value.tobck` or `?bck_to=`.
pub(crate) fn destination(
    msg: &ActionMsg,
    params: &HashMap<String, String>,
) -> Result<Option<Bck>, ApiError> {
    if let Some(v) = msg.value.get("tobck").filter(|v| !v.is_null()) {
        let name = v.get("name").and_then(|n| n.as_str()).unwrap_or("");
        let provider = v.get("provider").and_then(|p| p.as_str());
        let mut bck = Bck::from_request(name, provider, None)?;
        if let Some(ns) = v.get("namespace").filter(|n| !n.is_null()) {
            bck.namespace = serde_json::from_value(ns.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid tobck namespace: {e}")))?;
        }
        return Ok(Some(bck));
    }
    let Some(to) = params
        .get(gristmill_core::api::query::BCK_TO)
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    if to.contains("://") {
        return Ok(Some(Bck::parse_uri(to)?.0));
    }
    let parts: Vec<&str> = to.trim_end_matches('/').split('/').collect();
    Ok(Some(match parts.as_slice() {
        [provider, ns, name] => Bck::from_request(name, Some(provider), Some(ns))?,
        [provider, name] => Bck::from_request(name, Some(provider), None)?,
        _ => {
            return Err(ApiError::bad_request(format!(
                "invalid destination bucket {to:?}"
            )));
        }
    }))
}

/// What a bucket action needs: the bucket's own actions need write access to it; copies
/// read the source and write the destination; anything unknown needs admin.
pub(crate) fn action_needs(
    method: &Method,
    bck: &Bck,
    msg: &ActionMsg,
    params: &HashMap<String, String>,
) -> Result<Vec<Need>, ApiError> {
    use gristmill_core::api::action as a;
    Ok(match msg.action.as_str() {
        a::LIST => vec![Need::Read(bck.clone())],
        a::CREATE_BUCKET
        | a::DESTROY_BUCKET
        | a::ADD_REMOTE_BUCKET
        | a::SET_BPROPS
        | a::PREFETCH
        | a::EVICT_OBJECTS
        | a::EVICT_REMOTE_BUCKET => vec![Need::Write(bck.clone())],
        a::COPY_BUCKET | a::COPY_OBJECTS | a::ETL_BUCKET | a::ETL_OBJECTS => {
            let mut needs = vec![Need::Read(bck.clone())];
            match destination(msg, params)? {
                Some(to) => needs.push(Need::Write(to)),
                None => needs.push(Need::Admin),
            }
            needs
        }
        // Shards from the bucket's objects, into it or the destination.
        "archive" => vec![
            Need::Read(bck.clone()),
            Need::Write(destination(msg, params)?.unwrap_or_else(|| bck.clone())),
        ],
        _ if *method == Method::GET => vec![Need::Read(bck.clone())],
        _ => vec![Need::Admin],
    })
}

/// What a request whose needs depend on its body needs: a bucket action
/// ([`Access::BucketAction`]: the action in its JSON message) or a get-batch
/// ([`Access::Batch`]: every bucket it names). Other classes need nothing from the body.
pub fn body_needs(
    access: Access,
    method: &Method,
    path: &str,
    params: &HashMap<String, String>,
    body: &[u8],
) -> Result<Vec<Need>, ApiError> {
    match access {
        Access::BucketAction => {
            let (bck, _) = target_of(path, params)?;
            let msg: ActionMsg = if body.is_empty() {
                ActionMsg::new("")
            } else {
                serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("invalid action message: {e}")))?
            };
            action_needs(method, &bck, &msg, params)
        }
        Access::Batch => batch_needs(path, params, body),
        _ => Ok(Vec::new()),
    }
}

/// What a get-batch needs: read access to its default bucket (`/v1/ml/moss/{bucket}`) and to
/// every bucket an item names.
pub(crate) fn batch_needs(
    path: &str,
    params: &HashMap<String, String>,
    body: &[u8],
) -> Result<Vec<Need>, ApiError> {
    let provider = params
        .get(gristmill_core::api::query::PROVIDER)
        .map(String::as_str);
    let namespace = params
        .get(gristmill_core::api::query::NAMESPACE)
        .map(String::as_str);
    let mut buckets: Vec<Bck> = Vec::new();
    let default = match path.strip_prefix("/v1/ml/moss/") {
        Some(b) if !b.is_empty() => {
            Some(Bck::from_request(&decode_segment(b)?, provider, namespace)?)
        }
        _ => None,
    };
    if let Some(b) = &default {
        buckets.push(b.clone());
    }
    let req: gristmill_core::shards::MossReq = if body.is_empty() {
        Default::default()
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid get-batch request: {e}")))?
    };
    for item in &req.items {
        let bck = if !item.uname.is_empty() {
            let mut it = item.uname.splitn(4, '/');
            match (it.next(), it.next(), it.next(), it.next()) {
                (Some(p), Some(ns), Some(b), Some(_)) => Bck::from_request(b, Some(p), Some(ns))?,
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "invalid item uname {:?}",
                        item.uname
                    )));
                }
            }
        } else if item.bucket.is_empty() {
            match &default {
                Some(b) => b.clone(),
                None => {
                    return Err(ApiError::bad_request(format!(
                        "item {:?} names no bucket",
                        item.objname
                    )));
                }
            }
        } else {
            let p = if item.provider.is_empty() {
                provider
            } else {
                Some(item.provider.as_str())
            };
            Bck::from_request(&item.bucket, p, None)?
        };
        if !buckets.contains(&bck) {
            buckets.push(bck);
        }
    }
    if buckets.is_empty() {
        return Ok(vec![Need::Authenticated]);
    }
    Ok(buckets.into_iter().map(Need::Read).collect())
}

/// Who the caller is, from a node signature or a bearer token; `Ok(None)` = no credential.
/// The error is the refusal to send (built once per refused request: its size is no cost).
#[allow(clippy::result_large_err)]
pub(crate) fn identify(
    keys: &Keys,
    req: &Request,
    md: &BucketMetadata,
) -> Result<Option<(Principal, Option<User>)>, Response> {
    let path = req.uri().path();
    if let Some(v) = req.headers().get(NODE_AUTH_HEADER) {
        let v = v.to_str().unwrap_or("");
        return match keys.verify_intra(v, req.method().as_str(), path) {
            Ok(node) => Ok(Some((Principal::Node(node), None))),
            Err(why) => Err(deny(
                StatusCode::UNAUTHORIZED,
                why.message("node signature"),
            )),
        };
    }
    let Some(auth) = req.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let token = auth
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let Some(token) = token else {
        return Err(deny(
            StatusCode::UNAUTHORIZED,
            "unsupported Authorization scheme (expected Bearer <token>)".into(),
        ));
    };
    let claims = keys
        .verify_token(token)
        .map_err(|why| deny(StatusCode::UNAUTHORIZED, why.message("token")))?;
    let user = md.users.get(&claims.sub).ok_or_else(|| {
        deny(
            StatusCode::UNAUTHORIZED,
            Refused::UnknownUser.message("token"),
        )
    })?;
    if user.generation != claims.generation {
        return Err(deny(
            StatusCode::UNAUTHORIZED,
            Refused::Revoked.message("token"),
        ));
    }
    Ok(Some((
        Principal::User(user.name.clone()),
        Some(user.clone()),
    )))
}

/// Whether the request carries a valid token of a user `md` lacks, or of a newer generation.
fn knows_too_little(keys: &Keys, req: &Request, md: &BucketMetadata) -> bool {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let Some(claims) = token.and_then(|t| keys.verify_token(t).ok()) else {
        return false;
    };
    md.users
        .get(&claims.sub)
        .is_none_or(|u| u.generation < claims.generation)
}

/// The middleware: classify, identify, authorize; then the handler.
pub(crate) async fn check(State(gate): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let access = classify(gate.routes, &method, &path);
    match access {
        Access::Public => return next.run(req).await,
        // The S3 front verifies SigV4 against the same users; a node relaying an S3 request
        // vouches for nothing.
        Access::S3 => return next.run(req).await,
        _ => {}
    }
    if let Some(fresh) = &gate.fresh
        && req.headers().contains_key(header::AUTHORIZATION)
        && let Err(why) = fresh().await
    {
        return refuse(req, not_current(&why)).await;
    }
    let mut md = (gate.metadata)();
    let params = query_params(req.uri().query());
    if let Some(refresh) = &gate.refresh
        && knows_too_little(&gate.keys, &req, &md)
    {
        refresh().await;
        md = (gate.metadata)();
    }
    let mut who = match identify(&gate.keys, &req, &md) {
        Ok(w) => w,
        Err(resp) => {
            audit_denied(&req, "", resp.status());
            return refuse(req, resp).await;
        }
    };

    // What the request needs (bucket-scoped classes look at the path, query and body).
    let mut req = req;
    let needs: Vec<Need> = match access {
        Access::Internal => {
            return match who {
                Some((Principal::Node(_), _)) => next.run(req).await,
                Some((Principal::User(name), _)) => {
                    audit_denied(&req, &name, StatusCode::FORBIDDEN);
                    let resp = deny(
                        StatusCode::FORBIDDEN,
                        format!(
                            "{} {path} is internal to the cluster: client credentials are not accepted",
                            method
                        ),
                    );
                    refuse(req, resp).await
                }
                None => {
                    audit_denied(&req, "", StatusCode::UNAUTHORIZED);
                    let resp = deny(
                        StatusCode::UNAUTHORIZED,
                        format!("{method} {path} is internal to the cluster"),
                    );
                    refuse(req, resp).await
                }
            };
        }
        Access::Authenticated => vec![Need::Authenticated],
        Access::ClusterRead => vec![Need::ClusterRead],
        Access::ClusterQuery => match params
            .get(gristmill_core::api::query::WHAT)
            .map(String::as_str)
        {
            // The map (clients route by it), a node's identity (a target's answer without
            // `what`), and job status (AIStore's SDK waits for jobs this way).
            Some("smap" | "snode" | "status" | "qryxstats") => vec![Need::Authenticated],
            None if path == "/v1/daemon" => vec![Need::Authenticated],
            // A node's log names users and every path requested: admins only.
            Some("log") => vec![Need::Admin],
            _ => vec![Need::ClusterRead],
        },
        Access::Admin => vec![Need::Admin],
        Access::Object | Access::BucketRead => {
            let (bck, object) = match target_of(&path, &params) {
                Ok(t) => t,
                Err(e) => return e.into_response(),
            };
            let write = access == Access::Object && !matches!(method, Method::GET | Method::HEAD);
            // A proxy's signed redirect stands in for the token it checked.
            if who.is_none()
                && access == Access::Object
                && params.contains_key(REDIRECT_SIG)
                && let Some(object) = &object
            {
                let signed = gate
                    .keys
                    .verify_redirect(&params, method.as_str(), &bck, object);
                match redirect_principal(signed, &md) {
                    Ok(w) => who = Some(w),
                    Err(why) => {
                        audit_denied(&req, "", StatusCode::UNAUTHORIZED);
                        return deny(StatusCode::UNAUTHORIZED, why);
                    }
                }
            }
            if write {
                vec![Need::Write(bck)]
            } else {
                vec![Need::Read(bck)]
            }
        }
        Access::BucketAction | Access::Batch => {
            // A proxy's signed get-batch redirect stands in for the token it checked; the
            // user's rights on every bucket the body names are checked all the same.
            if who.is_none() && access == Access::Batch && params.contains_key(REDIRECT_SIG) {
                let signed = gate
                    .keys
                    .verify_redirect_path(&params, method.as_str(), &path);
                match redirect_principal(signed, &md) {
                    Ok(w) => who = Some(w),
                    Err(why) => {
                        audit_denied(&req, "", StatusCode::UNAUTHORIZED);
                        return deny(StatusCode::UNAUTHORIZED, why);
                    }
                }
            }
            let limit = if access == Access::Batch {
                MAX_BATCH_BODY
            } else {
                MAX_ACTION_BODY
            };
            let (parts, body) = req.into_parts();
            let bytes = match axum::body::to_bytes(body, limit).await {
                Ok(b) => b,
                Err(e) => {
                    return ApiError::new(
                        ErrorKind::PayloadTooLarge,
                        format!("request body over {limit} bytes: {e}"),
                    )
                    .into_response();
                }
            };
            let needs = match body_needs(access, &method, &path, &params, &bytes) {
                Ok(n) => n,
                Err(e) => return e.into_response(),
            };
            req = Request::from_parts(parts, Body::from(bytes));
            needs
        }
        Access::Public | Access::S3 => unreachable!("handled above"),
    };

    let (principal, user) = match who {
        None => {
            audit_denied(&req, "", StatusCode::UNAUTHORIZED);
            let resp = deny(
                StatusCode::UNAUTHORIZED,
                "authentication required: send Authorization: Bearer <token> (grist auth login)"
                    .into(),
            );
            return refuse(req, resp).await;
        }
        Some(w) => w,
    };
    if let Some(user) = &user
        && let Some(missing) = needs.iter().find(|n| !user.allows(n))
    {
        audit_denied(&req, &user.name, StatusCode::FORBIDDEN);
        let resp = deny(
            StatusCode::FORBIDDEN,
            format!("user {} lacks {missing} for {method} {path}", user.name),
        );
        return refuse(req, resp).await;
    }
    if !matches!(method, Method::GET | Method::HEAD)
        && let Principal::User(name) = &principal
    {
        // Changes to buckets, jobs, ETLs and users at info; object writes (the data path)
        // at debug, so auditing them is a RUST_LOG choice (`audit=debug`).
        if access == Access::Object {
            tracing::debug!(target: "audit", user = %name, %method, %path, "allowed");
        } else {
            tracing::info!(target: "audit", user = %name, %method, %path, "allowed");
        }
    }
    let redact = !matches!(principal, Principal::Node(_))
        && params
            .get(gristmill_core::api::query::WHAT)
            .is_some_and(|w| w == "bmd");
    req.extensions_mut().insert(principal);
    req.extensions_mut().insert(gate.keys.clone());
    let resp = next.run(req).await;
    if redact {
        return redact_users(resp).await;
    }
    resp
}

pub(crate) fn audit_denied(req: &Request, user: &str, status: StatusCode) {
    tracing::warn!(
        target: "audit",
        user,
        method = %req.method(),
        path = %req.uri().path(),
        status = status.as_u16(),
        "denied"
    );
}

/// Drops credential verifiers from a bucket-metadata answer for anyone but a node.
pub(crate) async fn redact_users(resp: Response) -> Response {
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 256 << 20).await else {
        return ApiError::internal("bucket metadata too large to answer").into_response();
    };
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    if let Some(users) = v.get_mut("users").and_then(|u| u.as_object_mut()) {
        for u in users.values_mut() {
            if let Some(u) = u.as_object_mut() {
                u.remove("password");
                u.remove("s3_keys");
            }
        }
    }
    let out = serde_json::to_vec(&v).unwrap_or_default();
    let mut resp = Response::from_parts(parts, Body::from(out));
    resp.headers_mut().remove(header::CONTENT_LENGTH);
    resp
}
