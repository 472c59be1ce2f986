//! Mountpath management at runtime and the resilver: AIStore's `PUT /v1/daemon/mountpaths`
//! (`attach-mp`, `detach-mp`, `enable-mp`, `disable-mp` with the path as the value) changes
//! the set (see `store::mountset`), then a resilver — a local job of this target, id
//! `resilver-<target>-<epoch>`, listed by `grist job show` like any job — moves every object
//! that is not on its HRW mountpath there. A newer change aborts the running resilver and
//! starts its own; a restart resumes a pending one (the work is "whatever is misplaced now").

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use gristmill_core::ApiError;
use gristmill_core::api::ActionMsg;
use gristmill_core::job::{JobKind, JobSpec};

use crate::Target;
use crate::jobs::{JobRun, Outcome};
use crate::store::{Moved, MpAction, WalkCursor};

/// Objects moved at once.
const WORKERS: usize = 4;
/// Passes over the indexes before giving up on objects that keep failing to move.
const MAX_PASSES: usize = 4;

/// The job id of the resilver for change `epoch` on target `id`.
pub(crate) fn job_id(id: &str, epoch: u64) -> String {
    format!("resilver-{id}-{epoch}")
}

/// Aborts a running resilver and starts one for the current set.
pub(crate) fn start(t: &Arc<Target>, why: &str) -> String {
    t.jobs.abort_kind(JobKind::Resilver, why);
    let id = job_id(&t.id, t.store.epoch());
    let spec = JobSpec {
        id: id.clone(),
        kind: JobKind::Resilver,
        bck: None,
        to_bck: None,
        selection: Default::default(),
        opts: Default::default(),
    };
    if let Err(e) = t.jobs.start(t.clone(), spec) {
        tracing::warn!(error = %e.message, "could not start the resilver");
    }
    id
}

/// Runs one resilver: waits for writes that picked their mountpath before the change, moves
/// every misplaced object (in passes, until a pass finds none; each pass walks the indexes a
/// page at a time), then drops emptied detaching mountpaths and marks the set settled.
pub(crate) async fn run(t: &Arc<Target>, run: &Arc<JobRun>) -> Result<(), ApiError> {
    let store = &t.store;
    let epoch = store.epoch();
    if !store.wait_older_writes(epoch, &run.cancel).await {
        return Ok(());
    }
    let mut total = 0u64;
    let mut clean = false;
    for pass in 0..MAX_PASSES {
        // One walk of every index, a page at a time (memory bounded by the page).
        let mut found = 0u64;
        let mut cursor = Some(WalkCursor::default());
        while let Some(c) = cursor {
            let (misplaced, next) = store.misplaced_page(c).await?;
            cursor = next;
            if misplaced.is_empty() {
                continue;
            }
            if found == 0 {
                tracing::info!(job = %run.spec.id, pass, "resilver: moving misplaced objects");
            }
            found += misplaced.len() as u64;
            total += misplaced.len() as u64;
            *run.total.lock().expect("job total lock") = Some(total);
            let results: Vec<_> = futures::stream::iter(misplaced)
                .take_until(run.cancel.cancelled())
                .map(|m| {
                    let store = store.clone();
                    async move {
                        let r = store.move_object(&m).await;
                        (m.meta.name, r)
                    }
                })
                .buffer_unordered(WORKERS)
                .collect()
                .await;
            for (name, r) in results {
                let outcome = match r {
                    Ok(Moved::Moved(bytes)) => Ok(Outcome::Done(bytes)),
                    Ok(Moved::DroppedOlder | Moved::Changed) => Ok(Outcome::Skipped),
                    Err(e) => Err(ApiError::from(e)),
                };
                run.record(&name, outcome);
            }
            if run.cancel.is_cancelled() {
                return Ok(());
            }
        }
        if found == 0 {
            clean = true;
            break;
        }
    }
    let dropped = store.finish_resilver(epoch, clean).await?;
    if !dropped.is_empty() {
        tracing::info!(job = %run.spec.id, dropped = dropped.len(), "resilver: detached emptied mountpaths");
    }
    Ok(())
}

/// `PUT /v1/daemon/mountpaths` with `{"action": "attach-mp"|"detach-mp"|"enable-mp"|
/// "disable-mp", "value": "<path>"}` (the path may also be in `name`). Answers the change and
/// the resilver's job id (empty when nothing changed).
pub(crate) async fn change(State(t): State<Arc<Target>>, body: axum::body::Bytes) -> Response {
    match change_inner(&t, &body).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn change_inner(t: &Arc<Target>, body: &[u8]) -> Result<serde_json::Value, ApiError> {
    let msg: ActionMsg = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid mountpath action: {e}")))?;
    let action = MpAction::parse(&msg.action).ok_or_else(|| {
        ApiError::bad_request(format!(
            "unknown mountpath action {:?} (expected attach-mp, detach-mp, enable-mp or disable-mp)",
            msg.action
        ))
    })?;
    let path = match &msg.value {
        serde_json::Value::String(s) if !s.is_empty() => s.clone(),
        _ if !msg.name.is_empty() => msg.name.clone(),
        _ => {
            return Err(ApiError::bad_request(
                "a mountpath action needs the path as its value",
            ));
        }
    };
    if path.contains('\0') {
        return Err(ApiError::bad_request("a mountpath may not contain NUL"));
    }
    let changed = t
        .store
        .change_mountpath(action, std::path::Path::new(&path))
        .await
        .map_err(ApiError::from)?;
    let job = if changed.resilver {
        start(
            t,
            &format!(
                "superseded by {} {}",
                changed.action,
                changed.path.display()
            ),
        )
    } else {
        String::new()
    };
    Ok(serde_json::json!({
        "action": changed.action,
        "path": changed.path,
        "epoch": changed.epoch,
        "job": job,
    }))
}

/// `GET /v1/daemon?what=mountpaths`: AIStore's mountpath list (`available`, `waiting_dd`:
/// detaching, `disabled`) plus the resilver's state.
pub(crate) fn list(t: &Target) -> serde_json::Value {
    let set = t.store.set();
    let paths = |v: &[Arc<crate::store::Mountpath>]| -> Vec<String> {
        v.iter()
            .map(|m| m.path.to_string_lossy().into_owned())
            .collect()
    };
    let running = t
        .jobs
        .snaps("", Some(JobKind::Resilver), true)
        .into_iter()
        .map(|s| s.id)
        .next()
        .unwrap_or_default();
    serde_json::json!({
        "available": paths(&set.available),
        "waiting_dd": paths(&set.detaching),
        "disabled": paths(&set.disabled),
        "epoch": t.store.epoch(),
        "resilver_pending": t.store.resilver_pending(),
        "resilver_job": running,
    })
}
