//! S3 multipart uploads across owner changes: an upload's parts are staged on the target that
//! owned the object when the upload began. When the owner changes (a target joins or leaves)
//! the new owner, on the first request that names the upload, takes it over from whichever
//! target holds it — the holder renames it out of reach (no part can land there any more),
//! the new owner copies its files, makes them durable, puts the upload in place, and the
//! holder drops its copy. Requests for one upload that need it here wait for each other, and
//! so do completions of one upload: a retried CompleteMultipartUpload that arrives while the
//! first is still assembling waits for it and gets the same answer.

use crate::Target;
use crate::cluster::peer::bucket_query;
use futures::StreamExt;
use gristmill_core::{ApiError, Bck};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tokio::io::AsyncWriteExt;

/// The node route an upload is handed over by.
pub(crate) const INTERNAL_MPU: &str = "/v1/internal/mpu";

/// One lock per upload id in use (dropped with its last holder).
#[derive(Default)]
pub(crate) struct UploadLocks(Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>);

impl UploadLocks {
    /// The lock of `upload_id`.
    pub(crate) fn of(&self, upload_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.0.lock().expect("upload locks");
        if let Some(lock) = locks.get(upload_id).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, w| w.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(upload_id.to_owned(), Arc::downgrade(&lock));
        lock
    }
}

/// Makes sure the upload is staged here: if it is not, takes it over from the target that
/// holds it. `Ok` also when no target has it (the request then answers NoSuchUpload); an error
/// when a target that may hold it did not answer, or the copy failed (retryable).
pub(crate) async fn bring_here(
    t: &Target,
    bck: &Bck,
    key: &str,
    upload_id: &str,
) -> Result<(), ApiError> {
    if upload_id.is_empty() || t.store.mpu_here(bck, key, upload_id).await {
        return Ok(());
    }
    let lock = t.uploads.of(upload_id);
    let _one_at_a_time = lock.lock().await;
    if t.store.mpu_here(bck, key, upload_id).await {
        return Ok(());
    }
    let mut unknown = Vec::new();
    let others: Vec<gristmill_core::Node> = t
        .smap()
        .tmap
        .values()
        .filter(|n| n.daemon_id != t.id)
        .cloned()
        .collect();
    for node in &others {
        match take_over(t, node, bck, key, upload_id).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => unknown.push(format!("{}: {e}", node.daemon_id)),
        }
    }
    if unknown.is_empty() {
        return Ok(());
    }
    Err(ApiError::unavailable(format!(
        "upload {upload_id} of {bck}/{key} is not here and a target that may hold it could not hand it over ({}); retry",
        unknown.join("; ")
    )))
}

fn url(node: &gristmill_core::Node, bck: &Bck, key: &str) -> String {
    format!(
        "{}{INTERNAL_MPU}/{}/{}",
        node.url(),
        bck.name,
        gristmill_core::name::encode_path(key)
    )
}

/// Asks `node` to hand the upload over and copies it here. `Ok(false)`: it does not hold it.
async fn take_over(
    t: &Target,
    node: &gristmill_core::Node,
    bck: &Bck,
    key: &str,
    upload_id: &str,
) -> Result<bool, String> {
    let timeout = std::time::Duration::from_secs(30);
    let resp = t
        .relay
        .post(url(node, bck, key))
        .query(&bucket_query(bck))
        .query(&[("upload_id", upload_id)])
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(false);
    }
    if !resp.status().is_success() {
        return Err(format!("hand over: {}", resp.status()));
    }
    let files: Vec<String> = resp.json().await.map_err(|e| e.to_string())?;
    let tmp = t
        .store
        .mpu_adopting(bck, key, upload_id)
        .await
        .map_err(|e| e.to_string())?;
    let copied = async {
        for file in &files {
            let resp = t
                .relay
                .get(url(node, bck, key))
                .query(&bucket_query(bck))
                .query(&[("upload_id", upload_id), ("file", file.as_str())])
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("{file}: {}", resp.status()));
            }
            let mut out = tokio::fs::File::create(tmp.join(file))
                .await
                .map_err(|e| e.to_string())?;
            let mut body = resp.bytes_stream();
            while let Some(chunk) = body.next().await {
                out.write_all(&chunk.map_err(|e| e.to_string())?)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            out.flush().await.map_err(|e| e.to_string())?;
        }
        t.store
            .mpu_adopt(&tmp, bck, key, upload_id)
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    if let Err(e) = copied {
        let _ = tokio::fs::remove_dir_all(&tmp).await;
        return Err(e);
    }
    // Ours now: the holder's copy goes (if that fails, it stays out of reach there).
    let dropped = t
        .relay
        .delete(url(node, bck, key))
        .query(&bucket_query(bck))
        .query(&[("upload_id", upload_id)])
        .timeout(timeout)
        .send()
        .await;
    if let Err(e) = dropped {
        tracing::warn!(upload = upload_id, holder = %node.daemon_id, error = %e, "a handed-over upload was not dropped by its holder");
    }
    tracing::info!(upload = upload_id, object = %key, from = %node.daemon_id, parts = files.len().saturating_sub(1) / 2, "multipart upload taken over from its previous owner");
    Ok(true)
}

/// `/v1/internal/mpu/{bucket}/{*object}?upload_id=` (node to node): `POST` hands the upload
/// over (answers its files), `GET &file=` one of them, `DELETE` drops it once taken.
pub(crate) async fn internal(
    axum::extract::State(t): axum::extract::State<Arc<Target>>,
    axum::extract::Path((bucket, key)): axum::extract::Path<(String, String)>,
    axum::extract::Query(params): crate::api::route::Params,
    method: axum::http::Method,
) -> crate::ApiResult {
    use axum::response::IntoResponse;
    let bck = crate::api::route::bucket_from(&bucket, &params)?;
    gristmill_core::validate_stored_name(&key)?;
    let upload_id = params.get("upload_id").map(String::as_str).unwrap_or("");
    match method {
        axum::http::Method::POST => {
            let files = t.store.mpu_hand_over(&bck, &key, upload_id).await?;
            Ok(axum::Json(files).into_response())
        }
        axum::http::Method::GET => {
            let file = params.get("file").map(String::as_str).unwrap_or("");
            let f = t.store.mpu_handed_file(&bck, &key, upload_id, file).await?;
            let len = f.metadata().await.map_err(crate::StoreError::from)?.len();
            let body = axum::body::Body::from_stream(crate::store::stream::file_stream(
                f.into_std().await,
                0,
                len,
            ));
            Ok(body.into_response())
        }
        axum::http::Method::DELETE => {
            t.store.mpu_handed_over(&bck, &key, upload_id).await?;
            Ok(axum::http::StatusCode::OK.into_response())
        }
        m => Err(ApiError::bad_request(format!(
            "{m} is not supported on {INTERNAL_MPU}"
        ))),
    }
}
