//! Eviction in two steps, so that a pass frees space at the cost of what it evicts.
//!
//! Removing a record from the records table costs a descent of its B-tree and a copy-on-write
//! of the leaf, and an eviction's records are spread over the whole tree (at 10 M records,
//! 100,000 removals took 3.3–3.9 s, nearly all of it reading and rewriting leaves). The access
//! order already holds what a pass needs — the size and the data file — so a pass only moves
//! each pick's order entry (a contiguous range) to [`EVICTED`], a small table of keys; the data
//! files go when that is durable. From then on every read of the index treats those keys as
//! absent, a write under one of them replaces it, and [`ObjectIndex::start_sweep`] removes the
//! records in the background, a batch per transaction, in key order.
//!
//! A version slot's record (`name\0…`) is removed at once: ranges over an object's slots read
//! the table directly.

use std::sync::atomic::{AtomicBool, Ordering};

use redb::{ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::by_atime::{Records, atime_key, parse_order_value};
use super::{IndexOp, ObjectIndex, object_key};
use crate::store::error::StoreError;

/// Keys (as in the records table) of records an eviction took and the sweep has not removed
/// yet.
pub(super) const EVICTED: TableDefinition<&[u8], ()> = TableDefinition::new("evicted");

/// Records removed per sweep transaction: small enough that writes queued behind one wait
/// milliseconds.
const SWEEP_BATCH: usize = 256;

impl Records<'_> {
    /// Evicts the record `name` of `bucket` if its access time is still `atime_ns` (its order
    /// entry is there): hides it until the sweep removes it, and returns the size and data file
    /// the entry named. `None`: read or rewritten since the pick (or gone).
    pub fn evict_later(
        &mut self,
        bucket: &str,
        atime_ns: i64,
        name: &str,
    ) -> Result<Option<(u64, String)>, StoreError> {
        let Some(entry) = self
            .by_atime
            .remove(atime_key(bucket, atime_ns, name).as_slice())?
        else {
            return Ok(None);
        };
        let Some(picked) = parse_order_value(entry.value()) else {
            return Ok(None);
        };
        drop(entry);
        self.evicted
            .insert(object_key(bucket, name).as_slice(), ())?;
        self.any_evicted = true;
        Ok(Some(picked))
    }

    /// Removes up to `max` evicted records; returns how many keys it cleared.
    pub fn sweep(&mut self, max: usize) -> Result<u64, StoreError> {
        if !self.any_evicted {
            return Ok(0);
        }
        let mut keys = Vec::with_capacity(max);
        for item in self.evicted.iter()?.take(max) {
            keys.push(item?.0.value().to_vec());
        }
        for key in &keys {
            self.objects.remove(key.as_slice())?;
            self.evicted.remove(key.as_slice())?;
        }
        Ok(keys.len() as u64)
    }
}

/// The evicted keys a read transaction must skip; `None` when there are none.
pub(super) struct Hidden(Option<ReadOnlyTable<&'static [u8], ()>>);

impl Hidden {
    pub fn of(tx: &ReadTransaction) -> Result<Self, StoreError> {
        let table = tx.open_table(EVICTED)?;
        Ok(Self(if table.is_empty()? { None } else { Some(table) }))
    }

    pub fn hides(&self, key: &[u8]) -> Result<bool, StoreError> {
        match &self.0 {
            Some(t) => Ok(t.get(key)?.is_some()),
            None => Ok(false),
        }
    }

    /// How many keys are hidden.
    pub fn len(&self) -> Result<u64, StoreError> {
        match &self.0 {
            Some(t) => Ok(t.len()?),
            None => Ok(0),
        }
    }
}

impl ObjectIndex {
    /// How many evicted records wait for the sweep. Blocking.
    pub fn evicted_pending(&self) -> Result<u64, StoreError> {
        Hidden::of(&self.db.begin_read()?)?.len()
    }

    /// Removes the evicted records in the background (one sweep at a time per index; a call
    /// while one runs leaves the rest to it).
    pub fn start_sweep(&self) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let index = self.clone();
        tokio::spawn(async move {
            loop {
                index.sweep_all().await;
                index.sweeping.store(false, Ordering::Release);
                // An eviction that committed after the last batch and found this sweep
                // running: its keys are this sweep's to remove.
                let more = index.evicted_pending().is_ok_and(|n| n > 0);
                if !more || index.sweeping.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
        });
    }

    async fn sweep_all(&self) {
        let mut swept = 0u64;
        loop {
            match self
                .apply_relaxed(IndexOp::SweepEvicted { max: SWEEP_BATCH })
                .await
            {
                Ok(applied) if applied.dropped > 0 => swept += applied.dropped,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "index: sweeping evicted records failed");
                    return;
                }
            }
        }
        // Durable, so that redb can reuse the pages the removals freed.
        if swept > 0
            && let Err(e) = self.sync().await
        {
            tracing::warn!(error = %e, "index: syncing the evicted records' removal failed");
        }
        metrics::counter!("grist_lru_swept_total").increment(swept);
    }
}

/// Whether an index is sweeping (see [`ObjectIndex::start_sweep`]).
pub(super) type Sweeping = std::sync::Arc<AtomicBool>;
