//! The cluster's configuration and logs through any proxy (`grist config`, `grist log`):
//! each node answers for itself (`gristmill_node::settings`); the proxy asks every node in the
//! map, or the one named by `node=`, so a client needs no route to each node.
//! - `GET /v1/cluster?what=config[&node=ID]` → `{ID: node's answer | {"error": why}}`;
//! - `GET /v1/cluster?what=log&node=ID[&lines=N]` → that node's recent log, text;
//! - `PUT /v1/cluster/set-config?key=value&...[&node=ID][&transient=true]`: without `node`,
//!   each node gets the keys it can change at run time (space settings go to targets, log
//!   settings everywhere); a key no node takes is refused before anything changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use gristmill_core::ApiError;
use gristmill_core::smap::Node;
use serde_json::{Value, json};

use crate::meta::Proxy;

/// How long one node may take to answer.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// Nodes named by `node=` (one, or 404), else every node in the map.
fn nodes(p: &Proxy, params: &HashMap<String, String>) -> Result<Vec<Node>, ApiError> {
    let smap = p.smap();
    let all = smap.pmap.values().chain(smap.tmap.values());
    match params.get("node") {
        Some(id) => all
            .filter(|n| &n.daemon_id == id)
            .cloned()
            .map(|n| vec![n])
            .next()
            .ok_or_else(|| ApiError::not_found(format!("no node {id} in the cluster map"))),
        None => Ok(all.cloned().collect()),
    }
}

async fn node_config(p: &Proxy, node: &Node) -> Result<Value, ApiError> {
    let what = format!("node {}", node.daemon_id);
    let resp = p
        .http
        .get(format!("{}/v1/daemon", node.url()))
        .query(&[("what", "config")])
        .timeout(NODE_TIMEOUT)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("{what}: no answer: {e}")))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| ApiError::unavailable(format!("{what}: {e}")))?;
    if !status.is_success() {
        return Err(ApiError::from_peer(status.as_u16(), &body, &what));
    }
    serde_json::from_slice(&body).map_err(|e| ApiError::internal(format!("{what}: {e}")))
}

/// `GET /v1/cluster?what=config`.
pub(crate) async fn show(
    p: &Arc<Proxy>,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let nodes = nodes(p, params)?;
    let answers = futures::future::join_all(nodes.iter().map(|n| node_config(p, n))).await;
    let mut out = serde_json::Map::new();
    for (node, answer) in nodes.iter().zip(answers) {
        let v = answer.unwrap_or_else(|e| json!({"error": e.message}));
        out.insert(node.daemon_id.clone(), v);
    }
    Ok(axum::Json(Value::Object(out)).into_response())
}

/// `GET /v1/cluster?what=log&node=ID`.
pub(crate) async fn log(
    p: &Arc<Proxy>,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    if !params.contains_key("node") {
        return Err(ApiError::bad_request("what=log needs node=ID"));
    }
    let node = nodes(p, params)?.remove(0);
    let lines = params.get("lines").map(String::as_str).unwrap_or("200");
    let what = format!("node {}", node.daemon_id);
    let resp = p
        .http
        .get(format!("{}/v1/daemon", node.url()))
        .query(&[("what", "log"), ("lines", lines)])
        .timeout(NODE_TIMEOUT)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("{what}: no answer: {e}")))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| ApiError::unavailable(format!("{what}: {e}")))?;
    if !status.is_success() {
        return Err(ApiError::from_peer(status.as_u16(), &body, &what));
    }
    Ok(([("content-type", "text/plain; charset=utf-8")], body).into_response())
}

/// `PUT /v1/cluster/set-config`.
pub(crate) async fn set(
    State(p): State<Arc<Proxy>>,
    Query(mut params): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let nodes = nodes(&p, &params)?;
    let one_node = params.remove("node").is_some();
    let transient = params.remove(gristmill_node::settings::TRANSIENT);
    let changes: BTreeMap<String, String> = params.into_iter().collect();
    if changes.is_empty() {
        return Err(ApiError::bad_request(
            "nothing to set: give key=value query parameters (for example space.high_wm=85)",
        ));
    }
    // Which node takes which key: its own list of run-time settings.
    let configs = futures::future::join_all(nodes.iter().map(|n| node_config(&p, n))).await;
    let mut plan = Vec::new();
    let mut taken = std::collections::BTreeSet::new();
    for (node, config) in nodes.iter().zip(configs) {
        let config = config?;
        let runtime: Vec<&str> = config["runtime"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // A named node gets every key, so it says itself what it cannot take.
        let mine: Vec<(String, String)> = changes
            .iter()
            .filter(|(k, _)| one_node || runtime.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        taken.extend(mine.iter().map(|(k, _)| k.clone()));
        if !mine.is_empty() {
            plan.push((node, mine));
        }
    }
    if let Some(key) = changes.keys().find(|k| !taken.contains(*k)) {
        return Err(ApiError::bad_request(format!(
            "{key}: no node changes it at run time (see `grist config show`; other settings \
             are set in each node's config file and take effect at restart)"
        )));
    }
    let sends = plan.iter().map(|(node, mine)| {
        let mut query = mine.clone();
        if let Some(t) = &transient {
            query.push((gristmill_node::settings::TRANSIENT.to_owned(), t.clone()));
        }
        let p = &p;
        async move {
            let what = format!("node {}", node.daemon_id);
            let resp = p
                .http
                .put(format!("{}/v1/daemon/set-config", node.url()))
                .query(&query)
                .timeout(NODE_TIMEOUT)
                .send()
                .await
                .map_err(|e| ApiError::unavailable(format!("{what}: no answer: {e}")))?;
            let status = resp.status();
            if status.is_success() {
                return Ok(());
            }
            let body = resp.bytes().await.unwrap_or_default();
            Err(ApiError::from_peer(status.as_u16(), &body, &what))
        }
    });
    let results = futures::future::join_all(sends).await;
    let mut out = serde_json::Map::new();
    let (mut refused, mut changed) = (Vec::new(), Vec::new());
    let mut first_error = None;
    for ((node, _), r) in plan.iter().zip(results) {
        match r {
            Ok(()) => {
                changed.push(node.daemon_id.as_str());
                out.insert(node.daemon_id.clone(), json!("ok"));
            }
            Err(e) => {
                refused.push(node.daemon_id.as_str());
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        // Nodes that took the change keep it: say which did.
        Some(mut e) => {
            e.message = format!(
                "{}; refused by {}; changed on {}",
                e.message,
                refused.join(", "),
                if changed.is_empty() {
                    "none".to_owned()
                } else {
                    changed.join(", ")
                }
            );
            Err(e)
        }
        None => Ok(axum::Json(Value::Object(out)).into_response()),
    }
}
