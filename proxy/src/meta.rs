//! The proxy's view of cluster metadata, and — on the primary — the only place it changes.
//!
//! A change clones the current cluster map and bucket metadata, edits the copy, bumps the
//! version of each part that changed, persists it (crash-safe), publishes it locally and pushes
//! it to every node. The caller's request is answered only after the push, so a bucket that
//! `create` returned is known to every target.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use gristmill_core::smap::{self, ClusterMap, Node};
use gristmill_core::{ApiError, BucketMetadata, ErrorKind, MetaSync, persist};

use crate::ProxyConfig;

/// How long a push to one node may take before it is reported and skipped.
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct Proxy {
    pub(crate) id: String,
    pub(crate) url: String,
    state_dir: std::path::PathBuf,
    smap: RwLock<Arc<ClusterMap>>,
    bmd: RwLock<Arc<BucketMetadata>>,
    /// Serializes metadata changes on the primary (and applies of pushes elsewhere).
    change_lock: tokio::sync::Mutex<()>,
    /// When each node was last heard from (keepalive or join).
    pub(crate) last_heard: Mutex<HashMap<String, Instant>>,
    /// Nodes an administrator removed (`remove-node`, finished `decommission-node`): their
    /// keepalives and joins are refused until `join-node` adds them back. Persisted.
    pub(crate) removed: crate::membership::Removed,
    /// Requests to other nodes (signed with the cluster secret when auth is on).
    pub(crate) http: gristmill_node::auth::IntraClient,
    /// Keys derived from the cluster secret; `None` = auth off.
    pub(crate) auth: Option<Arc<gristmill_node::auth::Keys>>,
    /// When this proxy started (failure detection waits a window after it).
    pub(crate) started: Instant,
    /// Failure window: keepalive interval × retries (failure detection, elections, quorum).
    pub(crate) window: Duration,
    /// The last vote this proxy cast (persisted): one candidate per term.
    pub(crate) vote: Mutex<gristmill_core::election::VoteRecord>,
    /// Each target's rebalance-drop counter as last seen in a listing page (see `list.rs`).
    pub(crate) list_drops: Mutex<HashMap<String, u64>>,
    /// Version of the map that last changed the active targets (this process's view; at
    /// start, the current version), and of the map whose rebalance every target finished
    /// (see `jobs::watch_placement`).
    pub(crate) active_changed_at: std::sync::atomic::AtomicU64,
    pub(crate) placed: std::sync::atomic::AtomicU64,
}

/// Which parts a change touched.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Changed {
    pub smap: bool,
    pub bmd: bool,
}

impl Proxy {
    /// Loads persisted metadata (or starts a new cluster when this proxy is to be primary).
    pub(crate) fn load(config: &ProxyConfig, url: String) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&config.state_dir)?;
        let id = persist::load_or_create_node_id(&config.state_dir, "p")?;
        let me = Node::new(&id, smap::PROXY, &url);
        let saved: Option<ClusterMap> = persist::load_json(&config.state_dir.join("smap.json"))?;
        let bmd: BucketMetadata =
            persist::load_json(&config.state_dir.join("bmd.json"))?.unwrap_or_default();
        let be_primary = config.join_url.is_empty();
        let smap = match saved {
            // Several proxies and another one is primary (elected while this one was away):
            // never take over on a stale map; the startup check and the join follow the
            // cluster's current primary.
            Some(m) if m.pmap.len() > 1 && !m.is_primary(&id) => m,
            Some(mut m) => {
                let stale = m.pmap.get(&id) != Some(&me) || (be_primary && !m.is_primary(&id));
                if stale && (be_primary || m.is_primary(&id)) {
                    m.pmap.insert(id.clone(), me.clone());
                    if be_primary {
                        m.proxy_si = me.clone();
                    }
                    m.version += 1;
                }
                m
            }
            None if be_primary => ClusterMap::new(
                me,
                uuid::Uuid::new_v4().simple().to_string(),
                gristmill_core::time::rfc3339_from_ns(now_ns()),
            ),
            None => {
                let mut m = ClusterMap::new(me, String::new(), String::new());
                m.version = 0; // placeholder until the primary's map arrives
                m
            }
        };
        let bmd = if be_primary && bmd.uuid.is_empty() {
            BucketMetadata {
                uuid: smap.uuid.clone(),
                ..bmd
            }
        } else {
            bmd
        };
        if smap.is_primary(&id) {
            persist::save_json(&config.state_dir.join("smap.json"), &smap)?;
            persist::save_json(&config.state_dir.join("bmd.json"), &bmd)?;
        }
        let http = config.serve.peer_client(
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30)),
            &id,
        )?;
        Ok(Self {
            id,
            url,
            state_dir: config.state_dir.clone(),
            smap: RwLock::new(Arc::new(smap)),
            bmd: RwLock::new(Arc::new(bmd)),
            change_lock: tokio::sync::Mutex::new(()),
            last_heard: Mutex::new(HashMap::new()),
            removed: crate::membership::Removed::load(&config.state_dir),
            started: Instant::now(),
            window: config.keepalive_interval * config.keepalive_retries.max(1),
            vote: Mutex::new(
                persist::load_json(&config.state_dir.join("vote.json"))?.unwrap_or_default(),
            ),
            http,
            auth: config.serve.auth.clone(),
            list_drops: Mutex::new(HashMap::new()),
            active_changed_at: Default::default(),
            placed: Default::default(),
        })
    }

    pub(crate) fn smap(&self) -> Arc<ClusterMap> {
        self.smap.read().expect("smap lock").clone()
    }

    pub(crate) fn bmd(&self) -> Arc<BucketMetadata> {
        self.bmd.read().expect("bmd lock").clone()
    }

    pub(crate) fn is_primary(&self) -> bool {
        self.smap().is_primary(&self.id)
    }

    pub(crate) fn primary_url(&self) -> String {
        self.smap().proxy_si.url().to_owned()
    }

    /// Primary only: applies `edit` to copies of the metadata, then persists, publishes and
    /// pushes whatever changed. `edit` returns which parts it changed.
    pub(crate) async fn change<F>(&self, edit: F) -> Result<MetaSync, ApiError>
    where
        F: FnOnce(&mut ClusterMap, &mut BucketMetadata) -> Result<Changed, ApiError>,
    {
        let _guard = self.change_lock.lock().await;
        if !self.is_primary() {
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                "metadata changes go to the primary proxy",
            ));
        }
        let mut smap = self.smap().as_ref().clone();
        let mut bmd = self.bmd().as_ref().clone();
        let changed = edit(&mut smap, &mut bmd)?;
        // Several proxies: the majority rule (one proxy alone cannot be outvoted).
        let guarded = self.smap().pmap.len() > 1 || smap.pmap.len() > 1;
        if guarded && (changed.smap || changed.bmd) {
            self.check_quorum()?;
        }
        let mut sync = MetaSync::default();
        if changed.smap {
            smap.version += 1;
            self.note_active_change(&self.smap(), &smap);
            persist::save_json(&self.state_dir.join("smap.json"), &smap)
                .map_err(|e| ApiError::internal(format!("persisting cluster map: {e}")))?;
            *self.smap.write().expect("smap lock") = Arc::new(smap.clone());
            sync.smap = Some(smap);
        }
        if changed.bmd {
            bmd.version += 1;
            persist::save_json(&self.state_dir.join("bmd.json"), &bmd)
                .map_err(|e| ApiError::internal(format!("persisting bucket metadata: {e}")))?;
            *self.bmd.write().expect("bmd lock") = Arc::new(bmd.clone());
            sync.bmd = Some(bmd);
        }
        if changed.smap || changed.bmd {
            let acks = self.push(&sync).await;
            let smap = self.smap();
            if guarded && acks + 1 < smap.majority() {
                return Err(ApiError::unavailable(format!(
                    "no quorum: cluster map v{} acknowledged by {} of {} nodes (a majority is {})",
                    smap.version,
                    acks + 1,
                    smap.node_count(),
                    smap.majority()
                )));
            }
        }
        Ok(sync)
    }

    /// Remembers the version of a map that changes the active targets (objects move).
    fn note_active_change(&self, old: &ClusterMap, new: &ClusterMap) {
        let active = |m: &ClusterMap| -> Vec<String> {
            m.active_targets().map(|n| n.daemon_id.clone()).collect()
        };
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

    /// Nodes of the map heard from within the failure window, this proxy included.
    pub(crate) fn heard_count(&self) -> usize {
        let smap = self.smap();
        let heard = self.last_heard.lock().expect("last_heard lock");
        1 + smap
            .tmap
            .keys()
            .chain(smap.pmap.keys())
            .filter(|id| **id != self.id)
            .filter(|id| heard.get(*id).is_some_and(|t| t.elapsed() <= self.window))
            .count()
    }

    /// The majority rule: a primary changes metadata only while it has heard from a strict
    /// majority of the map's nodes within the failure window.
    pub(crate) fn check_quorum(&self) -> Result<(), ApiError> {
        let smap = self.smap();
        let heard = self.heard_count();
        if heard < smap.majority() {
            return Err(ApiError::unavailable(format!(
                "no quorum: the primary heard from {heard} of {} nodes within {:?} (a majority is {}); metadata changes refused",
                smap.node_count(),
                self.window,
                smap.majority()
            )));
        }
        Ok(())
    }

    /// Sends a metadata update (always with the current cluster map, so receivers can check
    /// that it comes from the primary of a map at least as new as theirs) to every other node,
    /// concurrently; returns how many acknowledged. Failures are logged (the node catches up
    /// through its next keepalive).
    pub(crate) async fn push(&self, sync: &MetaSync) -> usize {
        let smap = self.smap();
        // With one proxy there is no other primary to tell apart: pushes stay as they were.
        let several = smap.pmap.len() > 1;
        let mut sync = sync.clone();
        if several && sync.smap.is_none() {
            sync.smap = Some(smap.as_ref().clone());
        }
        let sync = &sync;
        let nodes: Vec<Node> = smap
            .tmap
            .values()
            .chain(smap.pmap.values())
            .filter(|n| n.daemon_id != self.id)
            .cloned()
            .collect();
        let pushes = nodes.iter().map(|n| {
            let req = self
                .http
                .put(if several {
                    format!(
                        "{}/v1/metasync?{}={}",
                        n.url(),
                        gristmill_core::election::PUSH_FROM,
                        self.id
                    )
                } else {
                    format!("{}/v1/metasync", n.url())
                })
                .timeout(PUSH_TIMEOUT)
                .json(sync)
                .send();
            async move {
                match req.await {
                    Ok(r) if r.status().is_success() => {
                        // A node that took the new version is alive (quorum, detection).
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

    pub(crate) fn state_dir(&self) -> &std::path::Path {
        &self.state_dir
    }

    /// Persists and publishes `smap` and `bmd` as this proxy's metadata (an election's
    /// result).
    pub(crate) async fn install(
        &self,
        smap: ClusterMap,
        bmd: BucketMetadata,
    ) -> Result<(), ApiError> {
        let _guard = self.change_lock.lock().await;
        persist::save_json(&self.state_dir.join("smap.json"), &smap)
            .map_err(|e| ApiError::internal(format!("persisting cluster map: {e}")))?;
        persist::save_json(&self.state_dir.join("bmd.json"), &bmd)
            .map_err(|e| ApiError::internal(format!("persisting bucket metadata: {e}")))?;
        *self.smap.write().expect("smap lock") = Arc::new(smap);
        *self.bmd.write().expect("bmd lock") = Arc::new(bmd);
        Ok(())
    }

    /// Non-primary: applies metadata pushed by the primary, each part only if newer.
    pub(crate) async fn apply(&self, sync: MetaSync) -> Result<(), ApiError> {
        let _guard = self.change_lock.lock().await;
        let persist_err =
            |e: std::io::Error| ApiError::internal(format!("persisting metadata: {e}"));
        if let Some(new) = sync.smap
            && new.supersedes(&self.smap())
        {
            if new.proxy_si.daemon_id != self.smap().proxy_si.daemon_id {
                tracing::info!(primary = %new.proxy_si.daemon_id, version = new.version, term = new.term, "new primary");
            }
            persist::save_json(&self.state_dir.join("smap.json"), &new).map_err(persist_err)?;
            self.note_active_change(&self.smap(), &new);
            *self.smap.write().expect("smap lock") = Arc::new(new);
        }
        if let Some(new) = sync.bmd
            && new.supersedes(&self.bmd())
        {
            persist::save_json(&self.state_dir.join("bmd.json"), &new).map_err(persist_err)?;
            *self.bmd.write().expect("bmd lock") = Arc::new(new);
        }
        Ok(())
    }

    /// Everything newer than the versions a node reports, for keepalive replies.
    pub(crate) fn newer_than(&self, smap_version: u64, bmd_version: u64) -> MetaSync {
        let smap = self.smap();
        let bmd = self.bmd();
        let several = smap.pmap.len() > 1;
        MetaSync {
            // Several proxies: any other version (the node applies it only if it supersedes its
            // own: a map of a newer term can have a lower version).
            smap: (smap.version > smap_version || (several && smap.version != smap_version))
                .then(|| smap.as_ref().clone()),
            bmd: (bmd.version > bmd_version || (several && bmd.version != bmd_version))
                .then(|| bmd.as_ref().clone()),
        }
    }
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
