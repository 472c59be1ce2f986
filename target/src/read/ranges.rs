//! Range requests to a backend, shared by the parallel cold GET (`cold::ranged_body`) and
//! chunked caching ([`super::chunks`]): one range fetched whole into memory and checked, and
//! a set of such parts run a few at a time and handed on in order.

use std::collections::VecDeque;

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use gristmill_core::Bck;
use tokio::task::JoinHandle;

use crate::backend::{Backend, BackendError, BackendErrorKind};

/// One part of an object being fetched or read: its bytes once the task ends.
pub(crate) type Part = JoinHandle<Result<Bytes, BackendError>>;

/// Fetches `[start, start + len)` of `bck/name` into memory on a task of its own. Fails if
/// the range comes back short or long, or shows that the object changed (an ETag other than
/// `etag`, when both are known).
pub(crate) fn fetch_range(
    backend: std::sync::Arc<dyn Backend>,
    bck: Bck,
    name: String,
    etag: String,
    (start, len): (u64, u64),
) -> Part {
    tokio::spawn(async move {
        let (a, stream) = backend.get(&bck, &name, Some((start, len))).await?;
        if !etag.is_empty() && !a.etag.is_empty() && a.etag != etag {
            return Err(changed(&bck, &name, &etag, &a.etag));
        }
        let parts: Vec<Bytes> = stream.try_collect().await?;
        let mut buf = bytes::BytesMut::with_capacity(len as usize);
        for part in parts {
            buf.extend_from_slice(&part);
        }
        if buf.len() as u64 != len {
            return Err(BackendError::new(
                BackendErrorKind::Failed,
                format!(
                    "range {start}+{len} of {bck}/{name} returned {} bytes",
                    buf.len()
                ),
            ));
        }
        Ok(buf.freeze())
    })
}

/// How the error of a download that saw the object change under it begins.
pub(crate) const CHANGED: &str = "the remote object changed during the download";

/// The error of a download that saw the object change under it.
pub(crate) fn changed(bck: &Bck, name: &str, was: &str, now: &str) -> BackendError {
    BackendError::new(
        BackendErrorKind::Failed,
        format!("{CHANGED}: {bck}/{name} (ETag {was} → {now})"),
    )
}

/// The bytes of `parts` in order, with up to `workers` of them started at once (each part is
/// started by `start`, which spawns it): memory is bounded by `workers` parts.
pub(crate) fn in_order<T: Send + 'static>(
    mut pending: VecDeque<T>,
    workers: usize,
    start: impl Fn(T) -> Part + Send + 'static,
) -> impl Stream<Item = Result<Bytes, BackendError>> + Send + 'static {
    let mut running = VecDeque::new();
    for _ in 0..workers.max(1) {
        if let Some(p) = pending.pop_front() {
            running.push_back(start(p));
        }
    }
    futures::stream::unfold(
        (running, pending, start),
        |(mut running, mut pending, start)| async move {
            let next = running.pop_front()?;
            if let Some(p) = pending.pop_front() {
                running.push_back(start(p));
            }
            let item = match next.await {
                Ok(r) => r,
                Err(e) => Err(BackendError::new(BackendErrorKind::Failed, e.to_string())),
            };
            Some((item, (running, pending, start)))
        },
    )
}
