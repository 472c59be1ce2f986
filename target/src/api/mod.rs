//! The target's HTTP API: the router, and handlers by area (objects, buckets, jobs, internal
//! node-to-node routes, node). Handlers parse requests and call the read and write paths,
//! the jobs and the cluster code; nothing below `api` imports from it.

pub(crate) mod buckets;
mod internal;
mod jobs;
pub(crate) mod node;
pub(crate) mod objects;
pub(crate) mod route;
#[cfg(test)]
mod router_tests;
use crate::Target;
use axum::Router;
use axum::routing::{any, get, put};
use buckets::{cached_names, list_objects, list_uploads, remote_bucket};
use internal::{internal_object, metasync, placed};
use jobs::{abort_job, etl_logs, etl_stats, job_snaps, start_job};
use node::{daemon, s3_relay};
use objects::{multipart, object};
use std::sync::Arc;

pub(crate) fn router(target: Arc<Target>) -> Router {
    let router = Router::new()
        .route("/v1/objects/{bucket}/{*object}", any(object))
        .route(
            "/v1/internal/objects/{bucket}/{*object}",
            any(internal_object),
        )
        .route("/v1/internal/placed", put(placed))
        .route(
            "/v1/internal/mpu/{bucket}/{*object}",
            any(crate::cluster::uploads::internal),
        )
        .route(
            "/v1/objects/{bucket}",
            any(gristmill_node::server::empty_object_name),
        )
        .route(
            "/v1/objects/{bucket}/",
            any(gristmill_node::server::empty_object_name),
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
        .route("/v1/daemon", get(daemon))
        .route(
            "/v1/daemon/set-config",
            put(gristmill_node::settings::set_endpoint),
        )
        .route(
            "/v1/daemon/mountpaths",
            put(crate::cluster::resilver::change),
        )
        .route("/v1/health", get(node::health))
        .route("/metrics", get(gristmill_node::server::metrics_endpoint));
    let router = router.merge(crate::shards::routes());
    gristmill_node::server::with_fallbacks(router)
        // Outside `/v1/`: S3 requests, relayed to the primary proxy's S3 front.
        .fallback(s3_relay)
        .layer(axum::middleware::from_fn(
            gristmill_node::server::track_requests,
        ))
        .with_state(target)
}
