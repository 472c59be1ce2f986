//! The object store of one target: its mountpaths, where each object's bytes live, and the
//! PUT / GET / HEAD / DELETE / list operations on them.
//!
//! On-disk layout of a mountpath:
//! ```text
//! <mountpath>/index.redb                      metadata index (see `index`)
//! <mountpath>/obj/<bucket-hash>/<xx>/<name-hash>.<generation>   object bytes (+ xattr metadata)
//! <mountpath>/tmp/                            in-flight writes; emptied at startup
//! <mountpath>/trash/                          dropped buckets awaiting removal
//! ```
//! File names come from hashes of the bucket and object names, never from the names themselves,
//! so no key can escape the mountpath or exceed a name-length limit. Every write gets a fresh
//! generation suffix and becomes visible only when the index commit that references it lands.
mod tuning;
pub use tuning::StoreTuning;
mod atimes;
pub(crate) mod error;
pub(crate) mod hot;

pub(crate) mod index;

pub(crate) mod meta;

pub mod multipart;

pub mod space;

pub(crate) mod stream;

use crate::store::error::StoreError;
use crate::store::index::{IndexOp, ObjectIndex};
use crate::store::meta::ObjectMeta;
use bytes::Bytes;
use futures::Stream;
use gristmill_core::{ApiError, Bck};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use xxhash_rust::xxh64::Xxh64;
mod mountset;
pub use mountset::{Changed, Misplaced, MountSet, Moved, MpAction, MpState, WalkCursor};

mod pending;
pub use pending::PendingWrite;

mod removal;
pub use removal::KeptCopy;

mod files;
use files::{
    create_fan_out_dir, data_file_name, open_mountpath, remove_data_file, remove_orphans,
    set_meta_xattr,
};
#[cfg(test)]
mod tests;
/// S3 versions of an object here: finding, listing and deleting them for good.
mod versions;

/// Default checksum algorithm (AIStore's default too).
pub const CKSUM_XXHASH: &str = "xxhash";

/// One disk (or directory) that the target fully owns.
#[derive(Debug)]
pub struct Mountpath {
    /// Absolute, cleaned path; also the mountpath's identity for placement.
    pub path: PathBuf,
    /// `xxhash64(path)`, the mountpath's HRW digest.
    pub digest: u64,
    pub index: ObjectIndex,
}

impl Mountpath {
    fn tmp_dir(&self) -> PathBuf {
        self.path.join("tmp")
    }
}

/// How a PUT should be committed.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// fsync data and directory before acknowledging (native buckets); cache fills skip it.
    pub durable: bool,
    /// Version to record (remote objects keep the remote's); empty = next local version.
    pub version: String,
    /// Extra metadata to store with the object.
    pub custom: std::collections::BTreeMap<String, String>,
    /// Expected size, when the sender declared one; a mismatch fails the PUT.
    pub expected_size: Option<u64>,
    /// Expected xxhash checksum (hex), when the sender declared one.
    pub expected_xxhash: Option<String>,
    /// Expected MD5 (hex, lowercase; needs `compute_md5`): a cold GET checks a remote's plain
    /// S3 ETag with it.
    pub expected_md5: Option<String>,
    /// Also compute the MD5 of the body and record it as the object's `ETag` (S3 clients
    /// expect ETag = MD5). Off for native PUTs: MD5 runs at ~0.6 GB/s per core.
    pub compute_md5: bool,
    /// S3 checksum algorithms (`CRC32`, `CRC32C`, `SHA1`, `SHA256`, `CRC64NVME`) to compute and
    /// record as `x-amz-checksum-*` metadata.
    pub s3_checksums: Vec<String>,
    /// Modification time to record (an object moved by rebalance keeps its own); None = now.
    pub mtime_ns: Option<i64>,
    /// How the object's generation is decided: a new write on the owner (the default) or a
    /// copy sent by another node with its own.
    pub generation: crate::store::index::GenRule,
    /// Commit the index entry without waiting for an fsync ([`ObjectIndex::apply_relaxed`]):
    /// for cache fills, whose loss in a crash is harmless. The data file must be on disk
    /// before the commit (written and synced by the caller), or a power loss could leave an
    /// entry whose bytes are not.
    pub relaxed_index: bool,
    /// A conditional write's precondition, decided atomically with the commit.
    pub condition: Option<crate::store::index::WriteCondition>,
}

/// Custom-metadata key holding an object's S3 ETag (without quotes).
pub const ETAG_KEY: &str = "ETag";
pub use gristmill_core::name::{DELETE_MARKER_KEY, NULL_VERSION_ID, VERSION_ID_KEY};
/// [`VERSION_ID_KEY`] on a write: mint a new id when the generation is decided.
pub const MINT_VERSION_ID: &str = "mint";

/// An open object ready to be streamed.
#[derive(Debug)]
pub struct OpenObject {
    pub meta: Arc<ObjectMeta>,
    /// The data file. It may be the descriptor the metadata cache keeps open, shared with
    /// other readers (one file offset): read it with positioned reads only.
    pub file: Arc<std::fs::File>,
    /// The whole content, already read, for objects up to [`PREFETCH_MAX`] bytes.
    pub data: Option<Bytes>,
    /// The object's record in the metadata cache (it remembers whether a read verified it).
    pub(crate) record: Option<Arc<crate::store::hot::Cached>>,
}

/// Whether opening a small object (up to [`PREFETCH_MAX`]) reads its bytes into memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmallObject {
    /// Read them (the caller checks or transforms them).
    Read,
    /// Leave them in the file if the cached record was verified by an earlier whole read.
    FromFileIfVerified,
    /// Leave them in the file (a warm record; nothing will check them).
    FromFile,
}

/// Generations carry the cluster epoch in their high 32 bits: the version of the cluster map
/// under which the owner assigned them (the low 32 bits count writes within it). A map that
/// removes a target has a higher version than any map that target acted under, so whatever is
/// written or deleted while it is out orders after every copy and tombstone it holds — also
/// when it comes back with them. Generations from before epochs (below `1 << 32`) are epoch 0.
pub const EPOCH_SHIFT: u32 = 32;

/// The first generation of `epoch`.
pub fn epoch_floor(epoch: u64) -> u64 {
    epoch.min(u64::from(u32::MAX)) << EPOCH_SHIFT
}

/// The epoch a generation was assigned in.
pub fn epoch_of(generation: u64) -> u64 {
    generation >> EPOCH_SHIFT
}

/// Objects up to this size are read together with their lookup (one blocking-pool trip).
pub const PREFETCH_MAX: u64 = 128 * 1024;

/// The storage engine of one target.
#[derive(Debug)]
pub struct Store {
    /// The current mountpath set; replaced as a whole by runtime changes (see `mountset`).
    mountpaths: std::sync::RwLock<Arc<MountSet>>,
    /// Persistence of the set, the resilver's state and writes in flight.
    dynamic: Arc<mountset::Dynamic>,
    generation: AtomicU64,
    /// The cluster epoch new generations are assigned in (see [`Store::set_epoch`]).
    cluster_epoch: AtomicU64,
    /// Bytes stored per bucket uname, across mountpaths; kept current by every commit, delete
    /// and drop, so quota checks never walk the index.
    usage: Arc<Usage>,
    /// Access times not yet written to the index, by (bucket uname, object name). Reads only
    /// touch this map; [`Store::flush_atimes`] writes them in one transaction per mountpath.
    atimes: atimes::Atimes,
    /// Records of recently read objects (shared with every mountpath's index, which drops
    /// changed keys): warm GETs skip the index and the blocking pool.
    hot: Arc<crate::store::hot::MetaCache>,
    /// Cache sizes, also for mountpaths attached later.
    tuning: StoreTuning,
}

/// Bytes and objects per bucket uname.
#[derive(Debug, Default)]
struct Usage(Mutex<HashMap<String, Tally>>);

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    bytes: u64,
    objects: u64,
}

/// Whether a record counts as an object: a current version, not a version slot.
fn is_current(m: &ObjectMeta) -> bool {
    !gristmill_core::name::split_version_slot(&m.name).1
}

impl Usage {
    /// The record `added` stored (if any) in place of `removed` (if any). Bytes count every
    /// record, objects only current versions (noncurrent versions and delete markers of a
    /// versioned bucket are not objects).
    fn account(
        &self,
        bucket_uname: &str,
        added: Option<&ObjectMeta>,
        removed: Option<&ObjectMeta>,
    ) {
        let mut usage = self.0.lock().expect("usage lock");
        let v = usage.entry(bucket_uname.to_owned()).or_default();
        if let Some(m) = added {
            v.bytes = v.bytes.saturating_add(m.size);
            v.objects += u64::from(is_current(m));
        }
        if let Some(m) = removed {
            v.bytes = v.bytes.saturating_sub(m.size);
            v.objects = v.objects.saturating_sub(u64::from(is_current(m)));
        }
    }

    /// A record moved between an object's current place and a version slot (its bytes stay).
    fn moved_current(&self, bucket_uname: &str, to_current: bool) {
        let mut usage = self.0.lock().expect("usage lock");
        let v = usage.entry(bucket_uname.to_owned()).or_default();
        v.objects = if to_current {
            v.objects + 1
        } else {
            v.objects.saturating_sub(1)
        };
    }
}

/// Pending access times beyond which a flush is due regardless of the timer.
pub const ATIME_FLUSH_AT: usize = 100_000;

impl Store {
    /// Opens every mountpath (creating its layout), then removes orphans left by a crash.
    /// The set can change at runtime but is not persisted (see [`Store::open_with_state`]).
    pub async fn open(paths: &[PathBuf]) -> Result<Arc<Self>, StoreError> {
        Self::open_with_state(paths, None, StoreTuning::default()).await
    }

    /// Like [`Store::open`], with the mountpath set persisted in `state_file`: runtime
    /// changes survive a restart, and `paths` are merged with the persisted set (see
    /// `mountset`).
    pub async fn open_with_state(
        paths: &[PathBuf],
        state_file: Option<&Path>,
        tuning: StoreTuning,
    ) -> Result<Arc<Self>, StoreError> {
        if paths.is_empty() {
            return Err(ApiError::bad_request("a target needs at least one mountpath").into());
        }
        let (plan, dynamic) = mountset::plan(paths, state_file)?;
        let hot = Arc::new(crate::store::hot::MetaCache::new(
            tuning.meta_cache_entries,
            tuning.kept_open_files(),
        ));
        let mut set = MountSet::default();
        for (path, state) in plan {
            let mp = open_mountpath(&path, hot.clone(), tuning.index_cache_bytes)?;
            set.push(state, Arc::new(mp));
        }
        set.sort();
        let store = Arc::new(Self {
            mountpaths: std::sync::RwLock::new(Arc::new(set)),
            dynamic: Arc::new(dynamic),
            generation: AtomicU64::new(now_ns() as u64),
            cluster_epoch: AtomicU64::new(0),
            usage: Arc::default(),
            atimes: Default::default(),
            hot,
            tuning,
        });
        for mp in store.mountpaths() {
            let removed = tokio::task::spawn_blocking(move || remove_orphans(&mp))
                .await
                .map_err(|e| StoreError::Index(e.to_string()))??;
            if removed > 0 {
                tracing::warn!(
                    removed,
                    "removed orphaned files left by an interrupted write"
                );
            }
        }
        let indexes: Vec<ObjectIndex> =
            store.mountpaths().iter().map(|m| m.index.clone()).collect();
        let usage = tokio::task::spawn_blocking(move || -> Result<_, StoreError> {
            let mut usage: HashMap<String, Tally> = HashMap::new();
            for index in &indexes {
                index.for_each(|m| {
                    let current = is_current(&m);
                    let t = usage.entry(m.bucket).or_default();
                    t.bytes += m.size;
                    t.objects += u64::from(current);
                })?;
            }
            Ok(usage)
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))??;
        *store.usage.0.lock().expect("usage lock") = usage;
        Ok(store)
    }

    /// Bytes stored for one bucket (by uname) on this target.
    pub fn bucket_usage(&self, bucket_uname: &str) -> u64 {
        let usage = self.usage.0.lock().expect("usage lock");
        usage.get(bucket_uname).map_or(0, |t| t.bytes)
    }

    /// Bytes stored per bucket uname on this target.
    pub fn usage(&self) -> HashMap<String, u64> {
        let usage = self.usage.0.lock().expect("usage lock");
        usage.iter().map(|(b, t)| (b.clone(), t.bytes)).collect()
    }

    /// Objects stored per bucket uname (replicas included; current versions only, not a
    /// versioned bucket's noncurrent versions and delete markers), kept current like
    /// [`Self::usage`].
    pub fn object_counts(&self) -> HashMap<String, u64> {
        let usage = self.usage.0.lock().expect("usage lock");
        usage.iter().map(|(b, t)| (b.clone(), t.objects)).collect()
    }

    /// Records a read of an object (for LRU); written to the index by [`Self::flush_atimes`].
    /// Returns true when enough times are pending that a flush is due.
    pub fn touch(&self, bucket_uname: &str, name: &str) -> bool {
        // One shard filling its share is as good a signal as the whole map filling up.
        self.atimes.touch(bucket_uname, name, now_ns()) >= ATIME_FLUSH_AT / 16
    }

    /// The latest access time of an object: a pending read, else the stored atime.
    pub fn atime(&self, meta: &ObjectMeta) -> i64 {
        self.atimes
            .get(&meta.bucket, &meta.name)
            .unwrap_or(0)
            .max(meta.atime_ns)
    }

    /// Stores records whose data files do not exist, on their owning mountpaths (relaxed
    /// commits, shared transactions): how `benches/lru_pass.rs` builds an index of 10 M
    /// objects in a minute. Not for a serving store: a GET of such a record fails.
    #[doc(hidden)]
    pub async fn put_records_without_data(
        &self,
        records: Vec<ObjectMeta>,
    ) -> Result<(), StoreError> {
        use futures::StreamExt;
        let set = self.set();
        let mut puts = futures::stream::iter(records.into_iter().map(|meta| {
            let index = set.available[set.pick(&meta.bucket, &meta.name)]
                .index
                .clone();
            async move {
                let stored = index
                    .apply_relaxed(IndexOp::Put {
                        meta,
                        generation: index::GenRule::AsIs,
                        condition: None,
                    })
                    .await?
                    .stored;
                Ok::<_, StoreError>(stored)
            }
        }))
        .buffer_unordered(2048);
        while let Some(stored) = puts.next().await {
            if let Some(m) = stored? {
                self.usage.account(&m.bucket, Some(&m), None);
            }
        }
        Ok(())
    }

    /// A read of an object not yet written to the index, if any.
    pub fn pending_atime(&self, bucket_uname: &str, name: &str) -> Option<i64> {
        self.atimes.get(bucket_uname, name)
    }

    /// Writes pending access times to the indexes (one transaction per mountpath).
    pub async fn flush_atimes(&self) -> Result<usize, StoreError> {
        // Visible to eviction passes until the commits below are done (dropped at return).
        let mut flushing = self.atimes.drain();
        let pending = std::mem::take(&mut flushing.entries);
        let n = pending.len();
        let set = self.set();
        let mut by_mp: HashMap<usize, Vec<(String, String, i64)>> = HashMap::new();
        for (bucket, name, t) in pending {
            let i = set.pick(&bucket, &name);
            by_mp.entry(i).or_default().push((bucket, name, t));
        }
        for (i, entries) in by_mp {
            set.available[i]
                .index
                .apply(IndexOp::Touch(entries))
                .await?;
        }
        Ok(n)
    }

    /// Every open mountpath: the enabled ones (in placement order) first, then disabled and
    /// detaching ones (see [`MountSet`]).
    pub fn mountpaths(&self) -> Vec<Arc<Mountpath>> {
        self.set().all().cloned().collect()
    }

    /// The mountpath that owns an object, by HRW over the enabled mountpaths' digests.
    pub fn mountpath_for(&self, bck: &Bck, name: &str) -> Arc<Mountpath> {
        self.set().owner(&bck.uname(), name).clone()
    }

    /// Position of the mountpath that owns an object (by bucket uname and name) among the
    /// enabled ones (which come first in [`Store::mountpaths`]).
    pub fn mountpath_index(&self, bucket_uname: &str, name: &str) -> usize {
        self.set().pick(bucket_uname, name)
    }

    /// Every object record of every mountpath, with the mountpath's position in
    /// [`Store::mountpaths`] (blocking; for LRU scans and rebuilds).
    pub fn for_each_object(&self, mut f: impl FnMut(usize, ObjectMeta)) -> Result<(), StoreError> {
        for (i, mp) in self.mountpaths().iter().enumerate() {
            mp.index.for_each(|m| f(i, m))?;
        }
        Ok(())
    }

    /// Sets the cluster epoch (the version of the cluster map this target acts under): every
    /// generation assigned from now on — a write, a delete, a metadata change — is at least
    /// `epoch << 32` (see [`epoch_floor`]). Never goes back.
    pub fn set_epoch(&self, epoch: u64) {
        self.cluster_epoch.fetch_max(epoch, Ordering::SeqCst);
    }

    /// The lowest generation a new write or delete may take now: `floor`, raised to the
    /// current epoch's first generation.
    pub fn gen_floor(&self, floor: u64) -> u64 {
        floor.max(epoch_floor(self.cluster_epoch.load(Ordering::SeqCst)))
    }

    /// Every tombstone of every mountpath: bucket uname, object name, generation (blocking).
    pub fn for_each_tombstone(&self, mut f: impl FnMut(&str, &str, u64)) -> Result<(), StoreError> {
        for mp in self.mountpaths().iter() {
            mp.index.for_each_tombstone(&mut f)?;
        }
        Ok(())
    }

    /// Starts writing an object: a temp file on the owning mountpath that fills chunk by chunk
    /// and becomes the object only on [`PendingWrite::commit`]. Dropping it without a commit
    /// removes the temp file.
    pub async fn begin_write(
        &self,
        bck: &Bck,
        name: &str,
        mut opts: PutOptions,
    ) -> Result<PendingWrite, StoreError> {
        if let crate::store::index::GenRule::Next { floor } = opts.generation {
            opts.generation = crate::store::index::GenRule::Next {
                floor: self.gen_floor(floor),
            };
        }
        let ticket = self.write_ticket();
        let mp = self.mountpath_for(bck, name);
        let others = self.other_copies(&mp);
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let tmp = mp.tmp_dir().join(format!("{:016x}", generation));
        let file = tokio::fs::File::create(&tmp).await?;
        Ok(PendingWrite {
            mp,
            others,
            _ticket: ticket,
            usage: self.usage.clone(),
            bucket: bck.uname(),
            name: name.to_owned(),
            generation,
            out: Some(tokio::io::BufWriter::with_capacity(1 << 20, file)),
            xxhash: Xxh64::new(0),
            md5: opts.compute_md5.then(<md5::Md5 as md5::Digest>::new),
            s3: gristmill_node::s3::checksum_hasher(&opts.s3_checksums),
            size: 0,
            opts,
            tmp: Some(tmp),
        })
    }

    /// Stores an object from a stream of chunks. The object becomes visible atomically when the
    /// metadata commit lands; on any error nothing of it remains.
    pub async fn put<S, E>(
        &self,
        bck: &Bck,
        name: &str,
        body: S,
        opts: PutOptions,
    ) -> Result<ObjectMeta, StoreError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        let mut pending = self.begin_write(bck, name, opts).await?;
        pending.write_stream(body).await?;
        pending.commit().await
    }

    /// Metadata of one object.
    pub fn head(&self, bck: &Bck, name: &str) -> Result<ObjectMeta, StoreError> {
        self.locate(bck, name)?
            .map(|(_, meta)| meta)
            .ok_or_else(|| StoreError::not_found(format!("object {bck}/{name}")))
    }

    /// Whether a mountpath other than the object's own still holds the object's current
    /// record — or, with `versions`, any of its noncurrent versions (a resilver not finished).
    pub fn held_off_its_mountpath(
        &self,
        bck: &Bck,
        name: &str,
        versions: bool,
    ) -> Result<bool, StoreError> {
        let bucket = bck.uname();
        for mp in self.lookup_order(bck, name).iter().skip(1) {
            if mp.index.get(&bucket, name)?.is_some()
                || (versions && !mp.index.versions(&bucket, name)?.is_empty())
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Changes an object's custom metadata in place (S3 object tagging): `remove` goes, `set`
    /// is added. The record gets the next generation (above `floor`, as a write's would), so
    /// copies elsewhere know it is newer; the data is not rewritten: the file gets a second
    /// name for the new generation (a hard link), because "the same file" is how a mountpath
    /// move or a rebalance drop tells that a record did not change meanwhile. Size, ETag,
    /// version and modification time stay. A write that commits meanwhile wins, and the
    /// change is made again on it.
    pub async fn patch_custom(
        &self,
        bck: &Bck,
        name: &str,
        set: &std::collections::BTreeMap<String, String>,
        remove: &[String],
        floor: u64,
        lock: index::LockCheck,
    ) -> Result<ObjectMeta, StoreError> {
        for _ in 0..3 {
            let (mp, current) = self
                .locate(bck, name)?
                .ok_or_else(|| StoreError::not_found(format!("object {bck}/{name}")))?;
            // Object Lock: checked against the record the conditional put below replaces.
            if let Some(why) = gristmill_core::object_lock::change_refused(
                &current.custom,
                set,
                remove,
                lock.now_ns,
                lock.bypass_governance,
            ) {
                return Err(StoreError::Api(ApiError::new(
                    gristmill_core::ErrorKind::Forbidden,
                    format!("{bck}/{name}: {why}"),
                )));
            }
            let generation = current
                .effective_gen()
                .max(self.tombstone(bck, name)?)
                .max(self.gen_floor(floor))
                + 1;
            let mut meta = current.clone();
            for k in remove {
                meta.custom.remove(k);
            }
            meta.custom
                .extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
            meta.generation = generation;
            // Named by the store's counter like every write's file, never by the record's
            // generation: that one can repeat after an eviction (no tombstone), and an evicted
            // file waiting for its removal could have the same name.
            let file_gen = self.generation.fetch_add(1, Ordering::Relaxed);
            meta.file = data_file_name(&meta.bucket, name, file_gen);
            let (old, new) = (mp.path.join(&current.file), mp.path.join(&meta.file));
            let linked = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                let _ = std::fs::remove_file(&new); // a leftover of a crashed attempt
                // A version's stored name hashes to a directory of its own, maybe not made yet.
                if let Some(dir) = new.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::hard_link(&old, &new)?;
                // Durable before the record names it: else a crash could keep a record whose
                // file is gone.
                if let Some(dir) = new.parent() {
                    std::fs::File::open(dir)?.sync_all()?;
                }
                Ok(())
            })
            .await
            .map_err(|e| StoreError::Index(e.to_string()))?;
            if let Err(e) = linked {
                if e.kind() == std::io::ErrorKind::NotFound {
                    continue; // replaced meanwhile
                }
                return Err(e.into());
            }
            let applied = mp
                .index
                .apply(IndexOp::Put {
                    meta: meta.clone(),
                    generation: crate::store::index::GenRule::AsIs,
                    condition: Some(crate::store::index::WriteCondition::Unchanged(Some(
                        current.effective_gen(),
                    ))),
                })
                .await?;
            let Some(stored) = applied.stored else {
                remove_data_file(&mp, &meta.file).await; // changed meanwhile: again
                continue;
            };
            remove_data_file(&mp, &current.file).await;
            // The file's own copy of its record (for rebuilding the index), best effort.
            let (path, encoded) = (mp.path.join(&stored.file), stored.encode());
            let _ = tokio::task::spawn_blocking(move || set_meta_xattr(&path, &encoded)).await;
            return Ok(stored);
        }
        Err(ApiError::unavailable(format!(
            "object {bck}/{name} kept changing while its metadata was updated; retry"
        ))
        .into())
    }

    /// Opens an object's data file: index lookup, open and — for objects up to
    /// [`PREFETCH_MAX`] bytes — the whole read, in one trip to the blocking pool. Retries if a
    /// concurrent overwrite replaced the file between the lookup and the open. A recently read
    /// object whose bytes are in the page cache is served without the trip (see `hot`).
    pub async fn open_object(&self, bck: &Bck, name: &str) -> Result<OpenObject, StoreError> {
        self.open_to_send(bck, name, SmallObject::Read).await
    }

    /// [`Store::open_object`] for a GET that says how it will send a small object: with
    /// [`SmallObject::FromFile`] a warm record's bytes are not read into memory (the GET sends
    /// them from the file, zero-copy); `FromFileIfVerified` only once a whole read since the
    /// record was cached checked them.
    pub async fn open_to_send(
        &self,
        bck: &Bck,
        name: &str,
        small: SmallObject,
    ) -> Result<OpenObject, StoreError> {
        self.open_with(bck, name, Some(small)).await
    }

    /// [`Store::open_object`] from the index alone, past the record cache. A returning
    /// target reads this way: its checks judge what the index holds, and the cache may still
    /// hold a record the index has just dropped (a delete commits before the cache forgets).
    pub async fn open_indexed(&self, bck: &Bck, name: &str) -> Result<OpenObject, StoreError> {
        self.open_with(bck, name, None).await
    }

    async fn open_with(
        &self,
        bck: &Bck,
        name: &str,
        hot: Option<SmallObject>,
    ) -> Result<OpenObject, StoreError> {
        use std::os::unix::fs::FileExt;
        let bucket = bck.uname();
        if let Some(small) = hot
            && let Some(open) = self.open_hot(&bucket, name, small)
        {
            return Ok(open);
        }
        let mps = self.lookup_order(bck, name);
        let key = name.to_owned();
        let missing = format!("object {bck}/{name}");
        let hot = self.hot.clone();
        tokio::task::spawn_blocking(move || {
            for _ in 0..3 {
                let generation = hot.generation(&bucket, &key);
                // The file vanishes when an overwrite or a resilver move replaced it: look again.
                let (mp, meta) = mountset::find_in(&mps, &bucket, &key)?
                    .ok_or_else(|| StoreError::not_found(&missing))?;
                let file = match std::fs::File::open(mp.path.join(&meta.file)) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e.into()),
                };
                let meta = Arc::new(meta);
                let record = Arc::new(crate::store::hot::Cached::new(
                    mp.path.clone(),
                    meta.clone(),
                ));
                hot.insert_if(generation, record.clone());
                let data = if meta.size <= PREFETCH_MAX {
                    let mut buf = vec![0u8; meta.size as usize];
                    file.read_exact_at(&mut buf, 0)?;
                    Some(Bytes::from(buf))
                } else {
                    None
                };
                return Ok(OpenObject {
                    meta,
                    file: Arc::new(file),
                    data,
                    record: Some(record),
                });
            }
            Err(StoreError::not_found(&missing))
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))?
    }

    /// The warm path of [`Store::open_object`], on the calling (async) thread: only for a cached
    /// record whose small content is entirely in the page cache (or a large object, whose
    /// body streams through the blocking pool anyway). `None`: take the blocking path.
    fn open_hot(&self, bucket: &str, name: &str, small: SmallObject) -> Option<OpenObject> {
        let hit = self.hot.get(bucket, name)?;
        // Opening a file whose directory entries were just used is a cached lookup; a file
        // gone (overwritten, moved) sends us to the slow path, which looks again.
        let file = self.hot.open_file(&hit).ok()?;
        let from_file = match small {
            SmallObject::Read => false,
            SmallObject::FromFileIfVerified => hit.verified(),
            SmallObject::FromFile => true,
        };
        let data = if hit.meta.size <= PREFETCH_MAX && !from_file {
            let mut buf = vec![0u8; hit.meta.size as usize];
            if !crate::store::hot::read_if_cached(&file, &mut buf, 0).ok()? {
                return None;
            }
            Some(Bytes::from(buf))
        } else {
            None
        };
        Some(OpenObject {
            meta: hit.meta.clone(),
            file,
            data,
            record: Some(hit),
        })
    }

    /// Up to `limit` objects of a bucket after `start_after`, in name order, merged across
    /// mountpaths. With `versions`, noncurrent versions and delete markers too, under their
    /// stored names.
    pub async fn list(
        &self,
        bck: &Bck,
        prefix: &str,
        start_after: &str,
        limit: usize,
        versions: bool,
    ) -> Result<Vec<ObjectMeta>, StoreError> {
        let bucket = bck.uname();
        let prefix = prefix.to_owned();
        let start_after = start_after.to_owned();
        let indexes: Vec<ObjectIndex> = self.mountpaths().iter().map(|m| m.index.clone()).collect();
        tokio::task::spawn_blocking(move || {
            let mut all = Vec::new();
            for index in &indexes {
                all.extend(index.list(&bucket, &prefix, &start_after, limit, versions)?);
            }
            // Newest first among copies of one name (a resilver moving it), then one each.
            all.sort_by(|a, b| a.name.cmp(&b.name).then(b.mtime_ns.cmp(&a.mtime_ns)));
            all.dedup_by(|later, first| later.name == first.name);
            all.truncate(limit);
            Ok(all)
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))?
    }
}

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
