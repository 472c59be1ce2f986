//! The proxies' control plane on Raft (openraft 0.9): the type configuration and the replicated command ([`MetaCmd`], a
//! compare-and-set of whole states), the persistent storage ([`store`]), the HTTP transport
//! ([`network`] out, [`api`] in) and the running member ([`node::RaftNode`]).
#![allow(clippy::result_large_err)]

pub(crate) mod api;
pub(crate) mod network;
pub(crate) mod node;
pub(crate) mod store;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::io::Cursor;

use gristmill_core::{BucketMetadata, ClusterMap};
use serde::{Deserialize, Serialize};

pub(crate) use node::RaftNode;
pub use node::RaftSettings;
pub(crate) use store::MetaState;

/// A metadata change as the leader computed it: new whole states plus the versions they were
/// computed from. Applied only if the state machine still holds exactly those versions (a
/// compare-and-set), so a proposal made from a stale view can never overwrite a newer
/// committed state, and `apply` needs no logic beyond the comparison (deterministic).
/// `None` = unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaCmd {
    /// Cluster map version the change was computed from (0 = none yet).
    pub base_smap: u64,
    /// Bucket metadata version the change was computed from (0 = none yet).
    pub base_bmd: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smap: Option<ClusterMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmd: Option<BucketMetadata>,
    /// Daemon ids refused on join (the whole new list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<BTreeSet<String>>,
}

/// What applying an entry did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The command's states were installed.
    Applied,
    /// The command's base versions were not the current ones: nothing changed.
    Conflict,
    /// Nothing to change (blank or membership entry, or an empty command).
    #[default]
    Unchanged,
}

/// The reply to an entry: its outcome and the versions held afterwards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaReply {
    pub outcome: Outcome,
    pub smap_version: u64,
    pub bmd_version: u64,
}

/// A proxy as a Raft member: its daemon id and URL (Raft node ids are `u64`: the daemon id's
/// HRW digest, see [`raft_id`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftPeer {
    pub daemon_id: String,
    pub url: String,
}

/// A proxy's Raft node id: the HRW digest of its daemon id (openraft ids must be `Copy`).
pub(crate) fn raft_id(daemon_id: &str) -> u64 {
    gristmill_core::hrw::digest(daemon_id)
}

openraft::declare_raft_types!(
    /// The proxies' Raft group.
    pub TypeConfig:
        D = MetaCmd,
        R = MetaReply,
        NodeId = u64,
        Node = RaftPeer,
);
