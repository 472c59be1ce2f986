//! Joining the cluster and staying in it: register with the primary proxy (retrying until it
//! answers), then send keepalives; re-register whenever the primary no longer knows us. A
//! target that an administrator removed (the primary answers 409) stops knocking and waits
//! until a map that includes it arrives again (`grist cluster add URL`).

use std::sync::Arc;
use std::time::Duration;

use gristmill_core::MetaSync;
use gristmill_core::api::Keepalive;
use tokio_util::sync::CancellationToken;

use crate::Target;

/// What the primary said to a join or keepalive.
enum Answer {
    Ok,
    /// It does not know us (re-join).
    Unknown,
    /// An administrator removed us.
    Removed,
}

pub(crate) async fn run(target: Arc<Target>, interval: Duration, shutdown: CancellationToken) {
    let mut joined = false;
    let mut backoff = Duration::from_millis(200);
    // The map version at our removal: a newer map that lists us means we were added back.
    let mut removed_at: Option<u64> = None;
    loop {
        if let Some(v) = removed_at {
            let smap = target.smap();
            if smap.version > v && smap.tmap.contains_key(&target.id) {
                tracing::info!("added back to the cluster");
                target.set_returning("added back to the cluster");
                removed_at = None;
                joined = true;
            }
        } else if !joined {
            match join(&target).await {
                Ok(Answer::Removed) => {
                    tracing::warn!("removed from the cluster by an administrator; not re-joining");
                    removed_at = Some(target.smap().version);
                    // What it holds may be rewritten or deleted while it is out.
                    target.set_returning("removed by an administrator");
                }
                Ok(_) => {
                    joined = true;
                    backoff = Duration::from_millis(200);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "join failed; retrying");
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        } else {
            match keepalive(&target).await {
                Ok(Answer::Ok) => {}
                Ok(Answer::Removed) => {
                    tracing::warn!("removed from the cluster by an administrator; not re-joining");
                    removed_at = Some(target.smap().version);
                    target.set_returning("removed by an administrator");
                    joined = false;
                }
                Ok(Answer::Unknown) => {
                    tracing::warn!("primary does not know this node; re-joining");
                    // Removed while silent (paused, cut off): what it holds may be stale.
                    // Marked before the join, which makes proxies send requests here again.
                    target.set_returning("the primary no longer knows this node");
                    joined = false;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "keepalive failed");
                    // The primary may be gone: another proxy may know a newer map.
                    catch_up(&target).await;
                }
            }
        }
        let pause = if joined { interval } else { backoff };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

fn primary_url(target: &Target) -> String {
    let smap = target.smap();
    let url = smap.proxy_si.url();
    if url.is_empty() {
        target.join_url.clone()
    } else {
        url.to_owned()
    }
}

async fn join(target: &Target) -> anyhow::Result<Answer> {
    let stamp = target.lease.stamp();
    let mut last = None;
    // The map before the join is sent: a push of the map the join makes can come first.
    let before = target.smap();
    // Try the primary we know first, then the configured join URL.
    for base in [primary_url(target), target.join_url.clone()] {
        if base.is_empty() {
            continue;
        }
        let resp = target
            .http
            .post(format!("{base}/v1/cluster/join"))
            .json(&target.node())
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => {
                let sync: MetaSync = r.json().await?;
                // The map did not change while this target was away (a quick restart): nothing
                // it holds can have been rewritten or deleted without it.
                let unchanged = sync.smap.as_ref().is_none_or(|m| {
                    m.version == before.version && before.tmap.contains_key(&target.id)
                });
                target.apply_metasync(sync).await?;
                if unchanged && target.smap().version > 0 {
                    target.returned("re-joined an unchanged cluster map");
                }
                target.lease.confirmed(stamp);
                tracing::info!(primary = %base, "joined the cluster");
                // After a restart: finish whatever rebalance was interrupted.
                target.maybe_rebalance();
                return Ok(Answer::Ok);
            }
            Ok(r) if r.status() == reqwest::StatusCode::CONFLICT => return Ok(Answer::Removed),
            Ok(r) => last = Some(anyhow::anyhow!("{base}: {}", r.status())),
            Err(e) => last = Some(e.into()),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no proxy to join (set --join)")))
}

/// Renews this target's map lease before an object request acts on its map (see
/// [`crate::cluster::lease`]): a keepalive, whose answer carries any newer map — or says that
/// the primary took this target out, which makes it a returning target at once (the
/// membership loop re-joins on its next round). Answers whether the primary answered.
pub(crate) async fn confirm_map(target: &Target) -> bool {
    match keepalive(target).await {
        Ok(Answer::Ok) => true,
        Ok(Answer::Unknown | Answer::Removed) => {
            target.set_returning("the primary no longer counts this node a member");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not confirm the cluster map with the primary (lease run out); going on with the map held");
            false
        }
    }
}

async fn keepalive(target: &Target) -> anyhow::Result<Answer> {
    // The answer carries what was current when it was sent.
    let stamp = target.lease.stamp();
    let smap = target.smap();
    let msg = Keepalive {
        id: target.id.clone(),
        smap_version: smap.version,
        bmd_version: target.bmd().version,
    };
    let send = target
        .http
        .post(format!("{}/v1/cluster/keepalive", primary_url(target)))
        .json(&msg)
        .send();
    // A keepalive to a primary cut off by a partition can hang; when a push brings a map
    // with another primary meanwhile, give up on it and follow the new one.
    let resp = tokio::select! {
        r = send => r?,
        _ = primary_changed(target, &smap.proxy_si.daemon_id) => {
            anyhow::bail!("the primary changed while the keepalive was in flight")
        }
    };
    match resp.status() {
        reqwest::StatusCode::NOT_FOUND => return Ok(Answer::Unknown),
        reqwest::StatusCode::CONFLICT => return Ok(Answer::Removed),
        _ => {}
    }
    let resp = resp.error_for_status()?;
    // The primary piggybacks newer metadata on the reply when we are behind.
    let sync: MetaSync = resp.json().await?;
    target.apply_metasync(sync).await?;
    target.lease.confirmed(stamp);
    Ok(Answer::Ok)
}

/// Returns once this target's map names a primary other than `primary`.
async fn primary_changed(target: &Target, primary: &str) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if target.smap().proxy_si.daemon_id != primary {
            return;
        }
    }
}

/// Asks the other proxies of this target's map for theirs; applies any that supersedes it
/// (a primary elected while this target could not hear of it).
async fn catch_up(target: &Target) {
    let smap = target.smap();
    for node in smap.pmap.values() {
        if node.daemon_id == smap.proxy_si.daemon_id {
            continue;
        }
        let resp = target
            .http
            .get(format!("{}/v1/daemon?what=smap", node.url()))
            .timeout(Duration::from_secs(1))
            .send()
            .await;
        if let Ok(r) = resp
            && r.status().is_success()
            && let Ok(m) = r.json::<gristmill_core::ClusterMap>().await
            && m.uuid == smap.uuid
            && m.supersedes(&smap)
        {
            let _ = target
                .apply_metasync(MetaSync {
                    smap: Some(m),
                    bmd: None,
                })
                .await;
            return;
        }
    }
}
