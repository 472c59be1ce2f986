//! A target's part in primary elections (`POST /v1/vote`, see `gristmill_core::election`): it
//! votes yes only if it has not reached the primary within the candidate's failure window,
//! cannot reach it now, and has not voted for another candidate in that term.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use gristmill_core::election::{VoteRecord, VoteReply, VoteRequest};
use gristmill_core::{ApiError, persist};

use crate::Target;

/// How long the health check of the primary may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Election state of this process's target (one target per process).
struct Votes {
    /// Last successful keepalive (or join) with the primary.
    primary_contact: Option<Instant>,
    /// The last vote, loaded from `vote.json` on first use.
    record: Option<VoteRecord>,
}

static VOTES: Mutex<Votes> = Mutex::new(Votes {
    primary_contact: None,
    record: None,
});

/// Whole process start: failure windows are measured from here until the first contact.
static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Notes a successful exchange with the primary.
pub(crate) fn primary_reached() {
    VOTES.lock().expect("votes lock").primary_contact = Some(Instant::now());
}

pub(crate) fn mark_start() {
    let _ = STARTED.set(Instant::now());
}

/// `POST /v1/vote`.
pub(crate) async fn vote(State(t): State<Arc<Target>>, body: Bytes) -> Result<Response, ApiError> {
    let req: VoteRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid vote request: {e}")))?;
    let reply = decide(&t, &req).await;
    tracing::info!(candidate = %req.candidate, term = req.term, yes = reply.yes, reason = %reply.reason, "vote");
    Ok(axum::Json(reply).into_response())
}

async fn decide(t: &Target, req: &VoteRequest) -> VoteReply {
    let smap = t.smap();
    let no = |reason: String| VoteReply {
        yes: false,
        reason,
        smap: ((smap.term, smap.version) > (req.smap_term, req.smap_version))
            .then(|| smap.as_ref().clone()),
        smap_version: smap.version,
        smap_term: smap.term,
        bmd_version: t.bmd().version,
        voted_term: 0,
    };
    if req.term <= smap.term {
        return no(format!(
            "term {} is not newer than this node's {}",
            req.term, smap.term
        ));
    }
    if smap.proxy_si.daemon_id != req.primary {
        return no(format!(
            "this node's primary is {}, not {}",
            smap.proxy_si.daemon_id, req.primary
        ));
    }
    let since = VOTES
        .lock()
        .expect("votes lock")
        .primary_contact
        .or(STARTED.get().copied())
        .map(|t| t.elapsed())
        .unwrap_or(Duration::MAX);
    let window = Duration::from_millis(req.window_ms);
    if since <= window {
        return no(format!("reached the primary {since:?} ago"));
    }
    let answers = matches!(
        t.http
            .get(format!("{}/v1/health", smap.proxy_si.url()))
            .timeout(PROBE_TIMEOUT)
            .send()
            .await,
        Ok(r) if r.status().is_success()
    );
    if answers {
        return no("the primary answers".into());
    }
    let path = t.state_dir.join("vote.json");
    let mut votes = VOTES.lock().expect("votes lock");
    if votes.record.is_none() {
        votes.record = Some(
            persist::load_json::<VoteRecord>(&path)
                .ok()
                .flatten()
                .unwrap_or_default(),
        );
    }
    let record = votes.record.clone().unwrap_or_default();
    if !record.allows(req.term, &req.candidate) {
        return no(format!(
            "voted for {} in term {}",
            record.candidate, record.term
        ));
    }
    let new = VoteRecord {
        term: req.term,
        candidate: req.candidate.clone(),
    };
    if let Err(e) = persist::save_json(&path, &new) {
        return no(format!("persisting the vote: {e}"));
    }
    votes.record = Some(new);
    VoteReply {
        yes: true,
        reason: String::new(),
        smap: None,
        smap_version: smap.version,
        smap_term: smap.term,
        bmd_version: t.bmd().version,
        voted_term: req.term,
    }
}
