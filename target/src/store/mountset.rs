//! The runtime mountpath set (AIStore's attach / detach / enable / disable) and the resilver's
//! primitives.
//!
//! A target's mountpaths are in one of three states:
//! - **enabled** (AIStore's "available"): part of HRW placement; new writes go there;
//! - **disabled**: out of placement, still open and read; the resilver moves its objects to
//!   their HRW mountpaths; the path stays listed until enabled again;
//! - **detaching** (AIStore's "waiting_dd"): out of placement, still open and read until the
//!   resilver has moved every object away; then it is dropped from the set and its index
//!   closed (its directory keeps an empty `index.redb`; nothing else is deleted).
//!
//! Lookups look at the object's HRW mountpath first, then at every other open mountpath, so
//! an object is found wherever it sits while a resilver runs. A move is copy → fsync → commit
//! on the destination *only if it holds no record* (or the record the move saw) → drop the
//! source *only if its record is still the one copied*; a PUT or DELETE racing with a move
//! therefore always wins (see [`Store::move_object`]). While a change is not yet resilvered
//! ("unsettled"), a PUT also removes older copies of its object from the other mountpaths.
//!
//! The set is persisted in `<state-dir>/mountpaths.json`. At start the `--mountpath` paths
//! are merged with it: every persisted path keeps its persisted state; a given path that the
//! file does not know is added as enabled (and a resilver runs); a given path that was
//! detached at runtime stays detached (it is listed in the file's `detached`; attach it again
//! to use it). A path can therefore only leave the set by `detach`, never by dropping a flag.
use super::{Mountpath, Store, Usage, remove_data_file, set_meta_xattr};
use crate::store::error::StoreError;
use crate::store::index::IndexOp;
use crate::store::meta::ObjectMeta;
use gristmill_core::{ApiError, hrw, persist};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
mod plan;
mod walk;
pub(crate) use plan::plan;
pub use walk::WalkCursor;
#[cfg(test)]
mod tests;

/// Where a mountpath stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MpState {
    Enabled,
    Disabled,
    Detaching,
}

/// A runtime change of the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpAction {
    Attach,
    Detach,
    Enable,
    Disable,
}

impl MpAction {
    /// AIStore's action names (`attach-mp`, ...); the bare verbs are accepted too.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "attach-mp" | "attach" => Some(Self::Attach),
            "detach-mp" | "detach" => Some(Self::Detach),
            "enable-mp" | "enable" => Some(Self::Enable),
            "disable-mp" | "disable" => Some(Self::Disable),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Attach => "attach-mp",
            Self::Detach => "detach-mp",
            Self::Enable => "enable-mp",
            Self::Disable => "disable-mp",
        }
    }
}

/// The mountpaths of a target at one moment. Each list is sorted by path; `available` is
/// never empty.
#[derive(Debug, Default)]
pub struct MountSet {
    /// In HRW placement (enabled).
    pub available: Vec<Arc<Mountpath>>,
    /// Out of placement, listed until enabled; objects move away.
    pub disabled: Vec<Arc<Mountpath>>,
    /// Out of placement, dropped once empty.
    pub detaching: Vec<Arc<Mountpath>>,
}

impl MountSet {
    /// Every open mountpath: the available ones first (in placement order), then the others.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Mountpath>> {
        self.available
            .iter()
            .chain(&self.disabled)
            .chain(&self.detaching)
    }

    /// Position in `available` of the mountpath that owns an object.
    pub fn pick(&self, bucket_uname: &str, name: &str) -> usize {
        let name = gristmill_core::name::placement_name(name);
        let d = hrw::digest(&format!("{bucket_uname}/{name}"));
        hrw::pick(d, self.available.iter().map(|m| m.digest)).unwrap_or(0)
    }

    /// The mountpath that owns an object.
    pub fn owner(&self, bucket_uname: &str, name: &str) -> &Arc<Mountpath> {
        &self.available[self.pick(bucket_uname, name)]
    }

    /// The owner first, then every other open mountpath: where to look for an object.
    pub fn lookup_order(&self, bucket_uname: &str, name: &str) -> Vec<Arc<Mountpath>> {
        let owner = self.owner(bucket_uname, name).clone();
        let mut out = Vec::with_capacity(self.available.len() + self.disabled.len());
        out.push(owner.clone());
        out.extend(self.all().filter(|m| !Arc::ptr_eq(m, &owner)).cloned());
        out
    }

    fn state_of(&self, path: &Path) -> Option<(MpState, Arc<Mountpath>)> {
        let find = |v: &[Arc<Mountpath>]| v.iter().find(|m| m.path == path).cloned();
        find(&self.available)
            .map(|m| (MpState::Enabled, m))
            .or_else(|| find(&self.disabled).map(|m| (MpState::Disabled, m)))
            .or_else(|| find(&self.detaching).map(|m| (MpState::Detaching, m)))
    }

    /// A copy with `mp` (by path) in `state`, or removed with `None`.
    fn with(&self, mp: &Arc<Mountpath>, state: Option<MpState>) -> MountSet {
        let keep = |v: &[Arc<Mountpath>]| -> Vec<Arc<Mountpath>> {
            v.iter().filter(|m| m.path != mp.path).cloned().collect()
        };
        let mut next = MountSet {
            available: keep(&self.available),
            disabled: keep(&self.disabled),
            detaching: keep(&self.detaching),
        };
        match state {
            Some(MpState::Enabled) => next.available.push(mp.clone()),
            Some(MpState::Disabled) => next.disabled.push(mp.clone()),
            Some(MpState::Detaching) => next.detaching.push(mp.clone()),
            None => {}
        }
        next.sort();
        next
    }

    pub(super) fn push(&mut self, state: MpState, mp: Arc<Mountpath>) {
        match state {
            MpState::Enabled => self.available.push(mp),
            MpState::Disabled => self.disabled.push(mp),
            MpState::Detaching => self.detaching.push(mp),
        }
    }

    pub(super) fn sort(&mut self) {
        for v in [&mut self.available, &mut self.disabled, &mut self.detaching] {
            v.sort_by(|a, b| a.path.cmp(&b.path));
        }
    }

    fn entries(&self) -> Vec<Entry> {
        let e = |v: &[Arc<Mountpath>], state: MpState| {
            v.iter()
                .map(|m| Entry {
                    path: m.path.clone(),
                    state,
                })
                .collect::<Vec<_>>()
        };
        let mut out = e(&self.available, MpState::Enabled);
        out.extend(e(&self.disabled, MpState::Disabled));
        out.extend(e(&self.detaching, MpState::Detaching));
        out
    }
}

/// `<state-dir>/mountpaths.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    #[serde(default)]
    mountpaths: Vec<Entry>,
    /// Paths detached at runtime: ignored when given again at start.
    #[serde(default)]
    detached: Vec<PathBuf>,
    /// A change not yet fully resilvered (a restart resumes the resilver).
    #[serde(default)]
    resilver_pending: bool,
    /// Changes so far (resilver job ids carry it).
    #[serde(default)]
    epoch: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    path: PathBuf,
    state: MpState,
}

/// The mutable side of the set: persistence, the resilver's state, in-flight writes.
#[derive(Debug, Default)]
pub struct Dynamic {
    state_file: Option<PathBuf>,
    /// Misplaced copies may exist: set by every change (and at start when a resilver is
    /// pending), cleared when a resilver of the current epoch completes.
    unsettled: AtomicBool,
    /// Bumped by every change.
    epoch: AtomicU64,
    detached: Mutex<Vec<PathBuf>>,
    /// Writes in progress, by the epoch they began in.
    inflight: Mutex<BTreeMap<u64, usize>>,
    /// Serializes changes (and the resilver's final step).
    changes: tokio::sync::Mutex<()>,
    /// Mountpaths dropped by a detach: attached again while something still holds them, they
    /// are reused (their index file stays locked until the last holder lets go).
    retired: Mutex<Vec<std::sync::Weak<Mountpath>>>,
}

/// Held by a write from `begin_write` until it committed or was dropped.
#[derive(Debug)]
pub struct WriteTicket {
    dynamic: Arc<Dynamic>,
    epoch: u64,
}

impl Drop for WriteTicket {
    fn drop(&mut self) {
        let mut inflight = self.dynamic.inflight.lock().expect("inflight lock");
        if let Some(n) = inflight.get_mut(&self.epoch) {
            *n -= 1;
            if *n == 0 {
                inflight.remove(&self.epoch);
            }
        }
    }
}

/// Creates a mountpath directory if needed and returns its canonical path.
pub(super) fn prepare_dir(p: &Path) -> Result<PathBuf, StoreError> {
    if !p.is_absolute() {
        return Err(ApiError::bad_request(format!(
            "mountpath {} is not an absolute path",
            p.display()
        ))
        .into());
    }
    std::fs::create_dir_all(p)?;
    Ok(std::fs::canonicalize(p)?)
}

fn plan_entries(plan: &[(PathBuf, MpState)]) -> Vec<Entry> {
    plan.iter()
        .map(|(path, state)| Entry {
            path: path.clone(),
            state: *state,
        })
        .collect()
}

fn save(
    file: &Path,
    mountpaths: &[Entry],
    detached: &[PathBuf],
    resilver_pending: bool,
    epoch: u64,
) -> Result<(), StoreError> {
    let p = Persisted {
        mountpaths: mountpaths.to_vec(),
        detached: detached.to_vec(),
        resilver_pending,
        epoch,
    };
    persist::save_json(file, &p)?;
    Ok(())
}

/// What one change did.
#[derive(Debug, Clone, Serialize)]
pub struct Changed {
    pub action: &'static str,
    pub path: PathBuf,
    /// The set's epoch after the change (the resilver's job id carries it).
    pub epoch: u64,
    /// Placement changed: a resilver must run.
    pub resilver: bool,
}

/// One object that is not on its HRW mountpath.
#[derive(Debug)]
pub struct Misplaced {
    pub from: Arc<Mountpath>,
    pub to: Arc<Mountpath>,
    pub meta: ObjectMeta,
}

/// What moving one object amounted to.
#[derive(Debug, PartialEq, Eq)]
pub enum Moved {
    /// Copied to its HRW mountpath and dropped from the old one (bytes).
    Moved(u64),
    /// The HRW mountpath already had this or a newer version: the old copy was dropped.
    DroppedOlder,
    /// The object changed (rewritten or deleted) meanwhile: nothing done (a later pass sees
    /// whatever is misplaced then).
    Changed,
}

impl Store {
    /// The current set.
    pub fn set(&self) -> Arc<MountSet> {
        self.mountpaths.read().expect("mountpaths lock").clone()
    }

    /// Changes of the set so far.
    pub fn epoch(&self) -> u64 {
        self.dynamic.epoch.load(Ordering::SeqCst)
    }

    /// Whether a change is not yet fully resilvered.
    pub fn resilver_pending(&self) -> bool {
        self.dynamic.unsettled.load(Ordering::SeqCst)
    }

    /// Where to look for an object: its HRW mountpath first, then every other open one.
    pub fn lookup_order(&self, bck: &gristmill_core::Bck, name: &str) -> Vec<Arc<Mountpath>> {
        self.set().lookup_order(&bck.uname(), name)
    }

    /// The object's record and the mountpath holding it (HRW mountpath first).
    pub fn locate(
        &self,
        bck: &gristmill_core::Bck,
        name: &str,
    ) -> Result<Option<(Arc<Mountpath>, ObjectMeta)>, StoreError> {
        find_in(&self.lookup_order(bck, name), &bck.uname(), name)
    }

    /// The mountpath whose record of the object still names `meta`'s data file, if any.
    pub fn holder_of(
        &self,
        bck: &gristmill_core::Bck,
        meta: &ObjectMeta,
    ) -> Result<Option<Arc<Mountpath>>, StoreError> {
        for mp in self.lookup_order(bck, &meta.name) {
            if mp
                .index
                .get(&meta.bucket, &meta.name)?
                .is_some_and(|now| now.file == meta.file)
            {
                return Ok(Some(mp));
            }
        }
        Ok(None)
    }

    pub(super) fn write_ticket(&self) -> WriteTicket {
        let epoch = self.epoch();
        *self
            .dynamic
            .inflight
            .lock()
            .expect("inflight lock")
            .entry(epoch)
            .or_default() += 1;
        WriteTicket {
            dynamic: self.dynamic.clone(),
            epoch,
        }
    }

    /// Other mountpaths a write to `owner` must clear of older copies (only while unsettled).
    pub(super) fn other_copies(&self, owner: &Arc<Mountpath>) -> Vec<Arc<Mountpath>> {
        if !self.resilver_pending() {
            return Vec::new();
        }
        self.set()
            .all()
            .filter(|m| !Arc::ptr_eq(m, owner))
            .cloned()
            .collect()
    }

    /// Attaches, detaches, enables or disables a mountpath; persists the new set. The caller
    /// starts a resilver when `resilver` is set.
    pub async fn change_mountpath(
        &self,
        action: MpAction,
        path: &Path,
    ) -> Result<Changed, StoreError> {
        let _serial = self.dynamic.changes.lock().await;
        let p = path.to_path_buf();
        let path = tokio::task::spawn_blocking(move || {
            if action == MpAction::Attach {
                prepare_dir(&p)
            } else {
                // A path that no longer resolves may still be in the set under its old name.
                Ok(std::fs::canonicalize(&p).unwrap_or(p))
            }
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))??;
        let set = self.set();
        let current = set.state_of(&path);
        let bad = |msg: String| -> StoreError { ApiError::bad_request(msg).into() };
        let shown = path.display().to_string();
        let (mp, next_state) = match (action, current) {
            (MpAction::Attach, Some((MpState::Enabled, _)))
            | (MpAction::Enable, Some((MpState::Enabled, _)))
            | (MpAction::Disable, Some((MpState::Disabled, _)))
            | (MpAction::Detach, Some((MpState::Detaching, _))) => {
                return Ok(Changed {
                    action: action.as_str(),
                    path,
                    epoch: self.epoch(),
                    resilver: false,
                });
            }
            (MpAction::Attach, Some((MpState::Disabled, _))) => {
                return Err(bad(format!(
                    "mountpath {shown} is attached and disabled; enable it instead"
                )));
            }
            (MpAction::Attach, Some((MpState::Detaching, mp))) => (mp, MpState::Enabled),
            (MpAction::Attach, None) => {
                for m in set.all() {
                    if m.path.starts_with(&path) || path.starts_with(&m.path) {
                        return Err(bad(format!(
                            "mountpath {shown} overlaps mountpath {}",
                            m.path.display()
                        )));
                    }
                }
                (self.reopen(&path).await?, MpState::Enabled)
            }
            (_, None) => {
                return Err(ApiError::not_found(format!(
                    "{shown} is not a mountpath of this target"
                ))
                .into());
            }
            (MpAction::Enable, Some((MpState::Disabled, mp))) => (mp, MpState::Enabled),
            (MpAction::Enable, Some((MpState::Detaching, _))) => {
                return Err(bad(format!(
                    "mountpath {shown} is being detached; attach it to keep it"
                )));
            }
            (MpAction::Disable, Some((MpState::Detaching, _))) => {
                return Err(bad(format!("mountpath {shown} is being detached")));
            }
            (MpAction::Disable, Some((MpState::Enabled, mp))) => (mp, MpState::Disabled),
            (MpAction::Detach, Some((_, mp))) => (mp, MpState::Detaching),
        };
        let next = set.with(&mp, Some(next_state));
        if next.available.is_empty() {
            return Err(bad(format!(
                "cannot {} {shown}: it is the last enabled mountpath",
                action.as_str()
            )));
        }
        let epoch = self.epoch() + 1;
        if action == MpAction::Attach {
            self.dynamic
                .detached
                .lock()
                .expect("detached lock")
                .retain(|p| *p != path);
        }
        // Unsettled before the new set is visible: every write that picks a mountpath in it
        // also clears older copies elsewhere.
        self.dynamic.unsettled.store(true, Ordering::SeqCst);
        self.persist(&next, true, epoch)?;
        self.dynamic.epoch.store(epoch, Ordering::SeqCst);
        *self.mountpaths.write().expect("mountpaths lock") = Arc::new(next);
        tracing::info!(action = action.as_str(), mountpath = %shown, epoch, "mountpath changed");
        Ok(Changed {
            action: action.as_str(),
            path,
            epoch,
            resilver: true,
        })
    }

    /// Opens a mountpath being attached: the same one if a detach dropped it but something
    /// still holds it, else anew (retrying for a few seconds while its index file is still
    /// being closed).
    async fn reopen(&self, path: &Path) -> Result<Arc<Mountpath>, StoreError> {
        let mut attempts = 0;
        loop {
            let alive = {
                let mut retired = self.dynamic.retired.lock().expect("retired lock");
                retired.retain(|w| w.strong_count() > 0);
                retired
                    .iter()
                    .filter_map(std::sync::Weak::upgrade)
                    .find(|m| m.path == path)
            };
            if let Some(mp) = alive {
                return Ok(mp);
            }
            let (p, hot) = (path.to_path_buf(), self.hot.clone());
            let cache = self.tuning.index_cache_bytes;
            let opened = tokio::task::spawn_blocking(move || super::open_mountpath(&p, hot, cache))
                .await
                .map_err(|e| StoreError::Index(e.to_string()))?;
            match opened {
                Ok(mp) => return Ok(Arc::new(mp)),
                Err(StoreError::Index(e)) if e.contains("already open") && attempts < 50 => {
                    attempts += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn persist(&self, set: &MountSet, pending: bool, epoch: u64) -> Result<(), StoreError> {
        let Some(f) = &self.dynamic.state_file else {
            return Ok(());
        };
        let detached = self.dynamic.detached.lock().expect("detached lock").clone();
        save(f, &set.entries(), &detached, pending, epoch)
    }

    /// Waits until every write that began before `epoch` has committed or failed (a write
    /// picks its mountpath when it begins). False if cancelled first.
    pub async fn wait_older_writes(&self, epoch: u64, cancel: &CancellationToken) -> bool {
        let mut waited = 0u32;
        loop {
            let busy = self
                .dynamic
                .inflight
                .lock()
                .expect("inflight lock")
                .range(..epoch)
                .any(|(_, n)| *n > 0);
            if !busy {
                return true;
            }
            waited += 1;
            if waited.is_multiple_of(500) {
                tracing::info!(
                    epoch,
                    "resilver: waiting for writes that began before the change"
                );
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
            }
        }
    }
    /// Moves one object to its HRW mountpath: copy the data file (same relative name, so the
    /// record stays as it is), fsync file and directory, commit the record on the destination
    /// only if it holds nothing (or the older record this move saw), then drop the source record
    /// only if it still names the copied file — if it does not (rewritten or deleted meanwhile),
    /// the destination's record is taken back. A newer copy on the destination (same file or a
    /// later mtime) wins: the source copy is just dropped.
    pub async fn move_object(&self, m: &Misplaced) -> Result<Moved, StoreError> {
        let (from, to, meta) = (&m.from, &m.to, &m.meta);
        let expect = match to.index.get(&meta.bucket, &meta.name)? {
            Some(cur) if cur.file == meta.file || cur.mtime_ns >= meta.mtime_ns => {
                return Ok(
                    if drop_copy(from, &self.usage, &meta.bucket, &meta.name, &meta.file).await? {
                        Moved::DroppedOlder
                    } else {
                        Moved::Changed
                    },
                );
            }
            Some(older) => Some(older.file),
            None => None,
        };
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let src = from.path.join(&meta.file);
        let tmp = to.tmp_dir().join(format!("{generation:016x}"));
        let dest = to.path.join(&meta.file);
        let encoded = meta.encode();
        let copied = tokio::task::spawn_blocking(move || -> Result<bool, StoreError> {
            let result = (|| -> std::io::Result<()> {
                std::fs::copy(&src, &tmp)?;
                std::fs::File::open(&tmp)?.sync_all()?;
                set_meta_xattr(&tmp, &encoded);
                let dir = dest
                    .parent()
                    .expect("data files live in a fan-out directory");
                std::fs::create_dir_all(dir)?;
                std::fs::rename(&tmp, &dest)?;
                std::fs::File::open(dir)?.sync_all()
            })();
            match result {
                Ok(()) => Ok(true),
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    if e.kind() == std::io::ErrorKind::NotFound && !src.exists() {
                        Ok(false) // the source was replaced or deleted meanwhile
                    } else {
                        Err(e.into())
                    }
                }
            }
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))??;
        if !copied {
            return Ok(Moved::Changed);
        }
        let applied = to
            .index
            .apply(IndexOp::PutIf {
                meta: meta.clone(),
                expect,
            })
            .await;
        let applied = match applied {
            Ok(a) => a,
            Err(e) => {
                remove_data_file(to, &meta.file).await;
                return Err(e);
            }
        };
        if applied.stored.is_none() {
            // The destination changed meanwhile (a write landed there): ours is redundant.
            if applied.replaced.as_ref().map(|r| &r.file) != Some(&meta.file) {
                remove_data_file(to, &meta.file).await;
            }
            return Ok(Moved::Changed);
        }
        self.usage
            .account(&meta.bucket, Some(meta), applied.replaced.as_ref());
        if let Some(older) = &applied.replaced {
            remove_data_file(to, &older.file).await;
        }
        if drop_copy(from, &self.usage, &meta.bucket, &meta.name, &meta.file).await? {
            return Ok(Moved::Moved(meta.size));
        }
        // The source was rewritten or deleted while we copied: take the copy back.
        drop_copy(to, &self.usage, &meta.bucket, &meta.name, &meta.file).await?;
        Ok(Moved::Changed)
    }

    /// The resilver's last step for the change `epoch`: drops detaching mountpaths that hold
    /// no object any more and, if that leaves none and `clean` (the last pass found nothing
    /// misplaced), marks the set settled. Returns the dropped paths; nothing happens when a
    /// newer change superseded `epoch`.
    pub async fn finish_resilver(
        &self,
        epoch: u64,
        clean: bool,
    ) -> Result<Vec<PathBuf>, StoreError> {
        let _serial = self.dynamic.changes.lock().await;
        if self.epoch() != epoch {
            return Ok(Vec::new());
        }
        let set = self.set();
        let mut dropped = Vec::new();
        let mut next = MountSet {
            available: set.available.clone(),
            disabled: set.disabled.clone(),
            detaching: Vec::new(),
        };
        for mp in &set.detaching {
            let index = mp.index.clone();
            let empty = tokio::task::spawn_blocking(move || index.is_empty())
                .await
                .map_err(|e| StoreError::Index(e.to_string()))??;
            if empty {
                dropped.push(mp.path.clone());
                self.dynamic
                    .retired
                    .lock()
                    .expect("retired lock")
                    .push(Arc::downgrade(mp));
            } else {
                next.detaching.push(mp.clone());
            }
        }
        let settled = clean && next.detaching.is_empty();
        self.dynamic
            .detached
            .lock()
            .expect("detached lock")
            .extend(dropped.iter().cloned());
        self.persist(&next, !settled, epoch)?;
        *self.mountpaths.write().expect("mountpaths lock") = Arc::new(next);
        if settled {
            self.dynamic.unsettled.store(false, Ordering::SeqCst);
        }
        for p in &dropped {
            tracing::info!(mountpath = %p.display(), "mountpath detached");
        }
        Ok(dropped)
    }
}

/// The first of `mps` that has a record of the object.
pub(super) fn find_in(
    mps: &[Arc<Mountpath>],
    bucket: &str,
    name: &str,
) -> Result<Option<(Arc<Mountpath>, ObjectMeta)>, StoreError> {
    for mp in mps {
        if let Some(meta) = mp.index.get(bucket, name)? {
            return Ok(Some((mp.clone(), meta)));
        }
    }
    Ok(None)
}

/// Drops the record of `bucket/name` on `mp` if it still names `file`, and its data file.
async fn drop_copy(
    mp: &Arc<Mountpath>,
    usage: &Usage,
    bucket: &str,
    name: &str,
    file: &str,
) -> Result<bool, StoreError> {
    let applied = mp
        .index
        .apply(IndexOp::DeleteIf {
            bucket: bucket.to_owned(),
            name: name.to_owned(),
            file: file.to_owned(),
        })
        .await?;
    match applied.replaced {
        Some(old) => {
            usage.account(&old.bucket, None, Some(&old));
            remove_data_file(mp, &old.file).await;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// After a write committed on its HRW mountpath while unsettled: removes older copies of the
/// object from the other mountpaths (so a later placement change cannot bring one back).
pub(super) async fn drop_other_copies(
    others: &[Arc<Mountpath>],
    usage: &Usage,
    bucket: &str,
    name: &str,
) -> Result<(), StoreError> {
    for mp in others {
        if let Some(old) = mp.index.get(bucket, name)? {
            drop_copy(mp, usage, bucket, name, &old.file).await?;
        }
    }
    Ok(())
}
