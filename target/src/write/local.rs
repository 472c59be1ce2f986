//! Writes on the owner: PUT (ordered after every copy a rebalance has not moved yet, staged on
//! replicas before it is visible) and DELETE (a tombstone everywhere a copy may be).

use crate::ApiResult;
use crate::Target;
use crate::read::local::object_headers;
use crate::store::PutOptions;
use crate::store::index::WriteCondition;
use crate::store::meta::ObjectMeta;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use gristmill_core::api::{self, header as h};
use gristmill_core::{ApiError, Bck};

/// A bucket's S3 versioning state ("", "Enabled", "Suspended").
pub(crate) fn s3_versioning(t: &Target, bck: &Bck) -> String {
    t.bmd()
        .get(bck)
        .map(|r| r.props.versioning.s3.clone())
        .unwrap_or_default()
}

/// Gives a write to a versioned bucket its version id, decided with its generation: a new
/// one (versioning enabled) or the null version (suspended). A client's copy of these keys
/// never counts.
pub(crate) fn version_custom(
    t: &Target,
    bck: &Bck,
    custom: &mut std::collections::BTreeMap<String, String>,
) {
    use crate::store::{DELETE_MARKER_KEY, MINT_VERSION_ID, NULL_VERSION_ID, VERSION_ID_KEY};
    custom.remove(VERSION_ID_KEY);
    custom.remove(DELETE_MARKER_KEY);
    let id = match s3_versioning(t, bck).as_str() {
        api::S3_VERSIONING_ENABLED => MINT_VERSION_ID,
        api::S3_VERSIONING_SUSPENDED => NULL_VERSION_ID,
        _ => return,
    };
    custom.insert(VERSION_ID_KEY.to_owned(), id.to_owned());
}

/// Marks an answer as concerning one version: `ais-version-id` (not for the null version, as
/// S3 sends none), and `ais-delete-marker: true` when that version is a delete marker.
fn version_headers(resp: &mut axum::response::Response, id: &str, marker: bool) {
    let hs = resp.headers_mut();
    if marker {
        hs.insert(h::DELETE_MARKER, header::HeaderValue::from_static("true"));
    }
    if id != crate::store::NULL_VERSION_ID
        && let Ok(v) = header::HeaderValue::from_str(id)
    {
        hs.insert(h::VERSION_ID, v);
    }
}

/// The 404 of an object that is not there; in a versioned bucket whose latest version of it is
/// a delete marker, the answer says so (`ais-delete-marker: true`, `ais-version-id`), as S3's
/// does.
pub(crate) fn not_found_in_versions(
    t: &Target,
    bck: &Bck,
    name: &str,
    e: ApiError,
) -> axum::response::Response {
    let mut resp = e.into_response();
    if s3_versioning(t, bck).is_empty() {
        return resp;
    }
    let latest = t
        .store
        .versions(bck, name)
        .ok()
        .and_then(|v| v.into_iter().next());
    if let Some(marker) = latest.filter(crate::store::index::is_delete_marker) {
        version_headers(&mut resp, crate::store::index::version_id(&marker), true);
    }
    resp
}

/// A versioned bucket's write keeps the version it replaces, so it must find it here: while a
/// rebalance has not yet moved a newer copy of the object here, the write waits (503, which
/// clients retry) instead of replacing an older one.
pub(crate) fn replaced_version_is_here(
    t: &Target,
    bck: &Bck,
    name: &str,
    elsewhere: &crate::cluster::placement::Elsewhere,
) -> Result<(), ApiError> {
    if s3_versioning(t, bck).is_empty() {
        return Ok(());
    }
    // A live copy newer than ours on another target (a tombstone there loses no version).
    let newer_elsewhere = elsewhere
        .newest
        .as_ref()
        .is_some_and(|(g, _)| *g > known_here(t, bck, name, t.store.head(bck, name).ok().as_ref()));
    // A copy on another mountpath here (a resilver not finished), which the write would drop.
    let off_its_mountpath = t.store.held_off_its_mountpath(bck, name, false)?;
    if newer_elsewhere || off_its_mountpath {
        return Err(ApiError::unavailable(format!(
            "the current version of {bck}/{name} is still being moved; retry"
        )));
    }
    Ok(())
}

/// `GET|HEAD|DELETE /v1/objects/{bucket}/{object}?version_id=`: one version of an object in a
/// versioned bucket. A delete marker cannot be read (405, `ais-delete-marker: true`); a
/// DELETE removes that version for good (the newest remaining one becomes current again).
///
/// `here_only` (the node-to-node route): this target's own records; otherwise a version that is
/// not here is looked for on the other possible holders, and a DELETE reaches them all.
pub(crate) async fn one_version(
    t: &Target,
    bck: &Bck,
    name: &str,
    id: &str,
    params: &std::collections::HashMap<String, String>,
    req: Request,
    here_only: bool,
) -> ApiResult {
    if bck.is_remote() {
        return Err(ApiError::bad_request(format!(
            "{bck} is a remote bucket: version ids are for native buckets"
        )));
    }
    if !gristmill_core::name::is_version_id(id) {
        return Err(ApiError::bad_request(format!("invalid version id {id:?}")));
    }
    match *req.method() {
        axum::http::Method::DELETE => {
            // Object Lock is checked by the owner's delete, in its index transaction; the
            // other holders' copies follow that decision.
            // A holder asked by the owner checks too when told to (`LOCK_CHECK_HEADER`): the
            // owner may not hold the version yet while a rebalance moves it.
            let checked = !here_only || req.headers().contains_key(LOCK_CHECK_HEADER);
            let lock = checked.then(|| crate::store::index::LockCheck {
                now_ns: crate::store::now_ns(),
                bypass_governance: bypasses_governance(req.headers()),
            });
            let removed = match t.store.delete_version(bck, name, id, lock).await {
                Ok((removed, _)) => Some(removed),
                Err(crate::StoreError::Api(e))
                    if e.kind == gristmill_core::ErrorKind::NoSuchVersion =>
                {
                    if here_only {
                        return Err(e);
                    }
                    None
                }
                Err(e) => return Err(e.into()),
            };
            let elsewhere = if here_only {
                false
            } else {
                crate::cluster::placement::delete_version_everywhere(t, bck, name, id, lock).await?
            };
            if removed.is_none() && !elsewhere {
                return Err(ApiError::new(
                    gristmill_core::ErrorKind::NoSuchVersion,
                    format!("object {bck}/{name} has no version {id}"),
                ));
            }
            let mut resp = StatusCode::NO_CONTENT.into_response();
            version_headers(
                &mut resp,
                id,
                removed
                    .as_ref()
                    .is_some_and(crate::store::index::is_delete_marker),
            );
            Ok(resp)
        }
        axum::http::Method::GET | axum::http::Method::HEAD => {
            for _ in 0..3 {
                let meta = match t.store.find_version(bck, name, id) {
                    Ok(m) => m,
                    Err(crate::StoreError::Api(e))
                        if e.kind == gristmill_core::ErrorKind::NoSuchVersion && !here_only =>
                    {
                        let found = crate::read::past_owner::read_version_elsewhere(
                            t,
                            bck,
                            name,
                            req.method(),
                            req.uri(),
                            req.headers(),
                        )
                        .await;
                        return found.ok_or(e);
                    }
                    Err(e) => return Err(e.into()),
                };
                if crate::store::index::is_delete_marker(&meta) {
                    let mut resp = (
                        StatusCode::METHOD_NOT_ALLOWED,
                        axum::Json(serde_json::json!({
                            "message": format!("{bck}/{name} version {id} is a delete marker"),
                            "status": 405,
                            "tcode": gristmill_core::ErrorKind::MethodNotAllowed,
                        })),
                    )
                        .into_response();
                    version_headers(&mut resp, id, true);
                    if let Ok(v) = header::HeaderValue::from_str(
                        &gristmill_core::name::encode_path(&meta.name),
                    ) {
                        resp.headers_mut().insert(h::STORED_NAME, v);
                    }
                    return Ok(resp);
                }
                let resp = if req.method() == axum::http::Method::HEAD {
                    crate::read::local::head_object(t, bck, &meta.name, req.headers())?
                } else {
                    let read = crate::read::local::ReadRequest::of(params, &req);
                    crate::read::get_object(t, bck, &meta.name, &read).await?
                };
                // The current version read by its name: a write between the lookup and the
                // read may have made it noncurrent (and moved it); then look again.
                let answered = resp
                    .headers()
                    .get(h::VERSION_ID)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(crate::store::NULL_VERSION_ID);
                if meta.name != name || answered == id {
                    return Ok(resp);
                }
            }
            Err(ApiError::unavailable(format!(
                "{bck}/{name} kept changing while version {id} was read; retry"
            )))
        }
        // A metadata change (S3 tagging) of one version: of the record it is stored under.
        axum::http::Method::PATCH if !here_only => {
            let meta = match t.store.find_version(bck, name, id) {
                Ok(m) => m,
                Err(crate::StoreError::Api(e))
                    if e.kind == gristmill_core::ErrorKind::NoSuchVersion =>
                {
                    // Not here yet: a rebalance has not moved it. The change belongs to the
                    // record where it settles, so ask for a retry while placement is unsettled
                    // and another holder still has it (once settled, the answer stays).
                    if t.placement_settled() {
                        return Err(e);
                    }
                    let held = crate::read::past_owner::read_version_elsewhere(
                        t,
                        bck,
                        name,
                        &axum::http::Method::HEAD,
                        req.uri(),
                        req.headers(),
                    )
                    .await;
                    return Err(match held {
                        Some(_) => ApiError::unavailable(format!(
                            "version {id} of {bck}/{name} is still being moved here; retry"
                        )),
                        None => e,
                    });
                }
                Err(e) => return Err(e.into()),
            };
            if crate::store::index::is_delete_marker(&meta) {
                return Err(ApiError::new(
                    gristmill_core::ErrorKind::MethodNotAllowed,
                    format!("{bck}/{name} version {id} is a delete marker"),
                ));
            }
            patch_custom(t, bck, &meta.name, req).await
        }
        _ => Err(ApiError::new(
            gristmill_core::ErrorKind::MethodNotAllowed,
            format!("{} of one version of an object", req.method()),
        )),
    }
}

/// DELETE in a versioned bucket (without a version id): a delete marker becomes the latest
/// version — written like a PUT of nothing, so replicas, rebalance and generations treat it as
/// one — and what was current stays as a noncurrent version (unless both are the null
/// version, when suspended). S3 leaves a marker even when the object does not exist.
async fn delete_with_marker(t: &Target, bck: &Bck, name: &str) -> ApiResult {
    let mut custom = std::collections::BTreeMap::new();
    version_custom(t, bck, &mut custom);
    custom.insert(
        crate::store::DELETE_MARKER_KEY.to_owned(),
        "true".to_owned(),
    );
    let elsewhere = crate::cluster::placement::elsewhere(t, bck, name).await?;
    replaced_version_is_here(t, bck, name, &elsewhere)?;
    let opts = PutOptions {
        generation: crate::store::index::GenRule::Next {
            floor: elsewhere.write_floor(),
        },
        durable: true,
        expected_size: Some(0),
        custom,
        ..Default::default()
    };
    let mut pending = t.store.begin_write(bck, name, opts).await?;
    pending
        .write_stream(futures::stream::empty::<
            Result<axum::body::Bytes, std::io::Error>,
        >())
        .await?;
    let marker = commit_with_replicas(t, bck, name, pending).await?;
    crate::cluster::placement::retire_copies(t, bck, name, &elsewhere).await;
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let id = crate::store::index::version_id(&marker);
    version_headers(&mut resp, id, true);
    Ok(resp)
}

/// DELETE of a native object: a delete marker in a versioned bucket, else [`delete_object`].
pub(crate) async fn delete_native(t: &Target, bck: &Bck, name: &str) -> ApiResult {
    if !s3_versioning(t, bck).is_empty() {
        return delete_with_marker(t, bck, name).await;
    }
    delete_object(t, bck, name).await?;
    Ok(StatusCode::OK.into_response())
}

/// DELETE on the owner: buries the object here (a tombstone one generation past every copy
/// known, here and on past owners), then deletes it on every other possible holder with that
/// tombstone's generation. `NotFound` only if no node held it.
pub(crate) async fn delete_object(t: &Target, bck: &Bck, name: &str) -> Result<(), ApiError> {
    if t.store.head(bck, name).is_err()
        && let Some(holder) = crate::cluster::placement::restarting_holder(t, bck, name)
    {
        // Its only copy may be on a restarting target: refused before anything is buried.
        return Err(crate::cluster::placement::restarting_refusal(
            bck, name, &holder,
        ));
    }
    let floor = crate::cluster::placement::gen_floor(t, bck, name).await?;
    let (removed, tombstone) = t
        .store
        .bury(bck, name, crate::store::index::BuryGen::Next { floor })
        .await?;
    let elsewhere = crate::cluster::placement::delete_everywhere(t, bck, name, tombstone).await?;
    if removed.is_none() && !elsewhere {
        return Err(ApiError::not_found(format!(
            "object {bck}/{name} does not exist"
        )));
    }
    Ok(())
}

/// A PUT of a native object placed here by `placed_by` (the map the owner check used).
pub(crate) async fn put_object(
    t: &Target,
    placed_by: &gristmill_core::ClusterMap,
    bck: &Bck,
    name: &str,
    req: Request,
) -> ApiResult {
    let headers = req.headers();
    let expected_size = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let expected_xxhash = match (
        headers.get(h::CHECKSUM_TYPE).and_then(|v| v.to_str().ok()),
        headers.get(h::CHECKSUM_VALUE).and_then(|v| v.to_str().ok()),
    ) {
        (Some("xxhash"), Some(v)) => Some(v.to_owned()),
        _ => None,
    };
    let mut custom = match headers.get(h::CUSTOM_MD_JSON).and_then(|v| v.to_str().ok()) {
        Some(v) => api::decode_custom_md(v)?,
        None => Default::default(),
    };
    version_custom(t, bck, &mut custom);
    let condition = write_condition(headers)?;
    t.space.check_room(bck, name, expected_size.unwrap_or(0))?;
    // Ordered after every copy a past owner may still hold (a rebalance not yet finished).
    let elsewhere = crate::cluster::placement::elsewhere(t, bck, name).await?;
    replaced_version_is_here(t, bck, name, &elsewhere)?;
    let condition = decide_here(t, bck, name, condition, &elsewhere)?;
    let floor = elsewhere.write_floor();
    let opts = PutOptions {
        generation: crate::store::index::GenRule::Next { floor },
        durable: !bck.is_remote(),
        expected_size,
        expected_xxhash,
        compute_md5: headers
            .get(h::COMPUTE_MD5)
            .is_some_and(|v| v.as_bytes() == b"true"),
        s3_checksums: headers
            .get(h::S3_CHECKSUMS)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').map(|a| a.trim().to_owned()).collect())
            .unwrap_or_default(),
        custom,
        condition,
        ..Default::default()
    };
    let mut pending = t.store.begin_write(bck, name, opts).await?;
    pending
        .write_stream(req.into_body().into_data_stream())
        .await?;
    let meta = commit_with_replicas(t, bck, name, pending).await?;
    crate::cluster::placement::count_hinted(t, placed_by, bck, name, meta.size);
    crate::cluster::placement::retire_copies(t, bck, name, &elsewhere).await;
    let mut resp = StatusCode::OK.into_response();
    object_headers(t, bck, &meta, resp.headers_mut());
    Ok(resp)
}

/// Node-to-node version deletes that the holder must check against Object Lock itself.
pub(crate) const LOCK_CHECK_HEADER: &str = "x-grist-lock-check";

/// Whether a request bypasses GOVERNANCE retention (S3's header, also on the native API).
fn bypasses_governance(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(gristmill_core::object_lock::BYPASS_GOVERNANCE_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}

/// `PATCH /v1/objects/{bucket}/{object}` with `{"set": {key: value}, "delete": [key]}`:
/// changes the object's custom metadata without rewriting its data (S3 object tagging uses
/// it), then refreshes its replicas. Ordered like a write: while a newer copy of the object is
/// still on a past owner (a rebalance not finished), the change waits (503) rather than give
/// the old data a newer generation.
pub(crate) async fn patch_custom(t: &Target, bck: &Bck, name: &str, req: Request) -> ApiResult {
    #[derive(serde::Deserialize)]
    struct Patch {
        #[serde(default)]
        set: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        delete: Vec<String>,
    }
    let lock = crate::store::index::LockCheck {
        now_ns: crate::store::now_ns(),
        bypass_governance: bypasses_governance(req.headers()),
    };
    let body = axum::body::to_bytes(req.into_body(), 64 << 10)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?;
    let patch: Patch = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid metadata change: {e}")))?;
    // The version id and delete-marker flag are the cluster's, never a client's to change.
    if let Some(k) = patch
        .set
        .keys()
        .chain(&patch.delete)
        .find(|k| *k == crate::store::VERSION_ID_KEY || *k == crate::store::DELETE_MARKER_KEY)
    {
        return Err(ApiError::bad_request(format!(
            "metadata key {k} cannot be changed"
        )));
    }
    let elsewhere = crate::cluster::placement::elsewhere(t, bck, name).await?;
    if elsewhere.floor > known_here(t, bck, name, t.store.head(bck, name).ok().as_ref()) {
        return Err(ApiError::unavailable(format!(
            "a newer copy of {bck}/{name} is still being moved here; retry"
        )));
    }
    let meta = t
        .store
        .patch_custom(
            bck,
            name,
            &patch.set,
            &patch.delete,
            elsewhere.write_floor(),
            lock,
        )
        .await?;
    crate::cluster::replicas::replicate(t, bck, &meta).await?;
    let mut resp = StatusCode::OK.into_response();
    object_headers(t, bck, &meta, resp.headers_mut());
    Ok(resp)
}

/// The highest generation this target knows of an object: its record (`here`) or tombstone.
/// A past owner reporting more holds a newer copy than this one.
fn known_here(t: &Target, bck: &Bck, name: &str, here: Option<&ObjectMeta>) -> u64 {
    let versions = if s3_versioning(t, bck).is_empty() {
        0
    } else {
        t.store.versions_gen(bck, name).unwrap_or(0)
    };
    here.map_or(0, ObjectMeta::effective_gen)
        .max(t.store.tombstone(bck, name).unwrap_or(0))
        .max(versions)
}

/// The precondition of a conditional write: `If-None-Match: *` (only if absent),
/// `If-None-Match: "etag", ...` (absent or none of these ETags), `If-Match: *` or `If-Match:
/// "etag", ...` (only if present, with one of these ETags).
pub(crate) fn write_condition(
    headers: &axum::http::HeaderMap,
) -> Result<Option<WriteCondition>, ApiError> {
    let value = |k: header::HeaderName| -> Result<Option<&str>, ApiError> {
        headers
            .get(&k)
            .map(|v| {
                v.to_str()
                    .map(str::trim)
                    .map_err(|_| ApiError::bad_request(format!("{k} is not ASCII")))
            })
            .transpose()
    };
    match (value(header::IF_NONE_MATCH)?, value(header::IF_MATCH)?) {
        (None, None) => Ok(None),
        (Some("*"), None) => Ok(Some(WriteCondition::Absent)),
        (Some(tags), None) => Ok(Some(WriteCondition::ETagNotIn(etag_list(tags)))),
        (None, Some("*")) => Ok(Some(WriteCondition::Exists)),
        (None, Some(tags)) => Ok(Some(WriteCondition::ETagIn(etag_list(tags)))),
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "a write takes If-None-Match or If-Match, not both",
        )),
    }
}

/// The ETags of an `If-Match` / `If-None-Match` list, without quotes or `W/`.
fn etag_list(tags: &str) -> Vec<String> {
    tags.split(',')
        .map(|t| {
            t.trim()
                .trim_start_matches("W/")
                .trim_matches('"')
                .to_owned()
        })
        .filter(|t| !t.is_empty())
        .collect()
}

/// Where a conditional write is decided. Normally by the record here, atomically with the
/// commit. While a rebalance has not yet moved a newer copy (or a delete) here, by that copy
/// — and the commit then requires that the record here did not change meanwhile, so of two
/// racing conditional writes one still loses.
pub(crate) fn decide_here(
    t: &Target,
    bck: &Bck,
    name: &str,
    condition: Option<WriteCondition>,
    elsewhere: &crate::cluster::placement::Elsewhere,
) -> Result<Option<WriteCondition>, ApiError> {
    let Some(condition) = condition else {
        return Ok(None);
    };
    let here = t.store.head(bck, name).ok();
    if elsewhere.floor <= known_here(t, bck, name, here.as_ref()) {
        return Ok(Some(condition));
    }
    let etag = elsewhere.newest.as_ref().map(|(_, etag)| etag.as_str());
    if let Some(unmet) = condition.unmet_etag(etag) {
        return Err(crate::store::index::unmet_error(unmet));
    }
    Ok(Some(WriteCondition::Unchanged(
        here.as_ref().map(ObjectMeta::effective_gen),
    )))
}

/// Commits an owner's PUT with `mirror.copies = N`: the bytes, written and verified here,
/// are first staged — durable but invisible — on the N-1 replica targets; only when every
/// stage succeeded is the object committed here and then on the replicas (with the
/// generation this commit assigned). A PUT that cannot reach N copies fails before anything
/// becomes visible: readers keep the previous version (or none) on every node.
pub(crate) async fn commit_with_replicas(
    t: &Target,
    bck: &Bck,
    name: &str,
    mut pending: crate::store::PendingWrite,
) -> Result<ObjectMeta, ApiError> {
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    if copies <= 1 {
        return Ok(pending.commit().await?);
    }
    pending.verify().await?;
    let smap = t.smap();
    let targets: Vec<gristmill_core::Node> = smap
        .owners(&bck.object_uname(name), copies)
        .into_iter()
        .filter(|n| n.daemon_id != t.id)
        .cloned()
        .collect();
    if targets.len() + 1 < copies {
        return Err(ApiError::unavailable(format!(
            "{bck} keeps {copies} copies but only {} targets are active",
            targets.len() + 1
        )));
    }
    let stage = uuid::Uuid::new_v4().to_string();
    let size = pending.size();
    let cksum = pending.xxhash_hex();
    let path = pending.path().to_owned();
    let staged =
        futures::future::join_all(targets.iter().map(|n| {
            crate::cluster::replicas::stage_on(t, n, bck, name, &stage, &path, size, &cksum)
        }))
        .await;
    if let Some(Err(e)) = staged.iter().find(|r| r.is_err()) {
        let e = e.clone();
        crate::cluster::replicas::abort_stages(t, &targets, bck, name, &stage);
        pending.abort().await;
        return Err(e);
    }
    // The copy this PUT replaces, kept aside until every replica has committed: if one
    // cannot, the PUT is undone and readers see this copy again.
    let kept = t.store.keep(bck, name)?;
    let meta = match pending.commit().await {
        Ok(m) => m,
        Err(e) => {
            crate::cluster::replicas::abort_stages(t, &targets, bck, name, &stage);
            return Err(e.into());
        }
    };
    let commits = futures::future::join_all(
        targets
            .iter()
            .map(|n| crate::cluster::replicas::commit_stage(t, n, bck, name, &stage, &meta)),
    )
    .await;
    let failed: Vec<String> = targets
        .iter()
        .zip(commits)
        .filter_map(|(n, r)| r.err().map(|e| format!("{}: {}", n.daemon_id, e.message)))
        .collect();
    if failed.is_empty() {
        return Ok(meta);
    }
    // A replica had the bytes durably a moment ago and cannot commit them now (it died or
    // restarted): the PUT cannot have its copies, so it is undone — the replaced copy is
    // put back (or the new object deleted), ordered after this write, and the replicas that
    // did commit follow it.
    tracing::warn!(object = %name, bucket = %bck, replicas = ?failed, "a replica did not commit: undoing the PUT");
    let versioned = meta.custom.contains_key(crate::store::VERSION_ID_KEY);
    let null = crate::store::NULL_VERSION_ID;
    // A null write replaced a null version: that one (kept aside) is put back below, and
    // its null write replaces the failed one in every holder.
    let null_over_null = crate::store::index::version_id(&meta) == null
        && kept
            .as_ref()
            .is_some_and(|k| crate::store::index::version_id(&k.meta) == null);
    let undone = match &kept {
        // A versioned bucket's PUT is otherwise undone by deleting the new version for good
        // (here and on the replicas that committed it): the one it replaced becomes current
        // again. Putting that one back as a new write would keep the failed one as noncurrent.
        _ if versioned && !null_over_null => {
            let id = crate::store::index::version_id(&meta).to_owned();
            match t.store.delete_version(bck, name, &id, None).await {
                Ok(_) => {
                    crate::cluster::placement::delete_version_everywhere(t, bck, name, &id, None)
                        .await
                        .map(|_| ())
                }
                Err(e) => Err(e.into()),
            }
        }
        Some(kept) => match t.store.restore(bck, kept, meta.generation).await {
            Ok(back) => crate::cluster::replicas::replicate(t, bck, &back).await,
            Err(e) => Err(e.into()),
        },
        None => delete_object(t, bck, name).await,
    };
    if let Err(e) = undone {
        tracing::error!(object = %name, bucket = %bck, error = %e.message, "could not undo a PUT whose replica did not commit");
    }
    Err(ApiError::unavailable(format!(
        "{bck}/{name}: the replica(s) {} did not commit, so the PUT was undone; retry",
        failed.join(", ")
    )))
}
