//! Files on a mountpath: data file names, fan-out directories (fsynced when created), the\n//! metadata xattr, orphans left by a crash.

use super::*;
use crate::store::error::StoreError;
use crate::store::index::{IndexOp, ObjectIndex};
use crate::store::meta::META_XATTR;
use gristmill_core::hrw;
use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

/// Opens one mountpath: its layout (created if missing; mode 0700) and its index.
pub(super) fn open_mountpath(
    p: &Path,
    hot: Arc<crate::store::hot::MetaCache>,
    index_cache_bytes: usize,
) -> Result<Mountpath, StoreError> {
    std::fs::create_dir_all(p)?;
    let path = std::fs::canonicalize(p)?;
    // Only the target's user may enter: ETL workers (another user) and others never
    // read object files directly. A mountpath that is a volume's root belongs to root (a
    // Kubernetes PVC, say, with the pod's group): then what the target creates in it is
    // closed instead.
    let private = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
    let closed_root = match private(&path) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::warn!(mountpath = %path.display(), "mountpath not owned by this user: closing its subdirectories instead");
            false
        }
        Err(e) => return Err(e.into()),
    };
    for sub in ["obj", "tmp", "trash", "mpu", "partial"] {
        std::fs::create_dir_all(path.join(sub))?;
        if !closed_root {
            private(&path.join(sub))?;
        }
    }
    let index = ObjectIndex::open(&path.join("index.redb"), hot, index_cache_bytes)?;
    if !closed_root {
        std::fs::set_permissions(
            path.join("index.redb"),
            std::fs::Permissions::from_mode(0o600),
        )?;
    }
    let digest = hrw::digest(&path.to_string_lossy());
    Ok(Mountpath {
        path,
        digest,
        index,
    })
}

/// `obj/<bucket-hash>/<xx>/<name-hash>.<generation>`.
pub(super) fn data_file_name(bucket: &str, name: &str, generation: u64) -> String {
    let h = xxh3_128(name.as_bytes());
    format!(
        "obj/{}/{:02x}/{:032x}.{:016x}",
        bucket_dir(bucket),
        (h >> 120) as u8,
        h,
        generation
    )
}

pub(super) fn bucket_dir(bucket: &str) -> String {
    format!("{:016x}", xxh3_64(bucket.as_bytes()))
}

pub(super) async fn remove_data_file(mp: &Mountpath, rel: &str) {
    if let Err(e) = tokio::fs::remove_file(mp.path.join(rel)).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(file = rel, error = %e, "could not remove replaced data file");
    }
}

/// Creates a data file's fan-out directory (and its parents) if missing. When `durable`, each
/// directory created is made durable by an fsync of its parent: without it a power loss can
/// drop the new directory, and with it every fsynced file inside.
pub(super) fn create_fan_out_dir(dir: &Path, durable: bool) -> std::io::Result<()> {
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

pub(super) fn set_meta_xattr(path: &Path, encoded: &[u8]) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if let Err(e) = xattr::set(path, META_XATTR, encoded) {
        WARNED.call_once(|| {
            tracing::warn!(error = %e, "cannot store object metadata in xattrs on this filesystem; the index is the only copy")
        });
    }
}

/// Startup scan: empties `tmp/`, `trash/` and `partial/`, removes data files no index record references
/// (writes interrupted before their commit), and drops records whose file is gone.
pub(super) fn remove_orphans(mp: &Mountpath) -> Result<u64, StoreError> {
    let mut removed = 0u64;
    // `partial/`: chunks of remote objects read by range (`read::chunks`), tracked in memory.
    for sub in ["tmp", "trash", "partial"] {
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
