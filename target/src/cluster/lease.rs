//! How long this target may act on its cluster map without hearing from the primary.
//!
//! The primary takes a target that has been silent for its keepalive window for a suspect
//! (and later removes it): writes and deletes meant for it then land elsewhere. A target that
//! was paused through that (a SIGSTOP, a frozen VM, a stalled host) knows nothing of it when
//! it resumes: its map still says it owns its objects, and the requests waiting in its socket
//! would be served from copies the cluster has since rewritten or deleted — or written with
//! generations below a delete made meanwhile, which loses them when it catches up.
//!
//! So a target holds its map on a lease, renewed by every answered keepalive (the primary
//! piggybacks newer maps on the answer, so the map is current as of when it was sent). An
//! object request that finds the lease run out first asks the primary for its map — one
//! request for all waiters — and goes on with whatever map it has then: the fresh one marks
//! the target as coming back if the cluster took it for silent (see `Target::switch_smap`).
//! A primary that does not answer within [`CATCH_UP_WAIT`] (an election under way, a
//! partition) does not stop the data path: the request goes on with the map it has, as before
//! the lease, and the next try waits five lease terms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long requests wait for a catch-up with the primary (which answers in milliseconds
/// when it can answer at all).
pub(crate) const CATCH_UP_WAIT: Duration = Duration::from_secs(1);

/// The map lease of one target.
#[derive(Debug)]
pub(crate) struct MapLease {
    /// Reference point for the millisecond stamps below.
    origin: Instant,
    /// How long a confirmation holds: twice the keepalive interval, so one late keepalive
    /// does not expire it, and well inside the primary's suspect window (interval × retries).
    term: Duration,
    /// When the last confirmed map was asked for (ms since `origin`; 0: never).
    confirmed_ms: AtomicU64,
    /// When a catch-up was last tried (ms since `origin`; 0: never).
    tried_ms: AtomicU64,
    /// One catch-up at a time (here and in `Target::catch_up_to`); the waiters behind it
    /// find the lease renewed or the map caught up.
    pub(crate) catching_up: tokio::sync::Mutex<()>,
}

impl MapLease {
    pub(crate) fn new(keepalive_interval: Duration) -> Self {
        Self {
            origin: Instant::now(),
            term: keepalive_interval * 2,
            confirmed_ms: AtomicU64::new(0),
            tried_ms: AtomicU64::new(0),
            catching_up: tokio::sync::Mutex::new(()),
        }
    }

    /// A stamp for "now", to pass to [`MapLease::confirmed`] once the answer to a request sent
    /// now has been applied.
    pub(crate) fn stamp(&self) -> u64 {
        // +1: 0 means "never".
        self.origin.elapsed().as_millis() as u64 + 1
    }

    /// The map was confirmed current as of `stamp` (when the request that confirmed it was
    /// sent).
    pub(crate) fn confirmed(&self, stamp: u64) {
        self.confirmed_ms.fetch_max(stamp, Ordering::SeqCst);
    }

    /// Whether the lease has run out (a fresh target, whose first join has not been answered,
    /// has none: it is "coming back" anyway and checks what it holds).
    pub(crate) fn expired(&self) -> bool {
        let confirmed = self.confirmed_ms.load(Ordering::SeqCst);
        confirmed > 0 && self.stamp().saturating_sub(confirmed) > self.term.as_millis() as u64
    }

    /// Runs the future `catch_up` makes (which answers whether the primary gave its map) if
    /// the lease has run out and nobody tried within the last term; waiters behind a running
    /// catch-up wait for it. Answers whether the lease holds afterwards.
    ///
    /// The catch-up's future is made, and boxed, only when the lease has run out: a request
    /// that awaits this while it holds (every request) carries a pointer, not that future.
    pub(crate) async fn renew_if_expired<F, Fut>(&self, catch_up: F) -> bool
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        if !self.expired() {
            return true;
        }
        Box::pin(self.renew(catch_up)).await
    }

    async fn renew<F, Fut>(&self, catch_up: F) -> bool
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let _one = self.catching_up.lock().await;
        if !self.expired() {
            return true;
        }
        let now = self.stamp();
        let tried = self.tried_ms.load(Ordering::SeqCst);
        if tried > 0 && now.saturating_sub(tried) < 5 * self.term.as_millis() as u64 {
            return false; // tried a moment ago and failed: go on
        }
        self.tried_ms.store(now, Ordering::SeqCst);
        if tokio::time::timeout(CATCH_UP_WAIT, catch_up())
            .await
            .unwrap_or(false)
        {
            self.confirmed(now);
            self.tried_ms.store(0, Ordering::SeqCst); // only failures space the tries
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MapLease;
    use std::time::Duration;

    #[tokio::test]
    async fn a_lease_runs_out_and_one_catch_up_renews_it() {
        let lease = MapLease::new(Duration::from_millis(20));
        assert!(!lease.expired(), "no lease before the first confirmation");
        lease.confirmed(lease.stamp());
        assert!(!lease.expired());
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(lease.expired());
        let calls = std::sync::atomic::AtomicU32::new(0);
        let catch_up = || async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            true
        };
        let (a, b) = tokio::join!(
            lease.renew_if_expired(catch_up),
            lease.renew_if_expired(catch_up)
        );
        assert!(a && b);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(!lease.expired());
    }

    #[tokio::test]
    async fn a_failed_catch_up_is_not_retried_at_once_and_a_hung_one_is_cut_short() {
        let lease = MapLease::new(Duration::from_millis(20));
        lease.confirmed(lease.stamp());
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!lease.renew_if_expired(|| async { false }).await);
        let mut asked = false;
        assert!(
            !lease
                .renew_if_expired(|| async {
                    asked = true;
                    true
                })
                .await
        );
        assert!(!asked, "retried at once");
        // Five terms (5 x 40 ms) after the failure: tried again.
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(lease.renew_if_expired(|| async { true }).await);

        // A primary that never answers holds requests for CATCH_UP_WAIT at most.
        tokio::time::sleep(Duration::from_millis(60)).await;
        let started = std::time::Instant::now();
        assert!(!lease.renew_if_expired(std::future::pending).await);
        assert!(started.elapsed() < super::CATCH_UP_WAIT * 3);
    }
}
