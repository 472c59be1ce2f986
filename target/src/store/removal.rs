//! Taking objects away: deletes (with and without tombstones), copies kept aside to undo an
//! overwrite, dropped buckets and quarantined corrupt copies.
use super::files::{bucket_dir, remove_data_file};
use super::{Mountpath, PutOptions, Store, now_ns};
use crate::store::error::StoreError;
use crate::store::index::IndexOp;
use crate::store::meta::ObjectMeta;
use gristmill_core::Bck;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

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

impl Store {
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
        let generation = match generation {
            crate::store::index::BuryGen::Next { floor } => crate::store::index::BuryGen::Next {
                floor: self.gen_floor(floor),
            },
            exact => exact,
        };
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
                self.usage.account(&old.bucket, None, Some(&old));
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
                self.usage.account(&old.bucket, None, Some(&old));
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
                self.usage.account(&old.bucket, None, Some(&old));
                removed.get_or_insert(old);
            }
        }
        removed.ok_or_else(|| StoreError::not_found(format!("object {bck}/{name}")))
    }

    /// Evicts records an eviction pass picked on `mountpath` (name, access time when picked):
    /// one index transaction evicts those not read or rewritten since (hidden from every read
    /// at once, removed by the index's sweep later) and returns them. Their data files stay
    /// until [`Unlinked::remove_files`].
    pub(crate) async fn evict_picked(
        &self,
        mountpath: &Arc<Mountpath>,
        bucket: &str,
        picked: Vec<(String, i64)>,
    ) -> Result<Vec<ObjectMeta>, StoreError> {
        // Read since the pick but not flushed yet: the index cannot tell, so leave it here.
        let mut picked: Vec<(String, i64)> = picked
            .into_iter()
            .filter(|(name, atime)| self.pending_atime(bucket, name).is_none_or(|t| t <= *atime))
            .collect();
        // In key order: one walk down the B-tree's leaves instead of random jumps.
        picked.sort_unstable();
        // Relaxed: the data files stay until `Unlinked` has made this durable, so a crash
        // brings back records whose files are still there, never a record without its file.
        let freed = mountpath
            .index
            .apply_relaxed(IndexOp::Evict {
                bucket: bucket.to_owned(),
                picked,
            })
            .await?
            .freed;
        for old in &freed {
            self.usage.account(&old.bucket, None, Some(old));
        }
        Ok(freed)
    }

    /// Records evicted on every mountpath and not yet removed by the index's sweep. Blocking.
    pub fn evicted_pending(&self) -> Result<u64, StoreError> {
        self.mountpaths()
            .iter()
            .try_fold(0, |n, mp| Ok(n + mp.index.evicted_pending()?))
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

    /// Takes a corrupt copy out of service: moves its data file (the very generation `meta`
    /// names) into `<mountpath>/quarantine/` and drops its index record, so it is never served
    /// again. False when the record no longer names that file (overwritten or quarantined
    /// meanwhile): nothing changes then. A newer record that landed between the move and the
    /// drop is put back.
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
                self.usage.account(&old.bucket, None, Some(&old));
                Ok(true)
            }
            // Overwritten between the check and the drop: the new record goes back.
            Some(newer) => {
                mp.index
                    .apply(IndexOp::Put {
                        meta: newer,
                        generation: crate::store::index::GenRule::AsIs,
                        condition: None,
                    })
                    .await?;
                Ok(false)
            }
            None => Ok(false),
        }
    }
}

/// The data files of evicted records, per mountpath, waiting for the index's eviction of those
/// records (relaxed, [`Store::evict_picked`]: hidden at once, removed by a later sweep) to be
/// durable: they go after it, never before, so a crash may bring records back but never a
/// record whose file is gone. One durable commit per
/// mountpath for any number of evicted batches.
#[derive(Default)]
pub(crate) struct Unlinked {
    files: std::collections::HashMap<usize, (Arc<Mountpath>, Vec<String>)>,
    len: usize,
}

impl Unlinked {
    /// `file` (relative to the mountpath numbered `mp`) goes at the next [`Self::remove_files`].
    pub fn add(&mut self, mp: usize, mountpath: &Arc<Mountpath>, file: String) {
        let entry = self
            .files
            .entry(mp)
            .or_insert_with(|| (mountpath.clone(), Vec::new()));
        entry.1.push(file);
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Syncs each mountpath's index, then removes its files. False if an index could not sync:
    /// that mountpath's files stay listed for the next call (records a crash brings back
    /// still have them).
    pub async fn remove_files(&mut self) -> bool {
        let mut ok = true;
        let mut kept = std::collections::HashMap::new();
        for (mp, (mountpath, files)) in std::mem::take(&mut self.files) {
            if let Err(e) = mountpath.index.sync().await {
                tracing::warn!(mountpath = %mountpath.path.display(), error = %e, "LRU: could not sync the index; evicted files stay");
                ok = false;
                kept.insert(mp, (mountpath, files));
                continue;
            }
            let files: Vec<PathBuf> = files.iter().map(|f| mountpath.path.join(f)).collect();
            let _ = tokio::task::spawn_blocking(move || {
                for f in files {
                    if let Err(e) = std::fs::remove_file(&f)
                        && e.kind() != std::io::ErrorKind::NotFound
                    {
                        tracing::warn!(file = %f.display(), error = %e, "could not remove an evicted data file");
                    }
                }
            })
            .await;
        }
        self.len = kept.values().map(|(_, f)| f.len()).sum();
        self.files = kept;
        ok
    }
}

/// A pass dropped before it removed its files (its future cancelled: an inline pass runs in a
/// cold GET whose client may go away): they go in the background, one try.
impl Drop for Unlinked {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        self.len = 0;
        let files = std::mem::take(&mut self.files);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let indexes: Vec<_> = files.values().map(|(m, _)| m.index.clone()).collect();
                let len = files.values().map(|(_, f)| f.len()).sum();
                let mut rest = Unlinked { files, len };
                rest.remove_files().await;
                for index in indexes {
                    index.start_sweep();
                }
                rest.forget(); // one try: what failed stays for the startup scan
            });
        }
    }
}

impl Unlinked {
    fn forget(&mut self) {
        self.files.clear();
        self.len = 0;
    }
}
