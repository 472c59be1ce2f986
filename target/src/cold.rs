//! Cold GET with stream-through: the first GET of a remote object that is not cached here
//! starts **one** download into a pending write (a temp file on the owning mountpath); every
//! GET of that object while it runs — the first one included — reads the temp file as it grows,
//! following a `watch` channel of bytes written. Readers never hold the object in memory and
//! never wait for the whole download.
//!
//! The download runs in its own task, so it survives any client disconnecting. It commits the
//! copy (with the remote's ETag and version) only when every byte arrived and the size matches;
//! a broken download removes the temp file and fails every reader's body stream.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use gristmill_core::{ApiError, Bck};
use tokio::sync::{OnceCell, watch};

use crate::Target;
use crate::backend::{
    Backend, BackendError, BackendErrorKind, ByteStream, ParallelDownload, RemoteAttrs,
};
use crate::store::{ETAG_KEY, PutOptions};

/// Custom-metadata keys of a cached remote object.
pub(crate) const REMOTE_VERSION_KEY: &str = "remote-version";
pub(crate) const REMOTE_MTIME_KEY: &str = "remote-last-modified";
pub(crate) const SOURCE_KEY: &str = "source";

/// Flush the temp file (make bytes visible to readers) at least this often.
const FLUSH_EVERY: u64 = 256 * 1024;
/// Largest read a follower does at once.
const READ_CHUNK: u64 = 256 * 1024;

/// Where a download stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Progress {
    /// This many bytes are in the temp file and readable.
    Running(u64),
    /// All bytes written and the copy committed.
    Done(u64),
    /// The download broke; nothing was cached.
    Failed(String),
}

/// One download in flight.
pub(crate) struct Fill {
    /// The remote object's attributes, from the response that started the download.
    pub(crate) attrs: RemoteAttrs,
    /// A read handle on the temp file, opened before any reader could miss the rename at
    /// commit; readers use positioned reads, so sharing it is safe.
    file: Arc<std::fs::File>,
    progress: watch::Receiver<Progress>,
}

type Slot = Arc<OnceCell<Arc<Fill>>>;

/// Downloads in flight on this target, by object uname.
#[derive(Default)]
pub(crate) struct Fills {
    /// Shared with each download task, which unregisters itself when it ends.
    inflight: Arc<Mutex<HashMap<String, Slot>>>,
}

/// Why no fill was joined.
pub(crate) enum Start {
    /// The object got cached meanwhile: serve the local copy.
    Cached,
    Failed(ApiError),
}

impl Fills {
    /// Joins the download of `bck/name`, starting it if none runs. With `refetch`, a cached
    /// copy does not stop a new download (it is replaced when the new one commits).
    pub(crate) async fn join(
        &self,
        t: &Target,
        backend: Arc<dyn Backend>,
        bck: &Bck,
        name: &str,
        refetch: bool,
    ) -> Result<Arc<Fill>, Start> {
        let store = &t.store;
        let key = bck.object_uname(name);
        let slot = {
            let mut map = self.inflight.lock().expect("fills lock");
            map.entry(key.clone()).or_default().clone()
        };
        let started = slot
            .get_or_try_init(|| async {
                // A download that finished between our cache miss and now: no second one.
                if !refetch && store.head(bck, name).is_ok() {
                    return Err(Start::Cached);
                }
                start(&self.inflight, t, backend, bck, name, &key, &slot).await
            })
            .await;
        match started {
            Ok(fill) => Ok(fill.clone()),
            Err(e) => {
                unregister(&self.inflight, &key, &slot);
                Err(e)
            }
        }
    }
}

/// Removes a finished (or never started) download from the map, unless a newer one took its
/// place.
fn unregister(map: &Mutex<HashMap<String, Slot>>, key: &str, slot: &Slot) {
    let mut map = map.lock().expect("fills lock");
    if map.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
        map.remove(key);
    }
}

/// Sends the backend GET, opens the pending write and spawns the download task.
#[allow(clippy::too_many_arguments)]
async fn start(
    inflight: &Arc<Mutex<HashMap<String, Slot>>>,
    t: &Target,
    backend: Arc<dyn Backend>,
    bck: &Bck,
    name: &str,
    key: &str,
    slot: &Slot,
) -> Result<Arc<Fill>, Start> {
    let store = &t.store;
    let idle_timeout = t.backends.idle_timeout;
    let fail = |e: ApiError| Start::Failed(e);
    let (attrs, body) = backend
        .get(bck, name, None)
        .await
        .map_err(|e| fail(e.into()))?;
    let parallel = &t.backends.parallel;
    let mut body = if attrs.size > parallel.threshold && backend.supports_ranges() {
        ranged_body(backend.clone(), bck, name, &attrs, body, parallel)
    } else {
        body
    };
    // Room under the quotas (evicting if needed) and on the disk, before the first byte;
    // dropping `body` on refusal cancels the download.
    t.space
        .admit_cached(&t.bmd(), bck, name, attrs.size)
        .await
        .map_err(fail)?;
    // A plain S3 ETag is the MD5 of the object: check it, so a corrupted transfer is never
    // cached (multipart ETags, `<md5>-<parts>`, and other origins' tags are opaque).
    let expected_md5 = (attrs.etag.len() == 32
        && attrs.etag.bytes().all(|b| b.is_ascii_hexdigit()))
    .then(|| attrs.etag.to_ascii_lowercase());
    let mut custom = std::collections::BTreeMap::new();
    if !attrs.etag.is_empty() {
        custom.insert(ETAG_KEY.to_owned(), attrs.etag.clone());
    }
    if !attrs.version.is_empty() {
        custom.insert(REMOTE_VERSION_KEY.to_owned(), attrs.version.clone());
    }
    if !attrs.last_modified.is_empty() {
        custom.insert(REMOTE_MTIME_KEY.to_owned(), attrs.last_modified.clone());
    }
    custom.insert(SOURCE_KEY.to_owned(), bck.provider.as_str().to_owned());
    let opts = PutOptions {
        durable: false,
        version: attrs.cache_version(),
        custom,
        expected_size: Some(attrs.size),
        compute_md5: expected_md5.is_some(),
        expected_md5,
        ..Default::default()
    };
    let mut pending = store
        .begin_write(bck, name, opts)
        .await
        .map_err(|e| fail(e.into()))?;
    let path = pending.path().to_owned();
    let file = tokio::task::spawn_blocking(move || std::fs::File::open(path))
        .await
        .map_err(|e| fail(ApiError::internal(e.to_string())))?
        .map_err(|e| {
            fail(ApiError::internal(format!(
                "opening the download file: {e}"
            )))
        })?;
    let (tx, rx) = watch::channel(Progress::Running(0));
    let fill = Arc::new(Fill {
        attrs: attrs.clone(),
        file: Arc::new(file),
        progress: rx,
    });

    // The download belongs to no request: it runs to the end (or failure) on its own.
    let what = format!("{bck}/{name}");
    let expected = attrs.size;
    let done_fill = fill.clone();
    let key = key.to_owned();
    let slot = slot.clone();
    let inflight = inflight.clone();
    tokio::spawn(async move {
        let result: Result<u64, String> = async {
            let mut unflushed = 0u64;
            loop {
                let next = match tokio::time::timeout(idle_timeout, body.next()).await {
                    Err(_) => {
                        return Err(format!(
                            "backend: download of {what} stalled for {idle_timeout:?}"
                        ));
                    }
                    Ok(next) => next,
                };
                let Some(chunk) = next else { break };
                let chunk = chunk.map_err(|e| format!("backend: {}", e.message))?;
                if pending.size() + chunk.len() as u64 > expected {
                    return Err(format!(
                        "backend sent more than the announced {expected} bytes of {what}"
                    ));
                }
                pending
                    .write_chunk(&chunk)
                    .await
                    .map_err(|e| e.to_string())?;
                unflushed += chunk.len() as u64;
                if unflushed >= FLUSH_EVERY {
                    pending.flush().await.map_err(|e| e.to_string())?;
                    unflushed = 0;
                    tx.send_replace(Progress::Running(pending.size()));
                }
            }
            pending.flush().await.map_err(|e| e.to_string())?;
            let size = pending.size();
            if size != expected {
                return Err(format!(
                    "backend: download of {what} ended after {size} of {expected} bytes"
                ));
            }
            // The last bytes become readable only with the commit: a client that read the
            // whole object will find the cached copy on its next request.
            pending
                .commit()
                .await
                .map(|m| m.size)
                .map_err(|e| format!("caching {what}: {e}"))
        }
        .await;
        match result {
            Ok(size) => {
                tracing::info!(object = %what, size, "remote object cached");
                tx.send_replace(Progress::Done(size));
            }
            Err(why) => {
                // `pending` was dropped (or consumed by the failed commit): no temp file left.
                tracing::warn!(object = %what, error = %why, "cold GET download failed");
                tx.send_replace(Progress::Failed(why));
            }
        }
        drop(done_fill);
        unregister(&inflight, &key, &slot);
    });
    Ok(fill)
}

impl Fill {
    /// Waits for the download to end: the cached size, or why it failed.
    pub(crate) async fn wait(&self) -> Result<u64, String> {
        let mut progress = self.progress.clone();
        loop {
            match &*progress.borrow_and_update() {
                Progress::Done(n) => return Ok(*n),
                Progress::Failed(why) => return Err(why.clone()),
                Progress::Running(_) => {}
            }
            if progress.changed().await.is_err() {
                return Err("download task ended unexpectedly".into());
            }
        }
    }

    /// The bytes `[start, start + len)` of the object, read from the growing temp file; fails
    /// the stream if the download breaks.
    pub(crate) fn reader(
        self: &Arc<Self>,
        start: u64,
        len: u64,
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
        let fill = self.clone();
        let progress = fill.progress.clone();
        futures::stream::unfold(
            (fill, progress, start, start + len),
            |(fill, mut progress, pos, end)| async move {
                if pos >= end {
                    return None;
                }
                loop {
                    let state = progress.borrow_and_update().clone();
                    let readable = match &state {
                        Progress::Running(n) | Progress::Done(n) => *n,
                        Progress::Failed(why) => {
                            return Some((
                                Err(std::io::Error::other(why.clone())),
                                (fill, progress, end, end),
                            ));
                        }
                    };
                    if readable > pos {
                        let want = (readable.min(end) - pos).min(READ_CHUNK) as usize;
                        let file = fill.file.clone();
                        let read = tokio::task::spawn_blocking(move || {
                            let mut buf = vec![0u8; want];
                            file.read_exact_at(&mut buf, pos).map(|_| buf)
                        })
                        .await
                        .map_err(std::io::Error::other)
                        .and_then(|r| r);
                        return match read {
                            Ok(buf) => {
                                let n = buf.len() as u64;
                                Some((Ok(Bytes::from(buf)), (fill, progress, pos + n, end)))
                            }
                            Err(e) => Some((Err(e), (fill, progress, end, end))),
                        };
                    }
                    if matches!(state, Progress::Done(_)) {
                        let e = std::io::Error::other("cached object is shorter than announced");
                        return Some((Err(e), (fill, progress, end, end)));
                    }
                    if progress.changed().await.is_err() {
                        let e = std::io::Error::other("download task ended unexpectedly");
                        return Some((Err(e), (fill, progress, end, end)));
                    }
                }
            },
        )
    }
}

/// The body of a large object fetched with parallel range requests: the first chunk streams
/// from the GET that is already open (so the first byte is not delayed), while up to
/// `workers` later chunks download at once, each into memory (bounded: `workers × chunk`
/// bytes), and are handed on in order. A chunk that fails, comes back short, or shows that
/// the object changed (another ETag) fails the whole download.
fn ranged_body(
    backend: Arc<dyn Backend>,
    bck: &Bck,
    name: &str,
    attrs: &RemoteAttrs,
    first: ByteStream,
    p: &ParallelDownload,
) -> ByteStream {
    let chunk = p.chunk.max(1);
    let size = attrs.size;
    let ranges: std::collections::VecDeque<(u64, u64)> = (1..size.div_ceil(chunk))
        .map(|i| (i * chunk, chunk.min(size - i * chunk)))
        .collect();
    tracing::debug!(object = %name, size, chunks = ranges.len() + 1, "parallel cold GET");
    let fetch = {
        let (bck, name, etag) = (bck.clone(), name.to_owned(), attrs.etag.clone());
        move |(start, len): (u64, u64)| {
            let (backend, bck, name, etag) =
                (backend.clone(), bck.clone(), name.clone(), etag.clone());
            tokio::spawn(async move {
                let (a, stream) = backend.get(&bck, &name, Some((start, len))).await?;
                if !etag.is_empty() && !a.etag.is_empty() && a.etag != etag {
                    return Err(BackendError::new(
                        BackendErrorKind::Failed,
                        format!(
                            "{bck}/{name} changed during the download (ETag {etag} → {})",
                            a.etag
                        ),
                    ));
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
    };
    let mut pending = ranges;
    let mut running = std::collections::VecDeque::new();
    for _ in 0..p.workers.max(1) {
        if let Some(r) = pending.pop_front() {
            running.push_back(fetch(r));
        }
    }
    let head = first.scan(0u64, move |taken, item| {
        let out = match item {
            Ok(mut b) => {
                let left = chunk.saturating_sub(*taken);
                if left == 0 {
                    return futures::future::ready(None);
                }
                b.truncate(left.min(b.len() as u64) as usize);
                *taken += b.len() as u64;
                Ok(b)
            }
            Err(e) => Err(e),
        };
        futures::future::ready(Some(out))
    });
    let tail = futures::stream::unfold(
        (running, pending, fetch),
        |(mut running, mut pending, fetch)| async move {
            let next = running.pop_front()?;
            if let Some(r) = pending.pop_front() {
                running.push_back(fetch(r));
            }
            let item = match next.await {
                Ok(r) => r,
                Err(e) => Err(BackendError::new(BackendErrorKind::Failed, e.to_string())),
            };
            Some((item, (running, pending, fetch)))
        },
    );
    Box::pin(head.chain(tail))
}
