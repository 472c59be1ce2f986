//! Job and ETL routes: start, list and abort this target's share of a job; ETL counters and
//! logs.

use super::route::Params;
use crate::ApiResult;
use crate::Target;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use gristmill_core::ApiError;
use std::sync::Arc;

/// `POST /v1/jobs` (a `JobSpec` from the primary): starts this target's share of a job.
pub(crate) async fn start_job(State(t): State<Arc<Target>>, body: Bytes) -> ApiResult {
    let spec: gristmill_core::job::JobSpec = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid job spec: {e}")))?;
    t.jobs.start(t.clone(), spec)?;
    Ok(StatusCode::OK.into_response())
}

/// `GET /v1/jobs?id=&kind=&running=true`: snapshots of this target's jobs.
pub(crate) async fn job_snaps(State(t): State<Arc<Target>>, Query(params): Params) -> ApiResult {
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
pub(crate) async fn abort_job(State(t): State<Arc<Target>>, Path(id): Path<String>) -> ApiResult {
    if t.jobs.abort(&id) {
        Ok(StatusCode::OK.into_response())
    } else {
        Err(gristmill_core::job::job_not_found(&id))
    }
}

/// `GET /v1/etl`: counters of this target's ETLs.
pub(crate) async fn etl_stats(State(t): State<Arc<Target>>) -> ApiResult {
    Ok(axum::Json(t.etls.stats()).into_response())
}

/// `GET /v1/etl/{name}/logs`: recent output of this target's workers of an ETL.
pub(crate) async fn etl_logs(State(t): State<Arc<Target>>, Path(name): Path<String>) -> ApiResult {
    let lines = t.etls.logs(&name).map_err(ApiError::from)?;
    Ok(axum::Json(lines).into_response())
}
