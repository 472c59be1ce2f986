//! Writes admitted under one cluster map versus the rebalance walk of the next.
//!
//! A write decides that this target owns the object when it arrives, and commits later (after
//! its body, an fsync, its replicas). Without a gate, a map change in between lets the
//! rebalance walk list this target's objects before the write commits: the new copy is never
//! sent to the new owner, the primary declares the objects placed, and the copy is orphaned
//! on a target nobody asks any more — the next write elsewhere can then reuse its generation
//! and readers see either. So every write that creates a record here (client writes routed
//! here, rebalance and replica transfers, staged replicas) is *admitted*: it counts itself
//! under the map it decided by, and the walk for map `v` first waits until no write admitted
//! under an earlier map is still in flight. Writes admitted under `v` go on meanwhile — a
//! long upload under the old map delays only the walk, never new writes.

use gristmill_core::ClusterMap;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Writes in flight, counted by the version of the map they were admitted under.
#[derive(Default)]
pub(crate) struct WriteGate {
    in_flight: Mutex<BTreeMap<(u64, u64), usize>>,
    released: tokio::sync::Notify,
}

/// One admitted write: held until the write committed or failed.
pub(crate) struct Admission {
    gate: Arc<WriteGate>,
    /// The map the write was admitted under (its place in the gate).
    pub(crate) smap: Arc<ClusterMap>,
    /// The map that placed the write here: the admission's, or a newer one the owner check
    /// caught up with. What the write counts as hinted is judged by this map, not by the one
    /// current when it commits (the restarting target may be back by then while the walk
    /// still moves the copy).
    pub(crate) placed_by: Arc<ClusterMap>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("smap", &self.smap.version)
            .finish()
    }
}

impl Admission {
    /// The map that placed a write: its admission's, or the current one for a request
    /// admitted without one.
    pub(crate) fn placed_by(
        admission: Option<&Admission>,
        current: impl FnOnce() -> Arc<ClusterMap>,
    ) -> Arc<ClusterMap> {
        admission.map_or_else(current, |a| a.placed_by.clone())
    }
}

impl WriteGate {
    /// Admits a write under the current map. `current` is read under the gate's lock, so a
    /// walk that starts after a map switch either sees this write counted under the older
    /// map, or the write reads the newer one.
    pub(crate) fn admit(self: &Arc<Self>, current: impl FnOnce() -> Arc<ClusterMap>) -> Admission {
        let mut in_flight = self.in_flight.lock().expect("write gate lock");
        let smap = current();
        *in_flight.entry(order(&smap)).or_default() += 1;
        Admission {
            gate: self.clone(),
            placed_by: smap.clone(),
            smap,
        }
    }

    /// Writes still in flight that were admitted under a map older than `smap`.
    pub(crate) fn before(&self, smap: &ClusterMap) -> usize {
        self.in_flight
            .lock()
            .expect("write gate lock")
            .range(..order(smap))
            .map(|(_, n)| n)
            .sum()
    }

    /// Waits until every write admitted under a map older than `smap` committed or failed
    /// (`false`: `cancel` fired first). `tick` runs about once a second while waiting (it
    /// drops expired staged replicas, which hold their admission).
    pub(crate) async fn drain_before(
        &self,
        smap: &ClusterMap,
        cancel: &tokio_util::sync::CancellationToken,
        tick: impl Fn(),
    ) -> bool {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.before(smap) == 0 {
                return true;
            }
            tokio::select! {
                _ = released => {}
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => tick(),
            }
        }
    }
}

/// Maps order by (term, version), as [`ClusterMap::supersedes`] does.
fn order(smap: &ClusterMap) -> (u64, u64) {
    (smap.term, smap.version)
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut in_flight = self.gate.in_flight.lock().expect("write gate lock");
        let key = order(&self.smap);
        if let Some(n) = in_flight.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                in_flight.remove(&key);
            }
        }
        drop(in_flight);
        self.gate.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(version: u64) -> Arc<ClusterMap> {
        let primary = gristmill_core::Node::new("p1", gristmill_core::smap::PROXY, "http://p1");
        let mut m = ClusterMap::new(primary, "uuid".into(), String::new());
        m.version = version;
        Arc::new(m)
    }

    #[tokio::test]
    async fn the_walk_waits_for_older_writes_only() {
        let gate = Arc::new(WriteGate::default());
        let cancel = tokio_util::sync::CancellationToken::new();
        let old = gate.admit(|| map(4));
        let new = gate.admit(|| map(5));
        assert_eq!(gate.before(&map(5)), 1);
        let waiting = {
            let gate = gate.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move { gate.drain_before(&map(5), &cancel, || {}).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a write under v4 is in flight");
        drop(old);
        assert!(waiting.await.unwrap());
        assert_eq!(gate.before(&map(5)), 0);
        assert_eq!(
            gate.before(&map(6)),
            1,
            "the v5 write still counts for a later walk"
        );
        drop(new);
        assert_eq!(gate.before(&map(u64::MAX)), 0);
    }

    #[tokio::test]
    async fn a_superseded_walk_stops_waiting() {
        let gate = Arc::new(WriteGate::default());
        let cancel = tokio_util::sync::CancellationToken::new();
        let _stuck = gate.admit(|| map(1));
        cancel.cancel();
        assert!(!gate.drain_before(&map(2), &cancel, || {}).await);
    }
}
