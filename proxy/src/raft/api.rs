//! Raft's incoming HTTP routes (node-to-node; not mounted on the proxy's router yet):
//! the three RPCs openraft sends ([`super::network`] is the sending side), the leader's read
//! index for followers' linearizable reads, and a metrics summary. A body that does not
//! decode is answered 400.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use gristmill_core::ApiError;
use openraft::ServerState;
use openraft::error::CheckIsLeaderError;
use openraft::error::RaftError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::RaftNode;

/// Entries carry whole maps, and ETL code travels inside the bucket metadata.
const BODY_LIMIT: usize = 64 << 20;

/// The leader's answer to `GET /v1/raft/read-index`: the log index a follower must have
/// applied before it serves a linearizable read.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ReadIndex {
    pub(crate) index: u64,
}

/// `GET /v1/raft/metrics`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct MetricsView {
    pub(crate) id: u64,
    pub(crate) term: u64,
    pub(crate) state: String,
    pub(crate) current_leader: Option<u64>,
    pub(crate) last_applied: Option<u64>,
    pub(crate) voters: Vec<u64>,
    pub(crate) learners: Vec<u64>,
}

pub(crate) fn router(node: RaftNode) -> Router {
    Router::new()
        .route("/v1/raft/append", post(append))
        .route("/v1/raft/vote", post(vote))
        .route("/v1/raft/snapshot", post(snapshot))
        .route("/v1/raft/read-index", get(read_index))
        .route("/v1/raft/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(node)
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("raft rpc body: {e}")))
}

/// The RPC's result as JSON, `Err` included (the sender turns it into a remote error).
fn answer<T: Serialize>(result: T) -> Response {
    Json(result).into_response()
}

async fn append(State(node): State<RaftNode>, body: Bytes) -> Result<Response, ApiError> {
    let req = decode(&body)?;
    Ok(answer(node.raft().append_entries(req).await))
}

async fn vote(State(node): State<RaftNode>, body: Bytes) -> Result<Response, ApiError> {
    let req = decode(&body)?;
    Ok(answer(node.raft().vote(req).await))
}

async fn snapshot(State(node): State<RaftNode>, body: Bytes) -> Result<Response, ApiError> {
    let req = decode(&body)?;
    Ok(answer(node.raft().install_snapshot(req).await))
}

async fn read_index(State(node): State<RaftNode>) -> Result<Json<ReadIndex>, ApiError> {
    match node.raft().get_read_log_id().await {
        Ok((read, _applied)) => Ok(Json(ReadIndex {
            index: read.map_or(0, |l| l.index),
        })),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            let hint = match (f.leader_id, f.leader_node) {
                (Some(_), Some(p)) => format!("proxy {} ({}) leads", p.daemon_id, p.url),
                (Some(id), None) => format!("raft node {id} leads"),
                _ => "no leader is known".to_owned(),
            };
            Err(ApiError::unavailable(format!("not the leader: {hint}")))
        }
        Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q))) => {
            Err(ApiError::unavailable(format!("no quorum: {q}")))
        }
        Err(RaftError::Fatal(e)) => Err(ApiError::internal(format!("raft stopped: {e}"))),
    }
}

async fn metrics(State(node): State<RaftNode>) -> Json<MetricsView> {
    let m = node.raft().metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let state = match m.state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    };
    Json(MetricsView {
        id: m.id,
        term: m.current_term,
        state: state.to_owned(),
        current_leader: m.current_leader,
        last_applied: m.last_applied.map(|l| l.index),
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
    })
}
