//! The reshard coordinator: collects the records of every target, orders them, and assigns\n//! output shards.

//! Reshard (AIStore's dsort): re-pack the samples of many input shards into new shards of a
//! target size, every sample exactly once and never split, in a chosen order.
//!
//! All targets take part; one of them (the *coordinator*, picked by the proxy by HRW of the job
//! id) also orders and assigns. Phases:
//!
//! 1. **Records.** Each target reads the member lists of the input shards it owns (a tar's
//!    index, another format's member list — no member data is read) and groups members into
//!    WebDataset samples: one *record* per sample (key, source shard, position, files and
//!    sizes). It sends its records to the coordinator in batches.
//! 2. **Order and assign.** Once every target has reported, the coordinator orders the
//!    records: by key (`alphanumeric`, optionally decreasing), by a seeded hash of the key
//!    (`shuffle`: the same seed gives the same order whatever the arrival order), in input
//!    order (`none`), or grouped by an external key → shard map. Past `max_mem_records` the
//!    records are sorted in runs spilled to disk and merged, so memory stays bounded. Walking
//!    the order it cuts output shards at the target size (a shard closes at the first sample
//!    that reaches it) and sends each shard's record list to the target that owns the shard's
//!    name — one plan at a time per target through a bounded queue, so plans never pile up.
//! 3. **Build.** Each target builds the shards assigned to it like a get-batch: the files of
//!    each sample come from the owners of their source shards as part streams (ranges found
//!    through the source shards' indexes), written in plan order into the new shard, which
//!    is stored with an ordinary PUT (atomic). Entries keep their member names and get mtime
//!    0, so the same input and order give byte-identical shards.
//!
//! Progress (the job's counters on each target): input shards read plus output shards
//! written (`objects`), bytes written; the total grows once the target knows its assignment.
//! Any target's failure (a malformed input shard) aborts the job everywhere.
use super::*;
use crate::Target;
use crate::jobs::JobRun;
use futures::StreamExt;
use gristmill_core::shards::ReshardSpec;
use gristmill_core::{ApiError, Bck, ErrorKind};
use gristmill_shard::Format;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Phase 2 (coordinator): wait for every target's records, order, cut, assign.
pub(crate) async fn coordinate(
    t: &Arc<Target>,
    run: &Arc<JobRun>,
    spec: &ReshardSpec,
    output: &Bck,
    session: &Arc<Session>,
) -> Result<(), ApiError> {
    let Some((_, collector)) = session.collector.get().cloned() else {
        return Err(ApiError::internal(
            "reshard coordinator without a collector",
        ));
    };
    let want: HashSet<String> = spec.targets.iter().cloned().collect();
    let deadline = tokio::time::Instant::now() + PHASE_TIMEOUT;
    loop {
        {
            let c = collector.lock().expect("collector lock");
            if let Some(e) = c.errors.first() {
                return Err(ApiError::new(ErrorKind::BadRequest, e.clone()));
            }
            if want.is_subset(&c.reported) {
                break;
            }
        }
        tokio::select! {
            _ = session.notify.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = run.cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep_until(deadline) => {
                return Err(ApiError::new(ErrorKind::GatewayTimeout, "reshard: not every target reported its records"));
            }
        }
    }
    let collector = {
        let mut c = collector.lock().expect("collector lock");
        std::mem::replace(
            &mut *c,
            Collector {
                reported: HashSet::new(),
                errors: Vec::new(),
                buffer: Vec::new(),
                runs: Vec::new(),
                spill_dir: PathBuf::new(),
                max_mem: usize::MAX,
                total: 0,
            },
        )
    };
    let total = collector.total;
    let series = spec.output_series()?;
    let size_limit = if spec.output_shard_size == 0 {
        u64::MAX
    } else {
        spec.output_shard_size
    };
    let use_groups = !spec.ekm.is_empty();
    let abort_dups = spec.duplicated_records == "abort";
    let ext = spec.output_ext().to_owned();
    // Cut shards on a blocking thread; hand them over through a small channel.
    let (tx, mut rx) = mpsc::channel::<Result<(String, Vec<Record>), ApiError>>(2);
    tokio::task::spawn_blocking(move || {
        let sorted = match collector.into_sorted() {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        let mut current: Vec<Record> = Vec::new();
        let mut group = String::new();
        let mut filled = 0u64;
        let mut index = 0u64;
        let mut last_key: Option<String> = None;
        let emit = |name: String, recs: Vec<Record>| tx.blocking_send(Ok((name, recs))).is_ok();
        let name_of = |index: u64, group: &str| -> Result<String, ApiError> {
            if use_groups {
                let mut n = group.to_owned();
                if Format::from_name(&n).is_none() {
                    n.push_str(&ext);
                }
                Ok(n)
            } else {
                series.name(index)
            }
        };
        for item in sorted {
            let (k, r) = match item {
                Ok(x) => x,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            if abort_dups && last_key.as_deref() == Some(r.key.as_str()) {
                let _ = tx.blocking_send(Err(ApiError::bad_request(format!(
                    "duplicate sample key {:?} (duplicated_records: abort)",
                    r.key
                ))));
                return;
            }
            last_key = Some(r.key.clone());
            let new_group = use_groups && k.group != group;
            if !current.is_empty() && (new_group || (!use_groups && filled >= size_limit)) {
                let name = match name_of(index, &group) {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                };
                if !emit(name, std::mem::take(&mut current)) {
                    return;
                }
                index += 1;
                filled = 0;
            }
            group = k.group;
            filled += r.archived_size();
            current.push(r);
        }
        if !current.is_empty() {
            match name_of(index, &group) {
                Ok(name) => {
                    emit(name, current);
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                }
            }
        }
    });
    let smap = t.smap();
    let mut per_target: HashMap<String, u64> =
        spec.targets.iter().map(|id| (id.clone(), 0)).collect();
    let mut shards = 0u64;
    let mut sends = futures::stream::FuturesUnordered::new();
    loop {
        let next = tokio::select! {
            n = rx.recv() => n,
            _ = run.cancel.cancelled() => return Ok(()),
        };
        let Some(next) = next else { break };
        let (name, recs) = next?;
        gristmill_core::validate_object_name(&name)?;
        shards += 1;
        if spec.dry_run {
            continue;
        }
        let owner = smap
            .owner(&output.object_uname(&name))
            .ok_or_else(|| ApiError::unavailable("no targets in the cluster map"))?;
        *per_target.entry(owner.daemon_id.clone()).or_default() += 1;
        let url = format!("{}/v1/shards/reshard/{}/plan", owner.url(), run.spec.id);
        let t2 = t.clone();
        sends.push(async move {
            post(
                &t2,
                &url,
                &PlanMsg::Shard {
                    name,
                    records: recs,
                },
            )
            .await
        });
        // A few plans in flight (each waits for room in its target's queue).
        while sends.len() >= 4 {
            if let Some(r) = sends.next().await {
                r?;
            }
        }
    }
    while let Some(r) = sends.next().await {
        r?;
    }
    tracing::info!(job = %run.spec.id, records = total, shards, dry_run = spec.dry_run, "reshard planned");
    for (id, n) in per_target {
        if let Some(node) = smap.node(&id) {
            let url = format!("{}/v1/shards/reshard/{}/plan", node.url(), run.spec.id);
            post(t, &url, &PlanMsg::Done { shards: n }).await?;
        }
    }
    Ok(())
}
