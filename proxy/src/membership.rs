//! Membership: the primary registers nodes and records their keepalives; a non-primary proxy
//! registers itself with the primary and keeps sending keepalives.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gristmill_core::api::Keepalive;
use gristmill_core::smap::{self, Node};
use gristmill_core::{ApiError, MetaSync};
use tokio_util::sync::CancellationToken;

use crate::meta::{Changed, Proxy};

/// The refusal a node an administrator removed gets on join and keepalive (409: the node
/// stops retrying until re-added). The removed list is replicated (`MetaState::removed`): a
/// removed node that is still running must not walk back in through its own keepalives or
/// join retries (that would undo the removal within a keepalive interval).
pub(crate) fn removed_refusal(id: &str) -> ApiError {
    ApiError::new(
        gristmill_core::ErrorKind::Conflict,
        format!(
            "node {id} was removed from the cluster by an administrator \
             (`grist cluster add URL` adds it back)"
        ),
    )
}

/// Registers `node` (primary only). Re-registering with the same URL changes nothing; a new id at
/// a known URL replaces the node that was there.
pub(crate) async fn register(
    proxy: &Proxy,
    mut node: Node,
    readd: bool,
) -> Result<MetaSync, ApiError> {
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
    if readd {
        // `join-node` by an administrator: the node is no longer refused.
        let id = node.daemon_id.clone();
        proxy
            .change_all(|_, _, removed| {
                removed.remove(&id);
                Ok(Changed::default())
            })
            .await?;
    } else if proxy.is_removed(&node.daemon_id) {
        return Err(removed_refusal(&node.daemon_id));
    }
    node.id_digest = gristmill_core::hrw::digest(&node.daemon_id);
    if !is_target {
        // A proxy is a member of the Raft group (learner, caught up, then voter) before it
        // enters the map.
        let peer = crate::raft::RaftPeer {
            daemon_id: node.daemon_id.clone(),
            url: node.url().to_owned(),
        };
        proxy
            .raft
            .add_proxy(crate::raft::raft_id(&node.daemon_id), peer)
            .await?;
    }
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
                // Keep flags (maintenance...) the cluster set; only the address may change. A
                // restarting (or suspect) target that joins is back: what was written for it
                // elsewhere moves back by the rebalance this change starts.
                node.flags = if existing.is_restarting() {
                    existing.flags & !smap::RESTARTING_FLAGS
                } else {
                    existing.flags
                };
                // Back from a restart: a member again from this version on, so the target
                // checks its copies (writes it missed were hinted elsewhere).
                node.member_since = if existing.is_restarting() {
                    smap.version + 1
                } else {
                    existing.member_since
                };
                if *existing == node {
                    return Ok(Changed::default());
                }
            } else {
                // Added by the version this change makes (see `Node::member_since`).
                node.member_since = smap.version + 1;
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
    proxy
        .heard_live
        .lock()
        .expect("heard_live lock")
        .insert(ka.id.clone());
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

/// Background duties. The primary (Raft leader) removes targets it has not heard from; a
/// proxy not yet in the group asks to join (`--join`); every other proxy sends keepalives to
/// the primary, and joins again when the primary no longer has it in the map (after it was
/// dropped as a dead primary, for instance).
pub(crate) async fn run(
    proxy: Arc<Proxy>,
    join_url: String,
    interval: Duration,
    retries: u32,
    shutdown: CancellationToken,
) {
    loop {
        let member = proxy.raft.is_initialized().await.unwrap_or(false);
        let pause = if !member {
            if join(&proxy, &join_url).await {
                interval
            } else {
                Duration::from_millis(300)
            }
        } else if proxy.is_primary() {
            remove_silent_nodes(&proxy, interval * retries).await;
            interval
        } else {
            if !send_keepalive(&proxy).await {
                join(&proxy, &join_url).await;
            }
            interval
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// Asks the primary (else the `--join` proxy, which relays it) to register this proxy.
async fn join(proxy: &Proxy, join_url: &str) -> bool {
    let me = Node::new(&proxy.id, smap::PROXY, &proxy.url);
    let leader = proxy.primary_url();
    let base = if leader.is_empty() || leader == proxy.url {
        join_url
    } else {
        leader.as_str()
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
        Ok(r) if r.status().is_success() => true,
        Ok(r) => {
            tracing::warn!(status = %r.status(), primary = base, "join refused");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, primary = base, "join failed");
            false
        }
    }
}

/// Returns false when the primary no longer has this proxy in its map (join again).
async fn send_keepalive(proxy: &Proxy) -> bool {
    let leader = proxy.primary_url();
    if leader.is_empty() {
        return true; // election under way
    }
    let ka = Keepalive {
        id: proxy.id.clone(),
        smap_version: proxy.smap().version,
        bmd_version: proxy.bmd().version,
    };
    let resp = proxy
        .http
        .post(format!("{leader}/v1/cluster/keepalive"))
        .timeout((proxy.window / 2).clamp(Duration::from_millis(500), KEEPALIVE_TIMEOUT))
        .json(&ka)
        .send()
        .await;
    match resp {
        Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => false,
        Ok(r) if r.status() == reqwest::StatusCode::CONFLICT => {
            // Removed by an administrator: out of the group, it must not disturb it with
            // elections of its own (stop the process; `join-node` adds it back).
            proxy.raft.raft().runtime_config().elect(false);
            tracing::warn!("this proxy was removed from the cluster; it no longer campaigns");
            true
        }
        Ok(r) if r.status().is_success() => true,
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
///
/// A silent target that is restarting (marked by an operator, or made a *suspect* here when
/// `suspect_grace` is set) stays: requests skip it and nothing moves, until it has been silent
/// for its grace (`restart_grace`, or `suspect_grace` for a suspect) — then it is removed.
async fn remove_silent_nodes(proxy: &Proxy, window: Duration) {
    let smap = proxy.smap();
    clear_recovered_suspects(proxy, &smap, window).await;
    let silent: Vec<String> = {
        let heard = proxy.last_heard.lock().expect("last_heard lock");
        smap.tmap
            .values()
            .filter(|n| heard.get(&n.daemon_id).is_none_or(|t| t.elapsed() > window))
            .map(|n| n.daemon_id.clone())
            .collect()
    };
    let (silent, suspects) = {
        let mut since = proxy.silent_since.lock().expect("silent_since lock");
        since.retain(|id, _| silent.contains(id));
        let mut remove = Vec::new();
        let mut suspects = Vec::new();
        for id in silent {
            let node = &smap.tmap[&id];
            let grace = if node.flags & smap::FLAG_SUSPECT != 0 {
                proxy.suspect_grace
            } else if node.is_restarting() {
                proxy.restart_grace
            } else if !proxy.suspect_grace.is_zero() && !node.is_inactive() {
                // (A target in maintenance or decommission is removed as before: a suspect's
                // flags are cleared together when it is heard from again.)
                suspects.push(id);
                continue;
            } else {
                remove.push(id);
                continue;
            };
            let first = *since.entry(id.clone()).or_insert_with(Instant::now);
            if first.elapsed() > grace {
                remove.push(id);
            }
        }
        (remove, suspects)
    };
    if !suspects.is_empty() {
        // Back only on a keepalive or join sent after this (a new primary counts every node
        // as heard at its start: that is not one).
        {
            let mut live = proxy.heard_live.lock().expect("heard_live lock");
            for id in &suspects {
                live.remove(id);
            }
        }
        let marked = proxy
            .change(|smap, _| {
                let heard = proxy.last_heard.lock().expect("last_heard lock");
                let mut changed = false;
                for id in &suspects {
                    if let Some(n) = smap.tmap.get_mut(id)
                        && heard.get(id).is_none_or(|t| t.elapsed() > window)
                    {
                        n.flags |=
                            smap::FLAG_MAINTENANCE | smap::FLAG_RESTARTING | smap::FLAG_SUSPECT;
                        changed = true;
                    }
                }
                Ok(Changed {
                    smap: changed,
                    bmd: false,
                })
            })
            .await;
        match marked {
            Ok(_) => {
                tracing::warn!(nodes = ?suspects, grace = ?proxy.suspect_grace, "silent targets are suspect: requests skip them, nothing moves until the grace ends")
            }
            Err(e) => tracing::warn!(error = %e.message, "could not mark silent targets suspect"),
        }
    }
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

/// Suspects heard from again (paused, cut off for a while): back as members from the next
/// version — they check their copies, and the rebalance that change starts moves the writes
/// hinted elsewhere back to them.
async fn clear_recovered_suspects(
    proxy: &Proxy,
    smap: &gristmill_core::ClusterMap,
    window: Duration,
) {
    let heard_again = |proxy: &Proxy, id: &str| {
        let sent_one = proxy
            .heard_live
            .lock()
            .expect("heard_live lock")
            .contains(id);
        let heard = proxy.last_heard.lock().expect("last_heard lock");
        sent_one && heard.get(id).is_some_and(|t| t.elapsed() <= window)
    };
    let recovered: Vec<String> = smap
        .tmap
        .values()
        .filter(|n| n.flags & smap::FLAG_SUSPECT != 0 && heard_again(proxy, &n.daemon_id))
        .map(|n| n.daemon_id.clone())
        .collect();
    if recovered.is_empty() {
        return;
    }
    let cleared = proxy
        .change(|smap, _| {
            let version = smap.version + 1;
            let mut changed = false;
            for id in &recovered {
                if let Some(n) = smap.tmap.get_mut(id)
                    && n.flags & smap::FLAG_SUSPECT != 0
                    && heard_again(proxy, id)
                {
                    n.flags &= !smap::RESTARTING_FLAGS;
                    n.member_since = version;
                    changed = true;
                }
            }
            Ok(Changed {
                smap: changed,
                bmd: false,
            })
        })
        .await;
    match cleared {
        Ok(_) => {
            tracing::info!(nodes = ?recovered, "suspect targets heard from again: back in placement")
        }
        Err(e) => tracing::warn!(error = %e.message, "could not clear recovered suspects"),
    }
}

/// `PUT /v1/cluster` node actions (AIStore's names): `start-maintenance` (with
/// `"skip_rebalance": true`: a restart without data movement), `stop-maintenance`,
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
    // Sets `on` and clears `off` in the node's flags.
    let flags = |on: u64, off: u64| {
        let sid = sid.clone();
        move |smap: &mut gristmill_core::ClusterMap, _: &mut gristmill_core::BucketMetadata| {
            let node = smap.tmap.get_mut(&sid).ok_or_else(|| {
                ApiError::not_found(format!("no target {sid:?} in the cluster map"))
            })?;
            let before = node.flags;
            node.flags = (node.flags | on) & !off;
            Ok(Changed {
                smap: node.flags != before,
                bmd: false,
            })
        }
    };
    let result = match action {
        // `skip_rebalance` (AIStore's `--no-rebalance`): a restart — nothing moves, writes
        // meant for it are hinted elsewhere, and it is back when it re-joins.
        "start-maintenance"
            if value
                .get("skip_rebalance")
                .and_then(|v| v.as_bool())
                .unwrap_or(false) =>
        {
            proxy
                .change(flags(smap::FLAG_MAINTENANCE | smap::FLAG_RESTARTING, 0))
                .await
                .map(|_| ())
        }
        // A plain maintenance (or a decommission) of a restarting target ends the restart: its
        // objects move away by the rebalance the change starts.
        "start-maintenance" => proxy
            .change(flags(
                smap::FLAG_MAINTENANCE,
                smap::FLAG_RESTARTING | smap::FLAG_SUSPECT,
            ))
            .await
            .map(|_| ()),
        "stop-maintenance" => proxy
            .change(flags(0, smap::RESTARTING_FLAGS | smap::FLAG_DECOMMISSION))
            .await
            .map(|_| ()),
        "decommission-node" => match proxy
            .change(flags(
                smap::FLAG_DECOMMISSION,
                smap::FLAG_RESTARTING | smap::FLAG_SUSPECT,
            ))
            .await
        {
            Ok(sync) => {
                let version = sync.smap.map(|m| m.version).unwrap_or(0);
                tokio::spawn(remove_after_rebalance(proxy.clone(), sid.clone(), version));
                Ok(())
            }
            Err(e) => Err(e),
        },
        "remove-node" => remove_node(proxy, &sid).await,
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

/// `remove-node`: out of the map now, and refused until `join-node`; a proxy also leaves the
/// Raft group (the group shrinks: a permanently dead proxy must be removed, or the group keeps
/// counting it in its majority).
async fn remove_node(proxy: &Proxy, sid: &str) -> Result<(), ApiError> {
    let smap = proxy.smap();
    if !smap.tmap.contains_key(sid) && !smap.pmap.contains_key(sid) {
        return Err(ApiError::not_found(format!(
            "no node {sid:?} in the cluster map"
        )));
    }
    if smap.pmap.contains_key(sid) {
        proxy.raft.remove_proxy(crate::raft::raft_id(sid)).await?;
    }
    proxy
        .change_all(|smap, _, removed| {
            // Checked again on the applied state: the failure detector may have removed it
            // meanwhile, and then there is nothing to change (no new map version).
            if smap.tmap.remove(sid).is_none() && smap.pmap.remove(sid).is_none() {
                return Err(ApiError::not_found(format!(
                    "no node {sid:?} in the cluster map"
                )));
            }
            removed.insert(sid.to_owned());
            Ok(Changed {
                smap: true,
                bmd: false,
            })
        })
        .await
        .map(|_| ())
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
    register(proxy, node, true).await.map(|_| ())
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
        .change_all(|smap, _, removed| {
            let gone = smap.tmap.remove(&sid).is_some();
            if gone {
                removed.insert(sid.clone());
            }
            Ok(Changed {
                smap: gone,
                bmd: false,
            })
        })
        .await;
    if removed.is_ok() {
        tracing::info!(node = %sid, "decommissioned node removed from the map");
    }
}
