//! The HTTP face of jobs on the proxy: bucket actions that start jobs (prefetch, evict, copy),
//! `/v1/jobs` (show, abort), AIStore's `PUT /v1/cluster {"action":"start"|"stop"}` and its
//! status queries (`GET /v1/cluster?what=status|qryxstats`), answered in AIStore's shapes so
//! its SDK's `Job.wait()` works.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gristmill_core::api::{ActionMsg, action, query as q};
use gristmill_core::job::{
    JobKind, JobOptions, JobSpec, JobState, JobStatus, Scope, Selection, new_job_id,
};
use gristmill_core::{ApiError, Bck, Namespace};
use serde_json::Value;

use crate::jobs;
use crate::meta::Proxy;

type Params = Query<HashMap<String, String>>;
type ApiResult = Result<Response, ApiError>;

/// The selection of a list-range action value: `objnames`, `template` or `prefix`.
pub(crate) fn selection(value: &Value) -> Result<Selection, ApiError> {
    let strings = |k: &str| -> Result<Vec<String>, ApiError> {
        match value.get(k) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid {k:?}: {e}"))),
        }
    };
    Ok(Selection {
        objnames: strings("objnames")?,
        template: str_field(value, &["template"]),
        prefix: str_field(value, &["prefix"]),
    })
}

pub(crate) fn str_field(value: &Value, keys: &[&str]) -> String {
    keys.iter()
        .find_map(|k| value.get(*k).and_then(Value::as_str))
        .unwrap_or("")
        .to_owned()
}

pub(crate) fn bool_field(value: &Value, keys: &[&str]) -> bool {
    keys.iter().any(|k| match value.get(*k) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true",
        _ => false,
    })
}

/// Job options from an action value (AIStore's and our own spellings).
pub(crate) fn options(value: &Value) -> JobOptions {
    JobOptions {
        latest: bool_field(value, &["latest-ver", "latest"]),
        dry_run: bool_field(value, &["dry_run", "dry-run"]),
        prepend: str_field(value, &["prepend"]),
        to_prefix: ["to_prefix", "to-prefix"]
            .iter()
            .find_map(|k| value.get(*k).and_then(Value::as_str))
            .map(str::to_owned),
        num_workers: ["num-workers", "num_workers"]
            .iter()
            .find_map(|k| value.get(*k).and_then(Value::as_u64))
            .unwrap_or(0) as usize,
        continue_on_err: bool_field(value, &["coer", "continue_on_err"]),
        force: bool_field(value, &["force"]),
        ..Default::default()
    }
}

/// A destination bucket from AIStore's `bck_to` (`provider/@uuid#ns/name/`) or a URI
/// (`ais://name`).
pub(crate) fn parse_bck_to(s: &str) -> Result<Bck, ApiError> {
    if s.contains("://") {
        return Ok(Bck::parse_uri(s)?.0);
    }
    let parts: Vec<&str> = s.trim_end_matches('/').split('/').collect();
    match parts.as_slice() {
        [provider, ns, name] => Bck::from_request(name, Some(provider), Some(ns)),
        [provider, name] => Bck::from_request(name, Some(provider), None),
        _ => Err(ApiError::bad_request(format!(
            "invalid destination bucket {s:?} (expected provider/@uuid#ns/name/ or ais://name)"
        ))),
    }
}

/// A destination bucket from a `tobck` object (`{"name","provider","namespace":{...}}`).
pub(crate) fn tobck(value: &Value) -> Result<Option<Bck>, ApiError> {
    let Some(v) = value.get("tobck").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let name = v.get("name").and_then(Value::as_str).unwrap_or("");
    let provider = v.get("provider").and_then(Value::as_str);
    let mut bck = Bck::from_request(name, provider, None)?;
    if let Some(ns) = v.get("namespace").filter(|n| !n.is_null()) {
        bck.namespace = serde_json::from_value::<Namespace>(ns.clone())
            .map_err(|e| ApiError::bad_request(format!("invalid tobck namespace: {e}")))?;
    }
    Ok(Some(bck))
}

fn remote_only(bck: &Bck, what: &str) -> Result<(), ApiError> {
    if bck.is_remote() {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "{what} applies to remote buckets; {bck} is a native bucket (use delete instead)"
        )))
    }
}

/// The job id as AIStore answers it: plain text.
pub(crate) fn job_id_response(id: String) -> Response {
    (StatusCode::OK, id).into_response()
}

/// Bucket actions that start jobs; `None` if `msg` is not one of them.
pub(crate) async fn bucket_job_action(
    p: &Arc<Proxy>,
    method: &str,
    bck: &Bck,
    msg: &ActionMsg,
    params: &HashMap<String, String>,
) -> Option<ApiResult> {
    let value = &msg.value;
    let spec = |kind: JobKind, to_bck: Option<Bck>| -> Result<JobSpec, ApiError> {
        Ok(JobSpec {
            id: new_job_id(),
            kind,
            bck: Some(bck.clone()),
            to_bck,
            selection: selection(value)?,
            opts: options(value),
        })
    };
    let result = match (method, msg.action.as_str()) {
        ("POST", action::PREFETCH) => {
            async {
                remote_only(bck, "prefetch")?;
                crate::remote::ensure(p, bck).await?;
                Ok(job_id_response(
                    jobs::start(p, spec(JobKind::Prefetch, None)?).await?,
                ))
            }
            .await
        }
        ("DELETE", action::EVICT_OBJECTS) => {
            async {
                remote_only(bck, "evict")?;
                crate::remote::ensure(p, bck).await?;
                Ok(job_id_response(
                    jobs::start(p, spec(JobKind::Evict, None)?).await?,
                ))
            }
            .await
        }
        ("DELETE", action::EVICT_REMOTE_BUCKET) => evict_bucket(p, bck, params).await,
        ("PUT" | "POST", "archive") => crate::shards::archive_action(p, bck, value, params).await,
        ("POST", action::COPY_BUCKET | action::COPY_OBJECTS) => {
            copy_job(p, bck, value, params, JobKind::Copy, |_| {}).await
        }
        ("POST", action::ETL_BUCKET | action::ETL_OBJECTS) => {
            let etl = etl_names(value);
            let bmd = p.bmd();
            match etl.iter().find(|n| !bmd.etls.contains_key(*n)) {
                _ if etl.is_empty() => Err(ApiError::bad_request(
                    "name the ETL: \"id\" (AIStore) or \"etl_name\"",
                )),
                Some(missing) => Err(ApiError::not_found(format!(
                    "ETL {missing:?} does not exist"
                ))),
                None => {
                    copy_job(p, bck, value, params, JobKind::Etl, |opts| {
                        opts.etl = etl.clone();
                        opts.etl_args = str_field(value, &["etl_args", "args"]);
                        opts.ext = value
                            .get("ext")
                            .and_then(|v| serde_json::from_value(v.clone()).ok())
                            .unwrap_or_default();
                    })
                    .await
                }
            }
        }
        _ => return None,
    };
    Some(result)
}

/// The ETLs of an etl-bck value: AIStore's `id` (or `transform_msg.id`), or our `etl_name`
/// (a comma list is a pipeline).
fn etl_names(value: &Value) -> Vec<String> {
    let direct = str_field(value, &["id", "etl_name"]);
    let names = if direct.is_empty() {
        value
            .get("transform_msg")
            .map(|t| str_field(t, &["id", "etl_name"]))
            .unwrap_or_default()
    } else {
        direct
    };
    gristmill_core::etl::pipeline(&names)
}

/// Starts a copy-like job (copy, ETL) to the destination named by `tobck` or `bck_to`; an
/// `ais://` destination is created.
async fn copy_job(
    p: &Arc<Proxy>,
    bck: &Bck,
    value: &Value,
    params: &HashMap<String, String>,
    kind: JobKind,
    tune: impl FnOnce(&mut JobOptions),
) -> ApiResult {
    let to = match tobck(value)? {
        Some(b) => b,
        None => parse_bck_to(params.get(q::BCK_TO).map(String::as_str).unwrap_or(""))?,
    };
    if &to == bck {
        return Err(ApiError::bad_request(format!(
            "{kind}: source and destination are the same bucket"
        )));
    }
    crate::remote::ensure(p, bck).await?;
    let mut job = JobSpec {
        id: new_job_id(),
        kind,
        bck: Some(bck.clone()),
        to_bck: Some(to.clone()),
        selection: selection(value)?,
        opts: options(value),
    };
    tune(&mut job.opts);
    if to.is_remote() {
        crate::remote::ensure(p, &to).await?;
    } else if !job.opts.dry_run && p.add_bucket(&to).await? {
        tracing::info!(bucket = %to, "destination bucket created");
    }
    Ok(job_id_response(jobs::start(p, job).await?))
}

/// `DELETE {"action":"evict-remote-bck"}`: drops every cached object of a remote bucket
/// (waiting for it), then its bucket-metadata entry unless `keep_md=true`.
async fn evict_bucket(p: &Arc<Proxy>, bck: &Bck, params: &HashMap<String, String>) -> ApiResult {
    remote_only(bck, "evict")?;
    if !p.bmd().contains(bck) {
        return Err(bck.not_found());
    }
    let id = jobs::start(
        p,
        JobSpec {
            id: new_job_id(),
            kind: JobKind::Evict,
            bck: Some(bck.clone()),
            to_bck: None,
            selection: Selection::default(),
            opts: JobOptions::default(),
        },
    )
    .await?;
    let done = jobs::wait(p, &id, Duration::from_secs(600)).await?;
    if done.errors > 0 {
        return Err(ApiError::internal(format!(
            "evicting {bck}: {} objects could not be evicted",
            done.errors
        )));
    }
    let keep = params.get(q::KEEP_MD).is_some_and(|v| v == "true");
    if !keep {
        p.change(|_, bmd| {
            bmd.buckets.remove(&bck.uname());
            Ok(crate::meta::Changed {
                smap: false,
                bmd: true,
            })
        })
        .await?;
    }
    tracing::info!(bucket = %bck, objects = done.objects, keep_md = keep, "remote bucket evicted");
    Ok(StatusCode::OK.into_response())
}

/// Starts the job that brings `bck`'s existing objects to its (changed) `mirror.copies`.
pub(crate) async fn start_make_n_copies(p: &Arc<Proxy>, bck: &Bck) -> ApiResult {
    let spec = JobSpec {
        id: new_job_id(),
        kind: JobKind::MakeNCopies,
        bck: Some(bck.clone()),
        to_bck: None,
        selection: Selection::default(),
        opts: Default::default(),
    };
    Ok(job_id_response(jobs::start(p, spec).await?))
}

/// `PUT /v1/cluster` with `{"action":"start","value":{"kind":"lru",...}}` or
/// `{"action":"stop","value":{"id":...}}`.
pub(crate) async fn cluster_action(p: &Arc<Proxy>, msg: &ActionMsg) -> ApiResult {
    let v = &msg.value;
    match msg.action.as_str() {
        action::START => {
            let kind_name = str_field(v, &["kind", "Kind"]);
            let kind = JobKind::parse(&kind_name)
                .ok_or_else(|| ApiError::bad_request(format!("unknown job kind {kind_name:?}")))?;
            if kind == JobKind::Scrub {
                return start_scrub(p, v).await;
            }
            match kind.info().scope {
                Scope::Cluster => {}
                Scope::Bucket => {
                    return Err(ApiError::bad_request(format!(
                        "start {kind} through its bucket action; lru and rebalance start here"
                    )));
                }
                Scope::Node => {
                    return Err(ApiError::bad_request(format!(
                        "{kind} is started by a target when its mountpaths change"
                    )));
                }
            }
            let spec = JobSpec {
                id: if kind == JobKind::Rebalance {
                    format!("rb{}-{}", p.smap().version, &new_job_id()[1..6])
                } else {
                    new_job_id()
                },
                kind,
                bck: None,
                to_bck: None,
                selection: Selection::default(),
                opts: options(v),
            };
            Ok(job_id_response(jobs::start(p, spec).await?))
        }
        action::STOP => {
            let id = str_field(v, &["id", "ID"]);
            if id.is_empty() {
                return Err(ApiError::bad_request("stop needs a job id"));
            }
            jobs::abort(p, &id).await?;
            Ok(StatusCode::OK.into_response())
        }
        other => Err(ApiError::bad_request(format!(
            "unsupported cluster action {other:?}"
        ))),
    }
}

/// `{"kind":"scrub","bck":"ais://b"|{"name","provider","namespace"},"prefix":"...",
/// "no_repair":true}`: a scrub of one bucket, or of every bucket without `bck`.
async fn start_scrub(p: &Arc<Proxy>, v: &Value) -> ApiResult {
    let bck = match v.get("bck").or_else(|| v.get("bucket")) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(Bck::parse_uri(s)?.0),
        Some(obj) => tobck(&serde_json::json!({ "tobck": obj }))?,
    };
    if let Some(b) = &bck {
        if b.is_remote() {
            crate::remote::ensure(p, b).await?;
        } else if !p.bmd().contains(b) {
            return Err(b.not_found());
        }
    }
    let mut opts = options(v);
    opts.no_repair = bool_field(v, &["no_repair", "no-repair"]);
    let spec = JobSpec {
        id: new_job_id(),
        kind: JobKind::Scrub,
        bck,
        to_bck: None,
        selection: Selection {
            prefix: str_field(v, &["prefix"]),
            ..Default::default()
        },
        opts,
    };
    Ok(job_id_response(jobs::start(p, spec).await?))
}

fn kind_param(params: &HashMap<String, String>) -> Result<Option<JobKind>, ApiError> {
    match params.get("kind").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(k) => JobKind::parse(k)
            .map(Some)
            .ok_or_else(|| ApiError::bad_request(format!("unknown job kind {k:?}"))),
    }
}

/// `GET /v1/jobs?kind=&running=true`: jobs across the cluster, newest first.
pub(crate) async fn list_jobs(State(p): State<Arc<Proxy>>, Query(params): Params) -> ApiResult {
    let running = params.get("running").is_some_and(|v| v == "true");
    let jobs = jobs::list(&p, kind_param(&params)?, running).await;
    Ok(axum::Json(jobs).into_response())
}

/// `GET /v1/jobs/{id}`: one job, with every target's progress and errors.
pub(crate) async fn show_job(State(p): State<Arc<Proxy>>, Path(id): Path<String>) -> ApiResult {
    Ok(axum::Json(jobs::status(&p, &id).await?).into_response())
}

/// `DELETE /v1/jobs/{id}`: aborts a job on every target.
pub(crate) async fn stop_job(State(p): State<Arc<Proxy>>, Path(id): Path<String>) -> ApiResult {
    jobs::abort(&p, &id).await?;
    Ok(axum::Json(jobs::status(&p, &id).await?).into_response())
}

/// The job named by an AIStore status query: `{"ID": ..., "Kind": ...}` in the body (or `id`
/// in the query).
fn queried_job(params: &HashMap<String, String>, body: &[u8]) -> (String, Option<JobKind>) {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut id = str_field(&v, &["ID", "id"]);
    if id.is_empty() {
        id = params.get("id").cloned().unwrap_or_default();
    }
    let kind = JobKind::parse(&str_field(&v, &["Kind", "kind"]));
    (id, kind)
}

/// `GET /v1/cluster?what=status|qryxstats`: AIStore's job status queries.
pub(crate) async fn status_query(
    p: &Arc<Proxy>,
    what: &str,
    params: &HashMap<String, String>,
    body: &[u8],
) -> ApiResult {
    let (id, kind) = queried_job(params, body);
    match what {
        "status" => {
            if id.is_empty() {
                return Err(ApiError::bad_request("job status needs an id"));
            }
            let s = jobs::status(p, &id).await?;
            Ok(axum::Json(ais_status(&s)).into_response())
        }
        _ => {
            // qryxstats: snapshots grouped by target id, in AIStore's field names.
            let snaps = jobs::snaps(p, &id, kind, false).await;
            let mut by_node: serde_json::Map<String, Value> = serde_json::Map::new();
            for s in snaps {
                let time = |ns: i64| {
                    if ns == 0 {
                        String::new()
                    } else {
                        gristmill_core::time::rfc3339_from_ns(ns)
                    }
                };
                let snap = serde_json::json!({
                    "id": s.id,
                    "kind": s.kind.as_str(),
                    "start-time": time(s.start_ns),
                    "end-time": time(s.end_ns),
                    "bck": s.bck.as_ref().map(ais_bucket),
                    "dst-bck": s.to_bck.as_ref().map(ais_bucket),
                    "stats": {"loc-objs": s.objects, "loc-bytes": s.bytes, "out-objs": 0,
                              "out-bytes": 0, "in-objs": 0, "in-bytes": 0},
                    "aborted": s.state == JobState::Aborted,
                    "is_idle": s.state != JobState::Running,
                    "abort-err": s.abort_reason,
                });
                by_node
                    .entry(s.node.clone())
                    .or_insert_with(|| Value::Array(Vec::new()))
                    .as_array_mut()
                    .expect("array")
                    .push(snap);
            }
            Ok(axum::Json(Value::Object(by_node)).into_response())
        }
    }
}

fn ais_bucket(b: &Bck) -> Value {
    serde_json::json!({
        "name": b.name,
        "provider": b.provider.as_str(),
        "namespace": {"uuid": b.namespace.uuid, "name": b.namespace.name},
    })
}

/// AIStore's `JobStatus` (`uuid`, `err`, `end_time`, `aborted`) plus our totals.
fn ais_status(s: &JobStatus) -> Value {
    let err = if s.errors > 0 {
        let first = s
            .error_samples()
            .next()
            .map(|e| format!(": first: {}: {}", e.name, e.error))
            .unwrap_or_default();
        format!("{} object(s) failed{first}", s.errors)
    } else {
        s.abort_reason().to_owned()
    };
    serde_json::json!({
        "uuid": s.id,
        "err": err,
        "end_time": s.end_ns,
        "aborted": s.state == JobState::Aborted,
        "kind": s.kind.as_str(),
        "objects": s.objects,
        "bytes": s.bytes,
        "total_objects": s.total_objects,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_buckets_parse() {
        let b = parse_bck_to("ais/@#/dst/").unwrap();
        assert_eq!((b.name.as_str(), b.provider.as_str()), ("dst", "ais"));
        let b = parse_bck_to("s3://other").unwrap();
        assert_eq!(b.provider.as_str(), "aws");
        assert!(parse_bck_to("").is_err());
        let v = serde_json::json!({"tobck": {"name": "x", "provider": "ais", "namespace": {"uuid": "", "name": ""}}});
        assert_eq!(tobck(&v).unwrap().unwrap().name, "x");
    }

    #[test]
    fn action_values_give_selection_and_options() {
        let v = serde_json::json!({"template": "a-{0..3}", "latest-ver": true, "coer": true, "num-workers": 4});
        let sel = selection(&v).unwrap();
        assert_eq!(sel.template, "a-{0..3}");
        let o = options(&v);
        assert!(o.latest && o.continue_on_err);
        assert_eq!(o.num_workers, 4);
    }
}
