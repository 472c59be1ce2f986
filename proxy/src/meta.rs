//! The proxy's view of cluster metadata, and — on the Raft leader — the only place it changes.
//!
//! Cluster map, bucket metadata and the removed-node list live in the proxies' replicated log
//! (`crate::raft`). A change is computed on the leader from the applied state, proposed as a
//! compare-and-set entry, acknowledged once a majority of proxies has it durably and it is
//! applied, then published locally and pushed to the targets. Every proxy reads the state it
//! has applied from [`Proxy::smap`] / [`Proxy::bmd`] (a copy kept current by
//! [`Proxy::publish`], so hot paths never touch Raft).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use gristmill_core::smap::{self, ClusterMap, Node};
use gristmill_core::{ApiError, BucketMetadata, MetaSync};

use crate::ProxyConfig;
use crate::raft::{MetaCmd, Outcome, RaftNode, RaftPeer, raft_id};

/// How long a push to one node may take before it is reported and skipped.
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct Proxy {
    pub(crate) id: String,
    pub(crate) url: String,
    /// This proxy's member of the Raft group: the replicated metadata and who leads.
    pub(crate) raft: RaftNode,
    pub(crate) state_dir: std::path::PathBuf,
    /// The applied metadata, published from the Raft state ([`Proxy::publish`]).
    smap: RwLock<Arc<ClusterMap>>,
    bmd: RwLock<Arc<BucketMetadata>>,
    /// Log index of the published state (publishing is monotone).
    published: Mutex<u64>,
    /// When each node was last heard from (keepalive or join).
    pub(crate) last_heard: Mutex<HashMap<String, Instant>>,
    /// Requests to other nodes (signed with the cluster secret when auth is on).
    pub(crate) http: gristmill_node::auth::IntraClient,
    /// Keys derived from the cluster secret; `None` = auth off.
    pub(crate) auth: Option<Arc<gristmill_node::auth::Keys>>,
    /// Failure window: keepalive interval × retries (failure detection).
    pub(crate) window: Duration,
    /// How long a silent target stays suspect (restarting) before removal; zero: no suspects.
    pub(crate) suspect_grace: Duration,
    /// How long a restarting target may stay silent before removal.
    pub(crate) restart_grace: Duration,
    /// When each restarting target was first found silent (this process's view).
    pub(crate) silent_since: Mutex<HashMap<String, Instant>>,
    /// Nodes that sent a keepalive since they were made suspects (see
    /// `membership::clear_recovered_suspects`).
    pub(crate) heard_live: Mutex<std::collections::HashSet<String>>,
    /// Password of the first admin (auth on, new cluster), else generated.
    pub(crate) admin_password: Option<String>,
    /// The Raft term this proxy last took up its leader duties in (see `leader.rs`).
    pub(crate) led_term: std::sync::atomic::AtomicU64,
    /// Each target's rebalance-drop counter as last seen in a listing page (see `list.rs`).
    pub(crate) list_drops: Mutex<HashMap<String, u64>>,
    /// Version of the map that last changed the active targets (this process's view; at
    /// start, the current version), and of the map whose rebalance every target finished
    /// (see `jobs::watch_placement`).
    pub(crate) active_changed_at: std::sync::atomic::AtomicU64,
    pub(crate) placed: std::sync::atomic::AtomicU64,
    /// The dashboard overview's previous scrape of each node (see `ui.rs`).
    pub(crate) scrapes: crate::ui::Scrapes,
}

/// Which parts a change touched.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Changed {
    pub smap: bool,
    pub bmd: bool,
}

/// The map a proxy shows before any state is applied (a proxy still joining): version 0, no
/// targets, itself as the primary placeholder.
fn placeholder(id: &str, url: &str) -> ClusterMap {
    let mut m = ClusterMap::new(
        Node::new(id, smap::PROXY, url),
        String::new(),
        String::new(),
    );
    m.version = 0;
    m
}

impl Proxy {
    /// Starts this proxy's Raft member over `<state_dir>/raft` and the published view of its
    /// applied state. Nothing else runs yet (see `lib.rs::run`).
    pub(crate) async fn start(config: &ProxyConfig, url: String) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&config.state_dir)?;
        let id = gristmill_core::persist::load_or_create_node_id(&config.state_dir, "p")?;
        let http = config.serve.peer_client(
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30)),
            &id,
        )?;
        let me = RaftPeer {
            daemon_id: id.clone(),
            url: url.clone(),
        };
        let raft = RaftNode::start(
            raft_id(&id),
            me,
            &config.state_dir.join("raft"),
            config.raft,
            http.clone(),
        )
        .await?;
        let proxy = Self {
            smap: RwLock::new(Arc::new(placeholder(&id, &url))),
            bmd: RwLock::new(Arc::default()),
            published: Mutex::new(0),
            id,
            url,
            raft,
            state_dir: config.state_dir.clone(),
            last_heard: Mutex::new(HashMap::new()),
            window: config.keepalive_interval * config.keepalive_retries.max(1),
            suspect_grace: config.suspect_grace,
            restart_grace: config.restart_grace,
            silent_since: Mutex::new(HashMap::new()),
            heard_live: Mutex::new(Default::default()),
            admin_password: config.admin_password.clone(),
            led_term: Default::default(),
            http,
            auth: config.serve.auth.clone(),
            list_drops: Mutex::new(HashMap::new()),
            active_changed_at: Default::default(),
            placed: Default::default(),
            scrapes: Default::default(),
        };
        proxy.publish();
        Ok(proxy)
    }

    pub(crate) fn smap(&self) -> Arc<ClusterMap> {
        self.smap.read().expect("smap lock").clone()
    }

    pub(crate) fn bmd(&self) -> Arc<BucketMetadata> {
        self.bmd.read().expect("bmd lock").clone()
    }

    /// Whether `id` was removed by an administrator (refused on join and keepalive).
    pub(crate) fn is_removed(&self, id: &str) -> bool {
        self.raft.state().borrow().removed.contains(id)
    }

    /// The primary is the Raft leader.
    pub(crate) fn is_primary(&self) -> bool {
        self.raft.is_leader()
    }

    /// The leader's URL (empty while none is known).
    pub(crate) fn primary_url(&self) -> String {
        match self.raft.leader() {
            Some((_, peer)) => peer.url.trim_end_matches('/').to_owned(),
            None => String::new(),
        }
    }

    /// Copies the applied Raft state into the published view if it is newer than what is
    /// published (idempotent; called after each applied batch and after each change).
    pub(crate) fn publish(&self) {
        let state = self.raft.state().borrow().clone();
        let index = state.last_applied.map_or(0, |l| l.index);
        let mut published = self.published.lock().expect("published lock");
        if index <= *published && *published > 0 {
            return;
        }
        *published = index;
        if let Some(new) = &state.maps.smap {
            let old = self.smap();
            if new.proxy_si.daemon_id != old.proxy_si.daemon_id && old.version > 0 {
                tracing::info!(primary = %new.proxy_si.daemon_id, version = new.version, term = new.term, "new primary");
            }
            if state.active_changed_at > 0 {
                self.active_changed_at
                    .store(state.active_changed_at, std::sync::atomic::Ordering::SeqCst);
            } else {
                self.note_active_change(&old, new);
            }
            *self.smap.write().expect("smap lock") = Arc::new(new.clone());
        }
        if let Some(new) = &state.maps.bmd {
            *self.bmd.write().expect("bmd lock") = Arc::new(new.clone());
        }
    }

    /// Leader, after a change that takes rights away: waits until no other proxy can still
    /// judge credentials by state from before it (see `RaftNode::wait_out_credential_leases`).
    pub(crate) async fn wait_followers_applied(&self) {
        self.raft.wait_out_credential_leases().await;
    }

    /// Returns at once when this proxy's applied state is known to be current (a leader with
    /// a fresh quorum, a follower within its lease that applied what its leader committed),
    /// else after a linearizable read ([`Proxy::linearize`]): users and tokens are judged on
    /// current state — a paused or cut-off proxy never accepts a user removed meanwhile.
    pub(crate) async fn ensure_fresh(&self) -> Result<(), ApiError> {
        if self.raft.state_is_fresh() {
            return Ok(());
        }
        self.linearize().await
    }

    /// Returns once this proxy has applied (and published) every change acknowledged before
    /// the call, on any proxy: a linearizable read point. 503 without a quorum.
    pub(crate) async fn linearize(&self) -> Result<(), ApiError> {
        self.raft.linearize().await?;
        self.publish();
        Ok(())
    }

    /// Leader only: applies `edit` to copies of the applied metadata; whatever changed is
    /// committed through Raft (the answer waits for a majority of proxies), published and
    /// pushed to every target. `edit` returns which parts it changed.
    pub(crate) async fn change<F>(&self, edit: F) -> Result<MetaSync, ApiError>
    where
        F: FnOnce(&mut ClusterMap, &mut BucketMetadata) -> Result<Changed, ApiError> + Send,
    {
        self.change_all(|smap, bmd, _| edit(smap, bmd)).await
    }

    /// Like [`Proxy::change`], with the removed-node list too (a change of the list is a
    /// change of the map: its version moves, so the compare-and-set orders it).
    pub(crate) async fn change_all<F>(&self, edit: F) -> Result<MetaSync, ApiError>
    where
        F: FnOnce(
                &mut ClusterMap,
                &mut BucketMetadata,
                &mut BTreeSet<String>,
            ) -> Result<Changed, ApiError>
            + Send,
    {
        let mut sync = MetaSync::default();
        let term = self.raft.current_term();
        let (id, url) = (self.id.clone(), self.url.clone());
        let reply = self
            .raft
            .propose(|state| {
                let mut smap = state
                    .maps
                    .smap
                    .clone()
                    .unwrap_or_else(|| placeholder(&id, &url));
                let mut bmd = state.maps.bmd.clone().unwrap_or_default();
                let mut removed = state.removed.clone();
                let changed = edit(&mut smap, &mut bmd, &mut removed)?;
                let removed_changed = removed != state.removed;
                if !(changed.smap || changed.bmd || removed_changed) {
                    return Ok(None);
                }
                let mut cmd = MetaCmd {
                    base_smap: state.smap_version(),
                    base_bmd: state.bmd_version(),
                    ..Default::default()
                };
                if changed.smap || removed_changed {
                    smap.version += 1;
                    smap.term = smap.term.max(term);
                    cmd.smap = Some(smap);
                }
                if changed.bmd {
                    bmd.version += 1;
                    bmd.term = bmd.term.max(term);
                    cmd.bmd = Some(bmd);
                }
                if removed_changed {
                    cmd.removed = Some(removed);
                }
                sync.smap = cmd.smap.clone();
                sync.bmd = cmd.bmd.clone();
                Ok(Some(cmd))
            })
            .await?;
        match reply.outcome {
            Outcome::Conflict => {
                return Err(ApiError::unavailable(
                    "the metadata changed while this change was made (a new leader): retry",
                ));
            }
            Outcome::Unchanged => return Ok(sync),
            Outcome::Applied => {}
        }
        self.publish();
        self.push(&sync).await;
        Ok(sync)
    }

    /// Remembers the version of a map that changes the active targets (objects move).
    fn note_active_change(&self, old: &ClusterMap, new: &ClusterMap) {
        let active = ClusterMap::active_placement;
        if active(old) != active(new) {
            self.active_changed_at
                .store(new.version, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Primary only: adds a bucket with fresh properties to the bucket metadata. Returns
    /// `false` (and changes nothing) when it already exists.
    pub(crate) async fn add_bucket(&self, bck: &gristmill_core::Bck) -> Result<bool, ApiError> {
        self.add_bucket_with(bck, Default::default()).await
    }

    /// Like [`Self::add_bucket`], with initial properties (provider, creation time and id are
    /// filled in here).
    pub(crate) async fn add_bucket_with(
        &self,
        bck: &gristmill_core::Bck,
        base: gristmill_core::api::BucketProps,
    ) -> Result<bool, ApiError> {
        let mut added = false;
        self.change(|_, bmd| {
            if bmd.contains(bck) {
                return Ok(Changed::default());
            }
            let props = gristmill_core::api::BucketProps {
                provider: bck.provider.as_str().into(),
                created: now_ns(),
                bid: bmd.version + 1,
                ..base
            };
            let record = gristmill_core::BucketRecord {
                bck: bck.clone(),
                props,
            };
            bmd.buckets.insert(bck.uname(), record);
            added = true;
            Ok(Changed {
                smap: false,
                bmd: true,
            })
        })
        .await?;
        Ok(added)
    }

    /// Sends a committed metadata update to every target, concurrently; returns how many
    /// acknowledged. Failures are logged (a target catches up through its next keepalive).
    /// Proxies take their metadata from the Raft log, never from pushes. Every push carries
    /// the current map: a target orders what it is sent by (term, version) and learns who
    /// the primary is.
    pub(crate) async fn push(&self, sync: &MetaSync) -> usize {
        let smap = self.smap();
        let mut sync = sync.clone();
        if sync.smap.is_none() {
            sync.smap = Some(smap.as_ref().clone());
        }
        // Encoded once, not once per target: the map grows with the cluster, so per-target
        // encoding made a map change cost the primary O(targets²).
        let body = match serde_json::to_vec(&sync) {
            Ok(b) => bytes::Bytes::from(b),
            Err(e) => {
                tracing::error!(error = %e, "encoding a metadata push");
                return 0;
            }
        };
        let pushes = smap.tmap.values().map(|n| {
            let req = self
                .http
                .put(format!("{}/v1/metasync", n.url()))
                .timeout(PUSH_TIMEOUT)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send();
            async move {
                match req.await {
                    Ok(r) if r.status().is_success() => {
                        // A node that took the new version is alive (failure detection).
                        self.heard_from(&n.daemon_id);
                        true
                    }
                    Ok(r) => {
                        tracing::warn!(node = %n.daemon_id, status = %r.status(), "metadata push refused");
                        false
                    }
                    Err(e) => {
                        tracing::warn!(node = %n.daemon_id, error = %e, "metadata push failed");
                        false
                    }
                }
            }
        });
        futures::future::join_all(pushes)
            .await
            .into_iter()
            .filter(|ok| *ok)
            .count()
    }

    /// Everything newer than the versions a node reports, for keepalive replies (a node
    /// applies only what supersedes its own, so any other version is sent).
    pub(crate) fn newer_than(&self, smap_version: u64, bmd_version: u64) -> MetaSync {
        let smap = self.smap();
        let bmd = self.bmd();
        MetaSync {
            smap: (smap.version != smap_version).then(|| smap.as_ref().clone()),
            bmd: (bmd.version != bmd_version).then(|| bmd.as_ref().clone()),
        }
    }
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
