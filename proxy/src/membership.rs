//! Membership: the primary registers nodes and records their keepalives; a non-primary proxy
//! registers itself with the primary and keeps sending keepalives.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gristmill_core::api::Keepalive;
use gristmill_core::smap::{self, Node};
use gristmill_core::{ApiError, MetaSync};
use tokio_util::sync::CancellationToken;

use crate::meta::{Changed, Proxy};

/// Ids of nodes an administrator removed, kept in `removed.json` in the proxy's state
/// directory: a removed node that is still running must not walk back in through its own
/// keepalives or join retries (that would undo the removal within a keepalive interval).
pub(crate) struct Removed {
    path: std::path::PathBuf,
    ids: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Removed {
    pub(crate) fn load(state_dir: &std::path::Path) -> Self {
        let path = state_dir.join("removed.json");
        let ids = gristmill_core::persist::load_json(&path)
            .ok()
            .flatten()
            .unwrap_or_default();
        Self {
            path,
            ids: std::sync::Mutex::new(ids),
        }
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.ids.lock().expect("removed lock").contains(id)
    }

    /// The refusal a removed node gets (409: the node stops retrying until re-added).
    pub(crate) fn refusal(id: &str) -> ApiError {
        ApiError::new(
            gristmill_core::ErrorKind::Conflict,
            format!(
                "node {id} was removed from the cluster by an administrator \
                 (`grist cluster add URL` adds it back)"
            ),
        )
    }

    fn set(&self, id: &str, removed: bool) {
        let mut ids = self.ids.lock().expect("removed lock");
        let changed = if removed {
            ids.insert(id.to_owned())
        } else {
            ids.remove(id)
        };
        if changed && let Err(e) = gristmill_core::persist::save_json(&self.path, &*ids) {
            tracing::warn!(error = %e, "could not persist the removed-node list");
        }
    }
}

/// Registers `node` (primary only). Re-registering with the same URL changes nothing; a new id at
/// a known URL replaces the node that was there.
pub(crate) async fn register(proxy: &Proxy, mut node: Node) -> Result<MetaSync, ApiError> {
    if node.daemon_id.is_empty() || node.url().is_empty() {
        return Err(ApiError::bad_request("join: node id and URL are required"));
    }
    // A node asking to join is alive (counts toward the primary's quorum).
    if proxy.smap().node(&node.daemon_id).is_some() {
        proxy.heard_from(&node.daemon_id);
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
    if proxy.removed.contains(&node.daemon_id) {
        return Err(Removed::refusal(&node.daemon_id));
    }
    node.id_digest = gristmill_core::hrw::digest(&node.daemon_id);
    // Heard from before it enters the map: the failure detector must not take a node that is
    // joining for one that went silent.
    proxy.heard_from(&node.daemon_id);
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

/// How long a keepalive to the primary may take, at most (half the failure window if less:
/// failure detection runs between keepalives).
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);

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
    retries: u32,
    shutdown: CancellationToken,
) {
    let mut joined = join_url.is_empty();
    loop {
        if !joined {
            joined = join(&proxy, &join_url).await;
            if !joined {
                // The primary we know may be dead: elect one (or learn of the new one).
                crate::election::maybe_elect(&proxy).await;
            }
        } else if !proxy.is_primary() {
            joined = send_keepalive(&proxy).await;
            crate::election::maybe_elect(&proxy).await;
        } else {
            if proxy.smap().pmap.len() > 1 && proxy.check_quorum().is_err() {
                // A primary cut off from the majority (or back from the dead): maybe the
                // others elected a new primary.
                crate::election::catch_up(&proxy).await;
            }
            if proxy.is_primary() {
                remove_silent_nodes(&proxy, interval * retries).await;
            } else {
                joined = false;
            }
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
    // The primary of our map (after a failover, not the one we were started with), else
    // the configured one.
    let smap = proxy.smap();
    let primary = smap.proxy_si.url();
    let base = if smap.version > 0 && !primary.is_empty() && !proxy.is_primary() {
        primary
    } else {
        join_url
    };
    if base.is_empty() {
        return false;
    }
    let resp = proxy
        .http
        .post(format!("{base}/v1/cluster/join"))
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
        // Short: a primary cut off by a partition must not stall failure detection.
        .timeout((proxy.window / 2).clamp(Duration::from_millis(500), KEEPALIVE_TIMEOUT))
        .json(&ka)
        .send()
        .await;
    match resp {
        Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => false,
        Ok(r) if r.status().is_success() => {
            proxy.heard_from(&proxy.smap().proxy_si.daemon_id);
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

/// Primary: removes targets silent for `window` (keepalive interval × retries) (the map change starts a
/// rebalance; a node that comes back re-joins with its id and data). Nothing is removed during
/// the first window after this proxy started, while nodes find it again.
async fn remove_silent_nodes(proxy: &Proxy, window: Duration) {
    if proxy.started.elapsed() < window {
        return;
    }
    let silent: Vec<String> = {
        let smap = proxy.smap();
        let heard = proxy.last_heard.lock().expect("last_heard lock");
        smap.tmap
            .values()
            .filter(|n| heard.get(&n.daemon_id).is_none_or(|t| t.elapsed() > window))
            .map(|n| n.daemon_id.clone())
            .collect()
    };
    if silent.is_empty() {
        return;
    }
    let mut gone = Vec::new();
    let removed = proxy
        .change(|smap, _| {
            // Checked again under the change lock: a node that (re-)joined while this change
            // waited for the lock has been heard from since the list above was made.
            let heard = proxy.last_heard.lock().expect("last_heard lock");
            smap.tmap.retain(|id, _| {
                let quiet =
                    silent.contains(id) && heard.get(id).is_none_or(|t| t.elapsed() > window);
                if quiet {
                    gone.push(id.clone());
                }
                !quiet
            });
            Ok(Changed {
                smap: !gone.is_empty(),
                bmd: false,
            })
        })
        .await;
    match removed {
        Ok(_) if gone.is_empty() => {}
        Ok(_) => {
            tracing::warn!(nodes = ?gone, after = ?window, "removed targets that stopped sending keepalives")
        }
        Err(e) => tracing::warn!(error = %e.message, "could not remove silent targets"),
    }
}

/// `PUT /v1/cluster` node actions (AIStore's names): `start-maintenance`, `stop-maintenance`,
/// `decommission-node` (value `{"sid": id}`), `remove-node` (drop from the map now), and
/// `join-node` (value `{"url": ...}`: register a running node by its URL). Maintenance and
/// decommission take the target out of placement (a rebalance moves its objects away; it keeps
/// serving what it still holds); a decommissioned target is removed once that rebalance ends.
pub(crate) async fn node_action(
    proxy: &Arc<Proxy>,
    action: &str,
    value: &serde_json::Value,
) -> Option<Result<(), ApiError>> {
    let sid = value
        .get("sid")
        .or_else(|| value.get("daemon_id"))
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_owned();
    let flag = |on: bool, bits: u64| {
        let sid = sid.clone();
        move |smap: &mut gristmill_core::ClusterMap, _: &mut gristmill_core::BucketMetadata| {
            let node = smap.tmap.get_mut(&sid).ok_or_else(|| {
                ApiError::not_found(format!("no target {sid:?} in the cluster map"))
            })?;
            let before = node.flags;
            node.flags = if on {
                node.flags | bits
            } else {
                node.flags & !bits
            };
            Ok(Changed {
                smap: node.flags != before,
                bmd: false,
            })
        }
    };
    let result = match action {
        "start-maintenance" => proxy
            .change(flag(true, smap::FLAG_MAINTENANCE))
            .await
            .map(|_| ()),
        "stop-maintenance" => proxy
            .change(flag(
                false,
                smap::FLAG_MAINTENANCE | smap::FLAG_DECOMMISSION,
            ))
            .await
            .map(|_| ()),
        "decommission-node" => match proxy.change(flag(true, smap::FLAG_DECOMMISSION)).await {
            Ok(sync) => {
                let version = sync.smap.map(|m| m.version).unwrap_or(0);
                tokio::spawn(remove_after_rebalance(proxy.clone(), sid.clone(), version));
                Ok(())
            }
            Err(e) => Err(e),
        },
        "remove-node" => proxy
            .change(|smap, _| {
                if smap.tmap.remove(&sid).is_none() && smap.pmap.remove(&sid).is_none() {
                    return Err(ApiError::not_found(format!(
                        "no node {sid:?} in the cluster map"
                    )));
                }
                Ok(Changed {
                    smap: true,
                    bmd: false,
                })
            })
            .await
            .map(|_| proxy.removed.set(&sid, true)),
        "join-node" => {
            let url = value.get("url").and_then(|v| v.as_str()).unwrap_or("");
            join_by_url(proxy, url).await
        }
        _ => return None,
    };
    if result.is_ok() {
        tracing::info!(action, node = %sid, "cluster membership changed");
    }
    Some(result)
}

/// Asks a running node who it is, then registers it.
async fn join_by_url(proxy: &Proxy, url: &str) -> Result<(), ApiError> {
    if !url.starts_with("http://") && !url.starts_with("https://") {
        return Err(ApiError::bad_request(
            "join-node needs {\"url\": \"http://host:port\"}",
        ));
    }
    let node: Node = proxy
        .http
        .get(format!(
            "{}/v1/daemon?what=snode",
            url.trim_end_matches('/')
        ))
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("{url}: {e}")))?
        .json()
        .await
        .map_err(|e| ApiError::bad_request(format!("{url} is not a Gristmill node: {e}")))?;
    proxy.removed.set(&node.daemon_id, false);
    register(proxy, node).await.map(|_| ())
}

/// Waits for the rebalance of map `version` (job `rb<version>`) to end on every target, then
/// removes the decommissioned node.
async fn remove_after_rebalance(proxy: Arc<Proxy>, sid: String, version: u64) {
    let id = format!("rb{version}");
    // Give targets a moment to start it, then follow it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    match crate::jobs::wait(&proxy, &id, Duration::from_secs(24 * 3600)).await {
        Ok(s) if s.state == gristmill_core::job::JobState::Finished && s.errors == 0 => {}
        Ok(s) => {
            tracing::warn!(node = %sid, job = %id, errors = s.errors, state = ?s.state,
                "decommission: rebalance did not complete cleanly; node kept (in decommission)");
            return;
        }
        Err(e) => {
            tracing::warn!(node = %sid, job = %id, error = %e.message, "decommission: rebalance not followed");
            return;
        }
    }
    let removed = proxy
        .change(|smap, _| {
            let gone = smap.tmap.remove(&sid).is_some();
            Ok(Changed {
                smap: gone,
                bmd: false,
            })
        })
        .await;
    if removed.is_ok() {
        proxy.removed.set(&sid, true);
        tracing::info!(node = %sid, "decommissioned node removed from the map");
    }
}
