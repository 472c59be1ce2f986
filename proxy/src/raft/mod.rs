//! The proxies' control plane on Raft (openraft 0.9, issue 16) — work in progress: the type
//! configuration and the persistent storage ([`store`]); the network, the node and the switch
//! from the old election come next (plan: `/work/raft-plan.md` during development).
#![allow(clippy::result_large_err)]

pub(crate) mod store;

use std::io::Cursor;

use gristmill_core::{BucketMetadata, ClusterMap};
use serde::{Deserialize, Serialize};

/// A committed metadata change: the new versions of the cluster map and/or the bucket
/// metadata, as the leader computed them. Applied in log order; a version not newer than the
/// one held is ignored (a replay after a crash changes nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaCmd {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smap: Option<ClusterMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmd: Option<BucketMetadata>,
}

/// What applying a [`MetaCmd`] did: the versions held afterwards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaReply {
    pub smap_version: u64,
    pub bmd_version: u64,
}

/// A proxy as a Raft member: its daemon id and URL (Raft node ids are `u64`: the daemon id's
/// HRW digest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftPeer {
    pub daemon_id: String,
    pub url: String,
}

openraft::declare_raft_types!(
    /// The proxies' Raft group.
    pub TypeConfig:
        D = MetaCmd,
        R = MetaReply,
        NodeId = u64,
        Node = RaftPeer,
);
