//! S3 bucket operations: list, create, head, location, delete.

use super::RESERVED_BUCKETS;
use super::common::*;
use gristmill_core::Provider;
use gristmill_core::api::{self};
use reqwest::Method;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

pub(super) async fn list_buckets(
    s: &GristS3,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    // Read-your-writes on any proxy: a bucket created through another one moments ago is
    // listed (the applied state of a follower may lag, or be stale when it is cut off).
    s.proxy
        .linearize()
        .await
        .map_err(|e| s3_error!(ServiceUnavailable, "{}", e.message))?;
    let bmd = s.proxy.bmd();
    // Every bucket by the name S3 clients reach it with (see `resolve`): native ones, and
    // remote ones by their alias or their own name when that is theirs alone.
    let mut buckets: Vec<Bucket> = bmd
        .buckets
        .values()
        .filter_map(|r| {
            let native = r.bck.provider == Provider::Ais && r.bck.namespace.is_global();
            let name = if native || r.props.s3_alias.is_empty() {
                r.bck.name.clone()
            } else {
                r.props.s3_alias.clone()
            };
            let reached = native
                || resolve(&bmd, &name)
                    .ok()
                    .flatten()
                    .is_some_and(|b| b == r.bck);
            reached.then(|| Bucket {
                name: Some(name),
                creation_date: Some(timestamp(r.props.created)),
                ..Default::default()
            })
        })
        .collect();
    buckets.sort_by(|a, b| a.name.cmp(&b.name));
    // Pages of MaxBuckets in name order, resumed after the last name returned (the token).
    let input = &req.input;
    if let Some(prefix) = input.prefix.as_deref() {
        buckets.retain(|b| b.name.as_deref().is_some_and(|n| n.starts_with(prefix)));
    }
    if let Some(token) = input.continuation_token.as_deref() {
        let after = decode_token(token)?;
        buckets.retain(|b| b.name.as_deref().is_some_and(|n| n > after.as_str()));
    }
    let max = input.max_buckets.map_or(10_000, |m| m.clamp(1, 10_000)) as usize;
    let more = buckets.len() > max;
    buckets.truncate(max);
    let continuation_token = more
        .then(|| {
            buckets
                .last()
                .and_then(|b| b.name.as_deref())
                .map(encode_token)
        })
        .flatten();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        owner: Some(owner()),
        continuation_token,
        prefix: input.prefix.clone(),
    }))
}

pub(super) async fn create_bucket(
    s: &GristS3,
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
    let acting_for = s.requester(req.credentials.as_ref());
    // Refused before anything is created.
    let readable = match &req.input.acl {
        Some(acl) => super::public::acl_read(acl)?,
        None => false,
    };
    let ownership = req
        .input
        .object_ownership
        .as_ref()
        .map(|o| o.as_str().to_owned());
    if let Some(o) = &ownership {
        super::public::ownership_kept(o)?;
        if readable && o == "BucketOwnerEnforced" {
            return Err(s3_error!(
                InvalidBucketAclWithObjectOwnership,
                "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting"
            ));
        }
    }
    let created = s
        .bucket_action(Method::POST, &bck, api::action::CREATE_BUCKET, &acting_for)
        .await;
    match created {
        // AWS's CreateBucket reference: in us-east-1 (the region Gristmill answers as) the
        // owner creating its bucket again gets 200 and nothing changes; elsewhere 409.
        Err(e)
            if *e.code() == s3s::S3ErrorCode::BucketAlreadyOwnedByYou
                && in_us_east_1(&req.input) =>
        {
            return Ok(S3Response::new(CreateBucketOutput {
                location: Some(format!("/{name}")),
            }));
        }
        other => other?,
    }
    if let Some(acl) = &req.input.acl {
        super::public::apply_create_acl(s, &bck, acl).await?;
    }
    if let Some(o) = ownership {
        s.set_props(&bck, serde_json::json!({ "s3": { "object_ownership": o } }))
            .await?;
    }
    // Object Lock needs versions to keep: the bucket is versioned from the start.
    if req.input.object_lock_enabled_for_bucket == Some(true) {
        s.set_props(
            &bck,
            serde_json::json!({
                "versioning": { "s3": api::S3_VERSIONING_ENABLED },
                "s3": { "object_lock": { "enabled": true } },
            }),
        )
        .await?;
    }
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{name}")),
    }))
}

/// Whether a CreateBucket names no region other than us-east-1.
fn in_us_east_1(input: &CreateBucketInput) -> bool {
    input
        .create_bucket_configuration
        .as_ref()
        .and_then(|c| c.location_constraint.as_ref())
        .is_none_or(|l| l.as_str().is_empty() || l.as_str() == "us-east-1")
}

pub(super) async fn head_bucket(
    s: &GristS3,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    s.existing(&req.input.bucket).await?;
    Ok(S3Response::new(HeadBucketOutput::default()))
}

pub(super) async fn get_bucket_location(
    s: &GristS3,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    s.existing(&req.input.bucket).await?;
    Ok(S3Response::new(GetBucketLocationOutput::default()))
}

pub(super) async fn delete_bucket(
    s: &GristS3,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    let bck = s.existing(&req.input.bucket).await?;
    if bck.is_remote() {
        return Err(s3_error!(
            InvalidRequest,
            "{} is a remote bucket: Gristmill does not delete it over S3 (evict or remove it with `grist`)",
            bck
        ));
    }
    // Noncurrent versions and delete markers count: S3 deletes only a bucket without any.
    let lso = api::ListObjectsMsg {
        pagesize: 1,
        props: "name".into(),
        flags: api::LS_VERSIONS,
        ..Default::default()
    };
    let page = crate::remote::list_bucket(&s.proxy, &bck, lso)
        .await
        .map_err(|e| s3_error_from(e, false))?;
    if !page.entries.is_empty() {
        return Err(s3_error!(
            BucketNotEmpty,
            "bucket {} is not empty",
            bck.name
        ));
    }
    s.bucket_action(Method::DELETE, &bck, api::action::DESTROY_BUCKET, "")
        .await?;
    Ok(S3Response::new(DeleteBucketOutput {}))
}
