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

pub(crate) mod error;
pub(crate) mod hot;
pub(crate) mod index;
pub(crate) mod meta;
pub mod multipart;
pub mod space;
pub(crate) mod stream;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use gristmill_core::{ApiError, Bck, hrw};
use tokio::io::AsyncWriteExt;
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};
use xxhash_rust::xxh64::Xxh64;

use crate::store::error::StoreError;
use crate::store::index::{IndexOp, ObjectIndex};
use crate::store::meta::{META_XATTR, ObjectMeta};

mod mountset;
pub use mountset::{Changed, Misplaced, MountSet, Moved, MpAction, MpState};

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
}

/// Custom-metadata key holding an object's S3 ETag (without quotes).
pub const ETAG_KEY: &str = "ETag";

/// A copy of an object kept aside by [`Store::keep`]; the link goes when this is dropped.
#[derive(Debug)]
pub struct KeptCopy {
    pub meta: ObjectMeta,
    link: PathBuf,
}

impl Drop for KeptCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.link);
    }
}

/// An open object ready to be streamed.
#[derive(Debug)]
pub struct OpenObject {
    pub meta: ObjectMeta,
    /// The data file. It may be a duplicate of a descriptor the metadata cache keeps open,
    /// sharing one file offset with other readers: read it with positioned reads only.
    pub file: std::fs::File,
    /// The whole content, already read, for objects up to [`PREFETCH_MAX`] bytes.
    pub data: Option<Bytes>,
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
    /// Bytes stored per bucket uname, across mountpaths; kept current by every commit, delete
    /// and drop, so quota checks never walk the index.
    usage: Arc<Usage>,
    /// Access times not yet written to the index, by (bucket uname, object name). Reads only
    /// touch this map; [`Store::flush_atimes`] writes them in one transaction per mountpath.
    atimes: Mutex<HashMap<(String, String), i64>>,
    /// Records of recently read objects (shared with every mountpath's index, which drops
    /// changed keys): warm GETs skip the index and the blocking pool.
    hot: Arc<crate::store::hot::MetaCache>,
}

/// Entries of the hot-record cache (`GRISTD_META_CACHE` overrides): each costs a few hundred
/// bytes, so the default bounds it to about 30 MiB.
const META_CACHE_ENTRIES: usize = 100_000;

/// Data files the metadata cache keeps open: `GRISTD_OPEN_FILES` (0 = none), by default 4096
/// but never more than a quarter of the descriptor limit (connections need the rest).
fn kept_open_files() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let quarter = usize::try_from(limit / 4).unwrap_or(usize::MAX);
    std::env::var("GRISTD_OPEN_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096)
        .min(quarter)
}

fn meta_cache_entries() -> usize {
    std::env::var("GRISTD_META_CACHE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(META_CACHE_ENTRIES)
}

/// Bytes per bucket uname.
#[derive(Debug, Default)]
struct Usage(Mutex<HashMap<String, u64>>);

impl Usage {
    fn account(&self, bucket_uname: &str, added: u64, removed: u64) {
        let mut usage = self.0.lock().expect("usage lock");
        let v = usage.entry(bucket_uname.to_owned()).or_default();
        *v = v.saturating_add(added).saturating_sub(removed);
    }
}

/// Pending access times beyond which a flush is due regardless of the timer.
pub const ATIME_FLUSH_AT: usize = 100_000;

impl Store {
    /// Opens every mountpath (creating its layout), then removes orphans left by a crash.
    /// The set can change at runtime but is not persisted (see [`Store::open_with_state`]).
    pub async fn open(paths: &[PathBuf]) -> Result<Arc<Self>, StoreError> {
        Self::open_with_state(paths, None).await
    }

    /// Like [`Store::open`], with the mountpath set persisted in `state_file`: runtime
    /// changes survive a restart, and `paths` are merged with the persisted set (see
    /// `mountset`).
    pub async fn open_with_state(
        paths: &[PathBuf],
        state_file: Option<&Path>,
    ) -> Result<Arc<Self>, StoreError> {
        if paths.is_empty() {
            return Err(ApiError::bad_request("a target needs at least one mountpath").into());
        }
        let (plan, dynamic) = mountset::plan(paths, state_file)?;
        let hot = Arc::new(crate::store::hot::MetaCache::new(
            meta_cache_entries(),
            kept_open_files(),
        ));
        let mut set = MountSet::default();
        for (path, state) in plan {
            set.push(state, Arc::new(open_mountpath(&path, hot.clone())?));
        }
        set.sort();
        let store = Arc::new(Self {
            mountpaths: std::sync::RwLock::new(Arc::new(set)),
            dynamic: Arc::new(dynamic),
            generation: AtomicU64::new(now_ns() as u64),
            usage: Arc::default(),
            atimes: Mutex::new(HashMap::new()),
            hot,
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
            let mut usage: HashMap<String, u64> = HashMap::new();
            for index in &indexes {
                index.for_each(|m| *usage.entry(m.bucket).or_default() += m.size)?;
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
        usage.get(bucket_uname).copied().unwrap_or(0)
    }

    /// Bytes stored per bucket uname on this target.
    pub fn usage(&self) -> HashMap<String, u64> {
        self.usage.0.lock().expect("usage lock").clone()
    }

    /// Records a read of an object (for LRU); written to the index by [`Self::flush_atimes`].
    /// Returns true when enough times are pending that a flush is due.
    pub fn touch(&self, bucket_uname: &str, name: &str) -> bool {
        let mut atimes = self.atimes.lock().expect("atimes lock");
        atimes.insert((bucket_uname.to_owned(), name.to_owned()), now_ns());
        atimes.len() >= ATIME_FLUSH_AT
    }

    /// The latest access time of an object: a pending read, else the stored atime.
    pub fn atime(&self, meta: &ObjectMeta) -> i64 {
        let atimes = self.atimes.lock().expect("atimes lock");
        atimes
            .get(&(meta.bucket.clone(), meta.name.clone()))
            .copied()
            .unwrap_or(0)
            .max(meta.atime_ns)
    }

    /// Writes pending access times to the indexes (one transaction per mountpath).
    pub async fn flush_atimes(&self) -> Result<usize, StoreError> {
        let pending: Vec<((String, String), i64)> = {
            let mut atimes = self.atimes.lock().expect("atimes lock");
            atimes.drain().collect()
        };
        let n = pending.len();
        let set = self.set();
        let mut by_mp: HashMap<usize, Vec<(String, String, i64)>> = HashMap::new();
        for ((bucket, name), t) in pending {
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

    /// Starts writing an object: a temp file on the owning mountpath that fills chunk by chunk
    /// and becomes the object only on [`PendingWrite::commit`]. Dropping it without a commit
    /// removes the temp file.
    pub async fn begin_write(
        &self,
        bck: &Bck,
        name: &str,
        opts: PutOptions,
    ) -> Result<PendingWrite, StoreError> {
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
            s3: gristmill_core::s3::checksum_hasher(&opts.s3_checksums),
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

    /// Opens an object's data file: index lookup, open and — for objects up to
    /// [`PREFETCH_MAX`] bytes — the whole read, in one trip to the blocking pool. Retries if a
    /// concurrent overwrite replaced the file between the lookup and the open. A recently read
    /// object whose bytes are in the page cache is served without the trip (see `hot`).
    pub async fn open_object(&self, bck: &Bck, name: &str) -> Result<OpenObject, StoreError> {
        use std::os::unix::fs::FileExt;
        let bucket = bck.uname();
        if let Some(open) = self.open_hot(&bucket, name) {
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
                hot.insert_if(
                    generation,
                    Arc::new(crate::store::hot::Cached::new(
                        mp.path.clone(),
                        meta.clone(),
                    )),
                );
                let data = if meta.size <= PREFETCH_MAX {
                    let mut buf = vec![0u8; meta.size as usize];
                    file.read_exact_at(&mut buf, 0)?;
                    Some(Bytes::from(buf))
                } else {
                    None
                };
                return Ok(OpenObject { meta, file, data });
            }
            Err(StoreError::not_found(&missing))
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))?
    }

    /// The warm path of [`Store::open_object`], on the calling (async) thread: only for a cached
    /// record whose small content is entirely in the page cache (or a large object, whose
    /// body streams through the blocking pool anyway). `None`: take the blocking path.
    fn open_hot(&self, bucket: &str, name: &str) -> Option<OpenObject> {
        let hit = self.hot.get(bucket, name)?;
        // Opening a file whose directory entries were just used is a cached lookup; a file
        // gone (overwritten, moved) sends us to the slow path, which looks again.
        let file = self.hot.open_file(&hit).ok()?;
        let data = if hit.meta.size <= PREFETCH_MAX {
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
        })
    }

    /// Deletes an object for good: removes it (unless a newer generation is here) and leaves a
    /// tombstone on its HRW mountpath, so no copy of it that arrives later — a rebalance
    /// transfer, a replica — re-creates it. Answers the removed record (if any) and the
    /// tombstone's generation.
    pub async fn bury(
        &self,
        bck: &Bck,
        name: &str,
        generation: crate::store::index::BuryGen,
    ) -> Result<(Option<ObjectMeta>, u64), StoreError> {
        let bucket = bck.uname();
        let mut removed = None;
        let mut tombstone = 0;
        for (i, mp) in self.lookup_order(bck, name).into_iter().enumerate() {
            let applied = if i == 0 {
                let a = mp
                    .index
                    .apply(IndexOp::Bury {
                        bucket: bucket.clone(),
                        name: name.to_owned(),
                        generation,
                    })
                    .await?;
                tombstone = a.tombstone;
                a
            } else {
                // Other mountpaths (a resilver in progress): a read first, so a settled store
                // commits only once.
                match mp.index.get(&bucket, name)? {
                    Some(m) if m.effective_gen() < tombstone => {
                        mp.index
                            .apply(IndexOp::DeleteIf {
                                bucket: bucket.clone(),
                                name: name.to_owned(),
                                file: m.file,
                            })
                            .await?
                    }
                    _ => continue,
                }
            };
            if let Some(old) = applied.replaced {
                remove_data_file(&mp, &old.file).await;
                self.usage.account(&old.bucket, 0, old.size);
                removed.get_or_insert(old);
            }
        }
        Ok((removed, tombstone))
    }

    /// Removes one particular record of an object — the one whose data file is `file` — from
    /// whichever mountpath holds it; a record rewritten since (another file) stays. Answers
    /// whether it was removed. No tombstone: for dropping a copy that moved elsewhere.
    pub async fn delete_if_file(
        &self,
        bck: &Bck,
        name: &str,
        file: &str,
    ) -> Result<bool, StoreError> {
        let bucket = bck.uname();
        for mp in self.lookup_order(bck, name) {
            // A read first: only the mountpath holding that record commits.
            if mp.index.get(&bucket, name)?.is_none_or(|m| m.file != file) {
                continue;
            }
            let applied = mp
                .index
                .apply(IndexOp::DeleteIf {
                    bucket: bucket.clone(),
                    name: name.to_owned(),
                    file: file.to_owned(),
                })
                .await?;
            if let Some(old) = applied.replaced {
                remove_data_file(&mp, &old.file).await;
                self.usage.account(&old.bucket, 0, old.size);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Keeps the current copy of an object (if any) reachable after an overwrite: a hard link
    /// to its data file in `tmp/`, so a write that must be undone can put it back
    /// ([`Store::restore`]). Dropping the [`KeptCopy`] removes the link.
    pub fn keep(&self, bck: &Bck, name: &str) -> Result<Option<KeptCopy>, StoreError> {
        let Some((mp, meta)) = self.locate(bck, name)? else {
            return Ok(None);
        };
        let link = mp.tmp_dir().join(format!(
            "kept-{:016x}",
            self.generation.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::hard_link(mp.path.join(&meta.file), &link) {
            Ok(()) => Ok(Some(KeptCopy { meta, link })),
            // Overwritten or deleted a moment ago: nothing to keep.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Puts a kept copy back as the object, as a new write ordered after `after` (the
    /// generation of the write being undone).
    pub async fn restore(
        &self,
        bck: &Bck,
        kept: &KeptCopy,
        after: u64,
    ) -> Result<ObjectMeta, StoreError> {
        let file = std::fs::File::open(&kept.link)?;
        let m = &kept.meta;
        let opts = PutOptions {
            durable: !bck.is_remote(),
            version: if bck.is_remote() {
                m.version.clone()
            } else {
                String::new()
            },
            custom: m.custom.clone(),
            expected_size: Some(m.size),
            expected_xxhash: Some(m.cksum_value.clone()),
            mtime_ns: Some(m.mtime_ns),
            generation: crate::store::index::GenRule::Next { floor: after },
            ..Default::default()
        };
        self.put(
            bck,
            &m.name,
            crate::store::stream::file_stream(file, 0, m.size),
            opts,
        )
        .await
    }

    /// The generation of an object's tombstone here (0: none).
    pub fn tombstone(&self, bck: &Bck, name: &str) -> Result<u64, StoreError> {
        let bucket = bck.uname();
        let mut generation = 0;
        for mp in self.lookup_order(bck, name) {
            generation = generation.max(mp.index.tombstone(&bucket, name)?.unwrap_or(0));
        }
        Ok(generation)
    }

    /// Forgets tombstones older than `keep` (their deletes have long reached every holder).
    pub async fn purge_tombstones(&self, keep: std::time::Duration) -> Result<u64, StoreError> {
        let before_ns = now_ns() - keep.as_nanos().min(i64::MAX as u128) as i64;
        let mut purged = 0;
        for mp in self.mountpaths().iter() {
            purged += mp
                .index
                .apply_relaxed(IndexOp::PurgeTombstones { before_ns })
                .await?
                .dropped;
        }
        Ok(purged)
    }

    /// Removes an object — from its HRW mountpath and from any other that still holds a
    /// copy (a resilver in progress); `NotFound` if it was nowhere.
    pub async fn delete(&self, bck: &Bck, name: &str) -> Result<ObjectMeta, StoreError> {
        let bucket = bck.uname();
        let mut removed = None;
        for (i, mp) in self.lookup_order(bck, name).into_iter().enumerate() {
            // Other mountpaths: a read first, so a settled store commits only once.
            if i > 0 && mp.index.get(&bucket, name)?.is_none() {
                continue;
            }
            let applied = mp
                .index
                .apply(IndexOp::Delete {
                    bucket: bucket.clone(),
                    name: name.to_owned(),
                })
                .await?;
            if let Some(old) = applied.replaced {
                remove_data_file(&mp, &old.file).await;
                self.usage.account(&old.bucket, 0, old.size);
                removed.get_or_insert(old);
            }
        }
        removed.ok_or_else(|| StoreError::not_found(format!("object {bck}/{name}")))
    }

    /// Up to `limit` objects of a bucket after `start_after`, in name order, merged across
    /// mountpaths.
    pub async fn list(
        &self,
        bck: &Bck,
        prefix: &str,
        start_after: &str,
        limit: usize,
    ) -> Result<Vec<ObjectMeta>, StoreError> {
        let bucket = bck.uname();
        let prefix = prefix.to_owned();
        let start_after = start_after.to_owned();
        let indexes: Vec<ObjectIndex> = self.mountpaths().iter().map(|m| m.index.clone()).collect();
        tokio::task::spawn_blocking(move || {
            let mut all = Vec::new();
            for index in &indexes {
                all.extend(index.list(&bucket, &prefix, &start_after, limit)?);
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

    /// Removes every object of a bucket: one index transaction, then the bucket's directories
    /// move to the trash and are deleted in the background.
    pub async fn drop_bucket(&self, bck: &Bck) -> Result<u64, StoreError> {
        let bucket = bck.uname();
        self.usage.0.lock().expect("usage lock").remove(&bucket);
        let mut dropped = 0;
        for mp in self.mountpaths() {
            dropped += mp
                .index
                .apply(IndexOp::DropBucket {
                    bucket: bucket.clone(),
                })
                .await?
                .dropped;
            let dir = mp.path.join("obj").join(bucket_dir(&bucket));
            let trash = mp.path.join("trash").join(uuid::Uuid::new_v4().to_string());
            if tokio::fs::rename(&dir, &trash).await.is_ok() {
                tokio::spawn(async move {
                    let _ = tokio::fs::remove_dir_all(&trash).await;
                });
            }
        }
        Ok(dropped)
    }

    /// Takes a corrupt copy out of service: moves its data file (the very generation `meta`
    /// names) into `<mountpath>/quarantine/` and drops its index record, so it is never served
    /// again. False when the record no longer names that file (overwritten or quarantined
    /// meanwhile): nothing changes then. A newer record that landed between the move and the
    /// drop is put back.
    /// Deletes quarantined files last modified (moved there) more than `keep` ago, on every
    /// mountpath; returns how many files and bytes went. Blocking (call off the runtime).
    pub fn purge_quarantine(&self, keep: std::time::Duration) -> std::io::Result<(u64, u64)> {
        let (mut files, mut bytes) = (0, 0);
        for mp in self.mountpaths() {
            let entries = match std::fs::read_dir(mp.path.join("quarantine")) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                let md = entry.metadata()?;
                let age = md.modified()?.elapsed().unwrap_or_default();
                if md.is_file() && age > keep {
                    std::fs::remove_file(entry.path())?;
                    files += 1;
                    bytes += md.len();
                }
            }
        }
        Ok((files, bytes))
    }

    pub async fn quarantine(&self, bck: &Bck, meta: &ObjectMeta) -> Result<bool, StoreError> {
        // The mountpath whose record names this file (not necessarily the HRW one while a
        // resilver runs).
        let Some(mp) = self.holder_of(bck, meta)? else {
            return Ok(false);
        };
        let from = mp.path.join(&meta.file);
        let dir = mp.path.join("quarantine");
        let to = dir.join(format!(
            "{}.{}",
            bucket_dir(&meta.bucket),
            Path::new(&meta.file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            match std::fs::rename(&from, &to) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                // Its age in quarantine counts from now (see `purge_quarantine`).
                Ok(()) => std::fs::File::options()
                    .write(true)
                    .open(&to)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now())),
                Err(_) => Ok(()),
            }
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))??;
        let applied = mp
            .index
            .apply(IndexOp::Delete {
                bucket: meta.bucket.clone(),
                name: meta.name.clone(),
            })
            .await?;
        match applied.replaced {
            Some(old) if old.file == meta.file => {
                self.usage.account(&old.bucket, 0, old.size);
                Ok(true)
            }
            // Overwritten between the check and the drop: the new record goes back.
            Some(newer) => {
                mp.index
                    .apply(IndexOp::Put {
                        meta: newer,
                        generation: crate::store::index::GenRule::AsIs,
                    })
                    .await?;
                Ok(false)
            }
            None => Ok(false),
        }
    }
}

/// An object being written: a temp file that grows chunk by chunk (readers may follow it through
/// [`PendingWrite::path`]), checksummed as it goes. [`commit`](Self::commit) makes it the
/// object; [`abort`](Self::abort) or dropping it leaves nothing behind.
pub struct PendingWrite {
    mp: Arc<Mountpath>,
    /// Mountpaths to clear of older copies after the commit (only while a mountpath change
    /// is not yet resilvered).
    others: Vec<Arc<Mountpath>>,
    /// Counts this write as in flight (the resilver waits for writes older than a change).
    _ticket: mountset::WriteTicket,
    usage: Arc<Usage>,
    bucket: String,
    name: String,
    generation: u64,
    /// `None` once flushed and closed for the commit.
    out: Option<tokio::io::BufWriter<tokio::fs::File>>,
    xxhash: Xxh64,
    md5: Option<md5::Md5>,
    s3: Option<s3s::checksum::ChecksumHasher>,
    size: u64,
    opts: PutOptions,
    /// The temp file; `None` once it was renamed into place or removed.
    tmp: Option<PathBuf>,
}

impl std::fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrite")
            .field("bucket", &self.bucket)
            .field("name", &self.name)
            .field("size", &self.size)
            .finish()
    }
}

impl PendingWrite {
    /// The in-progress temp file. Bytes appear in it as [`flush`](Self::flush) pushes them.
    pub fn path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or_else(|| Path::new(""))
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Options the commit will apply (e.g. to record a remote ETag learned after the write).
    pub fn opts_mut(&mut self) -> &mut PutOptions {
        &mut self.opts
    }

    /// Hands the temp file to a writer of the caller's own (e.g. a blocking thread fed by a
    /// download), which writes it from the start and computes the checksums; it reports them
    /// with [`set_written`](Self::set_written) before the commit. Nothing may have been
    /// written through [`write_chunk`](Self::write_chunk).
    pub async fn take_file(&mut self) -> Result<std::fs::File, StoreError> {
        if self.size > 0 || self.s3.is_some() {
            return Err(StoreError::Index(
                "take_file after write_chunk, or with S3 checksums to compute".into(),
            ));
        }
        let out = self
            .out
            .take()
            .ok_or_else(|| StoreError::Index("the write's file was already taken".into()))?;
        Ok(out.into_inner().into_std().await)
    }

    /// What a writer of [`take_file`](Self::take_file) wrote: the size and the checksum
    /// states over exactly those bytes; `md5` exactly when the options asked for it. The
    /// writer also syncs the file if it must be durable.
    pub fn set_written(
        &mut self,
        size: u64,
        xxhash: Xxh64,
        md5: Option<md5::Md5>,
    ) -> Result<(), StoreError> {
        if self.md5.is_some() != md5.is_some() {
            return Err(StoreError::Index(
                "the writer's MD5 does not match the write's options".into(),
            ));
        }
        self.size = size;
        self.xxhash = xxhash;
        self.md5 = md5;
        Ok(())
    }

    pub async fn write_chunk(&mut self, chunk: &[u8]) -> Result<(), StoreError> {
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| StoreError::Index("write after the write was closed".into()))?;
        self.xxhash.update(chunk);
        if let Some(m) = self.md5.as_mut() {
            md5::Digest::update(m, chunk);
        }
        if let Some(h) = self.s3.as_mut() {
            h.update(chunk);
        }
        self.size += chunk.len() as u64;
        out.write_all(chunk).await?;
        Ok(())
    }

    /// Pushes buffered bytes to the file, so readers of [`path`](Self::path) see them.
    pub async fn flush(&mut self) -> Result<(), StoreError> {
        if let Some(out) = self.out.as_mut() {
            out.flush().await?;
        }
        Ok(())
    }

    /// Writes a whole request body.
    pub async fn write_stream<S, E>(&mut self, body: S) -> Result<(), StoreError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        let mut body = std::pin::pin!(body);
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                StoreError::Api(ApiError::bad_request(format!("reading request body: {e}")))
            })?;
            self.write_chunk(&chunk).await?;
        }
        self.flush().await
    }

    /// The xxhash checksum (hex) of the bytes written so far.
    pub fn xxhash_hex(&self) -> String {
        format!("{:016x}", self.xxhash.digest())
    }

    /// Changes how the object will be committed (a staged replica learns its generation,
    /// version and mtime only when the owner commits).
    pub fn options_mut(&mut self) -> &mut PutOptions {
        &mut self.opts
    }

    /// Closes the temp file, fsyncs it when durable, and checks size and checksum against
    /// what the sender declared: after it, the write is on disk and only the commit is left.
    /// On a mismatch the temp file is removed. Idempotent.
    pub async fn verify(&mut self) -> Result<(), StoreError> {
        self.flush().await?;
        if let Some(out) = self.out.take() {
            let file = out.into_inner();
            if self.opts.durable {
                file.sync_data().await?;
            }
        }
        let size = self.size;
        let cksum = self.xxhash_hex();
        let opts = &self.opts;
        let mismatch = if opts.expected_size.is_some_and(|want| want != size) {
            Some(format!(
                "received {size} bytes, expected {}",
                opts.expected_size.unwrap_or_default()
            ))
        } else if let Some(want) = opts.expected_xxhash.as_deref()
            && !want.eq_ignore_ascii_case(&cksum)
        {
            Some(format!(
                "checksum mismatch: got xxhash {cksum}, expected {want}"
            ))
        } else {
            None
        };
        if let Some(why) = mismatch {
            self.remove_tmp().await;
            return Err(ApiError::bad_request(why).into());
        }
        Ok(())
    }

    /// Checks size and checksum against what the sender declared, fsyncs when durable, moves
    /// the file into place and commits its metadata. On any error nothing of it remains.
    pub async fn commit(mut self) -> Result<ObjectMeta, StoreError> {
        self.verify().await?;
        let size = self.size;
        let cksum = self.xxhash_hex();
        let md5 = self
            .md5
            .take()
            .map(|m| hex::encode(md5::Digest::finalize(m)));
        if let (Some(want), Some(got)) = (self.opts.expected_md5.clone(), md5.as_deref())
            && want != got
        {
            self.remove_tmp().await;
            return Err(ApiError::new(
                gristmill_core::ErrorKind::BadGateway,
                format!("checksum mismatch: received MD5 {got}, the remote's ETag says {want}"),
            )
            .into());
        }

        let mp = self.mp.clone();
        let rel = data_file_name(&self.bucket, &self.name, self.generation);
        let now = now_ns();
        let mut custom = self.opts.custom.clone();
        if let Some(md5) = md5 {
            custom.insert(ETAG_KEY.into(), md5);
        }
        if let Some(h) = self.s3.take() {
            for (name, v) in gristmill_core::s3::checksum_values(h.finalize()) {
                custom.insert(name.to_owned(), v);
            }
        }
        let meta = ObjectMeta {
            bucket: self.bucket.clone(),
            name: self.name.clone(),
            size,
            cksum_type: CKSUM_XXHASH.into(),
            cksum_value: cksum,
            version: self.opts.version.clone(),
            atime_ns: now,
            mtime_ns: self.opts.mtime_ns.unwrap_or(now),
            file: rel.clone(),
            custom,
            generation: 0,
        };
        let Some(tmp) = self.tmp.take() else {
            return Err(StoreError::Index("commit of a removed write".into()));
        };
        let dest = mp.path.join(&rel);
        let encoded = meta.encode();
        let durable = self.opts.durable;
        let placed = tokio::task::spawn_blocking(move || -> Result<(), StoreError> {
            set_meta_xattr(&tmp, &encoded);
            let dir = dest
                .parent()
                .expect("data files live in a fan-out directory");
            let moved = create_fan_out_dir(dir, durable).and_then(|_| std::fs::rename(&tmp, &dest));
            if let Err(e) = moved {
                let _ = std::fs::remove_file(&tmp);
                return Err(e.into());
            }
            if durable {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))?;
        placed?;

        let rule = self.opts.generation;
        let put = IndexOp::Put {
            meta,
            generation: rule,
        };
        let applied = match if self.opts.relaxed_index {
            mp.index.apply_relaxed(put).await
        } else {
            mp.index.apply(put).await
        } {
            Ok(a) => a,
            Err(e) => {
                let _ = tokio::fs::remove_file(mp.path.join(&rel)).await;
                return Err(e);
            }
        };
        if applied.stored.is_none()
            && let crate::store::index::GenRule::IfNewer(_) = rule
        {
            // A newer generation (or its tombstone) is here: this copy is not wanted.
            let _ = tokio::fs::remove_file(mp.path.join(&rel)).await;
            let current = applied
                .replaced
                .as_ref()
                .map_or(0, ObjectMeta::effective_gen);
            let tomb = mp.index.tombstone(&self.bucket, &self.name)?.unwrap_or(0);
            return Err(StoreError::Stale {
                current: current.max(tomb),
            });
        }
        let replaced_size = applied.replaced.as_ref().map_or(0, |m| m.size);
        self.usage.account(&self.bucket, size, replaced_size);
        if let Some(old) = applied.replaced {
            remove_data_file(&mp, &old.file).await;
        }
        if !self.others.is_empty() {
            mountset::drop_other_copies(&self.others, &self.usage, &self.bucket, &self.name)
                .await?;
        }
        applied
            .stored
            .ok_or_else(|| StoreError::Index("put committed without a record".into()))
    }

    /// Gives the write up: the temp file is removed.
    pub async fn abort(mut self) {
        self.out.take();
        self.remove_tmp().await;
    }

    async fn remove_tmp(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            // Dropped mid-write (error or cancelled request): unlinking is one quick syscall.
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Opens one mountpath: its layout (created if missing; mode 0700) and its index.
fn open_mountpath(
    p: &Path,
    hot: Arc<crate::store::hot::MetaCache>,
) -> Result<Mountpath, StoreError> {
    std::fs::create_dir_all(p)?;
    let path = std::fs::canonicalize(p)?;
    // Only the target's user may enter: ETL workers (another user) and others never
    // read object files directly.
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    for sub in ["obj", "tmp", "trash", "mpu"] {
        std::fs::create_dir_all(path.join(sub))?;
    }
    let index = ObjectIndex::open(&path.join("index.redb"), hot)?;
    let digest = hrw::digest(&path.to_string_lossy());
    Ok(Mountpath {
        path,
        digest,
        index,
    })
}

/// `obj/<bucket-hash>/<xx>/<name-hash>.<generation>`.
fn data_file_name(bucket: &str, name: &str, generation: u64) -> String {
    let h = xxh3_128(name.as_bytes());
    format!(
        "obj/{}/{:02x}/{:032x}.{:016x}",
        bucket_dir(bucket),
        (h >> 120) as u8,
        h,
        generation
    )
}

fn bucket_dir(bucket: &str) -> String {
    format!("{:016x}", xxh3_64(bucket.as_bytes()))
}

async fn remove_data_file(mp: &Mountpath, rel: &str) {
    if let Err(e) = tokio::fs::remove_file(mp.path.join(rel)).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(file = rel, error = %e, "could not remove replaced data file");
    }
}

/// Creates a data file's fan-out directory (and its parents) if missing. When `durable`, each
/// directory created is made durable by an fsync of its parent: without it a power loss can
/// drop the new directory, and with it every fsynced file inside.
fn create_fan_out_dir(dir: &Path, durable: bool) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.is_dir() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    std::fs::create_dir_all(dir)?;
    if durable {
        // Parents first: a created directory's own entry lives in its parent.
        for created in missing.iter().rev() {
            if let Some(parent) = created.parent() {
                std::fs::File::open(parent)?.sync_all()?;
            }
        }
    }
    Ok(())
}

fn set_meta_xattr(path: &Path, encoded: &[u8]) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if let Err(e) = xattr::set(path, META_XATTR, encoded) {
        WARNED.call_once(|| {
            tracing::warn!(error = %e, "cannot store object metadata in xattrs on this filesystem; the index is the only copy")
        });
    }
}

/// Startup scan: empties `tmp/` and `trash/`, removes data files no index record references
/// (writes interrupted before their commit), and drops records whose file is gone.
fn remove_orphans(mp: &Mountpath) -> Result<u64, StoreError> {
    let mut removed = 0u64;
    for sub in ["tmp", "trash"] {
        for entry in std::fs::read_dir(mp.path.join(sub))? {
            let p = entry?.path();
            let r = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            if r.is_ok() && sub == "tmp" {
                removed += 1;
            }
        }
    }
    // The files the index references, as 128-bit hashes of their paths: ~17-35 bytes per
    // object instead of ~200 for the paths (a million objects: tens of MiB at startup, not
    // hundreds). A file found on disk is struck off; what remains is missing.
    let mut referenced: HashSet<u128> = HashSet::new();
    mp.index.for_each(|m| {
        referenced.insert(xxh3_128(m.file.as_bytes()));
    })?;
    let root = mp.path.join("obj");
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let p = entry.path();
            if entry.file_type()?.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p
                .strip_prefix(&mp.path)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !referenced.remove(&xxh3_128(rel.as_bytes())) {
                std::fs::remove_file(&p)?;
                removed += 1;
            }
        }
    }
    if !referenced.is_empty() {
        let missing = referenced;
        tracing::error!(
            count = missing.len(),
            "index records whose data file is missing; dropping them"
        );
        let mut lost = Vec::new();
        mp.index.for_each(|m| {
            if missing.contains(&xxh3_128(m.file.as_bytes())) {
                lost.push((m.bucket, m.name));
            }
        })?;
        let handle = tokio::runtime::Handle::current();
        for (bucket, name) in lost {
            handle.block_on(mp.index.apply(IndexOp::Delete { bucket, name }))?;
        }
    }
    Ok(removed)
}

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::index::{BuryGen, GenRule};
    use gristmill_core::Provider;

    fn body(s: &str) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + use<> {
        futures::stream::iter([Ok(Bytes::from(s.to_owned()))])
    }

    async fn read(store: &Store, bck: &Bck, name: &str) -> String {
        let open = store.open_object(bck, name).await.unwrap();
        String::from_utf8(open.data.unwrap().to_vec()).unwrap()
    }

    fn transfer(generation: u64) -> PutOptions {
        PutOptions {
            generation: GenRule::IfNewer(generation),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn generations_order_copies_and_tombstones_stop_late_transfers() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&[dir.path().join("mp0")]).await.unwrap();
        let bck = Bck::new("b", Provider::Ais).unwrap();

        // Writes on the owner count up; the native version follows the generation.
        let first = store.put(&bck, "x", body("one"), Default::default()).await;
        assert_eq!(first.unwrap().generation, 1);
        let floor = PutOptions {
            generation: GenRule::Next { floor: 41 },
            ..Default::default()
        };
        let second = store.put(&bck, "x", body("two"), floor).await.unwrap();
        assert_eq!((second.generation, second.version.as_str()), (42, "42"));

        // A transfer of an older (or the same) generation changes nothing...
        for g in [1, 42] {
            let late = store.put(&bck, "x", body("old"), transfer(g)).await;
            assert!(
                matches!(late, Err(StoreError::Stale { current: 42 })),
                "{g}"
            );
            assert_eq!(read(&store, &bck, "x").await, "two");
        }
        // ...a newer one replaces the copy and keeps its generation.
        let newer = store.put(&bck, "x", body("three"), transfer(50)).await;
        assert_eq!(newer.unwrap().generation, 50);
        assert_eq!(read(&store, &bck, "x").await, "three");

        // A delete leaves a tombstone one past the copy; a late transfer of any older
        // generation does not bring the object back.
        let (removed, tomb) = store
            .bury(&bck, "x", BuryGen::Next { floor: 0 })
            .await
            .unwrap();
        assert_eq!((removed.unwrap().generation, tomb), (50, 51));
        assert_eq!(store.tombstone(&bck, "x").unwrap(), 51);
        let late = store.put(&bck, "x", body("old"), transfer(50)).await;
        assert!(matches!(late, Err(StoreError::Stale { current: 51 })));
        assert!(store.head(&bck, "x").is_err(), "a deleted object came back");
        // No data file of the refused copies is left behind.
        let files = walk_files(&dir.path().join("mp0").join("obj"));
        assert!(files.is_empty(), "{files:?}");
        // A write after the delete orders after its tombstone.
        let again = store.put(&bck, "x", body("four"), Default::default()).await;
        assert_eq!(again.unwrap().generation, 52);

        // A delete sent with an older tombstone than the copy here keeps the copy.
        let (removed, tomb) = store.bury(&bck, "x", BuryGen::Exact(10)).await.unwrap();
        assert!(removed.is_none());
        assert_eq!(tomb, 51);
        assert_eq!(read(&store, &bck, "x").await, "four");
        let (removed, _) = store.bury(&bck, "x", BuryGen::Exact(60)).await.unwrap();
        assert!(removed.is_some());

        // Records from before generations existed order by their native version.
        let legacy = ObjectMeta {
            generation: 0,
            version: "7".into(),
            ..second.clone()
        };
        assert_eq!(legacy.effective_gen(), 7);

        // Old tombstones are purged; fresh ones stay.
        assert_eq!(
            store
                .purge_tombstones(std::time::Duration::from_secs(3600))
                .await
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .purge_tombstones(std::time::Duration::ZERO)
                .await
                .unwrap(),
            1
        );
        assert_eq!(store.tombstone(&bck, "x").unwrap(), 0);
    }

    fn walk_files(root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else {
                    out.push(e.path());
                }
            }
        }
        out
    }

    #[test]
    fn fan_out_directories_are_created_with_their_parents() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("obj").join("aa").join("bb");
        create_fan_out_dir(&deep, true).unwrap();
        assert!(deep.is_dir());
        create_fan_out_dir(&deep, true).unwrap();
    }
}
