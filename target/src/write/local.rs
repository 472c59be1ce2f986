//! Writes on the owner: PUT (ordered after every copy a rebalance has not moved yet, staged on
//! replicas before it is visible) and DELETE (a tombstone everywhere a copy may be).

use crate::ApiResult;
use crate::Target;
use crate::read::local::object_headers;
use crate::store::PutOptions;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use gristmill_core::api::{self, header as h};
use gristmill_core::{ApiError, Bck};

/// DELETE on the owner: buries the object here (a tombstone one generation past every copy
/// known, here and on past owners), then deletes it on every other possible holder with that
/// tombstone's generation. `NotFound` only if no node held it.
pub(crate) async fn delete_object(t: &Target, bck: &Bck, name: &str) -> Result<(), ApiError> {
    let floor = crate::cluster::placement::gen_floor(t, bck, name).await?;
    let (removed, tombstone) = t
        .store
        .bury(bck, name, crate::store::index::BuryGen::Next { floor })
        .await?;
    let elsewhere = crate::cluster::placement::delete_everywhere(t, bck, name, tombstone).await?;
    if removed.is_none() && !elsewhere {
        return Err(ApiError::not_found(format!(
            "object {bck}/{name} does not exist"
        )));
    }
    Ok(())
}

pub(crate) async fn put_object(t: &Target, bck: &Bck, name: &str, req: Request) -> ApiResult {
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
    let floor = crate::cluster::placement::gen_floor(t, bck, name).await?;
    let opts = PutOptions {
        generation: crate::store::index::GenRule::Next { floor },
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
    let meta = crate::cluster::replicas::commit_with_replicas(t, bck, name, pending).await?;
    let mut resp = StatusCode::OK.into_response();
    object_headers(t, bck, &meta, resp.headers_mut());
    Ok(resp)
}
