//! A GET or HEAD that missed on the owner during a rebalance: the copy at a past owner.

use crate::Target;
use crate::cluster::peer::gen_of;
use crate::cluster::peer::internal_url;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use gristmill_core::Bck;

/// A GET or HEAD that missed here: if the object's owner under a recent cluster map was
/// another target, the object may not have moved yet — ask it (once, no chains).
pub(crate) async fn fetch_from_past_owner(
    t: &Target,
    bck: &Bck,
    name: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<Response> {
    let uname = bck.object_uname(name);
    let mut tried: Vec<String> = vec![t.id.clone()];
    // Where the object may still be: its owners under the maps we saw before, and — for a
    // target that just joined and saw no earlier map — the owner it would have without us
    // (HRW's runner-up).
    let current = t.smap();
    // The current owner first: a request forwarded here while maps disagree (we are not the
    // owner under our map) must still find the object where our map places it.
    let mut candidates: Vec<gristmill_core::Node> =
        current.owner(&uname).cloned().into_iter().collect();
    candidates.extend(
        t.past_smaps()
            .iter()
            .rev()
            .filter_map(|m| m.owner(&uname).cloned()),
    );
    // Replicas (copies > 1) hold it too; the runner-up is the first of them.
    let copies = t
        .bmd()
        .get(bck)
        .map_or(1, |r| r.props.mirror.copies())
        .max(2);
    candidates.extend(current.owners(&uname, copies).into_iter().skip(1).cloned());
    candidates.truncate(7);
    // While a rebalance is unconfirmed a copy may sit anywhere (a map this target never saw,
    // an aborted rebalance): the rest of the map, after the likely places.
    if !t.placement_settled() {
        candidates.extend(current.tmap.values().cloned());
    }
    // A copy no newer than a delete seen here is that deleted object: never served.
    let buried = t.store.tombstone(bck, name).unwrap_or(0);
    for owner in candidates.iter() {
        if tried.contains(&owner.daemon_id) {
            continue;
        }
        tried.push(owner.daemon_id.clone());
        // A past owner may have moved: use its current address when it has one.
        let owner = current.node(&owner.daemon_id).unwrap_or(owner);
        let query = uri.query().unwrap_or("");
        let url = format!("{}?{query}", internal_url(owner, bck, name));
        let mut req = t.relay.request(method.clone(), url);
        for k in [
            "range",
            "if-match",
            "if-none-match",
            "if-modified-since",
            "if-unmodified-since",
        ] {
            if let Some(v) = headers.get(k) {
                req = req.header(k, v.as_bytes());
            }
        }
        // A paused or wedged holder must not hold the reader: its answer's head comes in
        // seconds or not at all (the body may then stream for as long as it takes).
        let Ok(Ok(resp)) =
            tokio::time::timeout(std::time::Duration::from_secs(5), req.send()).await
        else {
            continue;
        };
        if !resp.status().is_success() && resp.status().as_u16() != 304 {
            tracing::debug!(object = %uname, at = %owner.daemon_id, status = %resp.status(), "not at a past owner");
            continue;
        }
        if buried > 0 && resp.status().is_success() && gen_of(resp.headers()) <= buried {
            tracing::debug!(object = %uname, at = %owner.daemon_id, "a past owner's copy is older than a delete here");
            continue;
        }
        let mut out = Response::builder().status(resp.status().as_u16());
        for (k, v) in resp.headers() {
            if k != "transfer-encoding" && k != "connection" {
                out = out.header(k.as_str(), v.as_bytes());
            }
        }
        tracing::debug!(object = %uname, from = %owner.daemon_id, "served from a past owner");
        return out.body(Body::from_stream(resp.bytes_stream())).ok();
    }
    None
}
