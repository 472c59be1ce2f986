//! S3 object tagging: `x-amz-tagging` on PutObject, CreateMultipartUpload and CopyObject
//! (`x-amz-tagging-directive`), Put/Get/DeleteObjectTagging, and the tag count on GetObject.
//!
//! Tags live in the object's custom metadata under [`TAGGING`], URL-encoded as S3 sends them
//! (`k1=v1&k2=v2`), so they travel with the object wherever its metadata does (replicas,
//! rebalance, copies). Changing them does not rewrite the data: the owner changes the record
//! in place (`PATCH /v1/objects/…`), keeping the ETag and modification time.

use super::common::*;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

/// Custom-metadata key of an object's tags.
pub(super) const TAGGING: &str = "x-amz-tagging";

/// S3's limits: tags per object, key and value lengths (characters).
const MAX_TAGS: usize = 10;
const MAX_KEY: usize = 128;
const MAX_VALUE: usize = 256;

/// What stays unescaped in an encoded tag set (as `application/x-www-form-urlencoded`).
const KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Most tags a bucket may have (S3's limit).
const MAX_BUCKET_TAGS: usize = 50;

/// Checks an object's tag set against S3's rules.
fn validate(tags: &[(String, String)]) -> S3Result<()> {
    if tags.len() > MAX_TAGS {
        // S3's code for this has no constant in s3s.
        let mut e = S3Error::with_message(
            S3ErrorCode::Custom("BadRequest".into()),
            format!(
                "an object can have at most {MAX_TAGS} tags, not {}",
                tags.len()
            ),
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        return Err(e);
    }
    validate_each(tags)
}

/// The rules every tag of a set follows (objects' and buckets').
fn validate_each(tags: &[(String, String)]) -> S3Result<()> {
    for (i, (k, v)) in tags.iter().enumerate() {
        if k.is_empty() || k.chars().count() > MAX_KEY {
            return Err(s3_error!(
                InvalidTag,
                "a tag key must have 1 to {MAX_KEY} characters"
            ));
        }
        if v.chars().count() > MAX_VALUE {
            return Err(s3_error!(
                InvalidTag,
                "a tag value can have at most {MAX_VALUE} characters"
            ));
        }
        if k.to_ascii_lowercase().starts_with("aws:") {
            return Err(s3_error!(
                InvalidTag,
                "tag keys starting with aws: are reserved"
            ));
        }
        if tags[..i].iter().any(|(other, _)| other == k) {
            return Err(s3_error!(InvalidTag, "tag key {k:?} is given twice"));
        }
    }
    Ok(())
}

/// Parses `k1=v1&k2=v2` (the `x-amz-tagging` header and the stored form).
pub(super) fn parse(encoded: &str) -> S3Result<Vec<(String, String)>> {
    let decode = |s: &str| -> S3Result<String> {
        percent_decode_str(&s.replace('+', " "))
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| s3_error!(InvalidArgument, "x-amz-tagging is not valid UTF-8"))
    };
    let tags = encoded
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect::<S3Result<Vec<_>>>()?;
    validate(&tags)?;
    Ok(tags)
}

fn encode(tags: &[(String, String)]) -> String {
    tags.iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, KEEP),
                utf8_percent_encode(v, KEEP)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The stored form of a request's `x-amz-tagging`, validated; `None` without tags.
pub(super) fn from_header(header: Option<&str>) -> S3Result<Option<String>> {
    match header {
        None => Ok(None),
        Some(h) => {
            let tags = parse(h)?;
            Ok((!tags.is_empty()).then(|| encode(&tags)))
        }
    }
}

/// How many tags an object's metadata holds.
pub(super) fn count(attrs: &Attrs) -> Option<i32> {
    let stored = attrs.get(TAGGING)?;
    let n = stored.split('&').filter(|p| !p.is_empty()).count();
    (n > 0).then_some(n as i32)
}

pub(super) async fn put_bucket_tagging(
    s: &GristS3,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let (bck, _) = super::public::administered(
        s,
        &req.input.bucket,
        req.credentials.as_ref(),
        Some("s3:PutBucketTagging"),
    )
    .await?;
    let tags: Vec<(String, String)> = req
        .input
        .tagging
        .tag_set
        .iter()
        .map(|t| {
            (
                t.key.clone().unwrap_or_default(),
                t.value.clone().unwrap_or_default(),
            )
        })
        .collect();
    if tags.len() > MAX_BUCKET_TAGS {
        return Err(s3_error!(
            InvalidTag,
            "a bucket can have at most {MAX_BUCKET_TAGS} tags, not {}",
            tags.len()
        ));
    }
    validate_each(&tags)?;
    s.set_props(&bck, serde_json::json!({ "s3": { "tags": tags } }))
        .await?;
    Ok(S3Response::new(PutBucketTaggingOutput::default()))
}

pub(super) async fn get_bucket_tagging(
    s: &GristS3,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let props = super::public::props_of(s, &req.input.bucket).await?;
    if props.s3.tags.is_empty() {
        return Err(s3_error!(
            NoSuchTagSet,
            "There is no tag set associated with the bucket"
        ));
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: props
            .s3
            .tags
            .into_iter()
            .map(|(k, v)| Tag {
                key: Some(k),
                value: Some(v),
            })
            .collect(),
    }))
}

pub(super) async fn delete_bucket_tagging(
    s: &GristS3,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    let (bck, _) = super::public::administered(
        s,
        &req.input.bucket,
        req.credentials.as_ref(),
        Some("s3:PutBucketTagging"),
    )
    .await?;
    s.set_props(&bck, serde_json::json!({ "s3": { "tags": [] } }))
        .await?;
    Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
}

/// Changes an object's custom metadata in place on its owner (which refuses, 403, a change
/// of a retention in force other than lengthening it, unless `bypass_governance` and the
/// retention is GOVERNANCE).
pub(super) async fn patch(
    s: &GristS3,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    change: serde_json::Value,
    bypass_governance: bool,
) -> S3Result<Attrs> {
    let bck = s.existing(bucket).await?;
    if bck.is_remote() {
        return Err(s3_error!(
            NotImplemented,
            "tagging objects of remote bucket {bck} is not supported"
        ));
    }
    let url = super::versioning::version_url(s.owner_url("objects", &bck, key)?, version_id)?;
    let resp = s
        .send(
            s.proxy
                .http
                .request(reqwest::Method::PATCH, url)
                .header(
                    gristmill_core::object_lock::BYPASS_GOVERNANCE_HEADER,
                    if bypass_governance { "true" } else { "false" },
                )
                .json(&change),
        )
        .await?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND && version_id.is_none() {
        return Err(s3_error!(NoSuchKey));
    }
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    Ok(Attrs::from(resp.headers()))
}

pub(super) async fn put_object_tagging(
    s: &GristS3,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let input = req.input;
    let tags: Vec<(String, String)> = input
        .tagging
        .tag_set
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
        .collect();
    validate(&tags)?;
    let change = if tags.is_empty() {
        serde_json::json!({"delete": [TAGGING]})
    } else {
        serde_json::json!({"set": {TAGGING: encode(&tags)}})
    };
    let attrs = patch(
        s,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
        change,
        false,
    )
    .await?;
    Ok(S3Response::new(PutObjectTaggingOutput {
        version_id: super::versioning::version_of(&attrs),
    }))
}

pub(super) async fn delete_object_tagging(
    s: &GristS3,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let input = req.input;
    let change = serde_json::json!({"delete": [TAGGING]});
    let attrs = patch(
        s,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
        change,
        false,
    )
    .await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput {
        version_id: super::versioning::version_of(&attrs),
    }))
}

/// An object's (or one version's) attributes, from its owner.
pub(super) async fn head(
    s: &GristS3,
    bck: &gristmill_core::Bck,
    key: &str,
    version_id: Option<&str>,
) -> S3Result<Attrs> {
    let url = super::versioning::version_url(s.owner_url("objects", bck, key)?, version_id)?;
    let resp = s.send(s.proxy.http.head(url)).await?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(if version_id.is_some() {
            s3_error!(NoSuchVersion)
        } else {
            s3_error!(NoSuchKey)
        });
    }
    if resp.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
        return Err(super::versioning::marker_error(
            super::versioning::answered_version(resp.headers()),
        ));
    }
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    Ok(Attrs::from(resp.headers()))
}

pub(super) async fn get_object_tagging(
    s: &GristS3,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    let attrs = head(s, &bck, &input.key, input.version_id.as_deref()).await?;
    let tags = match attrs.get(TAGGING) {
        Some(stored) => parse(&stored)?,
        None => Vec::new(),
    };
    Ok(S3Response::new(GetObjectTaggingOutput {
        version_id: super::versioning::version_of(&attrs),
        tag_set: tags
            .into_iter()
            .map(|(k, v)| Tag {
                key: Some(k),
                value: Some(v),
            })
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(n: usize) -> Vec<(String, String)> {
        (0..n).map(|i| (format!("k{i}"), "v".into())).collect()
    }

    #[test]
    fn parse_encode_and_the_limits() {
        let parsed = parse("a=1&b%20c=x+y&empty=").unwrap();
        assert_eq!(
            parsed,
            [
                ("a".into(), "1".into()),
                ("b c".into(), "x y".into()),
                ("empty".into(), String::new())
            ]
        );
        assert_eq!(parse(&encode(&parsed)).unwrap(), parsed);
        assert_eq!(from_header(Some("")).unwrap(), None);
        assert!(validate(&tags(10)).is_ok());
        let code = |t: &[(String, String)]| validate(t).unwrap_err().code().as_str().to_owned();
        assert_eq!(code(&tags(11)), "BadRequest");
        assert_eq!(code(&[("k".repeat(129), String::new())]), "InvalidTag");
        assert_eq!(code(&[("k".into(), "v".repeat(257))]), "InvalidTag");
        assert_eq!(code(&[("aws:x".into(), String::new())]), "InvalidTag");
        assert_eq!(code(&[(String::new(), String::new())]), "InvalidTag");
        assert_eq!(
            code(&[("k".into(), "1".into()), ("k".into(), "2".into())]),
            "InvalidTag"
        );
    }
}
