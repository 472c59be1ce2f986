//! Raft's outgoing RPCs: JSON over HTTP through the node's [`IntraClient`] (signed when auth is
//! on) to `{peer}/v1/raft/{append,vote,snapshot}` (served by [`super::api`]). The body that
//! comes back is the JSON of the peer's `Result<Resp, RaftError<..>>`.

use std::error::Error;

use gristmill_node::auth::IntraClient;
use openraft::error::{
    Infallible, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{RaftPeer, TypeConfig};

type NodeId = u64;
type RpcResult<T, E = Infallible> = Result<T, RPCError<NodeId, RaftPeer, RaftError<NodeId, E>>>;

/// Makes one [`Conn`] per peer (openraft asks for one per replication stream).
#[derive(Clone)]
pub(crate) struct Network {
    http: IntraClient,
}

impl Network {
    pub(crate) fn new(http: IntraClient) -> Self {
        Self { http }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Conn;

    async fn new_client(&mut self, target: NodeId, node: &RaftPeer) -> Conn {
        Conn {
            http: self.http.clone(),
            target,
            peer: node.clone(),
        }
    }
}

/// RPCs to one peer. Creating it connects nothing; each call is one request.
pub(crate) struct Conn {
    http: IntraClient,
    target: NodeId,
    peer: RaftPeer,
}

/// A transport failure, as text (openraft keeps errors as `AnyError`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Transport(String);

impl Conn {
    async fn call<Req, Resp, E>(
        &self,
        what: &str,
        req: &Req,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let url = format!("{}/v1/raft/{what}", self.peer.url.trim_end_matches('/'));
        let resp = self
            .http
            .post(&url)
            .json(req)
            .timeout(option.hard_ttl())
            .send()
            .await
            .map_err(|e| {
                // A refused or failed connect: openraft backs off before the next try.
                if e.is_connect() {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                }
            })?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let msg = format!("{url}: {status}: {}", text.trim());
            return Err(RPCError::Network(NetworkError::new(&Transport(msg))));
        }
        let answer: Result<Resp, RaftError<NodeId, E>> =
            serde_json::from_slice(&body).map_err(|e| {
                let msg = format!("{url}: undecodable answer: {e}");
                RPCError::Network(NetworkError::new(&Transport(msg)))
            })?;
        answer.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.peer.clone(),
                e,
            ))
        })
    }
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        self.call("append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call("snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        self.call("vote", &rpc, &option).await
    }
}
