//! Jobs on the proxy: the primary starts a job on every target with one [`JobSpec`]; any proxy
//! answers status by asking the targets (nothing is kept here, so a restarted proxy still knows
//! every job) and aborts by telling them all.

use std::time::Duration;

use gristmill_core::job::{JobKind, JobSnap, JobSpec, JobState, JobStatus, job_not_found};
use gristmill_core::{ApiError, ErrorKind};

use crate::meta::Proxy;
use crate::remote::node_error;

/// Sends the job to every active target. If any target refuses, the others are told to abort
/// and the error is returned: a job runs everywhere or nowhere.
pub(crate) async fn start(p: &Proxy, spec: JobSpec) -> Result<String, ApiError> {
    if spec.kind.waits_for_rebalance() {
        wait_for_placement(p, &spec).await?;
    }
    let smap = p.smap();
    let targets: Vec<_> = smap.active_targets().cloned().collect();
    if targets.is_empty() {
        return Err(ApiError::unavailable("no targets in the cluster yet"));
    }
    let sends = targets.iter().map(|t| {
        let req = p
            .http
            .post(format!("{}/v1/jobs", t.url()))
            .json(&spec)
            .send();
        async move {
            let resp = req
                .await
                .map_err(|e| ApiError::unavailable(format!("target {}: {e}", t.daemon_id)))?;
            if !resp.status().is_success() {
                return Err(node_error(resp).await);
            }
            Ok(())
        }
    });
    let results = futures::future::join_all(sends).await;
    if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
        let _ = abort(p, &spec.id).await;
        return Err(e);
    }
    tracing::info!(job = %spec.id, kind = %spec.kind, targets = targets.len(), "job started");
    Ok(spec.id)
}

/// Longest a job start waits for running rebalances to end.
const PLACEMENT_WAIT: Duration = Duration::from_secs(600);

/// Waits until no target runs a rebalance or a `make-n-copies` job (objects are where the
/// map places them), so a job started mid-change sees every object exactly once.
async fn wait_for_placement(p: &Proxy, spec: &JobSpec) -> Result<(), ApiError> {
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(50);
    let mut logged = false;
    loop {
        let mut moving = snaps(p, "", Some(JobKind::Rebalance), true).await;
        moving.extend(snaps(p, "", Some(JobKind::MakeNCopies), true).await);
        let Some(first) = moving.first() else {
            if logged {
                tracing::info!(job = %spec.id, waited = ?started.elapsed(), "rebalance over; job starting");
            }
            return Ok(());
        };
        if !logged {
            tracing::info!(job = %spec.id, kind = %spec.kind, rebalance = %first.id, "job waits for the running rebalance to end");
            logged = true;
        }
        if started.elapsed() >= PLACEMENT_WAIT {
            return Err(ApiError::unavailable(format!(
                "job {} ({}) waited {PLACEMENT_WAIT:?} for {} to end; start it again when the rebalance is over",
                spec.id, spec.kind, first.id
            )));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Primary: tells the targets when every object is where the current map places it — every
/// target of the map finished its latest rebalance cleanly, for a map at least as new as the
/// last one that changed the active targets — so they can forget the earlier maps (reads,
/// writes and deletes stop asking past owners). Checked every second while not yet told.
pub(crate) struct PlacementWatch(pub(crate) std::sync::Arc<Proxy>);

impl gristmill_node::worker::Worker for PlacementWatch {
    fn name(&self) -> &'static str {
        "placement watch"
    }

    fn period(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn round(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let p = &self.0;
        let smap = p.smap();
        if !p.is_primary() || p.placed.load(SeqCst) >= smap.version || smap.tmap.is_empty() {
            return;
        }
        let since = p.active_changed_at.load(SeqCst);
        // Restarting targets count: placement is not confirmed while one cannot report.
        let (rebalances, silent) =
            snaps_counting_silent(p, "", Some(JobKind::Rebalance), false, true).await;
        if silent > 0 {
            return;
        }
        let placed = smap.tmap.keys().all(|tid| {
            let latest = rebalances
                .iter()
                .filter(|s| &s.node == tid)
                .max_by_key(|s| s.start_ns);
            latest.is_some_and(|s| {
                s.state == JobState::Finished
                    && s.errors == 0
                    && s.id
                        .strip_prefix("rb")
                        .and_then(|v| v.parse::<u64>().ok())
                        .is_some_and(|v| v >= since)
            })
        });
        let copies_moving = !snaps(p, "", Some(JobKind::MakeNCopies), true)
            .await
            .is_empty();
        if !placed || copies_moving || p.smap().version != smap.version {
            return;
        }
        let pushes = smap.tmap.values().map(|t| {
            p.http
                .put(format!("{}/v1/internal/placed", t.url()))
                .json(&serde_json::json!({ "version": smap.version }))
                .timeout(Duration::from_secs(5))
                .send()
        });
        let answered = futures::future::join_all(pushes)
            .await
            .into_iter()
            .filter(|r| r.as_ref().is_ok_and(|r| r.status().is_success()))
            .count();
        if answered == smap.tmap.len() {
            p.placed.store(smap.version, SeqCst);
            tracing::info!(
                version = smap.version,
                "every object is placed by the current map"
            );
        }
    }
}

/// Every target's snapshots matching the filters. A target that cannot be reached is
/// skipped (its share shows up again when it answers).
pub(crate) async fn snaps(
    p: &Proxy,
    id: &str,
    kind: Option<JobKind>,
    running_only: bool,
) -> Vec<JobSnap> {
    snaps_counting_silent(p, id, kind, running_only, false)
        .await
        .0
}

/// [`snaps`], and how many targets did not answer. Restarting targets (down, or about to be,
/// running no jobs) are asked only with `restarting`.
async fn snaps_counting_silent(
    p: &Proxy,
    id: &str,
    kind: Option<JobKind>,
    running_only: bool,
    restarting: bool,
) -> (Vec<JobSnap>, usize) {
    let smap = p.smap();
    let mut query = vec![("id", id.to_owned())];
    if let Some(k) = kind {
        query.push(("kind", k.as_str().to_owned()));
    }
    if running_only {
        query.push(("running", "true".into()));
    }
    // Every target in the map, maintenance ones included: they run rebalances too.
    let asks = smap.tmap.values().filter(|t| restarting || !t.is_restarting()).map(|t| {
        let req = p
            .http
            .get(format!("{}/v1/jobs", t.url()))
            .query(&query)
            .send();
        let tid = t.daemon_id.clone();
        async move {
            match req.await {
                Ok(resp) if resp.status().is_success() => {
                    resp.json::<Vec<JobSnap>>().await.ok()
                }
                Ok(resp) => {
                    tracing::warn!(target = %tid, status = %resp.status(), "job status query failed");
                    None
                }
                Err(e) => {
                    tracing::warn!(target = %tid, error = %e, "job status query failed");
                    None
                }
            }
        }
    });
    let answers = futures::future::join_all(asks).await;
    let silent = answers.iter().filter(|a| a.is_none()).count();
    (answers.into_iter().flatten().flatten().collect(), silent)
}

/// One job across the cluster; 404 if no target knows it.
pub(crate) async fn status(p: &Proxy, id: &str) -> Result<JobStatus, ApiError> {
    let (snaps, silent) = snaps_counting_silent(p, id, None, false, false).await;
    let mut status = JobStatus::aggregate(snaps).ok_or_else(|| job_not_found(id))?;
    // A target that did not answer (busy, restarting) may still be running its share: the
    // job is not known to be over.
    if silent > 0 && status.state == JobState::Finished {
        status.state = JobState::Running;
        status.end_ns = 0;
    }
    // The rebalance of the current map runs on every target of the map, each starting it when
    // the map reaches it: it is not over while a target has yet to report it — for a while (a
    // target that skipped this map version never will).
    const REPORT_GRACE_NS: i64 = 30_000_000_000;
    let smap = p.smap();
    if id == format!("rb{}", smap.version)
        && status.state == JobState::Finished
        && status.targets.len() < smap.tmap.values().filter(|t| !t.is_restarting()).count()
        && crate::meta::now_ns() - status.start_ns < REPORT_GRACE_NS
    {
        status.state = JobState::Running;
        status.end_ns = 0;
    }
    Ok(status)
}

/// Jobs across the cluster, newest first.
pub(crate) async fn list(p: &Proxy, kind: Option<JobKind>, running_only: bool) -> Vec<JobStatus> {
    let mut by_id: std::collections::BTreeMap<String, Vec<JobSnap>> = Default::default();
    for s in snaps(p, "", kind, false).await {
        by_id.entry(s.id.clone()).or_default().push(s);
    }
    let mut jobs: Vec<JobStatus> = by_id
        .into_values()
        .filter_map(JobStatus::aggregate)
        .filter(|j| !running_only || j.state == JobState::Running)
        .collect();
    jobs.sort_by_key(|j| std::cmp::Reverse(j.start_ns));
    jobs
}

/// Tells every target to abort the job; 404 if none knew it.
pub(crate) async fn abort(p: &Proxy, id: &str) -> Result<(), ApiError> {
    let smap = p.smap();
    let asks = smap
        .tmap
        .values()
        .map(|t| p.http.delete(format!("{}/v1/jobs/{}", t.url(), id)).send());
    let known = futures::future::join_all(asks)
        .await
        .into_iter()
        .filter(|r| r.as_ref().is_ok_and(|resp| resp.status().is_success()))
        .count();
    if known == 0 {
        return Err(job_not_found(id));
    }
    tracing::info!(job = %id, targets = known, "job aborted");
    Ok(())
}

/// Polls until the job ends or `timeout` passes (for synchronous operations built on jobs).
pub(crate) async fn wait(p: &Proxy, id: &str, timeout: Duration) -> Result<JobStatus, ApiError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    loop {
        let s = status(p, id).await?;
        if s.state != JobState::Running {
            return Ok(s);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::new(
                ErrorKind::GatewayTimeout,
                format!("job {id} still running after {timeout:?}"),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}
