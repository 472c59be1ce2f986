//! Shard operations on the proxy: get-batch requests are redirected to a designated target,
//! and the archive and reshard jobs are started on every target.
//!
//! - `GET /v1/ml/moss[/{bucket}]` (AIStore's get-batch): 307 to the target that owns the most
//!   of the requested items (ties broken by HRW of a fresh request id), which assembles the
//!   answer, pulling the other items from their owners.
//! - `PUT /v1/buckets/{src} {"action":"archive","value":{"archname", "mime", "objnames" |
//!   "template" | "prefix", "isbn", "aate", "coer", "shard_size"?, "tobck"?}}` (+ `bck_to`):
//!   the archive job.
//! - `POST /v1/sort` with a reshard spec (AIStore's dsort request, or ours): the reshard job;
//!   its id as plain text. `GET /v1/sort?uuid=` shows it, `DELETE /v1/sort/abort?uuid=` stops
//!   it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gristmill_core::api::query as q;
use gristmill_core::job::{JobKind, JobOptions, JobSpec, Selection, new_job_id};
use gristmill_core::shards::{ArchiveOpts, MossReq, ReshardAlgorithm, ReshardSpec};
use gristmill_core::{ApiError, Bck, ErrorKind, Namespace};
use serde::Deserialize;
use serde_json::Value;

use crate::job_api::{
    bool_field, job_id_response, options, parse_bck_to, selection, str_field, tobck,
};
use crate::jobs;
use crate::meta::Proxy;

type Params = Query<HashMap<String, String>>;
type ApiResult = Result<Response, ApiError>;

/// Largest get-batch body the proxy reads to pick the designated target.
const MAX_MOSS_BODY: usize = 64 << 20;
/// Items looked at when counting owners.
const MAX_COUNTED: usize = 100_000;

/// `GET /v1/ml/moss`.
pub(crate) async fn moss(
    State(p): State<Arc<Proxy>>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    moss_redirect(&p, None, &params, req).await
}

/// `GET /v1/ml/moss/{bucket}`.
pub(crate) async fn moss_bucket(
    State(p): State<Arc<Proxy>>,
    Path(bucket): Path<String>,
    Query(params): Params,
    req: Request,
) -> ApiResult {
    moss_redirect(&p, Some(bucket), &params, req).await
}

async fn moss_redirect(
    p: &Proxy,
    bucket: Option<String>,
    params: &HashMap<String, String>,
    req: Request,
) -> ApiResult {
    let uri = req.uri().clone();
    // With auth on, the redirect carries a signature for this path and the client's user
    // (clients drop their token on a redirect to another host).
    let signed = gristmill_node::auth::redirect_path_query_for(
        req.extensions(),
        req.method(),
        uri.path(),
        params,
    );
    let body = axum::body::to_bytes(req.into_body(), MAX_MOSS_BODY)
        .await
        .map_err(|e| ApiError::new(ErrorKind::PayloadTooLarge, format!("get-batch body: {e}")))?;
    let smap = p.smap();
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut remote: Vec<Bck> = Vec::new();
    if let Ok(req) = serde_json::from_slice::<MossReq>(&body) {
        let provider = params.get(q::PROVIDER).map(String::as_str);
        let ns = params.get(q::NAMESPACE).map(String::as_str);
        let default = bucket
            .as_deref()
            .and_then(|b| Bck::from_request(b, provider, ns).ok());
        for m in req.items.iter().take(MAX_COUNTED) {
            let uname = if !m.uname.is_empty() {
                m.uname.clone()
            } else if m.bucket.is_empty() {
                match &default {
                    Some(b) => b.object_uname(&m.objname),
                    None => continue,
                }
            } else {
                let p = if m.provider.is_empty() {
                    provider
                } else {
                    Some(m.provider.as_str())
                };
                match Bck::from_request(&m.bucket, p, None) {
                    Ok(b) => {
                        if b.is_remote() && !remote.contains(&b) {
                            remote.push(b.clone());
                        }
                        b.object_uname(&m.objname)
                    }
                    Err(_) => continue,
                }
            };
            if let Some(o) = smap.owner(&uname) {
                *counts.entry(o.daemon_id.clone()).or_default() += 1;
            }
        }
    }
    // Remote buckets named for the first time are added (as any request naming them does).
    if let Some(b) = default_remote(&bucket, params) {
        remote.push(b);
    }
    for b in remote.iter().take(16) {
        crate::remote::ensure(p, b).await?;
    }
    let fallback = smap
        .owner(&format!("moss/{}", uuid::Uuid::new_v4()))
        .ok_or_else(|| ApiError::unavailable("no targets in the cluster yet"))?;
    let best = counts
        .iter()
        .max_by(|a, b| {
            a.1.cmp(b.1)
                .then_with(|| (a.0 == &fallback.daemon_id).cmp(&(b.0 == &fallback.daemon_id)))
        })
        .and_then(|(id, _)| smap.node(id))
        .unwrap_or(fallback);
    let query = uri.query().unwrap_or("");
    let sep = if query.is_empty() { "" } else { "&" };
    let mut location = format!(
        "{}{}?{query}{sep}{}={}",
        best.url(),
        uri.path(),
        q::PROXY_ID,
        p.id
    );
    if let Some(sig) = signed {
        location.push('&');
        location.push_str(&sig);
    }
    Ok(gristmill_node::server::redirect(&location))
}

fn default_remote(bucket: &Option<String>, params: &HashMap<String, String>) -> Option<Bck> {
    let b = Bck::from_request(
        bucket.as_deref()?,
        params.get(q::PROVIDER).map(String::as_str),
        params.get(q::NAMESPACE).map(String::as_str),
    )
    .ok()?;
    b.is_remote().then_some(b)
}

/// A size given as a number of bytes or a string (`"256MiB"`).
fn size_field(value: &Value, keys: &[&str]) -> Result<u64, ApiError> {
    for k in keys {
        match value.get(*k) {
            Some(Value::Number(n)) => {
                return n
                    .as_u64()
                    .ok_or_else(|| ApiError::bad_request(format!("invalid {k}: {n}")));
            }
            Some(Value::String(s)) if !s.is_empty() => return gristmill_core::time::parse_size(s),
            _ => {}
        }
    }
    Ok(0)
}

/// Creates an `ais://` destination if missing; checks a remote one.
async fn ensure_destination(p: &Proxy, to: &Bck) -> Result<(), ApiError> {
    if to.is_remote() {
        crate::remote::ensure(p, to).await
    } else {
        if p.add_bucket(to).await? {
            tracing::info!(bucket = %to, "destination bucket created");
        }
        Ok(())
    }
}

/// `PUT /v1/buckets/{src} {"action":"archive", ...}`: starts the archive job.
pub(crate) async fn archive_action(
    p: &Arc<Proxy>,
    bck: &Bck,
    value: &Value,
    params: &HashMap<String, String>,
) -> ApiResult {
    let to = match tobck(value)? {
        Some(b) => b,
        None => match params.get(q::BCK_TO).filter(|s| !s.is_empty()) {
            Some(s) => parse_bck_to(s)?,
            None => bck.clone(),
        },
    };
    let archive = ArchiveOpts {
        archname: str_field(value, &["archname"]),
        mime: str_field(value, &["mime"]),
        shard_size: size_field(value, &["shard_size", "shard-size"])?,
        include_bucket: bool_field(value, &["isbn", "include_bucket"]),
        append: bool_field(value, &["aate", "append"]),
    };
    if archive.archname.is_empty() {
        return Err(ApiError::bad_request(
            "archive: name the shard (\"archname\")",
        ));
    }
    if archive.archname.contains('{') {
        gristmill_core::shards::Series::parse(&archive.archname)?;
    } else {
        gristmill_core::validate_object_name(&archive.archname)?;
    }
    if !archive.mime.is_empty() {
        gristmill_shard_format(&archive.mime)?;
    }
    crate::remote::ensure(p, bck).await?;
    ensure_destination(p, &to).await?;
    let mut opts = options(value);
    opts.archive = Some(archive);
    let spec = JobSpec {
        id: new_job_id(),
        kind: JobKind::Archive,
        bck: Some(bck.clone()),
        to_bck: Some(to),
        selection: selection(value)?,
        opts,
    };
    Ok(job_id_response(jobs::start(p, spec).await?))
}

/// A bucket in a reshard request: `{"name", "provider", "namespace"}`.
#[derive(Debug, Deserialize)]
struct BucketSpec {
    name: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    namespace: Option<Namespace>,
}

impl BucketSpec {
    fn bck(&self) -> Result<Bck, ApiError> {
        let mut b = Bck::from_request(&self.name, Some(&self.provider), None)?;
        if let Some(ns) = &self.namespace {
            b.namespace = ns.clone();
        }
        Ok(b)
    }
}

/// The input selection: a template string, or `{"template"|"objnames"|"prefix"}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum InputFormat {
    Template(String),
    Selection(Selection),
}

/// A size: bytes or a string like `"64MiB"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SizeSpec {
    Bytes(u64),
    Text(String),
}

/// A reshard request, in AIStore's dsort shape (with our extensions).
#[derive(Debug, Deserialize)]
struct SortRequest {
    input_bck: BucketSpec,
    #[serde(default)]
    input_format: Option<InputFormat>,
    #[serde(default)]
    input_extension: String,
    #[serde(default)]
    output_bck: Option<BucketSpec>,
    output_format: String,
    #[serde(default)]
    output_extension: String,
    #[serde(default)]
    output_shard_size: Option<SizeSpec>,
    #[serde(default)]
    algorithm: ReshardAlgorithm,
    #[serde(default)]
    ekm: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    ekm_missing_key: String,
    #[serde(default)]
    max_mem_records: u64,
    #[serde(default)]
    duplicated_records: String,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/sort`: starts a reshard; answers its job id.
pub(crate) async fn start_reshard(State(p): State<Arc<Proxy>>, req: Request) -> ApiResult {
    // Only the primary gets here (see `forward`).
    let body = axum::body::to_bytes(req.into_body(), 64 << 20)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?;
    let r: SortRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid reshard request: {e}")))?;
    let input = r.input_bck.bck()?;
    let output = match &r.output_bck {
        Some(b) if !b.name.is_empty() => b.bck()?,
        _ => input.clone(),
    };
    let mut sel = match r.input_format {
        None => Selection::default(),
        Some(InputFormat::Template(t)) => Selection {
            template: t,
            ..Default::default()
        },
        Some(InputFormat::Selection(s)) => s,
    };
    let ext = r.input_extension.trim().to_owned();
    if !ext.is_empty() {
        if !sel.template.is_empty() && !sel.template.ends_with(&ext) {
            sel.template.push_str(&ext);
        }
        for n in &mut sel.objnames {
            if !n.ends_with(&ext) {
                n.push_str(&ext);
            }
        }
    }
    sel.resolve()?;
    let output_shard_size = match r.output_shard_size {
        None => 0,
        Some(SizeSpec::Bytes(n)) => n,
        Some(SizeSpec::Text(s)) => gristmill_core::time::parse_size(&s)?,
    };
    let id = new_job_id();
    let smap = p.smap();
    let mut targets: Vec<String> = smap.active_targets().map(|n| n.daemon_id.clone()).collect();
    targets.sort();
    let coordinator = smap
        .owner(&format!("dsort/{id}"))
        .map(|n| n.daemon_id.clone())
        .ok_or_else(|| ApiError::unavailable("no targets in the cluster yet"))?;
    let spec = ReshardSpec {
        input: sel.clone(),
        output_format: r.output_format,
        output_extension: r.output_extension,
        output_shard_size,
        algorithm: r.algorithm,
        ekm: r.ekm,
        ekm_missing_key: r.ekm_missing_key,
        max_mem_records: r.max_mem_records,
        duplicated_records: r.duplicated_records,
        dry_run: r.dry_run,
        coordinator,
        targets,
    };
    gristmill_shard_format(spec.output_ext())?;
    if spec.ekm.is_empty() {
        spec.output_series()?;
        if spec.output_shard_size == 0 {
            return Err(ApiError::bad_request(
                "reshard: give output_shard_size (e.g. \"64MiB\") or an external key map",
            ));
        }
    }
    crate::remote::ensure(&p, &input).await?;
    ensure_destination(&p, &output).await?;
    let job = JobSpec {
        id,
        kind: JobKind::Reshard,
        bck: Some(input),
        to_bck: Some(output),
        selection: sel,
        opts: JobOptions {
            reshard: Some(Box::new(spec)),
            ..Default::default()
        },
    };
    Ok(job_id_response(jobs::start(&p, job).await?))
}

/// Output extensions the shard writers know (checked here so a typo fails the request, not
/// every target).
fn gristmill_shard_format(ext: &str) -> Result<(), ApiError> {
    match ext.trim_start_matches('.').to_ascii_lowercase().as_str() {
        "tar" | "tgz" | "tar.gz" | "tar.lz4" | "zip" => Ok(()),
        other => Err(ApiError::bad_request(format!(
            "unsupported output extension {other:?} (want .tar, .tgz, .tar.gz, .tar.lz4 or .zip)"
        ))),
    }
}

/// `GET /v1/sort?uuid=`: the reshard job's status.
pub(crate) async fn reshard_status(
    State(p): State<Arc<Proxy>>,
    Query(params): Params,
) -> ApiResult {
    let id = params
        .get("uuid")
        .or_else(|| params.get("id"))
        .cloned()
        .unwrap_or_default();
    if id.is_empty() {
        let list = jobs::list(&p, Some(JobKind::Reshard), false).await;
        return Ok(axum::Json(list).into_response());
    }
    Ok(axum::Json(jobs::status(&p, &id).await?).into_response())
}

/// `DELETE /v1/sort/abort?uuid=`: stops a reshard.
pub(crate) async fn reshard_abort(State(p): State<Arc<Proxy>>, Query(params): Params) -> ApiResult {
    let id = params
        .get("uuid")
        .or_else(|| params.get("id"))
        .cloned()
        .unwrap_or_default();
    jobs::abort(&p, &id).await?;
    Ok(StatusCode::OK.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsort_requests_parse_in_aistores_shape() {
        let r: SortRequest = serde_json::from_str(
            r#"{"input_bck":{"name":"in","provider":"ais"},"input_format":{"template":"shard-{0..9}"},
                "input_extension":".tar","output_format":"out-{000..}","output_shard_size":"64MiB",
                "algorithm":{"kind":"shuffle","seed":"42"}}"#,
        )
        .unwrap();
        assert_eq!(r.input_bck.bck().unwrap().name, "in");
        assert!(matches!(r.output_shard_size, Some(SizeSpec::Text(ref s)) if s == "64MiB"));
        let r: SortRequest = serde_json::from_str(
            r#"{"input_bck":{"name":"in"},"input_format":"s-{0..3}.tar","output_format":"o-{0..}","output_shard_size":1024}"#,
        )
        .unwrap();
        assert!(matches!(r.input_format, Some(InputFormat::Template(_))));
        assert_eq!(
            size_field(&serde_json::json!({"shard_size": "1KiB"}), &["shard_size"]).unwrap(),
            1024
        );
    }
}
