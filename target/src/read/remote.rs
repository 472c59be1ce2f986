//! The object data path of remote buckets: cold GET (stream-through), warm GET with optional
//! validation against the remote, write-through PUT and DELETE, HEAD of uncached objects, and
//! the remote listing with in-cluster ("cached") flags.

use crate::ApiResult;
use crate::StoreError;
use crate::Target;
use crate::backend::RemoteAttrs;
use crate::read::cold::{REMOTE_MTIME_KEY, Start};
use crate::read::local::request_range;
use crate::read::local::serve_local;
use crate::store::ETAG_KEY;
use crate::store::meta::ObjectMeta;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gristmill_core::api::{
    ENTRY_IS_CACHED, ListEntry, ListObjectsMsg, ListObjectsPage, header as h, query as q,
};
use gristmill_core::{ApiError, Bck, ErrorKind};
use gristmill_node::server::encode_page;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// List-objects flag: only objects *not* cached in the cluster (AIStore's `LsNotCached`).
pub(crate) const LS_NOT_CACHED: u64 = 1 << 9;

/// Body of `POST /v1/cached/{bucket}` and its answer.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Names {
    pub names: Vec<String>,
}

pub(crate) fn is_not_found(e: &StoreError) -> bool {
    matches!(e, StoreError::Api(a) if a.kind == ErrorKind::NotFound)
}

/// Whether the cached copy differs from the remote object (ETag, or size, or — when the
/// origin gives no ETag — its modification time).
pub(crate) fn differs(meta: &ObjectMeta, remote: &RemoteAttrs) -> bool {
    if remote.size != meta.size {
        return true;
    }
    let local_etag = meta.custom.get(ETAG_KEY).map(String::as_str).unwrap_or("");
    if !remote.etag.is_empty() {
        return remote.etag != local_etag;
    }
    let local_mtime = meta
        .custom
        .get(REMOTE_MTIME_KEY)
        .map(String::as_str)
        .unwrap_or("");
    !remote.last_modified.is_empty() && remote.last_modified != local_mtime
}

pub(crate) async fn get_object(
    t: &Target,
    bck: &Bck,
    name: &str,
    req: &crate::read::local::ReadRequest<'_>,
) -> ApiResult {
    let (params, headers) = (req.params, req.headers);
    let backend = t.backend(bck)?;
    let versioning = t
        .bmd()
        .get(bck)
        .map(|r| r.props.versioning.clone())
        .unwrap_or_default();
    let flag = |k: &str| params.get(k).is_some_and(|v| v == "true" || v == "1");
    let sync = flag(q::SYNC) || versioning.synchronize;
    let latest = sync || flag(q::LATEST) || flag(q::LATEST_VER) || versioning.validate_warm_get;
    let small = crate::verify::small_object(t, bck, req);
    let open = match t.store.open_to_send(bck, name, small).await {
        Ok(open) => Some(open),
        Err(e) if is_not_found(&e) => None,
        Err(e) => return Err(e.into()),
    };
    let mut refetch = false;
    if let Some(open) = open {
        if latest {
            match backend.head(bck, name).await {
                Ok(attrs) => refetch = differs(&open.meta, &attrs),
                // Deleted remotely: with `sync` the cached copy goes too; without, it is
                // still served.
                Err(e) if e.is_not_found() && sync => {
                    match t.store.delete(bck, name).await {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                    return Err(ApiError::not_found(format!(
                        "{bck}/{name} was deleted from the remote; its cached copy was removed"
                    )));
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !refetch {
            metrics::counter!("grist_cache_hits_total", "provider" => bck.provider.as_str())
                .increment(1);
            return serve_local(t, bck, open, req).await;
        }
    }
    let reason = if refetch { "stale" } else { "absent" };
    metrics::counter!("grist_cache_misses_total", "provider" => bck.provider.as_str(), "reason" => reason)
        .increment(1);
    // A range of a large object: only the chunks that cover it (unless a whole download
    // already runs, which serves ranges as its bytes arrive).
    if !refetch
        && headers.contains_key(header::RANGE)
        && backend.supports_ranges()
        && !t.fills.running(&bck.object_uname(name))
        && let Some(answer) = Box::pin(crate::read::chunks::serve_range(
            t, &backend, bck, name, headers, latest,
        ))
        .await?
    {
        return Ok(answer);
    }
    // The cold paths are boxed: a warm GET would otherwise carry their large futures.
    match Box::pin(t.fills.join(t, backend, bck, name, refetch)).await {
        Ok(fill) => serve_fill(t, fill, headers),
        Err(Start::Cached) => {
            let open = t.store.open_object(bck, name).await?;
            serve_local(t, bck, open, req).await
        }
        Err(Start::Failed(e)) => Err(e),
    }
}

/// Streams an object from its download in progress.
pub(crate) fn serve_fill(
    t: &Target,
    fill: std::sync::Arc<crate::read::cold::Fill>,
    headers: &HeaderMap,
) -> ApiResult {
    let size = fill.attrs.size;
    let range = match request_range(headers, size) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let (start, len) = range.map_or((0, size), |r| (r.start, r.len()));
    let body = Body::from_stream(fill.reader(start, len));
    Ok(answer_remote(t, &fill.attrs, body, range))
}

/// The answer of a GET of an uncached remote object: `body` is the whole object or `range`.
pub(crate) fn answer_remote(
    t: &Target,
    attrs: &RemoteAttrs,
    body: Body,
    range: Option<gristmill_core::range::ByteRange>,
) -> Response {
    let len = range.map_or(attrs.size, |r| r.len());
    let mut resp = Response::new(body);
    remote_headers(t, attrs, false, resp.headers_mut());
    let hs = resp.headers_mut();
    hs.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    hs.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Some(r) = range {
        *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
        if let Ok(v) = HeaderValue::from_str(&r.content_range(attrs.size)) {
            resp.headers_mut().insert(header::CONTENT_RANGE, v);
        }
    }
    resp
}

/// Headers describing a remote object that is not (yet) a committed local copy.
pub(crate) fn remote_headers(t: &Target, attrs: &RemoteAttrs, present: bool, hs: &mut HeaderMap) {
    let mut set = |name: &'static str, value: &str| {
        if !value.is_empty()
            && let Ok(v) = HeaderValue::from_str(value)
        {
            hs.insert(name, v);
        }
    };
    set(h::VERSION, &attrs.cache_version());
    set(h::PRESENT, if present { "true" } else { "false" });
    set(h::NODE_ID, &t.id);
    if !attrs.etag.is_empty() {
        set("etag", &format!("\"{}\"", attrs.etag));
    }
    set("last-modified", &attrs.last_modified);
    set("accept-ranges", "bytes");
}

/// HEAD: the cached copy's metadata, else the remote object's.
pub(crate) async fn head_object(
    t: &Target,
    bck: &Bck,
    name: &str,
    headers: &HeaderMap,
) -> ApiResult {
    match t.store.head(bck, name) {
        Ok(_) => crate::read::local::head_object(t, bck, name, headers),
        Err(e) if is_not_found(&e) => {
            let attrs = t.backend(bck)?.head(bck, name).await?;
            let mut resp = StatusCode::OK.into_response();
            remote_headers(t, &attrs, false, resp.headers_mut());
            resp.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(attrs.size));
            Ok(resp)
        }
        Err(e) => Err(e.into()),
    }
}

/// The names (of `names`) this target holds a copy of.
pub(crate) async fn present_locally(
    t: &Target,
    bck: &Bck,
    names: Vec<String>,
) -> Result<Vec<String>, ApiError> {
    let store = t.store.clone();
    let bck = bck.clone();
    tokio::task::spawn_blocking(move || {
        names
            .into_iter()
            .filter(|n| store.head(&bck, n).is_ok())
            .collect()
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))
}

/// Which of `names` are cached anywhere in the cluster: asks each name's owner.
pub(crate) async fn cached_in_cluster(
    t: &Target,
    bck: &Bck,
    names: &[String],
) -> Result<HashSet<String>, ApiError> {
    let smap = t.smap();
    let mut by_owner: HashMap<String, (String, Vec<String>)> = HashMap::new();
    for n in names {
        if let Some(owner) = smap.owner(&bck.object_uname(n)) {
            by_owner
                .entry(owner.daemon_id.clone())
                .or_insert_with(|| (owner.url().to_owned(), Vec::new()))
                .1
                .push(n.clone());
        }
    }
    let ns = bck.namespace.uname();
    let asks = by_owner.into_iter().map(|(id, (url, names))| {
        let ns = ns.clone();
        async move {
            if id == t.id {
                return present_locally(t, bck, names).await;
            }
            let resp = t
                .http
                .post(format!("{url}/v1/cached/{}", bck.name))
                .query(&[("provider", bck.provider.as_str()), ("namespace", &ns)])
                .json(&Names { names })
                .send()
                .await
                .map_err(|e| ApiError::unavailable(format!("listing: target {id}: {e}")))?;
            if !resp.status().is_success() {
                return Err(ApiError::unavailable(format!(
                    "listing: target {id} answered {}",
                    resp.status()
                )));
            }
            let got: Names = resp
                .json()
                .await
                .map_err(|e| ApiError::unavailable(format!("listing: target {id}: {e}")))?;
            Ok(got.names)
        }
    });
    let found = futures::future::try_join_all(asks).await?;
    Ok(found.into_iter().flatten().collect())
}

/// A page of the remote listing; entries cached in the cluster carry [`ENTRY_IS_CACHED`].
pub(crate) async fn list_objects(
    t: &Target,
    bck: &Bck,
    lso: &ListObjectsMsg,
    headers: &HeaderMap,
) -> ApiResult {
    let backend = t.backend(bck)?;
    let limit = lso.page_size();
    let page = backend.list(bck, &lso.prefix, lso.after(), limit).await?;
    let names: Vec<String> = page.entries.iter().map(|e| e.name.clone()).collect();
    let cached = cached_in_cluster(t, bck, &names).await?;
    let want_version = lso.wants("version") || lso.wants("all");
    let not_cached_only = lso.flags & LS_NOT_CACHED != 0;
    let entries = page
        .entries
        .into_iter()
        .filter(|e| !not_cached_only || !cached.contains(&e.name))
        .map(|e| ListEntry {
            flags: if cached.contains(&e.name) {
                ENTRY_IS_CACHED
            } else {
                0
            },
            version: if want_version { e.etag } else { String::new() },
            name: e.name,
            size: e.size,
            ..Default::default()
        })
        .collect::<Vec<_>>();
    let out = ListObjectsPage::answering(lso, entries, page.truncated);
    Ok(encode_page(&out, headers))
}
