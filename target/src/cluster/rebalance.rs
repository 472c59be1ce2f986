//! Global rebalance: after a cluster-map change that moves objects (a target joined, left,
//! went into maintenance), every target sends the objects it holds but no longer owns to
//! their new owner, which verifies the checksum before storing them; the source drops its
//! copies only when all its transfers are done, so GETs, HEADs and listings find every object
//! throughout (a miss on the new owner is served from the previous owner, see
//! [`fetch_from_past_owner`]).
//!
//! A rebalance is a job with id `rb<map version>` on every target, so its progress shows up
//! like any job's. A newer map aborts the running one and starts its own; an interrupted one
//! (crash) runs again after the restart: the work is "whatever is misplaced now", less what
//! the interrupted run delivered under the same placement ([`sent`]). `rebalance_bandwidth`
//! caps the bytes per second a target sends.

use crate::Target;
use crate::cluster::peer::bucket_query;
use crate::cluster::peer::gen_of;
use crate::cluster::peer::internal_url;
use crate::jobs::{JobRun, Outcome};
use crate::store::meta::ObjectMeta;
use axum::body::Body;
use axum::http::HeaderValue;
use axum::response::Response;
use futures::StreamExt;
use gristmill_core::api::header as h;
use gristmill_core::api::internal::REBALANCE;
use gristmill_core::{ApiError, Bck, ClusterMap, ErrorKind};
use std::sync::Arc;
use std::time::Duration;

mod misplaced;
mod sent;
use misplaced::{Act, Misplaced};
use sent::{Entry, SentLog, Under};

/// Records read from the index per step of the walk.
const SCAN_PAGE: usize = 1024;
/// Most misplaced records sent per batch, all at once: the log records a batch once it is
/// delivered, so this bounds what a target killed mid-batch sends again when it resumes.
/// Every receive is a durable write; the more of them a receiver has at once, the more
/// share one index fsync (group commit) and the more data fsyncs the device runs side by
/// side (8 at a time moved ~1,050 small objects/s here, see docs/benchmarks.md).
const SEND_BATCH: usize = 32;
/// How long transfers that fail are retried (in rounds, with a growing pause) at the
/// start of a job; later batches still get [`BATCH_RETRY`].
const JOB_RETRY: Duration = Duration::from_secs(60);
const BATCH_RETRY: Duration = Duration::from_secs(5);

/// Runs a rebalance (every bucket) or a `make-n-copies` job (the job's bucket only): the same
/// walk, since both mean "bring every copy to where the map and `mirror.copies` want it".
///
/// The walk streams each mountpath's index in key order a page at a time and sends what is
/// misplaced in batches; what it delivered is logged on disk ([`sent`]), so its memory does
/// not grow with the object count and a target killed halfway resumes without sending again
/// what was delivered.
pub(crate) async fn run(t: &Arc<Target>, run: &Arc<JobRun>) -> Result<(), ApiError> {
    let smap = t.smap();
    // Writes admitted under an earlier map commit first, so the walk lists them.
    let waiting = t.gate.before(&smap);
    if waiting > 0 {
        tracing::info!(job = %run.spec.id, writes = waiting, "rebalance: waiting for writes admitted under earlier maps");
        let prune = || crate::cluster::replicas::drop_expired_stages(t);
        if !t.gate.drain_before(&smap, &run.cancel, prune).await {
            return Ok(()); // superseded while waiting
        }
    }
    let judge = Arc::new(Misplaced {
        bmd: t.bmd(),
        smap: smap.clone(),
        me: t.id.clone(),
        only: run.spec.bck.as_ref().map(|b| b.uname()),
    });
    let (state_dir, resumable) = (t.state_dir.clone(), judge.only.is_none());
    // One writer of the named log at a time: a superseded run stops at its next check, but
    // may be appending its last batch right now.
    let _log = if resumable {
        tokio::select! {
            held = t.rebalance_log.lock() => Some(held),
            _ = run.cancel.cancelled() => return Ok(()),
        }
    } else {
        None
    };
    let mountpaths = t.store.mountpaths();
    let under = Under {
        placement: smap.active_placement(),
        mountpaths: mountpaths.iter().map(|m| m.path.clone()).collect(),
    };
    let (mps, j) = (mountpaths.clone(), judge.clone());
    let (mut log, total) = blocking(move || {
        let log = if resumable {
            SentLog::open(&state_dir, &under)
        } else {
            SentLog::anonymous(&state_dir)
        }
        .map_err(|e| ApiError::internal(format!("rebalance log: {e}")))?;
        let mut total = 0u64;
        for mp in &mps {
            mp.index
                .for_each(|meta| total += j.bck(&meta).is_some() as u64)?;
        }
        Ok((log, total))
    })
    .await?;
    *run.total.lock().expect("job total lock") = Some(total);
    if log.resumed_from() > 0 {
        tracing::info!(job = %run.spec.id, delivered = log.resumed_from(), "rebalance: resuming; what the interrupted run delivered is confirmed with its owners, not sent again");
    }
    let started = tokio::time::Instant::now();
    let pace = Pace::new(t.rebalance_bandwidth);
    for (m, mp) in mountpaths.iter().enumerate() {
        let mut after: Option<Vec<u8>> = None;
        loop {
            // One page of the index: its misplaced records, each marked when the log says
            // an interrupted run delivered it (blocking: the index and the log are files).
            let (mp2, j) = (mp.clone(), judge.clone());
            let (last, todo, drop, back) = blocking(move || {
                let page = mp2.index.scan_after(after.as_deref(), SCAN_PAGE)?;
                let (mut todo, mut drop) = (Vec::new(), Vec::new());
                for (key, meta) in &page {
                    let bck = match j.act(meta) {
                        None => continue,
                        Some(Act::Drop(bck)) => {
                            drop.push((bck, meta.name.clone(), meta.file.clone()));
                            continue;
                        }
                        Some(Act::Send(bck)) => bck,
                    };
                    let claimed = log.delivered_before(m, key, meta);
                    todo.push(Move {
                        bck,
                        meta: meta.clone(),
                        claimed,
                    });
                }
                let last = page.last().map(|(k, _)| k.clone());
                Ok((last, todo, drop, log))
            })
            .await?;
            log = back;
            if run.cancel.is_cancelled() {
                return Ok(()); // superseded: the next map decides what stays here
            }
            for (bck, name, file) in drop {
                // Counted before the copy goes (see `drop_delivered`).
                t.drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Ok(true) = t.store.delete_if_file(&bck, &name, &file).await {
                    run.count("dropped_not_moved", 1);
                }
            }
            let Some(last) = last else { break };
            after = Some(last);
            for batch in todo.chunks(SEND_BATCH) {
                let deadline = (started + JOB_RETRY).max(tokio::time::Instant::now() + BATCH_RETRY);
                let sent = send_batch(t, &smap, run, batch.to_vec(), deadline, &pace).await;
                if run.cancel.is_cancelled() {
                    // Superseded: the copies stay until a rebalance completes (the next
                    // one, under another placement, walks and sends anew).
                    return Ok(());
                }
                let mut entries: Vec<Entry> =
                    sent.iter().map(|mv| Entry::of(m, &mv.meta)).collect();
                log = blocking(move || {
                    log.append(&mut entries)
                        .map_err(|e| ApiError::internal(format!("rebalance log: {e}")))?;
                    Ok(log)
                })
                .await?;
            }
        }
    }
    // Deletes travel too: a target that comes back (or an owner that never saw the delete)
    // gets the tombstones of what was deleted while it was out, so its old copies go.
    let tombstones = send_tombstones(t, &smap, run).await?;
    if tombstones > 0 {
        tracing::info!(job = %run.spec.id, tombstones, "rebalance: tombstones sent to owners");
    }
    if run.cancel.is_cancelled() {
        return Ok(());
    }
    drop_delivered(t, &smap, log).await?;
    if resumable {
        let dir = t.state_dir.clone();
        blocking(move || {
            SentLog::remove(&dir);
            Ok(())
        })
        .await?;
    }
    Ok(())
}

/// One misplaced record to send.
#[derive(Clone)]
struct Move {
    bck: Bck,
    meta: ObjectMeta,
    /// The log says an interrupted run delivered it: confirmed with the owners (a HEAD
    /// each), not sent again — unless an owner lacks it (restored from an older state).
    claimed: bool,
}

/// Sends one batch, retrying what fails in rounds until `deadline` (only the last round's
/// failures count as the job's errors). Returns what was delivered.
async fn send_batch(
    t: &Arc<Target>,
    smap: &Arc<ClusterMap>,
    run: &Arc<JobRun>,
    mut todo: Vec<Move>,
    deadline: tokio::time::Instant,
    pace: &Pace,
) -> Vec<Move> {
    let mut sent = Vec::new();
    let mut pause = Duration::from_millis(500);
    loop {
        let last_round = tokio::time::Instant::now() + pause >= deadline;
        let results: Vec<(Move, Result<Outcome, ApiError>, bool)> =
            futures::stream::iter(std::mem::take(&mut todo))
                .take_until(run.cancel.cancelled())
                .map(|mv| async move {
                    if mv.claimed && held_by_owners(t, smap, &mv.bck, &mv.meta).await {
                        return (mv, Ok(Outcome::Skipped), true);
                    }
                    pace.take(mv.meta.size).await;
                    let result = send(t, smap, &mv.bck, &mv.meta, last_round).await;
                    (mv, result, false)
                })
                .buffer_unordered(SEND_BATCH)
                .collect()
                .await;
        for (mv, result, already_moved) in results {
            if already_moved {
                run.count("already_moved", 1);
            }
            match result {
                Ok(outcome) => {
                    let done = matches!(outcome, Outcome::Done(_));
                    run.record(&mv.meta.name, Ok(outcome));
                    if done {
                        sent.push(mv);
                    }
                }
                Err(e) if !last_round => {
                    tracing::debug!(object = %mv.meta.name, error = %e.message, "rebalance: will retry");
                    todo.push(mv);
                }
                Err(e) => run.record(&mv.meta.name, Err(e)),
            }
        }
        if todo.is_empty() || run.cancel.is_cancelled() {
            return sent;
        }
        tokio::select! {
            _ = run.cancel.cancelled() => return sent,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(8));
    }
}

/// Whether every owner of the object other than this target holds this copy (or a newer
/// one).
async fn held_by_owners(t: &Target, smap: &ClusterMap, bck: &Bck, meta: &ObjectMeta) -> bool {
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    for node in smap.owners(&bck.object_uname(&meta.name), copies) {
        if node.daemon_id != t.id && !has_copy(t, node, bck, meta).await {
            return false;
        }
    }
    true
}

/// Every transfer is acknowledged: drops the delivered copies the log names (unless
/// rewritten meanwhile — another data file —, or this target is one of the object's replica
/// holders).
async fn drop_delivered(
    t: &Arc<Target>,
    smap: &Arc<ClusterMap>,
    log: SentLog,
) -> Result<(), ApiError> {
    let bmd = t.bmd();
    let mut entries = Some(Box::new(
        blocking(move || {
            log.entries()
                .map_err(|e| ApiError::internal(format!("rebalance log: {e}")))
        })
        .await?,
    ));
    while let Some(mut it) = entries.take() {
        let (chunk, it) = blocking(move || {
            let chunk: Vec<Entry> = it.by_ref().take(SCAN_PAGE).filter_map(Result::ok).collect();
            Ok((chunk, it))
        })
        .await?;
        if chunk.is_empty() {
            break;
        }
        entries = Some(it);
        let gone = chunk.into_iter().filter_map(|e| {
            let rec = bmd.buckets.get(&e.b)?;
            let copies = rec.props.mirror.copies();
            let owner_here = smap
                .owners(&rec.bck.object_uname(&e.n), copies)
                .iter()
                .any(|o| o.daemon_id == t.id);
            (!owner_here).then_some((rec.bck.clone(), e))
        });
        // Many at once: each removal is a durable index change, and removals in flight
        // together share one fsync (one after another, they were half of a rebalance's time).
        futures::stream::iter(gone)
            .map(|(bck, e)| async move {
                // Counted before the copy goes: a listing that read the counter earlier
                // learns that a name may have left this target after the new owner's page
                // was taken.
                t.drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = t.store.delete_if_file(&bck, &e.n, &e.f).await;
            })
            .buffer_unordered(SEND_BATCH)
            .collect::<()>()
            .await;
    }
    Ok(())
}

/// Runs blocking work (index walks, the log's file) off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
}

/// Spreads a job's transfers to at most `rate` bytes per second (0: no limit), so a
/// rebalance does not starve the reads it runs beside.
struct Pace {
    rate: u64,
    next: std::sync::Mutex<tokio::time::Instant>,
}

impl Pace {
    fn new(rate: u64) -> Self {
        Self {
            rate,
            next: std::sync::Mutex::new(tokio::time::Instant::now()),
        }
    }

    /// Waits for this transfer's turn: each one takes `bytes / rate` of the budget.
    async fn take(&self, bytes: u64) {
        if self.rate == 0 {
            return;
        }
        let cost = Duration::from_secs_f64(bytes.max(1) as f64 / self.rate as f64);
        let start = {
            let mut next = self.next.lock().expect("pace lock");
            let start = (*next).max(tokio::time::Instant::now());
            *next = start + cost;
            start
        };
        tokio::time::sleep_until(start).await;
    }
}

/// Sends every tombstone this target holds for an object it does not own alone to the
/// object's other owners under `smap` (an internal DELETE with the tombstone's generation: it
/// buries only older copies). Tombstones live for a day, so a target out of the map for less
/// than that learns of every delete it missed. A tombstone that cannot be delivered is the
/// job's error (placement is then not confirmed, and reads keep asking other holders).
async fn send_tombstones(
    t: &Arc<Target>,
    smap: &Arc<ClusterMap>,
    run: &Arc<JobRun>,
) -> Result<u64, ApiError> {
    let bmd = t.bmd();
    let (me, store, map) = (t.id.clone(), t.store.clone(), smap.clone());
    let only = run.spec.bck.as_ref().map(|b| b.uname());
    let todo: Vec<(Bck, String, u64, Vec<gristmill_core::Node>)> =
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let walked = store.for_each_tombstone(|bucket, name, generation| {
                if only.as_ref().is_some_and(|u| u != bucket) {
                    return;
                }
                let Some(rec) = bmd.buckets.get(bucket) else {
                    return;
                };
                let copies = rec.props.mirror.copies();
                let owners = map.owners(&rec.bck.object_uname(name), copies);
                let first = owners.first().is_some_and(|o| o.daemon_id == me);
                let placed_here = owners.iter().any(|o| o.daemon_id == me);
                if placed_here && !(copies > 1 && first) {
                    return;
                }
                let to: Vec<_> = owners
                    .into_iter()
                    .filter(|o| o.daemon_id != me)
                    .cloned()
                    .collect();
                out.push((rec.bck.clone(), name.to_owned(), generation, to));
            });
            walked.map(|_| out)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    let sent = todo.len() as u64;
    let results: Vec<(String, Result<(), String>)> = futures::stream::iter(todo)
        .take_until(run.cancel.cancelled())
        .map(|(bck, name, generation, to)| async move {
            let mut result = Ok(());
            for node in &to {
                let mut tries = 0;
                result = loop {
                    tries += 1;
                    let resp = t
                        .relay
                        .delete(internal_url(node, &bck, &name))
                        .query(&bucket_query(&bck))
                        .header(h::GEN, generation)
                        .timeout(std::time::Duration::from_secs(10))
                        .send()
                        .await;
                    let outcome = match resp {
                        Ok(r) if r.status().is_success() || r.status().as_u16() == 404 => Ok(()),
                        Ok(r) => Err(format!("{}: {}", node.daemon_id, r.status())),
                        Err(e) => Err(format!("{}: {e}", node.daemon_id)),
                    };
                    if outcome.is_ok() || tries >= 5 {
                        break outcome;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(300 * tries)).await;
                };
                if result.is_err() {
                    break;
                }
            }
            (name, result)
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for (name, result) in results {
        if let Err(e) = result {
            run.record(
                &name,
                Err(ApiError::unavailable(format!(
                    "tombstone not delivered: {e}"
                ))),
            );
        }
    }
    Ok(sent)
}

/// Puts one object where it belongs under `smap`: to its owner — and with copies > 1 to every
/// target of its HRW set that lacks it (the first owner re-creates lost replicas this way).
/// `Skipped` when nothing had to move.
///
/// A holder outside the owners (a hinted copy, a target that lost ownership) whose copy the
/// first owner also holds leaves the missing replicas to the first owner (its rebalance walks
/// them) and only waits — a retryable error — until every owner has the copy, so the copy
/// travels once, not from both; on the `last_round` of its retries it sends them itself. Its
/// own copy is dropped only after every owner has one (`run`).
pub(crate) async fn send(
    t: &Target,
    smap: &ClusterMap,
    bck: &Bck,
    meta: &ObjectMeta,
    last_round: bool,
) -> Result<Outcome, ApiError> {
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    let owners = smap.owners(&bck.object_uname(&meta.name), copies);
    if owners.is_empty() {
        return Err(ApiError::unavailable("no targets in the cluster map"));
    }
    if copies <= 1 {
        return send_to(t, owners[0], bck, meta, REBALANCE).await;
    }
    let here = owners.iter().any(|n| n.daemon_id == t.id);
    let mut moved = 0;
    let mut left_to_first = Vec::new();
    let mut first_has_it = false;
    for (i, node) in owners.iter().enumerate() {
        if node.daemon_id == t.id || has_copy(t, node, bck, meta).await {
            first_has_it |= i == 0 && node.daemon_id != t.id;
            continue;
        }
        if !here && first_has_it && !last_round {
            left_to_first.push(node.daemon_id.as_str());
            continue;
        }
        if let Outcome::Done(n) = send_to(t, node, bck, meta, REBALANCE).await? {
            moved += n;
        }
    }
    if !left_to_first.is_empty() {
        return Err(ApiError::unavailable(format!(
            "waiting for the first owner {} to copy it to {left_to_first:?}",
            owners[0].daemon_id
        )));
    }
    Ok(if moved > 0 || !here {
        Outcome::Done(moved)
    } else {
        Outcome::Skipped
    })
}

/// Whether `node` holds this generation (or a newer one) of the object.
pub(crate) async fn has_copy(
    t: &Target,
    node: &gristmill_core::Node,
    bck: &Bck,
    meta: &ObjectMeta,
) -> bool {
    let resp = t
        .relay
        .head(internal_url(node, bck, &meta.name))
        .query(&bucket_query(bck))
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await;
    match resp {
        Ok(r) if r.status().is_success() => {
            let (theirs, sent) = (gen_of(r.headers()), sent_gen(meta));
            let same_bytes = r
                .headers()
                .get(h::CHECKSUM_VALUE)
                .map_or(meta.cksum_value.is_empty(), |v| {
                    v.as_bytes() == meta.cksum_value.as_bytes()
                });
            theirs > sent || (theirs == sent && same_bytes)
        }
        _ => false,
    }
}

/// The generation a copy travels with: never 0, so a receiver without it stores it.
pub(crate) fn sent_gen(meta: &ObjectMeta) -> u64 {
    meta.effective_gen().max(1)
}

/// Writes this target's copy of an object to `node`'s store, as is, with its generation
/// (`flag`: rebalance or replica). A receiver holding a newer generation keeps it.
pub(crate) async fn send_to(
    t: &Target,
    owner: &gristmill_core::Node,
    bck: &Bck,
    meta: &ObjectMeta,
    flag: &str,
) -> Result<Outcome, ApiError> {
    let open = match t.store.open_object(bck, &meta.name).await {
        Ok(o) => o,
        Err(crate::StoreError::Api(e)) if e.kind == ErrorKind::NotFound => {
            return Ok(Outcome::Skipped);
        }
        Err(e) => return Err(e.into()),
    };
    let m = &open.meta;
    let size = m.size;
    let body = match open.data {
        Some(d) => reqwest::Body::from(d),
        None => reqwest::Body::wrap_stream(crate::store::stream::file_stream(open.file, 0, size)),
    };
    let resp = t
        .relay
        .put(internal_url(owner, bck, &m.name))
        .query(&bucket_query(bck))
        .query(&[(gristmill_core::api::query::TRANSFER, flag)])
        .header(reqwest::header::CONTENT_LENGTH, size)
        .header(h::GEN, sent_gen(m))
        .header(h::CHECKSUM_TYPE, m.cksum_type.as_str())
        .header(h::CHECKSUM_VALUE, m.cksum_value.as_str())
        .header(h::VERSION, m.version.as_str())
        .header(h::MTIME, m.mtime_ns.to_string())
        .header(
            h::CUSTOM_MD_JSON,
            gristmill_core::api::encode_custom_md(&m.custom),
        )
        .body(body)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("rebalance to {}: {e}", owner.daemon_id)))?;
    if !resp.status().is_success() {
        return Err(crate::cluster::peer::peer_error(
            resp,
            &format!("rebalance to {}", owner.daemon_id),
        )
        .await);
    }
    // Acknowledged only when the receiver holds this copy or something newer.
    let sent = sent_gen(m);
    delivered(sent, &m.cksum_value, resp.headers()).map_err(|why| {
        tracing::warn!(object = %m.name, to = %owner.daemon_id, generation = sent, %why, "a copy was not taken; keeping it");
        ApiError::unavailable(format!(
            "{flag} of {bck}/{} to {}: not stored: {why}",
            m.name, owner.daemon_id
        ))
    })?;
    Ok(Outcome::Done(size))
}

/// Receives a copy from another node (rebalance or replica): stored as sent (generation,
/// version, mtime, metadata), checksum verified, never written through to a backend. Stored
/// only if its generation is newer than the copy or tombstone here: a client's PUT that
/// landed here first, or a DELETE, wins over a late transfer whatever the hosts' clocks say.
pub(crate) async fn receive(
    t: &Target,
    bck: &Bck,
    name: &str,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let headers = req.headers();
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let generation = gen_of(headers);
    if generation == 0 {
        return Err(ApiError::bad_request(format!(
            "a transfer needs its generation ({})",
            h::GEN
        )));
    }
    let _admitted = admit_copy(t, bck, name).await?;
    let mtime: i64 = get(h::MTIME).parse().unwrap_or(0);
    let custom = match get(h::CUSTOM_MD_JSON) {
        "" => Default::default(),
        v => gristmill_core::api::decode_custom_md(v)?,
    };
    let opts = crate::store::PutOptions {
        durable: !bck.is_remote(),
        version: get(h::VERSION).to_owned(),
        custom,
        expected_size: get("content-length").parse().ok(),
        expected_xxhash: Some(get(h::CHECKSUM_VALUE).to_owned()).filter(|v| !v.is_empty()),
        mtime_ns: Some(mtime).filter(|m| *m > 0),
        generation: crate::store::index::GenRule::IfNewer(generation),
        ..Default::default()
    };
    let stored = t
        .store
        .put(bck, name, req.into_body().into_data_stream(), opts)
        .await;
    generation_kept(t, bck, name, stored)
}

/// Admits a copy another node sends here (a rebalance or replica transfer, a staged replica)
/// only if this target is one of the object's owners under its map: a copy that lands on a
/// non-owner after this target's own walk would sit where nobody looks for it. A sender
/// whose map is ahead of ours is caught up with first; one behind is refused (503) and
/// retries under the next map.
pub(crate) async fn admit_copy(
    t: &Target,
    bck: &Bck,
    name: &str,
) -> Result<crate::cluster::gate::Admission, ApiError> {
    let uname = bck.object_uname(name);
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    for caught_up in [false, true] {
        let admitted = t.admit_write();
        if admitted
            .smap
            .owners(&uname, copies)
            .iter()
            .any(|o| o.daemon_id == t.id)
        {
            return Ok(admitted);
        }
        drop(admitted);
        if !caught_up {
            t.refresh_smap().await;
        }
    }
    Err(ApiError::unavailable(format!(
        "{bck}/{name}: {} does not own it under cluster map v{}; retry",
        t.id,
        t.smap().version
    )))
}

/// The answer to a copy sent by another node: what this node now holds — the generation,
/// and either the checksum of that copy or, when a delete is the newest thing here, the
/// tombstone's generation — so the sender can tell whether its copy is safe to drop
/// ([`delivered`]).
pub(crate) fn generation_kept(
    t: &Target,
    bck: &Bck,
    name: &str,
    stored: Result<ObjectMeta, crate::StoreError>,
) -> Result<Response, ApiError> {
    let mut resp = Response::new(Body::empty());
    let headers = resp.headers_mut();
    match stored {
        Ok(meta) => {
            headers.insert(h::GEN, HeaderValue::from(meta.generation));
            if let Ok(v) = HeaderValue::from_str(&meta.cksum_value) {
                headers.insert(h::CHECKSUM_VALUE, v);
            }
        }
        Err(crate::StoreError::Stale { current }) => {
            headers.insert(h::GEN, HeaderValue::from(current));
            match t.store.head(bck, name) {
                Ok(meta) if meta.effective_gen() == current => {
                    if let Ok(v) = HeaderValue::from_str(&meta.cksum_value) {
                        headers.insert(h::CHECKSUM_VALUE, v);
                    }
                }
                _ => {
                    headers.insert(h::TOMBSTONE_GEN, HeaderValue::from(current));
                }
            }
        }
        Err(e) => return Err(e.into()),
    }
    Ok(resp)
}

/// Whether a receiver's answer to a transfer ([`generation_kept`]) means the sender's copy
/// (generation `sent`, checksum `cksum`) is no longer needed: the receiver holds a newer
/// generation or tombstone, or this very copy (same generation and checksum). A receiver that
/// kept something else — an equal generation with other bytes, or no generation at all — has
/// not stored it: the sender keeps its copy and says why.
pub(crate) fn delivered(
    sent: u64,
    cksum: &str,
    answer: &axum::http::HeaderMap,
) -> Result<(), String> {
    let kept = gen_of(answer);
    let tomb = crate::cluster::peer::header_u64(answer, h::TOMBSTONE_GEN);
    let their_cksum = answer
        .get(h::CHECKSUM_VALUE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if kept > sent || (tomb > 0 && tomb >= sent) {
        return Ok(());
    }
    if kept == sent && answer.contains_key(h::CHECKSUM_VALUE) && their_cksum == cksum {
        return Ok(());
    }
    Err(if kept == 0 {
        "the receiver did not say what it kept".to_owned()
    } else if kept == sent {
        format!(
            "the receiver holds generation {kept} with other bytes ({their_cksum:?}, sent {cksum:?})"
        )
    } else {
        format!("the receiver kept generation {kept}, older than the {sent} sent")
    })
}

#[cfg(test)]
mod tests {
    use super::delivered;
    use axum::http::{HeaderMap, HeaderValue};
    use gristmill_core::api::header as h;

    fn answer(generation: u64, cksum: Option<&str>, tomb: Option<u64>) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(h::GEN, HeaderValue::from(generation));
        if let Some(c) = cksum {
            m.insert(h::CHECKSUM_VALUE, HeaderValue::from_str(c).unwrap());
        }
        if let Some(t) = tomb {
            m.insert(h::TOMBSTONE_GEN, HeaderValue::from(t));
        }
        m
    }

    #[test]
    fn a_copy_is_delivered_only_when_the_receiver_holds_it_or_newer() {
        // Stored as sent.
        assert!(delivered(5, "aa", &answer(5, Some("aa"), None)).is_ok());
        // A newer copy or a newer delete is there.
        assert!(delivered(5, "aa", &answer(9, Some("bb"), None)).is_ok());
        assert!(delivered(5, "aa", &answer(6, None, Some(6))).is_ok());
        // The same generation with other bytes: refused, and the sender keeps its copy (it
        // used to be answered 200 and dropped).
        let why = delivered(5, "aa", &answer(5, Some("bb"), None)).unwrap_err();
        assert!(why.contains("other bytes"), "{why}");
        // Older than sent (it cannot have been stored), or no answer of what was kept.
        assert!(delivered(5, "aa", &answer(4, Some("aa"), None)).is_err());
        assert!(delivered(5, "aa", &HeaderMap::new()).is_err());
    }
}
