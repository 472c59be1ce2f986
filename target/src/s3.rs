//! S3 reads served by targets: with `[s3] listen` a target answers S3 requests on a port of
//! its own, so a load balancer in front of every target spreads S3 traffic without the
//! proxy hop.
//!
//! ```text
//!  S3 client ── GET /bucket/key (SigV4) ──▶ any target's S3 port
//!      ├─ a plain GET/HEAD of a native object, signature checked here ─▶ the object API
//!      │      (locally, or once to the owner as a node) ─▶ answered with S3 headers
//!      └─ anything else (writes, listings, presigned URLs, SSE-C, policies, errors…)
//!             ─▶ relayed as is to a proxy's S3 front, which answers it
//! ```
//!
//! The fast path serves only what it can answer exactly as the proxies' S3 front does: a
//! request with no query, no `x-amz-*` header but the date and payload hash, signed by a key
//! this node can check (the cluster's users, `[s3] users`, or the default key with auth off)
//! whose user may read the bucket, for a native bucket, and a 2xx answer whose metadata it
//! knows how to render. Everything else goes to a proxy unchanged — the proxy checks it
//! again from scratch — so a fast-path gap costs a hop, never a different answer.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gristmill_core::Bck;
use gristmill_core::api::header as h;
use gristmill_core::users::{Need, S3User};
use gristmill_node::sigv4::{Authorization, Verifier};

use crate::Target;

/// What a target's S3 port needs to judge credentials.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// Where to listen (`[s3] listen`).
    pub listen: String,
    /// The static users of `[s3] users` (the proxies' must be the same).
    pub users: Vec<S3User>,
    /// `[s3] domain`: virtual-hosted requests are relayed to a proxy.
    pub domain: Option<String>,
}

/// The S3 port's state.
pub(crate) struct S3Reads {
    users: HashMap<String, S3User>,
    /// No users of any kind: unsigned requests and the default key may read everything
    /// (the proxies' rule).
    auth_off: bool,
    domain: Option<String>,
    verifier: Verifier,
    /// The cluster secret's keys (auth on): cluster users' S3 secrets derive from them.
    cluster_keys: Option<Arc<gristmill_node::auth::Keys>>,
}

impl S3Reads {
    pub(crate) fn new(
        config: &S3Config,
        cluster_keys: Option<Arc<gristmill_node::auth::Keys>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            users: config
                .users
                .iter()
                .map(|u| (u.access_key.clone(), u.clone()))
                .collect(),
            auth_off: config.users.is_empty() && cluster_keys.is_none(),
            domain: config
                .domain
                .as_deref()
                .map(|d| d.trim_matches('.').to_ascii_lowercase()),
            verifier: Verifier::default(),
            cluster_keys,
        })
    }
}

/// The S3 port's router: every request is an S3 request.
pub(crate) fn router(t: Arc<Target>, reads: Arc<S3Reads>) -> Router {
    Router::new()
        .fallback(move |req: Request| handle(t.clone(), reads.clone(), req))
        .layer(axum::middleware::from_fn(
            gristmill_node::server::track_requests,
        ))
}

/// How a request left the S3 port: `served` here (or by the owner), `relayed` to a proxy.
fn counted(answer: &'static str) {
    static SERVED: OnceLock<metrics::Counter> = OnceLock::new();
    static RELAYED: OnceLock<metrics::Counter> = OnceLock::new();
    let slot = if answer == "served" {
        &SERVED
    } else {
        &RELAYED
    };
    slot.get_or_init(|| metrics::counter!("grist_s3_target_requests_total", "answer" => answer))
        .increment(1);
}

async fn handle(t: Arc<Target>, reads: Arc<S3Reads>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let label = parts
        .extensions
        .get::<gristmill_node::metrics::OpLabel>()
        .cloned();
    let mut resp = match serve_read(&t, &reads, &parts).await {
        Some(resp) => {
            counted("served");
            if let Some(l) = &label {
                l.set(if parts.method == Method::HEAD {
                    "HeadObject"
                } else {
                    "GetObject"
                });
            }
            resp
        }
        None => {
            counted("relayed");
            if let Some(l) = &label {
                l.set("s3-relayed");
            }
            return relay_to_proxy(t, parts, body).await;
        }
    };
    if let Some(id) = gristmill_node::metrics::current_request_id()
        && let Ok(v) = HeaderValue::from_str(&id)
    {
        resp.headers_mut().insert("x-amz-request-id", v);
    }
    resp
}

/// The answer to a plain object read, or `None` when a proxy must answer it.
async fn serve_read(
    t: &Arc<Target>,
    reads: &S3Reads,
    parts: &axum::http::request::Parts,
) -> Option<Response> {
    if !matches!(parts.method, Method::GET | Method::HEAD)
        || !plain_request(reads, parts)
        || !read_headers_well_formed(&parts.headers)
    {
        return None;
    }
    let path = parts.uri.path().strip_prefix('/')?;
    let (bucket, key) = path.split_once('/')?;
    if bucket.is_empty() || key.is_empty() {
        return None;
    }
    let bucket = percent_encoding::percent_decode_str(bucket)
        .decode_utf8()
        .ok()?;
    let name = percent_encoding::percent_decode_str(key)
        .decode_utf8()
        .ok()?;
    // The S3 front's own checks (s3s's AWS naming rules, keys of at most 1,024 bytes): a
    // native bucket name S3 refuses (`ML_Data`, `ab`) is refused there, not served here.
    if !s3s::path::check_bucket_name(&bucket) || !s3s::path::check_key(&name) {
        return None;
    }
    let bck = Bck::new(&bucket, gristmill_core::Provider::Ais).ok()?;
    // Credentials are judged on this target's bucket metadata: a target paused past its map
    // lease hears from the primary first (the reply brings newer metadata, removed users
    // included); one that cannot, or is coming back, leaves the request to a proxy.
    let lease = t
        .lease
        .renew_if_expired(|| crate::cluster::membership::confirm_map(t))
        .await;
    if !lease || t.is_returning() {
        return None;
    }
    let bmd = t.bmd();
    if !bmd.contains(&bck) || !may_read(reads, parts, &bck, &bmd) {
        return None;
    }
    let native = read_native(t, parts, &bck, &name).await?;
    let checksums = parts
        .headers
        .get("x-amz-checksum-mode")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"enabled"));
    s3_answer(native, checksums)
}

/// No query (but `x-id`, which SDKs add), no header asking for more than the object
/// (SSE-C keys, checksums, CORS, expected owners, session tokens...), path-style.
fn plain_request(reads: &S3Reads, parts: &axum::http::request::Parts) -> bool {
    let query_ok = parts.uri.query().is_none_or(|q| {
        q.split('&')
            .all(|kv| kv.is_empty() || kv.starts_with("x-id="))
    });
    let headers_ok = parts.headers.keys().all(|name| {
        let n = name.as_str();
        !(n.starts_with("x-amz-") || n == "origin")
            || matches!(
                n,
                "x-amz-date" | "x-amz-content-sha256" | "x-amz-user-agent" | "x-amz-checksum-mode"
            )
    });
    let virtual_host = reads.domain.as_deref().is_some_and(|domain| {
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        host.to_ascii_lowercase().ends_with(&format!(".{domain}"))
    });
    query_ok && headers_ok && !virtual_host
}

/// Whether the headers the read acts on are each sent at most once and parse as the S3
/// front parses them (one `bytes=` range, ETag lists, RFC 1123 dates). The object API is
/// laxer (it reads a first value, ignores a range on HEAD, answers several ranges whole),
/// so anything the front would refuse goes there to be refused.
fn read_headers_well_formed(headers: &HeaderMap) -> bool {
    let once = READ_HEADERS.iter().chain(&SIGNED_ONCE).all(|name| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (None, _) => true,
            (Some(v), None) => !v.is_empty(),
            (Some(_), Some(_)) => false,
        }
    });
    once && READ_HEADERS.iter().all(|name| {
        let Some(value) = headers.get(name) else {
            return true;
        };
        let Ok(text) = value.to_str() else {
            return false;
        };
        match *name {
            header::RANGE => s3s::dto::Range::parse(text).is_ok(),
            header::IF_MATCH | header::IF_NONE_MATCH => {
                s3s::dto::ETagCondition::parse_http_header(value.as_bytes()).is_ok()
            }
            _ => s3s::dto::Timestamp::parse(s3s::dto::TimestampFormat::HttpDate, text).is_ok(),
        }
    })
}

/// Headers the signature check and the answer read one value of.
const SIGNED_ONCE: [HeaderName; 4] = [
    header::AUTHORIZATION,
    HeaderName::from_static("x-amz-date"),
    HeaderName::from_static("x-amz-content-sha256"),
    HeaderName::from_static("x-amz-checksum-mode"),
];

/// Whether the request's credentials check out here and allow reading `bck`.
fn may_read(
    reads: &S3Reads,
    parts: &axum::http::request::Parts,
    bck: &Bck,
    bmd: &gristmill_core::BucketMetadata,
) -> bool {
    let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
        // Unsigned: with users, only bucket policies let it through (the proxies hold them).
        return reads.auth_off;
    };
    let Some(auth) = value.to_str().ok().and_then(Authorization::parse) else {
        return false;
    };
    let (secret, allowed) = if let Some(u) = reads.users.get(auth.access_key) {
        (u.secret_key.clone(), u.may_read(&bck.name))
    } else if reads.auth_off && auth.access_key == gristmill_core::api::s3_default::ACCESS_KEY {
        (gristmill_core::api::s3_default::SECRET_KEY.to_owned(), true)
    } else if let Some(keys) = &reads.cluster_keys
        && let Some((user, key)) = gristmill_core::users::by_access_key(&bmd.users, auth.access_key)
    {
        // Judged on this target's bucket metadata, as the target judges tokens.
        (keys.s3_secret(key), user.allows(&Need::Read(bck.clone())))
    } else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    match reads.verifier.verify(parts, &auth, &secret, now) {
        Ok(()) => allowed,
        Err(why) => {
            tracing::debug!(access_key = auth.access_key, %why, "S3 port: signature not accepted here");
            false
        }
    }
}

/// Request headers the object API acts on for a read.
const READ_HEADERS: [HeaderName; 5] = [
    header::RANGE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
];

/// The object API's 2xx answer to the read, from this target or (once) from the owner.
async fn read_native(
    t: &Arc<Target>,
    parts: &axum::http::request::Parts,
    bck: &Bck,
    name: &str,
) -> Option<Response> {
    let uri = format!(
        "/v1/objects/{}/{}?provider=ais",
        bck.name,
        gristmill_core::name::encode_path(name)
    );
    let mut req = axum::http::Request::builder()
        .method(parts.method.clone())
        .uri(&uri)
        .body(Body::empty())
        .ok()?;
    for name in &READ_HEADERS {
        for v in parts.headers.get_all(name) {
            req.headers_mut().append(name.clone(), v.clone());
        }
    }
    // The connection's sendfile path, so a local read goes zero-copy as on the main port.
    if let Some(zero_copy) = parts
        .extensions
        .get::<gristmill_node::zero_copy::ZeroCopy>()
    {
        req.extensions_mut().insert(zero_copy.clone());
    }
    let params = HashMap::from([("provider".to_owned(), "ais".to_owned())]);
    let here = crate::api::objects::object(
        State(t.clone()),
        Path((bck.name.clone(), name.to_owned())),
        Query(params),
        req,
    )
    .await
    .ok()?;
    if here.status().is_success() {
        return Some(here);
    }
    if here.status() != StatusCode::TEMPORARY_REDIRECT {
        return None;
    }
    // Another target owns it: ask it as a node (it checks its map against ours).
    let location = here.headers().get(header::LOCATION)?.to_str().ok()?;
    let mut ask = t.relay.request(parts.method.clone(), location);
    for name in &READ_HEADERS {
        for v in parts.headers.get_all(name) {
            ask = ask.header(name.clone(), v.clone());
        }
    }
    let resp = ask.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let mut out = Response::builder().status(resp.status());
    if let Some(headers) = out.headers_mut() {
        *headers = resp.headers().clone();
    }
    out.body(Body::from_stream(resp.bytes_stream())).ok()
}

/// Metadata keys whose S3 rendering [`s3_answer`] knows; an object with any other (SSE-C,
/// object lock, anything newer) is answered by a proxy.
fn rendered_here(key: &str) -> bool {
    key.starts_with(USER_META)
        || key.starts_with("x-amz-checksum-")
        || matches!(
            key,
            "content-type"
                | "content-encoding"
                | "cache-control"
                | "content-disposition"
                | "content-language"
                | "expires"
                | "x-amz-tagging"
                | "x-grist-parts"
                | "x-grist-part-checksums"
                | "x-grist-object-owner"
                | "x-grist-acl"
                | crate::store::ETAG_KEY
                | gristmill_core::name::VERSION_ID_KEY
        )
}

const USER_META: &str = "x-amz-meta-";

/// The object API's answer as the S3 front renders it (`proxy/src/s3/objects.rs`
/// `get_object`/`head_object`): status, length and range, ETag, Last-Modified, the stored
/// content headers, user metadata, tag count, version id, the stored S3 checksums when asked
/// for (`x-amz-checksum-mode: ENABLED`, not on a range); the body as it is.
fn s3_answer(native: Response, checksums: bool) -> Option<Response> {
    let (parts, body) = native.into_parts();
    let from = &parts.headers;
    let custom = match from.get(h::CUSTOM_MD_JSON) {
        Some(v) => gristmill_core::api::decode_custom_md(v.to_str().ok()?).ok()?,
        None => Default::default(),
    };
    if !custom.keys().all(|k| rendered_here(k)) {
        return None;
    }
    let mut out = HeaderMap::with_capacity(12 + custom.len());
    for name in [
        header::CONTENT_LENGTH,
        header::CONTENT_RANGE,
        header::ETAG,
        header::LAST_MODIFIED,
    ] {
        if let Some(v) = from.get(&name) {
            out.insert(name, v.clone());
        }
    }
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let mut put = |name: HeaderName, value: &str| -> Option<()> {
        out.insert(name, HeaderValue::from_str(value).ok()?);
        Some(())
    };
    put(
        header::CONTENT_TYPE,
        custom
            .get("content-type")
            .map_or("binary/octet-stream", String::as_str),
    )?;
    for (key, name) in [
        ("content-encoding", header::CONTENT_ENCODING),
        ("cache-control", header::CACHE_CONTROL),
        ("content-disposition", header::CONTENT_DISPOSITION),
        ("content-language", header::CONTENT_LANGUAGE),
        ("expires", header::EXPIRES),
    ] {
        if let Some(v) = custom.get(key) {
            put(name, v)?;
        }
    }
    for (k, v) in &custom {
        if k.starts_with(USER_META) {
            put(HeaderName::from_bytes(k.as_bytes()).ok()?, v)?;
        }
    }
    if let Some(tags) = custom.get("x-amz-tagging") {
        let n = tags.split('&').filter(|p| !p.is_empty()).count();
        if n > 0 {
            put(
                HeaderName::from_static("x-amz-tagging-count"),
                &n.to_string(),
            )?;
        }
    }
    if let Some(id) = custom
        .get(gristmill_core::name::VERSION_ID_KEY)
        .filter(|v| *v != gristmill_core::name::NULL_VERSION_ID)
    {
        put(HeaderName::from_static("x-amz-version-id"), id)?;
    }
    if checksums && parts.status != StatusCode::PARTIAL_CONTENT {
        let (mut kind, mut answered) = (None, false);
        for (k, v) in custom.range("x-amz-checksum-".to_owned()..) {
            let Some(algo) = k.strip_prefix("x-amz-checksum-") else {
                break;
            };
            // The first stored checksum tells how it was made (the front's `checksum_type`).
            kind.get_or_insert(if v.contains('-') {
                "COMPOSITE"
            } else {
                "FULL_OBJECT"
            });
            if matches!(algo, "crc32" | "crc32c" | "sha1" | "sha256" | "crc64nvme") {
                put(HeaderName::from_bytes(k.as_bytes()).ok()?, v)?;
                answered = true;
            }
        }
        if let (true, Some(kind)) = (answered, kind) {
            put(HeaderName::from_static("x-amz-checksum-type"), kind)?;
        }
    }
    let mut resp = Response::new(body);
    *resp.status_mut() = parts.status;
    *resp.headers_mut() = out;
    *resp.extensions_mut() = parts.extensions;
    Some(resp)
}

/// Relays the request as it came (Host and signature kept, body streamed) to the primary
/// proxy's S3 front, as the main port does with S3 requests; a failed relay is an S3 503.
async fn relay_to_proxy(t: Arc<Target>, parts: axum::http::request::Parts, body: Body) -> Response {
    let req = Request::from_parts(parts, body);
    match crate::api::node::s3_relay(State(t), req).await {
        Ok(resp) => resp,
        // `/v1/...`, which the relay never sends to a proxy's native API: to an S3 front that
        // is bucket `v1`, a name S3's rules refuse (shorter than 3).
        Err(e) if e.kind == gristmill_core::ErrorKind::NotFound => (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/xml")],
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InvalidBucketName</Code><Message>The specified bucket is not valid.</Message></Error>",
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e.message, "S3 port: relaying to the proxy failed");
            let mut busy = (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::CONTENT_TYPE, "application/xml")],
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>ServiceUnavailable</Code><Message>no proxy answered; retry</Message></Error>",
            )
                .into_response();
            busy.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            busy
        }
    }
}
