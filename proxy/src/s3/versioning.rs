//! S3 object versioning of native buckets: Put/GetBucketVersioning (the bucket property
//! `versioning.s3`), version ids on the object operations, and ListObjectVersions over the
//! native listing with `LS_VERSIONS`.
//!
//! The targets keep the versions (see `target/src/store/index.rs`): the current version under
//! the object's name, noncurrent versions and delete markers under names of their own that sort
//! right after it, newest first, and are placed with it. A listing of those names in order is
//! therefore already S3's order: by key, then newest version first.

use super::common::*;
use gristmill_core::api::{
    ENTRY_DELETE_MARKER, LS_VERSIONS, ListEntry, ListObjectsMsg, S3_VERSIONING_ENABLED,
    S3_VERSIONING_SUSPENDED,
};
use gristmill_core::name::split_version_slot;
use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response, S3Result, s3_error};

pub(super) use gristmill_core::name::NULL_VERSION_ID as NULL;
use gristmill_core::name::VERSION_ID_KEY;

/// Checks a client's version id: "null" or one this cluster could have minted (32 hex digits).
pub(super) fn check_version_id(id: &str) -> S3Result<()> {
    if gristmill_core::name::is_version_id(id) {
        Ok(())
    } else {
        Err(s3_error!(InvalidArgument, "Invalid version id specified"))
    }
}

/// A target URL for one version of an object (`url` already has a query).
pub(super) fn version_url(url: String, version_id: Option<&str>) -> S3Result<String> {
    match version_id {
        None => Ok(url),
        Some(id) => {
            check_version_id(id)?;
            Ok(format!(
                "{url}&{}={id}",
                gristmill_core::api::query::VERSION_ID
            ))
        }
    }
}

/// The version id a target answered with (`ais-version-id`); none for the null version, as S3
/// sends no `x-amz-version-id` for it.
pub(super) fn answered_version(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get(gristmill_core::api::header::VERSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The version id of an object a target described (none for the null version).
pub(super) fn version_of(attrs: &Attrs) -> Option<String> {
    attrs.get(VERSION_ID_KEY).filter(|v| v != NULL)
}

/// Whether a target's answer concerns a delete marker.
pub(super) fn answered_marker(headers: &reqwest::header::HeaderMap) -> bool {
    headers
        .get(gristmill_core::api::header::DELETE_MARKER)
        .is_some_and(|v| v.as_bytes() == b"true")
}

/// A read of a version that is a delete marker: S3's 405 with `x-amz-delete-marker: true`.
pub(super) fn marker_error(version_id: Option<String>) -> S3Error {
    let mut e = s3_error!(
        MethodNotAllowed,
        "The specified method is not allowed against this resource."
    );
    e.set_headers(marker_headers(version_id));
    e
}

/// `x-amz-delete-marker: true` and the marker's version id (none for the null marker).
pub(super) fn marker_headers(version_id: Option<String>) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static("true"),
    );
    if let Some(v) = version_id.and_then(|id| http::HeaderValue::from_str(&id).ok()) {
        headers.insert("x-amz-version-id", v);
    }
    headers
}

pub(super) async fn put_bucket_versioning(
    s: &GristS3,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    if bck.is_remote() {
        return Err(s3_error!(
            NotImplemented,
            "versioning of a remote bucket is its backend's"
        ));
    }
    if input.versioning_configuration.mfa_delete.is_some() {
        return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
    }
    let status = match input
        .versioning_configuration
        .status
        .as_ref()
        .map(|s| s.as_str())
    {
        Some(S3_VERSIONING_ENABLED) => S3_VERSIONING_ENABLED,
        Some(S3_VERSIONING_SUSPENDED) => S3_VERSIONING_SUSPENDED,
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "the versioning status is Enabled or Suspended"
            ));
        }
    };
    if status == S3_VERSIONING_SUSPENDED && super::object_lock::props(s, &bck).enabled {
        return Err(s3_error!(
            InvalidBucketState,
            "An Object Lock configuration is present on this bucket, so the versioning state cannot be changed."
        ));
    }
    s.set_props(&bck, serde_json::json!({"versioning": {"s3": status}}))
        .await?;
    Ok(S3Response::new(PutBucketVersioningOutput::default()))
}

pub(super) async fn get_bucket_versioning(
    s: &GristS3,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let bck = s.existing(&req.input.bucket).await?;
    let state = s
        .proxy
        .bmd()
        .get(&bck)
        .map(|r| r.props.versioning.s3.clone())
        .unwrap_or_default();
    Ok(S3Response::new(GetBucketVersioningOutput {
        // Never set: no Status at all (S3's answer for a bucket that never had versioning).
        status: (!state.is_empty()).then(|| BucketVersioningStatus::from(state)),
        ..Default::default()
    }))
}

/// One entry of a versions listing, by its object name.
struct Version {
    key: String,
    entry: ListEntry,
    latest: bool,
}

pub(super) async fn list_object_versions(
    s: &GristS3,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let input = req.input;
    let bck = s.existing(&input.bucket).await?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = input.max_keys.unwrap_or(1000).clamp(0, 1000) as usize;
    let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
    let key_marker = input.key_marker.clone().unwrap_or_default();
    let id_marker = input
        .version_id_marker
        .clone()
        .filter(|v| !v.is_empty() && !key_marker.is_empty());
    if let Some(id) = &id_marker {
        check_version_id(id)?;
    }
    // Where the walk starts: after every version of the key marker, or after one version of
    // it (the stored name of that version, asked of the target that holds it).
    let mut cursor = match &id_marker {
        None if key_marker.is_empty() => String::new(),
        None => after_every_version(&resume_after(&key_marker, delimiter.as_deref())),
        // A minted id starts with the generation its version is ordered by: the listing
        // resumes right after that version's stored name (which sorts after the current
        // record, so this also holds when the marker is the current version).
        Some(id) if id != NULL => {
            let generation = u64::from_str_radix(&id[..16], 16)
                .map_err(|_| s3_error!(InvalidArgument, "Invalid version id specified"))?;
            gristmill_core::name::version_slot(&key_marker, generation)
        }
        Some(id) => stored_name_of(s, &bck, &key_marker, id).await?,
    };
    // The first key's versions are not the latest when the walk starts inside them.
    let mut previous_key = id_marker.as_ref().map(|_| key_marker.clone());
    let mut versions: Vec<Version> = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    let mut truncated = false;
    'walk: loop {
        if max == 0 {
            break;
        }
        let want = (max - versions.len() - prefixes.len() + 1).clamp(2, 1000);
        let lso = ListObjectsMsg {
            prefix: prefix.clone(),
            pagesize: want as u64,
            start_after: cursor.clone(),
            props: "name,size,checksum,version".into(),
            flags: LS_VERSIONS,
            ..Default::default()
        };
        let page = crate::remote::list_bucket(&s.proxy, &bck, lso)
            .await
            .map_err(|e| s3_error_from(e, false))?;
        if page.entries.is_empty() {
            break;
        }
        let done = page.continuation_token.is_empty();
        let mut skipped = false;
        for e in page.entries {
            let (key, _) = split_version_slot(&e.name);
            let key = key.to_owned();
            let rest = &key[prefix.len().min(key.len())..];
            let cp = delimiter.as_deref().and_then(|d| {
                rest.find(d)
                    .map(|i| format!("{prefix}{}", &rest[..i + d.len()]))
            });
            if versions.len() + prefixes.len() == max {
                truncated = true;
                break 'walk;
            }
            cursor = e.name.clone();
            if let Some(cp) = cp {
                prefixes.push(cp.clone());
                cursor = format!("{cp}\u{10FFFF}");
                skipped = true;
                previous_key = None;
                break;
            }
            let latest = previous_key.as_deref() != Some(key.as_str());
            previous_key = Some(key.clone());
            versions.push(Version {
                key,
                entry: e,
                latest,
            });
        }
        if done && !skipped {
            break;
        }
    }
    // The next markers: the last item returned (a common prefix has no version id marker).
    let (next_key, next_id) = if !truncated {
        (None, None)
    } else {
        let last_prefix = prefixes.last();
        match versions.last() {
            Some(v) if last_prefix.is_none_or(|p| v.key > *p) => {
                (Some(v.key.clone()), Some(v.entry.version.clone()))
            }
            _ => (last_prefix.cloned(), None),
        }
    };
    let owner = super::public::listed_owner(s, &bck);
    let (markers, objects): (Vec<Version>, Vec<Version>) = versions
        .into_iter()
        .partition(|v| v.entry.flags & ENTRY_DELETE_MARKER != 0);
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(bck.name.clone()),
        prefix: Some(prefix),
        delimiter,
        max_keys: Some(max as i32),
        is_truncated: Some(truncated),
        key_marker: input.key_marker.clone(),
        version_id_marker: input.version_id_marker.clone(),
        next_key_marker: next_key,
        next_version_id_marker: next_id,
        versions: Some(
            objects
                .into_iter()
                .map(|v| ObjectVersion {
                    e_tag: Some(entry_etag(&v.entry)),
                    last_modified: Some(timestamp(v.entry.mtime_ns)),
                    size: Some(v.entry.size as i64),
                    version_id: Some(version_or_null(&v.entry)),
                    is_latest: Some(v.latest),
                    key: Some(v.key),
                    owner: Some(owner.clone()),
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    ..Default::default()
                })
                .collect(),
        ),
        delete_markers: Some(
            markers
                .into_iter()
                .map(|v| DeleteMarkerEntry {
                    last_modified: Some(timestamp(v.entry.mtime_ns)),
                    version_id: Some(version_or_null(&v.entry)),
                    is_latest: Some(v.latest),
                    key: Some(v.key),
                    owner: Some(owner.clone()),
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

fn version_or_null(e: &ListEntry) -> String {
    if e.version.is_empty() {
        NULL.to_owned()
    } else {
        e.version.clone()
    }
}

/// A listing cursor past every stored name of `key` (its current version and its version
/// slots, which sort between `key` and `key\x01`).
fn after_every_version(key: &str) -> String {
    format!("{key}\u{0}g")
}

/// The stored name of one version of `key` (the key itself for the current version): a listing
/// resumes right after it.
async fn stored_name_of(
    s: &GristS3,
    bck: &gristmill_core::Bck,
    key: &str,
    id: &str,
) -> S3Result<String> {
    let url = version_url(s.owner_url("objects", bck, key)?, Some(id))?;
    let resp = s.send(s.proxy.http.head(url)).await?;
    if resp.status() == http::StatusCode::METHOD_NOT_ALLOWED || resp.status().is_success() {
        if let Some(name) = resp
            .headers()
            .get(gristmill_core::api::header::STORED_NAME)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| percent_encoding::percent_decode_str(v).decode_utf8().ok())
        {
            return Ok(name.into_owned());
        }
        return Ok(key.to_owned());
    }
    if resp.status() == http::StatusCode::NOT_FOUND {
        // The null version is gone meanwhile (deleted for good, or replaced by a later null
        // write): its place is unknown, so the listing goes on with the next key — older
        // versions of this key are then left out of this listing (a race with that delete).
        return Ok(after_every_version(key));
    }
    Err(node_error(resp, true).await)
}
