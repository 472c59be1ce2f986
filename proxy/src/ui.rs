//! The dashboard: a small web UI at `/ui/` (static assets embedded in the binary) and the one
//! query it needs that no other endpoint answers, `GET /v1/cluster?what=overview`: every node
//! of the map with its state, performance and capacity, and the buckets' sizes, gathered by
//! the proxy so that a browser needs to reach only it.
//!
//! The assets are public (they hold no data); every API call the page makes carries the token
//! its login form obtained and is checked like `grist`'s.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use gristmill_core::ApiError;
use gristmill_core::perf::{NodePerf, Scrape, node_perf};
use gristmill_core::smap::{FLAG_DECOMMISSION, FLAG_MAINTENANCE, Node, PROXY};
use serde::Serialize;
use serde_json::Value;

use crate::meta::Proxy;

/// The embedded assets, by file name.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../ui/style.css"),
    ),
];

/// How long the overview waits for one node before showing it as not answering.
const NODE_TIMEOUT: Duration = Duration::from_secs(3);

/// `/ui`, `/ui/` and `/ui/{file}`. With `dir`, the files are read from there at each request
/// (`gristd proxy --ui-dir`, for working on the page without rebuilding).
pub(crate) fn routes(dir: Option<PathBuf>) -> Router {
    let dir = Arc::new(dir);
    let index = dir.clone();
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route(
            "/ui/",
            get(move || asset(index.clone(), "index.html".to_owned())),
        )
        .route(
            "/ui/{file}",
            get(move |Path(file): Path<String>| asset(dir.clone(), file)),
        )
}

async fn asset(dir: Arc<Option<PathBuf>>, file: String) -> Response {
    let Some(&(name, mime, embedded)) = ASSETS.iter().find(|(n, _, _)| *n == file) else {
        return ApiError::not_found(format!("no such file: /ui/{file}")).into_response();
    };
    let body = match dir.as_ref() {
        Some(dir) => match tokio::fs::read(dir.join(name)).await {
            Ok(bytes) => bytes,
            Err(e) => {
                return ApiError::internal(format!("reading {}: {e}", dir.join(name).display()))
                    .into_response();
            }
        },
        None => embedded.to_vec(),
    };
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, mime),
            // The page is small; stale assets after an upgrade would be worse than refetching.
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// The previous scrape of each node, so that each overview reports rates over the interval
/// since the one before (a page polling every few seconds sees live numbers).
#[derive(Default)]
pub(crate) struct Scrapes(Mutex<HashMap<String, Scrape>>);

#[derive(Serialize)]
struct Overview {
    smap_version: u64,
    primary: String,
    /// Seconds since the previous overview's scrape (the rates' interval); none the first time.
    interval_s: Option<f64>,
    nodes: Vec<NodeView>,
    buckets: Vec<BucketView>,
}

#[derive(Serialize)]
struct NodeView {
    id: String,
    role: String,
    url: String,
    flags: Vec<&'static str>,
    up: bool,
    error: Option<String>,
    perf: Option<NodePerf>,
    mountpaths: Vec<Value>,
}

#[derive(Serialize)]
struct BucketView {
    bucket: String,
    /// Summed over targets, replicas included.
    objects: u64,
    bytes: u64,
}

/// What one node said: its metrics and (targets) its space report.
struct Answer {
    node: Node,
    metrics: Result<Scrape, String>,
    space: Option<Value>,
}

/// `GET /v1/cluster?what=overview`.
pub(crate) async fn overview(p: &Arc<Proxy>) -> Result<Response, ApiError> {
    let smap = p.smap();
    let nodes: Vec<Node> = smap
        .pmap
        .values()
        .chain(smap.tmap.values())
        .cloned()
        .collect();
    let answers = futures::future::join_all(nodes.into_iter().map(|n| ask(p, n))).await;

    let mut interval_s = None;
    let mut views = Vec::with_capacity(answers.len());
    let mut buckets: HashMap<String, (u64, u64)> = HashMap::new();
    for a in answers {
        let mut flags = Vec::new();
        if a.node.flags & FLAG_MAINTENANCE != 0 {
            flags.push("maintenance");
        }
        if a.node.flags & FLAG_DECOMMISSION != 0 {
            flags.push("decommission");
        }
        let (perf, error) = match a.metrics {
            Ok(now) => {
                let mut previous = p.scrapes.0.lock().expect("scrapes lock");
                let perf = previous.get(&a.node.daemon_id).map(|before| {
                    let dt = now.at().duration_since(before.at()).as_secs_f64();
                    interval_s = Some(f64::max(interval_s.unwrap_or(0.0), dt));
                    node_perf(&a.node.daemon_id, &a.node.daemon_type, before, &now)
                });
                previous.insert(a.node.daemon_id.clone(), now);
                (perf, None)
            }
            Err(e) => (None, Some(e)),
        };
        let mut mountpaths = Vec::new();
        if let Some(space) = &a.space {
            if let Some(mps) = space["mountpaths"].as_array() {
                mountpaths = mps.clone();
            }
            let counts = &space["bucket_objects"];
            if let Some(bytes) = space["buckets"].as_object() {
                for (uname, b) in bytes {
                    let sum = buckets.entry(uname.clone()).or_default();
                    sum.0 += counts[uname].as_u64().unwrap_or(0);
                    sum.1 += b.as_u64().unwrap_or(0);
                }
            }
        }
        views.push(NodeView {
            id: a.node.daemon_id.clone(),
            role: a.node.daemon_type.clone(),
            url: a.node.url().to_owned(),
            flags,
            up: error.is_none(),
            error,
            perf,
            mountpaths,
        });
    }
    // Nodes gone from the map are forgotten.
    p.scrapes
        .0
        .lock()
        .expect("scrapes lock")
        .retain(|id, _| smap.pmap.contains_key(id) || smap.tmap.contains_key(id));

    let bmd = p.bmd();
    let buckets = bmd
        .buckets
        .iter()
        .map(|(uname, rec)| {
            let (objects, bytes) = buckets.get(uname).copied().unwrap_or_default();
            BucketView {
                bucket: rec.bck.to_string(),
                objects,
                bytes,
            }
        })
        .collect();
    Ok(axum::Json(Overview {
        smap_version: smap.version,
        primary: smap.proxy_si.daemon_id.clone(),
        interval_s,
        nodes: views,
        buckets,
    })
    .into_response())
}

async fn ask(p: &Proxy, node: Node) -> Answer {
    let url = node.url().to_owned();
    let metrics = async {
        let resp = p
            .http
            .get(format!("{url}/metrics"))
            .timeout(NODE_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("no answer: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("/metrics answered {}", resp.status()));
        }
        let text = resp.text().await.map_err(|e| e.to_string())?;
        Ok(Scrape::parse(&text))
    };
    let space = async {
        if node.daemon_type == PROXY {
            return None;
        }
        let resp = p
            .http
            .get(format!("{url}/v1/daemon"))
            .query(&[("what", "space")])
            .timeout(NODE_TIMEOUT)
            .send()
            .await
            .ok()?;
        resp.error_for_status().ok()?.json::<Value>().await.ok()
    };
    let (metrics, space) = tokio::join!(metrics, space);
    Answer {
        node,
        metrics,
        space,
    }
}
