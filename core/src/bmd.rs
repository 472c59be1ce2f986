//! Bucket metadata ("BMD" in AIStore): every bucket the cluster knows, with its properties,
//! under one version. Changed only by the primary proxy and pushed to every node.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::BucketProps;
use crate::bucket::Bck;

/// One bucket and its properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    pub bck: Bck,
    pub props: BucketProps,
}

/// All buckets, keyed by bucket uname (`provider/@uuid#ns/name`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketMetadata {
    pub version: u64,
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub buckets: BTreeMap<String, BucketRecord>,
    /// ETL definitions, by name (versioned and pushed with the buckets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub etls: BTreeMap<String, crate::etl::EtlSpec>,
    /// Users and their roles when auth is on (versioned and pushed with the buckets, so every
    /// node checks requests against the same list). Verifiers only; see [`crate::users`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: crate::users::Users,
    /// Term of the leader that made this version (see `ClusterMap::term`): bucket
    /// metadata orders by (term, version). Omitted while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub term: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl BucketMetadata {
    /// Whether this version is newer than `other`: by term first, then version.
    pub fn supersedes(&self, other: &BucketMetadata) -> bool {
        (self.term, self.version) > (other.term, other.version)
    }

    pub fn get(&self, bck: &Bck) -> Option<&BucketRecord> {
        self.buckets.get(&bck.uname())
    }

    pub fn contains(&self, bck: &Bck) -> bool {
        self.buckets.contains_key(&bck.uname())
    }
}

/// What the primary pushes to every node: the newest versions of the cluster metadata.
/// A receiver applies each part only if it is newer than what it has.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MetaSync {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smap: Option<crate::smap::ClusterMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmd: Option<BucketMetadata>,
}
