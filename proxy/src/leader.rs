//! Leadership: the Raft leader is the primary. This module makes a new cluster's first state
//! (or imports one written before the control plane ran on Raft) and takes up the primary's
//! duties each time this proxy is elected: its entry in the map (`proxy_si`), a fresh failure
//! window for every node, the first admin user.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gristmill_core::smap::{self, ClusterMap, Node};
use gristmill_core::{ApiError, BucketMetadata, persist};
use tokio_util::sync::CancellationToken;

use crate::meta::{Changed, Proxy, now_ns};
use crate::raft::MetaCmd;

/// Files of the metadata format before Raft (imported once, then renamed `*.pre-raft`).
const OLD_FILES: [&str; 4] = ["smap.json", "bmd.json", "removed.json", "vote.json"];

/// A proxy started without `--join` whose Raft member has no membership yet: makes it a group
/// of one voter and commits the cluster's first state — a new cluster, or the one recorded in
/// `smap.json` / `bmd.json` / `removed.json` by an earlier version (nothing a user created is
/// lost by upgrading). A proxy that already has a membership restarts as it was.
pub(crate) async fn found_or_import(p: &Proxy) -> anyhow::Result<()> {
    if p.raft.is_initialized().await? {
        return Ok(());
    }
    let dir = p.state_dir.clone();
    let old_smap: Option<ClusterMap> = persist::load_json(&dir.join("smap.json"))?;
    let old_bmd: Option<BucketMetadata> = persist::load_json(&dir.join("bmd.json"))?;
    let removed: std::collections::BTreeSet<String> =
        persist::load_json(&dir.join("removed.json"))?.unwrap_or_default();
    p.raft.initialize_alone().await?;
    wait_for_leadership(p, Duration::from_secs(30)).await?;
    let me = Node::new(&p.id, smap::PROXY, &p.url);
    let imported = old_smap.is_some();
    let smap = match old_smap {
        Some(mut m) => {
            // The old map's other proxies are not members of the new group: they join again.
            m.pmap.clear();
            m.pmap.insert(p.id.clone(), me.clone());
            m.proxy_si = me;
            m.version += 1;
            m
        }
        None => ClusterMap::new(
            me,
            uuid::Uuid::new_v4().simple().to_string(),
            gristmill_core::time::rfc3339_from_ns(now_ns()),
        ),
    };
    let bmd = match old_bmd {
        Some(b) if !b.uuid.is_empty() => b,
        other => BucketMetadata {
            uuid: smap.uuid.clone(),
            ..other.unwrap_or_default()
        },
    };
    p.raft
        .propose(|state| {
            if state.smap_version() > 0 {
                return Ok(None);
            }
            Ok(Some(MetaCmd {
                base_smap: 0,
                base_bmd: state.bmd_version(),
                smap: Some(smap),
                bmd: Some(bmd),
                removed: Some(removed),
            }))
        })
        .await?;
    p.publish();
    if imported {
        for name in OLD_FILES {
            let from = dir.join(name);
            if from.exists() {
                std::fs::rename(&from, dir.join(format!("{name}.pre-raft")))?;
            }
        }
        tracing::warn!(
            version = p.smap().version,
            buckets = p.bmd().buckets.len(),
            "imported the cluster metadata of the previous format into the Raft log"
        );
    }
    Ok(())
}

async fn wait_for_leadership(p: &Proxy, within: Duration) -> Result<(), ApiError> {
    let deadline = Instant::now() + within;
    while !p.is_primary() {
        if Instant::now() > deadline {
            return Err(ApiError::unavailable(
                "not elected leader of a group of one",
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Whether this proxy is the only voter of its group (the playground, a 1-proxy cluster).
pub(crate) fn alone(p: &Proxy) -> bool {
    let voters: Vec<u64> = {
        let m = p.raft.raft().metrics();
        let m = m.borrow();
        m.membership_config.membership().voter_ids().collect()
    };
    voters == [p.raft.id()]
}

/// A 1-voter group elects itself at once: take up the duties before serving, so the first
/// admin exists when the node answers its first request (as before the Raft control plane).
pub(crate) async fn lead_if_alone(p: &Arc<Proxy>) -> anyhow::Result<()> {
    if alone(p) {
        wait_for_leadership(p, Duration::from_secs(30)).await?;
        take_up_duties(p).await?;
    }
    Ok(())
}

/// Watches this member's Raft state: on each election won, takes up the primary's duties.
pub(crate) async fn run(p: Arc<Proxy>, shutdown: CancellationToken) {
    let mut metrics = p.raft.raft().metrics();
    loop {
        // Copy out and release the borrow at once: holding it while anything else reads the
        // metrics (`is_primary` does) can deadlock against openraft publishing new ones.
        let term = metrics.borrow_and_update().current_term;
        let won = (p.is_primary() && p.led_term.load(Ordering::SeqCst) != term).then_some(term);
        if let Some(term) = won {
            // Retried while the term lasts: the first proposal of a new leader may meet a
            // quorum that is still forming.
            match take_up_duties(&p).await {
                Ok(()) => tracing::info!(term, "leader: primary duties taken up"),
                Err(e) => {
                    tracing::warn!(term, error = %e, "leader: taking up the duties failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                    continue;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = metrics.changed() => if changed.is_err() { return },
            // Metrics change on every heartbeat round anyway; this bounds a missed retry.
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The primary's duties, once per term: every node gets a full failure window to find this
/// primary; the map names it (`proxy_si`; a primary that died is dropped from the proxies
/// until it comes back and joins); auth gets its first admin.
async fn take_up_duties(p: &Arc<Proxy>) -> anyhow::Result<()> {
    let term = p.raft.current_term();
    p.linearize().await?;
    {
        let smap = p.smap();
        let now = Instant::now();
        let mut heard = p.last_heard.lock().expect("last_heard lock");
        for id in smap.tmap.keys().chain(smap.pmap.keys()) {
            heard.insert(id.clone(), now);
        }
    }
    // Targets must be told again that every object is placed (see `jobs::watch_placement`).
    p.placed.store(0, Ordering::SeqCst);
    let me = Node::new(&p.id, smap::PROXY, &p.url);
    let named = {
        let smap = p.smap();
        smap.proxy_si == me && smap.pmap.get(&p.id) == Some(&me)
    };
    if !named {
        p.change(|smap, _| {
            let old = smap.proxy_si.daemon_id.clone();
            if old != p.id && !old.is_empty() {
                smap.pmap.remove(&old);
            }
            smap.pmap.insert(p.id.clone(), me.clone());
            smap.proxy_si = me.clone();
            Ok(Changed {
                smap: true,
                bmd: false,
            })
        })
        .await?;
        tracing::info!(node = %p.id, term, "this proxy is the primary");
    }
    crate::auth_api::bootstrap(p, p.admin_password.as_deref()).await?;
    p.led_term.store(term, Ordering::SeqCst);
    Ok(())
}
