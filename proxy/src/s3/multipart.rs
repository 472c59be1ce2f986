//! S3 multipart uploads: create, upload part (and part copy), complete, abort, list parts
//! and uploads, staged on the owning target.

use super::common::*;
use futures::{StreamExt, TryStreamExt};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use std::sync::{Arc, Mutex};

pub(super) async fn create_multipart_upload(
    s: &GristS3,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    if bck.is_remote() {
        // The assembled object would be cached here and never written to the remote.
        return Err(s3_error!(
            NotImplemented,
            "multipart uploads into remote bucket {bck} are not supported yet; use PutObject"
        ));
    }
    let url = s.owner_url("mpu", &bck, &input.key)?;
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
    if let Some(key) = &sse_key {
        custom.extend(key.metadata(None));
    }
    let mut url = format!("{url}&op=create");
    // An SSE-C upload keeps no S3 checksums: a target would compute them over ciphertext.
    if sse_key.is_none() {
        if let Some(a) = &input.checksum_algorithm {
            url.push_str(&format!("&checksum_algorithm={}", a.as_str()));
        }
        if let Some(k) = &input.checksum_type {
            url.push_str(&format!("&checksum_type={}", k.as_str()));
        }
    }
    let resp = s.send(s.proxy.http.post(url).json(&custom)).await?;
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    let info: serde_json::Value = resp.json().await.map_err(internal)?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        sse_customer_algorithm: sse_key.as_ref().map(|_| "AES256".to_owned()),
        sse_customer_key_md5: sse_key.as_ref().map(|k| k.md5().to_owned()),
        bucket: Some(bck.name.clone()),
        key: Some(input.key),
        upload_id: info["upload_id"].as_str().map(str::to_owned),
        checksum_algorithm: info["checksum"]["algorithm"]
            .as_str()
            .map(|a| ChecksumAlgorithm::from(a.to_owned())),
        checksum_type: info["checksum"]["kind"]
            .as_str()
            .map(|k| ChecksumType::from(k.to_owned())),
        ..Default::default()
    }))
}

pub(super) async fn upload_part(
    s: &GristS3,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    if !(1..=10_000).contains(&input.part_number) {
        return Err(s3_error!(
            InvalidArgument,
            "part number must be between 1 and 10000"
        ));
    }
    let url = format!(
        "{}&upload_id={}&part={}",
        s.owner_url("mpu", &bck, &input.key)?,
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
    require_length(&req.headers, content_length)?;
    let stream = checked_body(
        body,
        &req.headers,
        &algos,
        content_length,
        trailers,
        failure.clone(),
    );
    let sse_key = super::sse::customer_key(&req.headers)?;
    let r = s.proxy.http.put(url);
    let mut r = match &sse_key {
        // Checked on the plaintext, stored as ciphertext under a fresh IV of the part's own
        // (kept with it); the target refuses the part unless the upload has the same key.
        Some(key) => {
            let iv = super::sse::new_iv();
            let keystream = super::sse::Keystream::single(key, iv);
            r.header(gristmill_core::sse::KEY_CHECK_KEY, key.check())
                .header(gristmill_core::sse::IV_KEY, hex::encode(iv))
                .body(reqwest::Body::wrap_stream(keystream.wrap(stream)))
        }
        None => r.body(reqwest::Body::wrap_stream(stream)),
    };
    if !algos.is_empty() && sse_key.is_none() {
        r = r.header(gristmill_core::api::header::S3_CHECKSUMS, algos.join(","));
    }
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
    // The part's checksums as the target computed them (the requested ones and the
    // upload's own).
    let sum = |algo: &str| part_checksum(&part, algo);
    Ok(S3Response::new(UploadPartOutput {
        sse_customer_algorithm: sse_key.as_ref().map(|_| "AES256".to_owned()),
        sse_customer_key_md5: sse_key.as_ref().map(|k| k.md5().to_owned()),
        e_tag: part["etag"].as_str().map(quoted),
        checksum_crc32: sum("crc32"),
        checksum_crc32c: sum("crc32c"),
        checksum_sha1: sum("sha1"),
        checksum_sha256: sum("sha256"),
        checksum_crc64nvme: sum("crc64nvme"),
        ..Default::default()
    }))
}

/// A stored part's checksum of `algo` (lowercase), as the target listed it.
fn part_checksum(part: &serde_json::Value, algo: &str) -> Option<String> {
    part["checksums"][format!("x-amz-checksum-{algo}")]
        .as_str()
        .map(str::to_owned)
}

/// `x-amz-copy-source-range: bytes=first-last`, both given and in order (S3 takes no other
/// form).
fn copy_source_range(v: &str) -> S3Result<(u64, u64)> {
    let parsed = v.strip_prefix("bytes=").and_then(|r| {
        let (a, b) = r.split_once('-')?;
        Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
    });
    match parsed {
        Some((first, last)) if first <= last => Ok((first, last)),
        _ => Err(s3_error!(
            InvalidArgument,
            "x-amz-copy-source-range must be bytes=first-last with first <= last, not {v:?}"
        )),
    }
}

pub(super) async fn upload_part_copy(
    s: &GristS3,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    let (src_bucket, src_key, src_version) = copy_source(&input.copy_source)?;
    let src = s.existing(&src_bucket).await?;
    let src_url = super::versioning::version_url(
        s.owner_url("objects", &src, &src_key)?,
        src_version.as_deref(),
    )?;
    let mut get = copy_source_conditions(s.proxy.http.get(src_url), &req.headers);
    let range = input
        .copy_source_range
        .as_deref()
        .map(copy_source_range)
        .transpose()?;
    if let Some((first, last)) = range {
        get = get.header("range", format!("bytes={first}-{last}"));
    }
    let resp = s.send(get).await?;
    if resp.status() == reqwest::StatusCode::NOT_MODIFIED {
        return Err(s3_error!(
            PreconditionFailed,
            "a copy-source condition does not hold"
        ));
    }
    if resp.status() == reqwest::StatusCode::RANGE_NOT_SATISFIABLE {
        return Err(s3_error!(
            InvalidRange,
            "x-amz-copy-source-range starts beyond the source object"
        ));
    }
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    let src_attrs = Attrs::from(resp.headers());
    super::sse::refuse_copy_of(&src_attrs)?;
    if super::public::closed_to_anonymous(&req.extensions, &src_attrs) {
        return Err(s3_error!(AccessDenied, "the copy source's ACL is private"));
    }
    // S3 takes only a range inside the object (an HTTP server would shorten it).
    if let Some((_, last)) = range {
        let size = resp
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit('/').next())
            .and_then(|v| v.parse::<u64>().ok())
            .or(resp.content_length());
        if size.is_none_or(|size| last >= size) {
            return Err(s3_error!(
                InvalidRange,
                "x-amz-copy-source-range ends beyond the source object"
            ));
        }
    }
    let len = resp.content_length();
    let url = format!(
        "{}&upload_id={}&part={}",
        s.owner_url("mpu", &bck, &input.key)?,
        input.upload_id,
        input.part_number
    );
    let mut put = s
        .proxy
        .http
        .put(url)
        .body(reqwest::Body::wrap_stream(resp.bytes_stream()));
    if let Some(n) = len {
        put = put.header(reqwest::header::CONTENT_LENGTH, n);
    }
    let resp = s.send(put).await?;
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

pub(super) async fn complete_multipart_upload(
    s: &GristS3,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    let listed = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default();
    // Part checksums the client lists: the target checks them against the stored ones.
    let checksums: std::collections::BTreeMap<u32, String> = listed
        .iter()
        .filter_map(|p| {
            let sum = p
                .checksum_crc32
                .clone()
                .or_else(|| p.checksum_crc32c.clone())
                .or_else(|| p.checksum_sha1.clone())
                .or_else(|| p.checksum_sha256.clone())
                .or_else(|| p.checksum_crc64nvme.clone())?;
            Some((p.part_number.unwrap_or(0).max(0) as u32, sum))
        })
        .collect();
    let parts: Vec<(u32, String)> = listed
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
        s.owner_url("mpu", &bck, &input.key)?,
        input.upload_id
    );
    // The whole object's checksum, when the client declares it: the target checks it.
    let object_checksums: std::collections::BTreeMap<&str, &str> = req
        .headers
        .iter()
        .filter(|(k, _)| {
            k.as_str().starts_with("x-amz-checksum-") && k.as_str() != "x-amz-checksum-type"
        })
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
        .collect();
    let post = s.proxy.http.post(url).json(&serde_json::json!({
        "parts": parts,
        "checksums": checksums,
        "object_checksums": object_checksums,
    }));
    let resp = s
        .send(forward(post, &req.headers, &CONDITIONAL_WRITES))
        .await?;
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    let attrs = Attrs::from(resp.headers());
    Ok(S3Response::new(CompleteMultipartUploadOutput {
        bucket: Some(bck.name.clone()),
        key: Some(input.key.clone()),
        e_tag: Some(quoted(&attrs.etag)),
        version_id: super::versioning::version_of(&attrs),
        location: Some(format!("/{}/{}", bck.name, input.key)),
        checksum_crc32: attrs.checksum("crc32"),
        checksum_crc32c: attrs.checksum("crc32c"),
        checksum_sha1: attrs.checksum("sha1"),
        checksum_sha256: attrs.checksum("sha256"),
        checksum_crc64nvme: attrs.checksum("crc64nvme"),
        checksum_type: attrs.checksum_type(),
        ..Default::default()
    }))
}

pub(super) async fn abort_multipart_upload(
    s: &GristS3,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    let url = format!(
        "{}&upload_id={}",
        s.owner_url("mpu", &bck, &input.key)?,
        input.upload_id
    );
    let resp = s.send(s.proxy.http.delete(url)).await?;
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub(super) async fn list_parts(
    s: &GristS3,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    let url = format!(
        "{}&upload_id={}",
        s.owner_url("mpu", &bck, &input.key)?,
        input.upload_id
    );
    let resp = s.send(s.proxy.http.get(url)).await?;
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    let upload = Attrs::from(resp.headers());
    let parts: Vec<serde_json::Value> = resp.json().await.map_err(internal)?;
    let marker = input.part_number_marker.unwrap_or(0);
    let max = input.max_parts.unwrap_or(1000).clamp(1, 1000) as usize;
    let mut selected: Vec<&serde_json::Value> = parts
        .iter()
        .filter(|p| p["part"].as_i64().unwrap_or(0) > i64::from(marker))
        .collect();
    let truncated = selected.len() > max;
    selected.truncate(max);
    let bucket_owner = s
        .proxy
        .bmd()
        .get(&bck)
        .map(|r| r.props.owner.clone())
        .unwrap_or_default();
    let owner = super::public::owner_of(&upload, &bucket_owner);
    Ok(S3Response::new(ListPartsOutput {
        initiator: Some(Initiator {
            id: owner.id.clone(),
            display_name: owner.display_name.clone(),
        }),
        owner: Some(owner),
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
                    checksum_crc32: part_checksum(p, "crc32"),
                    checksum_crc32c: part_checksum(p, "crc32c"),
                    checksum_sha1: part_checksum(p, "sha1"),
                    checksum_sha256: part_checksum(p, "sha256"),
                    checksum_crc64nvme: part_checksum(p, "crc64nvme"),
                })
                .collect(),
        ),
        ..Default::default()
    }))
}

pub(super) async fn list_multipart_uploads(
    s: &GristS3,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    let smap = s.proxy.smap();
    let urls: Vec<String> = smap
        .active_targets()
        .map(|t| format!("{}/v1/mpu/{}?{}", t.url(), bck.name, bucket_query(&bck)))
        .collect();
    let requests = urls.into_iter().map(|url| async move {
        let resp = s.send(s.proxy.http.get(url)).await?;
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
