//! Node-to-node routes (`/v1/internal/...`, `/v1/metasync`): the gate admits only node
//! credentials here.

use super::route::{Params, bucket_from};
use crate::ApiResult;
use crate::Target;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::IntoResponse;
use gristmill_core::api::{self, header as h, query as q};
use gristmill_core::{ApiError, MetaSync, validate_stored_name};
use std::sync::Arc;

/// `PUT /v1/internal/placed` `{"version": v}` (from the primary): every object is where map
/// `v` places it. If that is our map, the earlier ones are forgotten: reads, writes and deletes
/// stop asking their owners.
pub(crate) async fn placed(State(t): State<Arc<Target>>, body: Bytes) -> ApiResult {
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
pub(crate) async fn internal_object(
    State(t): State<Arc<Target>>,
    Path((bucket, name)): Path<(String, String)>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    let bck = bucket_from(&bucket, &params)?;
    validate_stored_name(&name)?;
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
    if let Some(id) = params.get(api::query::VERSION_ID) {
        return crate::write::local::one_version(&t, &bck, &name, id, &params, req, true).await;
    }
    let stage = params.get("stage").map(String::as_str);
    match (req.method().clone(), stage) {
        (Method::PUT, Some(stage)) => {
            crate::cluster::replicas::stage_receive(&t, &bck, &name, stage, req).await
        }
        (Method::POST, Some(stage)) => {
            let resp =
                crate::cluster::replicas::stage_commit(&t, &bck, &name, stage, req.headers())
                    .await?;
            crate::shards::after_put(&t, &bck, &name);
            Ok(resp)
        }
        (Method::DELETE, Some(stage)) => Ok(if crate::cluster::replicas::stage_abort(&t, stage) {
            StatusCode::OK.into_response()
        } else {
            StatusCode::NOT_FOUND.into_response()
        }),
        (_, Some(_)) => Err(ApiError::bad_request(
            "a stage is written with PUT, committed with POST, given up with DELETE",
        )),
        (Method::PUT, None) => match params.get(q::TRANSFER).map(String::as_str) {
            Some(kind @ (api::internal::REBALANCE | api::internal::REPLICA)) => {
                // Counted by the receiver: what a sender's restart made it send twice shows.
                let kind = if kind == api::internal::REBALANCE {
                    api::internal::REBALANCE
                } else {
                    api::internal::REPLICA
                };
                metrics::counter!("grist_transfers_received_total", "kind" => kind).increment(1);
                crate::cluster::rebalance::receive(&t, &bck, &name, req).await
            }
            other => Err(ApiError::bad_request(format!(
                "internal PUT needs {}=rebalance|replica, not {other:?}",
                q::TRANSFER
            ))),
        },
        (Method::DELETE, None) => {
            let generation = crate::cluster::peer::gen_of(req.headers());
            if generation == 0 {
                return Err(ApiError::bad_request(format!(
                    "internal DELETE needs {}",
                    h::GEN
                )));
            }
            let (removed, _) = t
                .store
                .bury(&bck, &name, crate::store::index::BuryGen::Exact(generation))
                .await?;
            if removed.is_none() {
                return Ok(tombstone());
            }
            crate::shards::after_delete(&t, &bck, &name);
            Ok(StatusCode::OK.into_response())
        }
        (Method::HEAD, None) => {
            match crate::read::local::head_object(&t, &bck, &name, req.headers()) {
                Err(e) if e.kind == gristmill_core::ErrorKind::NotFound => Ok(tombstone()),
                other => other,
            }
        }
        (Method::GET, None) => {
            match crate::read::get_object(
                &t,
                &bck,
                &name,
                &crate::read::local::ReadRequest::of(&params, &req),
            )
            .await
            {
                Err(e) if e.kind == gristmill_core::ErrorKind::NotFound => Ok(tombstone()),
                other => other,
            }
        }
        _ => Err(ApiError::new(
            gristmill_core::ErrorKind::MethodNotAllowed,
            format!(
                "{} is not supported on internal object routes",
                req.method()
            ),
        )),
    }
}

pub(crate) async fn metasync(State(t): State<Arc<Target>>, body: Bytes) -> ApiResult {
    let sync: MetaSync = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid metasync body: {e}")))?;
    t.apply_metasync(sync).await?;
    Ok(StatusCode::OK.into_response())
}
