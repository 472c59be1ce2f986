//! Bucket routes: this target's page of a listing, remote bucket checks, cached names,
//! multipart uploads in progress.

use super::route::{Params, bucket_from};
use crate::ApiResult;
use crate::Target;
use crate::read::local::entry;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gristmill_core::ApiError;
use gristmill_core::api::{ListObjectsMsg, ListObjectsPage, header as h};
use gristmill_node::server::encode_page;
use std::sync::Arc;

/// One target's page of a listing; the proxy merges the pages of all targets.
pub(crate) async fn list_objects(
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
        return crate::read::remote::list_objects(&t, &bck, &lso, &headers).await;
    }
    if lso.flags & gristmill_core::shards::LS_ARCH_DIR != 0 {
        return crate::shards::list_objects(&t, &bck, &lso, &headers).await;
    }
    let versions = lso.flags & gristmill_core::api::LS_VERSIONS != 0;
    let metas = t
        .store
        .list(&bck, &lso.prefix, lso.after(), limit, versions)
        .await?;
    let more = metas.len() >= limit;
    let entries = metas.iter().map(|m| entry(&t, m, &lso)).collect();
    let page = ListObjectsPage::answering(&lso, entries, more);
    Ok(answer_page(&t, &page, &headers))
}

/// A listing page as answered to the proxy, with this target's rebalance drop counter. Call
/// it after the scan: a copy dropped during or after the scan shows as a changed counter,
/// and the proxy takes the page again.
pub(crate) fn answer_page(t: &Target, page: &ListObjectsPage, headers: &HeaderMap) -> Response {
    let drops = t.drops.load(std::sync::atomic::Ordering::SeqCst);
    let mut resp = encode_page(page, headers);
    resp.headers_mut()
        .insert(h::DROPS, HeaderValue::from(drops));
    resp
}

/// `GET|POST /v1/remote/{bucket}?provider=` (POST body: the bucket properties to use): 200
/// if the bucket exists on its backend (the primary asks this before adding a remote bucket).
pub(crate) async fn remote_bucket(
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
pub(crate) async fn cached_names(
    State(t): State<Arc<Target>>,
    Path(bucket): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    let req: crate::read::remote::Names = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid names: {e}")))?;
    let names = crate::read::remote::present_locally(&t, &bck, req.names).await?;
    Ok(axum::Json(crate::read::remote::Names { names }).into_response())
}

/// Uploads in progress on this target for a bucket.
pub(crate) async fn list_uploads(
    State(t): State<Arc<Target>>,
    Path(bucket): Path<String>,
    Query(params): Params,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    t.require_bucket(&bck).await?;
    Ok(axum::Json(t.store.mpu_list_uploads(&bck).await?).into_response())
}
