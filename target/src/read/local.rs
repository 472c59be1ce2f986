//! Reads of this target's own copy: headers, conditional requests, ranges, streaming with
//! verification, listing entries.

use crate::ApiResult;
use crate::Target;
use crate::store::ETAG_KEY;
use crate::store::meta::ObjectMeta;
use crate::store::stream::file_stream;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gristmill_core::api::{self, ENTRY_IS_CACHED, ListEntry, ListObjectsMsg, header as h};
use gristmill_core::range::parse_range;
use gristmill_core::{ApiError, Bck};
use std::collections::HashMap;

pub(crate) fn object_headers(t: &Target, bck: &Bck, meta: &ObjectMeta, headers: &mut HeaderMap) {
    // Names parsed once, at compile time (this runs for every GET and HEAD).
    const CHECKSUM_TYPE: HeaderName = HeaderName::from_static(h::CHECKSUM_TYPE);
    const CHECKSUM_VALUE: HeaderName = HeaderName::from_static(h::CHECKSUM_VALUE);
    const VERSION: HeaderName = HeaderName::from_static(h::VERSION);
    const ATIME: HeaderName = HeaderName::from_static(h::ATIME);
    const PRESENT: HeaderName = HeaderName::from_static(h::PRESENT);
    const NODE_ID: HeaderName = HeaderName::from_static(h::NODE_ID);
    const MIRROR_COPIES: HeaderName = HeaderName::from_static(h::MIRROR_COPIES);
    const LOCATION: HeaderName = HeaderName::from_static(h::LOCATION);
    const CUSTOM_MD: HeaderName = HeaderName::from_static(h::CUSTOM_MD);
    const CUSTOM_MD_JSON: HeaderName = HeaderName::from_static(h::CUSTOM_MD_JSON);
    const MTIME: HeaderName = HeaderName::from_static(h::MTIME);
    const GEN: HeaderName = HeaderName::from_static(h::GEN);
    headers.reserve(17);
    let mut set = |name: HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    };
    if let Some(id) = meta.custom.get(crate::store::VERSION_ID_KEY)
        && id != crate::store::NULL_VERSION_ID
    {
        set(HeaderName::from_static(h::VERSION_ID), id);
    }
    if meta.name.contains('\0') {
        set(
            HeaderName::from_static(h::STORED_NAME),
            &gristmill_core::name::encode_path(&meta.name),
        );
    }
    set(CHECKSUM_TYPE, &meta.cksum_type);
    set(CHECKSUM_VALUE, &meta.cksum_value);
    set(VERSION, &meta.version);
    set(NODE_ID, &t.id);
    set(
        LOCATION,
        &format!(
            "t[{}]:{}",
            t.id,
            t.store.mountpath_for(bck, &meta.name).path.display()
        ),
    );
    if !meta.custom.is_empty() {
        let md: Vec<String> = meta
            .custom
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        set(CUSTOM_MD, &md.join(","));
        set(CUSTOM_MD_JSON, &api::encode_custom_md(&meta.custom));
    }
    let mtime =
        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(meta.mtime_ns.max(0) as u64);
    set(header::LAST_MODIFIED, &httpdate::fmt_http_date(mtime));
    let etag = meta.custom.get(ETAG_KEY).unwrap_or(&meta.cksum_value);
    set(header::ETAG, &format!("\"{etag}\""));
    headers.insert(ATIME, HeaderValue::from(meta.atime_ns));
    headers.insert(MTIME, HeaderValue::from(meta.mtime_ns));
    headers.insert(GEN, HeaderValue::from(meta.effective_gen()));
    headers.insert(PRESENT, HeaderValue::from_static("true"));
    headers.insert(MIRROR_COPIES, HeaderValue::from_static("1"));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
}

/// The answer headers of a whole-object GET: [`object_headers`], the content type and length.
fn whole_get_headers(t: &Target, bck: &Bck, meta: &ObjectMeta) -> HeaderMap {
    let mut rendered = HeaderMap::new();
    object_headers(t, bck, meta, &mut rendered);
    rendered.insert(header::CONTENT_LENGTH, HeaderValue::from(meta.size));
    rendered.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    rendered
}

/// [`whole_get_headers`] rendered once for a cached record: the values are slices of one
/// buffer, so a warm GET's copy of them bumps one reference count, not one per header (on a
/// line every worker thread shares).
fn shared_whole_get_headers(t: &Target, bck: &Bck, meta: &ObjectMeta) -> HeaderMap {
    let rendered = whole_get_headers(t, bck, meta);
    let mut buf = bytes::BytesMut::new();
    for value in rendered.values() {
        buf.extend_from_slice(value.as_bytes());
    }
    let buf = buf.freeze();
    let mut shared = HeaderMap::with_capacity(rendered.len());
    let mut at = 0;
    for (name, value) in &rendered {
        let end = at + value.len();
        // The same bytes as a valid value: the fallback never runs.
        match HeaderValue::from_maybe_shared(buf.slice(at..end)) {
            Ok(v) => shared.append(name.clone(), v),
            Err(_) => shared.append(name.clone(), value.clone()),
        };
        at = end;
    }
    shared
}

/// Why a conditional request is not served.
pub(crate) enum Unmet {
    /// `If-None-Match` / `If-Modified-Since`: 304, with the object's ETag and modification
    /// time (RFC 9110 §15.4.5: the validators a 200 would have carried).
    NotModified { etag: String, mtime_ns: i64 },
    /// `If-Match` / `If-Unmodified-Since`: 412.
    Failed(&'static str),
}

impl Unmet {
    fn into_response(self) -> Response {
        match self {
            Unmet::NotModified { etag, mtime_ns } => {
                let mut resp = StatusCode::NOT_MODIFIED.into_response();
                let headers = resp.headers_mut();
                if let Ok(v) = HeaderValue::from_str(&format!("\"{etag}\"")) {
                    headers.insert(header::ETAG, v);
                }
                headers.insert(
                    HeaderName::from_static(h::MTIME),
                    HeaderValue::from(mtime_ns),
                );
                resp
            }
            Unmet::Failed(why) => {
                ApiError::new(gristmill_core::ErrorKind::PreconditionFailed, why).into_response()
            }
        }
    }
}

/// HTTP conditional requests (RFC 9110 §13) against an object's ETag and modification time.
pub(crate) fn check_preconditions(headers: &HeaderMap, meta: &ObjectMeta) -> Result<(), Unmet> {
    let etag = meta.custom.get(ETAG_KEY).unwrap_or(&meta.cksum_value);
    let header = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let matches = |list: &str| {
        list.split(',')
            .map(|t| t.trim().trim_start_matches("W/").trim_matches('"'))
            .any(|t| t == "*" || t == etag)
    };
    // HTTP dates have one-second resolution.
    let mtime_s = (meta.mtime_ns.max(0) as u64) / 1_000_000_000;
    let since = |v: &str| {
        httpdate::parse_http_date(v)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
    };
    let not_modified = || Unmet::NotModified {
        etag: etag.clone(),
        mtime_ns: meta.mtime_ns,
    };
    if let Some(v) = header(header::IF_MATCH) {
        if !matches(v) {
            return Err(Unmet::Failed("If-Match: the ETag differs"));
        }
    } else if let Some(t) = header(header::IF_UNMODIFIED_SINCE).and_then(since)
        && mtime_s > t
    {
        return Err(Unmet::Failed("modified since If-Unmodified-Since"));
    }
    if let Some(v) = header(header::IF_NONE_MATCH) {
        if matches(v) {
            return Err(not_modified());
        }
    } else if let Some(t) = header(header::IF_MODIFIED_SINCE).and_then(since)
        && mtime_s <= t
    {
        return Err(not_modified());
    }
    Ok(())
}

pub(crate) fn head_object(t: &Target, bck: &Bck, name: &str, headers: &HeaderMap) -> ApiResult {
    let meta = t.store.head(bck, name)?;
    if let Err(unmet) = check_preconditions(headers, &meta) {
        return Ok(unmet.into_response());
    }
    let mut resp = StatusCode::OK.into_response();
    object_headers(t, bck, &meta, resp.headers_mut());
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(meta.size));
    Ok(resp)
}

/// Parses a `Range` header against an object size: `Ok(None)` = whole object, `Err(response)`
/// = the 416 to send.
#[allow(clippy::result_large_err)]
pub(crate) fn request_range(
    headers: &HeaderMap,
    size: u64,
) -> Result<Option<gristmill_core::range::ByteRange>, ApiResult> {
    match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        Some(v) => match parse_range(v, size) {
            Ok(r) => Ok(r),
            Err(e) if e.kind == gristmill_core::ErrorKind::RangeNotSatisfiable => {
                let mut resp = e.into_response();
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    resp.headers_mut().insert(header::CONTENT_RANGE, v);
                }
                Err(Ok(resp))
            }
            Err(e) => Err(Err(e)),
        },
        None => Ok(None),
    }
}

/// What a GET handler passes down the read path besides the object: the query, the headers,
/// and the connection's zero-copy channel (plain HTTP only).
#[derive(Clone, Copy)]
pub(crate) struct ReadRequest<'a> {
    pub params: &'a HashMap<String, String>,
    pub headers: &'a HeaderMap,
    pub zero_copy: Option<&'a gristmill_node::zero_copy::ZeroCopy>,
}

impl<'a> ReadRequest<'a> {
    /// The parts of `req` the read path needs.
    pub(crate) fn of(params: &'a HashMap<String, String>, req: &'a axum::extract::Request) -> Self {
        Self {
            params,
            headers: req.headers(),
            zero_copy: req.extensions().get(),
        }
    }
}

/// The body for `len` bytes of `file` from `start`, read with positioned reads on the blocking
/// pool, one chunk at a time.
pub(crate) async fn file_body(
    file: std::sync::Arc<std::fs::File>,
    start: u64,
    len: u64,
) -> Result<Body, ApiError> {
    Ok(Body::from_stream(file_stream(file, start, len)))
}

/// How long a small object found whole in the page cache is taken to still be there.
const RESIDENT_FOR_MS: u64 = 1000;

/// Whether `len` bytes of `open` from `start` are in the page cache, so that `sendfile` will
/// not wait for the disk on an async worker. Asked of the kernel (`cachestat`) — except for
/// a small object (up to [`crate::store::PREFETCH_MAX`]) whose record saw the whole file
/// resident within the last second: pages read that recently are the last the kernel
/// evicts, and the system call was 4–7 % of a warm 16 KiB GET's CPU.
fn in_page_cache(open: &crate::store::OpenObject, start: u64, len: u64) -> bool {
    use gristmill_node::zero_copy::resident;
    let size = open.meta.size;
    let Some(record) = open
        .record
        .as_ref()
        .filter(|_| size <= crate::store::PREFETCH_MAX)
    else {
        return resident(&open.file, start, len);
    };
    let now = crate::store::hot::coarse_ms();
    if record.resident_within(now, RESIDENT_FOR_MS) {
        return true;
    }
    if resident(&open.file, 0, size) {
        record.note_resident(now);
        return true;
    }
    (start, len) != (0, size) && resident(&open.file, start, len)
}

/// Serves an opened local object (GET of a native or a cached remote object).
///
/// Which bytes are checked against the object's checksum (`crate::verify` has the policy): with
/// validation on, a small object is checked before any byte leaves; a streamed whole-object
/// read is checked as it streams (its last chunk held back until the hash matches) unless an
/// earlier whole read since the record was cached already checked it; a corrupt copy is
/// quarantined and repaired, and the repaired copy is served when nothing was sent yet. What
/// is not checked — and validation off — goes zero-copy (`sendfile`) on a plain-HTTP
/// connection when its bytes are in the page cache, and through the blocking pool otherwise.
pub(crate) async fn serve_local(
    t: &Target,
    bck: &Bck,
    open: crate::store::OpenObject,
    req: &ReadRequest<'_>,
) -> ApiResult {
    let (params, headers) = (req.params, req.headers);
    let validate = crate::verify::validates(t, bck, params);
    let mut open = open;
    let mut repaired = false;
    loop {
        if let Err(unmet) = check_preconditions(headers, &open.meta) {
            return Ok(unmet.into_response());
        }
        let size = open.meta.size;
        let range = match request_range(headers, size) {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        // Checks that run before the first byte: a small object (already in memory), or any
        // object when the request asked (`?validate_checksum=true`, even for a range).
        let corrupt = match &open.data {
            Some(data) if validate => {
                let verdict = crate::verify::check_bytes(&open.meta, data).err();
                if verdict.is_none()
                    && let Some(record) = &open.record
                {
                    record.mark_verified();
                }
                verdict
            }
            None if validate && range.is_some() && crate::verify::explicit(params) => {
                crate::verify::check_open(&open).await?.err()
            }
            _ => None,
        };
        if let Some(why) = corrupt {
            if repaired {
                return Err(ApiError::internal(format!(
                    "object {bck}/{} is still corrupt after its repair: {why}",
                    open.meta.name
                )));
            }
            // Boxed: a rare path whose future is large (every GET would move it otherwise).
            Box::pin(crate::verify::quarantine_and_repair(
                t, bck, &open.meta, &why, "get",
            ))
            .await?;
            repaired = true;
            open = t.store.open_object(bck, &open.meta.name).await?;
            continue;
        }
        if t.store.touch(&open.meta.bucket, &open.meta.name) {
            t.space.nudge();
        }
        let (start, len) = range.map_or((0, size), |r| (r.start, r.len()));
        let verified_before = open.record.as_ref().is_some_and(|r| r.verified());
        let stream_verified =
            validate && range.is_none() && (!verified_before || crate::verify::explicit(params));
        // The headers first: building the body may consume `open`. Rendered once per cached
        // record (a warm GET copies them: no formatting, no parsing).
        let mut resp = Response::new(Body::empty());
        *resp.headers_mut() = match &open.record {
            Some(record) => record
                .headers(|| shared_whole_get_headers(t, bck, &record.meta))
                .clone(),
            None => whole_get_headers(t, bck, &open.meta),
        };
        let body = match open.data.take() {
            Some(data) => Body::from(data.slice(start as usize..(start + len) as usize)),
            None if stream_verified => {
                Body::from_stream(crate::verify::verified_read(t, bck, open))
            }
            None => match req.zero_copy {
                Some(zc) if in_page_cache(&open, start, len) => {
                    metrics::counter!("grist_get_zero_copy_total").increment(1);
                    metrics::counter!("grist_get_zero_copy_bytes_total").increment(len);
                    zc.body(open.file, start, len)
                }
                _ => file_body(open.file, start, len).await?,
            },
        };
        *resp.body_mut() = body;
        if let Some(r) = range {
            resp.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            if let Ok(v) = HeaderValue::from_str(&r.content_range(size)) {
                resp.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            // A whole-object checksum on a partial response confuses clients that validate it.
            resp.headers_mut().remove(h::CHECKSUM_VALUE);
            resp.headers_mut().remove(h::CHECKSUM_TYPE);
        }
        return Ok(resp);
    }
}

/// Opens a local object; an uncached remote object is cold-fetched (and cached) first.
pub(crate) async fn open_or_fetch(
    t: &Target,
    bck: &Bck,
    name: &str,
) -> Result<crate::store::OpenObject, ApiError> {
    Ok(match t.store.open_object(bck, name).await {
        Ok(o) => o,
        Err(crate::StoreError::Api(e))
            if e.kind == gristmill_core::ErrorKind::NotFound && bck.is_remote() =>
        {
            let backend = t.backend(bck)?;
            match t.fills.join(t, backend, bck, name, false).await {
                Ok(fill) => {
                    fill.wait()
                        .await
                        .map_err(|why| ApiError::new(gristmill_core::ErrorKind::BadGateway, why))?;
                }
                Err(crate::read::cold::Start::Cached) => {}
                Err(crate::read::cold::Start::Failed(e)) => return Err(e),
            }
            t.store.open_object(bck, name).await?
        }
        Err(e) => return Err(e.into()),
    })
}

pub(crate) fn entry(t: &Target, m: &ObjectMeta, lso: &ListObjectsMsg) -> ListEntry {
    let all = lso.wants("all");
    let want = |p: &str| all || lso.wants(p);
    ListEntry {
        name: m.name.clone(),
        size: m.size,
        checksum: if want("checksum") {
            m.cksum_value.clone()
        } else {
            String::new()
        },
        atime: if want("atime") {
            gristmill_core::time::rfc3339_from_ns(m.atime_ns)
        } else {
            String::new()
        },
        version: if lso.flags & gristmill_core::api::LS_VERSIONS != 0 {
            crate::store::index::version_id(m).to_owned()
        } else if want("version") {
            m.version.clone()
        } else {
            String::new()
        },
        location: if want("location") {
            format!("t[{}]", t.id)
        } else {
            String::new()
        },
        copies: if want("copies") { 1 } else { 0 },
        flags: if crate::store::index::is_delete_marker(m) {
            ENTRY_IS_CACHED | gristmill_core::api::ENTRY_DELETE_MARKER
        } else {
            ENTRY_IS_CACHED
        },
        mtime_ns: m.mtime_ns,
        etag: m.custom.get(ETAG_KEY).cloned().unwrap_or_default(),
    }
}
