//! ETL management on the proxy: definitions live in the bucket metadata (so every target gets
//! them with the usual push and starts its workers); status and logs are gathered from the
//! targets.
//!
//! `PUT /v1/etl` (a definition; replaces one of the same name), `GET /v1/etl`,
//! `GET /v1/etl/{name}`, `POST /v1/etl/{name}/stop|start`, `DELETE /v1/etl/{name}`,
//! `GET /v1/etl/{name}/logs`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gristmill_core::ApiError;
use gristmill_core::etl::EtlSpec;
use serde_json::{Value, json};

use crate::meta::{Changed, Proxy};

type ApiResult = Result<Response, ApiError>;

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("ETL {name:?} does not exist"))
}

fn bmd_changed() -> Changed {
    Changed {
        smap: false,
        bmd: true,
    }
}

/// `PUT /v1/etl`: defines (or redefines) an ETL; every target starts it.
pub(crate) async fn init(State(p): State<Arc<Proxy>>, body: Bytes) -> ApiResult {
    let spec: EtlSpec = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid ETL definition: {e}")))?;
    spec.validate()?;
    let name = spec.name.clone();
    p.change(|_, bmd| {
        bmd.etls.insert(spec.name.clone(), spec);
        Ok(bmd_changed())
    })
    .await?;
    tracing::info!(etl = %name, "ETL defined");
    Ok((StatusCode::OK, name).into_response())
}

/// Each target's counters for ETLs, by node.
async fn target_stats(p: &Proxy) -> Vec<(String, Vec<Value>)> {
    let smap = p.smap();
    let asks = smap.active_targets().map(|t| {
        let req = p.http.get(format!("{}/v1/etl", t.url())).send();
        let id = t.daemon_id.clone();
        async move {
            let stats = match req.await {
                Ok(r) if r.status().is_success() => {
                    r.json::<Vec<Value>>().await.unwrap_or_default()
                }
                _ => Vec::new(),
            };
            (id, stats)
        }
    });
    futures::future::join_all(asks).await
}

fn describe(spec: &EtlSpec, stats: &[(String, Vec<Value>)]) -> Value {
    let mut per_target = serde_json::Map::new();
    let (mut objects, mut errors) = (0u64, 0u64);
    for (node, list) in stats {
        if let Some(s) = list.iter().find(|s| s["name"] == spec.name.as_str()) {
            objects += s["objects"].as_u64().unwrap_or(0);
            errors += s["errors"].as_u64().unwrap_or(0);
            per_target.insert(node.clone(), s.clone());
        }
    }
    json!({
        "name": spec.name,
        "runtime": spec.runtime,
        "running": spec.running,
        "objects": objects,
        "errors": errors,
        "targets": per_target,
        "spec": spec,
    })
}

/// `GET /v1/etl`: every ETL with its totals.
pub(crate) async fn list(State(p): State<Arc<Proxy>>) -> ApiResult {
    p.linearize().await?;
    let stats = target_stats(&p).await;
    let all: Vec<Value> = p.bmd().etls.values().map(|s| describe(s, &stats)).collect();
    Ok(axum::Json(all).into_response())
}

/// `GET /v1/etl/{name}`.
pub(crate) async fn show(State(p): State<Arc<Proxy>>, Path(name): Path<String>) -> ApiResult {
    p.linearize().await?;
    let bmd = p.bmd();
    let spec = bmd.etls.get(&name).ok_or_else(|| not_found(&name))?;
    let stats = target_stats(&p).await;
    Ok(axum::Json(describe(spec, &stats)).into_response())
}

/// `POST /v1/etl/{name}/stop|start`.
pub(crate) async fn control(
    State(p): State<Arc<Proxy>>,
    Path((name, op)): Path<(String, String)>,
) -> ApiResult {
    let running = match op.as_str() {
        "start" => true,
        "stop" => false,
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown ETL operation {other:?} (start, stop)"
            )));
        }
    };
    p.change(|_, bmd| {
        let spec = bmd.etls.get_mut(&name).ok_or_else(|| not_found(&name))?;
        spec.running = running;
        Ok(bmd_changed())
    })
    .await?;
    tracing::info!(etl = %name, running, "ETL state changed");
    Ok(StatusCode::OK.into_response())
}

/// `DELETE /v1/etl/{name}`.
pub(crate) async fn remove(State(p): State<Arc<Proxy>>, Path(name): Path<String>) -> ApiResult {
    p.change(|_, bmd| {
        bmd.etls.remove(&name).ok_or_else(|| not_found(&name))?;
        Ok(bmd_changed())
    })
    .await?;
    tracing::info!(etl = %name, "ETL removed");
    Ok(StatusCode::OK.into_response())
}

/// `GET /v1/etl/{name}/logs`: `{node: [lines]}`.
pub(crate) async fn logs(State(p): State<Arc<Proxy>>, Path(name): Path<String>) -> ApiResult {
    if !p.bmd().etls.contains_key(&name) {
        return Err(not_found(&name));
    }
    let smap = p.smap();
    let asks = smap.active_targets().map(|t| {
        let req = p.http.get(format!("{}/v1/etl/{name}/logs", t.url())).send();
        let id = t.daemon_id.clone();
        async move {
            let lines = match req.await {
                Ok(r) if r.status().is_success() => {
                    r.json::<Vec<String>>().await.unwrap_or_default()
                }
                _ => Vec::new(),
            };
            (id, lines)
        }
    });
    let by_node: serde_json::Map<String, Value> = futures::future::join_all(asks)
        .await
        .into_iter()
        .map(|(id, lines)| (id, json!(lines)))
        .collect();
    Ok(axum::Json(by_node).into_response())
}
