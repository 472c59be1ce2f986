//! Cold GET with stream-through: the first GET of a remote object that is not cached here
//! starts **one** download into a pending write (a temp file on the owning mountpath); every
//! GET of that object while it runs — the first one included — reads the temp file as it grows,
//! following a `watch` channel of bytes written. Readers never hold the object in memory and
//! never wait for the whole download.
//!
//! The download runs in its own task, so it survives any client disconnecting. It commits the
//! copy (with the remote's ETag and version) only when every byte arrived and the size matches;
//! a broken download removes the temp file and fails every reader's body stream.
//!
//! Per-byte work is pipelined: the download task only receives chunks, keeps the most recent
//! ones in a bounded in-memory ring (readers that keep up take them from there, zero-copy) and
//! hands them in batches to a blocking writer thread (file writes with `writev`, xxhash, and a
//! final `fdatasync`) and — when the bucket validates cold GETs (`checksum.validate_cold_get`)
//! — to a second blocking thread that computes the checksum to check: the cheapest
//! whole-object checksum the backend sent (CRC64-NVME, CRC32C, CRC32, SHA-256; S3 sends them
//! for `x-amz-checksum-mode: ENABLED`), else the MD5 when the ETag is a plain MD5. The last
//! chunk reaches readers only after the commit, so a download whose checksum does not match
//! never completes a client's body and caches nothing. The copy's index entry
//! commits without its own fsync (`relaxed_index`): its data file is synced first, so a crash
//! can lose the entry (the object is fetched again) but never expose a torn copy.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use gristmill_core::{ApiError, Bck};
use tokio::sync::{OnceCell, mpsc, watch};
use xxhash_rust::xxh64::Xxh64;

use crate::Target;
use crate::backend::{Backend, ByteStream, ParallelDownload, RemoteAttrs};
use crate::store::{ETAG_KEY, PutOptions};

/// Custom-metadata keys of a cached remote object.
pub(crate) const REMOTE_VERSION_KEY: &str = "remote-version";
pub(crate) const REMOTE_MTIME_KEY: &str = "remote-last-modified";
pub(crate) const SOURCE_KEY: &str = "source";

/// Chunks go to the writer (and MD5) threads in batches of at least this many bytes.
const BATCH_BYTES: usize = 256 * 1024;
/// Batches queued to each thread at most (backpressure on the download beyond that).
const BATCHES_QUEUED: usize = 8;
/// Written bytes the ring keeps for readers (besides the ones not written yet, which it holds
/// until the writer is done with them: at most `BATCHES_QUEUED + 1` batches).
const RING_BYTES: usize = 2 << 20;
/// Readers are woken when at least this many new bytes arrived (or the download ended).
const PUBLISH_EVERY: u64 = 64 * 1024;
/// Largest read from the temp file (readers that fell behind the ring).
const READ_CHUNK: u64 = 1 << 20;

/// Where a download stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Progress {
    /// This many bytes are readable (from the ring, or the temp file below the ring).
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
    ring: Mutex<Ring>,
}

/// The most recent chunks of a download, `[start, start + held)`. Every byte below `start` is
/// in the temp file: chunks leave the ring only once written, oldest first.
#[derive(Default)]
struct Ring {
    start: u64,
    /// (offset, bytes), contiguous.
    chunks: std::collections::VecDeque<(u64, Bytes)>,
    held: usize,
    /// Bytes the writer has put into the temp file.
    written: u64,
}

impl Ring {
    fn push(&mut self, chunk: Bytes) {
        let at = self.start + self.held as u64;
        self.held += chunk.len();
        self.chunks.push_back((at, chunk));
        self.prune();
    }

    fn set_written(&mut self, written: u64) {
        self.written = written;
        self.prune();
    }

    fn prune(&mut self) {
        while self.held > RING_BYTES {
            let Some((at, front)) = self.chunks.front() else {
                break;
            };
            let end = at + front.len() as u64;
            if end > self.written {
                break;
            }
            self.held -= front.len();
            self.start = end;
            self.chunks.pop_front();
        }
    }

    /// The held bytes from `pos` (up to `limit`, within one chunk), for `pos` below the
    /// received bytes. `Err(written)` when `pos` is below the ring: read the file, up to there.
    fn slice(&self, pos: u64, limit: u64) -> Result<Bytes, u64> {
        let i = self.chunks.partition_point(|(at, _)| *at <= pos);
        if pos < self.start || i == 0 {
            return Err(self.written);
        }
        let (at, chunk) = &self.chunks[i - 1];
        let from = (pos - at) as usize;
        let to = ((limit.max(pos) - at) as usize).min(chunk.len());
        if from >= to {
            return Err(self.written);
        }
        Ok(chunk.slice(from..to))
    }
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
    /// Whether a download of `key` (an object uname) runs.
    pub(crate) fn running(&self, key: &str) -> bool {
        self.inflight.lock().expect("fills lock").contains_key(key)
    }

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
    let parallel = &t.backends.parallel;
    // The chunks a range GET left in a partial copy are not fetched again.
    let mut body;
    let attrs;
    if let Some((a, b)) = super::chunks::whole_body(t, &backend, bck, name).await {
        (attrs, body) = (a, b);
    } else {
        let (a, b) = backend
            .get(bck, name, None)
            .await
            .map_err(|e| fail(e.into()))?;
        body = if a.size > parallel.threshold && backend.supports_ranges() {
            ranged_body(backend.clone(), bck, name, &a, b, parallel)
        } else {
            b
        };
        attrs = a;
    }
    // Room under the quotas (evicting if needed) and on the disk, before the first byte;
    // dropping `body` on refusal cancels the download.
    let room = t
        .space
        .admit_cached(&t.bmd(), bck, name, attrs.size)
        .await
        .map_err(fail)?;
    // What the download is checked against, when the bucket validates cold GETs
    // (`checksum.validate_cold_get`, on by default): the cheapest whole-object checksum the
    // backend sent (CRC64-NVME, CRC32C, CRC32, SHA-256), else a plain S3 ETag, which is the
    // object's MD5 (multipart ETags, `<md5>-<parts>`, and other origins' tags are opaque).
    let validate = t
        .bmd()
        .get(bck)
        .is_none_or(|r| r.props.checksum.validate_cold_get);
    let check = if validate {
        attrs.checksum.clone()
    } else {
        None
    };
    let expected_md5 = (validate
        && check.is_none()
        && attrs.etag.len() == 32
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
    let want_md5 = expected_md5.is_some();
    let opts = PutOptions {
        durable: false,
        version: attrs.cache_version(),
        custom,
        expected_size: Some(attrs.size),
        compute_md5: want_md5,
        expected_md5,
        // The writer syncs the data file before the commit (see `write_file`).
        relaxed_index: true,
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
    let out = pending.take_file().await.map_err(|e| fail(e.into()))?;
    let (tx, rx) = watch::channel(Progress::Running(0));
    let fill = Arc::new(Fill {
        attrs: attrs.clone(),
        file: Arc::new(file),
        progress: rx,
        ring: Mutex::default(),
    });

    // The download belongs to no request: it runs to the end (or failure) on its own.
    let what = format!("{bck}/{name}");
    let provider = bck.provider.as_str();
    let expected = attrs.size;
    let done_fill = fill.clone();
    let key = key.to_owned();
    let slot = slot.clone();
    let inflight = inflight.clone();
    let partials = t.partials.clone();
    tokio::spawn(async move {
        // The object's bytes stay reserved until the download commits or fails.
        let _room = room;
        let result: Result<u64, String> = async {
            let (wtx, wrx) = mpsc::channel::<Batch>(BATCHES_QUEUED);
            let ring_fill = done_fill.clone();
            // The checksum is never computed on the path that feeds waiting readers: a CRC
            // (tens of GB/s) in the writer thread, beside the xxhash; SHA-256 and MD5 on a
            // thread of their own (one thread hand-off per batch less for the CRCs).
            let hasher = match &check {
                Some(c) => Some(Hasher::for_algo(c.algo)),
                None if want_md5 => Some(Hasher::Md5(Default::default())),
                None => None,
            };
            let (inline, hasher) = match hasher {
                Some(h @ Hasher::Crc(..)) => (Some(h), None),
                other => (None, other),
            };
            let writer =
                tokio::task::spawn_blocking(move || write_file(out, wrx, &ring_fill.ring, inline));
            let (mtx, hash_task) = match hasher {
                Some(hasher) => {
                    let (mtx, mrx) = mpsc::channel::<Batch>(BATCHES_QUEUED);
                    let task = tokio::task::spawn_blocking(move || hasher.consume(mrx));
                    (Some(mtx), Some(task))
                }
                None => (None, None),
            };
            let received: Result<u64, String> = async {
                let (mut received, mut published) = (0u64, 0u64);
                let (mut batch, mut batch_bytes) = (Vec::new(), 0usize);
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
                    if chunk.is_empty() {
                        continue;
                    }
                    if received + chunk.len() as u64 > expected {
                        return Err(format!(
                            "backend sent more than the announced {expected} bytes of {what}"
                        ));
                    }
                    received += chunk.len() as u64;
                    batch_bytes += chunk.len();
                    done_fill
                        .ring
                        .lock()
                        .expect("ring lock")
                        .push(chunk.clone());
                    batch.push(chunk);
                    // The last bytes wait for the commit (and its MD5 check).
                    if received < expected && received - published >= PUBLISH_EVERY {
                        tx.send_replace(Progress::Running(received));
                        published = received;
                    }
                    if batch_bytes >= BATCH_BYTES {
                        hand_on(&wtx, mtx.as_ref(), std::mem::take(&mut batch)).await?;
                        batch_bytes = 0;
                    }
                }
                if !batch.is_empty() {
                    hand_on(&wtx, mtx.as_ref(), batch).await?;
                }
                Ok(received)
            }
            .await;
            // The threads end when their channels close; wait for them even after a failure,
            // so nothing writes the temp file once it is removed.
            drop((wtx, mtx));
            let written = writer.await.map_err(|e| e.to_string())?;
            let (size, xxhash, inline) = written.map_err(|e| format!("caching {what}: {e}"))?;
            let digest = match hash_task {
                Some(t) => Some(t.await.map_err(|e| e.to_string())?),
                None => inline,
            };
            let received = received?;
            if received != expected || size != received {
                return Err(format!(
                    "backend: download of {what} ended after {received} of {expected} bytes"
                ));
            }
            let md5 = match (digest, &check) {
                (Some(Hasher::Md5(md5)), _) => Some(md5),
                (Some(computed), Some(expected)) => {
                    let algo = expected.algo.as_str();
                    let got = computed.finish();
                    if got != expected.value {
                        metrics::counter!("grist_cold_get_checksum_mismatch_total", "algo" => algo)
                            .increment(1);
                        return Err(format!(
                            "backend: {what} arrived corrupt: its {algo} is {}, the backend \
                             stored {}; nothing was cached",
                            hex::encode(&got),
                            hex::encode(&expected.value)
                        ));
                    }
                    metrics::counter!("grist_cold_get_validated_total", "algo" => algo)
                        .increment(1);
                    None
                }
                _ => None,
            };
            pending
                .set_written(size, xxhash, md5)
                .map_err(|e| format!("caching {what}: {e}"))?;
            if want_md5 {
                metrics::counter!("grist_cold_get_validated_total", "algo" => "md5").increment(1);
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
                metrics::counter!("grist_cold_fills_total", "provider" => provider, "result" => "ok")
                    .increment(1);
                metrics::counter!("grist_cold_fill_bytes_total", "provider" => provider)
                    .increment(size);
                tracing::info!(object = %what, size, "remote object cached");
                partials.remove(&key);
                tx.send_replace(Progress::Done(size));
            }
            Err(why) => {
                metrics::counter!("grist_cold_fills_total", "provider" => provider, "result" => "error")
                    .increment(1);
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
                        let limit = readable.min(end);
                        let held = fill.ring.lock().expect("ring lock").slice(pos, limit);
                        let in_file = match held {
                            Ok(b) => {
                                let n = b.len() as u64;
                                return Some((Ok(b), (fill, progress, pos + n, end)));
                            }
                            Err(written) => written.min(limit),
                        };
                        let want = (in_file - pos).min(READ_CHUNK) as usize;
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
    let (bck, name, etag) = (bck.clone(), name.to_owned(), attrs.etag.clone());
    let tail = super::ranges::in_order(ranges, p.workers, move |r| {
        super::ranges::fetch_range(backend.clone(), bck.clone(), name.clone(), etag.clone(), r)
    });
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
    Box::pin(head.chain(tail))
}

/// Chunks handed to the writer and checksum threads together.
type Batch = Arc<Vec<Bytes>>;

async fn hand_on(
    writer: &mpsc::Sender<Batch>,
    md5: Option<&mpsc::Sender<Batch>>,
    batch: Vec<Bytes>,
) -> Result<(), String> {
    let batch = Arc::new(batch);
    if let Some(m) = md5 {
        m.send(batch.clone())
            .await
            .map_err(|_| "the checksum thread stopped".to_owned())?;
    }
    writer
        .send(batch)
        .await
        .map_err(|_| "the writer thread stopped".to_owned())
}

/// The writer thread of one download: writes every batch to the temp file (`writev`, no
/// copy), computes the xxhash (and `check`, a CRC to validate with), tells the ring what is
/// written, and syncs the file at the end. Returns the size, the xxhash state and `check`.
fn write_file(
    mut out: std::fs::File,
    mut batches: mpsc::Receiver<Batch>,
    ring: &Mutex<Ring>,
    mut check: Option<Hasher>,
) -> std::io::Result<(u64, Xxh64, Option<Hasher>)> {
    use std::io::{IoSlice, Write};
    let mut xxhash = Xxh64::new(0);
    let mut size = 0u64;
    while let Some(batch) = batches.blocking_recv() {
        // At most 512 buffers per call (IOV_MAX is 1024 on Linux).
        for group in batch.chunks(512) {
            let mut slices: Vec<IoSlice<'_>> = group.iter().map(|b| IoSlice::new(b)).collect();
            let mut bufs = &mut slices[..];
            while !bufs.is_empty() {
                let n = out.write_vectored(bufs)?;
                if n == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                IoSlice::advance_slices(&mut bufs, n);
            }
        }
        for b in batch.iter() {
            xxhash.update(b);
            if let Some(c) = check.as_mut() {
                c.update(b);
            }
            size += b.len() as u64;
        }
        ring.lock().expect("ring lock").set_written(size);
    }
    // On disk before the (relaxed) index commit can be: never a torn copy after a crash.
    out.sync_data()?;
    Ok((size, xxhash, check))
}

/// The checksum a download is validated with, as it is computed on its own thread.
enum Hasher {
    Crc(crc_fast::Digest, crate::backend::ChecksumAlgo),
    Sha256(sha2::Sha256),
    /// Checked by the store at commit (`PutOptions::expected_md5`).
    Md5(md5::Md5),
}

impl Hasher {
    fn for_algo(algo: crate::backend::ChecksumAlgo) -> Self {
        use crate::backend::ChecksumAlgo as A;
        use crc_fast::CrcAlgorithm as C;
        match algo {
            A::Crc64Nvme => Hasher::Crc(crc_fast::Digest::new(C::Crc64Nvme), algo),
            A::Crc32c => Hasher::Crc(crc_fast::Digest::new(C::Crc32Iscsi), algo),
            A::Crc32 => Hasher::Crc(crc_fast::Digest::new(C::Crc32IsoHdlc), algo),
            A::Sha256 => Hasher::Sha256(Default::default()),
        }
    }

    fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Crc(d, _) => d.update(b),
            Hasher::Sha256(d) => sha2::Digest::update(d, b),
            Hasher::Md5(d) => md5::Digest::update(d, b),
        }
    }

    /// The checksum thread of one download: hashes every batch until the channel closes.
    fn consume(mut self, mut batches: mpsc::Receiver<Batch>) -> Self {
        while let Some(batch) = batches.blocking_recv() {
            for b in batch.iter() {
                self.update(b);
            }
        }
        self
    }

    /// The digest's bytes as S3 sends them (CRCs big-endian, 4 or 8 bytes).
    fn finish(self) -> Vec<u8> {
        use crate::backend::ChecksumAlgo as A;
        match self {
            Hasher::Crc(d, A::Crc64Nvme) => d.finalize().to_be_bytes().to_vec(),
            Hasher::Crc(d, _) => (d.finalize() as u32).to_be_bytes().to_vec(),
            Hasher::Sha256(d) => sha2::Digest::finalize(d).to_vec(),
            Hasher::Md5(d) => md5::Digest::finalize(d).to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(at: u64, len: usize) -> Bytes {
        Bytes::from(
            (0..len)
                .map(|i| (at as usize + i) as u8)
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn ring_serves_held_bytes_and_sends_older_ones_to_the_file() {
        let mut ring = Ring::default();
        let piece = RING_BYTES / 4;
        let mut at = 0u64;
        for _ in 0..8 {
            ring.push(chunk(at, piece));
            at += piece as u64;
        }
        // Nothing written yet: everything stays held, whatever the bound.
        assert_eq!(ring.start, 0);
        assert_eq!(ring.held, 8 * piece);
        let b = ring.slice(10, at).unwrap();
        assert_eq!(b.len(), piece - 10);
        assert_eq!(b[0], 10u8);
        // Limited by what is readable.
        assert_eq!(
            ring.slice(piece as u64 + 5, piece as u64 + 7)
                .unwrap()
                .len(),
            2
        );
        // Written bytes leave the ring (oldest first) until it is back under its bound.
        ring.set_written(6 * piece as u64);
        assert_eq!(ring.start, 4 * piece as u64);
        assert_eq!(ring.held, 4 * piece);
        assert_eq!(ring.slice(10, at), Err(6 * piece as u64));
        let b = ring.slice(5 * piece as u64 + 3, at).unwrap();
        assert_eq!(b[0], (5 * piece + 3) as u8);
        assert_eq!(b.len(), piece - 3);
    }
}
