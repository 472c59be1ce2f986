//! The scrub job: every copy read back and checked; a corrupt one quarantined and repaired
//! ([`crate::verify`]).

use crate::Target;
use crate::jobs::{JobRun, Outcome};
use crate::store::meta::ObjectMeta;
use crate::verify::CORRUPT;
use crate::verify::REPAIRED;
use crate::verify::UNREPAIRABLE;
use crate::verify::check_file;
use crate::verify::quarantine_and_repair;
use futures::StreamExt;
use gristmill_core::job::{JobKind, Resolved};
use gristmill_core::{ApiError, Bck};
use std::sync::Arc;

/// Objects listed per page by a scrub.
pub(crate) const LIST_PAGE: usize = 10_000;

/// This target's share of a scrub: every object it holds of the bucket (or of every bucket),
/// read sequentially and checked; corrupt copies repaired unless `no_repair`.
pub(crate) async fn run(t: &Arc<Target>, run: &Arc<JobRun>) -> Result<(), ApiError> {
    let spec = &run.spec;
    debug_assert_eq!(spec.kind, JobKind::Scrub);
    let buckets: Vec<Bck> = match &spec.bck {
        Some(b) => {
            t.require_bucket(b).await?;
            vec![b.clone()]
        }
        None => t.bmd().buckets.values().map(|r| r.bck.clone()).collect(),
    };
    let prefix = match spec.selection.resolve()? {
        Resolved::Prefix(p) => p,
        _ => {
            return Err(ApiError::bad_request(
                "scrub takes a bucket and optionally a prefix",
            ));
        }
    };
    let workers = spec.opts.num_workers.clamp(1, 16);
    for k in [CORRUPT, REPAIRED, UNREPAIRABLE] {
        run.count(k, 0); // shown as 0 rather than absent
    }
    let mut listed = 0u64;
    for bck in buckets {
        let mut after = String::new();
        loop {
            if run.cancel.is_cancelled() {
                return Ok(());
            }
            let page = t.store.list(&bck, &prefix, &after, LIST_PAGE, true).await?;
            let more = page.len() >= LIST_PAGE;
            let Some(last) = page.last().map(|m| m.name.clone()) else {
                break;
            };
            listed += page.len() as u64;
            futures::stream::iter(page)
                .take_until(run.cancel.cancelled())
                .map(|meta| {
                    let (t, run, bck) = (t.clone(), run.clone(), bck.clone());
                    async move {
                        let name = meta.name.clone();
                        let result = scrub_one(&t, &run, &bck, meta).await;
                        run.record(&name, result);
                    }
                })
                .buffer_unordered(workers)
                .collect::<()>()
                .await;
            if !more {
                break;
            }
            after = last;
        }
    }
    *run.total.lock().expect("job total lock") = Some(listed);
    purge_old_quarantine(t).await;
    Ok(())
}

pub(crate) async fn purge_old_quarantine(t: &Arc<Target>) {
    let (store, keep) = (t.store.clone(), t.quarantine_keep);
    match tokio::task::spawn_blocking(move || store.purge_quarantine(keep)).await {
        Ok(Ok((0, _))) => {}
        Ok(Ok((files, bytes))) => {
            tracing::info!(files, bytes, "scrub: old quarantined copies deleted")
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "scrub: purging the quarantine"),
        Err(e) => tracing::warn!(error = %e, "scrub: purging the quarantine"),
    }
}

/// Checks one object's copy here; repairs it if corrupt.
pub(crate) async fn scrub_one(
    t: &Arc<Target>,
    run: &JobRun,
    bck: &Bck,
    meta: ObjectMeta,
) -> Result<Outcome, ApiError> {
    let path = match t.store.holder_of(bck, &meta)? {
        Some(mp) => mp.path.join(&meta.file),
        None => return Ok(Outcome::Skipped), // rewritten, deleted or moved meanwhile
    };
    let m = meta.clone();
    let verdict = tokio::task::spawn_blocking(move || match std::fs::File::open(&path) {
        Ok(f) => check_file(&f, &m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(Err("the data file is missing".to_owned()))
        }
        Err(e) => Err(e),
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("reading {}: {e}", meta.name)))?;
    let Err(why) = verdict else {
        return Ok(Outcome::Done(meta.size));
    };
    // Overwritten or deleted while we read: not corruption.
    match t.store.head(bck, &meta.name) {
        Ok(now) if now.file == meta.file => {}
        _ => return Ok(Outcome::Skipped),
    }
    run.count(CORRUPT, 1);
    if run.spec.opts.no_repair {
        metrics::counter!("grist_corrupt_objects_total", "found_by" => "scrub").increment(1);
        return Err(ApiError::internal(format!(
            "corrupt ({why}); not repaired (no_repair)"
        )));
    }
    match quarantine_and_repair(t, bck, &meta, &why, "scrub").await {
        Ok(n) => {
            run.count(REPAIRED, 1);
            Ok(Outcome::Done(n))
        }
        Err(e) => {
            run.count(UNREPAIRABLE, 1);
            Err(ApiError::new(
                e.kind,
                format!("corrupt ({why}): {}", e.message),
            ))
        }
    }
}
