//! [`RaftNode`]: one proxy's member of the Raft group — starting it over its redb file,
//! proposing metadata changes (leader only, serially, with quorum checks and bounded waits),
//! linearizable reads (leader: `ensure_linearizable`; follower: the leader's read index),
//! proxy membership (learner → voter, removal) and what the proxy reads: the applied state and
//! who leads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gristmill_core::{ApiError, ErrorKind};
use gristmill_node::auth::IntraClient;
use openraft::error::{
    CheckIsLeaderError, ClientWriteError, ForwardToLeader, InitializeError, RaftError,
};
use openraft::metrics::WaitError;
use openraft::raft::ClientWriteResponse;
use openraft::{ChangeMembers, Config, Raft, RaftMetrics, ServerState, SnapshotPolicy};
use tokio::sync::{Mutex, watch};

use super::api::ReadIndex;
use super::network::Network;
use super::{MetaCmd, MetaReply, MetaState, Outcome, RaftPeer, TypeConfig, store};

type NodeId = u64;
type Metrics = RaftMetrics<NodeId, RaftPeer>;
type WriteResult =
    Result<ClientWriteResponse<TypeConfig>, RaftError<NodeId, ClientWriteError<NodeId, RaftPeer>>>;

/// Raft timing. The election timeout is the minimum; the maximum is twice that.
#[derive(Debug, Clone, Copy)]
pub struct RaftSettings {
    /// How often the leader sends heartbeats.
    pub heartbeat: Duration,
    /// A follower that hears no leader for a random time between this and twice this starts
    /// an election.
    pub election_timeout: Duration,
}

impl Default for RaftSettings {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(150),
            election_timeout: Duration::from_millis(750),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RaftSettings {
    fn config(&self) -> anyhow::Result<Config> {
        let min = millis(self.election_timeout);
        let max = millis(self.election_max());
        let config = Config {
            cluster_name: "gristmill-proxies".into(),
            heartbeat_interval: millis(self.heartbeat),
            election_timeout_min: min,
            election_timeout_max: max,
            // Snapshot chunks travel under this TTL; openraft's 200 ms is short for a loaded host.
            install_snapshot_timeout: max.max(1000),
            // Every entry carries whole maps: keep append requests and the log small.
            max_payload_entries: 32,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(200),
            max_in_snapshot_log_to_keep: 100,
            ..Default::default()
        };
        Ok(config.validate()?)
    }

    fn election_max(&self) -> Duration {
        self.election_timeout * 2
    }

    /// How long a write (or a read-index round) may take before we answer "no quorum".
    fn commit_timeout(&self) -> Duration {
        (self.election_max() * 4).max(Duration::from_secs(5))
    }

    /// Adding a member waits for it to catch up with the log, which may take longer.
    fn membership_timeout(&self) -> Duration {
        self.commit_timeout() * 4
    }
}

/// One proxy's Raft member. Cheap to clone.
#[derive(Clone)]
pub(crate) struct RaftNode {
    raft: Raft<TypeConfig>,
    inner: Arc<Inner>,
}

struct Inner {
    id: NodeId,
    me: RaftPeer,
    settings: RaftSettings,
    http: IntraClient,
    state: watch::Receiver<Arc<MetaState>>,
    /// Proposals run one at a time, each computed from the state the previous one left.
    propose: Mutex<()>,
    /// Membership changes run one at a time (openraft refuses overlapping ones).
    membership: Mutex<()>,
    /// Follower: until when its applied state counts as current — [`CREDENTIAL_LEASE`] after
    /// the start of its last linearizable read (see [`RaftNode::state_is_fresh`]).
    fresh_until: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long a follower trusts its state after a linearizable read *began* (its own monotonic
/// clock, which runs on while the process is paused), and how long a leader waits after a
/// change that takes rights away before acknowledging it: every read begun before the change
/// was committed has expired by then.
pub(crate) const CREDENTIAL_LEASE: std::time::Duration = std::time::Duration::from_millis(250);

fn unavailable(msg: impl Into<String>) -> ApiError {
    ApiError::unavailable(msg)
}

fn stopped(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("raft stopped: {e}"))
}

fn not_leader(hint: Option<(NodeId, Option<RaftPeer>)>) -> ApiError {
    match hint {
        Some((_, Some(p))) => unavailable(format!(
            "not the leader: proxy {} ({}) leads; retry there",
            p.daemon_id, p.url
        )),
        Some((id, None)) => unavailable(format!("not the leader: raft node {id} leads; retry")),
        None => unavailable("not the leader, and no leader is known (election under way): retry"),
    }
}

fn forward_hint(f: ForwardToLeader<NodeId, RaftPeer>) -> Option<(NodeId, Option<RaftPeer>)> {
    f.leader_id.map(|id| (id, f.leader_node))
}

impl RaftNode {
    /// Opens (or creates) `dir/raft.redb` and starts the member. An uninitialized member waits
    /// to be added by a leader (or for [`RaftNode::initialize_alone`]).
    pub(crate) async fn start(
        id: NodeId,
        me: RaftPeer,
        dir: &Path,
        settings: RaftSettings,
        http: IntraClient,
    ) -> anyhow::Result<RaftNode> {
        let config = Arc::new(settings.config()?);
        let dir = dir.to_owned();
        let (log, sm) = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)?;
            anyhow::Ok(store::open(&dir.join("raft.redb"))?)
        })
        .await??;
        let state = sm.subscribe();
        let raft = Raft::new(id, config, Network::new(http.clone()), log, sm).await?;
        tracing::info!(raft_id = id, daemon_id = %me.daemon_id, "raft member started");
        Ok(RaftNode {
            raft,
            inner: Arc::new(Inner {
                id,
                me,
                settings,
                http,
                state,
                propose: Mutex::new(()),
                membership: Mutex::new(()),
                fresh_until: std::sync::Mutex::new(None),
            }),
        })
    }

    pub(crate) fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    pub(crate) fn id(&self) -> NodeId {
        self.inner.id
    }

    fn metrics(&self) -> Metrics {
        self.raft.metrics().borrow().clone()
    }

    /// Whether this member has a membership (its own or one it received).
    pub(crate) async fn is_initialized(&self) -> Result<bool, ApiError> {
        self.raft.is_initialized().await.map_err(stopped)
    }

    /// Makes this member a group of one voter (it then elects itself). Nothing happens when it
    /// already has a membership.
    pub(crate) async fn initialize_alone(&self) -> Result<(), ApiError> {
        if self.is_initialized().await? {
            return Ok(());
        }
        let me = BTreeMap::from([(self.id(), self.inner.me.clone())]);
        match self.raft.initialize(me).await {
            Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(RaftError::APIError(e)) => Err(ApiError::internal(format!("initialize: {e}"))),
            Err(RaftError::Fatal(e)) => Err(stopped(e)),
        }
    }

    /// The applied state, updated after every applied batch (read it without waiting on Raft).
    pub(crate) fn state(&self) -> watch::Receiver<Arc<MetaState>> {
        self.inner.state.clone()
    }

    pub(crate) fn is_leader(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.id())
    }

    /// The leader as this member knows it, with its address when the membership has it.
    pub(crate) fn leader(&self) -> Option<(NodeId, RaftPeer)> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let id = m.current_leader?;
        let peer = m.membership_config.membership().get_node(&id)?.clone();
        Some((id, peer))
    }

    pub(crate) fn current_term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    fn leader_hint(&self) -> Option<(NodeId, Option<RaftPeer>)> {
        let m = self.metrics();
        let id = m.current_leader?;
        Some((id, m.membership_config.membership().get_node(&id).cloned()))
    }

    /// Proposes a change computed by `f` from the applied state (`None` = nothing to do).
    /// Leader only; proposals are serial, so `f` sees every earlier proposal applied. The
    /// command still carries its base versions: if the state moved anyway (a leader change in
    /// between), the reply is [`Outcome::Conflict`] and nothing changed.
    pub(crate) async fn propose<F>(&self, f: F) -> Result<MetaReply, ApiError>
    where
        F: FnOnce(&MetaState) -> Result<Option<MetaCmd>, ApiError> + Send,
    {
        let _serial = self.inner.propose.lock().await;
        if !self.is_leader() {
            return Err(not_leader(self.leader_hint()));
        }
        self.caught_up().await?;
        // Leadership may have moved while we waited.
        if !self.is_leader() {
            return Err(not_leader(self.leader_hint()));
        }
        if let Err(e) = self.check_quorum(&self.metrics()) {
            // Not acknowledged lately: one round of heartbeats decides.
            let t = self.inner.settings.election_max();
            match tokio::time::timeout(t, self.raft.ensure_linearizable()).await {
                Ok(Ok(_)) => {}
                _ => return Err(e),
            }
        }
        let state = self.inner.state.borrow().clone();
        let Some(cmd) = f(&state)? else {
            return Ok(state.reply(Outcome::Unchanged));
        };
        let resp = self.write(self.raft.client_write(cmd)).await?;
        Ok(resp.data)
    }

    /// Waits until this leader has applied an entry of its own term (its first is the blank
    /// entry every new leader commits), so everything committed before it is applied too.
    async fn caught_up(&self) -> Result<(), ApiError> {
        let term = self.current_term();
        let t = self.inner.settings.commit_timeout();
        let mut rx = self.inner.state.clone();
        let done = tokio::time::timeout(
            t,
            rx.wait_for(|s| s.last_applied.is_some_and(|l| l.leader_id.term >= term)),
        )
        .await
        .map(|r| r.is_ok());
        match done {
            Ok(true) => Ok(()),
            Ok(false) => Err(stopped("the state machine is gone")),
            Err(_) => Err(unavailable(format!(
                "no quorum: the new leader's state was not confirmed within {t:?}"
            ))),
        }
    }

    /// A leader of more than one voter that has not heard from a majority within the minimum
    /// election timeout may already have been replaced (a follower that stopped hearing from it
    /// may start an election after that long; openraft 0.9 leaders do not step down).
    fn check_quorum(&self, m: &Metrics) -> Result<(), ApiError> {
        if m.membership_config.membership().voter_ids().count() <= 1 {
            return Ok(());
        }
        let min = millis(self.inner.settings.election_timeout);
        match m.millis_since_quorum_ack {
            Some(ms) if ms < min => Ok(()),
            Some(ms) => Err(unavailable(format!(
                "no quorum: the leader has not heard from a majority of proxies for {ms} ms"
            ))),
            None => Err(unavailable(
                "no quorum: no majority of proxies has acknowledged this leader yet",
            )),
        }
    }

    /// Whether the applied state may be trusted with credentials without asking the leader:
    /// this member is the only voter, or leads and a majority acknowledged it within the
    /// minimum election timeout, or follows and began a linearizable read less than
    /// [`CREDENTIAL_LEASE`] ago (a paused or cut-off follower's lease runs out on its own
    /// clock).
    pub(crate) fn state_is_fresh(&self) -> bool {
        let m = self.metrics();
        if m.membership_config.membership().voter_ids().count() <= 1 {
            return true; // the only voter: its state is the only truth
        }
        if self.is_leader() {
            let lease = millis(self.inner.settings.election_timeout);
            return m.millis_since_quorum_ack.is_some_and(|ms| ms < lease);
        }
        self.inner
            .fresh_until
            .lock()
            .expect("fresh lock")
            .is_some_and(|until| std::time::Instant::now() < until)
    }

    /// Leader, after a change that takes rights away (a user removed, a token revoked): waits
    /// out [`CREDENTIAL_LEASE`], so no follower still trusts a read begun before the change.
    pub(crate) async fn wait_out_credential_leases(&self) {
        tokio::time::sleep(CREDENTIAL_LEASE).await;
    }

    /// A client write or membership change, bounded by the commit timeout.
    async fn write(
        &self,
        fut: impl Future<Output = WriteResult>,
    ) -> Result<ClientWriteResponse<TypeConfig>, ApiError> {
        self.write_within(self.inner.settings.commit_timeout(), fut)
            .await
    }

    async fn write_within(
        &self,
        t: Duration,
        fut: impl Future<Output = WriteResult>,
    ) -> Result<ClientWriteResponse<TypeConfig>, ApiError> {
        match tokio::time::timeout(t, fut).await {
            Err(_) => Err(unavailable(format!(
                "no quorum: change not confirmed within {t:?}; it may or may not take effect"
            ))),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(not_leader(forward_hint(f)))
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => Err(
                ApiError::new(ErrorKind::Conflict, format!("membership change: {e}")),
            ),
            Ok(Err(RaftError::Fatal(e))) => Err(stopped(e)),
        }
    }

    /// Returns once this member has applied everything committed before the call (a
    /// linearizable read point). 503 when that cannot be confirmed.
    pub(crate) async fn linearize(&self) -> Result<(), ApiError> {
        let t = self.inner.settings.commit_timeout();
        if !self.is_leader() {
            return self.read_via_leader(t).await;
        }
        match tokio::time::timeout(t, self.raft.ensure_linearizable()).await {
            Ok(Ok(_)) => Ok(()),
            Err(_) => Err(unavailable(format!(
                "no quorum: leadership not confirmed within {t:?}"
            ))),
            Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)))) => {
                Err(unavailable(format!("no quorum: {q}")))
            }
            // Lost the leadership meanwhile: read through the new leader.
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_)))) => {
                self.read_via_leader(t).await
            }
            Ok(Err(RaftError::Fatal(e))) => Err(stopped(e)),
        }
    }

    /// Follower read: the leader's read index, then wait until applied here. Its start opens a
    /// [`CREDENTIAL_LEASE`] (see [`RaftNode::state_is_fresh`]).
    async fn read_via_leader(&self, t: Duration) -> Result<(), ApiError> {
        let began = std::time::Instant::now();
        self.read_index_via_leader(t).await?;
        let mut until = self.inner.fresh_until.lock().expect("fresh lock");
        let lease_end = began + CREDENTIAL_LEASE;
        if until.is_none_or(|u| u < lease_end) {
            *until = Some(lease_end);
        }
        Ok(())
    }

    async fn read_index_via_leader(&self, t: Duration) -> Result<(), ApiError> {
        let Some((id, peer)) = self.leader() else {
            return Err(unavailable("no leader known (election under way): retry"));
        };
        if id == self.id() {
            return Err(unavailable("leadership changing: retry"));
        }
        let url = format!("{}/v1/raft/read-index", peer.url.trim_end_matches('/'));
        let what = format!("read index from the leader {}", peer.daemon_id);
        let resp = self
            .inner
            .http
            .get(&url)
            .timeout(t)
            .send()
            .await
            .map_err(|e| unavailable(format!("{what}: {e}")))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| unavailable(format!("{what}: {e}")))?;
        if !status.is_success() {
            return Err(ApiError::from_peer(status.as_u16(), &body, &what));
        }
        let ReadIndex { index } = serde_json::from_slice(&body)
            .map_err(|e| ApiError::internal(format!("{what}: undecodable answer: {e}")))?;
        // The metrics' applied index moves only after the state is published (see store).
        match self
            .raft
            .wait(Some(t))
            .applied_index_at_least(Some(index), "linearizable read")
            .await
        {
            Ok(_) => Ok(()),
            Err(WaitError::Timeout(..)) => Err(unavailable(format!(
                "not caught up with the leader's index {index} within {t:?}"
            ))),
            Err(WaitError::ShuttingDown) => Err(stopped("shutting down")),
        }
    }

    /// Adds a proxy as a voter (first as a learner, caught up, then promoted), or updates its
    /// URL if it is one already. Leader only.
    pub(crate) async fn add_proxy(&self, id: NodeId, peer: RaftPeer) -> Result<(), ApiError> {
        let _serial = self.inner.membership.lock().await;
        if !self.is_leader() {
            return Err(not_leader(self.leader_hint()));
        }
        let m = self.metrics();
        let membership = m.membership_config.membership();
        let known = membership.get_node(&id).cloned();
        let voter = membership.voter_ids().any(|v| v == id);
        let t = self.inner.settings.membership_timeout();
        if known.as_ref().is_some_and(|p| *p != peer) {
            // Same proxy, new address: `AddNodes` would keep the old one.
            let nodes = BTreeMap::from([(id, peer.clone())]);
            self.write_within(
                t,
                self.raft
                    .change_membership(ChangeMembers::SetNodes(nodes), false),
            )
            .await?;
        }
        if voter {
            return Ok(());
        }
        self.write_within(t, self.raft.add_learner(id, peer, true))
            .await?;
        let ids = BTreeSet::from([id]);
        self.write_within(
            t,
            self.raft
                .change_membership(ChangeMembers::AddVoterIds(ids), false),
        )
        .await?;
        Ok(())
    }

    /// Removes a proxy from the group (voter or learner); nothing if it is not a member.
    /// Leader only.
    pub(crate) async fn remove_proxy(&self, id: NodeId) -> Result<(), ApiError> {
        let _serial = self.inner.membership.lock().await;
        if !self.is_leader() {
            return Err(not_leader(self.leader_hint()));
        }
        let m = self.metrics();
        let membership = m.membership_config.membership();
        let ids = BTreeSet::from([id]);
        let change = if membership.voter_ids().any(|v| v == id) {
            ChangeMembers::RemoveVoters(ids)
        } else if membership.learner_ids().any(|l| l == id) {
            ChangeMembers::RemoveNodes(ids)
        } else {
            return Ok(());
        };
        let t = self.inner.settings.membership_timeout();
        self.write_within(t, self.raft.change_membership(change, false))
            .await?;
        Ok(())
    }

    /// Stops the member (its storage closes once openraft's tasks end).
    pub(crate) async fn shutdown(&self) -> anyhow::Result<()> {
        self.raft
            .shutdown()
            .await
            .map_err(|e| anyhow::anyhow!("raft shutdown: {e}"))
    }
}
