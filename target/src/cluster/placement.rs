//! Where copies of an object may be while the cluster changes (settled vs unsettled), the
//! generation floor of a write, a delete on every possible holder, and the past maps.

use crate::Target;
use crate::cluster::peer::bucket_query;
use crate::cluster::peer::gen_of;
use crate::cluster::peer::header_u64;
use crate::cluster::peer::internal_url;
use gristmill_core::api::header as h;
use gristmill_core::{ApiError, Bck, ClusterMap};
use std::sync::Arc;

/// Every other target of the current map that may hold a copy of the object. Once every
/// object is placed by the current map (no past maps held), those are its replica holders.
/// While a rebalance is not yet confirmed, every target of the map: a copy may sit on an
/// owner under any map since the last confirmed one — including maps this target never saw
/// (pushed out of order, or before it joined) and rebalances aborted half-way. Nodes no
/// longer in the map are left out (there is nobody to ask).
pub(crate) fn other_holders(t: &Target, bck: &Bck, name: &str) -> Vec<gristmill_core::Node> {
    let current = t.smap();
    if !t.placement_settled() {
        // A restarting target is left out: nothing it holds can be newer than a write made
        // while it is away (generations carry the map version), and it gets the tombstones of
        // deletes when it is back (see [`restarting_holder`] for reads).
        return current
            .tmap
            .values()
            .filter(|n| n.daemon_id != t.id && !n.is_restarting())
            .cloned()
            .collect();
    }
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    current
        .owners(&bck.object_uname(name), copies)
        .into_iter()
        .filter(|n| n.daemon_id != t.id)
        .cloned()
        .collect()
}

/// A restarting target that holds the object's copy this target lacks: its owner (or a
/// replica holder) under the map with restarting targets counted, when this target is not one
/// of those. A read or delete that finds nothing here must then answer 503 (the object may
/// well exist), not 404. Maps not yet placed count too: just after a restarting target is
/// back, its copy may not answer for a moment (it is still catching up with the map).
pub(crate) fn restarting_holder(t: &Target, bck: &Bck, name: &str) -> Option<String> {
    let current = t.smap();
    let past = t.past_smaps();
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    let uname = bck.object_uname(name);
    for m in std::iter::once(&current).chain(past.iter().rev()) {
        if !m.has_restarting() {
            continue;
        }
        let homes = m.owners_counting_restarting(&uname, copies);
        if homes.iter().any(|n| n.daemon_id == t.id) {
            return None; // one of its homes: what it lacks, nobody has
        }
        if let Some(n) = homes.iter().find(|n| n.is_restarting()) {
            return Some(n.daemon_id.clone());
        }
    }
    None
}

/// The 503 for a read or delete of an object only a restarting target may hold.
pub(crate) fn restarting_refusal(bck: &Bck, name: &str, holder: &str) -> ApiError {
    ApiError::unavailable(format!(
        "{bck}/{name}: the target that holds it ({holder}) is restarting; try again"
    ))
}

/// Counts a write that landed here (and on its replicas) instead of on a restarting target:
/// a hinted copy, which moves back when that target is back. Judged by the map that placed
/// the write (`placed_by`), not the current one: a target back by the time the write commits
/// still gets the copy moved to it.
pub(crate) fn count_hinted(
    t: &Target,
    placed_by: &gristmill_core::ClusterMap,
    bck: &Bck,
    name: &str,
    size: u64,
) {
    if !placed_by.has_restarting() {
        return;
    }
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    let uname = bck.object_uname(name);
    let homes = placed_by.owners_counting_restarting(&uname, copies);
    let hinted = placed_by
        .owners(&uname, copies)
        .iter()
        .filter(|n| !homes.iter().any(|h| h.daemon_id == n.daemon_id))
        .count() as u64;
    if hinted > 0 {
        metrics::counter!("grist_hinted_copies_total").increment(hinted);
        metrics::counter!("grist_hinted_bytes_total").increment(hinted * size);
    }
}

/// How long a holder has to answer a generation question or a delete.
pub(crate) const HOLDER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The highest generation other possible holders report for an object (copies a rebalance
/// has not moved yet, tombstones of deletes they saw): a new write or delete on the owner
/// must order after it. A holder that does not answer makes the order unknown: the write is
/// refused (503, retryable) rather than given a generation an old copy could beat.
pub(crate) async fn gen_floor(t: &Target, bck: &Bck, name: &str) -> Result<u64, ApiError> {
    Ok(elsewhere(t, bck, name).await?.floor)
}

/// What other possible holders of an object have (see [`gen_floor`]).
#[derive(Debug, Default)]
pub(crate) struct Elsewhere {
    /// The highest generation reported: of a copy or a tombstone.
    pub(crate) floor: u64,
    /// The newest live copy reported: its generation and ETag (without quotes).
    pub(crate) newest: Option<(u64, String)>,
    /// Every live copy reported, by holder: copies a rebalance has not moved (or an aborted
    /// one left behind) that the write makes stale.
    pub(crate) copies: Vec<(gristmill_core::Node, u64)>,
}

impl Elsewhere {
    /// The floor a new write takes its generation above: past every copy and tombstone
    /// reported, with one generation to spare when copies are elsewhere, so that they can be
    /// retired with a tombstone ([`retire_copies`]) that stays below the new write's.
    pub(crate) fn write_floor(&self) -> u64 {
        if self.copies.is_empty() {
            self.floor
        } else {
            self.floor + 1
        }
    }
}

/// After a write committed here while copies of the object's older versions sat elsewhere (a
/// rebalance not yet done, or one aborted half-way): those copies are removed — each with a
/// tombstone one past its own generation, below the write's — so a holder that becomes the
/// owner again before the new version reaches it cannot serve the old one. Best effort: a
/// holder that does not answer keeps its copy, which the next rebalance replaces.
pub(crate) async fn retire_copies(t: &Target, bck: &Bck, name: &str, elsewhere: &Elsewhere) {
    let retire = elsewhere.copies.iter().map(|(node, generation)| async move {
        let resp = t
            .relay
            .delete(internal_url(node, bck, name))
            .query(&bucket_query(bck))
            .header(h::GEN, generation + 1)
            .timeout(HOLDER_TIMEOUT)
            .send()
            .await;
        if let Err(e) = resp {
            tracing::debug!(object = %name, holder = %node.daemon_id, error = %e, "an older copy was not retired");
        }
    });
    futures::future::join_all(retire).await;
}

/// Asks every other possible holder of an object what it has (nobody once placement is
/// settled: replicas take their generation from this owner, so nobody can be ahead). A holder
/// that does not answer makes the order unknown: the write is refused (503, retryable) rather
/// than given a generation an old copy could beat.
pub(crate) async fn elsewhere(t: &Target, bck: &Bck, name: &str) -> Result<Elsewhere, ApiError> {
    if t.placement_settled() {
        return Ok(Elsewhere::default());
    }
    let asks = other_holders(t, bck, name)
        .into_iter()
        .map(|node| async move {
            let resp = t
                .relay
                .head(internal_url(&node, bck, name))
                .query(&bucket_query(bck))
                .timeout(HOLDER_TIMEOUT)
                .send()
                .await;
            match resp {
                Ok(r) if r.status().is_success() => {
                    let etag = r
                        .headers()
                        .get(reqwest::header::ETAG)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .trim_matches('"')
                        .to_owned();
                    Ok((node, gen_of(r.headers()), Some(etag)))
                }
                Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => {
                    Ok((node, header_u64(r.headers(), h::TOMBSTONE_GEN), None))
                }
                Ok(r) => Err(format!("{}: {}", node.daemon_id, r.status())),
                Err(e) => Err(format!("{}: {e}", node.daemon_id)),
            }
        });
    let mut out = Elsewhere::default();
    for answer in futures::future::join_all(asks).await {
        match answer {
            Ok((node, generation, etag)) => {
                out.floor = out.floor.max(generation);
                if let Some(etag) = etag {
                    if out.newest.as_ref().is_none_or(|(g, _)| generation > *g) {
                        out.newest = Some((generation, etag));
                    }
                    out.copies.push((node, generation));
                }
            }
            Err(e) => {
                return Err(ApiError::unavailable(format!(
                    "{bck}/{name}: a rebalance is in progress and a target that may hold a copy did not answer ({e}); try again"
                )));
            }
        }
    }
    // A copy older than a delete reported elsewhere is that deleted object.
    if out.newest.as_ref().is_some_and(|(g, _)| *g < out.floor) {
        out.newest = None;
    }
    Ok(out)
}

/// After the owner buried an object (tombstone generation `generation`): the same delete on every
/// other possible holder — owners under maps still being rebalanced, and replicas — so no copy
/// of it survives to come back. Answers whether any of them held it; an error when one could
/// not be told (the delete is then not confirmed: the client retries, which is harmless).
pub(crate) async fn delete_everywhere(
    t: &Target,
    bck: &Bck,
    name: &str,
    generation: u64,
) -> Result<bool, ApiError> {
    delete_on_other_holders(t, bck, name, |r| r.header(h::GEN, generation))
        .await
        .map_err(|e| {
            tracing::warn!(object = %name, error = %e, "delete of another copy failed");
            ApiError::unavailable(format!(
                "{bck}/{name}: deleted on its owner, but a target that may hold a copy was not reached ({e}); try again"
            ))
        })
}

/// After the owner deleted one version of an object for good (versioned buckets): the same on
/// every other possible holder — replicas keep the same versions, and a past owner may not have
/// moved it yet. Answers whether any of them held it; an error when one could not be told.
/// With `lock` (a client's delete), each holder checks Object Lock itself: one refusing
/// answers 403, which the client gets.
pub(crate) async fn delete_version_everywhere(
    t: &Target,
    bck: &Bck,
    name: &str,
    id: &str,
    lock: Option<crate::store::index::LockCheck>,
) -> Result<bool, ApiError> {
    delete_on_other_holders(t, bck, name, |r| {
        let r = r.query(&[(gristmill_core::api::query::VERSION_ID, id)]);
        match lock {
            Some(l) => r
                .header(crate::write::local::LOCK_CHECK_HEADER, "true")
                .header(
                    gristmill_core::object_lock::BYPASS_GOVERNANCE_HEADER,
                    if l.bypass_governance { "true" } else { "false" },
                ),
            None => r,
        }
    })
    .await
    .map_err(|e| match e {
        HolderError::Refused(why) => ApiError::new(gristmill_core::ErrorKind::Forbidden, why),
        HolderError::Unreached(e) => ApiError::unavailable(format!(
            "{bck}/{name} version {id}: deleted here, but a target that may hold it was not reached ({e}); try again"
        )),
    })
}

/// Why a delete on another holder did not go through.
enum HolderError {
    /// It did not answer, or failed.
    Unreached(String),
    /// It refused (403: Object Lock).
    Refused(String),
}

impl std::fmt::Display for HolderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HolderError::Unreached(e) | HolderError::Refused(e) => f.write_str(e),
        }
    }
}

/// An internal DELETE (shaped by `with`) on every other possible holder, at once: whether any
/// held it (2xx rather than 404), or the first holder that did not answer.
async fn delete_on_other_holders(
    t: &Target,
    bck: &Bck,
    name: &str,
    with: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
) -> Result<bool, HolderError> {
    let with = &with;
    let deletes = other_holders(t, bck, name)
        .into_iter()
        .map(|node| async move {
            let req = t
                .relay
                .delete(internal_url(&node, bck, name))
                .query(&bucket_query(bck))
                .timeout(HOLDER_TIMEOUT);
            match with(req).send().await {
                Ok(r) if r.status().is_success() => Ok(true),
                Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => Ok(false),
                Ok(r) if r.status() == reqwest::StatusCode::FORBIDDEN => {
                    let why = r.text().await.unwrap_or_default();
                    Err(HolderError::Refused(format!("{}: {why}", node.daemon_id)))
                }
                Ok(r) => Err(HolderError::Unreached(format!(
                    "{}: {}",
                    node.daemon_id,
                    r.status()
                ))),
                Err(e) => Err(HolderError::Unreached(format!("{}: {e}", node.daemon_id))),
            }
        });
    let mut held = false;
    for answer in futures::future::join_all(deletes).await {
        held |= answer?;
    }
    Ok(held)
}

/// Active targets of a map (their placement ids: id, and weight when not the default), and
/// restarting ones marked with a leading `~`: what a change must alter for objects to move
/// (see [`only_went_restarting`]).
pub(crate) fn placement_key(smap: &ClusterMap) -> Vec<String> {
    smap.tmap
        .values()
        .filter_map(|n| {
            if n.is_restarting() {
                Some(format!("~{}", n.placement_id()))
            } else if !n.is_inactive() {
                Some(n.placement_id())
            } else {
                None
            }
        })
        .collect()
}

/// Whether the only difference between two placement keys is active targets that went
/// restarting: no rebalance then. A restarting target that is back, removed, or put in
/// maintenance or decommissioned is a real change.
pub(crate) fn only_went_restarting(before: &[String], after: &[String]) -> bool {
    let restarting = |id: &str| format!("~{id}");
    after.iter().all(|e| {
        before.contains(e)
            || e.strip_prefix('~')
                .is_some_and(|id| before.iter().any(|b| b == id))
    }) && before
        .iter()
        .all(|e| after.contains(e) || after.contains(&restarting(e)))
}

/// How many earlier maps a target remembers. Forgetting one loses no object: while any past
/// map is held, writes, deletes and missed reads ask every target of the map.
pub(crate) const PAST_MAPS_KEPT: usize = 3;

/// Remembers the maps an object may still be placed by (most recent last). A target's first
/// map is remembered after the empty one it started with: until the primary says every
/// object is placed, it cannot know which targets held objects before it joined.
pub(crate) fn remember(past: &mut Vec<Arc<ClusterMap>>, old: Arc<ClusterMap>) {
    past.push(old);
    if past.len() > PAST_MAPS_KEPT {
        past.remove(0);
    }
}

/// A map older than `current` that arrived late: kept among the past maps (in version order)
/// if placement is unsettled and it is not there yet. Answers whether it was added.
pub(crate) fn remember_late(
    past: &mut Vec<Arc<ClusterMap>>,
    current: &ClusterMap,
    late: ClusterMap,
) -> bool {
    if past.is_empty()
        || late.version == 0
        || !current.supersedes(&late)
        || past.iter().any(|m| m.version == late.version)
    {
        return false;
    }
    let at = past.partition_point(|m| m.version < late.version);
    past.insert(at, Arc::new(late));
    if past.len() > PAST_MAPS_KEPT {
        past.remove(0);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(version: u64) -> ClusterMap {
        let mut m = ClusterMap::new(
            gristmill_core::Node::new("p", gristmill_core::smap::PROXY, "http://p"),
            String::new(),
            String::new(),
        );
        m.version = version;
        m
    }

    fn versions(past: &[Arc<ClusterMap>]) -> Vec<u64> {
        past.iter().map(|m| m.version).collect()
    }

    #[test]
    fn only_targets_going_restarting_move_nothing() {
        let key = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let all = key(&["a", "b", "c"]);
        assert!(only_went_restarting(&all, &key(&["a", "~b", "c"])));
        assert!(only_went_restarting(&all, &key(&["~a", "~b", "c"])));
        // Back, removed, or in maintenance after restarting: objects move.
        assert!(!only_went_restarting(&key(&["a", "~b", "c"]), &all));
        assert!(!only_went_restarting(
            &key(&["a", "~b", "c"]),
            &key(&["a", "c"])
        ));
        // A target that left while another went restarting.
        assert!(!only_went_restarting(&all, &key(&["a", "~b"])));
        // A new target.
        assert!(!only_went_restarting(&all, &key(&["a", "~b", "c", "d"])));
    }

    #[test]
    fn a_first_map_is_remembered_after_the_empty_one() {
        // A target that just joined cannot know where objects were before it: unsettled.
        let mut past = Vec::new();
        remember(&mut past, Arc::new(map(0)));
        assert_eq!(versions(&past), [0]);
        for v in 1..=4 {
            remember(&mut past, Arc::new(map(v)));
        }
        assert_eq!(versions(&past), [2, 3, 4], "the oldest go first");
    }

    #[test]
    fn a_map_that_arrives_late_joins_the_past_ones_in_order() {
        let current = map(9);
        let mut past = vec![Arc::new(map(5)), Arc::new(map(8))];
        assert!(remember_late(&mut past, &current, map(7)));
        assert_eq!(versions(&past), [5, 7, 8]);
        assert!(!remember_late(&mut past, &current, map(7)), "once");
        assert!(
            !remember_late(&mut past, &current, map(9)),
            "not the current one"
        );
        assert!(!remember_late(&mut past, &current, map(0)));
        assert!(remember_late(&mut past, &current, map(6)));
        assert_eq!(versions(&past), [6, 7, 8], "still at most three");
        // Settled (every object placed by the current map): a late map changes nothing.
        let mut settled = Vec::new();
        assert!(!remember_late(&mut settled, &current, map(8)));
        assert!(settled.is_empty());
    }
}
