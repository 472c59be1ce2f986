//! Object routes (`/v1/objects`, multipart staging `/v1/mpu`): routing, then the read and
//! write paths.

use super::route::{Params, Routed};
use crate::ApiResult;
use crate::Target;
use crate::read::local::{ReadRequest, object_headers};
use axum::extract::{Path, Query, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::IntoResponse;
use gristmill_core::ApiError;
use std::sync::Arc;

// The paths other than a GET are boxed: their futures are large (up to 17 KB), and a GET
// would otherwise move the largest of them with every request (axum boxes the handler's).

/// A GET through the read path, with the request's query, headers and connection.
async fn get(
    t: &Target,
    bck: &gristmill_core::Bck,
    name: &str,
    read: crate::read::local::ReadRequest<'_>,
) -> ApiResult {
    crate::read::get_object(t, bck, name, &read).await
}

pub(crate) async fn object(
    State(t): State<Arc<Target>>,
    Path((bucket, name)): Path<(String, String)>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    let (bck, admitted) = match t
        .route_object(&bucket, &name, &params, req.method(), req.uri())
        .await?
    {
        Routed::Here(bck, admitted) => (bck, admitted),
        Routed::Elsewhere(redirect) => return Ok(redirect),
    };
    let remote = bck.is_remote();
    if let Some(id) = params.get(gristmill_core::api::query::VERSION_ID) {
        return Box::pin(crate::write::local::one_version(
            &t, &bck, &name, id, &params, req, false,
        ))
        .await;
    }
    if !remote && matches!(*req.method(), Method::GET | Method::HEAD) {
        let method = req.method().clone();
        crate::read::returning::verify_before_serving(&t, &bck, &name).await?;
        let local = if method == Method::GET {
            get(&t, &bck, &name, ReadRequest::of(&params, &req)).await
        } else {
            crate::read::local::head_object(&t, &bck, &name, req.headers())
        };
        let found = match local {
            Err(e) if e.kind == gristmill_core::ErrorKind::NotFound => {
                match crate::read::past_owner::fetch_from_past_owner(
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
                        let again = get(&t, &bck, &name, ReadRequest::of(&params, &req)).await;
                        if again.is_err() {
                            tracing::debug!(object = %name, smap = t.smap().version, "GET: not here nor at a past owner");
                        }
                        again
                    }
                    None => crate::read::local::head_object(&t, &bck, &name, req.headers()),
                }
            }
            other => other,
        };
        return match found {
            Err(e) if e.kind == gristmill_core::ErrorKind::NotFound => {
                if let Some(holder) = crate::cluster::placement::restarting_holder(&t, &bck, &name)
                {
                    return Err(crate::cluster::placement::restarting_refusal(
                        &bck, &name, &holder,
                    ));
                }
                Ok(crate::write::local::not_found_in_versions(
                    &t, &bck, &name, e,
                ))
            }
            other => other,
        };
    }
    match *req.method() {
        Method::GET => get(&t, &bck, &name, ReadRequest::of(&params, &req)).await,
        Method::HEAD if remote => {
            crate::read::remote::head_object(&t, &bck, &name, req.headers()).await
        }
        Method::HEAD => crate::read::local::head_object(&t, &bck, &name, req.headers()),
        Method::PUT if params.contains_key(gristmill_core::shards::query::ARCHPATH) => {
            Box::pin(crate::shards::append(&t, &bck, &name, &params, req)).await
        }
        Method::PUT if remote => {
            Box::pin(crate::write::remote::put_object(&t, &bck, &name, req)).await
        }
        Method::PUT => {
            let placed_by =
                crate::cluster::gate::Admission::placed_by(admitted.as_ref(), || t.smap());
            let resp = Box::pin(crate::write::local::put_object(
                &t, &placed_by, &bck, &name, req,
            ))
            .await?;
            crate::shards::after_put(&t, &bck, &name);
            Ok(resp)
        }
        Method::PATCH if remote => Err(ApiError::bad_request(format!(
            "changing the metadata of {bck}/{name} in place: not supported for remote buckets"
        ))),
        Method::PATCH => Box::pin(crate::write::local::patch_custom(&t, &bck, &name, req)).await,
        Method::DELETE if remote => {
            Box::pin(crate::write::remote::delete_object(&t, &bck, &name)).await
        }
        Method::DELETE => {
            let resp = Box::pin(crate::write::local::delete_native(&t, &bck, &name)).await?;
            crate::shards::after_delete(&t, &bck, &name);
            Ok(resp)
        }
        _ => Err(ApiError::new(
            gristmill_core::ErrorKind::MethodNotAllowed,
            format!("{} is not supported on objects", req.method()),
        )),
    }
}

/// The answer to a repeated completion: the object's headers while it is still the one that
/// completion made, else just its ETag.
fn completed_again(
    t: &Target,
    bck: &gristmill_core::Bck,
    name: &str,
    done: &crate::store::multipart::Completed,
) -> axum::response::Response {
    let mut resp = StatusCode::OK.into_response();
    match t.store.head(bck, name) {
        Ok(meta) if meta.custom.get(crate::store::ETAG_KEY) == Some(&done.etag) => {
            object_headers(t, bck, &meta, resp.headers_mut());
        }
        _ => {
            if let Ok(v) = axum::http::HeaderValue::from_str(&format!("\"{}\"", done.etag)) {
                resp.headers_mut().insert(header::ETAG, v);
            }
        }
    }
    resp
}

#[derive(serde::Deserialize)]
pub(crate) struct CompleteBody {
    parts: Vec<(u32, String)>,
    /// The part checksums the client listed (of the upload's algorithm), by part number.
    #[serde(default)]
    checksums: std::collections::BTreeMap<u32, String>,
    /// The whole object's checksum the client declared (`x-amz-checksum-*` → value).
    #[serde(default)]
    object_checksums: std::collections::BTreeMap<String, String>,
}

/// Multipart staging for the S3 front (`/v1/mpu/{bucket}/{object}`):
/// `POST ?op=create` (body: metadata JSON) → upload; `PUT ?upload_id=&part=` → part;
/// `GET ?upload_id=` → parts; `POST ?op=complete&upload_id=` (body: `{"parts":[[n,etag]...]}`)
/// → object; `DELETE ?upload_id=` → abort.
pub(crate) async fn multipart(
    State(t): State<Arc<Target>>,
    Path((bucket, name)): Path<(String, String)>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    let (bck, admitted) = match t
        .route_object(&bucket, &name, &params, req.method(), req.uri())
        .await?
    {
        Routed::Here(bck, admitted) => (bck, admitted),
        Routed::Elsewhere(redirect) => return Ok(redirect),
    };
    let upload_id = params.get("upload_id").cloned().unwrap_or_default();
    let op = params.get("op").map(String::as_str).unwrap_or("");
    if op != "create" {
        // Begun under another owner: its parts come here first.
        crate::cluster::uploads::bring_here(&t, &bck, &name, &upload_id).await?;
    }
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
            let checksum = params
                .get("checksum_algorithm")
                .map(|a| {
                    crate::store::multipart::UploadChecksum::new(
                        a,
                        params.get("checksum_type").map(String::as_str),
                    )
                })
                .transpose()?;
            let info = t.store.mpu_create(&bck, &name, custom, checksum).await?;
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
            let algorithms: Vec<String> = req
                .headers()
                .get(gristmill_core::api::header::S3_CHECKSUMS)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.split(',').map(|a| a.trim().to_owned()).collect())
                .unwrap_or_default();
            let sse_key_check = header_string(req.headers(), gristmill_core::sse::KEY_CHECK_KEY);
            let sse_iv = header_string(req.headers(), gristmill_core::sse::IV_KEY);
            let sse = match (&sse_key_check, &sse_iv) {
                (Some(check), Some(iv)) => Some((check.as_str(), iv.as_str())),
                (None, None) => None,
                _ => {
                    return Err(ApiError::bad_request(
                        "an SSE-C part needs its key check and its IV",
                    ));
                }
            };
            let info = t
                .store
                .mpu_put_part(
                    &bck,
                    &name,
                    &upload_id,
                    part,
                    req.into_body().into_data_stream(),
                    expected,
                    &algorithms,
                    sse,
                )
                .await?;
            Ok(axum::Json(info).into_response())
        }
        (Method::GET, _) => {
            // The upload's custom metadata rides along (its initiator, for S3's ListParts).
            let (parts, info) = t.store.mpu_parts_and_info(&bck, &name, &upload_id).await?;
            let mut resp = axum::Json(parts).into_response();
            if let Ok(v) = axum::http::HeaderValue::from_str(
                &gristmill_core::api::encode_custom_md(&info.custom),
            ) {
                resp.headers_mut()
                    .insert(gristmill_core::api::header::CUSTOM_MD_JSON, v);
            }
            Ok(resp)
        }
        (Method::POST, "complete") => {
            let condition = crate::write::local::write_condition(req.headers())?;
            let body = axum::body::to_bytes(req.into_body(), 16 << 20)
                .await
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            let parts: CompleteBody = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("invalid parts list: {e}")))?;
            // One completion of an upload at a time: a retry sent while the first is still
            // assembling waits, then gets the first one's answer (below).
            let lock = t.uploads.of(&upload_id);
            let _one_at_a_time = lock.lock().await;
            // Ordered after any copy a rebalance has not moved yet, and conditional, like a PUT.
            let elsewhere = crate::cluster::placement::elsewhere(&t, &bck, &name).await?;
            crate::write::local::replaced_version_is_here(&t, &bck, &name, &elsewhere)?;
            let condition =
                crate::write::local::decide_here(&t, &bck, &name, condition, &elsewhere)?;
            let floor = elsewhere.write_floor();
            let assembled = t
                .store
                .mpu_assemble(
                    &bck,
                    &name,
                    &upload_id,
                    &parts.parts,
                    &parts.checksums,
                    &parts.object_checksums,
                    !bck.is_remote(),
                    floor,
                )
                .await;
            let mut assembled = match assembled {
                Ok(a) => a,
                Err(crate::StoreError::Api(e))
                    if e.kind == gristmill_core::ErrorKind::NoSuchUpload =>
                {
                    // A retry of a completion whose answer was lost gets the same answer.
                    return match t.store.mpu_completed(&bck, &name, &upload_id).await {
                        Some(done) if done.same_parts(&parts.parts) => {
                            Ok(completed_again(&t, &bck, &name, &done))
                        }
                        _ => Err(e),
                    };
                }
                Err(e) => return Err(e.into()),
            };
            assembled.pending.options_mut().condition = condition;
            crate::write::local::version_custom(
                &t,
                &bck,
                &mut assembled.pending.options_mut().custom,
            );
            // Like a PUT: staged on the replicas first, visible only once every copy is
            // stored; a failure leaves the previous version (and the parts, for a retry).
            let meta =
                crate::write::local::commit_with_replicas(&t, &bck, &name, assembled.pending)
                    .await?;
            let placed_by =
                crate::cluster::gate::Admission::placed_by(admitted.as_ref(), || t.smap());
            crate::cluster::placement::count_hinted(&t, &placed_by, &bck, &name, meta.size);
            crate::cluster::placement::retire_copies(&t, &bck, &name, &elsewhere).await;
            assembled.done.completed_ns = crate::store::now_ns();
            t.store.mpu_finish(&assembled.dir, &assembled.done).await;
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

/// A header's value as a string, if it has a readable one.
fn header_string(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    Some(headers.get(name)?.to_str().ok()?.to_owned())
}

#[cfg(test)]
mod tests {
    fn future_size<A, B, C, D, F>(_: impl Fn(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// axum moves a handler's future into a box on every request, and a future is as large as
    /// the largest path it may take: the object handler's was 17.9 KB (a PUT's), copied by
    /// every GET, before the paths other than a warm GET were boxed (3.6 KB).
    #[test]
    fn the_object_handler_future_stays_small() {
        let object = future_size(super::object);
        let get = future_size(crate::read::get_object);
        assert!(object <= 8 * 1024, "object handler future: {object} bytes");
        assert!(get <= 4 * 1024, "read path future: {get} bytes");
    }
}
