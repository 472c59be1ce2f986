//! Write-through for remote buckets: the backend first, then the cached copy.

use crate::ApiResult;
use crate::Target;
use crate::backend::PutSource;
use crate::read::cold::{REMOTE_VERSION_KEY, SOURCE_KEY};
use crate::store::{ETAG_KEY, PutOptions};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use gristmill_core::api::header as h;
use gristmill_core::{ApiError, Bck};
use std::collections::BTreeMap;

/// Write-through PUT: the body goes to a local temp file, then to the backend; only when the
/// backend took it is the local copy committed, with the backend's ETag. If the backend fails,
/// the temp file is removed and nothing local changes.
pub(crate) async fn put_object(
    t: &Target,
    bck: &Bck,
    name: &str,
    req: axum::extract::Request,
) -> ApiResult {
    let backend = t.backend(bck)?;
    // Chunks of the object being replaced are of no use (an ETag check would drop them).
    t.partials.remove(&bck.object_uname(name));
    let headers = req.headers();
    let expected_size = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let custom: BTreeMap<String, String> =
        match headers.get(h::CUSTOM_MD_JSON).and_then(|v| v.to_str().ok()) {
            Some(v) => gristmill_core::api::decode_custom_md(v)?,
            None => Default::default(),
        };
    t.space.check_room(bck, name, expected_size.unwrap_or(0))?;
    let opts = PutOptions {
        durable: false,
        expected_size,
        custom,
        generation: crate::store::index::GenRule::Next {
            floor: crate::cluster::placement::gen_floor(t, bck, name).await?,
        },
        ..Default::default()
    };
    let mut pending = t.store.begin_write(bck, name, opts).await?;
    pending
        .write_stream(req.into_body().into_data_stream())
        .await?;
    let size = pending.size();
    if expected_size.is_some_and(|want| want != size) {
        return Err(ApiError::bad_request(format!(
            "received {size} bytes, expected {}",
            expected_size.unwrap_or_default()
        )));
    }
    let src = PutSource {
        path: pending.path().to_owned(),
        size,
    };
    // On failure `pending` is dropped here: its temp file goes, the cached copy (if any) stays.
    let attrs = backend.put(bck, name, src).await?;
    let opts = pending.opts_mut();
    opts.version = attrs.cache_version();
    if !attrs.etag.is_empty() {
        opts.custom.insert(ETAG_KEY.into(), attrs.etag.clone());
    }
    if !attrs.version.is_empty() {
        opts.custom
            .insert(REMOTE_VERSION_KEY.into(), attrs.version.clone());
    }
    opts.custom
        .insert(SOURCE_KEY.into(), bck.provider.as_str().to_owned());
    let meta = pending.commit().await?;
    let mut resp = StatusCode::OK.into_response();
    crate::read::local::object_headers(t, bck, &meta, resp.headers_mut());
    Ok(resp)
}

/// Write-through DELETE: the backend first; the cached copy goes only if that succeeded.
pub(crate) async fn delete_object(t: &Target, bck: &Bck, name: &str) -> ApiResult {
    let backend = t.backend(bck)?;
    backend.delete(bck, name).await?;
    t.partials.remove(&bck.object_uname(name));
    // The cached copy goes everywhere it may be (past owners, replicas), with a tombstone, so
    // no late transfer brings the deleted object back into the cache.
    match crate::write::local::delete_object(t, bck, name).await {
        Ok(()) => {}
        Err(e) if e.kind == gristmill_core::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(StatusCode::OK.into_response())
}
