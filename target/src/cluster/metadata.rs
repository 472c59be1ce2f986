//! Catching up with the primary's metadata: a bucket or map this target has not seen yet is
//! fetched once before a request is refused.

use crate::Target;
use gristmill_core::{ApiError, Bck, MetaSync};

impl Target {
    /// Succeeds if the bucket exists; on a miss, refreshes the bucket metadata from the primary
    /// once (a bucket created a moment ago may not have reached us yet).
    pub(crate) async fn require_bucket(&self, bck: &Bck) -> Result<(), ApiError> {
        if self.bmd().contains(bck) {
            return Ok(());
        }
        // Boxed: every request that finds its bucket would otherwise carry this future.
        Box::pin(self.fetch_bucket(bck)).await
    }

    /// [`Target::require_bucket`] of a bucket this target's metadata does not name (yet).
    async fn fetch_bucket(&self, bck: &Bck) -> Result<(), ApiError> {
        let primary = self.smap().proxy_si.url().to_owned();
        self.refresh_bmd(&primary).await;
        if self.bmd().contains(bck) {
            return Ok(());
        }
        // A remote bucket nobody named through a proxy yet (a client talking to targets
        // directly): have the primary add it, as a proxy would.
        if bck.is_remote() && !primary.is_empty() {
            let resp = self
                .http
                .post(format!("{primary}/v1/buckets/{}", bck.name))
                .query(&[
                    ("provider", bck.provider.as_str()),
                    ("namespace", bck.namespace.uname().as_str()),
                ])
                .json(&gristmill_core::api::ActionMsg::new(
                    gristmill_core::api::action::ADD_REMOTE_BUCKET,
                ))
                .send()
                .await
                .map_err(|e| ApiError::unavailable(format!("adding {bck}: {e}")))?;
            if !resp.status().is_success() {
                return Err(crate::cluster::peer::peer_error(resp, &format!("adding {bck}")).await);
            }
            self.refresh_bmd(&primary).await;
        }
        if self.bmd().contains(bck) {
            Ok(())
        } else {
            Err(bck.not_found())
        }
    }

    /// Fetches the primary's bucket metadata (a bucket created a moment ago may not have
    /// reached us yet).
    pub(crate) async fn refresh_bmd(&self, primary: &str) {
        if primary.is_empty() {
            return;
        }
        if let Ok(resp) = self
            .http
            .get(format!("{primary}/v1/daemon?what=bmd"))
            .send()
            .await
            && let Ok(bmd) = resp.json().await
        {
            let _ = self
                .apply_metasync(MetaSync {
                    smap: None,
                    bmd: Some(bmd),
                })
                .await;
        }
    }

    /// A target that just joined can be sent requests (the primary routes by the new map)
    /// before the map reaches it; without a map it can neither place objects nor know
    /// buckets, so such a request waits for the map (briefly) instead of getting a wrong 404.
    pub(crate) async fn await_first_map(&self) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.smap().version == 0 {
            if tokio::time::Instant::now() >= deadline {
                return Err(ApiError::unavailable(
                    "this target has not joined a cluster yet (no cluster map)",
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Fetches the primary's cluster map (another target redirected a request here under a
    /// newer one).
    pub(crate) async fn refresh_smap(&self) {
        let primary = self.smap().proxy_si.url().to_owned();
        if primary.is_empty() {
            return;
        }
        if let Ok(resp) = self
            .http
            .get(format!("{primary}/v1/daemon?what=smap"))
            .timeout(std::time::Duration::from_secs(2))
            .send()
            .await
            && let Ok(smap) = resp.json().await
        {
            let _ = self
                .apply_metasync(MetaSync {
                    smap: Some(smap),
                    bmd: None,
                })
                .await;
        }
    }

    /// Catches up with a map at least as new as `version`, which the node that sent a
    /// request here holds (a proxy's redirect names its map's version): one fetch for all the
    /// requests that wait for it.
    pub(crate) async fn catch_up_to(&self, version: u64) {
        let _one = self.lease.catching_up.lock().await;
        if self.smap().version < version {
            self.refresh_smap().await;
        }
    }
}
