//! Reads on a target that came back into the cluster map (after a restart, a removal by the
//! failure detector, or `remove-node` + join) while objects may have been rewritten or deleted
//! elsewhere without it.
//!
//! Such a target serves nothing it cannot prove current: from its start (or from the moment it
//! learns it was removed) until the primary confirms that every object is placed by a map that
//! has it (once every rebalance — which also carries tombstones — is done), or its first join
//! finds the map unchanged, placement counts as unsettled and a local copy is checked against
//! every other target of the map before it is served. A copy that lost to a newer write or delete is dropped (counted
//! and logged), and the read goes where the newer one is (or answers 404); a holder that
//! cannot be asked makes the answer unknown, and the read answers 503 with Retry-After.

use crate::Target;
use crate::store::epoch_of;
use gristmill_core::{ApiError, Bck};

/// Checks this target's copy of `bck/name` before a native GET or HEAD serves it. `Ok` when
/// there is nothing to check, the copy is current, or the stale copy was dropped (the caller
/// then finds it missing and looks elsewhere).
pub(crate) async fn verify_before_serving(
    t: &Target,
    bck: &Bck,
    name: &str,
) -> Result<(), ApiError> {
    if !t.is_returning() {
        return Ok(());
    }
    // Boxed: every GET would otherwise carry this rare path's large future.
    Box::pin(verify_while_returning(t, bck, name)).await
}

/// [`verify_before_serving`] on a target that is coming back.
async fn verify_while_returning(t: &Target, bck: &Bck, name: &str) -> Result<(), ApiError> {
    let Ok(local) = t.store.head(bck, name) else {
        return Ok(());
    };
    let generation = local.effective_gen();
    let elsewhere = crate::cluster::placement::elsewhere(t, bck, name)
        .await
        .map_err(|e| {
            ApiError::unavailable(format!(
                "{bck}/{name}: this target is coming back into the cluster and cannot yet tell whether its copy is current ({})",
                e.message
            ))
        })?;
    if elsewhere.floor <= generation {
        return Ok(());
    }
    // Something newer exists elsewhere: this copy must not be served.
    let newer_copy = elsewhere
        .newest
        .as_ref()
        .is_some_and(|(g, _)| *g > generation);
    let dropped = if newer_copy {
        // Without a tombstone: the newer copy is on its way here by the rebalance and a
        // tombstone of its generation would refuse it.
        t.store
            .delete_if_file(bck, name, &local.file)
            .await
            .unwrap_or(false)
    } else {
        t.store
            .bury(
                bck,
                name,
                crate::store::index::BuryGen::Exact(elsewhere.floor),
            )
            .await
            .is_ok_and(|(removed, _)| removed.is_some())
    };
    if dropped {
        metrics::counter!("grist_stale_copies_dropped_total").increment(1);
        tracing::info!(
            object = %name,
            bucket = %bck,
            generation,
            epoch = epoch_of(generation),
            newer = elsewhere.floor,
            deleted = !newer_copy,
            "dropped a copy rewritten or deleted while this target was out of the map"
        );
    }
    Ok(())
}
