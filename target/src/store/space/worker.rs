//! The LRU worker: the background half of space management (see the parent module).

use std::sync::Arc;

use gristmill_core::BucketMetadata;

use super::{Incoming, Space};

/// The LRU loop of a target: every `check_interval` (or when a write finds the disk filling),
/// flushes access times and evicts down to the low watermark when over the high one; at
/// shutdown, flushes access times once more.
pub struct LruWorker<F> {
    pub space: Arc<Space>,
    /// The current bucket metadata (quotas, which buckets are caches).
    pub bmd: F,
}

impl<F> gristmill_node::worker::Worker for LruWorker<F>
where
    F: Fn() -> Arc<BucketMetadata> + Send + Sync + 'static,
{
    fn name(&self) -> &'static str {
        "lru"
    }

    fn period(&self) -> std::time::Duration {
        self.space.config().check_interval
    }

    fn wake(&self) -> Option<&tokio::sync::Notify> {
        Some(&self.space.wake)
    }

    async fn round(&self) {
        if let Err(e) = self.space.store.flush_atimes().await {
            tracing::warn!(error = %e, "could not flush access times");
        }
        let bmd = (self.bmd)();
        metrics::gauge!("grist_cache_bytes").set(self.space.cached_bytes(&bmd) as f64);
        // Fills still streaming count as cached: the pass makes their room too.
        let streaming = self.space.reserved.snapshot();
        if self.space.over_high_mark(&bmd) {
            self.space
                .evict(&bmd, false, &Incoming::all(&streaming))
                .await;
        } else if self.space.relieved(&bmd, &self.space.config()) {
            // Bytes freed, or a larger quota: the next fill that needs room looks again.
            self.space.record_pass(None);
        }
    }

    async fn finish(&self) {
        let _ = self.space.store.flush_atimes().await;
    }
}
