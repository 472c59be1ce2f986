//! Which objects move when mountpaths are added or removed.

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
use super::*;
use crate::store::error::StoreError;
use gristmill_core::{ApiError, persist};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64};

/// The mountpaths to open at start (paths given on the command line merged with the persisted
/// set, see the module docs) and the set's dynamic state.
pub(crate) fn plan(
    paths: &[PathBuf],
    state_file: Option<&Path>,
) -> Result<(Vec<(PathBuf, MpState)>, Dynamic), StoreError> {
    let mut given = Vec::new();
    for p in paths {
        let p = if p.is_absolute() {
            p.clone()
        } else {
            std::env::current_dir()?.join(p)
        };
        let c = prepare_dir(&p)?;
        if !given.contains(&c) {
            given.push(c);
        }
    }
    let persisted: Option<Persisted> = match state_file {
        Some(f) => persist::load_json(f)?,
        None => None,
    };
    let mut dynamic = Dynamic {
        state_file: state_file.map(Path::to_path_buf),
        ..Default::default()
    };
    let Some(persisted) = persisted.filter(|p| !p.mountpaths.is_empty()) else {
        let plan: Vec<_> = given.into_iter().map(|p| (p, MpState::Enabled)).collect();
        if let Some(f) = state_file {
            save(f, &plan_entries(&plan), &[], false, 0)?;
        }
        return Ok((plan, dynamic));
    };
    let mut pending = persisted.resilver_pending;
    let mut plan: Vec<(PathBuf, MpState)> = Vec::new();
    for e in &persisted.mountpaths {
        std::fs::create_dir_all(&e.path)?;
        plan.push((e.path.clone(), e.state));
    }
    for p in given {
        if plan.iter().any(|(q, _)| *q == p) {
            continue;
        }
        if persisted.detached.contains(&p) {
            tracing::warn!(mountpath = %p.display(), "mountpath was detached at runtime; ignoring it (attach it to use it again)");
            continue;
        }
        tracing::info!(mountpath = %p.display(), "new mountpath given at start: attaching it");
        plan.push((p, MpState::Enabled));
        pending = true;
    }
    if !plan.iter().any(|(_, s)| *s == MpState::Enabled) {
        return Err(ApiError::bad_request(
            "no enabled mountpath (every persisted mountpath is disabled or detaching)",
        )
        .into());
    }
    let epoch = persisted.epoch + u64::from(pending && !persisted.resilver_pending);
    dynamic.unsettled = AtomicBool::new(pending);
    dynamic.epoch = AtomicU64::new(epoch);
    dynamic.detached = Mutex::new(persisted.detached.clone());
    if let Some(f) = state_file {
        save(f, &plan_entries(&plan), &persisted.detached, pending, epoch)?;
    }
    Ok((plan, dynamic))
}
