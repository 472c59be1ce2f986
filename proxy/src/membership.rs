//! Membership: the primary registers nodes and records their keepalives; a non-primary proxy
//! registers itself with the primary and keeps sending keepalives.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gristmill_core::api::Keepalive;
use gristmill_core::smap::{self, Node};
use gristmill_core::{ApiError, MetaSync};
use tokio_util::sync::CancellationToken;

use crate::meta::{Changed, Proxy};

/// Registers `node` (primary only). Re-registering with the same URL changes nothing; a new id at
/// a known URL replaces the node that was there.
pub(crate) async fn register(proxy: &Proxy, mut node: Node) -> Result<MetaSync, ApiError> {
    if node.daemon_id.is_empty() || node.url().is_empty() {
        return Err(ApiError::bad_request("join: node id and URL are required"));
    }
    let is_target = match node.daemon_type.as_str() {
        smap::TARGET => true,
        smap::PROXY => false,
        other => {
            return Err(ApiError::bad_request(format!(
                "join: unknown node type {other:?}"
            )));
        }
    };
    node.id_digest = gristmill_core::hrw::digest(&node.daemon_id);
    proxy
        .change(|smap, _| {
            let map = if is_target {
                &mut smap.tmap
            } else {
                &mut smap.pmap
            };
            if let Some(existing) = map.get(&node.daemon_id) {
                // Keep flags (maintenance...) the cluster set; only the address may change.
                node.flags = existing.flags;
                if *existing == node {
                    return Ok(Changed::default());
                }
            }
            map.retain(|id, n| id == &node.daemon_id || n.url() != node.url());
            map.insert(node.daemon_id.clone(), node.clone());
            Ok(Changed {
                smap: true,
                bmd: false,
            })
        })
        .await?;
    proxy.heard_from(&node.daemon_id);
    tracing::info!(node = %node.daemon_id, url = %node.url(), "node registered");
    Ok(proxy.newer_than(0, 0))
}

/// Handles a keepalive: `None` when the sender is not in the cluster map.
pub(crate) fn keepalive(proxy: &Proxy, ka: &Keepalive) -> Option<MetaSync> {
    proxy.smap().node(&ka.id)?;
    proxy.heard_from(&ka.id);
    Some(proxy.newer_than(ka.smap_version, ka.bmd_version))
}

impl Proxy {
    pub(crate) fn heard_from(&self, id: &str) {
        self.last_heard
            .lock()
            .expect("last_heard lock")
            .insert(id.to_owned(), Instant::now());
    }
}

/// Background duties: a non-primary joins the primary and sends keepalives; the primary notes
/// nodes it has not heard from (removing them is the failure detector's job).
pub(crate) async fn run(
    proxy: Arc<Proxy>,
    join_url: String,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut joined = join_url.is_empty();
    loop {
        if !joined {
            joined = join(&proxy, &join_url).await;
        } else if !proxy.is_primary() {
            joined = send_keepalive(&proxy).await;
        } else {
            report_silent_nodes(&proxy, interval);
        }
        let pause = if joined {
            interval
        } else {
            Duration::from_millis(300)
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

async fn join(proxy: &Proxy, join_url: &str) -> bool {
    let me = Node::new(&proxy.id, smap::PROXY, &proxy.url);
    let resp = proxy
        .http
        .post(format!("{join_url}/v1/cluster/join"))
        .json(&me)
        .send()
        .await;
    match resp {
        Ok(r) if r.status().is_success() => match r.json::<MetaSync>().await {
            Ok(sync) => proxy.apply(sync).await.is_ok(),
            Err(_) => false,
        },
        _ => false,
    }
}

/// Returns false when the primary no longer knows us (re-join).
async fn send_keepalive(proxy: &Proxy) -> bool {
    let ka = Keepalive {
        id: proxy.id.clone(),
        smap_version: proxy.smap().version,
        bmd_version: proxy.bmd().version,
    };
    let resp = proxy
        .http
        .post(format!("{}/v1/cluster/keepalive", proxy.primary_url()))
        .json(&ka)
        .send()
        .await;
    match resp {
        Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => false,
        Ok(r) if r.status().is_success() => {
            if let Ok(sync) = r.json::<MetaSync>().await {
                let _ = proxy.apply(sync).await;
            }
            true
        }
        Ok(r) => {
            tracing::warn!(status = %r.status(), "keepalive refused");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "keepalive to primary failed");
            true
        }
    }
}

fn report_silent_nodes(proxy: &Proxy, interval: Duration) {
    let smap = proxy.smap();
    let heard = proxy.last_heard.lock().expect("last_heard lock");
    for node in smap.tmap.values() {
        let silent = heard
            .get(&node.daemon_id)
            .is_none_or(|t| t.elapsed() > interval * 3);
        if silent {
            tracing::debug!(node = %node.daemon_id, "no keepalive recently");
        }
    }
}
