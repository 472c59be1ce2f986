//! Per-object metadata: what the index stores and what each data file carries in its xattr.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::store::error::StoreError;

/// Format version of the persisted metadata record; bump it and migrate on read when the
/// layout changes.
pub const META_FORMAT_VERSION: u8 = 1;

/// Extended attribute on each data file holding its [`ObjectMeta`], so the index can be rebuilt
/// from the files alone.
pub const META_XATTR: &str = "user.grist.meta";

/// Everything Gristmill knows about one stored object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// `provider/@uuid#ns/bucket`: lets a data file name its owner when the index is rebuilt.
    pub bucket: String,
    /// Object name inside the bucket.
    pub name: String,
    pub size: u64,
    /// Checksum algorithm (`xxhash` by default) and lowercase hex value.
    pub cksum_type: String,
    pub cksum_value: String,
    /// Monotonic per-object version for native buckets; the remote's version/ETag for caches.
    pub version: String,
    /// Last access, Unix nanoseconds.
    pub atime_ns: i64,
    /// Last modification (PUT), Unix nanoseconds.
    pub mtime_ns: i64,
    /// Data file name relative to the mountpath root. Each write gets a fresh name, so a crash
    /// mid-overwrite leaves the old file (still referenced) plus an orphan, never a torn object.
    pub file: String,
    /// User and system key/values (`ETag`, `source`, `content-type`, user metadata...).
    #[serde(default)]
    pub custom: BTreeMap<String, String>,
    /// Owner-assigned generation: which of two copies of an object is newer. Each write on
    /// the owner takes one more than every generation known for the object (here, in its
    /// tombstone, and on past owners while a rebalance is unfinished); copies keep theirs
    /// through rebalance, replication and resilver. Never a wall clock: hosts' clocks differ.
    /// 0 in records written before generations existed (see [`ObjectMeta::effective_gen`]).
    #[serde(default)]
    pub generation: u64,
}

impl ObjectMeta {
    /// A record that names only its object, size and data file, everything else empty: what
    /// an eviction knows of a record it freed (from the access order), and a test's stand-in.
    pub fn bare(bucket: &str, name: &str, size: u64, file: String) -> Self {
        Self {
            bucket: bucket.to_owned(),
            name: name.to_owned(),
            size,
            cksum_type: String::new(),
            cksum_value: String::new(),
            version: String::new(),
            atime_ns: 0,
            mtime_ns: 0,
            file,
            custom: Default::default(),
            generation: 0,
        }
    }

    /// The generation to compare copies by. Records from before generations existed count
    /// native objects' version (it counted writes the same way); cached copies of remote
    /// objects count as 0.
    pub fn effective_gen(&self) -> u64 {
        if self.generation > 0 {
            return self.generation;
        }
        if self.bucket.starts_with("ais/") {
            return self.version.parse().unwrap_or(0);
        }
        0
    }

    /// Versioned binary encoding: one format byte, then msgpack.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![META_FORMAT_VERSION];
        // Serializing a plain struct into a Vec cannot fail.
        rmp_serde::encode::write_named(&mut out, self).expect("msgpack encode");
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        match bytes.split_first() {
            Some((&META_FORMAT_VERSION, rest)) => rmp_serde::from_slice(rest)
                .map_err(|e| StoreError::Corrupt(format!("object metadata: {e}"))),
            Some((v, _)) => Err(StoreError::Corrupt(format!(
                "object metadata format {v} is newer than this build understands"
            ))),
            None => Err(StoreError::Corrupt("empty object metadata".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let m = ObjectMeta {
            bucket: "ais/@#/b".into(),
            name: "x/y".into(),
            size: 42,
            cksum_type: "xxhash".into(),
            cksum_value: "00ff".into(),
            version: "1".into(),
            atime_ns: 1,
            mtime_ns: 2,
            file: "obj/aa/bb".into(),
            custom: [("k".to_string(), "v".to_string())].into(),
            generation: 3,
        };
        assert_eq!(ObjectMeta::decode(&m.encode()).unwrap(), m);
        assert!(ObjectMeta::decode(&[9, 1, 2]).is_err());
    }
}
