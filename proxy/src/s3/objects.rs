//! S3 object operations: put (streamed, checksummed), get and head (ranges, conditions),
//! delete (one and many), copy.

use super::common::*;
use super::versioning::{
    answered_marker, answered_version, marker_error, marker_headers, version_of, version_url,
};
use futures::StreamExt;
use reqwest::StatusCode;
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

pub(super) async fn put_object(
    s: &GristS3,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    let url = s.owner_url("objects", &bck, &input.key)?;
    let mut custom = custom_md(
        input.content_type.as_deref(),
        input.content_encoding.as_deref(),
        input.cache_control.as_deref(),
        input.content_disposition.as_deref(),
        input.content_language.as_deref(),
        input.metadata.as_ref(),
        &req.headers,
    );
    if let Some(tags) = super::tagging::from_header(input.tagging.as_deref())? {
        custom.insert(super::tagging::TAGGING.into(), tags);
    }
    custom.extend(access_metadata(
        s,
        &bck,
        &s.requester(req.credentials.as_ref()),
        input.acl.as_ref(),
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?);
    let sse_key = super::sse::customer_key(&req.headers)?;
    if sse_key.is_some() && bck.is_remote() {
        // The backend keeps bytes, not the metadata that decrypts them.
        return Err(s3_error!(
            NotImplemented,
            "SSE-C into remote bucket {bck} is not supported"
        ));
    }
    let encrypt = sse_key.as_ref().map(|key| {
        let iv = super::sse::new_iv();
        custom.extend(key.metadata(Some(iv)));
        super::sse::Keystream::single(key, iv)
    });
    let (body, content_length, trailers) = client_body(
        req.credentials.is_some(),
        &req.headers,
        input.body,
        input.content_length,
        req.trailing_headers,
    );
    require_length(&req.headers, content_length)?;
    let attrs = s
        .put_stream(
            url,
            body,
            &req.headers,
            content_length,
            &custom,
            trailers,
            encrypt,
        )
        .await?;
    Ok(S3Response::new(PutObjectOutput {
        sse_customer_algorithm: sse_key.as_ref().map(|_| "AES256".to_owned()),
        sse_customer_key_md5: sse_key.as_ref().map(|k| k.md5().to_owned()),
        e_tag: Some(quoted(&attrs.etag)),
        version_id: version_of(&attrs),
        checksum_crc32: attrs.checksum("crc32"),
        checksum_crc32c: attrs.checksum("crc32c"),
        checksum_sha1: attrs.checksum("sha1"),
        checksum_sha256: attrs.checksum("sha256"),
        checksum_crc64nvme: attrs.checksum("crc64nvme"),
        ..Default::default()
    }))
}

pub(super) async fn get_object(
    s: &GristS3,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let input = &req.input;
    let bck = s.existing(&input.bucket).await?;
    let url = version_url(
        s.owner_url("objects", &bck, &input.key)?,
        input.version_id.as_deref(),
    )?;
    // `?partNumber=N`: that part's bytes (a HEAD first finds its boundaries).
    let mut parts_count = None;
    let mut r = s.proxy.http.get(&url);
    if let Some(n) = input.part_number {
        if req.headers.contains_key("range") {
            return Err(s3_error!(
                InvalidRequest,
                "a GET takes a Range header or partNumber, not both"
            ));
        }
        let part = part_of(s, &url, &req.headers, n).await?;
        parts_count = part.count;
        if let (Some((first, last)), Some(_)) = (part.bytes, part.count) {
            r = r.header("range", format!("bytes={first}-{last}"));
        }
    } else {
        r = forward(r, &req.headers, &["range"]);
    }
    let r = forward(r, &req.headers, &CONDITIONALS);
    let resp = s.send(r).await?;
    if resp.status() == StatusCode::METHOD_NOT_ALLOWED && answered_marker(resp.headers()) {
        return Err(marker_error(answered_version(resp.headers())));
    }
    if !resp.status().is_success() {
        let marker = answered_marker(resp.headers()).then(|| answered_version(resp.headers()));
        let mut e = node_error(resp, true).await;
        if let Some(id) = marker {
            e.set_headers(marker_headers(id));
        }
        return Err(e);
    }
    let partial = resp.status() == StatusCode::PARTIAL_CONTENT;
    let attrs = Attrs::from(resp.headers());
    if super::public::closed_to_anonymous(&req.extensions, &attrs) {
        return Err(s3_error!(AccessDenied, "the object's ACL is private"));
    }
    let sse_key = super::sse::key_for_read(&attrs, super::sse::customer_key(&req.headers)?)?;
    let content_range = resp
        .headers()
        .get("content-range")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match &sse_key {
        Some(key) => {
            // `bytes FIRST-LAST/SIZE`: where the answered bytes start (a whole answer: 0).
            let start = match content_range.as_deref() {
                Some(r) if partial => r
                    .strip_prefix("bytes ")
                    .and_then(|r| r.split('-').next())
                    .and_then(|r| r.parse().ok())
                    .ok_or_else(|| internal(format!("unexpected Content-Range {r:?}")))?,
                None if partial => return Err(internal("a partial answer without Content-Range")),
                _ => 0,
            };
            let keystream = super::sse::Keystream::of_object(key, &attrs, start)?;
            let ciphertext = resp
                .bytes_stream()
                .map(|c| c.map_err(std::io::Error::other));
            StreamingBlob::wrap(keystream.wrap(ciphertext))
        }
        None => StreamingBlob::wrap(resp.bytes_stream()),
    };
    let want_checksums = !partial
        && req
            .headers
            .get("x-amz-checksum-mode")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"enabled"));
    let sums = attrs.answered_checksums(input.part_number, want_checksums);
    let (lock_mode, lock_until, legal_hold) = super::object_lock::answered(&attrs);
    let output = GetObjectOutput {
        sse_customer_algorithm: sse_key.as_ref().map(|_| "AES256".to_owned()),
        sse_customer_key_md5: sse_key.as_ref().map(|k| k.md5().to_owned()),
        object_lock_mode: lock_mode,
        object_lock_retain_until_date: lock_until,
        object_lock_legal_hold_status: legal_hold,
        body: Some(body),
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
        checksum_crc32: sums.crc32,
        checksum_crc32c: sums.crc32c,
        checksum_sha1: sums.sha1,
        checksum_sha256: sums.sha256,
        checksum_crc64nvme: sums.crc64nvme,
        checksum_type: sums.checksum_type,
        tag_count: super::tagging::count(&attrs),
        parts_count,
        version_id: version_of(&attrs),
        ..Default::default()
    };
    let mut out = S3Response::new(output);
    if partial {
        out.status = Some(http::StatusCode::PARTIAL_CONTENT);
    }
    stored_headers(&attrs, &mut out.headers, false);
    Ok(out)
}

pub(super) async fn head_object(
    s: &GristS3,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let input = &req.input;
    let bck = s.existing(&input.bucket).await?;
    let url = version_url(
        s.owner_url("objects", &bck, &input.key)?,
        input.version_id.as_deref(),
    )?;
    let r = forward(s.proxy.http.head(url), &req.headers, &CONDITIONALS);
    let resp = s.send(r).await?;
    if !resp.status().is_success() {
        let status = resp.status();
        return Err(match status {
            StatusCode::METHOD_NOT_ALLOWED if answered_marker(resp.headers()) => {
                marker_error(answered_version(resp.headers()))
            }
            StatusCode::NOT_FOUND if input.version_id.is_some() => s3_error!(NoSuchVersion),
            StatusCode::NOT_FOUND if answered_marker(resp.headers()) => {
                let mut e = s3_error!(NoSuchKey);
                e.set_headers(marker_headers(answered_version(resp.headers())));
                e
            }
            StatusCode::NOT_FOUND => s3_error!(NoSuchKey),
            StatusCode::PRECONDITION_FAILED => s3_error!(PreconditionFailed),
            StatusCode::NOT_MODIFIED => not_modified(resp.headers()),
            _ => node_error(resp, true).await,
        });
    }
    let attrs = Attrs::from(resp.headers());
    if super::public::closed_to_anonymous(&req.extensions, &attrs) {
        return Err(s3_error!(AccessDenied, "the object's ACL is private"));
    }
    let sse_key = super::sse::key_for_read(&attrs, super::sse::customer_key(&req.headers)?)?;
    let (size, parts_count) = match input.part_number {
        Some(n) => {
            let part = attrs.part(n)?;
            (part.len(), part.count)
        }
        None => (attrs.size, None),
    };
    let want_checksums = input.part_number.is_none()
        && req
            .headers
            .get("x-amz-checksum-mode")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"enabled"));
    let sums = attrs.answered_checksums(input.part_number, want_checksums);
    let (lock_mode, lock_until, legal_hold) = super::object_lock::answered(&attrs);
    let mut out = S3Response::new(HeadObjectOutput {
        sse_customer_algorithm: sse_key.as_ref().map(|_| "AES256".to_owned()),
        sse_customer_key_md5: sse_key.as_ref().map(|k| k.md5().to_owned()),
        object_lock_mode: lock_mode,
        object_lock_retain_until_date: lock_until,
        object_lock_legal_hold_status: legal_hold,
        content_length: Some(size as i64),
        parts_count,
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
        version_id: version_of(&attrs),
        checksum_crc32: sums.crc32,
        checksum_crc32c: sums.crc32c,
        checksum_sha1: sums.sha1,
        checksum_sha256: sums.sha256,
        checksum_crc64nvme: sums.crc64nvme,
        checksum_type: sums.checksum_type,
        ..Default::default()
    });
    if parts_count.is_some() {
        out.status = Some(http::StatusCode::PARTIAL_CONTENT);
    }
    stored_headers(&attrs, &mut out.headers, true);
    Ok(out)
}

/// Headers S3 answers from what was stored that s3s has no field for: `Expires` as sent, and
/// on HEAD the tag count (GET has its own field for it).
fn stored_headers(attrs: &Attrs, headers: &mut http::HeaderMap, tag_count: bool) {
    if let Some(v) = attrs
        .get(EXPIRES)
        .and_then(|v| http::HeaderValue::from_str(&v).ok())
    {
        headers.insert(http::header::EXPIRES, v);
    }
    if tag_count && let Some(n) = super::tagging::count(attrs) {
        headers.insert("x-amz-tagging-count", http::HeaderValue::from(n));
    }
}

/// Part `n` of an object (its byte range and the part count of a multipart object), from a
/// HEAD to the owner with the request's conditions.
async fn part_of(s: &GristS3, url: &str, headers: &http::HeaderMap, n: i32) -> S3Result<PartSpan> {
    let resp = s
        .send(forward(s.proxy.http.head(url), headers, &CONDITIONALS))
        .await?;
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    Attrs::from(resp.headers()).part(n)
}

/// GetObjectAttributes: ETag, size, storage class, checksum and (multipart objects) the parts,
/// paginated by `max-parts` and `part-number-marker`.
pub(super) async fn get_object_attributes(
    s: &GristS3,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let input = &req.input;
    let bck = s.existing(&input.bucket).await?;
    let url = version_url(
        s.owner_url("objects", &bck, &input.key)?,
        input.version_id.as_deref(),
    )?;
    let resp = s.send(s.proxy.http.head(url)).await?;
    if !resp.status().is_success() {
        return Err(match resp.status() {
            StatusCode::NOT_FOUND if input.version_id.is_some() => s3_error!(NoSuchVersion),
            StatusCode::NOT_FOUND => s3_error!(NoSuchKey),
            StatusCode::METHOD_NOT_ALLOWED if answered_marker(resp.headers()) => {
                marker_error(answered_version(resp.headers()))
            }
            _ => node_error(resp, true).await,
        });
    }
    let attrs = Attrs::from(resp.headers());
    // One header, `x-amz-object-attributes: ETag,ObjectSize,...` (s3s may hand it over whole).
    let want = |a: &str| {
        input
            .object_attributes
            .iter()
            .flat_map(|x| x.as_str().split(','))
            .any(|x| x.trim() == a)
    };
    let checksum = want(ObjectAttributes::CHECKSUM)
        .then(|| Checksum {
            checksum_crc32: attrs.checksum("crc32"),
            checksum_crc32c: attrs.checksum("crc32c"),
            checksum_sha1: attrs.checksum("sha1"),
            checksum_sha256: attrs.checksum("sha256"),
            checksum_crc64nvme: attrs.checksum("crc64nvme"),
            checksum_type: attrs.checksum_type(),
        })
        .filter(|c| {
            c.checksum_crc32.is_some()
                || c.checksum_crc32c.is_some()
                || c.checksum_sha1.is_some()
                || c.checksum_sha256.is_some()
                || c.checksum_crc64nvme.is_some()
        });
    let object_parts = match attrs.parts() {
        Some(sizes) if want(ObjectAttributes::OBJECT_PARTS) => {
            let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
            let after = input.part_number_marker.unwrap_or(0).max(0) as usize;
            let listed: Vec<ObjectPart> = sizes
                .iter()
                .enumerate()
                .skip(after)
                .take(max)
                .map(|(i, size)| {
                    let n = i as i32 + 1;
                    let sums = attrs.answered_checksums(Some(n), false);
                    ObjectPart {
                        part_number: Some(n),
                        size: Some(*size as i64),
                        checksum_crc32: sums.crc32,
                        checksum_crc32c: sums.crc32c,
                        checksum_sha1: sums.sha1,
                        checksum_sha256: sums.sha256,
                        checksum_crc64nvme: sums.crc64nvme,
                    }
                })
                .collect();
            let truncated = after + listed.len() < sizes.len();
            Some(GetObjectAttributesParts {
                total_parts_count: Some(sizes.len() as i32),
                part_number_marker: Some(after as i32),
                next_part_number_marker: listed.last().and_then(|p| p.part_number),
                max_parts: Some(max as i32),
                is_truncated: Some(truncated),
                parts: Some(listed),
            })
        }
        _ => None,
    };
    Ok(S3Response::new(GetObjectAttributesOutput {
        version_id: version_of(&attrs),
        // Bare in this answer (AWS's API reference): see `super::bare_attributes_etag`.
        e_tag: want(ObjectAttributes::ETAG).then(|| quoted(&attrs.etag)),
        object_size: want(ObjectAttributes::OBJECT_SIZE).then_some(attrs.size as i64),
        storage_class: want(ObjectAttributes::STORAGE_CLASS)
            .then(|| StorageClass::from_static(StorageClass::STANDARD)),
        last_modified: Some(timestamp(attrs.mtime_ns)),
        checksum,
        object_parts,
        ..Default::default()
    }))
}

pub(super) async fn delete_object(
    s: &GristS3,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let bck = s.existing(&req.input.bucket).await?;
    let bypass = req.input.bypass_governance_retention == Some(true);
    let deleted = delete_one(
        s,
        &bck,
        &req.input.key,
        req.input.version_id.as_deref(),
        bypass,
    )
    .await?;
    Ok(S3Response::new(DeleteObjectOutput {
        delete_marker: deleted.marker.then_some(true),
        version_id: deleted.version_id,
        ..Default::default()
    }))
}

/// What one delete did: the version it removed or the delete marker it left.
struct Deleted {
    /// The version removed (`versionId` given) or the marker's id (none for the null one).
    version_id: Option<String>,
    /// A delete marker was left, or the version removed was one.
    marker: bool,
}

/// DELETE of a key (a delete marker in a versioned bucket) or of one version of it.
async fn delete_one(
    s: &GristS3,
    bck: &gristmill_core::Bck,
    key: &str,
    version_id: Option<&str>,
    bypass_governance: bool,
) -> S3Result<Deleted> {
    let url = version_url(s.owner_url("objects", bck, key)?, version_id)?;
    let mut r = s.proxy.http.delete(url);
    if bypass_governance {
        r = r.header(
            gristmill_core::object_lock::BYPASS_GOVERNANCE_HEADER,
            "true",
        );
    }
    let resp = s.send(r).await?;
    // S3 answers 204 whether or not the key existed.
    if resp.status() == StatusCode::NOT_FOUND && version_id.is_none() {
        return Ok(Deleted {
            version_id: None,
            marker: false,
        });
    }
    if !resp.status().is_success() {
        let e = node_error(resp, true).await;
        // Deleting a version that is not there is no error for S3 either.
        if version_id.is_some() && *e.code() == S3ErrorCode::NoSuchVersion {
            return Ok(Deleted {
                version_id: version_id.map(str::to_owned),
                marker: false,
            });
        }
        return Err(e);
    }
    Ok(Deleted {
        version_id: answered_version(resp.headers()).or_else(|| version_id.map(str::to_owned)),
        marker: answered_marker(resp.headers()),
    })
}

pub(super) async fn delete_objects(
    s: &GristS3,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let bck = s.existing(&req.input.bucket).await?;
    let quiet = req.input.delete.quiet.unwrap_or(false);
    if req.input.delete.objects.len() > 1000 {
        return Err(s3_error!(MalformedXML, "at most 1000 keys per request"));
    }
    let bck = &bck;
    let bypass = req.input.bypass_governance_retention == Some(true);
    let results: Vec<(ObjectIdentifier, S3Result<Deleted>)> =
        futures::stream::iter(req.input.delete.objects.clone())
            .map(|o| async move {
                let r = delete_one(s, bck, &o.key, o.version_id.as_deref(), bypass).await;
                (o, r)
            })
            .buffered(16)
            .collect()
            .await;
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for (o, r) in results {
        match r {
            Ok(d) if !quiet => deleted.push(match &o.version_id {
                // One version removed: it may have been a delete marker.
                Some(_) => DeletedObject {
                    key: Some(o.key),
                    version_id: d.version_id,
                    delete_marker: d.marker.then_some(true),
                    ..Default::default()
                },
                // A delete marker left.
                None => DeletedObject {
                    key: Some(o.key),
                    delete_marker: d.marker.then_some(true),
                    delete_marker_version_id: d.version_id.filter(|_| d.marker),
                    ..Default::default()
                },
            }),
            Ok(_) => {}
            Err(e) => errors.push(Error {
                key: Some(o.key),
                version_id: o.version_id,
                code: Some(e.code().as_str().to_owned()),
                message: e.message().map(str::to_owned),
            }),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: (!errors.is_empty()).then_some(errors),
        ..Default::default()
    }))
}

pub(super) async fn copy_object(
    s: &GristS3,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let input = req.input;
    let (src_bucket, src_key, src_version) = copy_source(&input.copy_source)?;
    let src = s.existing(&src_bucket).await?;
    let dst = s.existing(&input.bucket).await?;
    let src_url = version_url(
        s.owner_url("objects", &src, &src_key)?,
        src_version.as_deref(),
    )?;
    let dst_url = s.owner_url("objects", &dst, &input.key)?;
    let get = copy_source_conditions(s.proxy.http.get(src_url), &req.headers);
    let resp = s.send(get).await?;
    if resp.status() == StatusCode::METHOD_NOT_ALLOWED && answered_marker(resp.headers()) {
        return Err(s3_error!(
            InvalidRequest,
            "the source of a copy cannot be a delete marker"
        ));
    }
    if resp.status() == StatusCode::NOT_MODIFIED {
        return Err(s3_error!(
            PreconditionFailed,
            "a copy-source condition does not hold"
        ));
    }
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    let attrs = Attrs::from(resp.headers());
    super::sse::refuse_copy_of(&attrs)?;
    if super::public::closed_to_anonymous(&req.extensions, &attrs) {
        return Err(s3_error!(AccessDenied, "the copy source's ACL is private"));
    }
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    if !replace && src_version.is_none() && src_bucket == input.bucket && src_key == input.key {
        return Err(s3_error!(
            InvalidRequest,
            "copying an object onto itself without changing its metadata is not allowed"
        ));
    }
    let mut custom = if replace {
        custom_md(
            input.content_type.as_deref(),
            input.content_encoding.as_deref(),
            input.cache_control.as_deref(),
            input.content_disposition.as_deref(),
            input.content_language.as_deref(),
            input.metadata.as_ref(),
            &req.headers,
        )
    } else {
        attrs
            .custom
            .iter()
            .filter(|(k, _)| {
                k.as_str() != ETAG
                    && k.as_str() != PARTS
                    && k.as_str() != PART_CHECKSUMS
                    && !k.starts_with("x-amz-checksum-")
                    && !super::object_lock::is_lock_key(k)
                    && k.as_str() != super::public::OBJECT_ACL
                    && k.as_str() != super::public::OBJECT_OWNER
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    // Tags follow their own directive: the source's (COPY, the default, whatever the
    // metadata directive says) or the request's (REPLACE).
    let replace_tags = input
        .tagging_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
    custom.remove(super::tagging::TAGGING);
    let tags = if replace_tags {
        super::tagging::from_header(input.tagging.as_deref())?
    } else {
        attrs.get(super::tagging::TAGGING)
    };
    if let Some(tags) = tags {
        custom.insert(super::tagging::TAGGING.into(), tags);
    }
    custom.extend(access_metadata(
        s,
        &dst,
        &s.requester(req.credentials.as_ref()),
        input.acl.as_ref(),
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?);
    let body = StreamingBlob::wrap(resp.bytes_stream());
    // The destination's If-Match / If-None-Match go with the write.
    let mut dst_headers = http::HeaderMap::new();
    for k in CONDITIONAL_WRITES {
        if let Some(v) = req.headers.get(k) {
            dst_headers.insert(k, v.clone());
        }
    }
    let stored = s
        .put_stream(
            dst_url,
            body,
            &dst_headers,
            Some(attrs.size as i64),
            &custom,
            TrailerSource::None,
            None,
        )
        .await?;
    Ok(S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(quoted(&stored.etag)),
            last_modified: Some(timestamp(stored.mtime_ns)),
            ..Default::default()
        }),
        version_id: version_of(&stored),
        copy_source_version_id: version_of(&attrs),
        ..Default::default()
    }))
}
