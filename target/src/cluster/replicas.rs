//! `mirror.copies = N`: a PUT staged on the replicas before it is committed anywhere, and
//! replicas sent after a commit.

use crate::Target;
use crate::cluster::peer::bucket_query;
use crate::cluster::peer::gen_of;
use crate::cluster::peer::internal_url;
use crate::cluster::peer::peer_error;
use crate::cluster::rebalance::generation_kept;
use crate::cluster::rebalance::send_to;
use crate::cluster::rebalance::sent_gen;
use crate::store::meta::ObjectMeta;
use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use gristmill_core::api::header as h;
use gristmill_core::api::internal::REPLICA;
use gristmill_core::{ApiError, Bck, ErrorKind};

/// Replica copies written and verified on this target for an owner's PUT that is not yet
/// committed, by stage id: invisible until the owner commits them (or dropped after
/// [`STAGE_TTL`], removing the temp file).
pub(crate) type Stages = std::sync::Mutex<std::collections::HashMap<String, Stage>>;

/// A staged replica: its bytes, when it was staged, and its admission (a rebalance walk
/// waits for it to be committed or dropped).
pub(crate) struct Stage {
    pending: crate::store::PendingWrite,
    at: std::time::Instant,
    _admitted: crate::cluster::gate::Admission,
}

/// Drops staged replicas whose owner never committed them within [`STAGE_TTL`].
pub(crate) fn drop_expired_stages(t: &Target) {
    t.stages
        .lock()
        .expect("stages lock")
        .retain(|_, s| s.at.elapsed() < STAGE_TTL);
}

/// How long a staged replica waits for its owner's commit.
pub(crate) const STAGE_TTL: std::time::Duration = std::time::Duration::from_secs(120);

/// Tells the replicas to drop a stage, in the background and briefly (one that does not
/// answer — paused, dead — drops its own after [`STAGE_TTL`]): the failed PUT answers now.
pub(crate) fn abort_stages(
    t: &Target,
    targets: &[gristmill_core::Node],
    bck: &Bck,
    name: &str,
    stage: &str,
) {
    for n in targets {
        let req = t
            .relay
            .delete(internal_url(n, bck, name))
            .query(&bucket_query(bck))
            .query(&[("stage", stage)])
            .timeout(std::time::Duration::from_secs(5))
            .send();
        tokio::spawn(async move {
            let _ = req.await;
        });
    }
}

/// Sends the staged bytes (`path`, the owner's temp file) to one replica target.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn stage_on(
    t: &Target,
    node: &gristmill_core::Node,
    bck: &Bck,
    name: &str,
    stage: &str,
    path: &std::path::Path,
    size: u64,
    cksum: &str,
) -> Result<(), ApiError> {
    let file = std::fs::File::open(path)
        .map_err(|e| ApiError::internal(format!("reopening a staged write: {e}")))?;
    // A paused or wedged replica must not hold the PUT forever: 10 s plus 20 MiB/s.
    let limit = std::time::Duration::from_secs(10 + size / (20 << 20));
    let resp = t
        .relay
        .put(internal_url(node, bck, name))
        .query(&bucket_query(bck))
        .query(&[
            (gristmill_core::api::query::TRANSFER, REPLICA),
            ("stage", stage),
        ])
        .header(reqwest::header::CONTENT_LENGTH, size)
        .header(h::CHECKSUM_TYPE, crate::store::CKSUM_XXHASH)
        .header(h::CHECKSUM_VALUE, cksum)
        .body(reqwest::Body::wrap_stream(
            crate::store::stream::file_stream(file, 0, size),
        ))
        .timeout(limit)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("replica on {}: {e}", node.daemon_id)))?;
    if !resp.status().is_success() {
        return Err(peer_error(resp, &format!("replica on {}", node.daemon_id)).await);
    }
    Ok(())
}

/// Tells one replica target to make its staged copy the object, as the owner committed it.
pub(crate) async fn commit_stage(
    t: &Target,
    node: &gristmill_core::Node,
    bck: &Bck,
    name: &str,
    stage: &str,
    meta: &ObjectMeta,
) -> Result<(), ApiError> {
    let mut last = None;
    for _ in 0..3 {
        let resp = t
            .relay
            .post(internal_url(node, bck, name))
            .query(&bucket_query(bck))
            .query(&[("stage", stage)])
            .header(h::GEN, sent_gen(meta))
            .header(h::VERSION, meta.version.as_str())
            .header(h::MTIME, meta.mtime_ns.to_string())
            .header(
                h::CUSTOM_MD_JSON,
                gristmill_core::api::encode_custom_md(&meta.custom),
            )
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => {
                return Err(ApiError::new(
                    ErrorKind::from_status(r.status()),
                    format!("commit answered {}", r.status()),
                ));
            }
            Err(e) => last = Some(e.to_string()),
        }
    }
    Err(ApiError::unavailable(last.unwrap_or_default()))
}

/// Replica side of [`commit_with_replicas`]: receives, verifies and keeps a staged copy.
pub(crate) async fn stage_receive(
    t: &Target,
    bck: &Bck,
    name: &str,
    stage: &str,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let headers = req.headers();
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let expected_size: Option<u64> = get("content-length").parse().ok();
    t.space.check_room(bck, name, expected_size.unwrap_or(0))?;
    let admitted = crate::cluster::rebalance::admit_copy(t, bck, name).await?;
    let opts = crate::store::PutOptions {
        durable: !bck.is_remote(),
        expected_size,
        expected_xxhash: Some(get(h::CHECKSUM_VALUE).to_owned()).filter(|v| !v.is_empty()),
        ..Default::default()
    };
    let mut pending = t.store.begin_write(bck, name, opts).await?;
    pending
        .write_stream(req.into_body().into_data_stream())
        .await?;
    pending.verify().await?;
    drop_expired_stages(t);
    t.stages.lock().expect("stages lock").insert(
        stage.to_owned(),
        Stage {
            pending,
            at: std::time::Instant::now(),
            _admitted: admitted,
        },
    );
    Ok(Response::new(Body::empty()))
}

/// Replica side: the owner committed; the staged copy becomes the object (unless a newer
/// generation is here already).
pub(crate) async fn stage_commit(
    t: &Target,
    bck: &Bck,
    name: &str,
    stage: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let generation = gen_of(headers);
    if generation == 0 {
        return Err(ApiError::bad_request(format!(
            "a stage commit needs {}",
            h::GEN
        )));
    }
    let custom = match get(h::CUSTOM_MD_JSON) {
        "" => Default::default(),
        v => gristmill_core::api::decode_custom_md(v)?,
    };
    // Its admission is held until the commit is done.
    let Some(Stage {
        mut pending,
        _admitted,
        ..
    }) = t.stages.lock().expect("stages lock").remove(stage)
    else {
        return Err(ApiError::not_found(format!("no staged copy {stage}")));
    };
    let opts = pending.options_mut();
    opts.generation = crate::store::index::GenRule::IfNewer(generation);
    opts.version = get(h::VERSION).to_owned();
    opts.mtime_ns = get(h::MTIME).parse().ok().filter(|m: &i64| *m > 0);
    opts.custom = custom;
    let stored = pending.commit().await;
    generation_kept(t, bck, name, stored)
}

/// Replica side: the owner gave the PUT up; the staged copy goes.
pub(crate) fn stage_abort(t: &Target, stage: &str) -> bool {
    t.stages
        .lock()
        .expect("stages lock")
        .remove(stage)
        .is_some()
}

/// After the owner stored an object: writes its replicas (copies > 1) and waits for all of
/// them, so the PUT is acknowledged only when every copy is stored.
pub(crate) async fn replicate(t: &Target, bck: &Bck, meta: &ObjectMeta) -> Result<(), ApiError> {
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    if copies <= 1 {
        return Ok(());
    }
    let smap = t.smap();
    let targets: Vec<gristmill_core::Node> = smap
        .owners(&bck.object_uname(&meta.name), copies)
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
    let writes = targets.iter().map(|n| send_to(t, n, bck, meta, REPLICA));
    for r in futures::future::join_all(writes).await {
        r?;
    }
    Ok(())
}
