//! The target's HTTP API: object data path, local listing pages, metadata pushes and node
//! queries. Errors are AIStore-style JSON with the matching status.

use std::collections::HashMap;
use std::io::{Seek, SeekFrom};
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, put};
use gristmill_core::api::{
    self, ActionMsg, ENTRY_IS_CACHED, ListEntry, ListObjectsMsg, ListObjectsPage, header as h,
    query as q,
};
use gristmill_core::range::parse_range;
use gristmill_core::server::{encode_page, redirect};
use gristmill_core::{ApiError, Bck, MetaSync, validate_object_name};
use tokio::io::AsyncReadExt;
use tokio_util::io::ReaderStream;

use crate::Target;
use crate::meta::ObjectMeta;
use crate::store::PutOptions;

type Params = Query<HashMap<String, String>>;
type ApiResult = Result<Response, ApiError>;

/// Query flag on requests a target forwarded to the owner, so a map disagreement between two
/// targets cannot bounce a request back and forth.
const FORWARDED: &str = "tfwd";

pub(crate) fn router(target: Arc<Target>) -> Router {
    let router = Router::new()
        .route("/v1/objects/{bucket}/{*object}", any(object))
        .route(
            "/v1/objects/{bucket}",
            any(gristmill_core::server::empty_object_name),
        )
        .route(
            "/v1/objects/{bucket}/",
            any(gristmill_core::server::empty_object_name),
        )
        .route("/v1/buckets/{bucket}", get(list_objects))
        .route("/v1/metasync", put(metasync))
        .route("/v1/daemon", get(daemon))
        .route("/v1/health", get(gristmill_core::server::health))
        .route("/metrics", get(gristmill_core::server::metrics_endpoint));
    gristmill_core::server::with_fallbacks(router)
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

impl Target {
    /// Succeeds if the bucket exists; on a miss, refreshes the bucket metadata from the primary
    /// once (a bucket created a moment ago may not have reached us yet).
    async fn require_bucket(&self, bck: &Bck) -> Result<(), ApiError> {
        if self.bmd().contains(bck) {
            return Ok(());
        }
        let primary = self.smap().proxy_si.url().to_owned();
        if !primary.is_empty()
            && let Ok(resp) = self
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
        if self.bmd().contains(bck) {
            Ok(())
        } else {
            Err(bck.not_found())
        }
    }

    /// `Some(redirect)` when another target owns the object.
    fn redirect_if_not_owner(&self, bck: &Bck, name: &str, uri: &Uri) -> Option<Response> {
        let smap = self.smap();
        let owner = smap.owner(&bck.object_uname(name))?;
        if owner.daemon_id == self.id {
            return None;
        }
        let query = uri.query().unwrap_or("");
        if query.split('&').any(|kv| kv.starts_with(FORWARDED)) {
            // Forwarded once already: the maps disagree; serve what we can here.
            return None;
        }
        let sep = if query.is_empty() { "" } else { "&" };
        let location = format!("{}{}?{query}{sep}{FORWARDED}=1", owner.url(), uri.path());
        Some(redirect(&location))
    }
}

async fn object(
    State(t): State<Arc<Target>>,
    Path((bucket, name)): Path<(String, String)>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    validate_object_name(&name)?;
    t.require_bucket(&bck).await?;
    if let Some(redirect) = t.redirect_if_not_owner(&bck, &name, req.uri()) {
        return Ok(redirect);
    }
    match *req.method() {
        Method::GET => get_object(&t, &bck, &name, &params, req.headers()).await,
        Method::HEAD => head_object(&t, &bck, &name),
        Method::PUT => put_object(&t, &bck, &name, req).await,
        Method::DELETE => {
            t.store.delete(&bck, &name).await?;
            Ok(StatusCode::OK.into_response())
        }
        _ => Err(ApiError::new(
            gristmill_core::ErrorKind::MethodNotAllowed,
            format!("{} is not supported on objects", req.method()),
        )),
    }
}

fn object_headers(t: &Target, bck: &Bck, meta: &ObjectMeta, headers: &mut HeaderMap) {
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    };
    set(h::CHECKSUM_TYPE, &meta.cksum_type);
    set(h::CHECKSUM_VALUE, &meta.cksum_value);
    set(h::VERSION, &meta.version);
    set(h::ATIME, &meta.atime_ns.to_string());
    set(h::PRESENT, "true");
    set(h::NODE_ID, &t.id);
    set(h::MIRROR_COPIES, "1");
    set(
        h::LOCATION,
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
        set(h::CUSTOM_MD, &md.join(","));
    }
    set("accept-ranges", "bytes");
}

fn head_object(t: &Target, bck: &Bck, name: &str) -> ApiResult {
    let meta = t.store.head(bck, name)?;
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
    let open = t.store.open_object(bck, name).await?;
    if params
        .get(q::VALIDATE_CHECKSUM)
        .is_some_and(|v| v == "true" || v == "1")
    {
        t.store.verify(&open).await?;
    }
    let size = open.meta.size;
    let range = match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        Some(v) => match parse_range(v, size) {
            Ok(r) => r,
            Err(e) if e.kind == gristmill_core::ErrorKind::RangeNotSatisfiable => {
                let mut resp = e.into_response();
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    resp.headers_mut().insert(header::CONTENT_RANGE, v);
                }
                return Ok(resp);
            }
            Err(e) => return Err(e),
        },
        None => None,
    };
    let (start, len) = range.map_or((0, size), |r| (r.start, r.len()));
    let mut file = open.file;
    // Always seek: a checksum validation may have moved the shared file offset.
    file.seek(SeekFrom::Start(start))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let reader = tokio::fs::File::from_std(file).take(len);
    let body = Body::from_stream(ReaderStream::with_capacity(reader, 256 * 1024));
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
    Ok(resp)
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
    let opts = PutOptions {
        durable: !bck.provider.is_remote(),
        expected_size,
        expected_xxhash,
        ..Default::default()
    };
    let meta = t
        .store
        .put(bck, name, req.into_body().into_data_stream(), opts)
        .await?;
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
    let msg: ActionMsg = if body.is_empty() {
        ActionMsg::new(api::action::LIST)
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid action message: {e}")))?
    };
    let lso: ListObjectsMsg = if msg.value.is_null() {
        ListObjectsMsg::default()
    } else {
        serde_json::from_value(msg.value)
            .map_err(|e| ApiError::bad_request(format!("invalid list-objects message: {e}")))?
    };
    t.require_bucket(&bck).await?;
    let limit = lso.page_size();
    let metas = t.store.list(&bck, &lso.prefix, lso.after(), limit).await?;
    let token = if metas.len() >= limit {
        metas.last().map(|m| m.name.clone()).unwrap_or_default()
    } else {
        String::new()
    };
    let entries = metas.iter().map(|m| entry(&t, m, &lso)).collect();
    let page = ListObjectsPage {
        uuid: if lso.uuid.is_empty() {
            uuid::Uuid::new_v4().to_string()
        } else {
            lso.uuid.clone()
        },
        continuation_token: token,
        flags: 0,
        entries,
    };
    Ok(encode_page(&page, &headers))
}

fn entry(t: &Target, m: &ObjectMeta, lso: &ListObjectsMsg) -> ListEntry {
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
    }
}

async fn metasync(State(t): State<Arc<Target>>, body: Bytes) -> ApiResult {
    let sync: MetaSync = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid metasync body: {e}")))?;
    t.apply_metasync(sync).await?;
    Ok(StatusCode::OK.into_response())
}

async fn daemon(State(t): State<Arc<Target>>, Query(params): Params) -> ApiResult {
    match params.get(q::WHAT).map(String::as_str) {
        Some("smap") => Ok(axum::Json(t.smap().as_ref().clone()).into_response()),
        Some("bmd") => Ok(axum::Json(t.bmd().as_ref().clone()).into_response()),
        Some("snode") | None => Ok(axum::Json(t.node()).into_response()),
        Some("mountpaths") => {
            let mps: Vec<String> = t
                .store
                .mountpaths()
                .iter()
                .map(|m| m.path.to_string_lossy().into_owned())
                .collect();
            Ok(axum::Json(serde_json::json!({ "available": mps })).into_response())
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "unknown ?what={other} (expected smap, bmd, snode, mountpaths)"
        ))),
    }
}
