//! Joining the cluster and staying in it: register with the primary proxy (retrying until it
//! answers), then send keepalives; re-register whenever the primary no longer knows us.

use std::sync::Arc;
use std::time::Duration;

use gristmill_core::MetaSync;
use gristmill_core::api::Keepalive;
use tokio_util::sync::CancellationToken;

use crate::Target;

pub(crate) async fn run(target: Arc<Target>, interval: Duration, shutdown: CancellationToken) {
    let mut joined = false;
    let mut backoff = Duration::from_millis(200);
    loop {
        if !joined {
            match join(&target).await {
                Ok(()) => {
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
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!("primary does not know this node; re-joining");
                    joined = false;
                    continue;
                }
                Err(e) => tracing::warn!(error = %e, "keepalive failed"),
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

async fn join(target: &Target) -> anyhow::Result<()> {
    let mut last = None;
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
                target.apply_metasync(sync).await?;
                tracing::info!(primary = %base, "joined the cluster");
                // After a restart: finish whatever rebalance was interrupted.
                target.maybe_rebalance();
                return Ok(());
            }
            Ok(r) => last = Some(anyhow::anyhow!("{base}: {}", r.status())),
            Err(e) => last = Some(e.into()),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no proxy to join (set --join)")))
}

/// Returns `Ok(false)` when the primary answers that it does not know us.
async fn keepalive(target: &Target) -> anyhow::Result<bool> {
    let smap = target.smap();
    let msg = Keepalive {
        id: target.id.clone(),
        smap_version: smap.version,
        bmd_version: target.bmd().version,
    };
    let resp = target
        .http
        .post(format!("{}/v1/cluster/keepalive", primary_url(target)))
        .json(&msg)
        .send()
        .await?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(false);
    }
    let resp = resp.error_for_status()?;
    // The primary piggybacks newer metadata on the reply when we are behind.
    let sync: MetaSync = resp.json().await?;
    target.apply_metasync(sync).await?;
    Ok(true)
}
