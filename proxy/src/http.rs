//! The proxy's HTTP API: redirects for object requests, bucket control, fanned-out listings,
//! cluster queries and membership endpoints.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use gristmill_core::api::{ActionMsg, Keepalive, ListObjectsMsg, action, header as h, query as q};
use gristmill_core::smap::Node;
use gristmill_core::{ApiError, Bck, ErrorKind, validate_object_name};
use gristmill_node::server::encode_page;

use crate::membership;
use crate::meta::{Changed, Proxy};

type Params = Query<HashMap<String, String>>;
type ApiResult = Result<Response, ApiError>;

pub(crate) fn router(proxy: Arc<Proxy>, s3: Arc<crate::s3::Front>) -> Router {
    let router = Router::new()
        .route("/v1/objects/{bucket}/{*object}", any(object))
        .route(
            "/v1/objects/{bucket}",
            any(gristmill_node::server::empty_object_name),
        )
        .route(
            "/v1/objects/{bucket}/",
            any(gristmill_node::server::empty_object_name),
        )
        .route("/v1/buckets", get(list_buckets))
        .route("/v1/buckets/", get(list_buckets))
        .route(
            "/v1/buckets/{bucket}",
            get(list_objects)
                .put(bucket_action)
                .post(bucket_action)
                .delete(bucket_action)
                .patch(bucket_action)
                .head(head_bucket),
        )
        .route("/v1/cluster", get(query).put(cluster_action))
        .route(
            "/v1/etl",
            get(crate::etl_api::list).put(crate::etl_api::init),
        )
        .route(
            "/v1/etl/{name}",
            get(crate::etl_api::show).delete(crate::etl_api::remove),
        )
        .route("/v1/etl/{name}/logs", get(crate::etl_api::logs))
        .route("/v1/etl/{name}/{op}", post(crate::etl_api::control))
        .route("/v1/ml/moss", get(crate::shards::moss))
        .route("/v1/ml/moss/{bucket}", get(crate::shards::moss_bucket))
        .route(
            "/v1/sort",
            post(crate::shards::start_reshard).get(crate::shards::reshard_status),
        )
        .route(
            "/v1/sort/abort",
            axum::routing::delete(crate::shards::reshard_abort),
        )
        .route("/v1/jobs", get(crate::job_api::list_jobs))
        .route(
            "/v1/jobs/{id}",
            get(crate::job_api::show_job).delete(crate::job_api::stop_job),
        )
        .route("/v1/daemon", get(query))
        .route(
            "/v1/daemon/set-config",
            put(gristmill_node::settings::set_endpoint),
        )
        .route("/v1/cluster/set-config", put(crate::config_api::set))
        .route("/v1/cluster/join", post(join))
        .route("/v1/cluster/keepalive", post(keepalive))
        .route("/v1/metasync", put(metasync))
        .route("/v1/health", get(health))
        // Only GET /metrics is ours; other methods on /metrics are S3 requests for a bucket of
        // that name, answered by the S3 front (which refuses the name with an S3 error).
        .route(
            "/metrics",
            get(gristmill_node::server::metrics_endpoint).fallback({
                let s3 = s3.clone();
                move |req: Request| crate::s3::handle(s3.clone(), req)
            }),
        );
    // Everything outside the native routes is S3 (path-style at the root).
    let native = gristmill_node::server::with_fallbacks(Router::new());
    router
        .fallback(move |req: Request| {
            let s3 = s3.clone();
            let native = native.clone();
            async move {
                if req.uri().path().starts_with("/v1/") {
                    // Unknown native endpoint: a JSON 404, not an S3 error.
                    return tower::ServiceExt::oneshot(native, req)
                        .await
                        .into_response();
                }
                crate::s3::handle(s3, req).await
            }
        })
        .layer(axum::middleware::from_fn(
            gristmill_node::server::track_requests,
        ))
        .with_state(proxy)
}

/// A router serving only the S3 API (the dedicated `--s3-port`).
pub(crate) fn s3_only_router(s3: Arc<crate::s3::Front>) -> Router {
    Router::new()
        .fallback(move |req: Request| crate::s3::handle(s3.clone(), req))
        .layer(axum::middleware::from_fn(
            gristmill_node::server::track_requests,
        ))
}

fn bucket_from(name: &str, params: &HashMap<String, String>) -> Result<Bck, ApiError> {
    Bck::from_request(
        name,
        params.get(q::PROVIDER).map(String::as_str),
        params.get(q::NAMESPACE).map(String::as_str),
    )
}

fn parse_action(body: &[u8]) -> Result<ActionMsg, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("missing action message body"));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid action message: {e}")))
}

/// Object requests: validate, then 307 to the owning target (the client re-sends to it).
async fn object(
    State(p): State<Arc<Proxy>>,
    Path((bucket, name)): Path<(String, String)>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    validate_object_name(&name)?;
    gristmill_core::api::refuse_node_only_params(params.keys())?;
    crate::remote::ensure(&p, &bck).await?;
    let smap = p.smap();
    let owner = smap
        .owner(&bck.object_uname(&name))
        .ok_or_else(|| ApiError::new(ErrorKind::Unavailable, "no targets in the cluster yet"))?;
    let uri = req.uri().clone();
    // Auth on: the owner accepts the redirected request on this signature (clients drop
    // their token when a redirect changes host or port).
    let signed = gristmill_node::auth::redirect_query_for(
        req.extensions(),
        req.method(),
        &bck,
        &name,
        &params,
    )
    .map(|s| format!("&{s}"))
    .unwrap_or_default();
    drain_unless_expect_continue(req).await;
    // Built in one buffer (this runs for every object request that comes through a proxy).
    let query = uri.query().unwrap_or("");
    let mut location = String::with_capacity(
        owner.url().len() + uri.path().len() + query.len() + p.id.len() + signed.len() + 40,
    );
    location.push_str(owner.url());
    location.push_str(uri.path());
    location.push('?');
    // The owner catches up with this map first if its own is older (`q::FORWARDED`).
    for kv in query
        .split('&')
        .filter(|kv| !kv.is_empty() && !kv.starts_with(q::FORWARDED))
    {
        location.push_str(kv);
        location.push('&');
    }
    use std::fmt::Write as _;
    let _ = write!(
        location,
        "{}={}&{}={}{signed}",
        q::PROXY_ID,
        p.id,
        q::FORWARDED,
        smap.version
    );
    Ok(gristmill_node::server::redirect_to(location))
}

/// Reads and discards a request body the client is already sending, so it can read our
/// redirect instead of failing with a broken pipe. Clients that send `Expect: 100-continue`
/// (curl for large bodies) or go to the owner directly (our SDK and CLI) never pay for this.
async fn drain_unless_expect_continue(req: Request) {
    if gristmill_node::conn::waits_for_continue(req.headers()) {
        return;
    }
    let mut body = req.into_body().into_data_stream();
    while let Some(chunk) = futures::StreamExt::next(&mut body).await {
        if chunk.is_err() {
            break;
        }
    }
}

/// `GET /v1/buckets {"action":"list"}`: JSON array of buckets.
/// `GET /v1/health`: liveness; with `?ready=true`, whether this proxy can serve: it holds a
/// cluster map that lists it, and the control plane has a leader. (No target is required:
/// targets join through ready proxies.)
async fn health(
    State(p): State<Arc<Proxy>>,
    Query(q): Query<gristmill_node::server::HealthQuery>,
) -> Response {
    if !q.wants_readiness() {
        return StatusCode::OK.into_response();
    }
    let smap = p.smap();
    let why = if smap.version == 0 || !smap.pmap.contains_key(&p.id) {
        Some(format!(
            "proxy {} has no cluster map that lists it yet (version {})",
            p.id, smap.version
        ))
    } else if p.primary_url().is_empty() {
        Some("the control plane has no leader (no quorum of proxies)".to_owned())
    } else {
        None
    };
    gristmill_node::server::readiness(why)
}

async fn list_buckets(State(p): State<Arc<Proxy>>, Query(params): Params) -> ApiResult {
    p.linearize().await?;
    let provider = match params.get(q::PROVIDER).map(String::as_str) {
        None | Some("") => None,
        Some(s) => Some(s.parse::<gristmill_core::Provider>()?),
    };
    let buckets: Vec<serde_json::Value> = p
        .bmd()
        .buckets
        .values()
        .filter(|r| provider.is_none_or(|pr| r.bck.provider == pr))
        .map(|r| {
            serde_json::json!({
                "name": r.bck.name,
                "provider": r.bck.provider.as_str(),
                "namespace": {"uuid": r.bck.namespace.uuid, "name": r.bck.namespace.name},
            })
        })
        .collect();
    Ok(axum::Json(buckets).into_response())
}

async fn head_bucket(
    State(p): State<Arc<Proxy>>,
    Path(bucket): Path<String>,
    Query(params): Params,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    p.linearize().await?;
    crate::remote::ensure(&p, &bck).await?;
    let bmd = p.bmd();
    let rec = bmd.get(&bck).ok_or_else(|| bck.not_found())?;
    let mut resp = StatusCode::OK.into_response();
    let props = serde_json::to_string(&rec.props).unwrap_or_default();
    if let Ok(v) = HeaderValue::from_str(&props) {
        resp.headers_mut().insert(h::BUCKET_PROPS, v);
    }
    Ok(resp)
}

/// The user a request acts for: the logged-in user; for a node's request (or any, with auth
/// off), the user it names in `ais-on-behalf-of`; else nobody (empty).
fn requester(req: &Request) -> String {
    match req.extensions().get::<gristmill_node::auth::Principal>() {
        Some(gristmill_node::auth::Principal::User(name)) => name.clone(),
        _ => req
            .headers()
            .get(h::ON_BEHALF_OF)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    }
}

/// POST / DELETE on a bucket: create-bck, destroy-bck.
async fn bucket_action(
    State(p): State<Arc<Proxy>>,
    Path(bucket): Path<String>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    // Only the primary gets here (see `forward`).
    let bck = bucket_from(&bucket, &params)?;
    let method = req.method().clone();
    let acting_for = requester(&req);
    // The user whose rights decide (auth on): the client, or the one a node relays for. A
    // node acting on its own (the S3 front, which checked its client) names nobody.
    let user = match req.extensions().get::<gristmill_node::auth::Principal>() {
        Some(gristmill_node::auth::Principal::User(name)) => Some(name.clone()),
        Some(gristmill_node::auth::Principal::Node(_)) if !acting_for.is_empty() => {
            Some(acting_for.clone())
        }
        _ => None,
    };
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?;
    let msg = parse_action(&body)?;
    if let Some(result) =
        crate::job_api::bucket_job_action(&p, method.as_str(), &bck, &msg, &params).await
    {
        return result;
    }
    match (method.as_str(), msg.action.as_str()) {
        ("POST", action::CREATE_BUCKET) => {
            if bck.is_remote() {
                // A remote bucket is added (after checking it exists on its backend), with
                // properties such as its endpoint or profile in the value.
                if !crate::remote::add_with(&p, &bck, &msg.value).await? {
                    return Err(bck.already_exists());
                }
                return Ok(StatusCode::OK.into_response());
            }
            let props = gristmill_core::api::BucketProps {
                owner: acting_for.clone(),
                ..Default::default()
            };
            if !p.add_bucket_with(&bck, props).await? {
                // S3's rule: the owner hears that it has the bucket; anyone else, that the
                // name is taken. Without identities (auth off) everyone is the owner.
                let owner = p.bmd().get(&bck).map(|r| r.props.owner.clone());
                return Err(match owner {
                    Some(o) if !o.is_empty() && !acting_for.is_empty() && o != acting_for => {
                        bck.owned_by_another()
                    }
                    _ => bck.already_exists(),
                });
            }
            tracing::info!(bucket = %bck, owner = %acting_for, "bucket created");
            Ok(StatusCode::OK.into_response())
        }
        ("POST", action::ADD_REMOTE_BUCKET) => {
            crate::remote::add(&p, &bck).await?;
            Ok(StatusCode::OK.into_response())
        }
        ("DELETE", action::DESTROY_BUCKET) => {
            p.change(|_, bmd| {
                if bmd.buckets.remove(&bck.uname()).is_none() {
                    return Err(bck.not_found());
                }
                Ok(Changed {
                    smap: false,
                    bmd: true,
                })
            })
            .await?;
            tracing::info!(bucket = %bck, "bucket destroyed");
            Ok(StatusCode::OK.into_response())
        }
        ("PATCH", action::SET_BPROPS) => {
            crate::remote::ensure(&p, &bck).await?;
            if let Some(public) = msg.value.get("public") {
                // Who may read anonymously is the owner's (or an admin's) to say, over the
                // native API as over S3 (whose front checks before it sends this as a node).
                if let Some(user) = &user {
                    let bmd = p.bmd();
                    let admin = bmd.users.get(user).is_some_and(|u| u.is_admin());
                    let owner = bmd.get(&bck).map(|r| r.props.owner.clone());
                    if !admin && owner.as_deref() != Some(user.as_str()) {
                        return Err(ApiError::new(
                            ErrorKind::Forbidden,
                            format!(
                                "only the owner of {bck} or an admin may change who can read it"
                            ),
                        ));
                    }
                }
                crate::s3::check_public(public, &bck.name)?;
            }
            let mut copies_changed = false;
            p.change(|_, bmd| {
                let rec = bmd
                    .buckets
                    .get_mut(&bck.uname())
                    .ok_or_else(|| bck.not_found())?;
                let new = rec.props.patched(&msg.value)?;
                // Object Lock, once on, stays on, and keeps the bucket versioned.
                if rec.props.s3.object_lock.enabled
                    && (!new.s3.object_lock.enabled
                        || new.versioning.s3 != gristmill_core::api::S3_VERSIONING_ENABLED)
                {
                    return Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!("{bck} has Object Lock: it stays on, and the bucket versioned"),
                    ));
                }
                copies_changed = new.mirror.copies() != rec.props.mirror.copies();
                rec.props = new;
                Ok(Changed {
                    smap: false,
                    bmd: true,
                })
            })
            .await?;
            tracing::info!(bucket = %bck, props = %msg.value, "bucket properties changed");
            if copies_changed {
                // Existing objects get (or lose) their replicas now, not at the next rebalance;
                // the answer is the job's id, as AIStore answers with its make-n-copies xaction.
                return crate::job_api::start_make_n_copies(&p, &bck).await;
            }
            Ok(StatusCode::OK.into_response())
        }
        (m, a) => Err(ApiError::bad_request(format!(
            "unsupported bucket action {a:?} for {m}"
        ))),
    }
}

async fn list_objects(
    State(p): State<Arc<Proxy>>,
    Path(bucket): Path<String>,
    Query(params): Params,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    let lso = ListObjectsMsg::from_action_body(&body)?;
    crate::remote::ensure(&p, &bck).await?;
    let page = crate::remote::list_bucket(&p, &bck, lso).await?;
    Ok(encode_page(&page, &headers))
}

/// `PUT /v1/cluster`: start or stop a job (AIStore's xaction control).
async fn cluster_action(State(p): State<Arc<Proxy>>, req: Request) -> ApiResult {
    // Only the primary gets here (see `forward`).
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?;
    let msg = parse_action(&body)?;
    if let Some(result) = membership::node_action(&p, &msg.action, &msg.value).await {
        result?;
        return Ok(StatusCode::OK.into_response());
    }
    crate::job_api::cluster_action(&p, &msg).await
}

/// `GET /v1/cluster?what=` and `GET /v1/daemon?what=`.
async fn query(
    State(p): State<Arc<Proxy>>,
    uri: axum::http::Uri,
    Query(params): Params,
    body: Bytes,
) -> ApiResult {
    let what = params.get(q::WHAT).map(String::as_str);
    // The cluster's metadata (`/v1/cluster`) reflects every acknowledged change; a node's own
    // view (`/v1/daemon`) is what it has applied, and answers without a quorum.
    let cluster = uri.path().starts_with("/v1/cluster");
    if cluster && matches!(what, Some("smap" | "bmd")) {
        p.linearize().await?;
    }
    match what {
        Some(what @ ("status" | "qryxstats")) => {
            crate::job_api::status_query(&p, what, &params, &body).await
        }
        Some("smap") => Ok(axum::Json(p.smap().as_ref().clone()).into_response()),
        Some("bmd") => Ok(axum::Json(p.bmd().as_ref().clone()).into_response()),
        Some("snode") => {
            Ok(axum::Json(Node::new(&p.id, gristmill_core::smap::PROXY, &p.url)).into_response())
        }
        Some("overview") => crate::ui::overview(&p).await,
        Some("config") if cluster => crate::config_api::show(&p, &params).await,
        Some("log") if cluster => crate::config_api::log(&p, &params).await,
        Some(other) => gristmill_node::settings::daemon_query(other, &params).unwrap_or_else(|| {
            Err(ApiError::bad_request(format!(
                "unknown ?what={other} (expected smap, bmd, snode, status, qryxstats, overview, \
                 config, log)"
            )))
        }),
        None => Err(ApiError::bad_request("missing ?what= (smap, bmd, snode)")),
    }
}

async fn join(State(p): State<Arc<Proxy>>, req: Request) -> ApiResult {
    if !p.is_primary() {
        // Nodes joined through any proxy (`--join`): relayed to the primary.
        return crate::forward::to_primary_once(&p, req).await;
    }
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?;
    let node: Node = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid node: {e}")))?;
    let is_target = node.daemon_type == gristmill_core::smap::TARGET;
    let sync = membership::register(&p, node, false).await?;
    if is_target {
        // A target that (re)joins without a map change — a restart, a wiped state dir — does
        // not know where objects are until told again that every one is placed.
        p.placed.store(0, std::sync::atomic::Ordering::SeqCst);
    }
    Ok(axum::Json(sync).into_response())
}

async fn keepalive(State(p): State<Arc<Proxy>>, req: Request) -> ApiResult {
    if !p.is_primary() {
        // Failure detection runs on the primary: a node that still sends here (its map names
        // an earlier primary) is heard there.
        return crate::forward::to_primary_once(&p, req).await;
    }
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?;
    let ka: Keepalive = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid keepalive: {e}")))?;
    if p.is_removed(&ka.id) {
        return Err(membership::removed_refusal(&ka.id));
    }
    match membership::keepalive(&p, &ka) {
        Some(sync) => Ok(axum::Json(sync).into_response()),
        None => Err(ApiError::not_found(format!(
            "node {} is not in the cluster map",
            ka.id
        ))),
    }
}

/// Proxies take their metadata from the Raft log; a push to one is refused.
async fn metasync() -> ApiResult {
    Err(ApiError::new(
        ErrorKind::Conflict,
        "proxies take metadata from the Raft log, not from pushes",
    ))
}
