//! Primary failover for clusters with several proxies (see `gristmill_core::election`).
//!
//! - A non-primary proxy that has not reached the primary for the failure window (keepalive
//!   interval × retries) checks whether it is the candidate: the first proxy of the map in id
//!   order, the primary excluded, that answers a health check. The candidate asks every node
//!   of the map for a vote in a new term; with yes-votes from a strict majority of the map's
//!   nodes (itself included) it makes a map of that term with itself as primary and without
//!   the dead primary, and pushes it to every node.
//! - A primary that does not hear from a majority (a minority side of a partition, or a
//!   restarted old primary) asks the other nodes for their maps and adopts one that
//!   supersedes its own: it then rejoins the new primary as a non-primary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use gristmill_core::election::{VoteRecord, VoteReply, VoteRequest};
use gristmill_core::{ApiError, ClusterMap, MetaSync, persist};

use crate::meta::Proxy;

/// How long a voter waits for the primary's health check, at most.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a candidate waits for each vote, and a node for a peer's map.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// `POST /v1/vote`.
pub(crate) async fn vote(State(p): State<Arc<Proxy>>, body: Bytes) -> Result<Response, ApiError> {
    let req: VoteRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid vote request: {e}")))?;
    let reply = decide(&p, &req).await;
    tracing::info!(candidate = %req.candidate, term = req.term, yes = reply.yes, reason = %reply.reason, "vote");
    Ok(axum::Json(reply).into_response())
}

async fn decide(p: &Proxy, req: &VoteRequest) -> VoteReply {
    let smap = p.smap();
    let no = |reason: String| VoteReply {
        yes: false,
        reason,
        smap: ((smap.term, smap.version) > (req.smap_term, req.smap_version))
            .then(|| smap.as_ref().clone()),
        smap_version: smap.version,
        smap_term: smap.term,
        bmd_version: p.bmd().version,
        voted_term: p.vote.lock().expect("vote lock").term,
    };
    if req.term <= smap.term {
        return no(format!(
            "term {} is not newer than this node's {}",
            req.term, smap.term
        ));
    }
    if p.is_primary() {
        return no("this proxy is the primary".into());
    }
    if smap.proxy_si.daemon_id != req.primary {
        return no(format!(
            "this node's primary is {}, not {}",
            smap.proxy_si.daemon_id, req.primary
        ));
    }
    let window = Duration::from_millis(req.window_ms).max(p.window / 2);
    let since = {
        let heard = p.last_heard.lock().expect("last_heard lock");
        heard
            .get(&req.primary)
            .copied()
            .unwrap_or(p.started)
            .elapsed()
    };
    if since <= window {
        return no(format!("heard from the primary {since:?} ago"));
    }
    if primary_answers(&p.http, smap.proxy_si.url()).await {
        return no("the primary answers".into());
    }
    record_vote(p, req).unwrap_or_else(no)
}

fn record_vote(p: &Proxy, req: &VoteRequest) -> Result<VoteReply, String> {
    let mut vote = p.vote.lock().expect("vote lock");
    if !vote.allows(req.term, &req.candidate) {
        return Err(format!(
            "voted for {} in term {}",
            vote.candidate, vote.term
        ));
    }
    let new = VoteRecord {
        term: req.term,
        candidate: req.candidate.clone(),
    };
    persist::save_json(&p.state_dir().join("vote.json"), &new)
        .map_err(|e| format!("persisting the vote: {e}"))?;
    *vote = new;
    let smap = p.smap();
    Ok(VoteReply {
        yes: true,
        reason: String::new(),
        smap: None,
        smap_version: smap.version,
        smap_term: smap.term,
        bmd_version: p.bmd().version,
        voted_term: req.term,
    })
}

/// Whether the primary at `url` answers a health check now.
pub(crate) async fn primary_answers(http: &gristmill_node::auth::IntraClient, url: &str) -> bool {
    matches!(
        http.get(format!("{url}/v1/health"))
            .timeout(PROBE_TIMEOUT)
            .send()
            .await,
        Ok(r) if r.status().is_success()
    )
}

/// Non-primary duty, each keepalive period: when the primary has been silent for the window,
/// run an election if this proxy is the candidate.
pub(crate) async fn maybe_elect(p: &Proxy) {
    let smap = p.smap();
    if p.is_primary() || smap.version == 0 || smap.node(&p.id).is_none() {
        return;
    }
    let primary = smap.proxy_si.daemon_id.clone();
    let since = p
        .last_heard
        .lock()
        .expect("last_heard lock")
        .get(&primary)
        .copied()
        .unwrap_or(p.started)
        .elapsed();
    if since <= p.window {
        return;
    }
    // The candidate: the first proxy in id order (primary excluded) that answers.
    for (id, node) in &smap.pmap {
        if *id == primary {
            continue;
        }
        if *id == p.id {
            break;
        }
        if primary_answers(&p.http, node.url()).await {
            return;
        }
    }
    if let Err(e) = elect(p, &smap).await {
        tracing::warn!(error = %e, "election failed");
    }
}

async fn elect(p: &Proxy, smap: &Arc<ClusterMap>) -> Result<(), String> {
    let started = Instant::now();
    let term = smap.term.max(p.vote.lock().expect("vote lock").term) + 1;
    let req = VoteRequest {
        candidate: p.id.clone(),
        term,
        primary: smap.proxy_si.daemon_id.clone(),
        window_ms: p.window.as_millis() as u64,
        smap_version: smap.version,
        smap_term: smap.term,
    };
    record_vote(p, &req)?;
    tracing::warn!(term, primary = %req.primary, "primary silent; asking for votes");
    let voters: Vec<_> = smap
        .tmap
        .values()
        .chain(smap.pmap.values())
        .filter(|n| n.daemon_id != p.id)
        .cloned()
        .collect();
    let asks = voters.iter().map(|n| {
        let r = p
            .http
            .post(format!("{}/v1/vote", n.url()))
            .timeout(ASK_TIMEOUT)
            .json(&req)
            .send();
        async move {
            match r.await {
                Ok(r) if r.status().is_success() => r.json::<VoteReply>().await.ok(),
                _ => None,
            }
        }
    });
    let replies: Vec<VoteReply> = futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect();
    let yes = 1 + replies.iter().filter(|r| r.yes).count();
    // A voter with a newer map: adopt it and try again later with it.
    for r in &replies {
        if let Some(m) = &r.smap
            && m.supersedes(smap)
        {
            let _ = p
                .apply(MetaSync {
                    smap: Some(m.clone()),
                    bmd: None,
                })
                .await;
        }
    }
    if yes < smap.majority() {
        let reasons: Vec<&str> = replies
            .iter()
            .filter(|r| !r.yes)
            .map(|r| r.reason.as_str())
            .collect();
        return Err(format!(
            "term {term}: {yes} of {} votes (a majority is {}); no: {reasons:?}",
            smap.node_count(),
            smap.majority()
        ));
    }
    let max_version = replies
        .iter()
        .map(|r| r.smap_version)
        .chain([smap.version])
        .max()
        .unwrap_or(smap.version);
    let max_bmd = replies
        .iter()
        .map(|r| r.bmd_version)
        .chain([p.bmd().version])
        .max()
        .unwrap_or(0);
    let elected = p
        .become_primary(smap, term, max_version + 1, max_bmd + 1)
        .await
        .map_err(|e| e.message)?;
    tracing::warn!(term, version = elected, votes = yes, after = ?started.elapsed(), "elected primary");
    Ok(())
}

/// Asks the other nodes of this proxy's map for theirs and adopts the newest one that
/// supersedes it. Returns whether it adopted one.
pub(crate) async fn catch_up(p: &Proxy) -> bool {
    let smap = p.smap();
    let peers: Vec<String> = smap
        .tmap
        .values()
        .chain(smap.pmap.values())
        .filter(|n| n.daemon_id != p.id)
        .map(|n| n.url().to_owned())
        .collect();
    let asks = peers.iter().map(|url| {
        let r = p
            .http
            .get(format!("{url}/v1/daemon?what=smap"))
            .timeout(ASK_TIMEOUT)
            .send();
        async move {
            match r.await {
                Ok(r) if r.status().is_success() => r.json::<ClusterMap>().await.ok(),
                _ => None,
            }
        }
    });
    let newest = futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .filter(|m| m.uuid == smap.uuid && m.version > 0)
        .max_by_key(|m| (m.term, m.version));
    match newest {
        Some(m) if m.supersedes(&smap) => {
            tracing::warn!(primary = %m.proxy_si.daemon_id, version = m.version, term = m.term,
                "a newer cluster map exists; following it");
            p.apply(MetaSync {
                smap: Some(m),
                bmd: None,
            })
            .await
            .is_ok()
        }
        _ => false,
    }
}

/// At startup: a proxy whose saved map lists other proxies first asks the other nodes
/// whether the cluster moved on (a new primary elected while it was down), so that it never
/// acts as primary on a stale map.
pub(crate) async fn startup(p: &Proxy) {
    if p.smap().pmap.len() > 1 && catch_up(p).await {
        tracing::info!(primary = %p.smap().proxy_si.daemon_id, "rejoining as a non-primary");
    }
}

impl Proxy {
    /// Makes this proxy the primary of a new map of `term`, without the old primary; pushes
    /// it to every node. Returns the new version.
    async fn become_primary(
        &self,
        base: &ClusterMap,
        term: u64,
        version: u64,
        bmd_version: u64,
    ) -> Result<u64, ApiError> {
        let mut smap = self.smap().as_ref().clone();
        if smap.supersedes(base) {
            return Err(ApiError::unavailable(
                "the cluster map changed during the election",
            ));
        }
        let me = smap
            .pmap
            .get(&self.id)
            .cloned()
            .ok_or_else(|| ApiError::internal("this proxy is not in its own map"))?;
        let old = smap.proxy_si.daemon_id.clone();
        smap.pmap.remove(&old);
        smap.proxy_si = me;
        smap.term = term;
        smap.version = version;
        // Everyone gets a full window to find the new primary before failure detection.
        {
            let mut heard = self.last_heard.lock().expect("last_heard lock");
            let now = Instant::now();
            for id in smap.tmap.keys().chain(smap.pmap.keys()) {
                heard.insert(id.clone(), now);
            }
        }
        // The bucket metadata of the new term supersedes whatever a deposed primary may have
        // pushed to a minority.
        let mut bmd = self.bmd().as_ref().clone();
        bmd.term = term;
        bmd.version = bmd_version;
        self.install(smap, bmd.clone()).await?;
        let acks = self
            .push(&MetaSync {
                smap: None,
                bmd: Some(bmd),
            })
            .await;
        let smap = self.smap();
        tracing::info!(acks, nodes = smap.node_count(), "new map pushed");
        Ok(smap.version)
    }
}
