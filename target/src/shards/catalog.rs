//! What a target knows about the members of each shard it stores, so reads inside a shard
//! need no scan: for an uncompressed tar, a [`TarIndex`] (member offsets; `archpath` = one
//! positioned read); for the other formats, the member list (listings and existence checks
//! without decompressing the shard again).
//!
//! Built on first use (or right after a `.tar` is PUT), kept in memory (bounded) and in a
//! side file next to the mountpath's data:
//!
//! ```text
//! <mountpath>/shardidx/<xxh3(bucket uname)>/<xx>/<xxh3-128(object name)>.idx
//! ```
//!
//! The side file lives outside `obj/` (the startup orphan scan only walks `obj/`) and is
//! written with a temp file + rename. Each catalog records the object's size and a tag made
//! of its checksum and data-file name (which carries the write's generation), and is used
//! only if both match the object as it is now: any overwrite, append or re-fetch makes the
//! old catalog stale, and it is rebuilt and replaced on the next use.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use gristmill_core::{ApiError, Bck};
use gristmill_shard::{Format, Limits, Member, MemberKind, ShardReader, TarIndex};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

use super::io::FileRange;
use crate::store::Store;
use crate::store::meta::ObjectMeta;

/// Members kept in memory across all cached catalogs (an index entry is ~100 bytes).
const CACHE_MEMBERS: usize = 2_000_000;

/// The members of one shard version.
pub(crate) enum Catalog {
    /// Uncompressed tar: where every member is.
    Tar(TarIndex),
    /// Compressed tar or zip: what the members are (reads still decompress or use the zip
    /// directory).
    Members(Vec<Member>),
}

impl Catalog {
    /// Size of the file member `name`, if the shard has one.
    pub(crate) fn file_size(&self, name: &str) -> Option<u64> {
        match self {
            Catalog::Tar(idx) => idx
                .get(name)
                .filter(|e| e.kind == MemberKind::File)
                .map(|e| e.size),
            Catalog::Members(ms) => ms
                .iter()
                .find(|m| m.is_file() && m.name == name)
                .map(|m| m.size),
        }
    }

    /// File members (name, size), sorted by name.
    pub(crate) fn files_sorted(&self) -> Vec<(&str, u64)> {
        let mut files: Vec<(&str, u64)> = match self {
            Catalog::Tar(idx) => idx
                .entries()
                .iter()
                .filter(|e| e.kind == MemberKind::File)
                .map(|e| (e.name.as_str(), e.size))
                .collect(),
            Catalog::Members(ms) => ms
                .iter()
                .filter(|m| m.is_file())
                .map(|m| (m.name.as_str(), m.size))
                .collect(),
        };
        files.sort_unstable_by(|a, b| a.0.cmp(b.0));
        files
    }

    fn weight(&self) -> usize {
        match self {
            Catalog::Tar(idx) => idx.entries().len(),
            Catalog::Members(ms) => ms.len(),
        }
        .max(1)
    }
}

/// The member list side file of a non-tar shard.
#[derive(Serialize, Deserialize)]
struct MemberFile {
    version: u8,
    size: u64,
    tag: String,
    members: Vec<Member>,
}

/// Recently used catalogs, by (bucket uname, object name), with the tag they describe.
#[derive(Default)]
pub(crate) struct Cache {
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    map: HashMap<(String, String), (String, Arc<Catalog>)>,
    order: VecDeque<(String, String)>,
    weight: usize,
}

impl Cache {
    fn get(&self, key: &(String, String), tag: &str) -> Option<Arc<Catalog>> {
        let inner = self.inner.lock().expect("catalog cache lock");
        inner
            .map
            .get(key)
            .filter(|(t, _)| t == tag)
            .map(|(_, c)| c.clone())
    }

    fn put(&self, key: (String, String), tag: String, cat: Arc<Catalog>) {
        let mut inner = self.inner.lock().expect("catalog cache lock");
        let w = cat.weight();
        if let Some((_, old)) = inner.map.insert(key.clone(), (tag, cat)) {
            inner.weight -= old.weight();
        } else {
            inner.order.push_back(key);
        }
        inner.weight += w;
        while inner.weight > CACHE_MEMBERS && inner.order.len() > 1 {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some((_, c)) = inner.map.remove(&oldest) {
                inner.weight -= c.weight();
            }
        }
    }

    /// Forgets a shard (deleted).
    pub(crate) fn forget(&self, bucket_uname: &str, name: &str) {
        let mut inner = self.inner.lock().expect("catalog cache lock");
        let key = (bucket_uname.to_owned(), name.to_owned());
        if let Some((_, c)) = inner.map.remove(&key) {
            inner.weight -= c.weight();
            inner.order.retain(|k| k != &key);
        }
    }
}

/// Which version of the object a catalog describes: its checksum and its data file (unique
/// per write).
pub(crate) fn tag_of(meta: &ObjectMeta) -> String {
    format!("{}:{}", meta.cksum_value, meta.file)
}

/// Where a shard's catalog side file lives.
pub(crate) fn side_file(store: &Store, bck: &Bck, name: &str) -> PathBuf {
    let mp = store.mountpath_for(bck, name);
    let h = xxh3_128(name.as_bytes());
    mp.path
        .join("shardidx")
        .join(format!("{:016x}", xxh3_64(bck.uname().as_bytes())))
        .join(format!("{:02x}", (h >> 120) as u8))
        .join(format!("{h:032x}.idx"))
}

/// The catalog of the shard `meta` describes (open as `file`): from memory, the side file,
/// or built now. Blocking.
pub(crate) fn load(
    store: &Store,
    cache: &Cache,
    bck: &Bck,
    meta: &ObjectMeta,
    file: &Arc<File>,
    format: Format,
) -> Result<Arc<Catalog>, ApiError> {
    let key = (bck.uname(), meta.name.clone());
    let tag = tag_of(meta);
    if let Some(c) = cache.get(&key, &tag) {
        return Ok(c);
    }
    let path = side_file(store, bck, &meta.name);
    let cat = match read_side_file(&path, format, meta.size, &tag) {
        Some(c) => c,
        None => {
            let c = build(file, meta.size, format, &tag)?;
            if let Err(e) = write_side_file(&path, &c, meta.size, &tag) {
                tracing::warn!(bucket = %bck, object = %meta.name, error = %e, "could not store shard index");
            }
            metrics::counter!("grist_archive_index_builds_total").increment(1);
            c
        }
    };
    let cat = Arc::new(cat);
    cache.put(key, tag, cat.clone());
    Ok(cat)
}

fn build(file: &Arc<File>, size: u64, format: Format, tag: &str) -> Result<Catalog, ApiError> {
    let src = FileRange::whole(file.clone(), size);
    Ok(match format {
        Format::Tar => {
            let mut idx = TarIndex::build(src, Limits::default())?;
            idx.set_source_tag(tag);
            Catalog::Tar(idx)
        }
        _ => Catalog::Members(ShardReader::open(format, src, Limits::default())?.list()?),
    })
}

fn read_side_file(path: &PathBuf, format: Format, size: u64, tag: &str) -> Option<Catalog> {
    let bytes = std::fs::read(path).ok()?;
    let cat = if format == Format::Tar {
        let idx = TarIndex::from_bytes(&bytes).ok()?;
        idx.is_current(size, tag).then_some(Catalog::Tar(idx))?
    } else {
        let f: MemberFile = serde_json::from_slice(&bytes).ok()?;
        (f.version == 1 && f.size == size && f.tag == tag).then_some(Catalog::Members(f.members))?
    };
    Some(cat)
}

fn write_side_file(path: &PathBuf, cat: &Catalog, size: u64, tag: &str) -> std::io::Result<()> {
    let bytes = match cat {
        Catalog::Tar(idx) => idx.to_bytes(),
        Catalog::Members(ms) => serde_json::to_vec(&MemberFile {
            version: 1,
            size,
            tag: tag.to_owned(),
            members: ms.clone(),
        })
        .map_err(std::io::Error::other)?,
    };
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("side file without a directory"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    let mut f = File::create(&tmp)?;
    let written = f
        .write_all(&bytes)
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Removes a shard's side file and cached catalog (the shard was deleted).
pub(crate) fn remove(store: &Store, cache: &Cache, bck: &Bck, name: &str) {
    cache.forget(&bck.uname(), name);
    let _ = std::fs::remove_file(side_file(store, bck, name));
}
