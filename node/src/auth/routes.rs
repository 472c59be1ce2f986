//! The route table: every route of proxies and targets with its access class, by path and\n//! method (first match wins). Internal operations are internal by path, never by a flag.

//! Access control: the one gate every request to a proxy or a target passes when auth is on.
//!
//! ```text
//!  client ── Bearer JWT ──▶ proxy gate ── route table → Need ── user's roles ──▶ handler
//!                              │ object requests: 307 + signed redirect (method, bucket,
//!                              │ object, user, expiry) — the target's gate checks it again
//!  node ── grist-node-auth (HMAC of method + path + expiry) ──▶ internal endpoints
//!  S3 client ── SigV4 (key → same users, secret derived from the cluster secret) ──▶ s3s
//! ```
//!
//! Everything derives from one **cluster secret** that every node reads from a file and no
//! client ever has: the JWT signing key, the intra-cluster request key, the redirect key, the
//! S3 secret derivation key and the password pepper are HMACs of it with distinct labels.
//!
//! The route tables ([`PROXY_ROUTES`], [`TARGET_ROUTES`]) classify every endpoint; a request
//! that matches no entry is treated as internal (only nodes may call it), so a new route that
//! nobody classified fails closed, and the route-table test fails until it is classified.
use axum::http::Method;

/// What an endpoint requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health checks, login).
    Public,
    /// Only other nodes of the cluster (node signature); client credentials are refused.
    Internal,
    /// Any valid user.
    Authenticated,
    /// `cluster-read` (or admin).
    ClusterRead,
    /// `GET /v1/cluster|daemon?what=`: the cluster map, node identity and job status
    /// (`smap`, `snode`, `status`, `qryxstats`) to any user (clients route by the map and
    /// wait for the jobs they start); anything else (`bmd`, ...) is cluster-read.
    ClusterQuery,
    /// `admin`.
    Admin,
    /// `/v1/objects/{bucket}/{object}`: read for GET/HEAD, write otherwise; a signed
    /// redirect stands in for the token.
    Object,
    /// A bucket's listing or properties: read access to it.
    BucketRead,
    /// A bucket action (`{"action": ...}` body): what the action needs.
    BucketAction,
    /// Get-batch (`{"in": [...]}` body): read access to every bucket it names.
    Batch,
    /// The S3 API: SigV4 with the same users, checked by the S3 front.
    S3,
}

/// One endpoint: methods (`*` = any; `GET` also covers `HEAD`, as routing does), path
/// pattern (`{name}` = one segment, `{*rest}` = the rest) and its access class.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub methods: &'static [&'static str],
    pub path: &'static str,
    pub access: Access,
}

pub(crate) const fn r(
    methods: &'static [&'static str],
    path: &'static str,
    access: Access,
) -> Route {
    Route {
        methods,
        path,
        access,
    }
}

pub(crate) const ANY: &[&str] = &["*"];

pub(crate) const GET: &[&str] = &["GET"];

pub(crate) const HEAD: &[&str] = &["HEAD"];

pub(crate) const PUT: &[&str] = &["PUT"];

pub(crate) const POST: &[&str] = &["POST"];

pub(crate) const DELETE: &[&str] = &["DELETE"];

pub(crate) const CHANGE: &[&str] = &["POST", "DELETE", "PATCH"];

/// Every endpoint of a proxy (`proxy/src/**/*.rs` routes), first match wins. Paths outside
/// `/v1/` are S3 (the proxy's S3 front).
pub const PROXY_ROUTES: &[Route] = &[
    r(ANY, "/v1/objects/{bucket}/{*object}", Access::Object),
    r(ANY, "/v1/objects/{bucket}", Access::Authenticated),
    r(ANY, "/v1/objects/{bucket}/", Access::Authenticated),
    r(GET, "/v1/buckets", Access::Authenticated),
    r(GET, "/v1/buckets/", Access::Authenticated),
    r(GET, "/v1/buckets/{bucket}", Access::BucketRead),
    r(HEAD, "/v1/buckets/{bucket}", Access::BucketRead),
    r(CHANGE, "/v1/buckets/{bucket}", Access::BucketAction),
    r(PUT, "/v1/buckets/{bucket}", Access::BucketAction),
    r(GET, "/v1/cluster", Access::ClusterQuery),
    r(PUT, "/v1/cluster", Access::Admin),
    r(GET, "/v1/etl", Access::ClusterRead),
    r(PUT, "/v1/etl", Access::Admin),
    r(GET, "/v1/etl/{name}", Access::ClusterRead),
    r(DELETE, "/v1/etl/{name}", Access::Admin),
    r(GET, "/v1/etl/{name}/logs", Access::ClusterRead),
    r(POST, "/v1/etl/{name}/{op}", Access::Admin),
    // Job status: any user (the one who started a job waits for it).
    r(GET, "/v1/jobs", Access::Authenticated),
    r(GET, "/v1/jobs/{id}", Access::Authenticated),
    r(DELETE, "/v1/jobs/{id}", Access::Admin),
    r(GET, "/v1/ml/moss", Access::Batch),
    r(GET, "/v1/ml/moss/{bucket}", Access::Batch),
    r(POST, "/v1/sort", Access::Admin),
    r(GET, "/v1/sort", Access::Authenticated),
    r(DELETE, "/v1/sort/abort", Access::Admin),
    r(GET, "/v1/daemon", Access::ClusterQuery),
    r(PUT, "/v1/daemon/set-config", Access::Admin),
    r(PUT, "/v1/cluster/set-config", Access::Admin),
    r(POST, "/v1/cluster/join", Access::Internal),
    r(POST, "/v1/cluster/keepalive", Access::Internal),
    r(PUT, "/v1/metasync", Access::Internal),
    // The proxies' Raft group (`proxy/src/raft/api.rs`).
    r(POST, "/v1/raft/append", Access::Internal),
    r(POST, "/v1/raft/vote", Access::Internal),
    r(POST, "/v1/raft/snapshot", Access::Internal),
    r(GET, "/v1/raft/read-index", Access::Internal),
    r(GET, "/v1/raft/metrics", Access::ClusterQuery),
    r(GET, "/v1/health", Access::Public),
    r(POST, "/v1/auth/login", Access::Public),
    r(POST, "/v1/auth/token", Access::Authenticated),
    r(GET, "/v1/auth/whoami", Access::Authenticated),
    r(GET, "/v1/auth/users", Access::Admin),
    r(PUT, "/v1/auth/users/{name}", Access::Admin),
    r(DELETE, "/v1/auth/users/{name}", Access::Admin),
    r(GET, "/metrics", Access::ClusterRead),
    r(ANY, "/metrics", Access::S3),
    // The dashboard's static files (no data; the page logs in for every API call it makes).
    r(GET, "/ui", Access::Public),
    r(GET, "/ui/", Access::Public),
    r(GET, "/ui/{file}", Access::Public),
];

/// Every endpoint of a target (`target/src/**/*.rs` routes). Paths outside `/v1/` are S3,
/// relayed to the proxy's S3 front, which checks the signature.
pub const TARGET_ROUTES: &[Route] = &[
    r(ANY, "/v1/objects/{bucket}/{*object}", Access::Object),
    r(ANY, "/v1/objects/{bucket}", Access::Authenticated),
    r(ANY, "/v1/objects/{bucket}/", Access::Authenticated),
    r(
        ANY,
        "/v1/internal/objects/{bucket}/{*object}",
        Access::Internal,
    ),
    r(PUT, "/v1/internal/placed", Access::Internal),
    r(ANY, "/v1/internal/mpu/{bucket}/{*object}", Access::Internal),
    r(GET, "/v1/buckets/{bucket}", Access::Internal),
    r(&["GET", "POST"], "/v1/remote/{bucket}", Access::Internal),
    r(POST, "/v1/cached/{bucket}", Access::Internal),
    r(ANY, "/v1/mpu/{bucket}/{*object}", Access::Internal),
    r(GET, "/v1/mpu/{bucket}", Access::Internal),
    r(&["GET", "POST"], "/v1/jobs", Access::Internal),
    r(DELETE, "/v1/jobs/{id}", Access::Internal),
    r(GET, "/v1/etl", Access::Internal),
    r(GET, "/v1/etl/{name}/logs", Access::Internal),
    r(PUT, "/v1/metasync", Access::Internal),
    r(GET, "/v1/ml/moss", Access::Batch),
    r(GET, "/v1/ml/moss/{bucket}", Access::Batch),
    r(POST, "/v1/shards/part", Access::Internal),
    r(POST, "/v1/shards/reshard/{job}/records", Access::Internal),
    r(POST, "/v1/shards/reshard/{job}/plan", Access::Internal),
    r(GET, "/v1/daemon", Access::ClusterQuery),
    r(PUT, "/v1/daemon/mountpaths", Access::Admin),
    r(PUT, "/v1/daemon/set-config", Access::Admin),
    r(GET, "/v1/health", Access::Public),
    r(GET, "/metrics", Access::ClusterRead),
];

/// Whether `path` matches a route pattern.
pub fn path_matches(pattern: &str, path: &str) -> bool {
    let mut pat = pattern.split('/');
    let mut segs = path.split('/');
    loop {
        match (pat.next(), segs.next()) {
            (None, None) => return true,
            (Some(p), Some(s)) if p.starts_with("{*") => {
                // The rest: at least one non-empty byte.
                let rest: Vec<&str> = std::iter::once(s).chain(segs).collect();
                return !rest.join("/").is_empty();
            }
            (Some(p), Some(s)) if p.starts_with('{') => {
                if s.is_empty() {
                    return false;
                }
            }
            (Some(p), Some(s)) => {
                if p != s {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

pub(crate) fn method_matches(methods: &[&str], method: &Method) -> bool {
    methods
        .iter()
        .any(|m| *m == "*" || *m == method.as_str() || (*m == "GET" && *method == Method::HEAD))
}

/// The access class of a request: the first matching route; outside `/v1/` S3; else
/// internal (fail closed).
pub fn classify(routes: &[Route], method: &Method, path: &str) -> Access {
    if let Some(route) = routes
        .iter()
        .find(|r| method_matches(r.methods, method) && path_matches(r.path, path))
    {
        return route.access;
    }
    if path == "/v1" || path.starts_with("/v1/") {
        Access::Internal
    } else {
        Access::S3
    }
}
