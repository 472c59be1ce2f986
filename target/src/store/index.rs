//! The per-mountpath metadata index: an embedded, crash-safe B-tree (redb) keyed by
//! `bucket-uname \0 object-name`, so listing is an ordered range scan, a bucket's objects are one
//! contiguous range, and point lookups never touch the data files.
//!
//! Writers do not commit on their own: they send their change to a single committer task that
//! applies every change waiting in its queue in one transaction (one fsync), then answers them
//! all. Concurrent PUTs therefore share fsyncs instead of queueing behind each other.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};
use tokio::sync::{mpsc, oneshot};

use crate::store::error::StoreError;
use crate::store::hot::MetaCache;
use crate::store::meta::ObjectMeta;
use crate::store::{DELETE_MARKER_KEY, MINT_VERSION_ID, NULL_VERSION_ID, VERSION_ID_KEY};
use gristmill_core::name::{split_version_slot, version_slot};

mod by_atime;
mod condition;
mod evicted;
mod scan;
pub use condition::{WriteCondition, unmet_error};
mod versions;
pub use by_atime::AtimeEntry;
use by_atime::Records;
use evicted::{EVICTED, Hidden, Sweeping};
use versions::{delete_version, put_versioned, versions_of};
pub use versions::{is_delete_marker, version_id, versions_gen};

const OBJECTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");
/// Deleted objects: key as in [`OBJECTS`], value the tombstone's generation and when it was
/// written (local clock, for retention only), 8 + 8 bytes little-endian. A copy arriving later
/// with an older generation is not stored (see [`GenRule::IfNewer`]).
const TOMBSTONES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("tombstones");

/// Most changes folded into one transaction.
const MAX_BATCH: usize = 512;

/// Most batches of relaxed changes committed in a row without an fsync (redb frees pages
/// only in durable commits, so the file would grow without them).
pub const RELAXED_MAX_COMMITS: u32 = 64;
/// Oldest a relaxed change gets before a batch commits durably.
pub const RELAXED_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// Key of one object: bucket uname, NUL, object name. Neither part may contain NUL.
pub fn object_key(bucket: &str, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(bucket.len() + 1 + name.len());
    k.extend_from_slice(bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(name.as_bytes());
    k
}

/// How a put's generation ([`ObjectMeta::generation`]) is decided: by the owner, never by a clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenRule {
    /// A new write on the owner: one more than every generation known for the object — the
    /// record and tombstone here, and `floor` (what other possible holders reported).
    Next { floor: u64 },
    /// A copy sent by another node, with its generation: stored only if newer than the record
    /// and the tombstone here; otherwise nothing changes (`stored` is `None`).
    IfNewer(u64),
    /// Stored as given (a record put back after a failed drop).
    AsIs,
}

impl Default for GenRule {
    fn default() -> Self {
        GenRule::Next { floor: 0 }
    }
}

/// The generation of a tombstone a delete writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuryGen {
    /// A delete on the owner: one more than every generation known (as [`GenRule::Next`]).
    Next { floor: u64 },
    /// A delete the owner sent with its tombstone's generation: removes a record older than it.
    Exact(u64),
}

/// One change to apply.
#[derive(Debug)]
pub enum IndexOp {
    Put {
        meta: ObjectMeta,
        generation: GenRule,
        /// Stored only if this holds for the current record.
        condition: Option<WriteCondition>,
    },
    /// Remove the object (if older than the tombstone) and record a tombstone; answers with
    /// the removed record and the tombstone's generation.
    Bury {
        bucket: String,
        name: String,
        generation: BuryGen,
    },
    /// Forget tombstones written before this time (local clock, Unix ns).
    PurgeTombstones { before_ns: i64 },
    /// Remove the object if present; answers with the removed record.
    Delete { bucket: String, name: String },
    /// Remove every object of a bucket.
    DropBucket { bucket: String },
    /// Record access times (bucket, name, atime ns) of objects that still exist; older times
    /// than the stored ones are ignored.
    Touch(Vec<(String, String, i64)>),
    /// Store the record as given (version included) only if the current record's data file is
    /// `expect` (`None`: only if there is no record). The resilver's compare-and-swap; answers
    /// with the current record in `replaced` and, if stored, the record in `stored`.
    PutIf {
        meta: ObjectMeta,
        expect: Option<String>,
    },
    /// Versioned buckets: delete one version of an object for good (the current one or a
    /// noncurrent one or a delete marker; answers with it in `freed`, or `unmet` if there is
    /// none). When that leaves a noncurrent version newest, it becomes current again (in
    /// `stored`, with a new generation).
    DeleteVersion {
        bucket: String,
        name: String,
        version_id: String,
        /// Object Lock's check, made in the same transaction as the delete (`None`: the
        /// owner already decided, as for a copy on another holder or an undone PUT).
        lock: Option<LockCheck>,
    },
    /// Remove the record only if it still names data file `file`; answers with the removed
    /// record, or none.
    DeleteIf {
        bucket: String,
        name: String,
        file: String,
    },
    /// Eviction: remove each named record of `bucket` whose access time is still the one
    /// given (not read or rewritten since an eviction pass picked it); answers with the
    /// removed records in `freed` (as the access order describes them: bucket, name, size
    /// and data file). The records are hidden at once and removed by the sweep
    /// ([`evicted`]).
    Evict {
        bucket: String,
        picked: Vec<(String, i64)>,
    },
    /// Removes up to `max` records that evictions hid; answers with how many in `dropped`.
    SweepEvicted { max: usize },
}

/// What a change touches, for the hot-record cache.
enum Changes {
    Object(String, String),
    Bucket(String),
    /// Only the names in [`Applied::touched`] of this bucket.
    Touched(String),
    /// Access times only: the cached records stay valid.
    AccessTimes,
}

impl Changes {
    fn of(op: &IndexOp) -> Self {
        match op {
            IndexOp::Put { meta: m, .. } | IndexOp::PutIf { meta: m, .. } => {
                Changes::Object(m.bucket.clone(), m.name.clone())
            }
            IndexOp::Delete { bucket, name }
            | IndexOp::DeleteVersion { bucket, name, .. }
            | IndexOp::DeleteIf { bucket, name, .. }
            | IndexOp::Bury { bucket, name, .. } => Changes::Object(bucket.clone(), name.clone()),
            IndexOp::PurgeTombstones { .. } => Changes::AccessTimes,
            IndexOp::DropBucket { bucket } => Changes::Bucket(bucket.clone()),
            IndexOp::Touch(_) | IndexOp::SweepEvicted { .. } => Changes::AccessTimes,
            IndexOp::Evict { bucket, .. } => Changes::Touched(bucket.clone()),
        }
    }
}

/// The outcome of one committed change.
#[derive(Debug, Default)]
pub struct Applied {
    /// The record a put replaced or a delete removed (its data file is now garbage).
    pub replaced: Option<ObjectMeta>,
    /// The record as stored by a put, with its assigned version.
    pub stored: Option<ObjectMeta>,
    /// Records a bucket drop removed; tombstones a purge removed.
    pub dropped: u64,
    /// The generation of the tombstone a [`IndexOp::Bury`] left.
    pub tombstone: u64,
    /// Why a conditional put was not stored (nothing changed).
    pub unmet: Option<&'static str>,
    /// Why a version delete was refused by Object Lock (nothing changed).
    pub locked: Option<String>,
    /// Versioned buckets: records removed besides `replaced` (a null version a new null
    /// version replaces, a version deleted for good); their data files are garbage.
    pub freed: Vec<ObjectMeta>,
    /// Stored names whose records moved or went (besides the op's own name): the hot-record
    /// cache forgets them.
    pub touched: Vec<String>,
    /// Versioned buckets: the current version a write replaced moved to its slot.
    pub demoted: bool,
}

pub type IndexReply = Result<Applied, StoreError>;

/// A version delete that Object Lock may refuse: at `now_ns`, bypassing GOVERNANCE retention
/// or not (see [`gristmill_core::object_lock`]).
#[derive(Debug, Clone, Copy)]
pub struct LockCheck {
    pub now_ns: i64,
    pub bypass_governance: bool,
}

struct Pending {
    op: IndexOp,
    /// False for changes that may be lost in a crash (cache fills: a lost entry is fetched
    /// again). A batch of only such changes commits without waiting for an fsync.
    durable: bool,
    done: oneshot::Sender<IndexReply>,
}

/// Handle to one mountpath's index. Cheap to clone.
#[derive(Clone)]
pub struct ObjectIndex {
    db: Arc<Database>,
    commits: mpsc::Sender<Pending>,
    /// The store's cache of hot object records: every committed change drops its key.
    hot: Arc<MetaCache>,
    sweeping: Sweeping,
}

impl std::fmt::Debug for ObjectIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectIndex")
    }
}

impl ObjectIndex {
    /// Opens (or creates) the index file and starts its committer on the current runtime.
    pub(crate) fn open(
        path: &Path,
        hot: Arc<MetaCache>,
        cache_bytes: usize,
    ) -> Result<Self, StoreError> {
        let db = redb::Builder::new()
            .set_cache_size(cache_bytes)
            .create(path)?;
        {
            let tx = db.begin_write()?;
            tx.open_table(OBJECTS)?;
            tx.open_table(TOMBSTONES)?;
            tx.open_table(by_atime::BY_ATIME)?;
            tx.open_table(EVICTED)?;
            tx.commit()?;
        }
        by_atime::build_if_missing(&db)?;
        let db = Arc::new(db);
        let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
        tokio::spawn(run_committer(db.clone(), rx));
        let index = Self {
            db,
            commits: tx,
            hot,
            sweeping: Sweeping::default(),
        };
        // What a pass evicted before a restart, left to sweep.
        if index.evicted_pending()? > 0 {
            index.start_sweep();
        }
        Ok(index)
    }

    /// Applies one change durably; returns after the batch holding it is on disk.
    pub async fn apply(&self, op: IndexOp) -> IndexReply {
        self.submit(op, true).await
    }

    /// Applies one change atomically but without waiting for it to reach the disk: it is
    /// visible to every reader when this returns, but a crash (of the process or the machine)
    /// may undo it — never partly: the next durable commit persists it along with everything
    /// committed before, and one happens at least every [`RELAXED_MAX_COMMITS`] batches or
    /// [`RELAXED_MAX_AGE`]. For entries whose loss is harmless, such as cache fills of remote
    /// objects (a lost entry is fetched again; its data file is removed by the startup scan).
    pub async fn apply_relaxed(&self, op: IndexOp) -> IndexReply {
        self.submit(op, false).await
    }

    /// Returns once every change applied before it is on disk (a durable commit of nothing
    /// when the last one was relaxed).
    pub async fn sync(&self) -> Result<(), StoreError> {
        self.submit(IndexOp::Touch(Vec::new()), true)
            .await
            .map(|_| ())
    }

    async fn submit(&self, op: IndexOp, durable: bool) -> IndexReply {
        // (Tests may hold a committed change here, before the record cache forgets it: the
        // moment another task can find the cache ahead of the index, see `HOLD_FORGET`.)
        let changes = Changes::of(&op);
        let (done, wait) = oneshot::channel();
        self.commits
            .send(Pending { op, durable, done })
            .await
            .map_err(|_| StoreError::Index("index committer stopped".into()))?;
        let reply = wait
            .await
            .map_err(|_| StoreError::Index("index committer dropped a change".into()))?;
        #[cfg(test)]
        hold_forget().await;
        if let (Ok(applied), Changes::Object(bucket, _) | Changes::Touched(bucket)) =
            (&reply, &changes)
        {
            for name in &applied.touched {
                self.hot.forget(bucket, name);
            }
        }
        // After the commit (whatever its outcome): a lookup that read the old record cannot
        // cache it any more.
        match changes {
            Changes::Object(bucket, name) => self.hot.forget(&bucket, &name),
            Changes::Bucket(bucket) => self.hot.forget_bucket(&bucket),
            Changes::Touched(_) | Changes::AccessTimes => {}
        }
        reply
    }

    /// Point lookup.
    pub fn get(&self, bucket: &str, name: &str) -> Result<Option<ObjectMeta>, StoreError> {
        let tx = self.db.begin_read()?;
        let key = object_key(bucket, name);
        if Hidden::of(&tx)?.hides(&key)? {
            return Ok(None);
        }
        let table = tx.open_table(OBJECTS)?;
        match table.get(key.as_slice())? {
            Some(v) => Ok(Some(ObjectMeta::decode(v.value())?)),
            None => Ok(None),
        }
    }

    /// The generation of the object's tombstone, if it has one.
    pub fn tombstone(&self, bucket: &str, name: &str) -> Result<Option<u64>, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(TOMBSTONES)?;
        Ok(read_tombstone(&table, &object_key(bucket, name))?.map(|(g, _)| g))
    }

    /// Up to `limit` objects of `bucket` whose names start with `prefix` and sort strictly after
    /// `start_after`, in name order. Blocking: call from a blocking context for large pages.
    /// With `versions`, also the noncurrent versions and delete markers (under their stored
    /// names, right after their object's current record).
    pub fn list(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
        limit: usize,
        versions: bool,
    ) -> Result<Vec<ObjectMeta>, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(OBJECTS)?;
        // After a name equal to the prefix (a directory marker), the scan starts past it too.
        let start = if !start_after.is_empty() && start_after >= prefix {
            let mut k = object_key(bucket, start_after);
            k.push(0); // smallest key strictly after `start_after`
            k
        } else {
            object_key(bucket, prefix)
        };
        let want_prefix = object_key(bucket, prefix);
        let hidden = Hidden::of(&tx)?;
        let mut out = Vec::new();
        let mut from = start;
        'seek: loop {
            for item in table.range(from.as_slice()..)? {
                let (k, v) = item?;
                let key = k.value();
                if !key.starts_with(&want_prefix) || out.len() >= limit {
                    break 'seek;
                }
                if !versions && let Some(nul) = key[bucket.len() + 1..].iter().position(|&b| b == 0)
                {
                    // A version slot (`name\0…`): seek past all of this name's slots (to
                    // `name\x01`) instead of stepping over each of them.
                    from = key[..bucket.len() + 1 + nul].to_vec();
                    from.push(1);
                    continue 'seek;
                }
                if hidden.hides(key)? {
                    continue;
                }
                out.push(ObjectMeta::decode(v.value())?);
            }
            break;
        }
        Ok(out)
    }

    /// The noncurrent versions and delete markers of an object, newest first.
    pub fn versions(&self, bucket: &str, name: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(OBJECTS)?;
        Ok(versions_of(&table, bucket, name)?
            .into_iter()
            .map(|(_, m)| m)
            .collect())
    }

    /// The highest generation among an object's noncurrent versions and delete markers.
    pub fn versions_gen(&self, bucket: &str, name: &str) -> Result<u64, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(OBJECTS)?;
        versions_gen(&table, bucket, name)
    }

    /// Whether the index holds no record. Blocking.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(OBJECTS)?;
        let hidden = Hidden::of(&tx)?;
        if table.len()? > hidden.len()? {
            return Ok(false);
        }
        for item in table.iter()? {
            if !hidden.hides(item?.0.value())? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Every tombstone, in key order: bucket uname, object name, generation. Blocking.
    pub fn for_each_tombstone(&self, mut f: impl FnMut(&str, &str, u64)) -> Result<(), StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(TOMBSTONES)?;
        for item in table.iter()? {
            let (k, v) = item?;
            let key = k.value();
            let Some(nul) = key.iter().position(|b| *b == 0) else {
                continue;
            };
            let (Ok(bucket), Ok(name)) = (
                std::str::from_utf8(&key[..nul]),
                std::str::from_utf8(&key[nul + 1..]),
            ) else {
                continue;
            };
            let Some(generation) = v
                .value()
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
            else {
                continue;
            };
            f(bucket, name, generation);
        }
        Ok(())
    }

    /// Every record, in key order (startup scans, rebuilds). Blocking.
    pub fn for_each(&self, mut f: impl FnMut(ObjectMeta)) -> Result<(), StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(OBJECTS)?;
        let hidden = Hidden::of(&tx)?;
        for item in table.iter()? {
            let (k, v) = item?;
            if !hidden.hides(k.value())? {
                f(ObjectMeta::decode(v.value())?);
            }
        }
        Ok(())
    }
}

async fn run_committer(db: Arc<Database>, mut rx: mpsc::Receiver<Pending>) {
    // Relaxed commits since the last durable one, and when the first of them happened.
    let mut relaxed = 0u32;
    let mut relaxed_since = std::time::Instant::now();
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let durable = batch.iter().any(|p| p.durable)
            || relaxed >= RELAXED_MAX_COMMITS
            || (relaxed > 0 && relaxed_since.elapsed() >= RELAXED_MAX_AGE);
        if durable {
            relaxed = 0;
        } else {
            if relaxed == 0 {
                relaxed_since = std::time::Instant::now();
            }
            relaxed += 1;
        }
        let db = db.clone();
        let done = tokio::task::spawn_blocking(move || commit_batch(&db, batch, durable)).await;
        if let Err(e) = done {
            tracing::error!(error = %e, "index commit task panicked");
        }
    }
}

/// Applies a batch in one transaction and answers each change. If the transaction fails, every
/// change in it fails (none was applied).
fn commit_batch(db: &Database, batch: Vec<Pending>, durable: bool) {
    let mut replies: Vec<Applied> = Vec::with_capacity(batch.len());
    let result = (|| -> Result<(), StoreError> {
        let mut tx = db.begin_write()?;
        // None: visible at once, persisted by the next durable commit (redb's Eventual
        // still fsyncs on Linux).
        tx.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        });
        {
            let mut table = Records::open(&tx)?;
            let mut tombs = tx.open_table(TOMBSTONES)?;
            for p in &batch {
                replies.push(apply_one(&mut table, &mut tombs, &p.op)?);
            }
            table.seal()?;
        }
        tx.commit()?;
        Ok(())
    })();
    match result {
        Ok(()) => {
            for (p, r) in batch.into_iter().zip(replies) {
                let _ = p.done.send(Ok(r));
            }
        }
        Err(e) => {
            let msg = e.to_string();
            tracing::error!(error = %msg, "index commit failed");
            for p in batch {
                let _ = p.done.send(Err(StoreError::Index(msg.clone())));
            }
        }
    }
}

type Table<'t> = redb::Table<'t, &'static [u8], &'static [u8]>;

fn read_tombstone(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    key: &[u8],
) -> Result<Option<(u64, i64)>, StoreError> {
    Ok(table.get(key)?.and_then(|v| {
        let b = v.value();
        let generation = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
        let at = i64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
        Some((generation, at))
    }))
}

fn write_tombstone(tombs: &mut Table<'_>, key: &[u8], generation: u64) -> Result<(), StoreError> {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&generation.to_le_bytes());
    v[8..].copy_from_slice(&crate::store::now_ns().to_le_bytes());
    tombs.insert(key, v.as_slice())?;
    Ok(())
}

fn apply_one(
    table: &mut Records<'_>,
    tombs: &mut Table<'_>,
    op: &IndexOp,
) -> Result<Applied, StoreError> {
    match op {
        IndexOp::Put {
            meta,
            generation,
            condition,
        } => {
            let key = object_key(&meta.bucket, &meta.name);
            let replaced = table.get(&key)?;
            if let Some(unmet) = condition.as_ref().and_then(|c| c.unmet(replaced.as_ref())) {
                return Ok(Applied {
                    unmet: Some(unmet),
                    ..Default::default()
                });
            }
            // A versioned write also counts its object's versions: when the latest is a delete
            // marker whose tombstone was purged (or stayed behind on a past owner), they are
            // all that remembers the generations — and a reused one would reuse a slot.
            let versioned =
                !split_version_slot(&meta.name).1 && meta.custom.contains_key(VERSION_ID_KEY);
            let known = || -> Result<u64, StoreError> {
                let record = replaced.as_ref().map_or(0, ObjectMeta::effective_gen);
                let tomb = read_tombstone(tombs, &key)?.map_or(0, |(g, _)| g);
                let slots = if versioned {
                    versions_gen(table.slots(), &meta.bucket, &meta.name)?
                } else {
                    0
                };
                Ok(record.max(tomb).max(slots))
            };
            let mut stored = meta.clone();
            match *generation {
                GenRule::Next { floor } => stored.generation = known()?.max(floor) + 1,
                GenRule::IfNewer(sent) => {
                    stored.generation = sent;
                    if sent <= known()? {
                        return Ok(Applied {
                            replaced,
                            ..Default::default()
                        });
                    }
                }
                GenRule::AsIs => {}
            }
            if stored.version.is_empty() {
                // Native objects: AIStore's version, counting the writes of the object since
                // it was (re)created. Not the generation, which carries the cluster epoch.
                let prior = replaced
                    .as_ref()
                    .and_then(|m| m.version.parse::<u64>().ok());
                stored.version = prior.map_or(1, |v| v + 1).to_string();
            }
            let (_, slot) = split_version_slot(&stored.name);
            if !slot && stored.custom.contains_key(VERSION_ID_KEY) {
                return put_versioned(table, tombs, &key, stored, replaced);
            }
            table.insert(key.as_slice(), &stored)?;
            Ok(Applied {
                replaced,
                stored: Some(stored),
                ..Default::default()
            })
        }
        IndexOp::Bury {
            bucket,
            name,
            generation,
        } => {
            let key = object_key(bucket, name);
            let current = table.get(&key)?;
            let record = current.as_ref().map_or(0, ObjectMeta::effective_gen);
            let tomb = read_tombstone(tombs, &key)?.map_or(0, |(g, _)| g);
            let generation = match *generation {
                BuryGen::Next { floor } => record.max(tomb).max(floor) + 1,
                BuryGen::Exact(g) => g,
            };
            if generation > tomb {
                write_tombstone(tombs, &key, generation)?;
            }
            // A record newer than the tombstone (written after the delete) stays.
            let replaced = match current {
                Some(m) if m.effective_gen() < generation => {
                    table.remove(key.as_slice())?;
                    Some(m)
                }
                _ => None,
            };
            Ok(Applied {
                replaced,
                tombstone: generation.max(tomb),
                ..Default::default()
            })
        }
        IndexOp::PurgeTombstones { before_ns } => {
            let mut dropped = 0;
            for item in tombs.extract_if(|_, v| {
                v.get(8..16)
                    .and_then(|b| b.try_into().ok())
                    .map(i64::from_le_bytes)
                    .is_some_and(|at| at < *before_ns)
            })? {
                item?;
                dropped += 1;
            }
            Ok(Applied {
                dropped,
                ..Default::default()
            })
        }
        IndexOp::Delete { bucket, name } => {
            let replaced = table.remove(object_key(bucket, name).as_slice())?;
            Ok(Applied {
                replaced,
                ..Default::default()
            })
        }
        IndexOp::DeleteVersion {
            bucket,
            name,
            version_id,
            lock,
        } => delete_version(table, tombs, bucket, name, version_id, *lock),
        IndexOp::PutIf { meta, expect } => {
            let key = object_key(&meta.bucket, &meta.name);
            let current = table.get(&key)?;
            if current.as_ref().map(|m| &m.file) != expect.as_ref() {
                return Ok(Applied {
                    replaced: current,
                    ..Default::default()
                });
            }
            table.insert(key.as_slice(), meta)?;
            Ok(Applied {
                replaced: current,
                stored: Some(meta.clone()),
                ..Default::default()
            })
        }
        IndexOp::DeleteIf { bucket, name, file } => {
            let key = object_key(bucket, name);
            let Some(current) = table.get(&key)? else {
                return Ok(Applied::default());
            };
            if current.file != *file {
                return Ok(Applied::default());
            }
            table.remove(key.as_slice())?;
            Ok(Applied {
                replaced: Some(current),
                ..Default::default()
            })
        }
        IndexOp::Evict { bucket, picked } => {
            let mut applied = Applied::default();
            for (name, atime) in picked {
                if !split_version_slot(name).1 {
                    if let Some((size, file)) = table.evict_later(bucket, *atime, name)? {
                        applied.touched.push(name.clone());
                        applied
                            .freed
                            .push(ObjectMeta::bare(bucket, name, size, file));
                    }
                    continue;
                }
                let key = object_key(bucket, name);
                // Removed first (one descent of the tree), put back in the rare case that it
                // was read or rewritten since the pick.
                let Some(current) = table.remove(key.as_slice())? else {
                    // An entry of the order without its record (left by a binary without
                    // the order): it goes, or every pass would read it again.
                    table.forget_order_entry(bucket, *atime, name)?;
                    continue;
                };
                if current.atime_ns == *atime {
                    applied.touched.push(name.clone());
                    applied.freed.push(current);
                } else {
                    table.insert(key.as_slice(), &current)?;
                    table.forget_order_entry(bucket, *atime, name)?;
                }
            }
            Ok(applied)
        }
        IndexOp::Touch(entries) => {
            for (bucket, name, atime) in entries {
                let key = object_key(bucket, name);
                let Some(current) = table.get(&key)? else {
                    continue;
                };
                if current.atime_ns < *atime {
                    let mut updated = current;
                    updated.atime_ns = *atime;
                    table.insert(key.as_slice(), &updated)?;
                }
            }
            Ok(Applied::default())
        }
        IndexOp::SweepEvicted { max } => Ok(Applied {
            dropped: table.sweep(*max)?,
            ..Default::default()
        }),
        IndexOp::DropBucket { bucket } => {
            let dropped = table.drop_bucket(bucket)?;
            Ok(Applied {
                dropped,
                ..Default::default()
            })
        }
    }
}

/// Tests: while set, every committed index change waits here for a permit before the record
/// cache forgets the keys it touched.
#[cfg(test)]
pub(crate) static HOLD_FORGET: std::sync::Mutex<Option<std::sync::Arc<tokio::sync::Semaphore>>> =
    std::sync::Mutex::new(None);

#[cfg(test)]
async fn hold_forget() {
    let gate = HOLD_FORGET.lock().expect("hold lock").clone();
    if let Some(gate) = gate {
        drop(gate.acquire().await);
    }
}
