//! The index's second order: every record of a cached (remote) bucket by access time, kept in
//! the same transaction as the record. An eviction pass reads the oldest entries of the
//! buckets and mountpaths that need room and nothing else, so its cost follows what it
//! evicts, not the object count (a walk of every record took minutes at 10 M objects).
//!
//! Key: `bucket-uname \0 atime (8 bytes, big-endian, sign bit flipped) object-name`, so one
//! bucket's entries are one contiguous range in access order; value: the object's size (8 bytes,
//! little-endian) and its data file's name, so that an eviction can free the space without
//! reading the record (see [`super::evicted`]). Native buckets (`ais/@#…`) are never evicted and
//! have no entries.

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};

use super::evicted::EVICTED;
use super::{OBJECTS, ObjectIndex, Table};
use crate::store::error::StoreError;
use crate::store::meta::ObjectMeta;

pub(super) const BY_ATIME: TableDefinition<&[u8], &[u8]> = TableDefinition::new("by_atime_v2");
/// The order as binaries before the data file's name was in it kept it (value: the size only).
/// Dropped, with its fact, when this order is built: a binary that knows only that one then
/// rebuilds it (after a downgrade).
const BY_ATIME_V1: TableDefinition<&[u8], u64> = TableDefinition::new("by_atime");
const V1_BUILT: &str = "by_atime";
/// Facts about the index file itself: `by_atime_v2` is set once [`BY_ATIME`] covers every record
/// (indexes written before it existed are filled when opened), and `objects_len_v2` is the
/// records table's length after the last transaction that kept the order in step. A binary
/// without this order (after a downgrade) changes records without it, and almost always their
/// number; the next open then finds the length differs and rebuilds the order.
const INDEX_META: TableDefinition<&str, u64> = TableDefinition::new("index_meta");
const BY_ATIME_BUILT: &str = "by_atime_v2";
const OBJECTS_LEN: &str = "objects_len_v2";

/// An order entry's value: the object's size and its data file.
fn order_value(meta: &ObjectMeta) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + meta.file.len());
    v.extend_from_slice(&meta.size.to_le_bytes());
    v.extend_from_slice(meta.file.as_bytes());
    v
}

/// The size and data file an order entry's value holds.
pub(super) fn parse_order_value(v: &[u8]) -> Option<(u64, String)> {
    let size = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
    let file = std::str::from_utf8(&v[8..]).ok()?.to_owned();
    Some((size, file))
}

/// Whether a bucket's records are cached copies that eviction may order (every bucket but a
/// native one of this cluster).
pub fn is_cached_bucket(uname: &str) -> bool {
    !uname.starts_with("ais/@#")
}

pub(super) fn atime_key(bucket: &str, atime_ns: i64, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(bucket.len() + 9 + name.len());
    k.extend_from_slice(bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(&((atime_ns as u64) ^ (1 << 63)).to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// One entry of a bucket's access order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtimeEntry {
    /// The entry's key: where the next page starts.
    pub key: Vec<u8>,
    pub atime_ns: i64,
    pub name: String,
    pub size: u64,
}

fn parse_entry(bucket_len: usize, key: &[u8], size: u64) -> Option<AtimeEntry> {
    let at = key.get(bucket_len + 1..bucket_len + 9)?;
    let atime_ns = (u64::from_be_bytes(at.try_into().ok()?) ^ (1 << 63)) as i64;
    let name = std::str::from_utf8(&key[bucket_len + 9..]).ok()?.to_owned();
    Some(AtimeEntry {
        key: key.to_vec(),
        atime_ns,
        name,
        size,
    })
}

/// The object records of one write transaction, with their access order kept in step and the
/// records an eviction has taken but not yet removed ([`super::evicted`]) hidden: every read
/// and change of a record in a write transaction goes through here.
pub(super) struct Records<'t> {
    pub(super) objects: Table<'t>,
    pub(super) by_atime: redb::Table<'t, &'static [u8], &'static [u8]>,
    pub(super) evicted: redb::Table<'t, &'static [u8], ()>,
    /// Whether `evicted` may hold keys (checked once per transaction): when it is empty, as
    /// it is between eviction passes, reads and writes pay nothing for it.
    pub(super) any_evicted: bool,
    facts: redb::Table<'t, &'static str, u64>,
}

impl<'t> Records<'t> {
    pub fn open(tx: &'t WriteTransaction) -> Result<Self, StoreError> {
        let evicted = tx.open_table(EVICTED)?;
        Ok(Self {
            objects: tx.open_table(OBJECTS)?,
            by_atime: tx.open_table(BY_ATIME)?,
            any_evicted: !evicted.is_empty()?,
            evicted,
            facts: tx.open_table(INDEX_META)?,
        })
    }

    /// Whether the record under `key` was evicted (and is only waiting to be removed).
    pub fn is_evicted(&self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.any_evicted && self.evicted.get(key)?.is_some())
    }

    /// The record under `key`, if there is one that was not evicted.
    pub fn get(&self, key: &[u8]) -> Result<Option<ObjectMeta>, StoreError> {
        if self.is_evicted(key)? {
            return Ok(None);
        }
        self.objects
            .get(key)?
            .map(|v| ObjectMeta::decode(v.value()))
            .transpose()
    }

    /// The table itself, for ranges of version slots: eviction never defers a slot's removal
    /// ([`Records::evict_later`]), so no slot is hidden.
    pub fn slots(&self) -> &Table<'t> {
        &self.objects
    }

    /// Before the transaction commits: notes the records' count the order is in step with,
    /// if it changed (most transactions — overwrites, access times, evictions — leave it as
    /// it was, and a write would copy a page of the facts table and the tables' root).
    pub fn seal(mut self) -> Result<(), StoreError> {
        let len = self.objects.len()?;
        if self.facts.get(OBJECTS_LEN)?.map(|v| v.value()) != Some(len) {
            self.facts.insert(OBJECTS_LEN, len)?;
        }
        Ok(())
    }

    /// Stores a record under `key` (its bucket and name), replacing any.
    pub fn insert(&mut self, key: &[u8], meta: &ObjectMeta) -> Result<(), StoreError> {
        let old = self.objects.insert(key, meta.encode().as_slice())?;
        // An evicted record's order entry went with the eviction.
        let old_evicted = self.any_evicted && self.evicted.remove(key)?.is_some();
        if !is_cached_bucket(&meta.bucket) {
            return Ok(());
        }
        let old = old.map(|v| ObjectMeta::decode(v.value())).transpose()?;
        if let Some(old) = old
            && !old_evicted
        {
            self.by_atime
                .remove(atime_key(&old.bucket, old.atime_ns, &old.name).as_slice())?;
        }
        self.by_atime.insert(
            atime_key(&meta.bucket, meta.atime_ns, &meta.name).as_slice(),
            order_value(meta).as_slice(),
        )?;
        Ok(())
    }

    /// Removes the record under `key`; returns it (none if it was evicted).
    pub fn remove(&mut self, key: &[u8]) -> Result<Option<ObjectMeta>, StoreError> {
        let old_evicted = self.any_evicted && self.evicted.remove(key)?.is_some();
        let Some(old) = self.objects.remove(key)? else {
            return Ok(None);
        };
        if old_evicted {
            return Ok(None);
        }
        let old = ObjectMeta::decode(old.value())?;
        if is_cached_bucket(&old.bucket) {
            self.by_atime
                .remove(atime_key(&old.bucket, old.atime_ns, &old.name).as_slice())?;
        }
        Ok(Some(old))
    }

    /// Removes the order's entry of `name` at `atime_ns` if there is one: for an entry that
    /// names no record at that access time (stale; the record's own entry is another key).
    pub fn forget_order_entry(
        &mut self,
        bucket: &str,
        atime_ns: i64,
        name: &str,
    ) -> Result<(), StoreError> {
        self.by_atime
            .remove(atime_key(bucket, atime_ns, name).as_slice())?;
        Ok(())
    }

    /// Removes every record of a bucket; returns how many.
    pub fn drop_bucket(&mut self, bucket: &str) -> Result<u64, StoreError> {
        let lo = super::object_key(bucket, "");
        let mut hi = bucket.as_bytes().to_vec();
        hi.push(1); // every key of this bucket sorts below `bucket \x01`
        let mut dropped = 0u64;
        for item in self
            .objects
            .extract_from_if(lo.as_slice()..hi.as_slice(), |_, _| true)?
        {
            item?;
            dropped += 1;
        }
        for item in self
            .by_atime
            .extract_from_if(lo.as_slice()..hi.as_slice(), |_, _| true)?
        {
            item?;
        }
        if self.any_evicted {
            // Already gone as far as readers knew: not counted as dropped now.
            for item in self
                .evicted
                .extract_from_if(lo.as_slice()..hi.as_slice(), |_, _| true)?
            {
                item?;
                dropped = dropped.saturating_sub(1);
            }
        }
        Ok(dropped)
    }
}

/// Fills [`BY_ATIME`] from the records of an index written before it existed (once; one
/// transaction, so a crash midway leaves it to the next open).
pub(super) fn build_if_missing(db: &redb::Database) -> Result<(), StoreError> {
    let tx = db.begin_write()?;
    {
        let mut facts = tx.open_table(INDEX_META)?;
        let mut objects = tx.open_table(OBJECTS)?;
        let in_step = facts.get(OBJECTS_LEN)?.map(|v| v.value()) == Some(objects.len()?);
        if facts.get(BY_ATIME_BUILT)?.is_some() {
            if in_step {
                return Ok(());
            }
            tracing::warn!(
                "index: records changed without their access-time order (by a binary without it?); rebuilding the order"
            );
            tx.delete_table(BY_ATIME)?;
        }
        tx.delete_table(BY_ATIME_V1)?;
        facts.remove(V1_BUILT)?;
        // Evicted records a binary without this order may have seen (and refilled): their
        // records go now, with what was refilled under their names (a cache: it is fetched
        // again; the startup scan removes its data file).
        let mut evicted = tx.open_table(EVICTED)?;
        for item in evicted.extract_if(|_, _| true)? {
            let (k, _) = item?;
            objects.remove(k.value())?;
        }
        let mut by_atime = tx.open_table(BY_ATIME)?;
        let mut n = 0u64;
        for item in objects.iter()? {
            let (_, v) = item?;
            let meta = ObjectMeta::decode(v.value())?;
            if is_cached_bucket(&meta.bucket) {
                by_atime.insert(
                    atime_key(&meta.bucket, meta.atime_ns, &meta.name).as_slice(),
                    order_value(&meta).as_slice(),
                )?;
                n += 1;
            }
        }
        facts.insert(BY_ATIME_BUILT, 1)?;
        facts.insert(OBJECTS_LEN, objects.len()?)?;
        if n > 0 {
            tracing::info!(records = n, "index: built the access-time order");
        }
    }
    tx.commit()?;
    Ok(())
}

impl ObjectIndex {
    /// Up to `max` entries of a cached bucket in access order, oldest first, after the entry
    /// whose key is `after` (from the oldest with `None`). Blocking.
    pub fn oldest(
        &self,
        bucket: &str,
        after: Option<&[u8]>,
        max: usize,
    ) -> Result<Vec<AtimeEntry>, StoreError> {
        let lo = super::object_key(bucket, "");
        let mut hi = bucket.as_bytes().to_vec();
        hi.push(1);
        let start = match after {
            Some(key) => std::ops::Bound::Excluded(key),
            None => std::ops::Bound::Included(lo.as_slice()),
        };
        let tx = self.db.begin_read()?;
        let table = tx.open_table(BY_ATIME)?;
        let mut out = Vec::with_capacity(max.min(1024));
        for item in table
            .range::<&[u8]>((start, std::ops::Bound::Excluded(hi.as_slice())))?
            .take(max)
        {
            let (k, v) = item?;
            let size = parse_order_value(v.value()).map_or(0, |(size, _)| size);
            if let Some(e) = parse_entry(bucket.len(), k.value(), size) {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// Every entry of the access order, for checks (blocking): (bucket, name, atime, size).
    #[cfg(test)]
    pub fn by_atime_entries(&self) -> Result<Vec<(String, String, i64, u64)>, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(BY_ATIME)?;
        let mut out = Vec::new();
        for item in table.iter()? {
            let (k, v) = item?;
            let key = k.value();
            let nul = key.iter().position(|b| *b == 0).unwrap_or(key.len());
            let bucket = String::from_utf8_lossy(&key[..nul]).into_owned();
            let size = parse_order_value(v.value()).map_or(0, |(size, _)| size);
            if let Some(e) = parse_entry(nul, key, size) {
                out.push((bucket, e.name, e.atime_ns, e.size));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_by_bucket_then_access_time_negative_times_first() {
        let mut keys = [
            atime_key("aws/@#/b", 5, "a"),
            atime_key("aws/@#/b", -1, "z"),
            atime_key("aws/@#/a", 9, "m"),
            atime_key("aws/@#/b", 5, "0"),
            atime_key("aws/@#/b", i64::MAX, ""),
        ];
        keys.sort();
        let parsed: Vec<(i64, String)> = keys
            .iter()
            .map(|k| {
                let nul = k.iter().position(|b| *b == 0).unwrap();
                let e = parse_entry(nul, k, 0).unwrap();
                (e.atime_ns, e.name)
            })
            .collect();
        assert_eq!(
            parsed,
            [
                (9, "m".into()),
                (-1, "z".into()),
                (5, "0".into()),
                (5, "a".into()),
                (i64::MAX, "".into())
            ]
        );
    }

    #[test]
    fn only_native_buckets_of_this_cluster_are_not_cached() {
        assert!(!is_cached_bucket("ais/@#/data"));
        assert!(!is_cached_bucket("ais/@#ns/data"));
        assert!(is_cached_bucket("ais/@remote#/data"));
        assert!(is_cached_bucket("aws/@#/data"));
        assert!(is_cached_bucket("ht/@#/data"));
    }
}
