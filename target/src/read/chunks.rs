//! Chunked caching of large remote objects. A range GET of an uncached remote object larger
//! than the parallel-download threshold (`backend.cold_get_parallel_above`) fetches only the
//! chunks that cover the range (`backend.cold_get_chunk`, aligned to chunk boundaries), keeps
//! them in a sparse *partial* file on the object's mountpath (`partial/`), and serves the
//! range from there; later ranges reuse the chunks held. A whole GET caches the object from
//! the chunks held plus the missing ones ([`whole_body`], used by `cold::start`), after which
//! the partial file goes. AIStore caches only whole objects (its #348): one 1 MiB read of a
//! 4 GiB object costs it 4 GiB from the backend.
//!
//! Partial files are a cache of a cache: tracked in memory only (the startup scan empties
//! `partial/`), bounded per target ([`MAX_CHUNKS`]), never listed, moved, replicated or
//! counted as cached. The chunk is the unit of eviction: past the bound, the least recently
//! read chunks of any object go first (a hole punched in the partial file) — never one a
//! request is reading or fetching now — and a partial left holding nothing goes whole. Every
//! chunk is fetched with the ETag of the HEAD that opened the partial; an object that changed
//! drops its partial and the GET falls back to a whole download.

use std::collections::{HashMap, VecDeque};
use std::ops::{Range, RangeInclusive};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use gristmill_core::{ApiError, Bck};

use super::ranges::{Part, fetch_range, in_order};
use crate::Target;
use crate::backend::{Backend, BackendError, BackendErrorKind, ByteStream, RemoteAttrs};

/// Chunks held in partial files per target at most (4 GiB at the default 16 MiB chunk).
const MAX_CHUNKS: usize = 256;
/// Largest read from a partial file at once.
const READ_PIECE: u64 = 1 << 20;
/// Numbers partial files (see [`Partials::open`]).
static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// The partial objects of a target, by object uname.
#[derive(Clone, Default)]
pub(crate) struct Partials {
    objects: Arc<Mutex<HashMap<String, Arc<Partial>>>>,
    /// Bumped on every read: orders the chunks by their last read.
    clock: Arc<AtomicU64>,
}

/// The chunks of one remote object held so far.
pub(crate) struct Partial {
    /// The bucket's uname (a destroyed bucket drops its partials).
    bucket: String,
    /// The object as the HEAD that opened this partial saw it.
    attrs: RemoteAttrs,
    chunk: u64,
    path: PathBuf,
    file: Arc<std::fs::File>,
    /// One entry per chunk of the object. Eviction punches a chunk's hole while holding this
    /// lock, and only a chunk without pins: a request pins its chunks before it looks at
    /// what is held, so it never reads a hole, and a chunk it writes is never punched.
    chunks: Mutex<Vec<ChunkState>>,
    /// One fetcher of this object's chunks at a time.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Clone, Copy, Default)]
struct ChunkState {
    /// The clock of its last read; 0 while not held.
    read_at: u64,
    /// Requests using it now (reading it, or fetching it).
    pins: u32,
}

/// Chunks of a partial in use by one request: not evicted until this is dropped.
struct Pin {
    partial: Arc<Partial>,
    chunks: Range<usize>,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut chunks = self.partial.chunks.lock().expect("partial lock");
        for c in &mut chunks[self.chunks.clone()] {
            c.pins -= 1;
        }
    }
}

impl Partial {
    fn chunks(&self) -> u64 {
        self.attrs.size.div_ceil(self.chunk)
    }

    /// `(start, len)` of chunk `i`.
    fn span(&self, i: u64) -> (u64, u64) {
        let start = i * self.chunk;
        (start, self.chunk.min(self.attrs.size - start))
    }

    fn holds(&self, i: u64) -> bool {
        self.chunks.lock().expect("partial lock")[i as usize].read_at != 0
    }

    /// Pins `chunks` for the caller and marks those held as read at `now`.
    fn pin(self: &Arc<Self>, chunks: RangeInclusive<u64>, now: u64) -> Pin {
        let chunks = *chunks.start() as usize..*chunks.end() as usize + 1;
        let mut states = self.chunks.lock().expect("partial lock");
        for c in &mut states[chunks.clone()] {
            c.pins += 1;
            if c.read_at != 0 {
                c.read_at = now;
            }
        }
        Pin {
            partial: self.clone(),
            chunks,
        }
    }

    /// Marks chunk `i` held (just written), read at `now`.
    fn hold(&self, i: u64, now: u64) {
        self.chunks.lock().expect("partial lock")[i as usize].read_at = now;
    }

    /// Evicts chunk `i` if it is still held unpinned and unread since `read_at`: punches its
    /// hole (the file keeps its size) and marks it missing.
    fn evict(&self, i: usize, read_at: u64) -> bool {
        let mut chunks = self.chunks.lock().expect("partial lock");
        let c = &mut chunks[i];
        if c.read_at != read_at || c.pins != 0 {
            return false;
        }
        let (start, len) = self.span(i as u64);
        let flags = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        // A filesystem without holes keeps the bytes until the chunk is fetched again; it is
        // forgotten all the same.
        if let Err(e) = rustix::fs::fallocate(&*self.file, flags, start, len) {
            tracing::debug!(path = %self.path.display(), error = %e, "punching an evicted chunk");
        }
        c.read_at = 0;
        true
    }

    /// Holds no chunk and no request uses it.
    fn idle_and_empty(&self) -> bool {
        let chunks = self.chunks.lock().expect("partial lock");
        chunks.iter().all(|c| c.read_at == 0 && c.pins == 0)
    }

    /// The bytes `[start, start + len)`, read from the partial file; `pin` covers every chunk
    /// they touch (all held) and is kept until the stream ends.
    fn reader(
        &self,
        start: u64,
        len: u64,
        pin: Pin,
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
        let file = self.file.clone();
        futures::stream::unfold((start, start + len, pin), move |(pos, end, pin)| {
            let file = file.clone();
            async move {
                if pos >= end {
                    return None;
                }
                let want = (end - pos).min(READ_PIECE) as usize;
                let read = tokio::task::spawn_blocking(move || read_at(&file, pos, want)).await;
                match read.map_err(std::io::Error::other).and_then(|r| r) {
                    Ok(b) => Some((Ok(b), (pos + want as u64, end, pin))),
                    Err(e) => Some((Err(e), (end, end, pin))),
                }
            }
        })
    }
}

fn read_at(file: &std::fs::File, pos: u64, len: usize) -> std::io::Result<Bytes> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, pos)?;
    Ok(Bytes::from(buf))
}

impl Partials {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn get(&self, key: &str) -> Option<Arc<Partial>> {
        self.objects
            .lock()
            .expect("partials lock")
            .get(key)
            .cloned()
    }

    /// Pins `chunks` of `p` if it is still `key`'s partial; `None` if it was dropped. Under
    /// the map's lock, which [`Partials::make_room`] holds when it drops an empty partial: a
    /// partial pinned here is never dropped as empty.
    fn pin_if_registered(
        &self,
        key: &str,
        p: &Arc<Partial>,
        chunks: RangeInclusive<u64>,
        now: u64,
    ) -> Option<Pin> {
        let map = self.objects.lock().expect("partials lock");
        map.get(key).filter(|kept| Arc::ptr_eq(kept, p))?;
        Some(p.pin(chunks, now))
    }

    /// The partial of `key`, created (an empty sparse file in `dir`) if there is none.
    async fn open(
        &self,
        bck: &Bck,
        key: &str,
        dir: PathBuf,
        attrs: RemoteAttrs,
        chunk: u64,
    ) -> Result<Arc<Partial>, ApiError> {
        if let Some(p) = self.get(key) {
            return Ok(p);
        }
        // A name of its own per partial (the object's hash and a counter): a partial dropped
        // while readers still use its file never shares that file with its successor.
        let path = dir.join(format!(
            "{:032x}.{}",
            xxhash_rust::xxh3::xxh3_128(key.as_bytes()),
            NEXT_FILE.fetch_add(1, Ordering::Relaxed)
        ));
        let (size, at) = (attrs.size, path.clone());
        let file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            std::fs::create_dir_all(&dir)?;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&at)?;
            f.set_len(size)?;
            Ok(f)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("opening a partial file: {e}")))?;
        let chunks = attrs.size.div_ceil(chunk) as usize;
        let p = Arc::new(Partial {
            bucket: bck.uname(),
            attrs,
            chunk,
            path,
            file: Arc::new(file),
            chunks: Mutex::new(vec![ChunkState::default(); chunks]),
            fetching: tokio::sync::Mutex::new(()),
        });
        // Two GETs may open the same object at once: the first one registered wins.
        let kept = self
            .objects
            .lock()
            .expect("partials lock")
            .entry(key.to_owned())
            .or_insert(p.clone())
            .clone();
        if !Arc::ptr_eq(&kept, &p) {
            remove_file(p.path.clone());
        }
        Ok(kept)
    }

    /// Forgets `key`'s partial and removes its file (readers holding it keep reading).
    pub(crate) fn remove(&self, key: &str) {
        let gone = self.objects.lock().expect("partials lock").remove(key);
        if let Some(p) = gone {
            remove_file(p.path.clone());
        }
    }

    /// Forgets every partial of a bucket (destroyed, or evicted from the cluster).
    pub(crate) fn remove_bucket(&self, bck: &Bck) {
        let bucket = bck.uname();
        let gone: Vec<String> = {
            let objects = self.objects.lock().expect("partials lock");
            let of_bucket = objects.iter().filter(|(_, p)| p.bucket == bucket);
            of_bucket.map(|(k, _)| k.clone()).collect()
        };
        for k in gone {
            self.remove(&k);
        }
    }

    /// Evicts the least recently read chunks that no request uses until `adding` more fit
    /// under [`MAX_CHUNKS`], and drops the partials left holding nothing; the number of
    /// chunks evicted. Blocking (punches holes).
    fn make_room(&self, adding: usize) -> usize {
        let objects: Vec<(String, Arc<Partial>)> = {
            let objects = self.objects.lock().expect("partials lock");
            objects
                .iter()
                .map(|(k, p)| (k.clone(), p.clone()))
                .collect()
        };
        let mut held = 0;
        // (last read, partial, chunk) of every chunk held that no request uses.
        let mut evictable = Vec::new();
        for (at, (_, p)) in objects.iter().enumerate() {
            let chunks = p.chunks.lock().expect("partial lock");
            for (i, c) in chunks.iter().enumerate().filter(|(_, c)| c.read_at != 0) {
                held += 1;
                if c.pins == 0 {
                    evictable.push((c.read_at, at, i));
                }
            }
        }
        let mut over = (held + adding).saturating_sub(MAX_CHUNKS);
        if over == 0 {
            return 0;
        }
        evictable.sort_unstable();
        let mut evicted = 0;
        for (read_at, at, i) in evictable {
            if over == 0 {
                break;
            }
            // Read or pinned since it was looked at: the next one goes instead.
            if objects[at].1.evict(i, read_at) {
                evicted += 1;
                over -= 1;
            }
        }
        for (key, p) in objects {
            let mut map = self.objects.lock().expect("partials lock");
            let same = map.get(&key).is_some_and(|now| Arc::ptr_eq(now, &p));
            if same && p.idle_and_empty() {
                map.remove(&key);
                drop(map);
                remove_file_now(&p.path);
            }
        }
        evicted
    }
}

fn remove_file(path: PathBuf) {
    tokio::task::spawn_blocking(move || remove_file_now(&path));
}

fn remove_file_now(path: &std::path::Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "removing a partial file");
    }
}

/// Whether `now` is another object than `was` (size, ETag, or without ETags the version and
/// modification time).
fn changed(was: &RemoteAttrs, now: &RemoteAttrs) -> bool {
    was.size != now.size
        || was.etag != now.etag
        || (was.etag.is_empty()
            && (was.version != now.version || was.last_modified != now.last_modified))
}

/// Serves a range GET of an uncached remote object from its chunks, fetching the missing
/// ones that cover the range. `None` when the object is not chunked (no larger than the
/// parallel threshold, no range asked) or changed under its partial: the caller downloads it
/// whole. With `latest`, a partial is checked against a fresh HEAD before it serves.
pub(crate) async fn serve_range(
    t: &Target,
    backend: &Arc<dyn Backend>,
    bck: &Bck,
    name: &str,
    headers: &HeaderMap,
    latest: bool,
) -> Result<Option<axum::response::Response>, ApiError> {
    let key = bck.object_uname(name);
    let parallel = &t.backends.parallel;
    let mut partial = t.partials.get(&key);
    if let Some(p) = &partial
        && latest
        && !backend
            .head(bck, name)
            .await
            .is_ok_and(|now| !changed(&p.attrs, &now))
    {
        t.partials.remove(&key);
        partial = None;
    }
    let attrs = match &partial {
        Some(p) => p.attrs.clone(),
        None => match backend.head(bck, name).await {
            // Chunks of one object must be of one version: without an ETag to check each
            // against, the object is downloaded whole.
            Ok(attrs) if attrs.size > parallel.threshold && !attrs.etag.is_empty() => attrs,
            // Small, or no HEAD (an origin that refuses it, or the object is gone): the whole
            // download answers as it always did, errors included.
            _ => return Ok(None),
        },
    };
    let chunk = partial.as_ref().map_or(parallel.chunk.max(1), |p| p.chunk);
    let range = match super::local::request_range(headers, attrs.size) {
        Ok(Some(r)) if !r.is_empty() => r,
        Ok(_) => return Ok(None),
        Err(answer) => return answer.map(Some),
    };
    let (start, len) = (range.start, range.len());
    let chunks = start / chunk..=(start + len - 1) / chunk;
    // A range wider than what partials may hold is downloaded whole.
    if chunks.clone().count() > MAX_CHUNKS {
        return Ok(None);
    }
    // Pinned before fetch looks at what is held: no eviction punches them until the answer
    // has been read. A partial that holds nothing yet may be dropped by another GET's
    // eviction between its lookup and the pin: then it is opened anew (a chunk fetched into
    // a dropped partial would be served right but not kept).
    let mut found = partial;
    let mut tries = 0;
    let (p, pin) = loop {
        tries += 1;
        let p = match found.take() {
            Some(p) => p,
            None => {
                let dir = t.store.mountpath_for(bck, name).path.join("partial");
                t.partials
                    .open(bck, &key, dir, attrs.clone(), chunk)
                    .await?
            }
        };
        let now = t.partials.tick();
        match t.partials.pin_if_registered(&key, &p, chunks.clone(), now) {
            Some(pin) => break (p, pin),
            // Dropped again and again: serve through this one anyway (right bytes).
            None if tries >= 3 => {
                let pin = p.pin(chunks.clone(), now);
                break (p, pin);
            }
            None => {}
        }
    };
    match fetch(t, backend, bck, name, &key, &p, chunks).await {
        Ok(()) => {}
        Err(e) if e.message.contains(super::ranges::CHANGED) => {
            tracing::info!(object = %key, "remote object changed: its partial copy is dropped");
            t.partials.remove(&key);
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    let body = axum::body::Body::from_stream(p.reader(start, len, pin));
    Ok(Some(super::remote::answer_remote(
        t,
        &p.attrs,
        body,
        Some(range),
    )))
}

/// Fetches the chunks of `wanted` (pinned by the caller) that `p` does not hold, a few at a
/// time, into its file, after evicting chunks of other reads to make room for them.
async fn fetch(
    t: &Target,
    backend: &Arc<dyn Backend>,
    bck: &Bck,
    name: &str,
    key: &str,
    p: &Arc<Partial>,
    wanted: RangeInclusive<u64>,
) -> Result<(), ApiError> {
    let _one_fetcher = p.fetching.lock().await;
    let provider = bck.provider.as_str();
    let wanted: Vec<u64> = wanted.collect();
    let missing: VecDeque<u64> = wanted.iter().copied().filter(|i| !p.holds(*i)).collect();
    metrics::counter!("grist_cold_chunks_total", "provider" => provider, "result" => "held")
        .increment((wanted.len() - missing.len()) as u64);
    if missing.is_empty() {
        return Ok(());
    }
    let (partials, adding) = (t.partials.clone(), missing.len());
    let evicted = tokio::task::spawn_blocking(move || partials.make_room(adding))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    metrics::counter!("grist_cold_chunks_total", "provider" => provider, "result" => "evicted")
        .increment(evicted as u64);
    let bytes: u64 = missing.iter().map(|i| p.span(*i).1).sum();
    // Reserved while the chunks download (a partial is not counted in usage once written).
    let _room = t.space.admit_cached(&t.bmd(), bck, name, bytes).await?;
    let (b, n, etag) = (bck.clone(), name.to_owned(), p.attrs.etag.clone());
    let spans: VecDeque<(u64, u64)> = missing.iter().map(|i| p.span(*i)).collect();
    let backend = backend.clone();
    let mut parts = std::pin::pin!(in_order(spans, t.backends.parallel.workers, move |s| {
        fetch_range(backend.clone(), b.clone(), n.clone(), etag.clone(), s)
    }));
    for i in missing {
        let ended = || BackendError::new(BackendErrorKind::Failed, "chunk download ended early");
        let bytes = parts.next().await.unwrap_or_else(|| Err(ended()))?;
        let (file, at) = (p.file.clone(), p.span(i).0);
        tokio::task::spawn_blocking(move || file.write_all_at(&bytes, at))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("writing a chunk of {key}: {e}")))?;
        p.hold(i, t.partials.tick());
        metrics::counter!("grist_cold_chunks_total", "provider" => provider, "result" => "fetched")
            .increment(1);
    }
    Ok(())
}

/// The whole object's bytes from its partial (chunks held read from the file, missing ones
/// fetched, `workers` at a time, in order), for a cache fill; `None` without a partial, when
/// the HEAD fails, or when the object changed (its partial is dropped). The caller removes
/// the partial once the fill commits.
pub(crate) async fn whole_body(
    t: &Target,
    backend: &Arc<dyn Backend>,
    bck: &Bck,
    name: &str,
) -> Option<(RemoteAttrs, ByteStream)> {
    let key = bck.object_uname(name);
    let p = t.partials.get(&key)?;
    let now = backend.head(bck, name).await.ok()?;
    if changed(&p.attrs, &now) {
        t.partials.remove(&key);
        return None;
    }
    // The chunks held stay until the fill has read them.
    let pin = p.pin(0..=p.chunks() - 1, t.partials.tick());
    let spans: VecDeque<(u64, u64, bool)> = (0..p.chunks())
        .map(|i| {
            let (start, len) = p.span(i);
            (start, len, p.holds(i))
        })
        .collect();
    let held = spans.iter().filter(|s| s.2).count();
    tracing::debug!(object = %key, chunks = spans.len(), held, "cache fill from a partial copy");
    let (b, n, etag, file) = (
        bck.clone(),
        name.to_owned(),
        p.attrs.etag.clone(),
        p.file.clone(),
    );
    let backend = backend.clone();
    let body = in_order(
        spans,
        t.backends.parallel.workers,
        move |(start, len, held)| {
            if held {
                let file = file.clone();
                let read: Part = tokio::task::spawn_blocking(move || {
                    read_at(&file, start, len as usize)
                        .map_err(|e| BackendError::new(BackendErrorKind::Failed, e.to_string()))
                });
                read
            } else {
                fetch_range(
                    backend.clone(),
                    b.clone(),
                    n.clone(),
                    etag.clone(),
                    (start, len),
                )
            }
        },
    );
    let body = body.map(move |part| {
        let _held_until_read = &pin;
        part
    });
    Some((now, Box::pin(body)))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use gristmill_core::Provider;

    const CHUNK: u64 = 64 * 1024;

    #[tokio::test]
    async fn eviction_takes_the_least_recently_read_unpinned_chunks_and_punches_them() {
        let dir = tempfile::tempdir().unwrap();
        let partials = Partials::default();
        let bck = Bck::new("b", Provider::Aws).unwrap();
        let attrs = RemoteAttrs {
            size: 4 * CHUNK,
            etag: "e".into(),
            ..Default::default()
        };
        let p = partials
            .open(&bck, "k", dir.path().to_owned(), attrs, CHUNK)
            .await
            .unwrap();
        for i in 0..4 {
            p.file
                .write_all_at(&vec![i as u8 + 1; CHUNK as usize], i * CHUNK)
                .unwrap();
            p.hold(i, partials.tick());
        }
        let allocated = || p.file.metadata().unwrap().blocks() * 512;
        assert!(allocated() >= 4 * CHUNK);
        // Chunk 0 is the oldest but in use: 1 and 2 go instead.
        let pin = p.pin(0..=0, 1);
        assert_eq!(partials.make_room(MAX_CHUNKS - 2), 2);
        let held: Vec<bool> = (0..4).map(|i| p.holds(i)).collect();
        assert_eq!(held, [true, false, false, true]);
        assert!(allocated() < 3 * CHUNK, "holes punched: {}", allocated());
        assert_eq!(
            read_at(&p.file, 0, 1).unwrap()[0],
            1,
            "the pinned chunk's bytes"
        );
        assert_eq!(read_at(&p.file, CHUNK, 1).unwrap()[0], 0, "a hole");
        assert!(partials.get("k").is_some());
        // Nothing over the bound: nothing goes.
        assert_eq!(partials.make_room(MAX_CHUNKS - 2), 0);
        // Unpinned, a partial left with nothing is dropped with its file.
        drop(pin);
        assert_eq!(partials.make_room(MAX_CHUNKS), 2);
        assert!(partials.get("k").is_none());
        assert!(!p.path.exists());
    }

    /// A GET that opened an empty partial pins it only if no eviction dropped it meanwhile
    /// (it then opens another); once pinned, it is not dropped as empty.
    #[tokio::test]
    async fn an_empty_partial_is_pinned_only_while_registered() {
        let dir = tempfile::tempdir().unwrap();
        let partials = Partials::default();
        let bck = Bck::new("b", Provider::Aws).unwrap();
        let attrs = RemoteAttrs {
            size: 2 * CHUNK,
            etag: "e".into(),
            ..Default::default()
        };
        let open = || partials.open(&bck, "k", dir.path().to_owned(), attrs.clone(), CHUNK);
        let first = open().await.unwrap();
        // Another GET's eviction runs between this one's lookup and its pin.
        partials.make_room(MAX_CHUNKS + 1);
        assert!(partials.get("k").is_none(), "dropped as empty");
        assert!(
            partials.pin_if_registered("k", &first, 0..=1, 1).is_none(),
            "a dropped partial is not pinned"
        );
        let second = open().await.unwrap();
        let pin = partials.pin_if_registered("k", &second, 0..=1, 2);
        assert!(pin.is_some());
        partials.make_room(MAX_CHUNKS + 1);
        assert!(
            partials.get("k").is_some_and(|p| Arc::ptr_eq(&p, &second)),
            "pinned: kept"
        );
    }
}
