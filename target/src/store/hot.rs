//! The warm-GET fast path's two helpers: a bounded cache of recently read object metadata, and
//! a read that succeeds only when the bytes are already in the page cache.
//!
//! A warm GET of a small object used to cost one trip through the blocking pool (index lookup,
//! open, read): two thread hand-offs that, measured with `perf`, cost more CPU than the read.
//! With the metadata in [`MetaCache`] and the bytes in the page cache ([`read_if_cached`]), the
//! request is answered on the async worker without blocking; anything else (a cache miss, bytes
//! on disk only) still goes through the blocking pool.
//!
//! A cached entry also keeps its data file open (within a budget of file descriptors): a warm
//! GET then shares the open file (no `open`, no `dup`, no `close`) instead of opening the
//! path, whose lookup was the largest single cost left in a 16 KiB GET. The descriptor goes
//! with the entry — every index change of the object drops both — so a GET that starts after
//! the change never reads a file the index no longer names.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::store::meta::ObjectMeta;

/// Number of independently locked shards (keeps lock hold times and contention tiny).
const SHARDS: usize = 16;

/// One cached object: its metadata, the mountpath root that holds its data file, and (once
/// read through the cache) that file, open.
#[derive(Debug)]
pub(crate) struct Cached {
    pub root: std::path::PathBuf,
    /// Shared with every [`crate::store::OpenObject`] opened from this record (a GET copies
    /// no strings).
    pub meta: Arc<ObjectMeta>,
    file: OnceLock<KeptFile>,
    /// A whole read of this object checked its bytes against its checksum since the record
    /// was cached (the first read after the node opened the file or after a write): later
    /// reads may skip the check and go zero-copy (see `crate::verify`).
    verified: std::sync::atomic::AtomicBool,
    /// The answer headers of a GET of this record, rendered by its first GET: they change
    /// only when the record does, and every change of the object drops the record.
    headers: OnceLock<axum::http::HeaderMap>,
    /// When (milliseconds on [`coarse_ms`]'s clock, plus one; 0: never) a check found the
    /// whole data file in the page cache.
    resident_at: std::sync::atomic::AtomicU64,
}

/// Milliseconds since this process first asked.
pub(crate) fn coarse_ms() -> u64 {
    static START: std::sync::LazyLock<std::time::Instant> =
        std::sync::LazyLock::new(std::time::Instant::now);
    START.elapsed().as_millis() as u64
}

impl Cached {
    pub(crate) fn new(root: std::path::PathBuf, meta: impl Into<Arc<ObjectMeta>>) -> Self {
        Self {
            root,
            meta: meta.into(),
            file: OnceLock::new(),
            verified: std::sync::atomic::AtomicBool::new(false),
            headers: OnceLock::new(),
            resident_at: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether a check found the whole data file in the page cache within `window_ms`.
    pub(crate) fn resident_within(&self, now_ms: u64, window_ms: u64) -> bool {
        let at = self.resident_at.load(Ordering::Relaxed);
        at != 0 && now_ms + 1 - at < window_ms
    }

    pub(crate) fn note_resident(&self, now_ms: u64) {
        self.resident_at.store(now_ms + 1, Ordering::Relaxed);
    }

    /// The record's answer headers, rendered by `render` the first time.
    pub(crate) fn headers(
        &self,
        render: impl FnOnce() -> axum::http::HeaderMap,
    ) -> &axum::http::HeaderMap {
        self.headers.get_or_init(render)
    }

    pub(crate) fn verified(&self) -> bool {
        self.verified.load(Ordering::Relaxed)
    }

    pub(crate) fn mark_verified(&self) {
        self.verified.store(true, Ordering::Relaxed);
    }
}

/// A data file kept open by the cache; its descriptor returns to the budget when dropped.
#[derive(Debug)]
struct KeptFile {
    file: Arc<File>,
    budget: Arc<FdBudget>,
}

impl Drop for KeptFile {
    fn drop(&mut self) {
        self.budget.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many data files the cache may keep open at once.
#[derive(Debug)]
struct FdBudget {
    open: AtomicUsize,
    max: usize,
}

impl FdBudget {
    fn take(&self) -> bool {
        self.open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }
}

/// Recently read object metadata, keyed by (bucket uname, object name). Every committed index
/// change of a key drops its entry ([`MetaCache::forget`], called by the index after the
/// commit); a lookup that raced such a change cannot re-insert the old record (the shard's
/// generation moved, see [`MetaCache::insert_if`]). Full shards evict in CLOCK order, so the
/// memory bound is `capacity` entries.
pub(crate) struct MetaCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    fds: Arc<FdBudget>,
}

/// A 128-bit hash of (bucket, name): lookups need no allocation; a hit is confirmed against
/// the names stored in the metadata, so even a collision cannot return the wrong object.
type Key = u128;

fn key(bucket: &str, name: &str) -> Key {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(bucket.as_bytes());
    h.update(&[0]);
    h.update(name.as_bytes());
    h.digest128()
}

struct Shard {
    map: HashMap<Key, Slot>,
    /// Keys in insertion order; the CLOCK hand walks it.
    ring: Vec<Key>,
    hand: usize,
    /// Bumped by every forget: an insert based on a lookup older than a change is refused.
    generation: u64,
}

struct Slot {
    meta: Arc<Cached>,
    /// Set on every hit; the CLOCK hand clears it once before evicting.
    referenced: bool,
    /// Where the key sits in the ring.
    pos: usize,
}

impl std::fmt::Debug for MetaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaCache")
            .field("capacity", &(self.per_shard * SHARDS))
            .finish()
    }
}

impl MetaCache {
    /// A cache of at most `capacity` entries (0 disables it), keeping at most `open_files`
    /// data files open.
    pub(crate) fn new(capacity: usize, open_files: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::new(),
                        ring: Vec::new(),
                        hand: 0,
                        generation: 0,
                    })
                })
                .collect(),
            per_shard: capacity.div_ceil(SHARDS),
            fds: Arc::new(FdBudget {
                open: AtomicUsize::new(0),
                max: open_files,
            }),
        }
    }

    /// The data file of a cached entry: the descriptor the entry keeps, shared (no `dup`,
    /// no `close` per GET), or — the first time — the file opened by path (and kept, if the
    /// budget allows).
    pub(crate) fn open_file(&self, hit: &Cached) -> std::io::Result<Arc<File>> {
        if let Some(kept) = hit.file.get() {
            return Ok(kept.file.clone());
        }
        let file = Arc::new(File::open(hit.root.join(&hit.meta.file))?);
        if self.fds.take() {
            // Another GET may have kept one first: ours is dropped (and returned).
            drop(hit.file.set(KeptFile {
                file: file.clone(),
                budget: self.fds.clone(),
            }));
        }
        Ok(file)
    }

    fn shard(&self, key: Key) -> &Mutex<Shard> {
        &self.shards[(key as usize) % SHARDS]
    }

    pub(crate) fn get(&self, bucket: &str, name: &str) -> Option<Arc<Cached>> {
        if self.per_shard == 0 {
            return None;
        }
        let key = key(bucket, name);
        let mut shard = self.shard(key).lock().expect("meta cache lock");
        let slot = shard.map.get_mut(&key)?;
        if slot.meta.meta.bucket != bucket || slot.meta.meta.name != name {
            return None;
        }
        slot.referenced = true;
        Some(slot.meta.clone())
    }

    /// The generation to pass to [`MetaCache::insert_if`]: read it before the index lookup.
    pub(crate) fn generation(&self, bucket: &str, name: &str) -> u64 {
        self.shard(key(bucket, name))
            .lock()
            .expect("meta cache lock")
            .generation
    }

    /// Caches a record read from the index, unless the key's shard changed since
    /// `generation` was read (the record may be older than a committed change).
    pub(crate) fn insert_if(&self, generation: u64, meta: Arc<Cached>) {
        if self.per_shard == 0 {
            return;
        }
        let key = key(&meta.meta.bucket, &meta.meta.name);
        let mut shard = self.shard(key).lock().expect("meta cache lock");
        if shard.generation != generation {
            return;
        }
        if let Some(slot) = shard.map.get_mut(&key) {
            slot.meta = meta;
            return;
        }
        if shard.map.len() >= self.per_shard {
            shard.evict_one();
        }
        let pos = shard.ring.len();
        shard.ring.push(key);
        shard.map.insert(
            key,
            Slot {
                meta,
                referenced: false,
                pos,
            },
        );
    }

    /// Drops the entry of an object that changed or went away (after the change committed).
    pub(crate) fn forget(&self, bucket: &str, name: &str) {
        if self.per_shard == 0 {
            return;
        }
        let key = key(bucket, name);
        let mut shard = self.shard(key).lock().expect("meta cache lock");
        shard.generation += 1;
        if let Some(slot) = shard.map.remove(&key) {
            shard.remove_at(slot.pos);
        }
    }

    /// Drops every entry of a bucket (destroyed or evicted as a whole).
    pub(crate) fn forget_bucket(&self, bucket: &str) {
        for shard in &self.shards {
            let mut shard = shard.lock().expect("meta cache lock");
            let Shard {
                map,
                ring,
                hand,
                generation,
            } = &mut *shard;
            *generation += 1;
            map.retain(|_, s| s.meta.meta.bucket != bucket);
            ring.retain(|k| map.contains_key(k));
            for (pos, k) in ring.iter().enumerate() {
                map.get_mut(k).expect("ring and map agree").pos = pos;
            }
            *hand = 0;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().expect("meta cache lock").map.len())
            .sum()
    }
}

impl Shard {
    /// Takes ring slot `pos` out (the last key moves into it).
    fn remove_at(&mut self, pos: usize) {
        self.ring.swap_remove(pos);
        if let Some(moved) = self.ring.get(pos) {
            self.map.get_mut(moved).expect("ring and map agree").pos = pos;
        }
        if self.hand >= self.ring.len() {
            self.hand = 0;
        }
    }

    /// CLOCK: skip (and clear) referenced entries, evict the first unreferenced one.
    fn evict_one(&mut self) {
        for _ in 0..=2 * self.ring.len() {
            if self.ring.is_empty() {
                return;
            }
            if self.hand >= self.ring.len() {
                self.hand = 0;
            }
            let slot = self
                .map
                .get_mut(&self.ring[self.hand])
                .expect("ring and map agree");
            if slot.referenced {
                slot.referenced = false;
                self.hand += 1;
                continue;
            }
            let key = self.ring[self.hand];
            self.map.remove(&key);
            self.remove_at(self.hand);
            return;
        }
    }
}

/// Reads exactly `buf.len()` bytes at `offset` if all of them are in the page cache, without
/// ever waiting for the disk (`preadv2` with `RWF_NOWAIT`). `Ok(false)`: some bytes are not
/// cached (or the filesystem cannot tell); read them in the blocking pool instead.
pub(crate) fn read_if_cached(
    file: &std::fs::File,
    buf: &mut [u8],
    offset: u64,
) -> std::io::Result<bool> {
    use rustix::io::{Errno, ReadWriteFlags, preadv2};
    let mut done = 0usize;
    while done < buf.len() {
        let mut iov = [std::io::IoSliceMut::new(&mut buf[done..])];
        match preadv2(file, &mut iov, offset + done as u64, ReadWriteFlags::NOWAIT) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(Errno::INTR) => continue,
            // Not cached, or RWF_NOWAIT unsupported here: the caller reads it the slow way.
            Err(Errno::AGAIN | Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(bucket: &str, name: &str, size: u64) -> Arc<Cached> {
        Arc::new(Cached::new(
            "/mp".into(),
            ObjectMeta::bare(bucket, name, size, String::new()),
        ))
    }

    impl MetaCache {
        fn insert(&self, m: Arc<Cached>) {
            let g = self.generation(&m.meta.bucket, &m.meta.name);
            self.insert_if(g, m);
        }
    }

    #[test]
    fn a_residency_check_stands_for_its_window_only() {
        let m = meta("b", "o", 16);
        assert!(!m.resident_within(0, 1000), "never checked");
        m.note_resident(5);
        assert!(m.resident_within(5, 1000) && m.resident_within(1004, 1000));
        assert!(!m.resident_within(1005, 1000), "the window is over");
    }

    #[test]
    fn hits_misses_and_forget() {
        let c = MetaCache::new(64, 8);
        assert!(c.get("b", "o").is_none());
        c.insert(meta("b", "o", 5));
        assert_eq!(c.get("b", "o").unwrap().meta.size, 5);
        c.insert(meta("b", "o", 6)); // replaced, not duplicated
        assert_eq!(c.get("b", "o").unwrap().meta.size, 6);
        assert_eq!(c.len(), 1);
        c.forget("b", "o");
        assert!(c.get("b", "o").is_none());
        c.insert(meta("b", "x", 1));
        c.insert(meta("other", "y", 1));
        c.forget_bucket("b");
        assert!(c.get("b", "x").is_none());
        assert!(c.get("other", "y").is_some());
    }

    #[test]
    fn bounded_and_keeps_referenced_entries() {
        let c = MetaCache::new(SHARDS * 4, 8);
        for i in 0..10_000 {
            c.insert(meta("b", &format!("o{i}"), i));
            // One entry is read all the time: CLOCK keeps it.
            c.insert(meta("b", "hot", 1));
            assert!(c.get("b", "hot").is_some(), "hot entry evicted at {i}");
        }
        assert!(c.len() <= SHARDS * 4, "{} entries", c.len());
    }

    #[test]
    fn a_lookup_older_than_a_change_is_not_cached() {
        let c = MetaCache::new(64, 8);
        let before = c.generation("b", "o"); // a GET samples, then reads the index...
        c.forget("b", "o"); // ...while a PUT commits
        c.insert_if(before, meta("b", "o", 1)); // the GET's (old) record
        assert!(c.get("b", "o").is_none(), "a stale record was cached");
        let now = c.generation("b", "o");
        c.insert_if(now, meta("b", "o", 2));
        assert_eq!(c.get("b", "o").unwrap().meta.size, 2);
    }

    #[test]
    fn keeps_data_files_open_within_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let entry = |name: &str| {
            std::fs::write(dir.path().join(name), name).unwrap();
            let m = meta("b", name, name.len() as u64);
            let mut meta = (*m.meta).clone();
            meta.file = name.into();
            Arc::new(Cached::new(dir.path().into(), meta))
        };
        let c = MetaCache::new(64, 1);
        let (a, b) = (entry("a"), entry("b"));
        // Positioned reads, as every user of an opened object does: readers share one file
        // offset.
        let read = |f: Arc<File>| {
            let mut buf = [0u8; 8];
            let n = std::os::unix::fs::FileExt::read_at(&*f, &mut buf, 0).unwrap();
            String::from_utf8(buf[..n].to_vec()).unwrap()
        };
        assert_eq!(read(c.open_file(&a).unwrap()), "a");
        assert_eq!(read(c.open_file(&b).unwrap()), "b");
        assert!(
            a.file.get().is_some() && b.file.get().is_none(),
            "budget of one file"
        );
        // The kept descriptor serves the next open, even after the path is gone...
        std::fs::remove_file(dir.path().join("a")).unwrap();
        assert_eq!(read(c.open_file(&a).unwrap()), "a");
        // ...and dropping the entry (as forget does) returns it to the budget.
        drop(a);
        assert_eq!(c.fds.open.load(Ordering::Relaxed), 0);
        assert_eq!(read(c.open_file(&b).unwrap()), "b");
        assert!(b.file.get().is_some());
    }

    #[test]
    fn zero_capacity_disables() {
        let c = MetaCache::new(0, 0);
        c.insert(meta("b", "o", 1));
        assert!(c.get("b", "o").is_none());
    }

    #[test]
    fn reads_cached_bytes() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        f.write_all(&data).unwrap();
        let mut buf = vec![0u8; 4096];
        // Just written: in the page cache.
        assert!(read_if_cached(&f, &mut buf, 1000).unwrap());
        assert_eq!(buf, data[1000..5096]);
        let mut past = vec![0u8; 10];
        assert!(
            read_if_cached(&f, &mut past, 99_995).is_err(),
            "short read at EOF"
        );
    }
}
