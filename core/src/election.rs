//! Primary election messages (`POST /v1/vote`, intra-cluster, signed like metasync).
//!
//! When the primary proxy stops answering for the failure window (keepalive interval ×
//! retries), the first live proxy in id order asks every node of the map for a vote in a new
//! term. A node votes yes only if it has not heard from the primary within the window, cannot
//! reach it now, is not itself a primary, and has not voted for another candidate in that
//! term. A strict majority of the map's nodes (the candidate counts itself) makes the
//! candidate primary of a map with the new term.

use serde::{Deserialize, Serialize};

use crate::ClusterMap;

/// A candidate's request for a vote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VoteRequest {
    /// The candidate proxy's id.
    pub candidate: String,
    /// The term it wants to be primary of (greater than its map's term).
    pub term: u64,
    /// The primary the candidate considers dead.
    pub primary: String,
    /// The failure window the candidate used, milliseconds: a voter that heard from the
    /// primary more recently than this votes no.
    pub window_ms: u64,
    /// The candidate's map version and term.
    pub smap_version: u64,
    #[serde(default)]
    pub smap_term: u64,
}

/// A node's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VoteReply {
    pub yes: bool,
    /// Why not (empty on yes).
    #[serde(default)]
    pub reason: String,
    /// The voter's map when it supersedes the candidate's (the candidate adopts it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smap: Option<ClusterMap>,
    /// The voter's map term and version (the new map's term and version exceed them).
    pub smap_version: u64,
    #[serde(default)]
    pub smap_term: u64,
    /// The voter's bucket metadata version (the new primary's exceeds it).
    #[serde(default)]
    pub bmd_version: u64,
    /// The highest term the voter has voted in.
    #[serde(default)]
    pub voted_term: u64,
}

/// What a node remembers of its votes (persisted, so a restart cannot vote twice in a term).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VoteRecord {
    pub term: u64,
    pub candidate: String,
}

impl VoteRecord {
    /// Whether a vote for `candidate` in `term` is allowed by earlier votes.
    pub fn allows(&self, term: u64, candidate: &str) -> bool {
        term > self.term || (term == self.term && candidate == self.candidate)
    }
}

/// Query parameter on metadata pushes naming the pushing primary: a receiver refuses the push
/// unless it carries a map at least as new as its own whose primary is that sender.
pub const PUSH_FROM: &str = "from";

/// Checks a push from `from` carrying `pushed` against the receiver's map `mine`.
pub fn check_push(
    from: &str,
    pushed: Option<&ClusterMap>,
    mine: &ClusterMap,
) -> Result<(), crate::ApiError> {
    let Some(pushed) = pushed else {
        return Err(crate::ApiError::new(
            crate::ErrorKind::Conflict,
            "metadata push without a cluster map",
        ));
    };
    if !pushed.is_primary(from) {
        return Err(crate::ApiError::new(
            crate::ErrorKind::Conflict,
            format!("metadata push from {from}, which is not the primary of the map it sent"),
        ));
    }
    if mine.supersedes(pushed) {
        return Err(crate::ApiError::new(
            crate::ErrorKind::Conflict,
            format!(
                "stale metadata push from {from}: map v{} (term {}) is older than this node's v{} (term {})",
                pushed.version, pushed.term, mine.version, mine.term
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smap::{Node, PROXY};

    fn map(primary: &str, term: u64, version: u64) -> ClusterMap {
        let mut m = ClusterMap::new(
            Node::new(primary, PROXY, "http://127.0.0.1:1"),
            "u".into(),
            String::new(),
        );
        m.term = term;
        m.version = version;
        m
    }

    #[test]
    fn term_orders_before_version() {
        assert!(map("p2", 1, 5).supersedes(&map("p1", 0, 9)));
        assert!(!map("p1", 0, 9).supersedes(&map("p2", 1, 5)));
        assert!(map("p1", 0, 9).supersedes(&map("p1", 0, 8)));
    }

    #[test]
    fn pushes_from_deposed_primaries_are_refused() {
        let mine = map("p2", 1, 5);
        assert!(check_push("p1", Some(&map("p1", 0, 9)), &mine).is_err());
        assert!(check_push("p1", Some(&map("p2", 1, 6)), &mine).is_err());
        assert!(check_push("p2", Some(&map("p2", 1, 5)), &mine).is_ok());
        assert!(check_push("p2", None, &mine).is_err());
    }

    #[test]
    fn one_vote_per_term() {
        let r = VoteRecord {
            term: 3,
            candidate: "p2".into(),
        };
        assert!(r.allows(3, "p2"));
        assert!(!r.allows(3, "p3"));
        assert!(!r.allows(2, "p2"));
        assert!(r.allows(4, "p3"));
    }
}
