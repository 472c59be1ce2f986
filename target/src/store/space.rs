//! Space management of a target: out-of-space refusals and LRU eviction of cached remote
//! objects.
//!
//! Three limits, each with a high mark that starts eviction and a low mark it evicts down to:
//! - each mountpath's filesystem usage (percent of its capacity), as AIStore's watermarks;
//! - the node's total cached bytes of remote buckets (`max_cache_bytes`), absolute;
//! - each remote bucket's cached bytes on this node (bucket property `lru.quota`), absolute.
//!
//! For the absolute limits, the marks are the same percentages of the limit: with the default
//! 90/75 and a 10 GiB quota, eviction starts above 9 GiB and stops at 7.5 GiB. A cold GET past a
//! high mark does not wait for eviction: it wakes the worker, whose pass counts the fill's bytes
//! and evicts in the background while the fill streams. Only a cold GET that would cross a hard
//! limit (a quota, the cache limit) first makes room itself, so a bucket never holds more than
//! its quota even while a dataset twice its size streams through.
//!
//! Eviction takes the least-recently-read objects first (atime: the latest GET, tracked in
//! memory and flushed to the index), skips objects read within `dont_evict_time`, and never
//! touches native `ais://` buckets, which hold the only copy of their data. A pass reads the
//! index's access order of the cached buckets (`store/index/by_atime.rs`) from its oldest
//! entry and stops when the limits are met: it reads about what it evicts
//! (`grist_lru_examined_total`), not every record.
//!
//! A pass that needs room and finds nothing it may evict (native data over the mark, or
//! everything read within `dont_evict_time`) says so once (a warning, the gauge
//! `grist_lru_nothing_evictable`), and until that can have changed — the bucket metadata or
//! the settings change, the first cached object it saw ages past its `dont_evict_time`, or
//! newer cached objects do — later passes return at once instead of walking the index again
//! (`grist_lru_scans_total` counts the passes that read), and fills past a quota or the cache limit get
//! 507. A filesystem's high mark only starts eviction: with nothing to evict, fills go on until
//! the out-of-space mark (other programs' files share the disk; refusing at 90 % of it would
//! stop a cache the disk still has room for).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gristmill_core::{ApiError, Bck, BucketMetadata, ErrorKind};

use crate::store::removal::Unlinked;
use crate::store::{Store, now_ns};

mod oldest;
mod reserved;
mod worker;
pub use reserved::Reservation;
use reserved::Reserved;
pub use worker::LruWorker;
#[cfg(test)]
mod tests;
use oldest::{Candidate, Merge, Order, Room};

/// Candidates picked (read from the index) between rounds of evictions.
const EVICT_BATCH: usize = 1024;
/// Evicted records whose data files wait for one durable commit of the index before they go:
/// a pass commits its batches relaxed and syncs once per this many (a bound on memory).
const UNLINK_BATCH: usize = 16 * EVICT_BATCH;

/// Space settings of a target (environment: see `docs/operations.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceConfig {
    /// Start evicting above this percentage (of a filesystem, or of an absolute limit).
    pub high_wm: u8,
    /// Evict down to this percentage.
    pub low_wm: u8,
    /// Refuse PUTs and cold GETs on a mountpath this full (percent): 507.
    pub out_of_space: u8,
    /// Objects read more recently than this are not evicted (a bucket may set its own).
    pub dont_evict_time: Duration,
    /// How often usage is checked (and pending atimes flushed).
    pub check_interval: Duration,
    /// Most bytes of cached remote objects on this node; 0 = no limit.
    pub max_cache_bytes: u64,
}

impl Default for SpaceConfig {
    fn default() -> Self {
        Self {
            high_wm: 90,
            low_wm: 75,
            out_of_space: 95,
            dont_evict_time: Duration::from_secs(2 * 3600),
            check_interval: Duration::from_secs(30),
            max_cache_bytes: 0,
        }
    }
}

impl SpaceConfig {
    /// Checks the marks: percentages, and low <= high <= out-of-space.
    pub fn validate(&self) -> Result<(), String> {
        for (name, pct) in [
            ("high_wm", self.high_wm),
            ("low_wm", self.low_wm),
            ("out_of_space_wm", self.out_of_space),
        ] {
            if pct > 100 {
                return Err(format!("{name} = {pct}: expected a percentage 0..100"));
            }
        }
        if self.low_wm > self.high_wm || self.high_wm > self.out_of_space {
            return Err(format!(
                "space marks must satisfy low ({}) <= high ({}) <= out-of-space ({})",
                self.low_wm, self.high_wm, self.out_of_space
            ));
        }
        Ok(())
    }

    fn mark(&self, limit: u64, pct: u8) -> u64 {
        (limit as u128 * pct as u128 / 100) as u64
    }
}

/// Space settings shared between a running target and what changes them at run time
/// (`grist config set space.high_wm=85`): every check and pass reads the current ones.
#[derive(Debug, Clone, Default)]
pub struct SharedSpaceConfig(Arc<std::sync::RwLock<SpaceConfig>>);

impl SharedSpaceConfig {
    pub fn new(config: SpaceConfig) -> Self {
        Self(Arc::new(std::sync::RwLock::new(config)))
    }

    /// The current settings.
    pub fn get(&self) -> SpaceConfig {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the settings if they are consistent; otherwise changes nothing.
    pub fn set(&self, config: SpaceConfig) -> Result<(), String> {
        config.validate()?;
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(())
    }
}

/// Filesystem capacity of a mountpath: (total, available) bytes.
fn capacity(path: &std::path::Path) -> Option<(u64, u64)> {
    Some((
        fs4::total_space(path).ok()?,
        fs4::available_space(path).ok()?,
    ))
}

/// Whether a bucket's objects are a cache that LRU may evict.
fn evictable(bmd: &BucketMetadata, bucket_uname: &str) -> Option<(Bck, Duration, u64)> {
    let rec = bmd.buckets.get(bucket_uname)?;
    if !rec.bck.is_remote() || !rec.props.lru.enabled {
        return None;
    }
    let dont_evict = rec.props.lru.dont_evict().ok().flatten();
    Some((
        rec.bck.clone(),
        dont_evict.unwrap_or(Duration::MAX),
        rec.props.lru.quota,
    ))
}

/// An object about to be cached, whose room an eviction pass should make too.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    pub bucket: &'a str,
    pub mountpath: usize,
    pub size: u64,
}

impl<'a> Incoming<'a> {
    /// Borrows (bucket uname, mountpath, bytes) entries, as reservations list them.
    fn all(entries: &'a [(String, usize, u64)]) -> Vec<Self> {
        entries
            .iter()
            .map(|(bucket, mountpath, size)| Incoming {
                bucket,
                mountpath: *mountpath,
                size: *size,
            })
            .collect()
    }
}

/// What one eviction pass did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Evicted {
    pub objects: u64,
    pub bytes: u64,
    /// Room was needed and nothing could be evicted (this pass, or the one it stands for).
    pub nothing_evictable: bool,
    /// Entries of the access order the pass read.
    pub examined: u64,
}

/// What a pass that could evict nothing saw: until it changes, another pass would walk the
/// index for nothing.
#[derive(Debug, Clone)]
struct Futile {
    /// The limits that needed room (a later pass that needs room elsewhere walks).
    needs: Needs,
    bmd_version: u64,
    config: SpaceConfig,
    /// The mountpaths then (one attached or enabled since may bring evictable objects).
    mountpaths: Vec<std::path::PathBuf>,
    at_ns: i64,
    /// When the first cached object it saw becomes old enough to evict (`i64::MAX`: none).
    next_eligible_ns: i64,
    /// Cached bytes then: more since are newer objects, evictable no sooner than
    /// `at_ns + min_keep_ns` (the shortest `dont_evict_time` of the cached buckets).
    cached_bytes: u64,
    min_keep_ns: i64,
    /// Bytes used on the mountpaths' filesystems then.
    fs_used: u64,
}

/// Which limits a pass must make room under.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Needs {
    mountpaths: Vec<usize>,
    cache: bool,
    buckets: Vec<String>,
}

impl Needs {
    fn within(&self, other: &Needs) -> bool {
        self.mountpaths.iter().all(|m| other.mountpaths.contains(m))
            && (!self.cache || other.cache)
            && self.buckets.iter().all(|b| other.buckets.contains(b))
    }
}

/// Space checks and eviction of one target.
pub struct Space {
    config: SharedSpaceConfig,
    store: Arc<Store>,
    /// One eviction at a time (the worker, a manual job, or a cold GET making room).
    evicting: tokio::sync::Mutex<()>,
    /// Wakes the worker early (a cold GET crossed a high mark).
    wake: tokio::sync::Notify,
    /// Set by a pass that could evict nothing (see the module doc).
    futile: std::sync::Mutex<Option<Futile>>,
    /// Bytes of fills admitted and still streaming.
    reserved: Reserved,
}

impl Space {
    pub fn new(config: SharedSpaceConfig, store: Arc<Store>) -> Self {
        Self {
            config,
            store,
            evicting: tokio::sync::Mutex::new(()),
            wake: tokio::sync::Notify::new(),
            futile: std::sync::Mutex::new(None),
            reserved: Reserved::default(),
        }
    }

    /// Whether the last pass could evict nothing and nothing since can have changed that.
    fn still_futile(&self, bmd: &BucketMetadata, c: &SpaceConfig, needs: &Needs) -> bool {
        let futile = self.futile.lock().unwrap_or_else(|e| e.into_inner());
        let Some(f) = futile.as_ref() else {
            return false;
        };
        let now = now_ns();
        needs.within(&f.needs)
            && f.bmd_version == bmd.version
            && f.config == *c
            && f.mountpaths == self.mountpath_paths()
            && now < f.next_eligible_ns
            && (self.cached_bytes(bmd) <= f.cached_bytes
                || now < f.at_ns.saturating_add(f.min_keep_ns))
    }

    /// Whether what made the last pass futile has eased without a pass: bytes were freed,
    /// or the metadata, settings or mountpaths changed (the worker then clears the state and
    /// its gauge even when no pass is due).
    fn relieved(&self, bmd: &BucketMetadata, c: &SpaceConfig) -> bool {
        let futile = self.futile.lock().unwrap_or_else(|e| e.into_inner());
        futile.as_ref().is_some_and(|f| {
            f.bmd_version != bmd.version
                || f.config != *c
                || f.mountpaths != self.mountpath_paths()
                || self.cached_bytes(bmd) < f.cached_bytes
                // (filesystems only when one needed room: others' files come and go)
                || (!f.needs.mountpaths.is_empty() && self.fs_used() < f.fs_used)
        })
    }

    fn fs_used(&self) -> u64 {
        self.store
            .mountpaths()
            .iter()
            .filter_map(|m| capacity(&m.path))
            .map(|(total, avail)| total.saturating_sub(avail))
            .sum()
    }

    fn mountpath_paths(&self) -> Vec<std::path::PathBuf> {
        self.store
            .mountpaths()
            .iter()
            .map(|m| m.path.clone())
            .collect()
    }

    /// The shortest time any cached bucket keeps what was read (`dont_evict_time`): how soon
    /// an object cached now may be evicted.
    fn min_keep_ns(bmd: &BucketMetadata, default_keep: Duration) -> i64 {
        bmd.buckets
            .keys()
            .filter_map(|b| evictable(bmd, b))
            .map(|(_, keep, _)| {
                if keep == Duration::MAX {
                    default_keep
                } else {
                    keep
                }
            })
            .min()
            .map_or(i64::MAX, |k| k.as_nanos().min(i64::MAX as u128) as i64)
    }

    /// The access orders a pass reads: each cached bucket that LRU may evict, on each
    /// mountpath, where evicting from it helps a limit that needs room.
    fn orders(&self, bmd: &BucketMetadata, c: &SpaceConfig, now: i64, room: &Room) -> Vec<Order> {
        let mut orders = Vec::new();
        for (mp, mountpath) in self.store.mountpaths().iter().enumerate() {
            for uname in bmd.buckets.keys() {
                let Some((_, keep, _)) = evictable(bmd, uname) else {
                    continue;
                };
                if !room.helps(mp, uname) {
                    continue;
                }
                let keep = if keep == Duration::MAX {
                    c.dont_evict_time
                } else {
                    keep
                };
                let keep_ns = keep.as_nanos().min(i64::MAX as u128) as i64;
                orders.push(Order::new(
                    (mp, mountpath.clone()),
                    uname.clone(),
                    now,
                    keep_ns,
                ));
            }
        }
        orders
    }

    /// Records the outcome of a pass that read the index: futile or not.
    fn record_pass(&self, futile: Option<Futile>) {
        let mut state = self.futile.lock().unwrap_or_else(|e| e.into_inner());
        match (&*state, &futile) {
            (None, Some(_)) => {
                tracing::warn!(
                    "space: over a limit and nothing is evictable (native data, or every cached object read within dont_evict_time); fills past a quota or the cache limit get 507 until that changes (a filesystem takes them up to its out-of-space mark)"
                );
                metrics::gauge!("grist_lru_nothing_evictable").set(1.0);
            }
            (Some(_), None) => {
                tracing::info!("space: cached objects are evictable again");
                metrics::gauge!("grist_lru_nothing_evictable").set(0.0);
            }
            _ => {}
        }
        *state = futile;
    }

    /// The current settings (they change at run time).
    pub fn config(&self) -> SpaceConfig {
        self.config.get()
    }

    /// Refuses a write of `size` bytes to the mountpath that owns `bck/name` when that
    /// filesystem is past the out-of-space mark or lacks the room: 507, nothing written.
    pub fn check_room(&self, bck: &Bck, name: &str, size: u64) -> Result<(), ApiError> {
        let mp = self.store.mountpath_for(bck, name);
        let Some((total, avail)) = capacity(&mp.path) else {
            return Ok(());
        };
        let used = total.saturating_sub(avail);
        let c = self.config();
        let oos = c.mark(total, c.out_of_space);
        if used.saturating_add(size) > oos || size > avail {
            return Err(ApiError::new(
                ErrorKind::InsufficientStorage,
                format!(
                    "out of space: mountpath {} is {}% full ({} of {} bytes used; refusing writes above {}%), cannot store {size} more bytes",
                    mp.path.display(),
                    used * 100 / total.max(1),
                    used,
                    total,
                    c.out_of_space
                ),
            ));
        }
        Ok(())
    }

    /// Before caching `size` bytes of remote `bck`: refuses with 507 when the object cannot
    /// fit at all or the disk is out of space, else reserves its bytes until the returned
    /// guard drops (hold it until the object commits). Past a high mark it only wakes the
    /// eviction worker, which makes room in the background while the fill streams; only a fill
    /// that would cross a hard limit (the bucket's quota, the node's cache limit — counting
    /// the fills still streaming — or the out-of-space mark) evicts before it starts, and is
    /// refused if that did not make room: a bucket never holds more than its quota.
    pub async fn admit_cached(
        &self,
        bmd: &BucketMetadata,
        bck: &Bck,
        name: &str,
        size: u64,
    ) -> Result<Reservation, ApiError> {
        let uname = bck.uname();
        let quota = bmd.get(bck).map_or(0, |r| r.props.lru.quota);
        let too_big = |limit: u64, what: &str| {
            ApiError::new(
                ErrorKind::InsufficientStorage,
                format!("{bck}/{name} ({size} bytes) is larger than the {what} of {limit} bytes"),
            )
        };
        if quota > 0 && size > quota {
            return Err(too_big(quota, "bucket's cache quota (lru.quota)"));
        }
        let max_cache = self.config().max_cache_bytes;
        if max_cache > 0 && size > max_cache {
            return Err(too_big(max_cache, "node's cache limit"));
        }
        let c = &self.config();
        let mp = self.store.mountpath_index(&uname, name);
        let mut evicted: Option<Evicted> = None;
        loop {
            // Decided and reserved under one lock: two fills cannot both take the last room.
            let (over_quota, over_cache) = {
                let mut reserved = self.reserved.lock();
                let in_bucket = reserved::sum(&reserved, |b, _| b == uname);
                let in_all = reserved::sum(&reserved, |_, _| true);
                let over_quota =
                    quota > 0 && self.store.bucket_usage(&uname) + in_bucket + size > quota;
                let over_cache =
                    max_cache > 0 && self.cached_bytes(bmd) + in_all + size > max_cache;
                // Past the out-of-space mark the write would be refused: evict first, if
                // anything can go. (A filesystem's high mark is no limit: with nothing to evict
                // — native data, other programs' files — fills go on up to that mark.)
                let over_disk = evicted.is_none()
                    && capacity(&self.store.mountpath_for(bck, name).path).is_some_and(
                        |(total, avail)| {
                            total.saturating_sub(avail) + size > c.mark(total, c.out_of_space)
                        },
                    );
                if !(over_quota || over_cache || over_disk) {
                    self.check_room(bck, name, size)?;
                    let room = self.reserved.take(&mut reserved, &uname, mp, size);
                    drop(reserved);
                    if self.over_high_mark(bmd) {
                        self.wake.notify_one();
                    }
                    return Ok(room);
                }
                (over_quota, over_cache)
            };
            if let Some(pass) = evicted {
                self.check_room(bck, name, size)?; // out of space says so first
                let full = [
                    (over_quota, "the bucket's cache quota (lru.quota)"),
                    (over_cache, "the node's cache limit"),
                ]
                .into_iter()
                .filter_map(|(over, what)| over.then_some(what))
                .collect::<Vec<_>>()
                .join(", ");
                let why = if pass.nothing_evictable {
                    "nothing is evictable (native data, or every cached object read within dont_evict_time)"
                } else {
                    "eviction could not free enough (the rest was read within dont_evict_time, or is still being filled)"
                };
                return Err(ApiError::new(
                    ErrorKind::InsufficientStorage,
                    format!(
                        "no room to cache {bck}/{name} ({size} bytes): {full} is reached and {why}"
                    ),
                ));
            }
            let mut incoming = self.reserved.snapshot();
            incoming.push((uname.clone(), mp, size));
            evicted = Some(self.evict(bmd, false, &Incoming::all(&incoming)).await);
        }
    }

    /// Bytes of cached remote objects on this node.
    fn cached_bytes(&self, bmd: &BucketMetadata) -> u64 {
        self.store
            .usage()
            .iter()
            .filter(|(b, _)| evictable(bmd, b).is_some())
            .map(|(_, n)| n)
            .sum()
    }

    /// Whether a limit is past its high mark, counting the fills still streaming.
    fn over_high_mark(&self, bmd: &BucketMetadata) -> bool {
        let c = &self.config();
        let reserved = self.reserved.lock().clone();
        let fs = self.store.mountpaths().iter().enumerate().any(|(i, mp)| {
            capacity(&mp.path).is_some_and(|(total, avail)| {
                let extra = reserved::sum(&reserved, |_, m| m == i);
                total.saturating_sub(avail) + extra > c.mark(total, c.high_wm)
            })
        });
        let in_all = reserved::sum(&reserved, |_, _| true);
        let cache = c.max_cache_bytes > 0
            && self.cached_bytes(bmd) + in_all > c.mark(c.max_cache_bytes, c.high_wm);
        let quota = self.store.usage().iter().any(|(b, used)| {
            let extra = reserved::sum(&reserved, |r, _| r == b);
            evictable(bmd, b).is_some_and(|(_, _, q)| q > 0 && used + extra > c.mark(q, c.high_wm))
        });
        fs || cache || quota
    }

    /// One eviction pass: frees what is above each high mark down to its low mark (with
    /// `force`, evicts down to the low marks even when under the high ones). `incoming`
    /// reserves room for objects about to be cached.
    pub async fn evict(
        &self,
        bmd: &BucketMetadata,
        force: bool,
        incoming: &[Incoming<'_>],
    ) -> Evicted {
        let _one = self.evicting.lock().await;
        if let Err(e) = self.store.flush_atimes().await {
            tracing::warn!(error = %e, "could not flush access times before eviction");
        }
        let c = self.config();
        let in_size: u64 = incoming.iter().map(|i| i.size).sum();
        let in_mp = |mp: usize| -> u64 {
            incoming
                .iter()
                .filter(|i| i.mountpath == mp)
                .map(|i| i.size)
                .sum()
        };
        let in_bucket = |b: &str| -> u64 {
            incoming
                .iter()
                .filter(|i| i.bucket == b)
                .map(|i| i.size)
                .sum()
        };
        let needed = |used: u64, limit: u64| -> i128 {
            let high = c.mark(limit, c.high_wm);
            if force || used > high {
                used as i128 - c.mark(limit, c.low_wm) as i128
            } else {
                0
            }
        };

        // How many bytes each limit needs freed.
        let mp_need: Vec<i128> = self
            .store
            .mountpaths()
            .iter()
            .enumerate()
            .map(|(i, mp)| match capacity(&mp.path) {
                Some((total, avail)) => {
                    let extra = in_mp(i);
                    needed(total.saturating_sub(avail) + extra, total)
                }
                None => 0,
            })
            .collect();
        let usage = self.store.usage();
        let cache_need = if c.max_cache_bytes > 0 {
            let cached: u64 = usage
                .iter()
                .filter(|(b, _)| evictable(bmd, b).is_some())
                .map(|(_, n)| n)
                .sum();
            needed(cached + in_size, c.max_cache_bytes)
        } else {
            0
        };
        let bucket_need: HashMap<String, i128> = usage
            .iter()
            .filter_map(|(b, used)| {
                let (_, _, quota) = evictable(bmd, b)?;
                if quota == 0 {
                    return None;
                }
                let extra = in_bucket(b);
                Some((b.clone(), needed(used + extra, quota)))
            })
            .collect();
        let nothing_to_do = mp_need.iter().all(|n| *n <= 0)
            && cache_need <= 0
            && bucket_need.values().all(|n| *n <= 0);
        if nothing_to_do {
            self.record_pass(None);
            return Evicted::default();
        }
        let needs = Needs {
            mountpaths: (0..mp_need.len()).filter(|i| mp_need[*i] > 0).collect(),
            cache: cache_need > 0,
            buckets: bucket_need
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(b, _)| b.clone())
                .collect(),
        };
        if !force && self.still_futile(bmd, &c, &needs) {
            return Evicted {
                nothing_evictable: true,
                ..Evicted::default()
            };
        }
        metrics::counter!("grist_lru_scans_total").increment(1);
        let cached_then = self.cached_bytes(bmd);

        // Candidates: cached objects not read recently, oldest access first, read from the
        // access orders of the buckets and mountpaths that need room (see `oldest`).
        let now = now_ns();
        let mut room = Room {
            mountpaths: mp_need,
            cache: cache_need,
            buckets: bucket_need,
        };
        let mut merge = Merge::new(self.orders(bmd, &c, now, &room));
        let mut done = Evicted::default();
        let mut failed = false;
        // What the merge saw, kept apart from it (it is lost if its blocking task panics).
        let (mut any, mut next_eligible) = (false, i64::MAX);
        let mut unlinked = Unlinked::default();
        while room.any() {
            let store = self.store.clone();
            let picked = tokio::task::spawn_blocking(move || {
                let mut batch = Vec::new();
                let mut error = None;
                while batch.len() < EVICT_BATCH && room.any() {
                    let next = merge.next(
                        |mp, bucket| room.helps(mp, bucket),
                        |bucket, name| store.pending_atime(bucket, name),
                    );
                    match next {
                        Ok(Some(c)) => {
                            room.free(c.mp, &c.bucket, c.size.max(1) as i128);
                            batch.push(c);
                        }
                        Ok(None) => break,
                        Err(e) => {
                            error = Some(e);
                            break;
                        }
                    }
                }
                (merge, room, batch, error)
            })
            .await;
            let Ok((m, r, batch, error)) = picked else {
                failed = true;
                break;
            };
            (merge, room) = (m, r);
            (done.examined, any, next_eligible) = (merge.examined, merge.any, merge.next_eligible);
            if let Some(e) = error {
                tracing::warn!(error = %e, "LRU: reading the access order failed");
                failed = true;
            }
            if batch.is_empty() {
                break;
            }
            // One index transaction per (mountpath, bucket) of the batch, side by side.
            let mut groups: HashMap<(usize, String), Vec<Candidate>> = HashMap::new();
            for c in batch {
                // What the pick counted comes back; what the eviction frees counts.
                room.free(c.mp, &c.bucket, -(c.size.max(1) as i128));
                groups.entry((c.mp, c.bucket.clone())).or_default().push(c);
            }
            let store = &self.store;
            let results = futures::future::join_all(groups.into_iter().map(
                |((mp, bucket), picked)| async move {
                    let mountpath = picked[0].mountpath.clone();
                    let names = picked.into_iter().map(|c| (c.name, c.atime_ns)).collect();
                    let freed = store.evict_picked(&mountpath, &bucket, names).await;
                    (mp, mountpath, bucket, freed)
                },
            ))
            .await;
            for (mp, mountpath, bucket, freed) in results {
                match freed {
                    Ok(freed) => {
                        for meta in freed {
                            room.free(mp, &bucket, meta.size.max(1) as i128);
                            done.objects += 1;
                            done.bytes += meta.size;
                            unlinked.add(mp, &mountpath, meta.file);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(bucket, error = %e, "LRU: could not evict");
                        failed = true;
                    }
                }
            }
            if failed {
                break;
            }
            if unlinked.len() >= UNLINK_BATCH && !unlinked.remove_files().await {
                failed = true;
                break;
            }
        }
        failed |= !unlinked.remove_files().await;
        if done.objects > 0 {
            // The evicted records, hidden since their batch, leave the index in the background.
            for mp in self.store.mountpaths() {
                mp.index.start_sweep();
            }
        }
        metrics::counter!("grist_lru_examined_total").increment(done.examined);
        // Not known to be futile after a failed read: the next pass looks again. Candidates
        // that failed to go: look again after a check interval rather than at their
        // `dont_evict_time`.
        let next_eligible_ns = if failed {
            i64::MIN
        } else if !any {
            next_eligible
        } else {
            next_eligible.min(now.saturating_add(c.check_interval.as_nanos() as i64))
        };
        if done.objects == 0 {
            self.record_pass(Some(Futile {
                needs,
                bmd_version: bmd.version,
                config: c.clone(),
                mountpaths: self.mountpath_paths(),
                at_ns: now,
                next_eligible_ns,
                cached_bytes: cached_then,
                min_keep_ns: Self::min_keep_ns(bmd, c.dont_evict_time),
                fs_used: self.fs_used(),
            }));
            done.nothing_evictable = true;
        } else {
            self.record_pass(None);
        }
        if done.objects > 0 {
            tracing::info!(
                objects = done.objects,
                bytes = done.bytes,
                "LRU evicted cached objects"
            );
            metrics::counter!("grist_lru_evicted_objects_total").increment(done.objects);
            metrics::counter!("grist_lru_evicted_bytes_total").increment(done.bytes);
        }
        done
    }

    /// Usage report (`GET /v1/daemon?what=space`): per mountpath and per bucket.
    pub fn report(&self, bmd: &BucketMetadata) -> serde_json::Value {
        let mountpaths: Vec<serde_json::Value> = self
            .store
            .mountpaths()
            .iter()
            .map(|mp| {
                let (total, avail) = capacity(&mp.path).unwrap_or((0, 0));
                // Mountpaths on one file system each report all of it: `fs` (its device id)
                // lets a reader count it once.
                let fs = std::fs::metadata(&mp.path).map_or(0, |m| {
                    use std::os::unix::fs::MetadataExt;
                    m.dev()
                });
                serde_json::json!({"path": mp.path, "total": total, "available": avail,
                    "used": total.saturating_sub(avail), "fs": fs})
            })
            .collect();
        let c = &self.config();
        serde_json::json!({
            "mountpaths": mountpaths,
            "buckets": self.store.usage(),
            "bucket_objects": self.store.object_counts(),
            "cached_bytes": self.cached_bytes(bmd),
            "config": {"high_wm": c.high_wm, "low_wm": c.low_wm, "out_of_space": c.out_of_space,
                "max_cache_bytes": c.max_cache_bytes,
                "dont_evict_time_secs": c.dont_evict_time.as_secs()},
        })
    }

    /// Wakes the worker (e.g. many pending access times to flush).
    pub fn nudge(&self) {
        self.wake.notify_one();
    }
}
