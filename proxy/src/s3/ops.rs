//! S3 operations mapped onto the cluster. Object data streams between the client and the
//! owning target through this proxy; nothing is buffered whole.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use gristmill_core::api::{self, ListObjectsMsg, header as h};
use gristmill_core::{ApiError, Bck, ErrorKind, Provider};
use reqwest::{Method, StatusCode};
use s3s::dto::*;
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use super::RESERVED_BUCKETS;
use crate::meta::Proxy;

pub(super) struct GristS3 {
    pub(super) proxy: Arc<Proxy>,
}

/// Metadata keys (in the object's custom metadata) for the S3 headers we store and return.
const CONTENT_TYPE: &str = "content-type";
const CONTENT_ENCODING: &str = "content-encoding";
const CACHE_CONTROL: &str = "cache-control";
const CONTENT_DISPOSITION: &str = "content-disposition";
const CONTENT_LANGUAGE: &str = "content-language";
const USER_META: &str = "x-amz-meta-";
const ETAG: &str = "ETag";

fn internal(e: impl std::fmt::Display) -> S3Error {
    S3Error::with_message(S3ErrorCode::InternalError, e.to_string())
}

/// Maps a native API error onto the S3 error a client expects.
fn s3_error_from(err: ApiError, key: bool) -> S3Error {
    use ErrorKind::*;
    let code = match err.kind {
        NotFound if key => S3ErrorCode::NoSuchKey,
        NotFound | BucketNotFound => S3ErrorCode::NoSuchBucket,
        AlreadyExists => S3ErrorCode::BucketAlreadyOwnedByYou,
        RangeNotSatisfiable => S3ErrorCode::InvalidRange,
        PreconditionFailed => S3ErrorCode::PreconditionFailed,
        InvalidPart => S3ErrorCode::InvalidPart,
        InvalidPartOrder => S3ErrorCode::InvalidPartOrder,
        EntityTooSmall => S3ErrorCode::EntityTooSmall,
        NoSuchUpload => S3ErrorCode::NoSuchUpload,
        BadRequest => S3ErrorCode::InvalidRequest,
        Forbidden | Unauthorized => S3ErrorCode::AccessDenied,
        Busy => S3ErrorCode::SlowDown,
        Unavailable => S3ErrorCode::ServiceUnavailable,
        InsufficientStorage => S3ErrorCode::InternalError,
        _ => S3ErrorCode::InternalError,
    };
    S3Error::with_message(code, err.message)
}

/// Turns a non-success response from a node into an S3 error.
async fn node_error(resp: reqwest::Response, key: bool) -> S3Error {
    let status = resp.status();
    if status == StatusCode::NOT_MODIFIED {
        return S3Error::new(S3ErrorCode::NotModified);
    }
    let api = gristmill_node::server::peer_error(resp, "").await;
    s3_error_from(api, key)
}

fn bucket(name: &str) -> S3Result<Bck> {
    Bck::new(name, Provider::Ais)
        .map_err(|e| S3Error::with_message(S3ErrorCode::InvalidBucketName, e.message))
}

fn check_key(key: &str) -> S3Result<()> {
    if key.len() > gristmill_core::name::MAX_OBJECT_NAME {
        return Err(s3_error!(
            KeyTooLongError,
            "key is {} bytes; the limit is 1024",
            key.len()
        ));
    }
    gristmill_core::validate_object_name(key)
        .map_err(|e| S3Error::with_message(S3ErrorCode::InvalidArgument, e.message))
}

fn timestamp(ns: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64))
}

fn quoted(etag: &str) -> ETag {
    ETag::Strong(etag.trim_matches('"').to_owned())
}

/// Object attributes read back from a target's response headers.
struct Attrs {
    size: u64,
    etag: String,
    mtime_ns: i64,
    custom: BTreeMap<String, String>,
}

impl Attrs {
    fn from(headers: &reqwest::header::HeaderMap) -> Self {
        let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
        let custom = api::decode_custom_md(get(h::CUSTOM_MD_JSON)).unwrap_or_default();
        Self {
            size: get("content-length").parse().unwrap_or(0),
            etag: get("etag").trim_matches('"').to_owned(),
            mtime_ns: get(h::MTIME).parse().unwrap_or(0),
            custom,
        }
    }

    fn user_metadata(&self) -> Option<Metadata> {
        let m: Metadata = self
            .custom
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(USER_META).map(|k| (k.to_owned(), v.clone())))
            .collect();
        (!m.is_empty()).then_some(m)
    }

    fn get(&self, k: &str) -> Option<String> {
        self.custom.get(k).cloned()
    }

    fn checksum(&self, k: &str) -> Option<String> {
        self.custom.get(&format!("x-amz-checksum-{k}")).cloned()
    }
}

/// Custom metadata for a new object from S3 request fields.
fn custom_md(
    content_type: Option<&str>,
    content_encoding: Option<&str>,
    cache_control: Option<&str>,
    content_disposition: Option<&str>,
    content_language: Option<&str>,
    metadata: Option<&Metadata>,
) -> BTreeMap<String, String> {
    let mut md = BTreeMap::new();
    // `aws-chunked` describes how the upload was framed, not the object: S3 drops it.
    let content_encoding: Option<String> = content_encoding.and_then(|v| {
        let kept: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked"))
            .collect();
        (!kept.is_empty()).then(|| kept.join(","))
    });
    for (k, v) in [
        (CONTENT_TYPE, content_type),
        (CONTENT_ENCODING, content_encoding.as_deref()),
        (CACHE_CONTROL, cache_control),
        (CONTENT_DISPOSITION, content_disposition),
        (CONTENT_LANGUAGE, content_language),
    ] {
        if let Some(v) = v {
            md.insert(k.to_owned(), v.to_owned());
        }
    }
    for (k, v) in metadata.into_iter().flatten() {
        md.insert(format!("{USER_META}{}", k.to_ascii_lowercase()), v.clone());
    }
    md
}

/// Which S3 checksums a request asks us to validate and keep, from its headers
/// (`x-amz-checksum-<algo>`, `x-amz-sdk-checksum-algorithm`, `x-amz-trailer`).
fn requested_checksums(headers: &http::HeaderMap) -> Vec<String> {
    let mut algos = Vec::new();
    for algo in ["crc32", "crc32c", "sha1", "sha256", "crc64nvme"] {
        if headers.contains_key(format!("x-amz-checksum-{algo}").as_str()) {
            algos.push(algo.to_ascii_uppercase());
        }
    }
    for name in ["x-amz-sdk-checksum-algorithm", "x-amz-checksum-algorithm"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            algos.push(v.to_ascii_uppercase());
        }
    }
    if let Some(v) = headers.get("x-amz-trailer").and_then(|v| v.to_str().ok()) {
        for t in v.split(',') {
            if let Some(a) = t.trim().strip_prefix("x-amz-checksum-") {
                algos.push(a.to_ascii_uppercase());
            }
        }
    }
    algos.sort();
    algos.dedup();
    algos
}

/// Wraps a client body: hashes it with the requested checksums (and MD5 when Content-MD5 was
/// sent) and compares with the declared values (headers, or trailers that arrive after the
/// body). The comparison happens before the last declared byte is passed on — a receiver that
/// knows the length stops reading there — and a mismatch ends the stream in an error instead,
/// so the target never commits the object. The S3 error for the client lands in `failure`.
fn checked_body(
    body: StreamingBlob,
    headers: &http::HeaderMap,
    algos: &[String],
    expected_len: Option<i64>,
    trailers: TrailerSource,
    failure: Arc<Mutex<Option<S3Error>>>,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let declared = algos
        .iter()
        .filter_map(|a| {
            let name = format!("x-amz-checksum-{}", a.to_ascii_lowercase());
            headers
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .map(|v| (name, v.to_owned()))
        })
        .collect();
    let content_md5 = headers
        .get("content-md5")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let check = BodyCheck {
        body,
        hasher: gristmill_node::s3::checksum_hasher(algos),
        md5: content_md5
            .as_ref()
            .map(|_| <md5::Md5 as md5::Digest>::new()),
        declared,
        content_md5,
        trailers,
        failure,
        expected_len: expected_len.and_then(|n| u64::try_from(n).ok()),
        seen: 0,
        done: false,
    };
    futures::stream::unfold(check, |mut c| async move {
        c.next_chunk().await.map(|r| (r, c))
    })
}

/// Where the trailers of a streamed body come from.
enum TrailerSource {
    None,
    /// Signed aws-chunked bodies: decoded by `s3s`.
    S3s(s3s::TrailingHeaders),
    /// Unsigned aws-chunked bodies: decoded by [`super::chunked`].
    Decoded(super::chunked::Trailers),
}

/// A client body ready to stream on: decoded (if it arrived as unsigned aws-chunked), its
/// payload length, and where its trailers come from.
fn client_body(
    req_signed: bool,
    headers: &http::HeaderMap,
    body: Option<StreamingBlob>,
    content_length: Option<i64>,
    trailers: Option<s3s::TrailingHeaders>,
) -> (StreamingBlob, Option<i64>, TrailerSource) {
    let body = body.unwrap_or_else(|| {
        StreamingBlob::wrap(futures::stream::empty::<Result<Bytes, std::io::Error>>())
    });
    let unsigned_chunked = !req_signed
        && headers
            .get("x-amz-content-sha256")
            .is_some_and(|v| v.as_bytes() == super::chunked::UNSIGNED_TRAILER.as_bytes());
    if unsigned_chunked {
        let decoded_len = headers
            .get("x-amz-decoded-content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let t = super::chunked::Trailers::default();
        let stream = StreamingBlob::wrap(super::chunked::decode(body, t.clone()));
        return (stream, decoded_len, TrailerSource::Decoded(t));
    }
    let source = trailers.map_or(TrailerSource::None, TrailerSource::S3s);
    (body, content_length, source)
}

struct BodyCheck {
    body: StreamingBlob,
    hasher: Option<s3s::checksum::ChecksumHasher>,
    md5: Option<md5::Md5>,
    /// `(x-amz-checksum-<algo>, base64 value)` from the request headers.
    declared: Vec<(String, String)>,
    content_md5: Option<String>,
    trailers: TrailerSource,
    failure: Arc<Mutex<Option<S3Error>>>,
    expected_len: Option<u64>,
    seen: u64,
    done: bool,
}

impl BodyCheck {
    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if self.done {
            return None;
        }
        match self.body.next().await {
            Some(Ok(chunk)) => {
                if let Some(h) = self.hasher.as_mut() {
                    h.update(&chunk);
                }
                if let Some(m) = self.md5.as_mut() {
                    md5::Digest::update(m, &chunk);
                }
                self.seen += chunk.len() as u64;
                if self.expected_len == Some(self.seen) {
                    // Drive the client body to its end (trailers arrive after the data) and
                    // verify before handing over the final bytes.
                    loop {
                        match self.body.next().await {
                            None => break,
                            Some(Ok(extra)) if extra.is_empty() => continue,
                            Some(Ok(_)) => {
                                return self.fail(S3Error::with_message(
                                    S3ErrorCode::IncompleteBody,
                                    "the body is longer than its declared length",
                                ));
                            }
                            Some(Err(e)) => return self.fail(client_body_error(e)),
                        }
                    }
                    self.done = true;
                    if let Err(e) = self.verify() {
                        return self.fail(e);
                    }
                }
                Some(Ok(chunk))
            }
            Some(Err(e)) => self.fail(client_body_error(e)),
            None => {
                self.done = true;
                match self.verify() {
                    Ok(()) => None,
                    Err(e) => self.fail(e),
                }
            }
        }
    }

    fn fail(&mut self, e: S3Error) -> Option<Result<Bytes, std::io::Error>> {
        self.done = true;
        let msg = e.message().unwrap_or("upload refused").to_owned();
        *self.failure.lock().expect("failure lock") = Some(e);
        Some(Err(std::io::Error::other(msg)))
    }

    /// Compares what was computed with what the client declared.
    fn verify(&mut self) -> Result<(), S3Error> {
        let computed = self
            .hasher
            .take()
            .map(|h| gristmill_node::s3::checksum_values(h.finalize()));
        let mut expected = std::mem::take(&mut self.declared);
        match &self.trailers {
            TrailerSource::None => {}
            TrailerSource::S3s(t) => {
                t.read(|map| {
                    for (k, v) in map {
                        if let Ok(v) = v.to_str() {
                            expected.push((k.as_str().to_owned(), v.to_owned()));
                        }
                    }
                });
            }
            TrailerSource::Decoded(t) => expected.extend(t.lock().expect("trailers lock").clone()),
        }
        expected.retain(|(k, _)| k.starts_with("x-amz-checksum-"));
        for (name, have) in computed.iter().flatten() {
            if let Some((_, want)) = expected.iter().find(|(n, _)| n == name)
                && have != want
            {
                return Err(S3Error::with_message(
                    S3ErrorCode::BadDigest,
                    format!("{name}: computed {have}, declared {want}"),
                ));
            }
        }
        if let (Some(m), Some(want)) = (self.md5.take(), self.content_md5.as_ref()) {
            use base64::Engine as _;
            let have = base64::engine::general_purpose::STANDARD.encode(md5::Digest::finalize(m));
            if &have != want {
                return Err(S3Error::with_message(
                    S3ErrorCode::BadDigest,
                    format!("Content-MD5 {want} does not match the body ({have})"),
                ));
            }
        }
        Ok(())
    }
}

/// The S3 error for a failure while reading the client's body. `s3s` reports a bad chunk
/// signature through its (private) aws-chunked stream error, recognizable only by its text.
fn client_body_error(e: s3s::StdError) -> S3Error {
    if e.to_string().contains("SignatureMismatch") {
        return S3Error::with_message(
            S3ErrorCode::SignatureDoesNotMatch,
            "a chunk signature of the streamed body does not match",
        );
    }
    match e.downcast_ref::<S3Error>() {
        Some(s3) => S3Error::with_message(
            s3.code().clone(),
            s3.message().unwrap_or("invalid request body").to_owned(),
        ),
        None => S3Error::with_message(
            S3ErrorCode::IncompleteBody,
            format!("reading the request body: {e}"),
        ),
    }
}

impl GristS3 {
    /// An existing native bucket.
    fn existing(&self, name: &str) -> S3Result<Bck> {
        let bck = bucket(name)?;
        if !self.proxy.bmd().contains(&bck) {
            return Err(s3_error!(NoSuchBucket, "bucket {name} does not exist"));
        }
        Ok(bck)
    }

    /// `<owner>/v1/<area>/<bucket>/<key>?provider=ais`.
    fn owner_url(&self, area: &str, bck: &Bck, key: &str) -> S3Result<String> {
        check_key(key)?;
        let smap = self.proxy.smap();
        let owner = smap
            .owner(&bck.object_uname(key))
            .ok_or_else(|| s3_error!(ServiceUnavailable, "no targets in the cluster yet"))?;
        Ok(format!(
            "{}/v1/{area}/{}/{}?provider=ais",
            owner.url(),
            bck.name,
            gristmill_core::name::encode_path(key)
        ))
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> S3Result<reqwest::Response> {
        req.send().await.map_err(|e| {
            S3Error::with_message(
                S3ErrorCode::ServiceUnavailable,
                format!("target unreachable: {}", e.without_url()),
            )
        })
    }

    /// Native bucket control through the primary (which may be this proxy).
    async fn bucket_action(&self, method: Method, bck: &Bck, action: &str) -> S3Result<()> {
        let url = format!(
            "{}/v1/buckets/{}?provider=ais",
            self.proxy.primary_url(),
            bck.name
        );
        let resp = self
            .send(
                self.proxy
                    .http
                    .request(method, url)
                    .json(&serde_json::json!({"action": action})),
            )
            .await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(node_error(resp, false).await)
        }
    }

    /// Streams a client body into a PUT to `url`; returns the stored object's attributes.
    async fn put_stream(
        &self,
        url: String,
        body: StreamingBlob,
        headers: &http::HeaderMap,
        content_length: Option<i64>,
        custom: &BTreeMap<String, String>,
        trailers: TrailerSource,
    ) -> S3Result<Attrs> {
        let algos = requested_checksums(headers);
        let failure = Arc::new(Mutex::new(None));
        let stream = checked_body(
            body,
            headers,
            &algos,
            content_length,
            trailers,
            failure.clone(),
        );
        let mut req = self
            .proxy
            .http
            .put(url)
            .header(h::COMPUTE_MD5, "true")
            .header(h::CUSTOM_MD_JSON, api::encode_custom_md(custom))
            .body(reqwest::Body::wrap_stream(stream));
        if let Some(n) = content_length {
            req = req.header(reqwest::header::CONTENT_LENGTH, n);
        }
        if !algos.is_empty() {
            req = req.header(h::S3_CHECKSUMS, algos.join(","));
        }
        let sent = req.send().await;
        if let Some(e) = failure.lock().expect("failure lock").take() {
            return Err(e);
        }
        let resp = sent.map_err(|e| {
            S3Error::with_message(
                S3ErrorCode::IncompleteBody,
                format!("upload failed: {}", e.without_url()),
            )
        })?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        Ok(Attrs::from(resp.headers()))
    }

    /// Lists up to `max` keys after `after` (merged across targets, in order).
    async fn list_page(
        &self,
        bck: &Bck,
        prefix: &str,
        after: &str,
        max: usize,
    ) -> S3Result<gristmill_core::api::ListObjectsPage> {
        let lso = ListObjectsMsg {
            prefix: prefix.to_owned(),
            pagesize: max as u64,
            start_after: after.to_owned(),
            props: "name,size,checksum".into(),
            ..Default::default()
        };
        crate::list::list_objects(&self.proxy, bck, lso)
            .await
            .map_err(|e| s3_error_from(e, false))
    }

    /// The S3 listing walk: keys and common prefixes (when `delimiter` is set) after `after`,
    /// at most `max_keys` in all. Returns (objects, prefixes, truncated, last item returned).
    async fn walk(
        &self,
        bck: &Bck,
        prefix: &str,
        delimiter: Option<&str>,
        after: &str,
        max_keys: usize,
    ) -> S3Result<(
        Vec<gristmill_core::api::ListEntry>,
        Vec<String>,
        bool,
        String,
    )> {
        let mut objects = Vec::new();
        let mut prefixes: Vec<String> = Vec::new();
        let mut cursor = after.to_owned();
        let mut last = String::new();
        if max_keys == 0 {
            return Ok((objects, prefixes, false, last));
        }
        loop {
            let want = (max_keys - objects.len() - prefixes.len() + 1).clamp(2, 1000);
            let page = self.list_page(bck, prefix, &cursor, want).await?;
            if page.entries.is_empty() {
                return Ok((objects, prefixes, false, last));
            }
            let done = page.continuation_token.is_empty();
            let mut skipped_prefix = false;
            for e in page.entries {
                if objects.len() + prefixes.len() == max_keys {
                    return Ok((objects, prefixes, true, last));
                }
                cursor = e.name.clone();
                let rest = &e.name[prefix.len().min(e.name.len())..];
                let cp = delimiter.filter(|d| !d.is_empty()).and_then(|d| {
                    rest.find(d)
                        .map(|i| format!("{prefix}{}", &rest[..i + d.len()]))
                });
                match cp {
                    Some(cp) => {
                        last = cp.clone();
                        prefixes.push(cp.clone());
                        // Skip the rest of this common prefix with the next request.
                        cursor = format!("{cp}\u{10FFFF}");
                        skipped_prefix = true;
                        break;
                    }
                    None => {
                        last = e.name.clone();
                        objects.push(e);
                    }
                }
            }
            if done && !skipped_prefix {
                return Ok((objects, prefixes, false, last));
            }
        }
    }
}

/// Conditional-request headers, evaluated by the target that holds the object.
const CONDITIONALS: [&str; 4] = [
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
];

/// Copies the named client headers onto a request to a target.
fn forward(
    mut r: reqwest::RequestBuilder,
    headers: &http::HeaderMap,
    names: &[&str],
) -> reqwest::RequestBuilder {
    for name in names {
        if let Some(v) = headers.get(*name) {
            r = r.header(*name, v.as_bytes());
        }
    }
    r
}

fn url_encode_if(encode: bool, s: &str) -> String {
    if encode {
        gristmill_core::name::encode_path(s)
    } else {
        s.to_owned()
    }
}

/// The S3 ETag of a listed object: its MD5 when it was PUT over S3, else its xxhash.
fn entry_etag(e: &gristmill_core::api::ListEntry) -> ETag {
    quoted(if e.etag.is_empty() {
        &e.checksum
    } else {
        &e.etag
    })
}

fn s3_objects(
    objects: Vec<gristmill_core::api::ListEntry>,
    url_encode: bool,
    with_owner: bool,
) -> Vec<Object> {
    objects
        .into_iter()
        .map(|e| Object {
            key: Some(url_encode_if(url_encode, &e.name)),
            size: Some(e.size as i64),
            e_tag: Some(entry_etag(&e)),
            last_modified: Some(timestamp(e.mtime_ns)),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            owner: with_owner.then(owner),
            ..Default::default()
        })
        .collect()
}

fn s3_prefixes(prefixes: Vec<String>, url_encode: bool) -> Vec<CommonPrefix> {
    prefixes
        .into_iter()
        .map(|p| CommonPrefix {
            prefix: Some(url_encode_if(url_encode, &p)),
        })
        .collect()
}

fn owner() -> Owner {
    Owner {
        display_name: Some("gristmill".into()),
        id: Some("gristmill".into()),
    }
}

/// Continuation tokens are the last key returned, base64url-encoded.
fn encode_token(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

fn decode_token(s: &str) -> S3Result<String> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| s3_error!(InvalidArgument, "invalid continuation token"))
}

/// Where a listing resumes after `last` (a key, or a common prefix to skip whole).
fn resume_after(last: &str, delimiter: Option<&str>) -> String {
    match delimiter {
        Some(d) if !d.is_empty() && last.ends_with(d) => format!("{last}\u{10FFFF}"),
        _ => last.to_owned(),
    }
}

#[async_trait::async_trait]
impl S3 for GristS3 {
    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let bmd = self.proxy.bmd();
        let buckets = bmd
            .buckets
            .values()
            .filter(|r| r.bck.provider == Provider::Ais && r.bck.namespace.is_global())
            .map(|r| Bucket {
                name: Some(r.bck.name.clone()),
                creation_date: Some(timestamp(r.props.created)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(owner()),
            ..Default::default()
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let name = &req.input.bucket;
        if RESERVED_BUCKETS.contains(&name.as_str()) {
            return Err(s3_error!(
                InvalidBucketName,
                "{name} is reserved by the native API"
            ));
        }
        let bck = bucket(name)?;
        self.bucket_action(Method::POST, &bck, api::action::CREATE_BUCKET)
            .await?;
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{name}")),
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.existing(&req.input.bucket)?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.existing(&req.input.bucket)?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bck = self.existing(&req.input.bucket)?;
        if !self.list_page(&bck, "", "", 1).await?.entries.is_empty() {
            return Err(s3_error!(
                BucketNotEmpty,
                "bucket {} is not empty",
                bck.name
            ));
        }
        self.bucket_action(Method::DELETE, &bck, api::action::DESTROY_BUCKET)
            .await?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let url = self.owner_url("objects", &bck, &input.key)?;
        let custom = custom_md(
            input.content_type.as_deref(),
            input.content_encoding.as_deref(),
            input.cache_control.as_deref(),
            input.content_disposition.as_deref(),
            input.content_language.as_deref(),
            input.metadata.as_ref(),
        );
        let (body, content_length, trailers) = client_body(
            req.credentials.is_some(),
            &req.headers,
            input.body,
            input.content_length,
            req.trailing_headers,
        );
        let attrs = self
            .put_stream(url, body, &req.headers, content_length, &custom, trailers)
            .await?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(quoted(&attrs.etag)),
            checksum_crc32: attrs.checksum("crc32"),
            checksum_crc32c: attrs.checksum("crc32c"),
            checksum_sha1: attrs.checksum("sha1"),
            checksum_sha256: attrs.checksum("sha256"),
            checksum_crc64nvme: attrs.checksum("crc64nvme"),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = &req.input;
        let bck = self.existing(&input.bucket)?;
        let url = self.owner_url("objects", &bck, &input.key)?;
        let r = forward(self.proxy.http.get(url), &req.headers, &["range"]);
        let r = forward(r, &req.headers, &CONDITIONALS);
        let resp = self.send(r).await?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        let partial = resp.status() == StatusCode::PARTIAL_CONTENT;
        let attrs = Attrs::from(resp.headers());
        let content_range = resp
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let want_checksums = !partial
            && req
                .headers
                .get("x-amz-checksum-mode")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"enabled"));
        let sum = |k: &str| {
            if want_checksums {
                attrs.checksum(k)
            } else {
                None
            }
        };
        let output = GetObjectOutput {
            body: Some(StreamingBlob::wrap(resp.bytes_stream())),
            content_length: Some(attrs.size as i64),
            content_range,
            accept_ranges: Some("bytes".into()),
            e_tag: Some(quoted(&attrs.etag)),
            last_modified: Some(timestamp(attrs.mtime_ns)),
            content_type: input
                .response_content_type
                .clone()
                .or_else(|| attrs.get(CONTENT_TYPE))
                .or_else(|| Some("binary/octet-stream".into())),
            content_encoding: input
                .response_content_encoding
                .clone()
                .or_else(|| attrs.get(CONTENT_ENCODING)),
            cache_control: input
                .response_cache_control
                .clone()
                .or_else(|| attrs.get(CACHE_CONTROL)),
            content_disposition: input
                .response_content_disposition
                .clone()
                .or_else(|| attrs.get(CONTENT_DISPOSITION)),
            content_language: input
                .response_content_language
                .clone()
                .or_else(|| attrs.get(CONTENT_LANGUAGE)),
            metadata: attrs.user_metadata(),
            checksum_crc32: sum("crc32"),
            checksum_crc32c: sum("crc32c"),
            checksum_sha1: sum("sha1"),
            checksum_sha256: sum("sha256"),
            checksum_crc64nvme: sum("crc64nvme"),
            ..Default::default()
        };
        let mut out = S3Response::new(output);
        if partial {
            out.status = Some(http::StatusCode::PARTIAL_CONTENT);
        }
        Ok(out)
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = &req.input;
        let bck = self.existing(&input.bucket)?;
        let url = self.owner_url("objects", &bck, &input.key)?;
        let r = forward(self.proxy.http.head(url), &req.headers, &CONDITIONALS);
        let resp = self.send(r).await?;
        if !resp.status().is_success() {
            let status = resp.status();
            return Err(match status {
                StatusCode::NOT_FOUND => s3_error!(NoSuchKey),
                StatusCode::PRECONDITION_FAILED => s3_error!(PreconditionFailed),
                StatusCode::NOT_MODIFIED => s3_error!(NotModified),
                _ => node_error(resp, true).await,
            });
        }
        let attrs = Attrs::from(resp.headers());
        let want_checksums = req
            .headers
            .get("x-amz-checksum-mode")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"enabled"));
        let sum = |k: &str| {
            if want_checksums {
                attrs.checksum(k)
            } else {
                None
            }
        };
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(attrs.size as i64),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(quoted(&attrs.etag)),
            last_modified: Some(timestamp(attrs.mtime_ns)),
            content_type: attrs
                .get(CONTENT_TYPE)
                .or_else(|| Some("binary/octet-stream".into())),
            content_encoding: attrs.get(CONTENT_ENCODING),
            cache_control: attrs.get(CACHE_CONTROL),
            content_disposition: attrs.get(CONTENT_DISPOSITION),
            content_language: attrs.get(CONTENT_LANGUAGE),
            metadata: attrs.user_metadata(),
            checksum_crc32: sum("crc32"),
            checksum_crc32c: sum("crc32c"),
            checksum_sha1: sum("sha1"),
            checksum_sha256: sum("sha256"),
            checksum_crc64nvme: sum("crc64nvme"),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let bck = self.existing(&req.input.bucket)?;
        let url = self.owner_url("objects", &bck, &req.input.key)?;
        let resp = self.send(self.proxy.http.delete(url)).await?;
        // S3 answers 204 whether or not the key existed.
        if !resp.status().is_success() && resp.status() != StatusCode::NOT_FOUND {
            return Err(node_error(resp, true).await);
        }
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let bck = self.existing(&req.input.bucket)?;
        let quiet = req.input.delete.quiet.unwrap_or(false);
        if req.input.delete.objects.len() > 1000 {
            return Err(s3_error!(MalformedXML, "at most 1000 keys per request"));
        }
        let bck = &bck;
        let results: Vec<(String, Result<(), S3Error>)> =
            futures::stream::iter(req.input.delete.objects.clone())
                .map(|o| async move {
                    let r = async {
                        let url = self.owner_url("objects", bck, &o.key)?;
                        let resp = self.send(self.proxy.http.delete(url)).await?;
                        if resp.status().is_success() || resp.status() == StatusCode::NOT_FOUND {
                            Ok(())
                        } else {
                            Err(node_error(resp, true).await)
                        }
                    }
                    .await;
                    (o.key, r)
                })
                .buffered(16)
                .collect()
                .await;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for (key, r) in results {
            match r {
                Ok(()) if !quiet => deleted.push(DeletedObject {
                    key: Some(key),
                    ..Default::default()
                }),
                Ok(()) => {}
                Err(e) => errors.push(Error {
                    key: Some(key),
                    code: Some(e.code().as_str().to_owned()),
                    message: e.message().map(str::to_owned),
                    ..Default::default()
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let input = req.input;
        let (src_bucket, src_key) = match &input.copy_source {
            CopySource::Bucket { bucket, key, .. } => (bucket.to_string(), key.to_string()),
            _ => {
                return Err(s3_error!(
                    NotImplemented,
                    "access-point copy sources are not supported"
                ));
            }
        };
        let src = self.existing(&src_bucket)?;
        let dst = self.existing(&input.bucket)?;
        let src_url = self.owner_url("objects", &src, &src_key)?;
        let dst_url = self.owner_url("objects", &dst, &input.key)?;
        let resp = self.send(self.proxy.http.get(src_url)).await?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        let attrs = Attrs::from(resp.headers());
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        if !replace && src_bucket == input.bucket && src_key == input.key {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object onto itself without changing its metadata is not allowed"
            ));
        }
        let custom = if replace {
            custom_md(
                input.content_type.as_deref(),
                input.content_encoding.as_deref(),
                input.cache_control.as_deref(),
                input.content_disposition.as_deref(),
                input.content_language.as_deref(),
                input.metadata.as_ref(),
            )
        } else {
            attrs
                .custom
                .iter()
                .filter(|(k, _)| k.as_str() != ETAG && !k.starts_with("x-amz-checksum-"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let body = StreamingBlob::wrap(resp.bytes_stream());
        let stored = self
            .put_stream(
                dst_url,
                body,
                &http::HeaderMap::new(),
                Some(attrs.size as i64),
                &custom,
                TrailerSource::None,
            )
            .await?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(quoted(&stored.etag)),
                last_modified: Some(timestamp(stored.mtime_ns)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = input.max_keys.unwrap_or(1000).clamp(0, 1000) as usize;
        let marker = input.marker.clone().unwrap_or_default();
        let delimiter = input.delimiter.clone();
        let after = resume_after(&marker, delimiter.as_deref());
        let (objects, prefixes, truncated, last) = self
            .walk(&bck, &prefix, delimiter.as_deref(), &after, max)
            .await?;
        let enc = input
            .encoding_type
            .as_ref()
            .is_some_and(|e| e.as_str() == "url");
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(bck.name.clone()),
            prefix: Some(url_encode_if(enc, &prefix)),
            marker: Some(url_encode_if(enc, &marker)),
            delimiter: delimiter.as_deref().map(|d| url_encode_if(enc, d)),
            max_keys: Some(max as i32),
            is_truncated: Some(truncated),
            next_marker: (truncated && delimiter.is_some()).then(|| url_encode_if(enc, &last)),
            encoding_type: input.encoding_type.clone(),
            contents: Some(s3_objects(objects, enc, true)),
            common_prefixes: Some(s3_prefixes(prefixes, enc)),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = input.max_keys.unwrap_or(1000).clamp(0, 1000) as usize;
        let delimiter = input.delimiter.clone();
        let after = match &input.continuation_token {
            Some(t) => decode_token(t)?,
            None => resume_after(input.start_after.as_deref().unwrap_or(""), None),
        };
        let (objects, prefixes, truncated, last) = self
            .walk(&bck, &prefix, delimiter.as_deref(), &after, max)
            .await?;
        let enc = input
            .encoding_type
            .as_ref()
            .is_some_and(|e| e.as_str() == "url");
        let fetch_owner = input.fetch_owner.unwrap_or(false);
        let count = objects.len() + prefixes.len();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(bck.name.clone()),
            prefix: Some(url_encode_if(enc, &prefix)),
            delimiter: delimiter.as_deref().map(|d| url_encode_if(enc, d)),
            max_keys: Some(max as i32),
            key_count: Some(count as i32),
            is_truncated: Some(truncated),
            continuation_token: input.continuation_token.clone(),
            next_continuation_token: truncated
                .then(|| encode_token(&resume_after(&last, delimiter.as_deref()))),
            start_after: input.start_after.as_deref().map(|s| url_encode_if(enc, s)),
            encoding_type: input.encoding_type.clone(),
            contents: Some(s3_objects(objects, enc, fetch_owner)),
            common_prefixes: Some(s3_prefixes(prefixes, enc)),
            ..Default::default()
        }))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = input.max_keys.unwrap_or(1000).clamp(0, 1000) as usize;
        let delimiter = input.delimiter.clone();
        let after = resume_after(
            input.key_marker.as_deref().unwrap_or(""),
            delimiter.as_deref(),
        );
        let (objects, prefixes, truncated, last) = self
            .walk(&bck, &prefix, delimiter.as_deref(), &after, max)
            .await?;
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(bck.name.clone()),
            prefix: Some(prefix),
            delimiter,
            max_keys: Some(max as i32),
            is_truncated: Some(truncated),
            key_marker: input.key_marker.clone(),
            next_key_marker: truncated.then_some(last),
            next_version_id_marker: truncated.then(|| "null".to_owned()),
            versions: Some(
                objects
                    .into_iter()
                    .map(|e| ObjectVersion {
                        e_tag: Some(entry_etag(&e)),
                        last_modified: Some(timestamp(e.mtime_ns)),
                        key: Some(e.name),
                        size: Some(e.size as i64),
                        version_id: Some("null".into()),
                        is_latest: Some(true),
                        owner: Some(owner()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            common_prefixes: Some(
                prefixes
                    .into_iter()
                    .map(|p| CommonPrefix { prefix: Some(p) })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let url = self.owner_url("mpu", &bck, &input.key)?;
        let custom = custom_md(
            input.content_type.as_deref(),
            input.content_encoding.as_deref(),
            input.cache_control.as_deref(),
            input.content_disposition.as_deref(),
            input.content_language.as_deref(),
            input.metadata.as_ref(),
        );
        let resp = self
            .send(
                self.proxy
                    .http
                    .post(format!("{url}&op=create"))
                    .json(&custom),
            )
            .await?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        let info: serde_json::Value = resp.json().await.map_err(internal)?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(bck.name.clone()),
            key: Some(input.key),
            upload_id: info["upload_id"].as_str().map(str::to_owned),
            checksum_algorithm: input.checksum_algorithm,
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        if !(1..=10_000).contains(&input.part_number) {
            return Err(s3_error!(
                InvalidArgument,
                "part number must be between 1 and 10000"
            ));
        }
        let url = format!(
            "{}&upload_id={}&part={}",
            self.owner_url("mpu", &bck, &input.key)?,
            input.upload_id,
            input.part_number
        );
        let algos = requested_checksums(&req.headers);
        let failure = Arc::new(Mutex::new(None));
        let (body, content_length, trailers) = client_body(
            req.credentials.is_some(),
            &req.headers,
            input.body,
            input.content_length,
            req.trailing_headers,
        );
        let stream = checked_body(
            body,
            &req.headers,
            &algos,
            content_length,
            trailers,
            failure.clone(),
        );
        let mut r = self
            .proxy
            .http
            .put(url)
            .body(reqwest::Body::wrap_stream(stream));
        if let Some(n) = content_length {
            r = r.header(reqwest::header::CONTENT_LENGTH, n);
        }
        let sent = r.send().await;
        if let Some(e) = failure.lock().expect("failure lock").take() {
            return Err(e);
        }
        let resp = sent.map_err(|e| {
            S3Error::with_message(S3ErrorCode::IncompleteBody, e.without_url().to_string())
        })?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        let part: serde_json::Value = resp.json().await.map_err(internal)?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: part["etag"].as_str().map(quoted),
            checksum_crc32: req
                .headers
                .get("x-amz-checksum-crc32")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            checksum_crc32c: req
                .headers
                .get("x-amz-checksum-crc32c")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            checksum_sha256: req
                .headers
                .get("x-amz-checksum-sha256")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let (src_bucket, src_key) = match &input.copy_source {
            CopySource::Bucket { bucket, key, .. } => (bucket.to_string(), key.to_string()),
            _ => {
                return Err(s3_error!(
                    NotImplemented,
                    "access-point copy sources are not supported"
                ));
            }
        };
        let src = self.existing(&src_bucket)?;
        let mut get = self
            .proxy
            .http
            .get(self.owner_url("objects", &src, &src_key)?);
        if let Some(range) = &input.copy_source_range {
            get = get.header("range", range.as_str());
        }
        let resp = self.send(get).await?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        let len = resp.content_length();
        let url = format!(
            "{}&upload_id={}&part={}",
            self.owner_url("mpu", &bck, &input.key)?,
            input.upload_id,
            input.part_number
        );
        let mut put = self
            .proxy
            .http
            .put(url)
            .body(reqwest::Body::wrap_stream(resp.bytes_stream()));
        if let Some(n) = len {
            put = put.header(reqwest::header::CONTENT_LENGTH, n);
        }
        let resp = self.send(put).await?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        let part: serde_json::Value = resp.json().await.map_err(internal)?;
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: part["etag"].as_str().map(quoted),
                last_modified: part["mtime_ns"].as_i64().map(timestamp),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let parts: Vec<(u32, String)> = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                (
                    p.part_number.unwrap_or(0).max(0) as u32,
                    p.e_tag.map(|e| e.value().to_owned()).unwrap_or_default(),
                )
            })
            .collect();
        if parts.is_empty() {
            return Err(s3_error!(MalformedXML, "the part list is empty"));
        }
        let url = format!(
            "{}&op=complete&upload_id={}",
            self.owner_url("mpu", &bck, &input.key)?,
            input.upload_id
        );
        let resp = self
            .send(
                self.proxy
                    .http
                    .post(url)
                    .json(&serde_json::json!({ "parts": parts })),
            )
            .await?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        let attrs = Attrs::from(resp.headers());
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(bck.name.clone()),
            key: Some(input.key.clone()),
            e_tag: Some(quoted(&attrs.etag)),
            location: Some(format!("/{}/{}", bck.name, input.key)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let url = format!(
            "{}&upload_id={}",
            self.owner_url("mpu", &bck, &input.key)?,
            input.upload_id
        );
        let resp = self.send(self.proxy.http.delete(url)).await?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let url = format!(
            "{}&upload_id={}",
            self.owner_url("mpu", &bck, &input.key)?,
            input.upload_id
        );
        let resp = self.send(self.proxy.http.get(url)).await?;
        if !resp.status().is_success() {
            return Err(node_error(resp, true).await);
        }
        let parts: Vec<serde_json::Value> = resp.json().await.map_err(internal)?;
        let marker = input.part_number_marker.unwrap_or(0);
        let max = input.max_parts.unwrap_or(1000).clamp(1, 1000) as usize;
        let mut selected: Vec<&serde_json::Value> = parts
            .iter()
            .filter(|p| p["part"].as_i64().unwrap_or(0) > i64::from(marker))
            .collect();
        let truncated = selected.len() > max;
        selected.truncate(max);
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(bck.name.clone()),
            key: Some(input.key.clone()),
            upload_id: Some(input.upload_id.clone()),
            is_truncated: Some(truncated),
            max_parts: Some(max as i32),
            next_part_number_marker: selected
                .last()
                .and_then(|p| p["part"].as_i64())
                .map(|n| n as i32),
            parts: Some(
                selected
                    .into_iter()
                    .map(|p| Part {
                        part_number: p["part"].as_i64().map(|n| n as i32),
                        e_tag: p["etag"].as_str().map(quoted),
                        size: p["size"].as_i64(),
                        last_modified: p["mtime_ns"].as_i64().map(timestamp),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        let bck = self.existing(&input.bucket)?;
        let smap = self.proxy.smap();
        let urls: Vec<String> = smap
            .active_targets()
            .map(|t| format!("{}/v1/mpu/{}?provider=ais", t.url(), bck.name))
            .collect();
        let requests = urls.into_iter().map(|url| async move {
            let resp = self.send(self.proxy.http.get(url)).await?;
            if !resp.status().is_success() {
                return Err(node_error(resp, false).await);
            }
            resp.json::<Vec<serde_json::Value>>()
                .await
                .map_err(internal)
        });
        let mut uploads: Vec<serde_json::Value> = futures::stream::iter(requests)
            .buffered(8)
            .try_collect::<Vec<_>>()
            .await?
            .into_iter()
            .flatten()
            .collect();
        let prefix = input.prefix.clone().unwrap_or_default();
        uploads.retain(|u| u["key"].as_str().unwrap_or("").starts_with(&prefix));
        uploads.sort_by(|a, b| {
            a["key"]
                .as_str()
                .cmp(&b["key"].as_str())
                .then(a["upload_id"].as_str().cmp(&b["upload_id"].as_str()))
        });
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(bck.name.clone()),
            prefix: input.prefix.clone(),
            is_truncated: Some(false),
            uploads: Some(
                uploads
                    .into_iter()
                    .map(|u| MultipartUpload {
                        key: u["key"].as_str().map(str::to_owned),
                        upload_id: u["upload_id"].as_str().map(str::to_owned),
                        initiated: u["initiated_ns"].as_i64().map(timestamp),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }
}
