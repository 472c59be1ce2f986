//! Which index records a rebalance (or make-n-copies) acts on, and how: sent to their
//! owners, or — cached copies of a remote bucket that does not move — dropped here.

use std::sync::Arc;

use gristmill_core::{Bck, ClusterMap};

use crate::store::meta::ObjectMeta;

/// Which records a job moves.
pub(super) struct Misplaced {
    pub(super) bmd: Arc<gristmill_core::BucketMetadata>,
    pub(super) smap: Arc<ClusterMap>,
    pub(super) me: String,
    /// The job's bucket (`make-n-copies`), or every bucket.
    pub(super) only: Option<String>,
}

/// What a job does with a record that is not where it belongs.
pub(super) enum Act {
    Send(Bck),
    /// A cached copy of a remote bucket that does not move (`lru.move_cached` off): dropped
    /// here, fetched by its new owner on demand.
    Drop(Bck),
}

impl Misplaced {
    /// What to do with a record: misplaced ones move; with copies > 1 the first owner also
    /// re-creates missing replicas (after a target was lost). Objects of a destroyed bucket
    /// go with it.
    pub(super) fn act(&self, meta: &ObjectMeta) -> Option<Act> {
        if self.only.as_ref().is_some_and(|u| *u != meta.bucket) {
            return None;
        }
        let rec = self.bmd.buckets.get(&meta.bucket)?;
        let copies = rec.props.mirror.copies();
        let owners = self.smap.owners(&rec.bck.object_uname(&meta.name), copies);
        let placed_here = owners.iter().any(|o| o.daemon_id == self.me);
        let first = owners.first().is_some_and(|o| o.daemon_id == self.me);
        if placed_here && !(copies > 1 && first) {
            return None;
        }
        if !placed_here && rec.bck.is_remote() && !rec.props.lru.move_cached {
            return Some(Act::Drop(rec.bck.clone()));
        }
        Some(Act::Send(rec.bck.clone()))
    }

    /// The bucket of a record this target must send.
    pub(super) fn bck(&self, meta: &ObjectMeta) -> Option<Bck> {
        match self.act(meta)? {
            Act::Send(bck) => Some(bck),
            Act::Drop(_) => None,
        }
    }
}
