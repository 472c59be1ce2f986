//! The candidates of one eviction pass, oldest access first. Each mountpath's index keeps
//! every cached bucket's records in access order (`store/index/by_atime.rs`); a pass reads a
//! page at a time from the (mountpath, bucket) orders whose limits still need room and merges
//! them. What it reads is what it evicts, plus what a read since the last flush made young
//! again, plus at most one page per order — never the whole index.

use std::collections::{HashMap, VecDeque};

use std::sync::Arc;

use crate::store::Mountpath;
use crate::store::error::StoreError;
use crate::store::index::AtimeEntry;

/// Entries read from one order at a time.
const PAGE: usize = 256;

/// One cached object a pass may evict.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    /// Where it is (its place in the store's mountpaths, and the mountpath).
    pub mp: usize,
    pub mountpath: Arc<Mountpath>,
    pub bucket: String,
    pub name: String,
    pub size: u64,
    /// Its access time when picked: it is evicted only if that is still the one stored.
    pub atime_ns: i64,
}

/// One cached bucket's access order on one mountpath.
pub(super) struct Order {
    pub mp: usize,
    pub mountpath: Arc<Mountpath>,
    pub bucket: String,
    /// Objects read after this (Unix ns) are kept.
    pub cutoff: i64,
    /// The bucket's `dont_evict_time` (ns): when a kept object becomes evictable.
    pub keep: i64,
    after: Option<Vec<u8>>,
    page: VecDeque<AtimeEntry>,
    dry: bool,
}

impl Order {
    /// The order of `bucket` on mountpath `mp`, keeping what was read within `keep_ns` of
    /// `now_ns`.
    pub fn new(
        (mp, mountpath): (usize, Arc<Mountpath>),
        bucket: String,
        now_ns: i64,
        keep_ns: i64,
    ) -> Self {
        Self {
            mp,
            mountpath,
            bucket,
            cutoff: now_ns.saturating_sub(keep_ns),
            keep: keep_ns,
            after: None,
            page: VecDeque::new(),
            dry: false,
        }
    }

    fn refill(&mut self) -> Result<u64, StoreError> {
        if !self.page.is_empty() || self.dry {
            return Ok(0);
        }
        let page = (self.mountpath.index).oldest(&self.bucket, self.after.as_deref(), PAGE)?;
        self.dry = page.len() < PAGE;
        if let Some(last) = page.last() {
            self.after = Some(last.key.clone());
        }
        let n = page.len() as u64;
        self.page.extend(page);
        Ok(n)
    }
}

/// The merged orders of a pass.
pub(super) struct Merge {
    orders: Vec<Order>,
    /// Entries read from the indexes.
    pub examined: u64,
    /// A candidate old enough to evict was found.
    pub any: bool,
    /// When the first object kept for its `dont_evict_time` becomes evictable (`i64::MAX`:
    /// none seen).
    pub next_eligible: i64,
}

impl Merge {
    pub fn new(orders: Vec<Order>) -> Self {
        Self {
            orders,
            examined: 0,
            any: false,
            next_eligible: i64::MAX,
        }
    }

    /// The oldest candidate of the orders that `wanted(mountpath, bucket)` still wants (the
    /// others are kept, unread: a pick that is not evicted gives its room back and may make
    /// them wanted again), or `None` when no wanted order has one old enough. `pending` gives
    /// a read not yet flushed to the index. Blocking.
    pub fn next(
        &mut self,
        wanted: impl Fn(usize, &str) -> bool,
        pending: impl Fn(&str, &str) -> Option<i64>,
    ) -> Result<Option<Candidate>, StoreError> {
        loop {
            let mut failed = None;
            let mut examined = 0;
            let mut next_eligible = self.next_eligible;
            self.orders.retain_mut(|o| {
                if failed.is_some() || !wanted(o.mp, &o.bucket) {
                    return true;
                }
                match o.refill() {
                    Ok(n) => examined += n,
                    Err(e) => {
                        failed = Some(e);
                        return true;
                    }
                }
                match o.page.front() {
                    None => false,
                    Some(head) if head.atime_ns > o.cutoff => {
                        next_eligible = next_eligible.min(head.atime_ns.saturating_add(o.keep));
                        false
                    }
                    Some(_) => true,
                }
            });
            self.examined += examined;
            self.next_eligible = next_eligible;
            if let Some(e) = failed {
                return Err(e);
            }
            let Some(o) = self
                .orders
                .iter_mut()
                .filter(|o| !o.page.is_empty() && wanted(o.mp, &o.bucket))
                .min_by_key(|o| o.page.front().map_or(i64::MAX, |e| e.atime_ns))
            else {
                return Ok(None);
            };
            let e = o.page.pop_front().expect("a kept order has a head");
            // Read since the last flush: younger than its place in the order says.
            if let Some(atime) = pending(&o.bucket, &e.name)
                && atime > o.cutoff
            {
                self.next_eligible = self.next_eligible.min(atime.saturating_add(o.keep));
                continue;
            }
            self.any = true;
            return Ok(Some(Candidate {
                mp: o.mp,
                mountpath: o.mountpath.clone(),
                bucket: o.bucket.clone(),
                name: e.name,
                size: e.size,
                atime_ns: e.atime_ns,
            }));
        }
    }
}

/// How many bytes each limit of a pass still needs freed.
#[derive(Debug, Clone)]
pub(super) struct Room {
    pub mountpaths: Vec<i128>,
    pub cache: i128,
    pub buckets: HashMap<String, i128>,
}

impl Room {
    pub fn any(&self) -> bool {
        self.mountpaths.iter().any(|n| *n > 0)
            || self.cache > 0
            || self.buckets.values().any(|n| *n > 0)
    }

    /// Whether evicting an object of `bucket` on mountpath `mp` helps a limit that still
    /// needs room.
    pub fn helps(&self, mp: usize, bucket: &str) -> bool {
        self.mountpaths.get(mp).is_some_and(|n| *n > 0)
            || self.cache > 0
            || self.buckets.get(bucket).is_some_and(|n| *n > 0)
    }

    /// Counts `bytes` freed (negative: given back) for an object of `bucket` on `mp`.
    pub fn free(&mut self, mp: usize, bucket: &str, bytes: i128) {
        if let Some(n) = self.mountpaths.get_mut(mp) {
            *n -= bytes;
        }
        self.cache -= bytes;
        if let Some(n) = self.buckets.get_mut(bucket) {
            *n -= bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_freed_per_limit_and_helps_only_where_needed() {
        let mut room = Room {
            mountpaths: vec![10, 0],
            cache: 0,
            buckets: HashMap::from([("q".to_owned(), 5)]),
        };
        assert!(room.helps(0, "other"));
        assert!(room.helps(1, "q"));
        assert!(!room.helps(1, "other"));
        room.free(1, "q", 5);
        assert!(!room.helps(1, "q"));
        assert!(room.any());
        room.free(0, "other", 10);
        assert!(!room.any());
        room.free(0, "other", -1);
        assert!(room.helps(0, "x"));
    }
}
