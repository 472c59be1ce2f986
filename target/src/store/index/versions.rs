//! Versioned records of the index (S3 versioning): version ids, noncurrent versions and
//! delete markers in their slots beside the current record, and how a write or a permanent
//! delete moves records between the current place and the slots.

use super::*;

/// An object version's S3 version id ("null" for the null version and unversioned records).
pub fn version_id(m: &ObjectMeta) -> &str {
    m.custom
        .get(VERSION_ID_KEY)
        .map_or(NULL_VERSION_ID, String::as_str)
}

pub fn is_delete_marker(m: &ObjectMeta) -> bool {
    m.custom.get(DELETE_MARKER_KEY).is_some_and(|v| v == "true")
}

/// The generation a version is ordered by among its object's: a minted id begins with the
/// generation it was written at; the null version's is its record's.
pub fn slot_gen(m: &ObjectMeta) -> u64 {
    let id = version_id(m);
    id.get(..16)
        .filter(|_| id.len() == 32)
        .and_then(|g| u64::from_str_radix(g, 16).ok())
        .unwrap_or_else(|| m.effective_gen())
}

/// A fresh version id: the generation (orders versions, finds the slot) and 64 random bits
/// (unique even if a generation comes back after its tombstone was purged).
fn mint_version_id(generation: u64) -> String {
    format!(
        "{generation:016x}{:016x}",
        uuid::Uuid::new_v4().as_u128() as u64
    )
}

/// The record of `m` moved under its version slot.
fn in_slot(m: &ObjectMeta) -> ObjectMeta {
    let mut moved = m.clone();
    moved.name = version_slot(&m.name, slot_gen(m));
    moved
}

/// (key, record) of every version slot of an object, newest first.
pub(super) fn versions_of(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    bucket: &str,
    name: &str,
) -> Result<Vec<(Vec<u8>, ObjectMeta)>, StoreError> {
    let mut lo = object_key(bucket, name);
    lo.push(0);
    let mut hi = object_key(bucket, name);
    hi.push(1);
    let mut out = Vec::new();
    for item in table.range(lo.as_slice()..hi.as_slice())? {
        let (k, v) = item?;
        out.push((k.value().to_vec(), ObjectMeta::decode(v.value())?));
    }
    Ok(out)
}

/// The highest generation among an object's noncurrent versions and delete markers (0: none).
pub fn versions_gen(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    bucket: &str,
    name: &str,
) -> Result<u64, StoreError> {
    Ok(versions_of(table, bucket, name)?
        .iter()
        .map(|(_, m)| m.effective_gen().max(slot_gen(m)))
        .max()
        .unwrap_or(0))
}

/// A versioned bucket's write of an object's current version (a delete marker included),
/// after its generation is decided: the version it replaces moves to its slot unless both are
/// the null version; a null write removes a noncurrent null version; a delete marker goes to
/// its slot and leaves a tombstone in the current's place.
pub(super) fn put_versioned(
    table: &mut Records<'_>,
    tombs: &mut Table<'_>,
    key: &[u8],
    mut stored: ObjectMeta,
    replaced: Option<ObjectMeta>,
) -> Result<Applied, StoreError> {
    if version_id(&stored) == MINT_VERSION_ID {
        let id = mint_version_id(stored.generation);
        stored.custom.insert(VERSION_ID_KEY.to_owned(), id);
    }
    let new_id = version_id(&stored).to_owned();
    let mut applied = Applied::default();
    if new_id == NULL_VERSION_ID {
        for (k, m) in versions_of(table.slots(), &stored.bucket, &stored.name)? {
            if version_id(&m) == NULL_VERSION_ID {
                table.remove(k.as_slice())?;
                // A copy of it still on its way (rebalance, replica) stays out.
                write_tombstone(tombs, &k, m.effective_gen())?;
                applied.touched.push(m.name.clone());
                applied.freed.push(m);
            }
        }
    }
    match replaced {
        Some(old) if version_id(&old) != new_id => {
            let moved = in_slot(&old);
            table.insert(object_key(&moved.bucket, &moved.name).as_slice(), &moved)?;
            applied.touched.push(moved.name);
            applied.demoted = true;
        }
        old => applied.replaced = old,
    }
    if is_delete_marker(&stored) {
        table.remove(key)?;
        write_tombstone(tombs, key, stored.generation)?;
        stored = in_slot(&stored);
        table.insert(object_key(&stored.bucket, &stored.name).as_slice(), &stored)?;
        applied.touched.push(stored.name.clone());
    } else {
        table.insert(key, &stored)?;
    }
    applied.stored = Some(stored);
    Ok(applied)
}

/// [`IndexOp::DeleteVersion`].
pub(super) fn delete_version(
    table: &mut Records<'_>,
    tombs: &mut Table<'_>,
    bucket: &str,
    name: &str,
    id: &str,
    lock: Option<super::LockCheck>,
) -> Result<Applied, StoreError> {
    let key = object_key(bucket, name);
    let current = table.get(&key)?;
    let mut applied = Applied::default();
    let refused = |m: &ObjectMeta| {
        lock.and_then(|l| {
            gristmill_core::object_lock::deletion_refused(&m.custom, l.now_ns, l.bypass_governance)
        })
    };
    let removed = match current {
        Some(m) if version_id(&m) == id => {
            if let Some(why) = refused(&m) {
                applied.locked = Some(why);
                return Ok(applied);
            }
            table.remove(key.as_slice())?;
            m
        }
        _ => {
            let Some((k, m)) = versions_of(table.slots(), bucket, name)?
                .into_iter()
                .find(|(_, m)| version_id(m) == id)
            else {
                applied.unmet = Some("no such version");
                return Ok(applied);
            };
            if let Some(why) = refused(&m) {
                applied.locked = Some(why);
                return Ok(applied);
            }
            table.remove(k.as_slice())?;
            // A copy of this version still on its way (rebalance, replica) stays out.
            write_tombstone(tombs, &k, m.effective_gen())?;
            applied.touched.push(m.name.clone());
            m
        }
    };
    let tomb = read_tombstone(tombs, &key)?.map_or(0, |(g, _)| g);
    let mut known =
        tomb.max(removed.effective_gen())
            .max(versions_gen(table.slots(), bucket, name)?);
    if table.get(&key)?.is_none() {
        let newest = versions_of(table.slots(), bucket, name)?.into_iter().next();
        if let Some((_, m)) = &newest {
            known = known.max(m.effective_gen());
        }
        match newest {
            // The newest remaining version becomes current again, ordered after the delete.
            Some((k, m)) if !is_delete_marker(&m) => {
                table.remove(k.as_slice())?;
                write_tombstone(tombs, &k, m.effective_gen())?;
                applied.touched.push(m.name.clone());
                let mut promoted = m;
                promoted.name = name.to_owned();
                promoted.generation = known + 1;
                table.insert(key.as_slice(), &promoted)?;
                applied.stored = Some(promoted);
            }
            _ if known > tomb => write_tombstone(tombs, &key, known + 1)?,
            _ => {}
        }
    }
    applied.freed.push(removed);
    Ok(applied)
}
