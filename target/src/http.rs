//! The target's HTTP API: object data path, local listing pages, metadata pushes and node
//! queries. Errors are AIStore-style JSON with the matching status.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, put};
use gristmill_core::api::{
    self, ENTRY_IS_CACHED, ListEntry, ListObjectsMsg, ListObjectsPage, header as h, query as q,
};
use gristmill_core::range::parse_range;
use gristmill_core::server::{encode_page, redirect};
use gristmill_core::{ApiError, Bck, MetaSync, validate_object_name};

use crate::Target;
use crate::meta::ObjectMeta;

mod remote;
use crate::store::{ETAG_KEY, PutOptions};
pub(crate) use remote::differs as remote_differs;

type Params = Query<HashMap<String, String>>;
type ApiResult = Result<Response, ApiError>;

/// Query flag on requests a target redirected to the owner under its map, with that map's
/// version (see [`gristmill_core::api::query::FORWARDED`]).
const FORWARDED: &str = gristmill_core::api::query::FORWARDED;

pub(crate) fn router(target: Arc<Target>) -> Router {
    let router = Router::new()
        .route("/v1/objects/{bucket}/{*object}", any(object))
        .route(
            "/v1/internal/objects/{bucket}/{*object}",
            any(internal_object),
        )
        .route("/v1/internal/placed", put(placed))
        .route(
            "/v1/objects/{bucket}",
            any(gristmill_core::server::empty_object_name),
        )
        .route(
            "/v1/objects/{bucket}/",
            any(gristmill_core::server::empty_object_name),
        )
        .route("/v1/buckets/{bucket}", get(list_objects))
        .route(
            "/v1/remote/{bucket}",
            get(remote_bucket).post(remote_bucket),
        )
        .route("/v1/cached/{bucket}", axum::routing::post(cached_names))
        .route("/v1/mpu/{bucket}/{*object}", any(multipart))
        .route("/v1/mpu/{bucket}", get(list_uploads))
        .route("/v1/jobs", get(job_snaps).post(start_job))
        .route("/v1/etl", get(etl_stats))
        .route("/v1/etl/{name}/logs", get(etl_logs))
        .route("/v1/jobs/{id}", axum::routing::delete(abort_job))
        .route("/v1/metasync", put(metasync))
        .route("/v1/vote", axum::routing::post(crate::vote::vote))
        .route("/v1/daemon", get(daemon))
        .route("/v1/daemon/mountpaths", put(crate::resilver::change))
        .route("/v1/health", get(gristmill_core::server::health))
        .route("/metrics", get(gristmill_core::server::metrics_endpoint));
    let router = router.merge(crate::shards::routes());
    gristmill_core::server::with_fallbacks(router)
        // Outside `/v1/`: S3 requests, relayed to the primary proxy's S3 front.
        .fallback(s3_relay)
        .layer(axum::middleware::from_fn(
            gristmill_core::server::track_requests,
        ))
        .with_state(target)
}

/// Bucket from the path segment and the `provider` / `namespace` query parameters.
fn bucket_from(name: &str, params: &HashMap<String, String>) -> Result<Bck, ApiError> {
    Bck::from_request(
        name,
        params.get(q::PROVIDER).map(String::as_str),
        params.get(q::NAMESPACE).map(String::as_str),
    )
}

/// Where an object request is served.
enum Routed {
    /// By this target, for this bucket.
    Here(Bck),
    /// By the owner: the 307 to send.
    Elsewhere(Response),
}

impl Target {
    /// Succeeds if the bucket exists; on a miss, refreshes the bucket metadata from the primary
    /// once (a bucket created a moment ago may not have reached us yet).
    pub(crate) async fn require_bucket(&self, bck: &Bck) -> Result<(), ApiError> {
        if self.bmd().contains(bck) {
            return Ok(());
        }
        let primary = self.smap().proxy_si.url().to_owned();
        self.refresh_bmd(&primary).await;
        if self.bmd().contains(bck) {
            return Ok(());
        }
        // A remote bucket nobody named through a proxy yet (a client talking to targets
        // directly): have the primary add it, as a proxy would.
        if bck.is_remote() && !primary.is_empty() {
            let resp = self
                .http
                .post(format!("{primary}/v1/buckets/{}", bck.name))
                .query(&[
                    ("provider", bck.provider.as_str()),
                    ("namespace", bck.namespace.uname().as_str()),
                ])
                .json(&gristmill_core::api::ActionMsg::new(
                    gristmill_core::api::action::ADD_REMOTE_BUCKET,
                ))
                .send()
                .await
                .map_err(|e| ApiError::unavailable(format!("adding {bck}: {e}")))?;
            if !resp.status().is_success() {
                return Err(crate::rebalance::peer_error(resp, &format!("adding {bck}")).await);
            }
            self.refresh_bmd(&primary).await;
        }
        if self.bmd().contains(bck) {
            Ok(())
        } else {
            Err(bck.not_found())
        }
    }

    /// Fetches the primary's bucket metadata (a bucket created a moment ago may not have
    /// reached us yet).
    async fn refresh_bmd(&self, primary: &str) {
        if primary.is_empty() {
            return;
        }
        if let Ok(resp) = self
            .http
            .get(format!("{primary}/v1/daemon?what=bmd"))
            .send()
            .await
            && let Ok(bmd) = resp.json().await
        {
            let _ = self
                .apply_metasync(MetaSync {
                    smap: None,
                    bmd: Some(bmd),
                })
                .await;
        }
    }

    /// A target that just joined can be sent requests (the primary routes by the new map)
    /// before the map reaches it; without a map it can neither place objects nor know
    /// buckets, so such a request waits for the map (briefly) instead of getting a wrong 404.
    async fn await_first_map(&self) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.smap().version == 0 {
            if tokio::time::Instant::now() >= deadline {
                return Err(ApiError::unavailable(
                    "this target has not joined a cluster yet (no cluster map)",
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// The common start of every object request: validates bucket and name, makes sure the
    /// bucket exists, and finds who serves it.
    async fn route_object(
        &self,
        bucket: &str,
        name: &str,
        params: &HashMap<String, String>,
        method: &Method,
        uri: &Uri,
    ) -> Result<Routed, ApiError> {
        let bck = bucket_from(bucket, params)?;
        validate_object_name(name)?;
        gristmill_core::api::refuse_node_only_params(params.keys())?;
        self.await_first_map().await?;
        self.require_bucket(&bck).await?;
        Ok(
            match self
                .redirect_if_not_owner(&bck, name, params, method, uri)
                .await?
            {
                Some(redirect) => Routed::Elsewhere(redirect),
                None => Routed::Here(bck),
            },
        )
    }

    /// `Some(redirect)` when another target owns the object under this target's map. A
    /// request another target redirected here names its map's version: if that map is newer
    /// than ours, we catch up first; if ours is newer, the sender was behind and the request
    /// goes on to the owner under ours. Two targets on the same version agree on the owner.
    async fn redirect_if_not_owner(
        &self,
        bck: &Bck,
        name: &str,
        params: &HashMap<String, String>,
        method: &Method,
        uri: &Uri,
    ) -> Result<Option<Response>, ApiError> {
        let uname = bck.object_uname(name);
        let mut smap = self.smap();
        let sent: Option<u64> = params.get(FORWARDED).map(|v| v.parse().unwrap_or(0));
        if sent.is_some_and(|v| v > smap.version)
            && smap.owner(&uname).is_some_and(|o| o.daemon_id != self.id)
        {
            self.refresh_smap().await;
            smap = self.smap();
        }
        let Some(owner) = smap.owner(&uname) else {
            return Ok(None);
        };
        if owner.daemon_id == self.id {
            return Ok(None);
        }
        if sent.is_some_and(|v| v >= smap.version) {
            // The sender's map is at least as new as ours and places the object here.
            if matches!(*method, Method::GET | Method::HEAD) {
                return Ok(None); // served from here or a past owner
            }
            return Err(ApiError::unavailable(format!(
                "cluster maps disagree about the owner of {bck}/{name} (this target has version {}); retry",
                smap.version
            )));
        }
        let query: String = uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|kv| !kv.is_empty() && !kv.starts_with(FORWARDED))
            .map(|kv| format!("{kv}&"))
            .collect();
        let location = format!(
            "{}{}?{query}{FORWARDED}={}",
            owner.url(),
            uri.path(),
            smap.version
        );
        Ok(Some(redirect(&location)))
    }

    /// Fetches the primary's cluster map (another target redirected a request here under a
    /// newer one).
    async fn refresh_smap(&self) {
        let primary = self.smap().proxy_si.url().to_owned();
        if primary.is_empty() {
            return;
        }
        if let Ok(resp) = self
            .http
            .get(format!("{primary}/v1/daemon?what=smap"))
            .send()
            .await
            && let Ok(smap) = resp.json().await
        {
            let _ = self
                .apply_metasync(MetaSync {
                    smap: Some(smap),
                    bmd: None,
                })
                .await;
        }
    }
}

async fn object(
    State(t): State<Arc<Target>>,
    Path((bucket, name)): Path<(String, String)>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    let bck = match t
        .route_object(&bucket, &name, &params, req.method(), req.uri())
        .await?
    {
        Routed::Here(bck) => bck,
        Routed::Elsewhere(redirect) => return Ok(redirect),
    };
    let remote = bck.is_remote();
    if !remote && matches!(*req.method(), Method::GET | Method::HEAD) {
        let method = req.method().clone();
        let local = if method == Method::GET {
            get_object(&t, &bck, &name, &params, req.headers()).await
        } else {
            head_object(&t, &bck, &name, req.headers())
        };
        return match local {
            Err(e) if e.kind == gristmill_core::ErrorKind::NotFound => {
                match crate::rebalance::fetch_from_past_owner(
                    &t,
                    &bck,
                    &name,
                    &method,
                    req.uri(),
                    req.headers(),
                )
                .await
                {
                    Some(resp) => Ok(resp),
                    // It may have arrived here while we asked elsewhere (the sender drops its
                    // copy only after ours is committed): look once more.
                    None if method == Method::GET => {
                        let again = get_object(&t, &bck, &name, &params, req.headers()).await;
                        if again.is_err() {
                            tracing::debug!(object = %name, smap = t.smap().version, "GET: not here nor at a past owner");
                        }
                        again
                    }
                    None => head_object(&t, &bck, &name, req.headers()),
                }
            }
            other => other,
        };
    }
    match *req.method() {
        Method::GET => get_object(&t, &bck, &name, &params, req.headers()).await,
        Method::HEAD if remote => remote::head_object(&t, &bck, &name, req.headers()).await,
        Method::HEAD => head_object(&t, &bck, &name, req.headers()),
        Method::PUT if params.contains_key(gristmill_core::shards::query::ARCHPATH) => {
            crate::shards::append(&t, &bck, &name, &params, req).await
        }
        Method::PUT if remote => remote::put_object(&t, &bck, &name, req).await,
        Method::PUT => {
            let resp = put_object(&t, &bck, &name, req).await?;
            crate::shards::after_put(&t, &bck, &name);
            Ok(resp)
        }
        Method::DELETE if remote => remote::delete_object(&t, &bck, &name).await,
        Method::DELETE => {
            delete_object(&t, &bck, &name).await?;
            crate::shards::after_delete(&t, &bck, &name);
            Ok(StatusCode::OK.into_response())
        }
        _ => Err(ApiError::new(
            gristmill_core::ErrorKind::MethodNotAllowed,
            format!("{} is not supported on objects", req.method()),
        )),
    }
}

/// DELETE on the owner: buries the object here (a tombstone one generation past every copy
/// known, here and on past owners), then deletes it on every other possible holder with that
/// tombstone's generation. `NotFound` only if no node held it.
pub(crate) async fn delete_object(t: &Target, bck: &Bck, name: &str) -> Result<(), ApiError> {
    let floor = crate::rebalance::gen_floor(t, bck, name).await?;
    let (removed, tombstone) = t
        .store
        .bury(bck, name, crate::index::BuryGen::Next { floor })
        .await?;
    let elsewhere = crate::rebalance::delete_everywhere(t, bck, name, tombstone).await?;
    if removed.is_none() && !elsewhere {
        return Err(ApiError::not_found(format!(
            "object {bck}/{name} does not exist"
        )));
    }
    Ok(())
}

/// `PUT /v1/internal/placed` `{"version": v}` (from the primary): every object is where map
/// `v` places it. If that is our map, the earlier ones are forgotten: reads, writes and deletes
/// stop asking their owners.
async fn placed(State(t): State<Arc<Target>>, body: Bytes) -> ApiResult {
    #[derive(serde::Deserialize)]
    struct Placed {
        version: u64,
    }
    let msg: Placed =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("placed: {e}")))?;
    if t.smap().version == msg.version {
        t.forget_past_smaps()?;
    }
    Ok(StatusCode::OK.into_response())
}

/// `/v1/internal/objects/{bucket}/{*object}`: node-to-node operations on this target's own
/// copy (the gate admits only node credentials): `PUT ?transfer=` stores a copy as sent,
/// `DELETE` buries the copy with the sender's tombstone generation, `GET`/`HEAD` read the
/// local copy (no redirect, no fallback). Answers carry the generation and tombstone here.
async fn internal_object(
    State(t): State<Arc<Target>>,
    Path((bucket, name)): Path<(String, String)>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    validate_object_name(&name)?;
    t.await_first_map().await?;
    t.require_bucket(&bck).await?;
    let tombstone = || {
        let mut resp =
            ApiError::not_found(format!("object {bck}/{name} is not here")).into_response();
        if let Ok(generation) = t.store.tombstone(&bck, &name) {
            resp.headers_mut()
                .insert(h::TOMBSTONE_GEN, HeaderValue::from(generation));
        }
        resp
    };
    let stage = params.get("stage").map(String::as_str);
    match (req.method().clone(), stage) {
        (Method::PUT, Some(stage)) => {
            crate::rebalance::stage_receive(&t, &bck, &name, stage, req).await
        }
        (Method::POST, Some(stage)) => {
            let resp = crate::rebalance::stage_commit(&t, stage, req.headers()).await?;
            crate::shards::after_put(&t, &bck, &name);
            Ok(resp)
        }
        (Method::DELETE, Some(stage)) => Ok(if crate::rebalance::stage_abort(&t, stage) {
            StatusCode::OK.into_response()
        } else {
            StatusCode::NOT_FOUND.into_response()
        }),
        (_, Some(_)) => Err(ApiError::bad_request(
            "a stage is written with PUT, committed with POST, given up with DELETE",
        )),
        (Method::PUT, None) => match params.get(q::TRANSFER).map(String::as_str) {
            Some(api::internal::REBALANCE | api::internal::REPLICA) => {
                crate::rebalance::receive(&t, &bck, &name, req).await
            }
            other => Err(ApiError::bad_request(format!(
                "internal PUT needs {}=rebalance|replica, not {other:?}",
                q::TRANSFER
            ))),
        },
        (Method::DELETE, None) => {
            let generation = crate::rebalance::gen_of(req.headers());
            if generation == 0 {
                return Err(ApiError::bad_request(format!(
                    "internal DELETE needs {}",
                    h::GEN
                )));
            }
            let (removed, _) = t
                .store
                .bury(&bck, &name, crate::index::BuryGen::Exact(generation))
                .await?;
            if removed.is_none() {
                return Ok(tombstone());
            }
            crate::shards::after_delete(&t, &bck, &name);
            Ok(StatusCode::OK.into_response())
        }
        (Method::HEAD, None) => match head_object(&t, &bck, &name, req.headers()) {
            Err(e) if e.kind == gristmill_core::ErrorKind::NotFound => Ok(tombstone()),
            other => other,
        },
        (Method::GET, None) => match get_object(&t, &bck, &name, &params, req.headers()).await {
            Err(e) if e.kind == gristmill_core::ErrorKind::NotFound => Ok(tombstone()),
            other => other,
        },
        _ => Err(ApiError::new(
            gristmill_core::ErrorKind::MethodNotAllowed,
            format!(
                "{} is not supported on internal object routes",
                req.method()
            ),
        )),
    }
}

pub(crate) fn object_headers(t: &Target, bck: &Bck, meta: &ObjectMeta, headers: &mut HeaderMap) {
    // Names parsed once, at compile time (this runs for every GET and HEAD).
    const CHECKSUM_TYPE: HeaderName = HeaderName::from_static(h::CHECKSUM_TYPE);
    const CHECKSUM_VALUE: HeaderName = HeaderName::from_static(h::CHECKSUM_VALUE);
    const VERSION: HeaderName = HeaderName::from_static(h::VERSION);
    const ATIME: HeaderName = HeaderName::from_static(h::ATIME);
    const PRESENT: HeaderName = HeaderName::from_static(h::PRESENT);
    const NODE_ID: HeaderName = HeaderName::from_static(h::NODE_ID);
    const MIRROR_COPIES: HeaderName = HeaderName::from_static(h::MIRROR_COPIES);
    const LOCATION: HeaderName = HeaderName::from_static(h::LOCATION);
    const CUSTOM_MD: HeaderName = HeaderName::from_static(h::CUSTOM_MD);
    const CUSTOM_MD_JSON: HeaderName = HeaderName::from_static(h::CUSTOM_MD_JSON);
    const MTIME: HeaderName = HeaderName::from_static(h::MTIME);
    const GEN: HeaderName = HeaderName::from_static(h::GEN);
    headers.reserve(17);
    let mut set = |name: HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    };
    set(CHECKSUM_TYPE, &meta.cksum_type);
    set(CHECKSUM_VALUE, &meta.cksum_value);
    set(VERSION, &meta.version);
    set(NODE_ID, &t.id);
    set(
        LOCATION,
        &format!(
            "t[{}]:{}",
            t.id,
            t.store.mountpath_for(bck, &meta.name).path.display()
        ),
    );
    if !meta.custom.is_empty() {
        let md: Vec<String> = meta
            .custom
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        set(CUSTOM_MD, &md.join(","));
        set(CUSTOM_MD_JSON, &api::encode_custom_md(&meta.custom));
    }
    let mtime =
        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(meta.mtime_ns.max(0) as u64);
    set(header::LAST_MODIFIED, &httpdate::fmt_http_date(mtime));
    let etag = meta.custom.get(ETAG_KEY).unwrap_or(&meta.cksum_value);
    set(header::ETAG, &format!("\"{etag}\""));
    headers.insert(ATIME, HeaderValue::from(meta.atime_ns));
    headers.insert(MTIME, HeaderValue::from(meta.mtime_ns));
    headers.insert(GEN, HeaderValue::from(meta.effective_gen()));
    headers.insert(PRESENT, HeaderValue::from_static("true"));
    headers.insert(MIRROR_COPIES, HeaderValue::from_static("1"));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
}

/// Why a conditional request is not served.
enum Unmet {
    /// `If-None-Match` / `If-Modified-Since`: 304.
    NotModified,
    /// `If-Match` / `If-Unmodified-Since`: 412.
    Failed(&'static str),
}

impl Unmet {
    fn into_response(self) -> Response {
        match self {
            Unmet::NotModified => StatusCode::NOT_MODIFIED.into_response(),
            Unmet::Failed(why) => {
                ApiError::new(gristmill_core::ErrorKind::PreconditionFailed, why).into_response()
            }
        }
    }
}

/// HTTP conditional requests (RFC 9110 §13) against an object's ETag and modification time.
fn check_preconditions(headers: &HeaderMap, meta: &ObjectMeta) -> Result<(), Unmet> {
    let etag = meta.custom.get(ETAG_KEY).unwrap_or(&meta.cksum_value);
    let header = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let matches = |list: &str| {
        list.split(',')
            .map(|t| t.trim().trim_start_matches("W/").trim_matches('"'))
            .any(|t| t == "*" || t == etag)
    };
    // HTTP dates have one-second resolution.
    let mtime_s = (meta.mtime_ns.max(0) as u64) / 1_000_000_000;
    let since = |v: &str| {
        httpdate::parse_http_date(v)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
    };
    if let Some(v) = header(header::IF_MATCH) {
        if !matches(v) {
            return Err(Unmet::Failed("If-Match: the ETag differs"));
        }
    } else if let Some(t) = header(header::IF_UNMODIFIED_SINCE).and_then(since)
        && mtime_s > t
    {
        return Err(Unmet::Failed("modified since If-Unmodified-Since"));
    }
    if let Some(v) = header(header::IF_NONE_MATCH) {
        if matches(v) {
            return Err(Unmet::NotModified);
        }
    } else if let Some(t) = header(header::IF_MODIFIED_SINCE).and_then(since)
        && mtime_s <= t
    {
        return Err(Unmet::NotModified);
    }
    Ok(())
}

pub(crate) fn head_object(t: &Target, bck: &Bck, name: &str, headers: &HeaderMap) -> ApiResult {
    let meta = t.store.head(bck, name)?;
    if let Err(unmet) = check_preconditions(headers, &meta) {
        return Ok(unmet.into_response());
    }
    let mut resp = StatusCode::OK.into_response();
    object_headers(t, bck, &meta, resp.headers_mut());
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(meta.size));
    Ok(resp)
}

async fn get_object(
    t: &Target,
    bck: &Bck,
    name: &str,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
) -> ApiResult {
    if crate::shards::is_archive_read(params) {
        return crate::shards::get(t, bck, name, params, headers).await;
    }
    if let Some(etls) = etl_names(params) {
        return get_transformed(t, bck, name, &etls, params).await;
    }
    if bck.is_remote() {
        return remote::get_object(t, bck, name, params, headers).await;
    }
    let open = t.store.open_object(bck, name).await?;
    serve_local(t, bck, open, params, headers).await
}

/// The ETLs a request asks for, in order: `etl_name=a,b`, then `etl_pipeline=c,d`; `None`
/// when it names none.
pub(crate) fn etl_names(params: &HashMap<String, String>) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for key in ["etl_name", "etl_pipeline"] {
        if let Some(v) = params.get(key) {
            names.extend(gristmill_core::etl::pipeline(v));
        }
    }
    (!names.is_empty()).then_some(names)
}

/// `GET ...?etl_name=a,b&etl_args=...`: the object run through the ETLs, in order.
async fn get_transformed(
    t: &Target,
    bck: &Bck,
    name: &str,
    names: &[String],
    params: &HashMap<String, String>,
) -> ApiResult {
    let args = params.get("etl_args").map(String::as_str).unwrap_or("");
    // One streaming ETL and an object bigger than a read-ahead: streamed through it, so the
    // object is never whole in the target's memory (and may exceed the ETL object limit).
    let mut opened = None;
    if let [only] = names
        && t.etls.streams(only)?
    {
        let open = open_or_fetch(t, bck, name).await?;
        if open.data.is_none() {
            return stream_transformed(t, bck, name, only, args, open).await;
        }
        opened = Some(open);
    }
    let data = whole_object(t, bck, name, opened).await?;
    let out = t.etls.pipeline(names, data, name, args).await?;
    let mut resp = Response::new(Body::from(out.clone()));
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(out.len()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

/// An object streamed through an ETL that streams (python, per-object command, http). The
/// status waits for the first piece of the
/// result (so a transform that fails at once is a clean 502/504); a failure later cuts the
/// body short, as does a corrupt copy (verified like a GET; the repair runs in the background).
async fn stream_transformed(
    t: &Target,
    bck: &Bck,
    name: &str,
    etl: &str,
    args: &str,
    open: crate::store::OpenObject,
) -> ApiResult {
    use futures::StreamExt;
    let len = open.meta.size;
    let input = if crate::scrub::validates(t, bck, &HashMap::new()) {
        let (t2, bck2, meta) = (t.me.get().cloned(), bck.clone(), open.meta.clone());
        crate::scrub::verified_stream(open.file, open.meta.clone(), move |why| {
            if let Some(t) = t2.and_then(|w| w.upgrade()) {
                crate::scrub::repair_in_background(t, &bck2, meta, why);
            }
        })
        .boxed()
    } else {
        file_stream(open.file, 0, open.meta.size).boxed()
    };
    let mut rx = t.etls.transform_stream(etl, input, len, name, args).await?;
    let first = match rx.recv().await {
        None => Bytes::new(),
        Some(Err(e)) => return Err(e.into()),
        Some(Ok(piece)) => piece,
    };
    let rest = futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
        .map(|r| r.map_err(|e| std::io::Error::other(e.to_string())));
    let body = futures::stream::once(async move { Ok(first) }).chain(rest);
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

/// A whole object in memory, for transforms (bounded by [`gristmill_core::etl::MAX_ETL_OBJECT`]);
/// an uncached remote object is cold-fetched (and cached) first.
pub(crate) async fn object_bytes(t: &Target, bck: &Bck, name: &str) -> Result<Bytes, ApiError> {
    whole_object(t, bck, name, None).await
}

/// [`object_bytes`], starting from the object if the caller opened it already.
async fn whole_object(
    t: &Target,
    bck: &Bck,
    name: &str,
    mut opened: Option<crate::store::OpenObject>,
) -> Result<Bytes, ApiError> {
    // Verified like a GET (`checksum.validate_warm_get`): a corrupt copy is repaired once.
    let validate = crate::scrub::validates(t, bck, &HashMap::new());
    let mut repaired = false;
    loop {
        let open = match opened.take() {
            Some(o) => o,
            None => open_or_fetch(t, bck, name).await?,
        };
        let meta = open.meta.clone();
        let (data, verdict) = read_whole(bck, name, open, validate).await?;
        let Err(why) = verdict else {
            return Ok(data);
        };
        if repaired {
            return Err(ApiError::internal(format!(
                "object {bck}/{name} is still corrupt after its repair: {why}"
            )));
        }
        crate::scrub::quarantine_and_repair(t, bck, &meta, &why, "get").await?;
        repaired = true;
    }
}

/// An opened object's bytes (bounded by the ETL limit), checked against its metadata when
/// `validate` (off the runtime for large ones).
async fn read_whole(
    bck: &Bck,
    name: &str,
    open: crate::store::OpenObject,
    validate: bool,
) -> Result<(Bytes, Result<(), String>), ApiError> {
    let size = open.meta.size;
    if size > gristmill_core::etl::MAX_ETL_OBJECT {
        return Err(ApiError::new(
            gristmill_core::ErrorKind::PayloadTooLarge,
            format!(
                "{bck}/{name} is {size} bytes; ETLs take objects up to {} bytes",
                gristmill_core::etl::MAX_ETL_OBJECT
            ),
        ));
    }
    let meta = open.meta;
    if let Some(data) = open.data {
        let verdict = if validate {
            crate::scrub::check_bytes(&meta, &data)
        } else {
            Ok(())
        };
        return Ok((data, verdict));
    }
    let file = open.file;
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; size as usize];
        file.read_exact_at(&mut buf, 0)?;
        let verdict = if validate {
            crate::scrub::check_bytes(&meta, &buf)
        } else {
            Ok(())
        };
        Ok::<_, std::io::Error>((Bytes::from(buf), verdict))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("reading {bck}/{name}: {e}")))
}

/// Opens a local object; an uncached remote object is cold-fetched (and cached) first.
pub(crate) async fn open_or_fetch(
    t: &Target,
    bck: &Bck,
    name: &str,
) -> Result<crate::store::OpenObject, ApiError> {
    Ok(match t.store.open_object(bck, name).await {
        Ok(o) => o,
        Err(crate::StoreError::Api(e))
            if e.kind == gristmill_core::ErrorKind::NotFound && bck.is_remote() =>
        {
            let backend = t.backend(bck)?;
            match t.fills.join(t, backend, bck, name, false).await {
                Ok(fill) => {
                    fill.wait()
                        .await
                        .map_err(|why| ApiError::new(gristmill_core::ErrorKind::BadGateway, why))?;
                }
                Err(crate::cold::Start::Cached) => {}
                Err(crate::cold::Start::Failed(e)) => return Err(e),
            }
            t.store.open_object(bck, name).await?
        }
        Err(e) => return Err(e.into()),
    })
}

/// `GET /v1/etl`: counters of this target's ETLs.
async fn etl_stats(State(t): State<Arc<Target>>) -> ApiResult {
    Ok(axum::Json(t.etls.stats()).into_response())
}

/// `GET /v1/etl/{name}/logs`: recent output of this target's workers of an ETL.
async fn etl_logs(State(t): State<Arc<Target>>, Path(name): Path<String>) -> ApiResult {
    let lines = t.etls.logs(&name).map_err(ApiError::from)?;
    Ok(axum::Json(lines).into_response())
}

/// Parses a `Range` header against an object size: `Ok(None)` = whole object, `Err(response)`
/// = the 416 to send.
#[allow(clippy::result_large_err)]
pub(crate) fn request_range(
    headers: &HeaderMap,
    size: u64,
) -> Result<Option<gristmill_core::range::ByteRange>, ApiResult> {
    match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        Some(v) => match parse_range(v, size) {
            Ok(r) => Ok(r),
            Err(e) if e.kind == gristmill_core::ErrorKind::RangeNotSatisfiable => {
                let mut resp = e.into_response();
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    resp.headers_mut().insert(header::CONTENT_RANGE, v);
                }
                Err(Ok(resp))
            }
            Err(e) => Err(Err(e)),
        },
        None => Ok(None),
    }
}

/// Chunk size of streamed reads; the first chunk is smaller so the first byte leaves sooner.
const STREAM_CHUNK: u64 = 1024 * 1024;
const FIRST_CHUNK: u64 = 256 * 1024;

/// The body for `len` bytes of `file` from `start`, read with positioned reads on the blocking
/// pool, one chunk at a time.
async fn file_body(file: std::fs::File, start: u64, len: u64) -> Result<Body, ApiError> {
    Ok(Body::from_stream(file_stream(file, start, len)))
}

/// `len` bytes of `file` from `start` as a stream of chunks (positioned reads on the blocking
/// pool; the first chunk is small so the first byte leaves sooner).
pub(crate) fn file_stream(
    file: std::fs::File,
    start: u64,
    len: u64,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    use std::os::unix::fs::FileExt;
    let file = Arc::new(file);
    futures::stream::unfold((file, start, len), move |(file, offset, left)| async move {
        if left == 0 {
            return None;
        }
        let want = left.min(if offset == start {
            FIRST_CHUNK
        } else {
            STREAM_CHUNK
        });
        let f = file.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; want as usize];
            f.read_exact_at(&mut buf, offset).map(|()| Bytes::from(buf))
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        match read {
            Ok(bytes) => Some((Ok(bytes), (file, offset + want, left - want))),
            Err(e) => Some((Err(e), (file, offset, 0))),
        }
    })
}

/// Streams an opened local object (GET of a native or a cached remote object). With checksum
/// validation on (see `scrub`), a small object is checked before any byte leaves and a whole
/// streamed one as it streams (its last chunk held back until the hash matches); a corrupt copy
/// is quarantined and repaired, and the repaired copy is served when nothing was sent yet.
pub(crate) async fn serve_local(
    t: &Target,
    bck: &Bck,
    open: crate::store::OpenObject,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
) -> ApiResult {
    let validate = crate::scrub::validates(t, bck, params);
    let mut open = open;
    let mut repaired = false;
    loop {
        if let Err(unmet) = check_preconditions(headers, &open.meta) {
            return Ok(unmet.into_response());
        }
        let size = open.meta.size;
        let range = match request_range(headers, size) {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        // Checks that run before the first byte: a small object (already in memory), or any
        // object when the request asked (`?validate_checksum=true`, even for a range).
        let corrupt = match &open.data {
            Some(data) if validate => crate::scrub::check_bytes(&open.meta, data).err(),
            None if validate && range.is_some() && crate::scrub::explicit(params) => {
                crate::scrub::check_open(&open).await?.err()
            }
            _ => None,
        };
        if let Some(why) = corrupt {
            if repaired {
                return Err(ApiError::internal(format!(
                    "object {bck}/{} is still corrupt after its repair: {why}",
                    open.meta.name
                )));
            }
            crate::scrub::quarantine_and_repair(t, bck, &open.meta, &why, "get").await?;
            repaired = true;
            open = t.store.open_object(bck, &open.meta.name).await?;
            continue;
        }
        if t.store.touch(&open.meta.bucket, &open.meta.name) {
            t.space.nudge();
        }
        let (start, len) = range.map_or((0, size), |r| (r.start, r.len()));
        let body = match open.data {
            Some(data) => Body::from(data.slice(start as usize..(start + len) as usize)),
            None if validate && range.is_none() => {
                let (t2, bck2, meta) = (t.me.get().cloned(), bck.clone(), open.meta.clone());
                Body::from_stream(crate::scrub::verified_stream(
                    open.file,
                    open.meta.clone(),
                    move |why| {
                        if let Some(t) = t2.and_then(|w| w.upgrade()) {
                            crate::scrub::repair_in_background(t, &bck2, meta, why);
                        }
                    },
                ))
            }
            None => file_body(open.file, start, len).await?,
        };
        let mut resp = Response::new(body);
        object_headers(t, bck, &open.meta, resp.headers_mut());
        resp.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        if let Some(r) = range {
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            if let Ok(v) = HeaderValue::from_str(&r.content_range(size)) {
                resp.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            // A whole-object checksum on a partial response confuses clients that validate it.
            resp.headers_mut().remove(h::CHECKSUM_VALUE);
            resp.headers_mut().remove(h::CHECKSUM_TYPE);
        }
        return Ok(resp);
    }
}

async fn put_object(t: &Target, bck: &Bck, name: &str, req: Request) -> ApiResult {
    let headers = req.headers();
    let expected_size = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let expected_xxhash = match (
        headers.get(h::CHECKSUM_TYPE).and_then(|v| v.to_str().ok()),
        headers.get(h::CHECKSUM_VALUE).and_then(|v| v.to_str().ok()),
    ) {
        (Some("xxhash"), Some(v)) => Some(v.to_owned()),
        _ => None,
    };
    let custom = match headers.get(h::CUSTOM_MD_JSON).and_then(|v| v.to_str().ok()) {
        Some(v) => api::decode_custom_md(v)?,
        None => Default::default(),
    };
    t.space.check_room(bck, name, expected_size.unwrap_or(0))?;
    // Ordered after every copy a past owner may still hold (a rebalance not yet finished).
    let floor = crate::rebalance::gen_floor(t, bck, name).await?;
    let opts = PutOptions {
        generation: crate::index::GenRule::Next { floor },
        durable: !bck.is_remote(),
        expected_size,
        expected_xxhash,
        compute_md5: headers
            .get(h::COMPUTE_MD5)
            .is_some_and(|v| v.as_bytes() == b"true"),
        s3_checksums: headers
            .get(h::S3_CHECKSUMS)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').map(|a| a.trim().to_owned()).collect())
            .unwrap_or_default(),
        custom,
        ..Default::default()
    };
    let mut pending = t.store.begin_write(bck, name, opts).await?;
    pending
        .write_stream(req.into_body().into_data_stream())
        .await?;
    let meta = crate::rebalance::commit_with_replicas(t, bck, name, pending).await?;
    let mut resp = StatusCode::OK.into_response();
    object_headers(t, bck, &meta, resp.headers_mut());
    Ok(resp)
}

/// One target's page of a listing; the proxy merges the pages of all targets.
async fn list_objects(
    State(t): State<Arc<Target>>,
    Path(bucket): Path<String>,
    Query(params): Params,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    let lso = ListObjectsMsg::from_action_body(&body)?;
    // A target that just joined is asked for its page as soon as it is in the map; without
    // the map it cannot know the bucket yet.
    t.await_first_map().await?;
    t.require_bucket(&bck).await?;
    let limit = lso.page_size();
    if params.get("list").is_some_and(|v| v == "remote") {
        return remote::list_objects(&t, &bck, &lso, &headers).await;
    }
    if lso.flags & gristmill_core::shards::LS_ARCH_DIR != 0 {
        return crate::shards::list_objects(&t, &bck, &lso, &headers).await;
    }
    let metas = t.store.list(&bck, &lso.prefix, lso.after(), limit).await?;
    // Read after the scan: a copy dropped during or after it shows as a changed counter.
    let drops = t.drops.load(std::sync::atomic::Ordering::SeqCst);
    let more = metas.len() >= limit;
    let entries = metas.iter().map(|m| entry(&t, m, &lso)).collect();
    let page = ListObjectsPage::answering(&lso, entries, more);
    let mut resp = encode_page(&page, &headers);
    resp.headers_mut()
        .insert(h::DROPS, HeaderValue::from(drops));
    Ok(resp)
}

pub(crate) fn entry(t: &Target, m: &ObjectMeta, lso: &ListObjectsMsg) -> ListEntry {
    let all = lso.wants("all");
    let want = |p: &str| all || lso.wants(p);
    ListEntry {
        name: m.name.clone(),
        size: m.size,
        checksum: if want("checksum") {
            m.cksum_value.clone()
        } else {
            String::new()
        },
        atime: if want("atime") {
            gristmill_core::time::rfc3339_from_ns(m.atime_ns)
        } else {
            String::new()
        },
        version: if want("version") {
            m.version.clone()
        } else {
            String::new()
        },
        location: if want("location") {
            format!("t[{}]", t.id)
        } else {
            String::new()
        },
        copies: if want("copies") { 1 } else { 0 },
        flags: ENTRY_IS_CACHED,
        mtime_ns: m.mtime_ns,
        etag: m.custom.get(ETAG_KEY).cloned().unwrap_or_default(),
    }
}

/// `GET|POST /v1/remote/{bucket}?provider=` (POST body: the bucket properties to use): 200
/// if the bucket exists on its backend (the primary asks this before adding a remote bucket).
async fn remote_bucket(
    State(t): State<Arc<Target>>,
    Path(bucket): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    let props: Option<gristmill_core::api::BucketProps> = if body.is_empty() {
        None
    } else {
        Some(
            serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("invalid bucket props: {e}")))?,
        )
    };
    let backend = match &props {
        Some(p) => t.backends.for_bucket(&bck, Some(p))?,
        None => t.backend(&bck)?,
    };
    match backend.head_bucket(&bck).await {
        Ok(()) => Ok(StatusCode::OK.into_response()),
        Err(e) if e.is_not_found() => Err(bck.not_found()),
        Err(e) => Err(e.into()),
    }
}

/// `POST /v1/cached/{bucket}` `{"names": [...]}` → the names this target holds.
async fn cached_names(
    State(t): State<Arc<Target>>,
    Path(bucket): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    let req: remote::Names = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid names: {e}")))?;
    let names = remote::present_locally(&t, &bck, req.names).await?;
    Ok(axum::Json(remote::Names { names }).into_response())
}

/// `POST /v1/jobs` (a `JobSpec` from the primary): starts this target's share of a job.
async fn start_job(State(t): State<Arc<Target>>, body: Bytes) -> ApiResult {
    let spec: gristmill_core::job::JobSpec = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid job spec: {e}")))?;
    t.jobs.start(t.clone(), spec)?;
    Ok(StatusCode::OK.into_response())
}

/// `GET /v1/jobs?id=&kind=&running=true`: snapshots of this target's jobs.
async fn job_snaps(State(t): State<Arc<Target>>, Query(params): Params) -> ApiResult {
    let id = params.get("id").map(String::as_str).unwrap_or("");
    let kind = match params.get("kind").map(String::as_str) {
        None | Some("") => None,
        Some(k) => Some(
            gristmill_core::job::JobKind::parse(k)
                .ok_or_else(|| ApiError::bad_request(format!("unknown job kind {k:?}")))?,
        ),
    };
    let running = params.get("running").is_some_and(|v| v == "true");
    Ok(axum::Json(t.jobs.snaps(id, kind, running)).into_response())
}

/// `DELETE /v1/jobs/{id}`: aborts this target's share of a job.
async fn abort_job(State(t): State<Arc<Target>>, Path(id): Path<String>) -> ApiResult {
    if t.jobs.abort(&id) {
        Ok(StatusCode::OK.into_response())
    } else {
        Err(gristmill_core::job::job_not_found(&id))
    }
}

async fn metasync(State(t): State<Arc<Target>>, Query(params): Params, body: Bytes) -> ApiResult {
    let sync: MetaSync = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid metasync body: {e}")))?;
    if let Some(from) = params.get(gristmill_core::election::PUSH_FROM) {
        gristmill_core::election::check_push(from, sync.smap.as_ref(), &t.smap())?;
    }
    t.apply_metasync(sync).await?;
    Ok(StatusCode::OK.into_response())
}

async fn daemon(State(t): State<Arc<Target>>, Query(params): Params) -> ApiResult {
    match params.get(q::WHAT).map(String::as_str) {
        Some("smap") => Ok(axum::Json(t.smap().as_ref().clone()).into_response()),
        Some("bmd") => Ok(axum::Json(t.bmd().as_ref().clone()).into_response()),
        Some("snode") | None => Ok(axum::Json(t.node()).into_response()),
        Some("mountpaths") => Ok(axum::Json(crate::resilver::list(&t)).into_response()),
        Some("space") => Ok(axum::Json(t.space.report(&t.bmd())).into_response()),
        Some(other) => Err(ApiError::bad_request(format!(
            "unknown ?what={other} (expected smap, bmd, snode, mountpaths, space)"
        ))),
    }
}

#[derive(serde::Deserialize)]
struct CompleteBody {
    parts: Vec<(u32, String)>,
}

/// Multipart staging for the S3 front (`/v1/mpu/{bucket}/{object}`):
/// `POST ?op=create` (body: metadata JSON) → upload; `PUT ?upload_id=&part=` → part;
/// `GET ?upload_id=` → parts; `POST ?op=complete&upload_id=` (body: `{"parts":[[n,etag]...]}`)
/// → object; `DELETE ?upload_id=` → abort.
async fn multipart(
    State(t): State<Arc<Target>>,
    Path((bucket, name)): Path<(String, String)>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    let bck = match t
        .route_object(&bucket, &name, &params, req.method(), req.uri())
        .await?
    {
        Routed::Here(bck) => bck,
        Routed::Elsewhere(redirect) => return Ok(redirect),
    };
    let upload_id = params.get("upload_id").cloned().unwrap_or_default();
    let op = params.get("op").map(String::as_str).unwrap_or("");
    let json_body = |bytes: &[u8]| -> Result<serde_json::Value, ApiError> {
        if bytes.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
    };
    match (req.method().clone(), op) {
        (Method::POST, "create") => {
            let body = axum::body::to_bytes(req.into_body(), 1 << 20)
                .await
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            let custom = match json_body(&body)? {
                serde_json::Value::Null => Default::default(),
                v => serde_json::from_value(v).map_err(|e| ApiError::bad_request(e.to_string()))?,
            };
            let info = t.store.mpu_create(&bck, &name, custom).await?;
            Ok(axum::Json(info).into_response())
        }
        (Method::PUT, _) => {
            let part: u32 = params
                .get("part")
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| ApiError::bad_request("missing or invalid ?part="))?;
            let expected = req
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            let info = t
                .store
                .mpu_put_part(
                    &bck,
                    &name,
                    &upload_id,
                    part,
                    req.into_body().into_data_stream(),
                    expected,
                )
                .await?;
            Ok(axum::Json(info).into_response())
        }
        (Method::GET, _) => {
            Ok(axum::Json(t.store.mpu_list_parts(&bck, &name, &upload_id).await?).into_response())
        }
        (Method::POST, "complete") => {
            let body = axum::body::to_bytes(req.into_body(), 16 << 20)
                .await
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            let parts: CompleteBody = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("invalid parts list: {e}")))?;
            // Ordered after any copy a rebalance has not moved yet, like a PUT.
            let floor = crate::rebalance::gen_floor(&t, &bck, &name).await?;
            let meta = t
                .store
                .mpu_complete(&bck, &name, &upload_id, &parts.parts, !bck.is_remote(), floor)
                .await?;
            // Like a PUT: acknowledged only once every copy is stored.
            crate::rebalance::replicate(&t, &bck, &meta).await?;
            let mut resp = StatusCode::OK.into_response();
            object_headers(&t, &bck, &meta, resp.headers_mut());
            Ok(resp)
        }
        (Method::DELETE, _) => {
            t.store.mpu_abort(&bck, &name, &upload_id).await?;
            Ok(StatusCode::OK.into_response())
        }
        (m, op) => Err(ApiError::bad_request(format!(
            "unsupported multipart request {m} op={op:?}"
        ))),
    }
}

/// Uploads in progress on this target for a bucket.
async fn list_uploads(
    State(t): State<Arc<Target>>,
    Path(bucket): Path<String>,
    Query(params): Params,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    t.require_bucket(&bck).await?;
    Ok(axum::Json(t.store.mpu_list_uploads(&bck).await?).into_response())
}

/// Headers that describe one hop, not the message; never relayed.
const HOP_BY_HOP: &[&str] = &[
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
async fn s3_relay(State(t): State<Arc<Target>>, req: Request) -> ApiResult {
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
