//! The common start of every object request: bucket from the path and query, name checks,
//! and whether this target serves it or redirects to the owner under its map.

use crate::Target;
use axum::extract::Query;
use axum::http::{Method, Uri};
use axum::response::Response;
use gristmill_core::api::query as q;
use gristmill_core::{ApiError, Bck, validate_object_name};
use gristmill_node::server::redirect;
use std::collections::HashMap;

pub(crate) type Params = Query<HashMap<String, String>>;

/// Query flag on requests a target redirected to the owner under its map, with that map's
/// version (see [`gristmill_core::api::query::FORWARDED`]).
pub(crate) const FORWARDED: &str = gristmill_core::api::query::FORWARDED;

/// Bucket from the path segment and the `provider` / `namespace` query parameters.
pub(crate) fn bucket_from(name: &str, params: &HashMap<String, String>) -> Result<Bck, ApiError> {
    Bck::from_request(
        name,
        params.get(q::PROVIDER).map(String::as_str),
        params.get(q::NAMESPACE).map(String::as_str),
    )
}

/// Where an object request is served.
pub(crate) enum Routed {
    /// By this target, for this bucket; a write holds its admission (see
    /// [`crate::cluster::gate`]) until it has committed or failed.
    Here(Bck, Option<crate::cluster::gate::Admission>),
    /// By the owner: the 307 to send.
    Elsewhere(Response),
}

impl Target {
    /// The common start of every object request: validates bucket and name, makes sure the
    /// bucket exists, and finds who serves it.
    pub(crate) async fn route_object(
        &self,
        bucket: &str,
        name: &str,
        params: &HashMap<String, String>,
        method: &Method,
        uri: &Uri,
    ) -> Result<Routed, ApiError> {
        let bck = bucket_from(bucket, params)?;
        validate_object_name(name)?;
        gristmill_core::api::refuse_node_only_params(params.keys())?;
        self.await_first_map().await?;
        // Paused past its map lease, this target may have been taken for silent meanwhile:
        // it hears from the primary before it acts on its map (see `cluster::lease`).
        self.lease
            .renew_if_expired(|| crate::cluster::membership::confirm_map(self))
            .await;
        self.require_bucket(&bck).await?;
        // Admitted before ownership is decided, so the decision's map is never older than the
        // one the admission counts under.
        let mut admitted =
            (!matches!(*method, Method::GET | Method::HEAD)).then(|| self.admit_write());
        Ok(
            match self
                .redirect_if_not_owner(&bck, name, params, method, uri)
                .await?
            {
                Placed::Elsewhere(redirect) => Routed::Elsewhere(redirect),
                Placed::Here(smap) => {
                    if let Some(a) = admitted.as_mut() {
                        a.placed_by = smap;
                    }
                    Routed::Here(bck, admitted)
                }
            },
        )
    }

    /// `Elsewhere(redirect)` when another target owns the object under this target's map,
    /// otherwise `Here` with the map that placed it here. A
    /// request a proxy or another target redirected here names its map's version: if that map is newer
    /// than ours, we catch up first; if ours is newer, the sender was behind and the request
    /// goes on to the owner under ours. Two targets on the same version agree on the owner.
    pub(crate) async fn redirect_if_not_owner(
        &self,
        bck: &Bck,
        name: &str,
        params: &HashMap<String, String>,
        method: &Method,
        uri: &Uri,
    ) -> Result<Placed, ApiError> {
        let uname = bck.object_uname(name);
        let mut smap = self.smap();
        let sent: Option<u64> = params.get(FORWARDED).map(|v| v.parse().unwrap_or(0));
        // The sender (a proxy or target) places the object by a newer map: catch up first,
        // whoever owns the object under ours — that map may route this target's objects
        // elsewhere, or say it is back from being out (its copies are then checked).
        if let Some(v) = sent.filter(|v| *v > smap.version) {
            Box::pin(self.catch_up_to(v)).await;
            smap = self.smap();
        }
        let Some(owner) = smap.owner(&uname) else {
            return Ok(Placed::Here(smap));
        };
        if owner.daemon_id == self.id {
            return Ok(Placed::Here(smap));
        }
        if sent.is_some_and(|v| v >= smap.version) {
            // The sender's map is at least as new as ours and places the object here.
            if matches!(*method, Method::GET | Method::HEAD) {
                return Ok(Placed::Here(smap)); // served from here or a past owner
            }
            return Err(ApiError::unavailable(format!(
                "cluster maps disagree about the owner of {bck}/{name} (this target has version {}); retry",
                smap.version
            )));
        }
        let query: String = uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|kv| !kv.is_empty() && !kv.starts_with(FORWARDED))
            .map(|kv| format!("{kv}&"))
            .collect();
        let location = format!(
            "{}{}?{query}{FORWARDED}={}",
            owner.url(),
            uri.path(),
            smap.version
        );
        Ok(Placed::Elsewhere(redirect(&location)))
    }
}

/// The owner check's answer (see [`Target::redirect_if_not_owner`]).
pub(crate) enum Placed {
    /// Served here, as placed by this map.
    Here(std::sync::Arc<gristmill_core::ClusterMap>),
    /// By the owner: the 307 to send.
    Elsewhere(Response),
}
