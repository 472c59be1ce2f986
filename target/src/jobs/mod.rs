//! This target's share of cluster-wide jobs (see `gristmill_core::job`): each job enumerates
//! its selection, keeps the objects this target owns, and works on them with a bounded number
//! of workers, counting objects, bytes, skips and per-object errors as it goes. An abort
//! cancels the workers between objects (an object in progress finishes or fails cleanly).
//!
//! Kinds: prefetch (cold-GET into the cache), evict (drop cached copies), copy (to another
//! bucket's owners, over HTTP, any providers), and LRU (one eviction pass, see `space`).

pub(crate) mod scrub;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use gristmill_core::job::{
    JobKind, JobSnap, JobSpec, JobState, MAX_ERROR_SAMPLES, ObjectError, Resolved,
};
use gristmill_core::{ApiError, Bck, ErrorKind};
use tokio_util::sync::CancellationToken;

use crate::Target;
use crate::read::cold::Start;
use crate::store::now_ns;

/// Finished jobs remembered per target (their status stays queryable).
const KEEP_FINISHED: usize = 1000;
/// Page size when enumerating a prefix.
const LIST_PAGE: usize = 10_000;

/// Jobs this target runs or ran, by id.
#[derive(Default)]
pub(crate) struct Jobs {
    runs: Mutex<HashMap<String, Arc<JobRun>>>,
    /// Ids in start order, to forget the oldest finished ones.
    order: Mutex<VecDeque<String>>,
}

/// One job on this target: its spec and live counters.
pub(crate) struct JobRun {
    pub(crate) spec: JobSpec,
    node: String,
    start_ns: i64,
    end_ns: AtomicI64,
    state: Mutex<JobState>,
    pub(crate) total: Mutex<Option<u64>>,
    objects: AtomicU64,
    bytes: AtomicU64,
    skipped: AtomicU64,
    errors: AtomicU64,
    samples: Mutex<Vec<ObjectError>>,
    abort_reason: Mutex<String>,
    /// Kind-specific counters (see [`JobRun::count`]).
    counters: Mutex<std::collections::BTreeMap<String, u64>>,
    pub(crate) cancel: CancellationToken,
}

/// What working on one object amounted to.
pub(crate) enum Outcome {
    /// Work done, moving this many bytes.
    Done(u64),
    /// Nothing to do for it (already cached, not present, ...).
    Skipped,
}

impl JobRun {
    pub(crate) fn snap(&self) -> JobSnap {
        JobSnap {
            id: self.spec.id.clone(),
            kind: self.spec.kind,
            node: self.node.clone(),
            bck: self.spec.bck.clone(),
            to_bck: self.spec.to_bck.clone(),
            state: *self.state.lock().expect("job state lock"),
            start_ns: self.start_ns,
            end_ns: self.end_ns.load(Ordering::Relaxed),
            total_objects: *self.total.lock().expect("job total lock"),
            objects: self.objects.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            error_samples: self.samples.lock().expect("job samples lock").clone(),
            abort_reason: self.abort_reason.lock().expect("job abort lock").clone(),
            counters: self.counters.lock().expect("job counters lock").clone(),
            etl: self.spec.opts.etl.clone(),
        }
    }

    /// Adds to a kind-specific counter (scrub: corrupt, repaired, unrepairable).
    pub(crate) fn count(&self, key: &str, n: u64) {
        *self
            .counters
            .lock()
            .expect("job counters lock")
            .entry(key.to_owned())
            .or_insert(0) += n;
    }

    pub(crate) fn record(&self, name: &str, result: Result<Outcome, ApiError>) {
        self.objects.fetch_add(1, Ordering::Relaxed);
        let kind = self.spec.kind.as_str();
        let outcome = |o: &'static str| {
            metrics::counter!("grist_job_objects_total", "kind" => kind, "outcome" => o)
                .increment(1);
        };
        match result {
            Ok(Outcome::Done(bytes)) => {
                self.bytes.fetch_add(bytes, Ordering::Relaxed);
                outcome("done");
                metrics::counter!("grist_job_bytes_total", "kind" => kind).increment(bytes);
            }
            Ok(Outcome::Skipped) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                outcome("skipped");
            }
            Err(e) => {
                outcome("error");
                self.errors.fetch_add(1, Ordering::Relaxed);
                let mut samples = self.samples.lock().expect("job samples lock");
                if samples.len() < MAX_ERROR_SAMPLES {
                    samples.push(ObjectError {
                        name: name.to_owned(),
                        error: e.message,
                    });
                }
            }
        }
    }

    fn abort(&self, reason: &str) {
        let mut r = self.abort_reason.lock().expect("job abort lock");
        if r.is_empty() {
            *r = reason.to_owned();
        }
        self.cancel.cancel();
    }

    fn finish(&self) {
        let aborted = self.cancel.is_cancelled();
        *self.state.lock().expect("job state lock") = if aborted {
            JobState::Aborted
        } else {
            JobState::Finished
        };
        self.end_ns.store(now_ns(), Ordering::Relaxed);
        let kind = self.spec.kind.as_str();
        let state = if aborted { "aborted" } else { "finished" };
        metrics::counter!("grist_jobs_ended_total", "kind" => kind, "state" => state).increment(1);
        metrics::gauge!("grist_jobs_running", "kind" => kind).decrement(1.0);
    }
}

impl Jobs {
    /// Starts a job (again: a no-op, so the primary may retry).
    pub(crate) fn start(&self, t: Arc<Target>, spec: JobSpec) -> Result<(), ApiError> {
        validate(&spec)?;
        let run = {
            let mut runs = self.runs.lock().expect("jobs lock");
            if runs.contains_key(&spec.id) {
                return Ok(());
            }
            let run = Arc::new(JobRun {
                node: t.id.clone(),
                start_ns: now_ns(),
                end_ns: AtomicI64::new(0),
                state: Mutex::new(JobState::Running),
                total: Mutex::new(None),
                objects: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
                skipped: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                samples: Mutex::new(Vec::new()),
                abort_reason: Mutex::new(String::new()),
                counters: Mutex::default(),
                cancel: CancellationToken::new(),
                spec,
            });
            runs.insert(run.spec.id.clone(), run.clone());
            run
        };
        self.remember(&run.spec.id);
        let kind = run.spec.kind.as_str();
        metrics::counter!("grist_jobs_started_total", "kind" => kind).increment(1);
        metrics::gauge!("grist_jobs_running", "kind" => kind).increment(1.0);
        tracing::info!(job = %run.spec.id, kind = %run.spec.kind, "job started");
        tokio::spawn(async move {
            if let Err(e) = execute(&t, &run).await {
                tracing::warn!(job = %run.spec.id, error = %e.message, "job failed");
                run.abort(&e.message);
            }
            run.finish();
            let s = run.snap();
            tracing::info!(
                job = %s.id, kind = %s.kind, state = ?s.state, objects = s.objects,
                bytes = s.bytes, errors = s.errors, "job ended"
            );
        });
        Ok(())
    }

    fn remember(&self, id: &str) {
        let mut order = self.order.lock().expect("jobs order lock");
        order.push_back(id.to_owned());
        while order.len() > KEEP_FINISHED {
            let mut runs = self.runs.lock().expect("jobs lock");
            let Some(oldest) = order.front().cloned() else {
                break;
            };
            if runs
                .get(&oldest)
                .is_some_and(|r| *r.state.lock().expect("job state lock") == JobState::Running)
            {
                break;
            }
            runs.remove(&oldest);
            order.pop_front();
        }
    }

    /// Snapshots of the jobs matching the filters (empty filter = any).
    pub(crate) fn snaps(
        &self,
        id: &str,
        kind: Option<JobKind>,
        running_only: bool,
    ) -> Vec<JobSnap> {
        let runs = self.runs.lock().expect("jobs lock");
        runs.values()
            .filter(|r| id.is_empty() || r.spec.id == id)
            .filter(|r| kind.is_none_or(|k| r.spec.kind == k))
            .map(|r| r.snap())
            .filter(|s| !running_only || s.state == JobState::Running)
            .collect()
    }

    /// Sets the progress gauges of running jobs, by kind (objects done and expected): the
    /// progress of a rebalance or resilver is their ratio. Run when metrics are scraped.
    pub(crate) fn report_progress(&self) {
        let mut by_kind: HashMap<&'static str, (u64, u64)> = gristmill_core::job::JOB_TABLE
            .iter()
            .map(|k| (k.kind.as_str(), (0, 0)))
            .collect();
        for r in self.runs.lock().expect("jobs lock").values() {
            if *r.state.lock().expect("job state lock") != JobState::Running {
                continue;
            }
            let e = by_kind.entry(r.spec.kind.as_str()).or_default();
            e.0 += r.objects.load(Ordering::Relaxed);
            e.1 += r.total.lock().expect("job total lock").unwrap_or(0);
        }
        for (kind, (done, expected)) in by_kind {
            metrics::gauge!("grist_job_progress_objects", "kind" => kind).set(done as f64);
            metrics::gauge!("grist_job_expected_objects", "kind" => kind).set(expected as f64);
        }
    }

    /// Aborts every running job of a kind (a newer rebalance supersedes an older one).
    pub(crate) fn abort_kind(&self, kind: JobKind, reason: &str) {
        let runs = self.runs.lock().expect("jobs lock");
        for r in runs.values().filter(|r| r.spec.kind == kind) {
            if *r.state.lock().expect("job state lock") == JobState::Running {
                r.abort(reason);
            }
        }
    }

    /// Aborts a job; false if this target does not know it.
    pub(crate) fn abort(&self, id: &str) -> bool {
        let run = self.runs.lock().expect("jobs lock").get(id).cloned();
        match run {
            Some(r) => {
                r.abort("aborted by request");
                true
            }
            None => false,
        }
    }
}

fn validate(spec: &JobSpec) -> Result<(), ApiError> {
    spec.selection.resolve()?;
    if spec.kind.needs_bucket() && spec.bck.is_none() {
        return Err(ApiError::bad_request(format!(
            "{} needs a bucket",
            spec.kind
        )));
    }
    if spec.kind.info().needs_destination && spec.to_bck.is_none() {
        return Err(ApiError::bad_request(format!(
            "{} needs a destination bucket",
            spec.kind
        )));
    }
    if spec.kind == JobKind::Archive && spec.opts.archive.is_none() {
        return Err(ApiError::bad_request("archive needs an archive name"));
    }
    if spec.kind == JobKind::Reshard && spec.opts.reshard.is_none() {
        return Err(ApiError::bad_request("dsort needs a reshard spec"));
    }
    if spec.kind == JobKind::Etl && spec.opts.etl.is_empty() {
        return Err(ApiError::bad_request("etl-bck needs an ETL name"));
    }
    Ok(())
}

async fn execute(t: &Arc<Target>, run: &Arc<JobRun>) -> Result<(), ApiError> {
    let spec = &run.spec;
    if spec.kind == JobKind::Lru {
        let evicted = t.space.evict(&t.bmd(), spec.opts.force, &[]).await;
        *run.total.lock().expect("job total lock") = Some(evicted.objects);
        run.objects.store(evicted.objects, Ordering::Relaxed);
        run.bytes.store(evicted.bytes, Ordering::Relaxed);
        return Ok(());
    }
    if matches!(spec.kind, JobKind::Rebalance | JobKind::MakeNCopies) {
        return crate::cluster::rebalance::run(t, run).await;
    }
    if spec.kind == JobKind::Resilver {
        return crate::cluster::resilver::run(t, run).await;
    }
    if spec.kind == JobKind::Scrub {
        return crate::jobs::scrub::run(t, run).await;
    }
    if spec.kind == JobKind::Archive {
        return crate::shards::execute_archive(t, run).await;
    }
    if spec.kind == JobKind::Reshard {
        return crate::shards::execute_reshard(t, run).await;
    }
    let bck = spec.bck.clone().expect("validated");
    t.require_bucket(&bck).await?;
    if let Some(to) = &spec.to_bck
        && !spec.opts.dry_run
    {
        t.require_bucket(to).await?;
    }
    let names = tokio::select! {
        names = enumerate(t, spec, &bck) => names?,
        _ = run.cancel.cancelled() => return Ok(()),
    };
    *run.total.lock().expect("job total lock") = Some(names.len() as u64);
    let workers = match spec.opts.num_workers {
        n if n > 0 => n.min(256),
        _ => spec.kind.info().workers.max(1),
    };
    let work = futures::stream::iter(names)
        .take_until(run.cancel.cancelled())
        .map(|name| {
            let (t, run, bck) = (t.clone(), run.clone(), bck.clone());
            async move {
                let result = match run.spec.kind {
                    JobKind::Prefetch => prefetch_one(&t, &bck, &name, run.spec.opts.latest).await,
                    JobKind::Evict => evict_one(&t, &bck, &name).await,
                    JobKind::Copy | JobKind::Etl => {
                        retry_while_cluster_changes(&run, || copy_one(&t, &run.spec, &bck, &name))
                            .await
                    }
                    // Node-wide kinds run in `execute` before the per-object loop.
                    JobKind::Lru
                    | JobKind::Rebalance
                    | JobKind::Resilver
                    | JobKind::MakeNCopies
                    | JobKind::Archive
                    | JobKind::Reshard
                    | JobKind::Scrub => Ok(Outcome::Skipped),
                };
                run.record(&name, result);
            }
        })
        .buffer_unordered(workers);
    work.collect::<()>().await;
    Ok(())
}

/// How long one object's copy keeps being retried while the cluster changes under it.
const CLUSTER_CHANGE_RETRY: Duration = Duration::from_secs(60);

/// Runs `attempt` again, with backoff, while it fails because the cluster is changing: a 503
/// (maps disagree, the owner moved, a holder did not answer) or a busy peer. The
/// rebalance retries its transfers in rounds the same way; without this, a copy job started
/// while a target joins or leaves records such an object as a permanent error and skips it.
/// Errors a retry cannot mend (the ETL failed or timed out — a 504 —, the name is invalid)
/// are returned at once.
async fn retry_while_cluster_changes<F, Fut>(
    run: &JobRun,
    mut attempt: F,
) -> Result<Outcome, ApiError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Outcome, ApiError>>,
{
    let deadline = tokio::time::Instant::now() + CLUSTER_CHANGE_RETRY;
    let mut backoff = Duration::from_millis(200);
    loop {
        match attempt().await {
            Err(e)
                if matches!(e.kind, ErrorKind::Unavailable | ErrorKind::Busy)
                    && tokio::time::Instant::now() + backoff < deadline =>
            {
                tracing::debug!(job = %run.spec.id, error = %e, "copy retried: the cluster is changing");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = run.cancel.cancelled() => return Err(e),
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            result => return result,
        }
    }
}

/// The names of the selection this target works on, in name order where there is one.
pub(crate) async fn enumerate(
    t: &Arc<Target>,
    spec: &JobSpec,
    bck: &Bck,
) -> Result<Vec<String>, ApiError> {
    let smap = t.smap();
    let me = t.id.clone();
    let bck2 = bck.clone();
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    let (smap2, me2, bck3) = (smap.clone(), me.clone(), bck.clone());
    let mine = move |name: &str| {
        smap.owner(&bck2.object_uname(name))
            .is_some_and(|o| o.daemon_id == me)
    };
    // A local copy is this target's to work on if it owns the object, or holds it where the
    // map places it nowhere (misplaced: a rebalance was aborted before moving it). A replica
    // is its owner's: with N copies, each object is worked on once, not N times.
    let mine_here = move |name: &str| {
        let owners = smap2.owners(&bck3.object_uname(name), copies);
        match owners.iter().position(|o| o.daemon_id == me2) {
            Some(i) => i == 0,
            None => true,
        }
    };
    match spec.selection.resolve()? {
        Resolved::Names(names) => Ok(names.into_iter().filter(|n| mine(n)).collect()),
        Resolved::Template(tpl) => {
            tokio::task::spawn_blocking(move || tpl.names().filter(|n| mine(n)).collect::<Vec<_>>())
                .await
                .map_err(|e| ApiError::internal(e.to_string()))
        }
        Resolved::Prefix(prefix) => {
            // Evicting, or reading a native bucket: what is stored here. Prefetching or copying
            // a remote bucket: the remote's listing, each target keeping the names it owns.
            let local = spec.kind == JobKind::Evict || !bck.is_remote();
            let mut out = Vec::new();
            let mut after = String::new();
            loop {
                let (names, more): (Vec<String>, bool) = if local {
                    let page = t.store.list(bck, &prefix, &after, LIST_PAGE, false).await?;
                    let more = page.len() >= LIST_PAGE;
                    (page.into_iter().map(|m| m.name).collect(), more)
                } else {
                    let backend = t.backend(bck)?;
                    let page = backend.list(bck, &prefix, &after, LIST_PAGE).await?;
                    let names = page.entries.into_iter().map(|e| e.name).collect();
                    (names, page.truncated)
                };
                let Some(last) = names.last().cloned() else {
                    break;
                };
                out.extend(names.into_iter().filter(|n| match (spec.kind, local) {
                    // Every cached copy goes, replicas included.
                    (JobKind::Evict, _) => true,
                    (_, true) => mine_here(n),
                    (_, false) => mine(n),
                }));
                if !more {
                    break;
                }
                after = last;
            }
            Ok(out)
        }
    }
}

fn is_not_found(e: &crate::StoreError) -> bool {
    matches!(e, crate::StoreError::Api(a) if a.kind == ErrorKind::NotFound)
}

/// Caches one remote object (re-fetching it with `latest` when the remote changed).
async fn prefetch_one(
    t: &Target,
    bck: &Bck,
    name: &str,
    latest: bool,
) -> Result<Outcome, ApiError> {
    let backend = t.backend(bck)?;
    let mut refetch = false;
    match t.store.head(bck, name) {
        Ok(meta) if latest => {
            let remote = backend.head(bck, name).await?;
            refetch = crate::read::remote::differs(&meta, &remote);
            if !refetch {
                return Ok(Outcome::Skipped);
            }
        }
        Ok(_) => return Ok(Outcome::Skipped),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    match t.fills.join(t, backend, bck, name, refetch).await {
        Ok(fill) => fill
            .wait()
            .await
            .map(Outcome::Done)
            .map_err(|why| ApiError::new(ErrorKind::BadGateway, why)),
        Err(Start::Cached) => Ok(Outcome::Skipped),
        Err(Start::Failed(e)) => Err(e),
    }
}

/// Drops the cached copy of one remote object.
async fn evict_one(t: &Target, bck: &Bck, name: &str) -> Result<Outcome, ApiError> {
    t.partials.remove(&bck.object_uname(name));
    match t.store.delete(bck, name).await {
        Ok(meta) => Ok(Outcome::Done(meta.size)),
        Err(e) if is_not_found(&e) => Ok(Outcome::Skipped),
        Err(e) => Err(e.into()),
    }
}

/// The destination name of a copied object: `to_prefix` replaces the selection's prefix, the
/// extension map applies, then `prepend` goes in front.
fn destination_name(spec: &JobSpec, name: &str) -> String {
    let base = match &spec.opts.to_prefix {
        Some(to) => {
            let from = match spec.selection.resolve() {
                Ok(Resolved::Prefix(p)) => p,
                Ok(Resolved::Template(t)) => t.prefix().to_owned(),
                _ => String::new(),
            };
            format!("{to}{}", name.strip_prefix(from.as_str()).unwrap_or(name))
        }
        None => name.to_owned(),
    };
    let base = gristmill_core::etl::map_extension(&base, &spec.opts.ext);
    format!("{}{base}", spec.opts.prepend)
}

/// Copies one object to its owner in the destination bucket: a local copy is streamed from
/// disk, an uncached remote object straight from its backend (without caching it here).
async fn copy_one(t: &Target, spec: &JobSpec, bck: &Bck, name: &str) -> Result<Outcome, ApiError> {
    let to = spec.to_bck.as_ref().expect("validated");
    let dest = destination_name(spec, name);
    gristmill_core::validate_object_name(&dest)?;
    let (size, body): (u64, reqwest::Body) = if spec.kind == JobKind::Etl {
        // Transforms take whole objects: read (bounded), transform, send the result.
        let data = crate::read::transform::object_bytes(t, bck, name).await?;
        let out = t
            .etls
            .pipeline(&spec.opts.etl, data, name, &spec.opts.etl_args)
            .await?;
        if spec.opts.dry_run {
            return Ok(Outcome::Done(out.len() as u64));
        }
        (out.len() as u64, reqwest::Body::from(out))
    } else {
        match t.store.open_object(bck, name).await {
            Ok(open) => {
                let size = open.meta.size;
                let body = match open.data {
                    Some(data) => reqwest::Body::from(data),
                    None => reqwest::Body::wrap_stream(crate::store::stream::file_stream(
                        open.file, 0, size,
                    )),
                };
                (size, body)
            }
            Err(e) if is_not_found(&e) && bck.is_remote() => {
                let backend = t.backend(bck)?;
                if spec.opts.dry_run {
                    return Ok(Outcome::Done(backend.head(bck, name).await?.size));
                }
                let (attrs, stream) = backend.get(bck, name, None).await?;
                let stream = stream.map_err(|e| std::io::Error::other(e.message));
                (attrs.size, reqwest::Body::wrap_stream(stream))
            }
            Err(e) => return Err(e.into()),
        }
    };
    if spec.opts.dry_run {
        return Ok(Outcome::Done(size));
    }
    let smap = t.smap();
    let owner = smap
        .owner(&to.object_uname(&dest))
        .ok_or_else(|| ApiError::unavailable("no targets in the cluster map"))?;
    let url = format!(
        "{}/v1/objects/{}/{}",
        owner.url(),
        to.name,
        gristmill_core::name::encode_path(&dest)
    );
    let resp = t
        .relay
        .put(url)
        .query(&[
            ("provider", to.provider.as_str()),
            ("namespace", to.namespace.uname().as_str()),
        ])
        .header(reqwest::header::CONTENT_LENGTH, size)
        .body(body)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("copy to {}: {e}", owner.daemon_id)))?;
    if !resp.status().is_success() {
        return Err(crate::cluster::peer::peer_error(resp, &format!("copy to {to}/{dest}")).await);
    }
    Ok(Outcome::Done(size))
}
