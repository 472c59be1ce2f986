//! Global rebalance: after a cluster-map change that moves objects (a target joined, left,
//! went into maintenance), every target sends the objects it holds but no longer owns to
//! their new owner, which verifies the checksum before storing them; the source drops its
//! copies only when all its transfers are done, so GETs, HEADs and listings find every object
//! throughout (a miss on the new owner is served from the previous owner, see
//! [`fetch_from_past_owner`]).
//!
//! A rebalance is a job with id `rb<map version>` on every target, so its progress shows up
//! like any job's. A newer map aborts the running one and starts its own; an interrupted one
//! (crash) is simply run again after the restart: the work is "whatever is misplaced now".

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use axum::response::Response;
use futures::StreamExt;
use gristmill_core::api::header as h;
use gristmill_core::{ApiError, Bck, ClusterMap, ErrorKind};

use crate::Target;
use crate::jobs::{JobRun, Outcome};
use crate::meta::ObjectMeta;

use gristmill_core::api::internal::{REBALANCE, REPLICA};

/// Runs a rebalance (every bucket) or a `make-n-copies` job (the job's bucket only): the same
/// walk, since both mean "bring every copy to where the map and `mirror.copies` want it".
pub(crate) async fn run(t: &Arc<Target>, run: &Arc<JobRun>) -> Result<(), ApiError> {
    let smap = t.smap();
    let bmd = t.bmd();
    let me = t.id.clone();
    let store = t.store.clone();
    let map = smap.clone();
    let only = run.spec.bck.as_ref().map(|b| b.uname());
    let misplaced: Vec<(Bck, ObjectMeta)> = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let walked = store.for_each_object(|_, meta| {
            if only.as_ref().is_some_and(|u| *u != meta.bucket) {
                return;
            }
            let Some(rec) = bmd.buckets.get(&meta.bucket) else {
                return; // a destroyed bucket: its objects go with it
            };
            let copies = rec.props.mirror.copies();
            let owners = map.owners(&rec.bck.object_uname(&meta.name), copies);
            let placed_here = owners.iter().any(|o| o.daemon_id == me);
            let first = owners.first().is_some_and(|o| o.daemon_id == me);
            // Misplaced objects move; with copies > 1 the first owner also re-creates
            // missing replicas (after a target was lost).
            if !placed_here || (copies > 1 && first) {
                out.push((rec.bck.clone(), meta));
            }
        });
        walked.map(|_| out)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    *run.total.lock().expect("job total lock") = Some(misplaced.len() as u64);
    if misplaced.is_empty() {
        return Ok(());
    }
    tracing::info!(job = %run.spec.id, objects = misplaced.len(), "rebalance: sending misplaced objects");
    // Transfers that fail (a receiver restarting, say) are retried in rounds, with a growing
    // pause, for up to a minute; only the last round's failures count as the job's errors.
    let mut todo = misplaced;
    let mut sent: Vec<(Bck, ObjectMeta)> = Vec::new();
    let mut pause = std::time::Duration::from_millis(500);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let last_round = tokio::time::Instant::now() + pause >= deadline;
        let results: Vec<(Bck, ObjectMeta, Result<Outcome, ApiError>)> =
            futures::stream::iter(std::mem::take(&mut todo))
                .take_until(run.cancel.cancelled())
                .map(|(bck, meta)| {
                    let (t, smap) = (t.clone(), smap.clone());
                    async move {
                        let result = send(&t, &smap, &bck, &meta).await;
                        (bck, meta, result)
                    }
                })
                .buffer_unordered(8)
                .collect()
                .await;
        for (bck, meta, result) in results {
            match result {
                Ok(outcome) => {
                    if matches!(outcome, Outcome::Done(_)) {
                        sent.push((bck, meta.clone()));
                    }
                    run.record(&meta.name, Ok(outcome));
                }
                Err(e) if !last_round => {
                    tracing::debug!(object = %meta.name, error = %e.message, "rebalance: will retry");
                    todo.push((bck, meta));
                }
                Err(e) => run.record(&meta.name, Err(e)),
            }
        }
        if todo.is_empty() || run.cancel.is_cancelled() {
            break;
        }
        tokio::select! {
            _ = run.cancel.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(std::time::Duration::from_secs(8));
    }
    if run.cancel.is_cancelled() {
        // Superseded: the copies stay until a rebalance completes (the next one re-sends).
        return Ok(());
    }
    // Every transfer is acknowledged: drop the moved copies (unless rewritten meanwhile, or
    // this target is one of the object's replica holders).
    let bmd = t.bmd();
    for (bck, meta) in sent {
        let copies = bmd.get(&bck).map_or(1, |r| r.props.mirror.copies());
        if smap
            .owners(&bck.object_uname(&meta.name), copies)
            .iter()
            .any(|o| o.daemon_id == t.id)
        {
            continue;
        }
        // Counted before the copy goes: a listing that read the counter earlier learns that
        // a name may have left this target after the new owner's page was taken.
        t.drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Only the very record that was sent (its data file names the write): a copy
        // rewritten meanwhile stays.
        let _ = t.store.delete_if_file(&bck, &meta.name, &meta.file).await;
    }
    Ok(())
}

/// Puts one object where it belongs under `smap`: to its owner — and with copies > 1 to every
/// target of its HRW set that lacks it (the first owner re-creates lost replicas this way).
/// `Skipped` when nothing had to move.
async fn send(
    t: &Target,
    smap: &ClusterMap,
    bck: &Bck,
    meta: &ObjectMeta,
) -> Result<Outcome, ApiError> {
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    let owners = smap.owners(&bck.object_uname(&meta.name), copies);
    if owners.is_empty() {
        return Err(ApiError::unavailable("no targets in the cluster map"));
    }
    if copies <= 1 {
        return send_to(t, owners[0], bck, meta, REBALANCE).await;
    }
    let mut moved = 0;
    for node in owners.iter().filter(|n| n.daemon_id != t.id) {
        if has_copy(t, node, bck, meta).await {
            continue;
        }
        if let Outcome::Done(n) = send_to(t, node, bck, meta, REBALANCE).await? {
            moved += n;
        }
    }
    let here = owners.iter().any(|n| n.daemon_id == t.id);
    Ok(if moved > 0 || !here {
        Outcome::Done(moved)
    } else {
        Outcome::Skipped
    })
}

/// Whether `node` holds this generation (or a newer one) of the object.
async fn has_copy(t: &Target, node: &gristmill_core::Node, bck: &Bck, meta: &ObjectMeta) -> bool {
    let resp = t
        .relay
        .head(internal_url(node, bck, &meta.name))
        .query(&bucket_query(bck))
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await;
    match resp {
        Ok(r) if r.status().is_success() => gen_of(r.headers()) >= sent_gen(meta),
        _ => false,
    }
}

/// `provider` and `namespace` of a bucket, as query parameters.
pub(crate) fn bucket_query(bck: &Bck) -> [(&'static str, String); 2] {
    [
        ("provider", bck.provider.as_str().to_owned()),
        ("namespace", bck.namespace.uname()),
    ]
}

/// An object's URL on a node's internal route.
pub(crate) fn internal_url(node: &gristmill_core::Node, bck: &Bck, name: &str) -> String {
    format!(
        "{}{}/{}/{}",
        node.url(),
        gristmill_core::api::internal::OBJECTS,
        bck.name,
        gristmill_core::name::encode_path(name)
    )
}

/// The generation header of an internal answer (0 when absent).
pub(crate) fn gen_of(headers: &HeaderMap) -> u64 {
    header_u64(headers, h::GEN)
}

/// A numeric header (a generation): 0 when absent or not a number.
pub(crate) fn header_u64(headers: &HeaderMap, name: &str) -> u64 {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The generation a copy travels with: never 0, so a receiver without it stores it.
fn sent_gen(meta: &ObjectMeta) -> u64 {
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
        None => reqwest::Body::wrap_stream(crate::http::file_stream(open.file, 0, size)),
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
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        return Err(ApiError::new(
            ErrorKind::from_status(status),
            format!("rebalance to {}: {status}: {text}", owner.daemon_id),
        ));
    }
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
        generation: crate::index::GenRule::IfNewer(generation),
        ..Default::default()
    };
    generation_kept(
        t.store
            .put(bck, name, req.into_body().into_data_stream(), opts)
            .await,
    )
}

/// The answer to a copy sent by another node: the generation this node now holds. A copy
/// refused because a newer generation is here is delivered as far as the sender cares.
fn generation_kept(stored: Result<ObjectMeta, crate::StoreError>) -> Result<Response, ApiError> {
    let kept = match stored {
        Ok(meta) => meta.generation,
        Err(crate::StoreError::Stale { current }) => current,
        Err(e) => return Err(e.into()),
    };
    let mut resp = Response::new(Body::empty());
    resp.headers_mut().insert(h::GEN, HeaderValue::from(kept));
    Ok(resp)
}

/// The error a peer answered (its JSON message when it sent one), prefixed with `what`.
pub(crate) async fn peer_error(resp: reqwest::Response, what: &str) -> ApiError {
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    let message = serde_json::from_str::<gristmill_core::ErrorBody>(&text)
        .map(|b| b.message)
        .unwrap_or(text);
    ApiError::new(ErrorKind::from_status(status), format!("{what}: {message}"))
}

/// Every other target of the current map that may hold a copy of the object. Once every
/// object is placed by the current map (no past maps held), those are its replica holders.
/// While a rebalance is not yet confirmed, every target of the map: a copy may sit on an
/// owner under any map since the last confirmed one — including maps this target never saw
/// (pushed out of order, or before it joined) and rebalances aborted half-way. Nodes no
/// longer in the map are left out (there is nobody to ask).
pub(crate) fn other_holders(t: &Target, bck: &Bck, name: &str) -> Vec<gristmill_core::Node> {
    let current = t.smap();
    if !t.placement_settled() {
        return current
            .tmap
            .values()
            .filter(|n| n.daemon_id != t.id)
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

/// How long a holder has to answer a generation question or a delete.
const HOLDER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The highest generation other possible holders report for an object (copies a rebalance
/// has not moved yet, tombstones of deletes they saw): a new write or delete on the owner
/// must order after it. A holder that does not answer makes the order unknown: the write is
/// refused (503, retryable) rather than given a generation an old copy could beat.
pub(crate) async fn gen_floor(t: &Target, bck: &Bck, name: &str) -> Result<u64, ApiError> {
    if t.placement_settled() {
        // Replicas take their generation from this owner: nobody can be ahead.
        return Ok(0);
    }
    let asks = other_holders(t, bck, name).into_iter().map(|node| async move {
        let resp = t
            .relay
            .head(internal_url(&node, bck, name))
            .query(&bucket_query(bck))
            .timeout(HOLDER_TIMEOUT)
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() || r.status() == reqwest::StatusCode::NOT_FOUND => {
                Ok(gen_of(r.headers()).max(header_u64(r.headers(), h::TOMBSTONE_GEN)))
            }
            Ok(r) => Err(format!("{}: {}", node.daemon_id, r.status())),
            Err(e) => Err(format!("{}: {e}", node.daemon_id)),
        }
    });
    let mut floor = 0;
    for answer in futures::future::join_all(asks).await {
        match answer {
            Ok(generation) => floor = floor.max(generation),
            Err(e) => {
                return Err(ApiError::unavailable(format!(
                    "{bck}/{name}: a rebalance is in progress and a target that may hold a copy did not answer ({e}); try again"
                )));
            }
        }
    }
    Ok(floor)
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
    let deletes = other_holders(t, bck, name).into_iter().map(|node| async move {
        let resp = t
            .relay
            .delete(internal_url(&node, bck, name))
            .query(&bucket_query(bck))
            .header(h::GEN, generation)
            .timeout(HOLDER_TIMEOUT)
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => Ok(true),
            Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => Ok(false),
            Ok(r) => Err(format!("{}: {}", node.daemon_id, r.status())),
            Err(e) => Err(format!("{}: {e}", node.daemon_id)),
        }
    });
    let mut held = false;
    for answer in futures::future::join_all(deletes).await {
        match answer {
            Ok(h) => held |= h,
            Err(e) => {
                tracing::warn!(object = %name, error = %e, "delete of another copy failed");
                return Err(ApiError::unavailable(format!(
                    "{bck}/{name}: deleted on its owner, but a target that may hold a copy was not reached ({e}); try again"
                )));
            }
        }
    }
    Ok(held)
}

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

/// Active target ids of a map, to tell whether a change moves objects.
pub(crate) fn active_set(smap: &ClusterMap) -> Vec<String> {
    smap.active_targets().map(|n| n.daemon_id.clone()).collect()
}

/// How many earlier maps a target remembers. Forgetting one loses no object: while any past
/// map is held, writes, deletes and missed reads ask every target of the map.
const PAST_MAPS_KEPT: usize = 3;

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

/// Replica copies written and verified on this target for an owner's PUT that is not yet
/// committed, by stage id: invisible until the owner commits them (or dropped after
/// [`STAGE_TTL`], removing the temp file).
pub(crate) type Stages = std::sync::Mutex<
    std::collections::HashMap<String, (crate::store::PendingWrite, std::time::Instant)>,
>;

/// How long a staged replica waits for its owner's commit.
const STAGE_TTL: std::time::Duration = std::time::Duration::from_secs(120);

/// Commits an owner's PUT with `mirror.copies = N`: the bytes, written and verified here,
/// are first staged — durable but invisible — on the N-1 replica targets; only when every
/// stage succeeded is the object committed here and then on the replicas (with the
/// generation this commit assigned). A PUT that cannot reach N copies fails before anything
/// becomes visible: readers keep the previous version (or none) on every node.
pub(crate) async fn commit_with_replicas(
    t: &Target,
    bck: &Bck,
    name: &str,
    mut pending: crate::store::PendingWrite,
) -> Result<ObjectMeta, ApiError> {
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    if copies <= 1 {
        return Ok(pending.commit().await?);
    }
    pending.verify().await?;
    let smap = t.smap();
    let targets: Vec<gristmill_core::Node> = smap
        .owners(&bck.object_uname(name), copies)
        .into_iter()
        .filter(|n| n.daemon_id != t.id)
        .cloned()
        .collect();
    if targets.len() + 1 < copies {
        return Err(ApiError::unavailable(format!(
            "{bck} keeps {copies} copies but only {} targets are active",
            targets.len() + 1
        )));
    }
    let stage = uuid::Uuid::new_v4().to_string();
    let size = pending.size();
    let cksum = pending.xxhash_hex();
    let path = pending.path().to_owned();
    let staged = futures::future::join_all(
        targets
            .iter()
            .map(|n| stage_on(t, n, bck, name, &stage, &path, size, &cksum)),
    )
    .await;
    if let Some(Err(e)) = staged.iter().find(|r| r.is_err()) {
        let e = e.clone();
        abort_stages(t, &targets, bck, name, &stage);
        pending.abort().await;
        return Err(e);
    }
    // The copy this PUT replaces, kept aside until every replica has committed: if one
    // cannot, the PUT is undone and readers see this copy again.
    let kept = t.store.keep(bck, name)?;
    let meta = match pending.commit().await {
        Ok(m) => m,
        Err(e) => {
            abort_stages(t, &targets, bck, name, &stage);
            return Err(e.into());
        }
    };
    let commits = futures::future::join_all(
        targets
            .iter()
            .map(|n| commit_stage(t, n, bck, name, &stage, &meta)),
    )
    .await;
    let failed: Vec<String> = targets
        .iter()
        .zip(commits)
        .filter_map(|(n, r)| r.err().map(|e| format!("{}: {}", n.daemon_id, e.message)))
        .collect();
    if failed.is_empty() {
        return Ok(meta);
    }
    // A replica had the bytes durably a moment ago and cannot commit them now (it died or
    // restarted): the PUT cannot have its copies, so it is undone — the replaced copy is
    // put back (or the new object deleted), ordered after this write, and the replicas that
    // did commit follow it.
    tracing::warn!(object = %name, bucket = %bck, replicas = ?failed, "a replica did not commit: undoing the PUT");
    let undone = match &kept {
        Some(kept) => match t.store.restore(bck, kept, meta.generation).await {
            Ok(back) => replicate(t, bck, &back).await,
            Err(e) => Err(e.into()),
        },
        None => crate::http::delete_object(t, bck, name).await,
    };
    if let Err(e) = undone {
        tracing::error!(object = %name, bucket = %bck, error = %e.message, "could not undo a PUT whose replica did not commit");
    }
    Err(ApiError::unavailable(format!(
        "{bck}/{name}: the replica(s) {} did not commit, so the PUT was undone; retry",
        failed.join(", ")
    )))
}

/// Tells the replicas to drop a stage, in the background and briefly (one that does not
/// answer — paused, dead — drops its own after [`STAGE_TTL`]): the failed PUT answers now.
fn abort_stages(t: &Target, targets: &[gristmill_core::Node], bck: &Bck, name: &str, stage: &str) {
    for n in targets {
        let req = t
            .relay
            .delete(internal_url(n, bck, name))
            .query(&bucket_query(bck))
            .query(&[("stage", stage)])
            .timeout(std::time::Duration::from_secs(5))
            .send();
        tokio::spawn(async move {
            let _ = req.await;
        });
    }
}

/// Sends the staged bytes (`path`, the owner's temp file) to one replica target.
#[allow(clippy::too_many_arguments)]
async fn stage_on(
    t: &Target,
    node: &gristmill_core::Node,
    bck: &Bck,
    name: &str,
    stage: &str,
    path: &std::path::Path,
    size: u64,
    cksum: &str,
) -> Result<(), ApiError> {
    let file = std::fs::File::open(path)
        .map_err(|e| ApiError::internal(format!("reopening a staged write: {e}")))?;
    // A paused or wedged replica must not hold the PUT forever: 10 s plus 20 MiB/s.
    let limit = std::time::Duration::from_secs(10 + size / (20 << 20));
    let resp = t
        .relay
        .put(internal_url(node, bck, name))
        .query(&bucket_query(bck))
        .query(&[
            (gristmill_core::api::query::TRANSFER, REPLICA),
            ("stage", stage),
        ])
        .header(reqwest::header::CONTENT_LENGTH, size)
        .header(h::CHECKSUM_TYPE, crate::store::CKSUM_XXHASH)
        .header(h::CHECKSUM_VALUE, cksum)
        .body(reqwest::Body::wrap_stream(crate::http::file_stream(
            file, 0, size,
        )))
        .timeout(limit)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("replica on {}: {e}", node.daemon_id)))?;
    if !resp.status().is_success() {
        return Err(peer_error(resp, &format!("replica on {}", node.daemon_id)).await);
    }
    Ok(())
}

/// Tells one replica target to make its staged copy the object, as the owner committed it.
async fn commit_stage(
    t: &Target,
    node: &gristmill_core::Node,
    bck: &Bck,
    name: &str,
    stage: &str,
    meta: &ObjectMeta,
) -> Result<(), ApiError> {
    let mut last = None;
    for _ in 0..3 {
        let resp = t
            .relay
            .post(internal_url(node, bck, name))
            .query(&bucket_query(bck))
            .query(&[("stage", stage)])
            .header(h::GEN, sent_gen(meta))
            .header(h::VERSION, meta.version.as_str())
            .header(h::MTIME, meta.mtime_ns.to_string())
            .header(
                h::CUSTOM_MD_JSON,
                gristmill_core::api::encode_custom_md(&meta.custom),
            )
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => {
                return Err(ApiError::new(
                    ErrorKind::from_status(r.status()),
                    format!("commit answered {}", r.status()),
                ));
            }
            Err(e) => last = Some(e.to_string()),
        }
    }
    Err(ApiError::unavailable(last.unwrap_or_default()))
}

/// Replica side of [`commit_with_replicas`]: receives, verifies and keeps a staged copy.
pub(crate) async fn stage_receive(
    t: &Target,
    bck: &Bck,
    name: &str,
    stage: &str,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let headers = req.headers();
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let expected_size: Option<u64> = get("content-length").parse().ok();
    t.space.check_room(bck, name, expected_size.unwrap_or(0))?;
    let opts = crate::store::PutOptions {
        durable: !bck.is_remote(),
        expected_size,
        expected_xxhash: Some(get(h::CHECKSUM_VALUE).to_owned()).filter(|v| !v.is_empty()),
        ..Default::default()
    };
    let mut pending = t.store.begin_write(bck, name, opts).await?;
    pending
        .write_stream(req.into_body().into_data_stream())
        .await?;
    pending.verify().await?;
    let mut stages = t.stages.lock().expect("stages lock");
    stages.retain(|_, (_, at)| at.elapsed() < STAGE_TTL);
    stages.insert(stage.to_owned(), (pending, std::time::Instant::now()));
    Ok(Response::new(Body::empty()))
}

/// Replica side: the owner committed; the staged copy becomes the object (unless a newer
/// generation is here already).
pub(crate) async fn stage_commit(
    t: &Target,
    stage: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let generation = gen_of(headers);
    if generation == 0 {
        return Err(ApiError::bad_request(format!(
            "a stage commit needs {}",
            h::GEN
        )));
    }
    let custom = match get(h::CUSTOM_MD_JSON) {
        "" => Default::default(),
        v => gristmill_core::api::decode_custom_md(v)?,
    };
    let Some((mut pending, _)) = t.stages.lock().expect("stages lock").remove(stage) else {
        return Err(ApiError::not_found(format!("no staged copy {stage}")));
    };
    let opts = pending.options_mut();
    opts.generation = crate::index::GenRule::IfNewer(generation);
    opts.version = get(h::VERSION).to_owned();
    opts.mtime_ns = get(h::MTIME).parse().ok().filter(|m: &i64| *m > 0);
    opts.custom = custom;
    generation_kept(pending.commit().await)
}

/// Replica side: the owner gave the PUT up; the staged copy goes.
pub(crate) fn stage_abort(t: &Target, stage: &str) -> bool {
    t.stages
        .lock()
        .expect("stages lock")
        .remove(stage)
        .is_some()
}

/// After the owner stored an object: writes its replicas (copies > 1) and waits for all of
/// them, so the PUT is acknowledged only when every copy is stored.
pub(crate) async fn replicate(t: &Target, bck: &Bck, meta: &ObjectMeta) -> Result<(), ApiError> {
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    if copies <= 1 {
        return Ok(());
    }
    let smap = t.smap();
    let targets: Vec<gristmill_core::Node> = smap
        .owners(&bck.object_uname(&meta.name), copies)
        .into_iter()
        .filter(|n| n.daemon_id != t.id)
        .cloned()
        .collect();
    if targets.len() + 1 < copies {
        return Err(ApiError::unavailable(format!(
            "{bck} keeps {copies} copies but only {} targets are active",
            targets.len() + 1
        )));
    }
    let writes = targets.iter().map(|n| send_to(t, n, bck, meta, REPLICA));
    for r in futures::future::join_all(writes).await {
        r?;
    }
    Ok(())
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
        assert!(!remember_late(&mut past, &current, map(9)), "not the current one");
        assert!(!remember_late(&mut past, &current, map(0)));
        assert!(remember_late(&mut past, &current, map(6)));
        assert_eq!(versions(&past), [6, 7, 8], "still at most three");
        // Settled (every object placed by the current map): a late map changes nothing.
        let mut settled = Vec::new();
        assert!(!remember_late(&mut settled, &current, map(8)));
        assert!(settled.is_empty());
    }
}
