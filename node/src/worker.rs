//! Background loops of a node (capacity reports, tombstone purges, LRU eviction, placement
//! watch): one shape for all of them. A [`Worker`] says how often it runs and what one round
//! does; [`spawn`] runs it until the node's shutdown token fires — between rounds, never in
//! the middle of one — and then lets it finish (flush what it buffered).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// One background loop.
pub trait Worker: Send + Sync + 'static {
    /// For logs.
    fn name(&self) -> &'static str;

    /// The pause between rounds.
    fn period(&self) -> Duration;

    /// Whether the first round runs at once (else after one period).
    fn runs_at_start(&self) -> bool {
        false
    }

    /// A notification that starts the next round early (e.g. "disk filled up").
    fn wake(&self) -> Option<&Notify> {
        None
    }

    /// One round of work.
    fn round(&self) -> impl Future<Output = ()> + Send;

    /// Called once after shutdown fired.
    fn finish(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Runs `worker` on the runtime until `shutdown` fires.
pub fn spawn<W: Worker>(
    worker: Arc<W>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tracing::debug!(worker = worker.name(), "started");
        let mut first = worker.runs_at_start();
        loop {
            if !first {
                let woken = async {
                    match worker.wake() {
                        Some(n) => n.notified().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(worker.period()) => {}
                    _ = woken => {}
                }
            }
            first = false;
            if shutdown.is_cancelled() {
                break;
            }
            worker.round().await;
        }
        worker.finish().await;
        tracing::debug!(worker = worker.name(), "stopped");
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counter {
        rounds: AtomicUsize,
        finished: AtomicUsize,
        wake: Notify,
    }

    impl Worker for Counter {
        fn name(&self) -> &'static str {
            "counter"
        }
        fn period(&self) -> Duration {
            Duration::from_secs(3600)
        }
        fn runs_at_start(&self) -> bool {
            true
        }
        fn wake(&self) -> Option<&Notify> {
            Some(&self.wake)
        }
        async fn round(&self) {
            self.rounds.fetch_add(1, Ordering::SeqCst);
        }
        async fn finish(&self) {
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn runs_at_start_on_wake_and_finishes_once_at_shutdown() {
        let w = Arc::new(Counter {
            rounds: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            wake: Notify::new(),
        });
        let shutdown = CancellationToken::new();
        let task = spawn(w.clone(), shutdown.clone());
        let until = |n: usize| {
            let w = w.clone();
            async move {
                while w.rounds.load(Ordering::SeqCst) < n {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(5), until(1))
            .await
            .unwrap();
        w.wake.notify_one();
        tokio::time::timeout(Duration::from_secs(5), until(2))
            .await
            .unwrap();
        shutdown.cancel();
        task.await.unwrap();
        assert_eq!(
            w.rounds.load(Ordering::SeqCst),
            2,
            "no round after shutdown"
        );
        assert_eq!(w.finished.load(Ordering::SeqCst), 1);
    }
}
