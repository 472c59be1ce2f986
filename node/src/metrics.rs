//! Prometheus metrics shared by proxies and targets: the recorder, HELP text for every series
//! any node exports (so `promtool check metrics` passes), series that start at zero, the
//! per-request series (operation, bytes actually moved, time until the body is sent), process
//! metrics and other gauges computed when `/metrics` is scraped.
//!
//! Naming follows the Prometheus conventions: base units in the name (`_bytes`, `_seconds`),
//! `_total` on counters, one meaning per family.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use metrics::Unit;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

pub const REQUESTS: &str = "grist_requests_total";
pub const ERRORS: &str = "grist_errors_total";
pub const REQUEST_BODY_BYTES: &str = "grist_request_body_bytes_total";
pub const RESPONSE_BODY_BYTES: &str = "grist_response_body_bytes_total";
pub const REQUEST_DURATION: &str = "grist_request_duration_seconds";
pub const NODE_INFO: &str = "grist_node_info";

/// Every series a node may export: (name, kind, unit, help). Described at start so each family
/// has HELP and TYPE lines; a name a role never records renders nothing.
const SERIES: &[(&str, Kind, Unit, &str)] = &[
    (
        REQUESTS,
        Kind::Counter,
        Unit::Count,
        "Requests answered, by operation (native API area or S3 operation name).",
    ),
    (
        ERRORS,
        Kind::Counter,
        Unit::Count,
        "Requests answered with a 4xx or 5xx status, by operation and class.",
    ),
    (
        REQUEST_BODY_BYTES,
        Kind::Counter,
        Unit::Bytes,
        "Request body bytes received, by operation (as read, chunked bodies included).",
    ),
    (
        RESPONSE_BODY_BYTES,
        Kind::Counter,
        Unit::Bytes,
        "Response body bytes sent, by operation (as sent, chunked and zero-copy bodies included).",
    ),
    (
        REQUEST_DURATION,
        Kind::Histogram,
        Unit::Seconds,
        "Time from a request's arrival until its response body was sent (or dropped), by operation.",
    ),
    (
        NODE_INFO,
        Kind::Gauge,
        Unit::Count,
        "Always 1: the node's role, id and version as labels.",
    ),
    (
        "grist_limit_refusals_total",
        Kind::Counter,
        Unit::Count,
        "Requests or connections refused by a configured limit, by limit.",
    ),
    (
        "grist_s3_target_requests_total",
        Kind::Counter,
        Unit::Count,
        "S3 requests on a target's S3 port, by answer: served (a read answered by this target or its owner) or relayed (to a proxy's S3 front).",
    ),
    (
        "grist_list_target_requests_total",
        Kind::Counter,
        Unit::Count,
        "Requests a proxy made to targets for their names while listing buckets.",
    ),
    (
        "grist_list_target_entries_total",
        Kind::Counter,
        Unit::Count,
        "Names targets sent a proxy while listing buckets (a small multiple of the names listed, whatever the number of targets).",
    ),
    (
        "grist_mountpath_capacity_bytes",
        Kind::Gauge,
        Unit::Bytes,
        "Size of the file system of each mountpath.",
    ),
    (
        "grist_mountpath_available_bytes",
        Kind::Gauge,
        Unit::Bytes,
        "Bytes available to the target on each mountpath's file system.",
    ),
    (
        "grist_mountpath_io_time_seconds_total",
        Kind::Counter,
        Unit::Seconds,
        "Time the mountpath's block device was busy (rate() is its utilization).",
    ),
    (
        "grist_cache_bytes",
        Kind::Gauge,
        Unit::Bytes,
        "Bytes of cached remote objects on this target (what LRU eviction may remove).",
    ),
    (
        "grist_lru_evicted_objects_total",
        Kind::Counter,
        Unit::Count,
        "Cached objects evicted by LRU.",
    ),
    (
        "grist_lru_evicted_bytes_total",
        Kind::Counter,
        Unit::Bytes,
        "Bytes of cached objects evicted by LRU.",
    ),
    (
        "grist_lru_scans_total",
        Kind::Counter,
        Unit::Count,
        "Eviction passes that read the index for candidates.",
    ),
    (
        "grist_cold_chunks_total",
        Kind::Counter,
        Unit::Count,
        "Chunks of huge remote objects held in partial files, by result: held (a range GET found it cached), fetched, or evicted (the least recently read, to stay under the bound).",
    ),
    (
        "grist_transfers_received_total",
        Kind::Counter,
        Unit::Count,
        "Objects received from other targets, by kind: rebalance or replica.",
    ),
    (
        "grist_lru_examined_total",
        Kind::Counter,
        Unit::Count,
        "Entries of the index's access order that eviction passes read.",
    ),
    (
        "grist_lru_swept_total",
        Kind::Counter,
        Unit::Count,
        "Records of evicted objects removed from the index after their pass (a pass frees the space and hides the records; a background sweep removes them).",
    ),
    (
        "grist_lru_nothing_evictable",
        Kind::Gauge,
        Unit::Count,
        "1 while a limit is reached and nothing may be evicted (fills that need room get 507).",
    ),
    (
        "grist_cache_hits_total",
        Kind::Counter,
        Unit::Count,
        "GETs of remote-bucket objects served from the cache, by provider.",
    ),
    (
        "grist_cache_misses_total",
        Kind::Counter,
        Unit::Count,
        "GETs of remote-bucket objects that had to be fetched from the backend, by provider and reason (absent, stale).",
    ),
    (
        "grist_cold_fill_bytes_total",
        Kind::Counter,
        Unit::Bytes,
        "Bytes downloaded from backends into the cache by cold GETs, by provider.",
    ),
    (
        "grist_cold_fills_total",
        Kind::Counter,
        Unit::Count,
        "Cold-GET downloads into the cache, by provider and result (ok, error).",
    ),
    (
        "grist_cold_get_validated_total",
        Kind::Counter,
        Unit::Count,
        "Cold GETs whose download was checked against the backend's checksum, by algorithm.",
    ),
    (
        "grist_cold_get_checksum_mismatch_total",
        Kind::Counter,
        Unit::Count,
        "Cold GETs whose download did not match the backend's checksum (nothing cached), by algorithm.",
    ),
    (
        "grist_backend_requests_total",
        Kind::Counter,
        Unit::Count,
        "Calls to remote backends, by provider and operation.",
    ),
    (
        "grist_backend_errors_total",
        Kind::Counter,
        Unit::Count,
        "Failed calls to remote backends, by provider, operation and kind.",
    ),
    (
        "grist_backend_request_duration_seconds",
        Kind::Histogram,
        Unit::Seconds,
        "Time until a backend call answered (a GET: its response head), by provider and operation.",
    ),
    (
        "grist_backend_received_bytes_total",
        Kind::Counter,
        Unit::Bytes,
        "Object bytes received from remote backends, by provider.",
    ),
    (
        "grist_get_zero_copy_total",
        Kind::Counter,
        Unit::Count,
        "GET bodies sent with sendfile from the page cache.",
    ),
    (
        "grist_get_zero_copy_bytes_total",
        Kind::Counter,
        Unit::Bytes,
        "Bytes of GET bodies sent with sendfile.",
    ),
    (
        "grist_corrupt_objects_total",
        Kind::Counter,
        Unit::Count,
        "Objects found corrupt, by who found them (get, scrub).",
    ),
    (
        "grist_repaired_objects_total",
        Kind::Counter,
        Unit::Count,
        "Corrupt objects repaired from another copy or the backend.",
    ),
    (
        "grist_unrepairable_objects_total",
        Kind::Counter,
        Unit::Count,
        "Corrupt objects with no good copy to repair them from.",
    ),
    (
        "grist_batch_requests_total",
        Kind::Counter,
        Unit::Count,
        "get-batch requests served by this target.",
    ),
    (
        "grist_batch_items_total",
        Kind::Counter,
        Unit::Count,
        "Items (objects and archived files) in get-batch answers.",
    ),
    (
        "grist_archive_read_bytes_total",
        Kind::Counter,
        Unit::Bytes,
        "Bytes archive operations read from shard files.",
    ),
    (
        "grist_archive_index_builds_total",
        Kind::Counter,
        Unit::Count,
        "Shard indexes built (each shard is indexed once).",
    ),
    (
        "grist_reshard_spilled_runs_total",
        Kind::Counter,
        Unit::Count,
        "Sorted runs a reshard spilled to disk.",
    ),
    (
        "grist_jobs_started_total",
        Kind::Counter,
        Unit::Count,
        "Jobs started on this node, by kind.",
    ),
    (
        "grist_jobs_ended_total",
        Kind::Counter,
        Unit::Count,
        "Jobs ended on this node, by kind and state (finished, aborted).",
    ),
    (
        "grist_jobs_running",
        Kind::Gauge,
        Unit::Count,
        "Jobs running on this node, by kind.",
    ),
    (
        "grist_job_objects_total",
        Kind::Counter,
        Unit::Count,
        "Objects jobs worked on, by kind and outcome (done, skipped, error).",
    ),
    (
        "grist_stale_copies_dropped_total",
        Kind::Counter,
        Unit::Count,
        "Copies a target that came back into the map held but found rewritten or deleted elsewhere, and dropped.",
    ),
    (
        "grist_hinted_copies_total",
        Kind::Counter,
        Unit::Count,
        "Copies of writes stored on a target in place of a restarting one (they move back when it returns).",
    ),
    (
        "grist_hinted_bytes_total",
        Kind::Counter,
        Unit::Bytes,
        "Bytes of writes stored on a target in place of a restarting one (they move back when it returns).",
    ),
    (
        "grist_job_bytes_total",
        Kind::Counter,
        Unit::Bytes,
        "Bytes jobs moved or wrote, by kind.",
    ),
    (
        "grist_job_progress_objects",
        Kind::Gauge,
        Unit::Count,
        "Objects done by running jobs, by kind (rebalance and resilver progress).",
    ),
    (
        "grist_job_expected_objects",
        Kind::Gauge,
        Unit::Count,
        "Objects running jobs expect to handle, by kind (0 while unknown).",
    ),
    (
        "grist_etl_calls_total",
        Kind::Counter,
        Unit::Count,
        "Objects transformed, by ETL.",
    ),
    (
        "grist_etl_errors_total",
        Kind::Counter,
        Unit::Count,
        "Transforms that failed, by ETL.",
    ),
    (
        "grist_etl_duration_seconds",
        Kind::Histogram,
        Unit::Seconds,
        "Time a transform took, by ETL.",
    ),
    (
        "process_cpu_seconds_total",
        Kind::Counter,
        Unit::Seconds,
        "User and system CPU time of the process.",
    ),
    (
        "process_resident_memory_bytes",
        Kind::Gauge,
        Unit::Bytes,
        "Resident memory of the process.",
    ),
    (
        "process_virtual_memory_bytes",
        Kind::Gauge,
        Unit::Bytes,
        "Virtual memory of the process.",
    ),
    (
        "process_open_fds",
        Kind::Gauge,
        Unit::Count,
        "Open file descriptors of the process.",
    ),
    (
        "process_max_fds",
        Kind::Gauge,
        Unit::Count,
        "The process's limit of open file descriptors.",
    ),
    (
        "process_threads",
        Kind::Gauge,
        Unit::Count,
        "Threads of the process.",
    ),
    (
        "process_start_time_seconds",
        Kind::Gauge,
        Unit::Seconds,
        "Start time of the process, seconds since the Unix epoch.",
    ),
];

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// The operations a native request is counted under (plus S3 operation names on proxies).
const NATIVE_OPS: &[&str] = &[
    "get",
    "put",
    "head",
    "delete",
    "object_other",
    "list",
    "bucket",
    "control",
    "health",
    "metrics",
    "batch",
    "internal",
    "mpu",
    "jobs",
    "etl",
    "shards",
    "sort",
    "remote",
    "cached",
    "auth",
    "raft",
    "other",
];

/// The process-wide Prometheus recorder (installed on first use), with every series described
/// and the fixed ones at zero; a thread drains histogram samples even if nobody scrapes.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new().set_buckets(&[
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0,
        ]);
        let handle = match builder.and_then(|b| b.install_recorder()) {
            Ok(h) => h,
            Err(e) => {
                // Another recorder is installed (e.g. tests running several nodes in one
                // process with a custom recorder); render an empty registry.
                tracing::warn!(error = %e, "prometheus recorder not installed");
                return PrometheusBuilder::new().build_recorder().handle();
            }
        };
        describe();
        let upkeep = handle.clone();
        let _ = std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(5));
                    upkeep.run_upkeep();
                }
            });
        handle
    })
}

fn describe() {
    for (name, kind, unit, help) in SERIES {
        match kind {
            Kind::Counter => metrics::describe_counter!(*name, *unit, *help),
            Kind::Gauge => metrics::describe_gauge!(*name, *unit, *help),
            Kind::Histogram => metrics::describe_histogram!(*name, *unit, *help),
        }
    }
    // Present from the start (dashboards see 0, not "no data").
    for op in NATIVE_OPS {
        metrics::counter!(REQUESTS, "op" => *op).absolute(0);
    }
    for limit in [
        "max_conns",
        "max_conns_per_client",
        "max_header_bytes",
        "max_url_bytes",
        "idle_timeout",
        "body_read_timeout",
        "plain_http_on_tls",
    ] {
        metrics::counter!("grist_limit_refusals_total", "limit" => limit).absolute(0);
    }
}

/// Sets who this node is (`grist_node_info{role,node,version} 1`).
pub fn node_info(role: &'static str, node: &str) {
    handle();
    metrics::gauge!(NODE_INFO, "role" => role, "node" => node.to_owned(), "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

type Collector = Box<dyn Fn() + Send + Sync>;

fn collectors() -> &'static Mutex<Vec<Collector>> {
    static C: OnceLock<Mutex<Vec<Collector>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(vec![Box::new(process_metrics)]))
}

/// Registers `f` to update gauges each time `/metrics` is scraped (values that must say
/// "now": running jobs, mountpaths, the process).
pub fn on_scrape(f: impl Fn() + Send + Sync + 'static) {
    collectors()
        .lock()
        .expect("collectors lock")
        .push(Box::new(f));
}

/// The text exposition, after running the scrape-time collectors.
pub fn render() -> String {
    for c in collectors().lock().expect("collectors lock").iter() {
        c();
    }
    handle().render()
}

/// The standard `process_*` series, from `/proc/self`.
fn process_metrics() {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // Fields after the command (which may hold spaces) start after the last ')'.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // `rest` starts at field 3 (state): utime is field 14, stime 15, num_threads 20,
    // starttime 22, vsize 23, rss 24 (pages).
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let page = rustix::param::page_size() as f64;
    metrics::gauge!("process_threads").set(num(17));
    metrics::gauge!("process_virtual_memory_bytes").set(num(20));
    metrics::gauge!("process_resident_memory_bytes").set(num(21) * page);
    // Counters are whole numbers here: CPU time in whole seconds (rate() over minutes).
    let cpu = (num(11) + num(12)) / ticks;
    metrics::counter!("process_cpu_seconds_total").absolute(cpu as u64);
    if let Some(boot) = boot_time() {
        metrics::gauge!("process_start_time_seconds").set(boot + num(19) / ticks);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!("process_open_fds").set(fds.count() as f64);
    }
    if let Some(max) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
        metrics::gauge!("process_max_fds").set(max as f64);
    }
}

/// Boot time (seconds since the epoch), from `/proc/stat`'s `btime`.
fn boot_time() -> Option<f64> {
    static BOOT: OnceLock<Option<f64>> = OnceLock::new();
    *BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()
    })
}

/// The operation a request is counted under. Set by the S3 front once it knows the S3
/// operation (`GetObject`, ...); else the native label from the path.
#[derive(Clone, Default)]
pub struct OpLabel(Arc<OnceLock<&'static str>>);

impl OpLabel {
    /// Names the request's operation (the first name given stays). Names are interned: there
    /// are as many as the S3 API has operations.
    pub fn set(&self, op: &str) {
        if self.0.get().is_none() {
            let _ = self.0.set(intern(op));
        }
    }
}

/// A `'static` copy of an operation name (each distinct name is leaked once).
fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<std::collections::HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .expect("op names lock");
    if let Some(n) = names.get(name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(n);
    n
}

/// Operation label of a native request: `get`, `put`, `head`, `delete` on objects, else the
/// API area (`/v1/<area>/...`); S3 requests (not under `/v1/`) are `s3` until the S3 front
/// names their operation.
fn native_op(method: &axum::http::Method, path: &str) -> &'static str {
    use axum::http::Method;
    if path == "/metrics" {
        return "metrics";
    }
    let Some(rest) = path.strip_prefix("/v1/") else {
        return "s3";
    };
    let area = rest.split('/').next().unwrap_or("");
    match (area, method) {
        ("objects", &Method::GET) => "get",
        ("objects", &Method::PUT) => "put",
        ("objects", &Method::HEAD) => "head",
        ("objects", &Method::DELETE) => "delete",
        ("objects", _) => "object_other",
        ("buckets", &Method::GET) => "list",
        ("buckets", _) => "bucket",
        ("cluster" | "daemon" | "metasync", _) => "control",
        ("ml", _) => "batch",
        (area, _) => NATIVE_OPS
            .iter()
            .find(|op| **op == area)
            .copied()
            .unwrap_or("other"),
    }
}

/// How a request's operation is found when a series is recorded (the S3 front may name it
/// after the request arrived).
#[derive(Clone)]
struct Op {
    label: OpLabel,
    native: &'static str,
}

impl Op {
    fn get(&self) -> &'static str {
        self.label.0.get().copied().unwrap_or(self.native)
    }
}

/// The header that carries a request's id from node to node and back to the client.
pub const REQUEST_ID: &str = "x-request-id";

tokio::task_local! {
    /// The id of the request the current task serves.
    static CURRENT_REQUEST_ID: Arc<str>;
}

/// The id of the request this task serves, if any: requests it sends to other nodes carry it,
/// and every line it logs names it (`gristd`'s log format).
pub fn current_request_id() -> Option<Arc<str>> {
    CURRENT_REQUEST_ID.try_with(Arc::clone).ok()
}

/// Runs `work` as the serving of request `id` ([`current_request_id`] inside it).
pub async fn serving<F: std::future::Future>(id: Arc<str>, work: F) -> F::Output {
    CURRENT_REQUEST_ID.scope(id, work).await
}

static ACCESS_LOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Logs one line per request (`target: "access"`, at info) with its id, method, path, status
/// and time (`--access-log`); off by default.
pub fn set_access_log(on: bool) {
    ACCESS_LOG.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the access log is on.
pub fn access_log() -> bool {
    ACCESS_LOG.load(std::sync::atomic::Ordering::Relaxed)
}

/// A client's request id if it is a sane one (visible ASCII, at most 128 bytes), else a new one.
fn request_id(headers: &axum::http::HeaderMap) -> Arc<str> {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(Arc::from)
        .unwrap_or_else(new_request_id)
}

/// A new request id: 32 hex digits, this process's random 64-bit prefix and a counter — as
/// unique as a random UUID across nodes and restarts, without a random draw per request.
fn new_request_id() -> Arc<str> {
    static PREFIX: std::sync::LazyLock<u64> =
        std::sync::LazyLock::new(|| uuid::Uuid::new_v4().as_u64_pair().0);
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut hex = [0u8; 32];
    for (i, word) in [*PREFIX, n].into_iter().enumerate() {
        for j in 0..16 {
            hex[i * 16 + j] = b"0123456789abcdef"[((word >> (60 - 4 * j)) & 0xf) as usize];
        }
    }
    Arc::from(std::str::from_utf8(&hex).expect("hex digits"))
}

/// The series of one operation, resolved once: a labelled `metrics::counter!` looks its
/// series up (and builds its key) on every call, per request and per body frame.
struct OpSeries {
    requests: metrics::Counter,
    errors_4xx: metrics::Counter,
    errors_5xx: metrics::Counter,
    request_bytes: metrics::Counter,
    response_bytes: metrics::Counter,
    duration: metrics::Histogram,
}

/// The series of operation `op` (an interned or literal name).
fn op_series(op: &'static str) -> Arc<OpSeries> {
    static BY_OP: std::sync::LazyLock<
        std::sync::RwLock<std::collections::HashMap<&'static str, Arc<OpSeries>>>,
    > = std::sync::LazyLock::new(Default::default);
    if let Some(s) = BY_OP.read().expect("op series lock").get(op) {
        return s.clone();
    }
    BY_OP
        .write()
        .expect("op series lock")
        .entry(op)
        .or_insert_with(|| {
            Arc::new(OpSeries {
                requests: metrics::counter!(REQUESTS, "op" => op),
                errors_4xx: metrics::counter!(ERRORS, "op" => op, "class" => "4xx"),
                errors_5xx: metrics::counter!(ERRORS, "op" => op, "class" => "5xx"),
                request_bytes: metrics::counter!(REQUEST_BODY_BYTES, "op" => op),
                response_bytes: metrics::counter!(RESPONSE_BODY_BYTES, "op" => op),
                duration: metrics::histogram!(REQUEST_DURATION, "op" => op),
            })
        })
        .clone()
}

/// Middleware: gives each request its id (the client's `X-Request-Id`, or a new one) — in the
/// log span of everything it does, on requests it sends to other nodes, on its answer and in
/// a JSON error body — and records requests, errors, body bytes as they move, and the time
/// until the response body was sent, by operation.
pub async fn track_requests(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let op = Op {
        label: OpLabel::default(),
        native: native_op(req.method(), req.uri().path()),
    };
    let id = request_id(req.headers());
    let id_header = axum::http::HeaderValue::from_str(&id).ok();
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(op.label.clone());
    if let Some(v) = &id_header {
        parts.headers.insert(REQUEST_ID, v.clone());
    }
    // What the access log names, taken only when it is on.
    let logged = access_log().then(|| (parts.method.clone(), parts.uri.path().to_owned()));
    let body = axum::body::Body::new(Counted {
        inner: body,
        op: op.clone(),
        series: None,
        response: false,
        started: None,
    });
    let resp = serving(id.clone(), next.run(Request::from_parts(parts, body))).await;
    let resp = with_request_id(resp, &id, id_header).await;
    let status = resp.status();
    let name = op.get();
    if let Some((method, path)) = logged {
        tracing::info!(target: "access", id = %id, %method, %path, status = status.as_u16(), op = name, ms = started.elapsed().as_secs_f64() * 1e3, "request");
    }
    let series = op_series(name);
    series.requests.increment(1);
    if status.is_server_error() {
        series.errors_5xx.increment(1);
    } else if status.is_client_error() {
        series.errors_4xx.increment(1);
    }
    let (parts, body) = resp.into_parts();
    Response::from_parts(
        parts,
        axum::body::Body::new(Counted {
            inner: body,
            op,
            series: Some((name, series)),
            response: true,
            started: Some(started),
        }),
    )
}

/// A body that counts its data bytes as they pass (frames go through untouched: zero-copy
/// placeholders keep their addresses), and — a response body — records the request's
/// duration when it ends or is dropped.
struct Counted {
    inner: axum::body::Body,
    op: Op,
    /// The operation's series, with the name they were resolved for (a request body's
    /// operation may be named by the S3 front after its first frames).
    series: Option<(&'static str, Arc<OpSeries>)>,
    /// A response body (else a request body).
    response: bool,
    started: Option<Instant>,
}

impl Counted {
    fn series(&mut self) -> &OpSeries {
        let name = self.op.get();
        if !self
            .series
            .as_ref()
            .is_some_and(|(n, _)| std::ptr::eq(*n, name))
        {
            self.series = Some((name, op_series(name)));
        }
        &self.series.as_ref().expect("resolved above").1
    }
}

/// The answer with its request's id: a header always, a field of a JSON error body, and the
/// `<RequestId>` of an S3 error document (where S3 clients look for it).
async fn with_request_id(
    resp: Response,
    id: &str,
    id_header: Option<axum::http::HeaderValue>,
) -> Response {
    let (mut parts, body) = resp.into_parts();
    if let Some(v) = id_header {
        parts.headers.insert(REQUEST_ID, v);
    }
    let content_type = parts
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes());
    let error = parts.status.is_client_error() || parts.status.is_server_error();
    let json = content_type.is_some_and(|v| v.starts_with(b"application/json"));
    let xml = content_type.is_some_and(|v| v.starts_with(b"application/xml"));
    if !error || !(json || xml) {
        return Response::from_parts(parts, body);
    }
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 10).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    let named = if json {
        json_error_with_id(&bytes, id)
    } else {
        xml_error_with_id(&bytes, id)
    };
    let bytes = match named {
        Some(named) => {
            parts.headers.remove(axum::http::header::CONTENT_LENGTH);
            named
        }
        None => bytes,
    };
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// A JSON error object with a `request_id` field added.
fn json_error_with_id(body: &[u8], id: &str) -> Option<bytes::Bytes> {
    let serde_json::Value::Object(mut m) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    m.insert("request_id".into(), id.into());
    serde_json::to_vec(&m).ok().map(bytes::Bytes::from)
}

/// An S3 error document with a `<RequestId>` added (unless it has one).
fn xml_error_with_id(body: &[u8], id: &str) -> Option<bytes::Bytes> {
    let text = std::str::from_utf8(body).ok()?;
    if text.contains("<RequestId>") {
        return None;
    }
    let at = text.rfind("</Error>")?;
    let escaped = id
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    Some(
        format!(
            "{}<RequestId>{escaped}</RequestId>{}",
            &text[..at],
            &text[at..]
        )
        .into(),
    )
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
            && !data.is_empty()
        {
            let len = data.len() as u64;
            let response = self.response;
            let series = self.series();
            if response {
                series.response_bytes.increment(len);
            } else {
                series.request_bytes.increment(len);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(started) = self.started {
            self.series()
                .duration
                .record(started.elapsed().as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_named_by_the_conventions() {
        for (name, kind, unit, help) in SERIES {
            assert!(!help.is_empty(), "{name}");
            match kind {
                Kind::Counter => assert!(name.ends_with("_total"), "{name}"),
                _ => assert!(!name.ends_with("_total"), "{name}"),
            }
            match unit {
                Unit::Bytes => assert!(name.contains("_bytes"), "{name}"),
                Unit::Seconds => assert!(name.contains("_seconds"), "{name}"),
                _ => {}
            }
        }
    }

    /// Every series the code emits by a literal name has its help text here (promtool, and
    /// Prometheus users, want one; a new counter once shipped without).
    #[test]
    fn every_emitted_series_is_described() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut missing = Vec::new();
        let mut stack: Vec<std::path::PathBuf> = [
            "core", "node", "proxy", "target", "shard", "etl", "gristd", "cli", "client",
        ]
        .iter()
        .map(|c| root.join(c).join("src"))
        .collect();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for macro_ in ["counter!(\"", "gauge!(\"", "histogram!(\""] {
                    for (at, _) in text.match_indices(macro_) {
                        let rest = &text[at + macro_.len()..];
                        let name = &rest[..rest.find('"').unwrap()];
                        if name.starts_with("grist_") && !SERIES.iter().any(|s| s.0 == name) {
                            missing.push(format!("{name} ({})", path.display()));
                        }
                    }
                }
            }
        }
        assert!(missing.is_empty(), "series without help text: {missing:?}");
    }

    #[test]
    fn native_operations() {
        use axum::http::Method;
        assert_eq!(native_op(&Method::GET, "/v1/objects/b/o"), "get");
        assert_eq!(native_op(&Method::POST, "/v1/ml/moss/b"), "batch");
        assert_eq!(
            native_op(&Method::PUT, "/v1/internal/objects/b/o"),
            "internal"
        );
        assert_eq!(native_op(&Method::GET, "/v1/nonsense"), "other");
        assert_eq!(native_op(&Method::GET, "/bucket/key"), "s3");
        assert_eq!(native_op(&Method::GET, "/metrics"), "metrics");
    }
}
