//! Raft's persistent state in one redb file per proxy (`<state_dir>/raft.redb`): the log
//! ([`LogStore`]: entries, vote, committed id, purge point) and the state machine
//! ([`StateMachine`]: the applied cluster map, bucket metadata and removed list — applied by
//! compare-and-set, see [`MetaState::apply`] — the last applied id and membership, and the
//! current snapshot). Every change is one redb transaction, durable when it returns (redb
//! fsyncs on commit); the transactions run on the blocking pool. The state machine publishes
//! its state on a watch channel after each durable batch.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use redb::{Database, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use gristmill_core::{BucketMetadata, ClusterMap};
use tokio::sync::watch;

use super::{MetaCmd, MetaReply, Outcome, RaftPeer, TypeConfig};

type NodeId = u64;
type StoreResult<T> = Result<T, StorageError<NodeId>>;

/// Log entries by index (JSON).
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// Small records by name (JSON): `vote`, `committed`, `last_purged`, `state`, `snapshot`.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Opens (or creates) the database with both tables.
pub(crate) fn open(path: &Path) -> StoreResult<(LogStore, StateMachine)> {
    let db =
        Database::create(path).map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Read, &e))?;
    let tx = db
        .begin_write()
        .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, &e))?;
    {
        tx.open_table(LOG)
            .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, &e))?;
        tx.open_table(META)
            .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, &e))?;
    }
    tx.commit()
        .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, &e))?;
    let db = Arc::new(db);
    let state: MetaState = read_meta(&db, "state", ErrorSubject::StateMachine)?.unwrap_or_default();
    let (published, _) = watch::channel(Arc::new(state.clone()));
    Ok((
        LogStore { db: db.clone() },
        StateMachine {
            db,
            state,
            published,
        },
    ))
}

fn io_err(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    e: &(dyn std::error::Error + 'static),
) -> StorageError<NodeId> {
    StorageIOError::new(subject, verb, AnyError::error(e.to_string())).into()
}

fn json_err(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    e: serde_json::Error,
) -> StorageError<NodeId> {
    io_err(subject, verb, &e)
}

fn read_meta<T: DeserializeOwned>(
    db: &Database,
    key: &str,
    subject: ErrorSubject<NodeId>,
) -> StoreResult<Option<T>> {
    let tx = db
        .begin_read()
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, &e))?;
    let table = tx
        .open_table(META)
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, &e))?;
    let Some(v) = table
        .get(key)
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, &e))?
    else {
        return Ok(None);
    };
    serde_json::from_slice(v.value())
        .map(Some)
        .map_err(|e| json_err(subject, ErrorVerb::Read, e))
}

/// Runs a write transaction on the blocking pool and commits it (durably).
async fn write<F>(db: &Arc<Database>, subject: ErrorSubject<NodeId>, f: F) -> StoreResult<()>
where
    F: FnOnce(&redb::WriteTransaction) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
        + Send
        + 'static,
{
    let db = db.clone();
    let s2 = subject.clone();
    tokio::task::spawn_blocking(move || {
        let tx = db
            .begin_write()
            .map_err(|e| io_err(s2.clone(), ErrorVerb::Write, &e))?;
        f(&tx).map_err(|e| io_err(s2.clone(), ErrorVerb::Write, e.as_ref()))?;
        tx.commit().map_err(|e| io_err(s2, ErrorVerb::Write, &e))
    })
    .await
    .map_err(|e| io_err(subject, ErrorVerb::Write, &e))?
}

fn put_meta_in<T: Serialize>(
    tx: &redb::WriteTransaction,
    key: &str,
    value: &T,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let bytes = serde_json::to_vec(value)?;
    tx.open_table(META)?.insert(key, bytes.as_slice())?;
    Ok(())
}

/// The Raft log, vote and commit point.
#[derive(Clone)]
pub(crate) struct LogStore {
    db: Arc<Database>,
}

impl LogStore {
    async fn put_meta<T: Serialize + Send + 'static>(
        &self,
        key: &'static str,
        value: T,
        subject: ErrorSubject<NodeId>,
    ) -> StoreResult<()> {
        write(&self.db, subject, move |tx| put_meta_in(tx, key, &value)).await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry<TypeConfig>>> {
        let db = self.db.clone();
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Some(i + 1),
            Bound::Excluded(i) => Some(*i),
            Bound::Unbounded => None,
        };
        tokio::task::spawn_blocking(move || {
            let read = |e: &dyn std::error::Error| {
                StorageError::from(StorageIOError::read_logs(AnyError::error(e.to_string())))
            };
            let tx = db.begin_read().map_err(|e| read(&e))?;
            let table = tx.open_table(LOG).map_err(|e| read(&e))?;
            let iter = match end {
                Some(end) if end <= start => return Ok(Vec::new()),
                Some(end) => table.range(start..end),
                None => table.range(start..),
            }
            .map_err(|e| read(&e))?;
            let mut out = Vec::new();
            for item in iter {
                let (_, v) = item.map_err(|e| read(&e))?;
                out.push(serde_json::from_slice(v.value()).map_err(|e| read(&e))?);
            }
            Ok(out)
        })
        .await
        .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, &e))?
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StoreResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId<NodeId>> =
            read_meta(&self.db, "last_purged", ErrorSubject::Logs)?;
        let last = {
            let tx = self
                .db
                .begin_read()
                .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, &e))?;
            let table = tx
                .open_table(LOG)
                .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, &e))?;
            match table
                .last()
                .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, &e))?
            {
                Some((_, v)) => {
                    let e: Entry<TypeConfig> = serde_json::from_slice(v.value())
                        .map_err(|e| json_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
                    Some(e.log_id)
                }
                None => None,
            }
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last.or(last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StoreResult<()> {
        self.put_meta("vote", *vote, ErrorSubject::Vote).await
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote<NodeId>>> {
        read_meta(&self.db, "vote", ErrorSubject::Vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StoreResult<()> {
        self.put_meta("committed", committed, ErrorSubject::Store)
            .await
    }

    async fn read_committed(&mut self) -> StoreResult<Option<LogId<NodeId>>> {
        Ok(
            read_meta::<Option<LogId<NodeId>>>(&self.db, "committed", ErrorSubject::Store)?
                .flatten(),
        )
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut rows = Vec::new();
        for e in entries {
            let bytes = serde_json::to_vec(&e)
                .map_err(|err| json_err(ErrorSubject::Logs, ErrorVerb::Write, err))?;
            rows.push((e.log_id.index, bytes));
        }
        let done = write(&self.db, ErrorSubject::Logs, move |tx| {
            let mut table = tx.open_table(LOG)?;
            for (index, bytes) in &rows {
                table.insert(*index, bytes.as_slice())?;
            }
            Ok(())
        })
        .await;
        // Durable (or failed) before openraft hears of it.
        callback.log_io_completed(
            done.as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
        done
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        write(&self.db, ErrorSubject::Logs, move |tx| {
            // Conflicting entries from `log_id` on.
            tx.open_table(LOG)?
                .retain_in(log_id.index.., |_, _| false)?;
            Ok(())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        write(&self.db, ErrorSubject::Logs, move |tx| {
            put_meta_in(tx, "last_purged", &log_id)?;
            // Entries up to `log_id`, now covered by the snapshot.
            tx.open_table(LOG)?
                .retain_in(..=log_id.index, |_, _| false)?;
            Ok(())
        })
        .await
    }
}

/// What the state machine holds: the applied metadata and where it stands in the log.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct MetaState {
    pub(crate) last_applied: Option<LogId<NodeId>>,
    pub(crate) last_membership: StoredMembership<NodeId, RaftPeer>,
    /// The applied maps (stored under the name `cmd`, as the first version of this file did).
    #[serde(rename = "cmd")]
    pub(crate) maps: Maps,
    /// Daemon ids refused on join.
    #[serde(default)]
    pub(crate) removed: BTreeSet<String>,
    /// The version of the last applied map that changed the active targets (objects moved):
    /// placement is confirmed only after a rebalance of that version or later. Replicated, so
    /// a leader elected (or a proxy restarted) after the change knows it. 0: unknown (a state
    /// from before this field).
    #[serde(default)]
    pub(crate) active_changed_at: u64,
}

/// The applied cluster map and bucket metadata (`None` until a command installs one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Maps {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) smap: Option<ClusterMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bmd: Option<BucketMetadata>,
}

impl MetaState {
    /// The applied cluster map's version (0 = none).
    pub(crate) fn smap_version(&self) -> u64 {
        self.maps.smap.as_ref().map_or(0, |m| m.version)
    }

    /// The applied bucket metadata's version (0 = none).
    pub(crate) fn bmd_version(&self) -> u64 {
        self.maps.bmd.as_ref().map_or(0, |b| b.version)
    }

    /// Compare-and-set: installs the command's states only if both base versions are the
    /// current ones. Depends on nothing but the state and the command, so every member (and a
    /// replay) computes the same result.
    pub(crate) fn apply(&mut self, cmd: MetaCmd) -> MetaReply {
        if cmd.smap.is_none() && cmd.bmd.is_none() && cmd.removed.is_none() {
            return self.reply(Outcome::Unchanged);
        }
        if cmd.base_smap != self.smap_version() || cmd.base_bmd != self.bmd_version() {
            return self.reply(Outcome::Conflict);
        }
        if let Some(smap) = cmd.smap {
            let active = ClusterMap::active_placement;
            if self
                .maps
                .smap
                .as_ref()
                .is_none_or(|old| active(old) != active(&smap))
            {
                self.active_changed_at = smap.version;
            }
            self.maps.smap = Some(smap);
        }
        if let Some(bmd) = cmd.bmd {
            self.maps.bmd = Some(bmd);
        }
        if let Some(removed) = cmd.removed {
            self.removed = removed;
        }
        self.reply(Outcome::Applied)
    }

    pub(crate) fn reply(&self, outcome: Outcome) -> MetaReply {
        MetaReply {
            outcome,
            smap_version: self.smap_version(),
            bmd_version: self.bmd_version(),
        }
    }
}

/// A snapshot as stored: its meta and the state's JSON.
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, RaftPeer>,
    data: Vec<u8>,
}

/// The applied metadata (a copy in memory, persisted after every batch).
pub(crate) struct StateMachine {
    db: Arc<Database>,
    pub(crate) state: MetaState,
    /// The state after each applied batch, for readers that must not wait on openraft.
    published: watch::Sender<Arc<MetaState>>,
}

impl StateMachine {
    /// The applied state, updated after every batch (and snapshot install) once it is durable.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<MetaState>> {
        self.published.subscribe()
    }

    fn publish(&self) {
        self.published.send_replace(Arc::new(self.state.clone()));
    }

    async fn persist_state(&self) -> StoreResult<()> {
        let state = self.state.clone();
        write(&self.db, ErrorSubject::StateMachine, move |tx| {
            put_meta_in(tx, "state", &state)
        })
        .await
    }
}

/// Builds snapshots from a copy of the state.
pub(crate) struct SnapshotBuilder {
    db: Arc<Database>,
    state: MetaState,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<TypeConfig>> {
        let data = serde_json::to_vec(&self.state)
            .map_err(|e| json_err(ErrorSubject::StateMachine, ErrorVerb::Read, e))?;
        let id = match &self.state.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, now_ms()),
            None => format!("0-0-{}", now_ms()),
        };
        let meta = SnapshotMeta {
            last_log_id: self.state.last_applied,
            last_membership: self.state.last_membership.clone(),
            snapshot_id: id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        write(&self.db, ErrorSubject::StateMachine, move |tx| {
            put_meta_in(tx, "snapshot", &stored)
        })
        .await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> StoreResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, RaftPeer>)> {
        Ok((self.state.last_applied, self.state.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StoreResult<Vec<MetaReply>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut replies = Vec::new();
        for entry in entries {
            self.state.last_applied = Some(entry.log_id);
            replies.push(match entry.payload {
                EntryPayload::Blank => self.state.reply(Outcome::Unchanged),
                EntryPayload::Normal(cmd) => self.state.apply(cmd),
                EntryPayload::Membership(m) => {
                    self.state.last_membership = StoredMembership::new(Some(entry.log_id), m);
                    self.state.reply(Outcome::Unchanged)
                }
            });
        }
        self.persist_state().await?;
        // Published only once durable, so no reader sees a state a crash could take back.
        self.publish();
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            db: self.db.clone(),
            state: self.state.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StoreResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, RaftPeer>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StoreResult<()> {
        let data = snapshot.into_inner();
        let mut state: MetaState = serde_json::from_slice(&data).map_err(|e| {
            json_err(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Read,
                e,
            )
        })?;
        state.last_applied = meta.last_log_id;
        state.last_membership = meta.last_membership.clone();
        self.state = state;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        let st = self.state.clone();
        write(&self.db, ErrorSubject::StateMachine, move |tx| {
            put_meta_in(tx, "snapshot", &stored)?;
            put_meta_in(tx, "state", &st)
        })
        .await?;
        self.publish();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot<TypeConfig>>> {
        let stored: Option<StoredSnapshot> =
            read_meta(&self.db, "snapshot", ErrorSubject::StateMachine)?;
        Ok(stored.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use gristmill_core::{BucketMetadata, ClusterMap, Node};
    use openraft::testing::{StoreBuilder, Suite};
    use openraft::{StorageError, StoredMembership};

    use super::{LogStore, MetaCmd, MetaState, Outcome, RaftPeer, StateMachine, TypeConfig};

    struct Fresh;

    impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Fresh {
        async fn build(
            &self,
        ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<u64>> {
            let dir = tempfile::tempdir().expect("temp dir");
            let (log, sm) = super::open(&dir.path().join("raft.redb"))?;
            Ok((dir, log, sm))
        }
    }

    /// openraft's own storage test suite against the redb log and state machine.
    #[test]
    fn openraft_storage_suite() -> Result<(), StorageError<u64>> {
        Suite::test_all(Fresh)
    }

    fn smap(version: u64) -> ClusterMap {
        let mut m = ClusterMap::new(
            Node::new("p1", "proxy", "http://127.0.0.1:1"),
            "uuid".into(),
            String::new(),
        );
        m.version = version;
        m
    }

    fn bmd(version: u64) -> BucketMetadata {
        BucketMetadata {
            version,
            ..Default::default()
        }
    }

    fn cmd(base: (u64, u64), new: (Option<u64>, Option<u64>)) -> MetaCmd {
        MetaCmd {
            base_smap: base.0,
            base_bmd: base.1,
            smap: new.0.map(smap),
            bmd: new.1.map(bmd),
            removed: None,
        }
    }

    /// Every member computes the version of the last change of active targets from the log
    /// alone, so a leader elected after it (or restarted) confirms placement by it (it used
    /// to take the version current when the proxy started, and never confirmed).
    #[test]
    fn apply_remembers_the_last_change_of_active_targets() {
        let mut st = MetaState::default();
        let with = |version: u64, targets: &[&str]| {
            let mut m = smap(version);
            for t in targets {
                m.tmap.insert(
                    (*t).to_owned(),
                    Node::new(t, "target", &format!("http://{t}")),
                );
            }
            m
        };
        let apply = |st: &mut MetaState, m: ClusterMap| {
            let c = MetaCmd {
                base_smap: st.smap_version(),
                base_bmd: st.bmd_version(),
                smap: Some(m),
                bmd: None,
                removed: None,
            };
            assert_eq!(st.apply(c).outcome, Outcome::Applied);
        };
        apply(&mut st, with(1, &["t1"]));
        assert_eq!(st.active_changed_at, 1);
        apply(&mut st, with(2, &["t1", "t2"]));
        assert_eq!(st.active_changed_at, 2);
        // A new primary, a proxy joining: the same targets, nothing moves.
        apply(&mut st, with(3, &["t1", "t2"]));
        assert_eq!(st.active_changed_at, 2);
        // A target in maintenance is not active.
        let mut m = with(4, &["t1", "t2"]);
        m.tmap.get_mut("t2").unwrap().flags |= gristmill_core::smap::FLAG_MAINTENANCE;
        apply(&mut st, m);
        assert_eq!(st.active_changed_at, 4);
        // Survives a snapshot (the state's JSON).
        let back: MetaState = serde_json::from_slice(&serde_json::to_vec(&st).unwrap()).unwrap();
        assert_eq!(back.active_changed_at, 4);
    }

    #[test]
    fn apply_installs_on_the_current_base_only() {
        let mut st = MetaState::default();
        let r = st.apply(cmd((0, 0), (Some(1), Some(1))));
        assert_eq!(r.outcome, Outcome::Applied);
        assert_eq!((r.smap_version, r.bmd_version), (1, 1));

        // Only the bucket metadata changes; the map stays.
        let mut c = cmd((1, 1), (None, Some(2)));
        c.removed = Some(BTreeSet::from(["t9".to_owned()]));
        assert_eq!(st.apply(c).outcome, Outcome::Applied);
        assert_eq!((st.smap_version(), st.bmd_version()), (1, 2));
        assert!(st.removed.contains("t9"));

        // Computed from bmd v1, which is gone: refused, nothing changes.
        let before = st.clone();
        let r = st.apply(MetaCmd {
            removed: Some(BTreeSet::new()),
            ..cmd((1, 1), (Some(2), Some(2)))
        });
        assert_eq!(r.outcome, Outcome::Conflict);
        assert_eq!((r.smap_version, r.bmd_version), (1, 2));
        assert_eq!(st.maps, before.maps);
        assert_eq!(st.removed, before.removed);

        // An empty command changes nothing, whatever its base.
        assert_eq!(
            st.apply(cmd((7, 7), (None, None))).outcome,
            Outcome::Unchanged
        );
    }

    #[test]
    fn replaying_an_applied_command_changes_nothing() {
        let mut st = MetaState::default();
        let c = cmd((0, 0), (Some(1), None));
        assert_eq!(st.apply(c.clone()).outcome, Outcome::Applied);
        let next = cmd((1, 0), (Some(2), Some(1)));
        assert_eq!(st.apply(next.clone()).outcome, Outcome::Applied);
        let after = st.maps.clone();
        // A replay of either (a restart re-applying the log) is refused by its stale base.
        assert_eq!(st.apply(c).outcome, Outcome::Conflict);
        assert_eq!(st.apply(next).outcome, Outcome::Conflict);
        assert_eq!(st.maps, after);
        assert_eq!((st.smap_version(), st.bmd_version()), (2, 1));
    }

    #[test]
    fn the_first_stored_state_shape_still_loads() {
        // What the first version of this file persisted: no `removed`.
        let old = serde_json::json!({
            "last_applied": null,
            "last_membership": StoredMembership::<u64, RaftPeer>::default(),
            "cmd": { "bmd": bmd(3) },
        });
        let st: MetaState = serde_json::from_value(old).expect("old shape");
        assert_eq!(st.bmd_version(), 3);
        assert!(st.removed.is_empty() && st.maps.smap.is_none());
    }
}
