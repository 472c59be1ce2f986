//! What the S3 operations share: the service type, error mapping, object attributes and
//! their metadata keys, checked request bodies, forwarding to targets, listing helpers.

use crate::meta::Proxy;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use gristmill_core::api::{self, ListObjectsMsg, header as h};
use gristmill_core::{ApiError, Bck, ErrorKind, Provider};
use reqwest::{Method, StatusCode};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

pub(super) struct GristS3 {
    pub(super) proxy: Arc<Proxy>,
}

/// Metadata keys (in the object's custom metadata) for the S3 headers we store and return.
pub(super) const CONTENT_TYPE: &str = "content-type";

pub(super) const CONTENT_ENCODING: &str = "content-encoding";
pub(super) const EXPIRES: &str = "expires";

pub(super) const CACHE_CONTROL: &str = "cache-control";

pub(super) const CONTENT_DISPOSITION: &str = "content-disposition";

pub(super) const CONTENT_LANGUAGE: &str = "content-language";

pub(super) const USER_META: &str = "x-amz-meta-";

pub(super) const ETAG: &str = "ETag";

pub(super) fn internal(e: impl std::fmt::Display) -> S3Error {
    S3Error::with_message(S3ErrorCode::InternalError, e.to_string())
}

/// Maps a native API error onto the S3 error a client expects.
pub(super) fn s3_error_from(err: ApiError, key: bool) -> S3Error {
    use ErrorKind::*;
    let code = match err.kind {
        NotFound if key => S3ErrorCode::NoSuchKey,
        NotFound | BucketNotFound => S3ErrorCode::NoSuchBucket,
        AlreadyExists => S3ErrorCode::BucketAlreadyOwnedByYou,
        BucketAlreadyExists => S3ErrorCode::BucketAlreadyExists,
        RangeNotSatisfiable => S3ErrorCode::InvalidRange,
        PreconditionFailed => S3ErrorCode::PreconditionFailed,
        InvalidPart => S3ErrorCode::InvalidPart,
        InvalidPartOrder => S3ErrorCode::InvalidPartOrder,
        BadDigest => S3ErrorCode::BadDigest,
        EntityTooSmall => S3ErrorCode::EntityTooSmall,
        NoSuchUpload => S3ErrorCode::NoSuchUpload,
        NoSuchVersion => S3ErrorCode::NoSuchVersion,
        MethodNotAllowed => S3ErrorCode::MethodNotAllowed,
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
pub(super) async fn node_error(resp: reqwest::Response, key: bool) -> S3Error {
    let status = resp.status();
    if status == StatusCode::NOT_MODIFIED {
        return not_modified(resp.headers());
    }
    let api = gristmill_node::server::peer_error(resp, "").await;
    s3_error_from(api, key)
}

/// A copy's source: bucket, key and version (access points are not supported).
pub(super) fn copy_source(source: &CopySource) -> S3Result<(String, String, Option<String>)> {
    match source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((
            bucket.to_string(),
            key.to_string(),
            version_id.as_deref().map(str::to_owned),
        )),
        _ => Err(s3_error!(
            NotImplemented,
            "access-point copy sources are not supported"
        )),
    }
}

/// `x-amz-copy-source-if-*`: the copy source's conditions, sent as its GET's (an unmet one is
/// the copy's 412).
pub(super) fn copy_source_conditions(
    mut get: reqwest::RequestBuilder,
    headers: &http::HeaderMap,
) -> reqwest::RequestBuilder {
    for cond in CONDITIONALS {
        if let Some(v) = headers.get(format!("x-amz-copy-source-{cond}").as_str()) {
            get = get.header(cond, v.as_bytes());
        }
    }
    get
}

/// 304 Not Modified with the object's ETag and Last-Modified, as S3 answers it (clients
/// revalidating a cache read the ETag from it).
pub(super) fn not_modified(node: &http::HeaderMap) -> S3Error {
    let mut e = S3Error::new(S3ErrorCode::NotModified);
    let attrs = Attrs::from(node);
    let mut headers = http::HeaderMap::new();
    if !attrs.etag.is_empty()
        && let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", attrs.etag))
    {
        headers.insert(http::header::ETAG, v);
    }
    if attrs.mtime_ns > 0
        && let Ok(v) = http::HeaderValue::from_str(&httpdate::fmt_http_date(
            std::time::UNIX_EPOCH + std::time::Duration::from_nanos(attrs.mtime_ns as u64),
        ))
    {
        headers.insert(http::header::LAST_MODIFIED, v);
    }
    e.set_headers(headers);
    e
}

pub(super) fn bucket(name: &str) -> S3Result<Bck> {
    Bck::new(name, Provider::Ais)
        .map_err(|e| S3Error::with_message(S3ErrorCode::InvalidBucketName, e.message))
}

/// The bucket an S3 name means: the native (`ais://`) bucket of that name; else the bucket
/// whose `s3_alias` property is that name; else the one remote bucket (`s3://`, `ht://`,
/// `ais://@alias`...) of that name — several of them are ambiguous until one gets an alias.
/// `None`: no such bucket (in this bucket metadata).
pub(super) fn resolve(bmd: &gristmill_core::BucketMetadata, name: &str) -> S3Result<Option<Bck>> {
    let native = bucket(name)?;
    if bmd.contains(&native) {
        return Ok(Some(native));
    }
    let records = || bmd.buckets.values();
    if let Some(r) = records().find(|r| r.props.s3_alias == name) {
        return Ok(Some(r.bck.clone()));
    }
    let remote: Vec<&Bck> = records()
        .filter(|r| r.bck.name == name && r.props.s3_alias.is_empty())
        .map(|r| &r.bck)
        .collect();
    match remote.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some((*one).clone())),
        many => Err(s3_error!(
            InvalidRequest,
            "{name} names {} buckets ({}); give one of them the S3 name with `grist bucket props set <bucket> s3_alias=<name>`",
            many.len(),
            many.iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// `provider=..` (and `namespace=..` outside the global one) of a request to a target.
pub(super) fn bucket_query(bck: &Bck) -> String {
    let mut q = format!("provider={}", bck.provider.as_str());
    if !bck.namespace.is_global() {
        q.push_str("&namespace=");
        q.push_str(&gristmill_core::name::encode_path(&bck.namespace.uname()));
    }
    q
}

pub(super) fn check_key(key: &str) -> S3Result<()> {
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

pub(super) fn timestamp(ns: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64))
}

pub(super) fn quoted(etag: &str) -> ETag {
    ETag::Strong(etag.trim_matches('"').to_owned())
}

/// Object attributes read back from a target's response headers.
#[derive(Default)]
pub(super) struct Attrs {
    pub(super) size: u64,
    pub(super) etag: String,
    pub(super) mtime_ns: i64,
    pub(super) custom: BTreeMap<String, String>,
}

impl Attrs {
    pub(super) fn from(headers: &reqwest::header::HeaderMap) -> Self {
        let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
        let custom = api::decode_custom_md(get(h::CUSTOM_MD_JSON)).unwrap_or_default();
        Self {
            size: get("content-length").parse().unwrap_or(0),
            etag: get("etag").trim_matches('"').to_owned(),
            mtime_ns: get(h::MTIME).parse().unwrap_or(0),
            custom,
        }
    }

    pub(super) fn user_metadata(&self) -> Option<Metadata> {
        let m: Metadata = self
            .custom
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(USER_META).map(|k| (k.to_owned(), v.clone())))
            .collect();
        (!m.is_empty()).then_some(m)
    }

    pub(super) fn get(&self, k: &str) -> Option<String> {
        self.custom.get(k).cloned()
    }

    pub(super) fn checksum(&self, k: &str) -> Option<String> {
        self.custom.get(&format!("x-amz-checksum-{k}")).cloned()
    }

    /// How the object's S3 checksum was made: from its parts' checksums (`…-N`) or over the
    /// whole object; `None` without one.
    pub(super) fn checksum_type(&self) -> Option<s3s::dto::ChecksumType> {
        let (_, v) = self
            .custom
            .iter()
            .find(|(k, _)| k.starts_with("x-amz-checksum-"))?;
        Some(s3s::dto::ChecksumType::from(
            if v.contains('-') {
                s3s::dto::ChecksumType::COMPOSITE
            } else {
                s3s::dto::ChecksumType::FULL_OBJECT
            }
            .to_owned(),
        ))
    }

    /// Part `n`'s checksum (the algorithm's lowercase name and the base64 value) of a
    /// multipart object uploaded with a checksum algorithm.
    pub(super) fn part_checksum(&self, n: i32) -> Option<(String, String)> {
        let (key, _) = self
            .custom
            .iter()
            .find(|(k, _)| k.starts_with("x-amz-checksum-"))?;
        let algo = key.strip_prefix("x-amz-checksum-")?.to_owned();
        let value = self
            .custom
            .get(PART_CHECKSUMS)?
            .split(',')
            .nth(usize::try_from(n).ok()?.checked_sub(1)?)?;
        Some((algo, value.to_owned()))
    }

    /// The checksums an answer carries: part `part`'s when one is read (S3 answers a part's
    /// checksum on `?partNumber=` reads), else the object's when `wanted`
    /// (`x-amz-checksum-mode: ENABLED` on a whole-object read).
    pub(super) fn answered_checksums(&self, part: Option<i32>, wanted: bool) -> AnsweredChecksums {
        let mut out = AnsweredChecksums::default();
        let sums: Vec<(String, String)> = match part {
            Some(n) => self.part_checksum(n).into_iter().collect(),
            None if wanted => ["crc32", "crc32c", "sha1", "sha256", "crc64nvme"]
                .into_iter()
                .filter_map(|k| Some((k.to_owned(), self.checksum(k)?)))
                .collect(),
            None => Vec::new(),
        };
        if sums.is_empty() {
            return out;
        }
        out.checksum_type = self.checksum_type();
        for (algo, v) in sums {
            match algo.as_str() {
                "crc32" => out.crc32 = Some(v),
                "crc32c" => out.crc32c = Some(v),
                "sha1" => out.sha1 = Some(v),
                "sha256" => out.sha256 = Some(v),
                "crc64nvme" => out.crc64nvme = Some(v),
                _ => {}
            }
        }
        out
    }

    /// A multipart object's part sizes, in order; `None` for an object written whole.
    pub(super) fn parts(&self) -> Option<Vec<u64>> {
        let v = self.custom.get(PARTS)?;
        Some(v.split(',').filter_map(|p| p.parse().ok()).collect())
    }

    /// Part `n` of the object. An object written whole is one part.
    pub(super) fn part(&self, n: i32) -> S3Result<PartSpan> {
        let sizes = self.parts();
        let count = sizes.as_ref().map_or(1, Vec::len);
        if n < 1 || n as usize > count {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("InvalidPartNumber".into()),
                format!("the object has {count} part(s); part {n} does not exist"),
            );
            e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
            return Err(e);
        }
        let Some(sizes) = sizes else {
            return Ok(PartSpan {
                bytes: (self.size > 0).then(|| (0, self.size - 1)),
                count: None,
            });
        };
        let start: u64 = sizes[..n as usize - 1].iter().sum();
        let len = sizes[n as usize - 1];
        Ok(PartSpan {
            bytes: (len > 0).then(|| (start, start + len - 1)),
            count: Some(count as i32),
        })
    }
}

/// The checksum fields of a GET or HEAD answer.
#[derive(Default)]
pub(super) struct AnsweredChecksums {
    pub(super) crc32: Option<String>,
    pub(super) crc32c: Option<String>,
    pub(super) sha1: Option<String>,
    pub(super) sha256: Option<String>,
    pub(super) crc64nvme: Option<String>,
    pub(super) checksum_type: Option<s3s::dto::ChecksumType>,
}

/// One part of an object: its first and last byte (`None`: empty), and the part count of a
/// multipart object (`None`: an object written whole).
pub(super) struct PartSpan {
    pub(super) bytes: Option<(u64, u64)>,
    pub(super) count: Option<i32>,
}

impl PartSpan {
    pub(super) fn len(&self) -> u64 {
        self.bytes.map_or(0, |(a, b)| b - a + 1)
    }
}

/// Custom-metadata key of a multipart object's part sizes (the target's `PARTS_KEY`).
pub(super) const PARTS: &str = "x-grist-parts";
/// Custom-metadata key of a multipart object's part checksums (the target's
/// `PART_CHECKSUMS_KEY`).
pub(super) const PART_CHECKSUMS: &str = "x-grist-part-checksums";

/// Custom metadata for a new object from S3 request fields.
pub(super) fn custom_md(
    content_type: Option<&str>,
    content_encoding: Option<&str>,
    cache_control: Option<&str>,
    content_disposition: Option<&str>,
    content_language: Option<&str>,
    metadata: Option<&Metadata>,
    request: &http::HeaderMap,
) -> BTreeMap<String, String> {
    let mut md = BTreeMap::new();
    // `Expires` is kept as sent and answered on GET and HEAD (S3 stores it, never acts on it).
    if let Some(v) = request
        .get(http::header::EXPIRES)
        .and_then(|v| v.to_str().ok())
    {
        md.insert(EXPIRES.to_owned(), v.to_owned());
    }
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

/// The access metadata a new object (PutObject, CopyObject, CreateMultipartUpload) gets from
/// its request and its bucket, with one look at the bucket: its lock (`object_lock`), its own
/// ACL and its writer as owner (`public`).
pub(super) fn access_metadata(
    s: &GristS3,
    bck: &Bck,
    writer: &str,
    acl: Option<&ObjectCannedACL>,
    mode: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<Vec<(String, String)>> {
    let bmd = s.proxy.bmd();
    let none = api::S3BucketProps::default();
    let props = bmd.get(bck).map_or(&none, |r| &r.props.s3);
    let mut md = super::object_lock::for_new_object(&props.object_lock, mode, until, hold)?;
    md.extend(super::public::new_object_md(
        bck,
        &props.object_ownership,
        acl,
        writer,
    )?);
    Ok(md)
}

/// Which S3 checksums a request asks us to validate and keep, from its headers
/// (`x-amz-checksum-<algo>`, `x-amz-sdk-checksum-algorithm`, `x-amz-trailer`).
pub(super) fn requested_checksums(headers: &http::HeaderMap) -> Vec<String> {
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
pub(super) fn checked_body(
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
pub(super) enum TrailerSource {
    None,
    /// Signed aws-chunked bodies: decoded by `s3s`.
    S3s(s3s::TrailingHeaders),
    /// Unsigned aws-chunked bodies: decoded by [`super::chunked`].
    Decoded(super::chunked::Trailers),
}

/// A client body ready to stream on: decoded (if it arrived as unsigned aws-chunked), its
/// payload length, and where its trailers come from.
pub(super) fn client_body(
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

/// S3 takes an object's (or part's) length up front: a body sent with `Transfer-Encoding:
/// chunked` and no length (neither `Content-Length` nor `x-amz-decoded-content-length`) is
/// refused with 411 MissingContentLength, as S3 does, before anything is stored.
pub(super) fn require_length(
    headers: &http::HeaderMap,
    content_length: Option<i64>,
) -> S3Result<()> {
    let chunked = headers
        .get(http::header::TRANSFER_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"));
    // aws-chunked bodies (SDKs sending trailing checksums) declare the length of the object
    // in their own header; the framing is not the object.
    let declared = content_length.is_some() || headers.contains_key("x-amz-decoded-content-length");
    if !declared && chunked {
        return Err(s3_error!(
            MissingContentLength,
            "the body's length is needed: send Content-Length (or x-amz-decoded-content-length with aws-chunked)"
        ));
    }
    Ok(())
}

pub(super) struct BodyCheck {
    pub(super) body: StreamingBlob,
    pub(super) hasher: Option<s3s::checksum::ChecksumHasher>,
    md5: Option<md5::Md5>,
    /// `(x-amz-checksum-<algo>, base64 value)` from the request headers.
    pub(super) declared: Vec<(String, String)>,
    content_md5: Option<String>,
    pub(super) trailers: TrailerSource,
    pub(super) failure: Arc<Mutex<Option<S3Error>>>,
    pub(super) expected_len: Option<u64>,
    pub(super) seen: u64,
    pub(super) done: bool,
}

impl BodyCheck {
    pub(super) async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
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

    pub(super) fn fail(&mut self, e: S3Error) -> Option<Result<Bytes, std::io::Error>> {
        self.done = true;
        let msg = e.message().unwrap_or("upload refused").to_owned();
        *self.failure.lock().expect("failure lock") = Some(e);
        Some(Err(std::io::Error::other(msg)))
    }

    /// Compares what was computed with what the client declared.
    pub(super) fn verify(&mut self) -> Result<(), S3Error> {
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
pub(super) fn client_body_error(e: s3s::StdError) -> S3Error {
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
    /// An existing native bucket (one created through another proxy moments ago included:
    /// a miss is checked again after a linearizable read).
    /// The bucket an S3 request names (see [`resolve`]), after catching up with the
    /// bucket metadata once if it is not known here.
    pub(super) async fn existing(&self, name: &str) -> S3Result<Bck> {
        bucket(name)?;
        if let Some(bck) = resolve(&self.proxy.bmd(), name)? {
            return Ok(bck);
        }
        self.proxy
            .linearize()
            .await
            .map_err(|e| s3_error!(ServiceUnavailable, "{}", e.message))?;
        resolve(&self.proxy.bmd(), name)?
            .ok_or_else(|| s3_error!(NoSuchBucket, "bucket {name} does not exist"))
    }

    /// `<owner>/v1/<area>/<bucket>/<key>?provider=..&namespace=..`.
    pub(super) fn owner_url(&self, area: &str, bck: &Bck, key: &str) -> S3Result<String> {
        check_key(key)?;
        let smap = self.proxy.smap();
        let owner = smap
            .owner(&bck.object_uname(key))
            .ok_or_else(|| s3_error!(ServiceUnavailable, "no targets in the cluster yet"))?;
        // The owner catches up with this map first if its own is older.
        Ok(format!(
            "{}/v1/{area}/{}/{}?{}&{}={}",
            owner.url(),
            bck.name,
            gristmill_core::name::encode_path(key),
            bucket_query(bck),
            gristmill_core::api::query::FORWARDED,
            smap.version
        ))
    }

    /// Changes a bucket's properties (a `set-bprops` patch, merged into them) on the primary.
    pub(super) async fn set_props(&self, bck: &Bck, patch: serde_json::Value) -> S3Result<()> {
        let url = format!(
            "{}/v1/buckets/{}?{}",
            self.proxy.primary_url(),
            bck.name,
            bucket_query(bck)
        );
        let body = serde_json::json!({
            "action": gristmill_core::api::action::SET_BPROPS,
            "value": patch,
        });
        let resp = self
            .send(
                self.proxy
                    .http
                    .request(reqwest::Method::PATCH, url)
                    .json(&body),
            )
            .await?;
        if !resp.status().is_success() {
            return Err(node_error(resp, false).await);
        }
        Ok(())
    }

    pub(super) async fn send(&self, req: reqwest::RequestBuilder) -> S3Result<reqwest::Response> {
        req.send().await.map_err(|e| {
            S3Error::with_message(
                S3ErrorCode::ServiceUnavailable,
                format!("target unreachable: {}", e.without_url()),
            )
        })
    }

    /// Native bucket control through the primary (which may be this proxy).
    /// Who an S3 request acts for: the cluster user of its access key, or a `--s3-users`
    /// access key itself; nobody (empty) for unsigned requests and the example key of a
    /// cluster without users.
    pub(super) fn requester(&self, credentials: Option<&s3s::auth::Credentials>) -> String {
        let Some(c) = credentials else {
            return String::new();
        };
        if c.access_key == super::DEFAULT_ACCESS_KEY {
            return String::new();
        }
        let bmd = self.proxy.bmd();
        match gristmill_core::users::by_access_key(&bmd.users, &c.access_key) {
            Some((user, _)) => user.name.clone(),
            None => c.access_key.clone(),
        }
    }

    pub(super) async fn bucket_action(
        &self,
        method: Method,
        bck: &Bck,
        action: &str,
        acting_for: &str,
    ) -> S3Result<()> {
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
                    .header(h::ON_BEHALF_OF, acting_for)
                    .json(&serde_json::json!({"action": action})),
            )
            .await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(node_error(resp, false).await)
        }
    }

    /// Streams a client body into a PUT to `url` (through `encrypt`'s keystream for SSE-C);
    /// returns the stored object's attributes.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn put_stream(
        &self,
        url: String,
        body: StreamingBlob,
        headers: &http::HeaderMap,
        content_length: Option<i64>,
        custom: &BTreeMap<String, String>,
        trailers: TrailerSource,
        encrypt: Option<super::sse::Keystream>,
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
        let body = if content_length == Some(0) {
            // An empty body is never polled by the HTTP client: drive it here, so that its
            // declared checksums (and trailers) are still checked before anything is stored.
            let read: Vec<Result<Bytes, std::io::Error>> = stream.collect().await;
            if let Some(e) = failure.lock().expect("failure lock").take() {
                return Err(e);
            }
            if let Some(Err(e)) = read.into_iter().find(Result::is_err) {
                return Err(S3Error::with_message(
                    S3ErrorCode::IncompleteBody,
                    format!("reading the request body: {e}"),
                ));
            }
            reqwest::Body::from(Vec::new())
        } else {
            match encrypt {
                // Checked on the plaintext (above), stored as ciphertext.
                Some(keystream) => reqwest::Body::wrap_stream(keystream.wrap(stream)),
                None => reqwest::Body::wrap_stream(stream),
            }
        };
        // A target would compute S3 checksums over ciphertext: none are kept for SSE-C.
        let algos = if custom.contains_key(gristmill_core::sse::KEY_CHECK_KEY) {
            Vec::new()
        } else {
            algos
        };
        let mut req = self
            .proxy
            .http
            .put(url)
            .header(h::COMPUTE_MD5, "true")
            .header(h::CUSTOM_MD_JSON, api::encode_custom_md(custom))
            .body(body);
        if let Some(n) = content_length {
            req = req.header(reqwest::header::CONTENT_LENGTH, n);
        }
        if !algos.is_empty() {
            req = req.header(h::S3_CHECKSUMS, algos.join(","));
        }
        let req = forward(req, headers, &CONDITIONAL_WRITES);
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
    pub(super) async fn list_page(
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
        crate::remote::list_bucket(&self.proxy, bck, lso)
            .await
            .map_err(|e| s3_error_from(e, false))
    }

    /// The S3 listing walk: keys and common prefixes (when `delimiter` is set) after `after`,
    /// at most `max_keys` in all. Returns (objects, prefixes, truncated, last item returned).
    pub(super) async fn walk(
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
pub(super) const CONDITIONALS: [&str; 4] = [
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
];

/// A write's preconditions (S3 conditional writes), decided by the owner atomically.
pub(super) const CONDITIONAL_WRITES: [&str; 2] = ["if-match", "if-none-match"];

/// Copies the named client headers onto a request to a target.
pub(super) fn forward(
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

pub(super) fn url_encode_if(encode: bool, s: &str) -> String {
    if encode {
        gristmill_core::name::encode_path(s)
    } else {
        s.to_owned()
    }
}

/// The S3 ETag of a listed object: its MD5 when it was PUT over S3, else its xxhash.
pub(super) fn entry_etag(e: &gristmill_core::api::ListEntry) -> ETag {
    quoted(if e.etag.is_empty() {
        &e.checksum
    } else {
        &e.etag
    })
}

pub(super) fn s3_objects(
    objects: Vec<gristmill_core::api::ListEntry>,
    url_encode: bool,
    owner: Option<Owner>,
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
            owner: owner.clone(),
            ..Default::default()
        })
        .collect()
}

pub(super) fn s3_prefixes(prefixes: Vec<String>, url_encode: bool) -> Vec<CommonPrefix> {
    prefixes
        .into_iter()
        .map(|p| CommonPrefix {
            prefix: Some(url_encode_if(url_encode, &p)),
        })
        .collect()
}

pub(super) fn owner() -> Owner {
    Owner {
        display_name: Some("gristmill".into()),
        id: Some("gristmill".into()),
    }
}

/// Continuation tokens are the last key returned, base64url-encoded.
pub(super) fn encode_token(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

pub(super) fn decode_token(s: &str) -> S3Result<String> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| s3_error!(InvalidArgument, "invalid continuation token"))
}

/// Where a listing resumes after `last` (a key, or a common prefix to skip whole).
pub(super) fn resume_after(last: &str, delimiter: Option<&str>) -> String {
    match delimiter {
        Some(d) if !d.is_empty() && last.ends_with(d) => format!("{last}\u{10FFFF}"),
        _ => last.to_owned(),
    }
}
