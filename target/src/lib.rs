//! `gristmill-target`: the storage node.
//!
//! A target owns one or more mountpaths ([`store`]): object bytes in hash-named files, metadata
//! in a crash-safe index per mountpath. It joins the cluster by registering with the primary
//! proxy ([`cluster::membership`]), receives every new cluster map and bucket metadata version,
//! and serves the object data path ([`api`]): GET/PUT/HEAD/DELETE of the objects HRW assigns to
//! it, and its share of every listing.
//!
//! Remote buckets (`s3://`, `ht://`) are caches of a [`backend`]: a cold GET streams one
//! download per object to every waiting client while it fills the local copy
//! ([`read::cold`]); PUT and DELETE write through to the backend first.
//!
//! Layers, each using only the ones below it (docs/architecture.md has the diagram; one
//! exception: rebalance and resilver run as jobs, so [`cluster`] uses the job registry's
//! `JobRun`):
//! - [`api`]: routes and handlers by area; nothing below imports from it.
//! - [`shards`] and [`jobs`]: reads inside archives, get-batch, reshard; every job kind.
//! - [`read`] and [`write`]: the one read path (local, verified, remote, past owner) and
//!   the write paths (owner PUT/DELETE, write-through); [`verify`] checks what reads serve.
//! - [`cluster`]: membership, placement while the map changes, rebalance, replicas.
//! - [`store`] and [`backend`]: mountpaths, index, records, space; remote storage.

mod api;
pub mod backend;
mod cluster;
mod jobs;
mod read;
mod s3;
mod shards;
pub mod store;
mod verify;
mod write;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use gristmill_core::smap::{self, ClusterMap, Node};
use gristmill_core::{BucketMetadata, MetaSync, persist};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use backend::BackendConfig;
pub use store::error::StoreError;

/// What a handler or a read/write path answers.
pub(crate) type ApiResult = Result<axum::response::Response, gristmill_core::ApiError>;
pub use gristmill_etl::EtlConfig;
pub use store::Store;
pub use store::StoreTuning;
pub use store::meta::ObjectMeta;
pub use store::space::{SharedSpaceConfig, SpaceConfig};

/// A target's placement weight (`gristmill_core::hrw::pick_weighted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// This weight (0: unset, the default every target has).
    Fixed(u32),
    /// The total size of the mountpaths in GiB (at least 1), measured at start.
    Capacity,
}

impl Weight {
    fn resolve(self, mountpaths: &[PathBuf]) -> u32 {
        match self {
            Weight::Fixed(w) => w,
            Weight::Capacity => {
                use std::os::unix::fs::MetadataExt;
                // Each filesystem once, however many mountpaths it holds.
                let mut seen = std::collections::HashSet::new();
                let mut bytes = 0u64;
                for m in mountpaths {
                    match std::fs::metadata(m)
                        .map(|md| md.dev())
                        .and_then(|dev| fs4::total_space(m).map(|total| (dev, total)))
                    {
                        Ok((dev, total)) => {
                            if seen.insert(dev) {
                                bytes += total;
                            }
                        }
                        Err(e) => {
                            tracing::warn!(mountpath = %m.display(), error = %e, "weight = capacity: cannot measure this mountpath; it counts for nothing")
                        }
                    }
                }
                let gib = u32::try_from(bytes >> 30).unwrap_or(u32::MAX).max(1);
                tracing::info!(weight = gib, "placement weight from capacity (GiB)");
                gib
            }
        }
    }
}

/// Runtime configuration of a target.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// Where the node keeps its id, cluster map and bucket metadata.
    pub state_dir: PathBuf,
    /// Data directories, one per disk.
    pub mountpaths: Vec<PathBuf>,
    /// URL other nodes and clients use to reach this target; derived from the listener when
    /// empty.
    pub public_url: String,
    /// URL of a proxy to register with (the primary, or any proxy that forwards to it).
    pub join_url: String,
    /// How often to send a keepalive to the primary.
    pub keepalive_interval: Duration,
    /// Remote backends (S3 endpoint and credentials, `ht://` policy, timeouts).
    pub backend: BackendConfig,
    /// Watermarks, quotas and out-of-space limits (changeable while the target runs).
    pub space: SharedSpaceConfig,
    /// Cache sizes of the store.
    pub store: StoreTuning,
    /// How long scrub keeps quarantined copies for inspection.
    pub quarantine_keep: Duration,
    /// This target's placement weight, stated in its map entry when it joins.
    pub weight: Weight,
    /// Most bytes per second a rebalance sends from this target (0: no limit).
    pub rebalance_bandwidth: u64,
    /// ETL workers: interpreter, sandbox, dependency environments.
    pub etl: gristmill_etl::EtlConfig,
    /// Limits, TLS and access control (auth off by default).
    pub serve: gristmill_node::conn::ServeOptions,
    /// S3 reads served on a port of this target's own (`[s3] listen`), see [`s3`].
    pub s3: Option<S3Config>,
}

pub use s3::S3Config;

/// Shared state of a running target.
pub(crate) struct Target {
    id: String,
    url: String,
    store: Arc<Store>,
    smap: RwLock<Arc<ClusterMap>>,
    bmd: RwLock<Arc<BucketMetadata>>,
    state_dir: PathBuf,
    join_url: String,
    /// Requests to other nodes (signed with the cluster secret when auth is on).
    http: gristmill_node::auth::IntraClient,
    /// Streams requests to other nodes: no overall timeout (objects can be large), no
    /// redirect following. Signed like `http`, except S3 requests relayed for a client.
    relay: gristmill_node::auth::IntraClient,
    /// Serializes applying metadata pushes (compare, persist, swap).
    apply_lock: tokio::sync::Mutex<()>,
    /// Backends of remote buckets, by provider.
    backends: backend::Backends,
    /// Cold-GET downloads in flight.
    fills: read::cold::Fills,
    /// Chunks of large remote objects read by range, not cached whole.
    partials: read::chunks::Partials,
    /// Out-of-space checks and LRU eviction.
    space: Arc<store::space::Space>,
    /// Jobs this target runs or ran.
    jobs: jobs::Jobs,
    /// ETL runtimes (started from the ETL definitions in the bucket metadata).
    etls: gristmill_etl::Etls,
    /// Age at which scrub deletes quarantined copies.
    quarantine_keep: Duration,
    rebalance_bandwidth: u64,
    /// Placement weight stated in this target's map entry (0: unset).
    weight: u32,
    /// Shard indexes, appends in progress and reshard sessions.
    shards: Arc<shards::State>,
    /// Recent earlier cluster maps (objects may still sit where they placed them).
    past: std::sync::Mutex<Vec<Arc<ClusterMap>>>,
    /// Rebalance drops so far: bumped before each moved copy is deleted, and sent with every
    /// listing page, so a proxy can tell that a page may have missed an object in flight
    /// between two targets (see `proxy/src/list.rs`).
    drops: std::sync::atomic::AtomicU64,
    /// Replica copies staged for owners' PUTs, not yet committed.
    stages: cluster::replicas::Stages,
    /// Writes in flight by the map they were admitted under (a rebalance walk waits for
    /// the ones admitted under earlier maps).
    gate: Arc<cluster::gate::WriteGate>,
    /// Whether this target is coming back — it started, or learnt that it was out of the map
    /// — and the primary has not yet confirmed that every object is placed by a map that has
    /// it again: until then what it holds may have been rewritten or deleted elsewhere, so
    /// placement counts as unsettled and its copies are checked before they are served
    /// ([`read::returning`]).
    returning: std::sync::atomic::AtomicBool,
    /// How long this target may act on its map without hearing from the primary (a target
    /// paused past the keepalive window may have been replaced meanwhile).
    lease: cluster::lease::MapLease,
    /// Multipart uploads taken over or completed now, one request at a time per upload.
    uploads: cluster::uploads::UploadLocks,
    /// Active targets the last rebalance was started for (None: none yet in this process).
    rebalanced_for: std::sync::Mutex<Option<Vec<String>>>,
    /// Held by the rebalance writing `rebalance.sent`: a superseded one may still be
    /// finishing its last batch when the next one starts the file over.
    rebalance_log: tokio::sync::Mutex<()>,
    /// This target, for starting jobs from `&self` contexts.
    me: std::sync::OnceLock<std::sync::Weak<Target>>,
}

impl Target {
    pub(crate) fn smap(&self) -> Arc<ClusterMap> {
        self.smap.read().expect("smap lock").clone()
    }

    pub(crate) fn bmd(&self) -> Arc<BucketMetadata> {
        self.bmd.read().expect("bmd lock").clone()
    }

    /// The backend of a remote bucket, configured by its properties.
    pub(crate) fn backend(
        &self,
        bck: &gristmill_core::Bck,
    ) -> Result<Arc<dyn backend::Backend>, gristmill_core::ApiError> {
        let bmd = self.bmd();
        self.backends
            .for_bucket(bck, bmd.get(bck).map(|r| &r.props))
    }

    /// Admits a write that will create a record here, under the current map (see
    /// [`cluster::gate`]).
    pub(crate) fn admit_write(&self) -> cluster::gate::Admission {
        self.gate.admit(|| self.smap())
    }

    /// Earlier cluster maps, oldest first.
    pub(crate) fn past_smaps(&self) -> Vec<Arc<ClusterMap>> {
        self.past.lock().expect("past lock").clone()
    }

    /// Whether every object is where the current map places it (the primary said so, and no
    /// map changed since): then only an object's owners hold it. Until then, a copy may sit on
    /// any target of the map.
    pub(crate) fn placement_settled(&self) -> bool {
        self.past.lock().expect("past lock").is_empty() && !self.is_returning()
    }

    /// Forgets the earlier cluster maps (every object is where the current one places it).
    pub(crate) fn forget_past_smaps(&self) -> Result<(), StoreError> {
        if self
            .smap()
            .tmap
            .get(&self.id)
            .is_some_and(|me| !me.is_restarting() && !me.is_inactive())
        {
            self.returned("every object is placed by the current map");
        }
        let mut past = self.past.lock().expect("past lock");
        if past.is_empty() {
            return Ok(());
        }
        past.clear();
        persist::save_json(&self.state_dir.join(PAST_SMAPS), &Vec::<ClusterMap>::new())?;
        tracing::info!(
            version = self.smap().version,
            "objects placed: earlier maps forgotten"
        );
        Ok(())
    }

    /// Starts a rebalance if the active targets differ from the ones the last rebalance ran
    /// for (or none ran yet in this process: after a restart it finishes an interrupted one).
    pub(crate) fn maybe_rebalance(&self) {
        let smap = self.smap();
        if smap.version == 0 || smap.node(&self.id).is_none() {
            return;
        }
        if smap.node(&self.id).is_some_and(|n| n.is_restarting()) {
            // This target is restarting (about to stop, or started before its re-join clears
            // the flag): what it holds stays here. Its next rebalance runs whatever the map.
            *self.rebalanced_for.lock().expect("rebalanced lock") = None;
            return;
        }
        let active = cluster::placement::placement_key(&smap);
        {
            let mut last = self.rebalanced_for.lock().expect("rebalanced lock");
            if last.as_ref() == Some(&active) {
                return;
            }
            // Targets that only went restarting: nothing moves (their objects stay with them,
            // writes meant for them are hinted elsewhere); the rebalance when they are back
            // (or removed, or put in maintenance) moves what that calls for.
            let only_restarting = last
                .as_ref()
                .is_some_and(|before| cluster::placement::only_went_restarting(before, &active));
            *last = Some(active);
            if only_restarting {
                tracing::info!(
                    version = smap.version,
                    "targets restarting: no rebalance, writes meant for them are hinted"
                );
                return;
            }
        }
        let why = format!("superseded by cluster map v{}", smap.version);
        self.jobs
            .abort_kind(gristmill_core::job::JobKind::Rebalance, &why);
        let Some(me) = self.me.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let spec = gristmill_core::job::JobSpec {
            id: format!("rb{}", smap.version),
            kind: gristmill_core::job::JobKind::Rebalance,
            bck: None,
            to_bck: None,
            selection: Default::default(),
            opts: Default::default(),
        };
        if let Err(e) = self.jobs.start(me, spec) {
            tracing::warn!(error = %e.message, "could not start rebalance");
        }
    }

    /// Notes that this target is coming back into the cluster (see [`Target::is_returning`]).
    pub(crate) fn set_returning(&self, why: &str) {
        if !self
            .returning
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            tracing::info!(
                why,
                "coming back: copies held here are checked before they are served until placement is confirmed"
            );
        }
    }

    /// Whether this target is coming back and has not yet been told that every object is
    /// placed: its copies are then unproven.
    pub(crate) fn is_returning(&self) -> bool {
        self.returning.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Back: placement is confirmed for a map that has this target (or it re-joined a map that
    /// did not change while it was away).
    pub(crate) fn returned(&self, why: &str) {
        if self
            .returning
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            tracing::info!(why, "back in the cluster: copies held here are current");
        }
    }

    pub(crate) fn node(&self) -> Node {
        Node {
            weight: self.weight,
            ..Node::new(&self.id, smap::TARGET, &self.url)
        }
    }

    /// Persists a newer cluster map, switches to it, remembers the one it replaces, and starts
    /// the rebalance it calls for.
    fn switch_smap(&self, new: ClusterMap) -> Result<(), StoreError> {
        persist::save_json(&self.state_dir.join("smap.json"), &new)?;
        tracing::info!(
            version = new.version,
            targets = new.tmap.len(),
            "new cluster map"
        );
        // Generations assigned from now on order after everything of earlier maps.
        self.store.set_epoch(new.version);
        let before = self.smap();
        let rejoined = new.tmap.get(&self.id).is_some_and(|me| {
            before.version > 0
                && (!before.tmap.contains_key(&self.id) || me.member_since > before.version)
        });
        if rejoined {
            // Out of the maps (or restarting) in between, even if this target never saw a map
            // without it (removed and added back between two of its keepalives, or a suspect
            // that was paused): its rebalance runs for this map whatever it last ran for, so
            // the primary can confirm placement.
            *self.rebalanced_for.lock().expect("rebalanced lock") = None;
            if holds_objects(&self.store) {
                self.set_returning("added back to the cluster map");
            }
        } else if new
            .tmap
            .get(&self.id)
            .is_some_and(|me| me.is_restarting() || me.is_inactive())
            && holds_objects(&self.store)
        {
            // Taken for silent (a suspect), restarting or in maintenance: writes and deletes
            // meant for this target land elsewhere from this map on, so what it holds is
            // unproven until placement is confirmed for a map where it is active again.
            self.set_returning("the cluster map routes this target's objects elsewhere");
        }
        let old = std::mem::replace(&mut *self.smap.write().expect("smap lock"), Arc::new(new));
        let past: Vec<ClusterMap> = {
            let mut past = self.past.lock().expect("past lock");
            cluster::placement::remember(&mut past, old);
            past.iter().map(|m| (**m).clone()).collect()
        };
        persist::save_json(&self.state_dir.join(PAST_SMAPS), &past)?;
        self.maybe_rebalance();
        Ok(())
    }

    /// Applies pushed metadata: each part only if newer; persists before switching to it.
    pub(crate) async fn apply_metasync(&self, sync: MetaSync) -> Result<(), StoreError> {
        let _guard = self.apply_lock.lock().await;
        if let Some(new) = sync.smap {
            if new.supersedes(&self.smap()) {
                self.switch_smap(new)?;
            } else {
                // A map that arrived after a newer one (pushes overtake each other): objects
                // may have moved by it before it was superseded, so while a rebalance is
                // unconfirmed it counts among the maps past owners are found by.
                let past: Option<Vec<ClusterMap>> = {
                    let mut past = self.past.lock().expect("past lock");
                    cluster::placement::remember_late(&mut past, &self.smap(), new)
                        .then(|| past.iter().map(|m| (**m).clone()).collect())
                };
                if let Some(past) = past {
                    persist::save_json(&self.state_dir.join(PAST_SMAPS), &past)?;
                }
            }
        }
        if let Some(new) = sync.bmd {
            let old = self.bmd();
            if new.supersedes(&old) {
                persist::save_json(&self.state_dir.join("bmd.json"), &new)?;
                tracing::info!(
                    version = new.version,
                    buckets = new.buckets.len(),
                    "new bucket metadata"
                );
                *self.bmd.write().expect("bmd lock") = Arc::new(new.clone());
                self.etls.apply(&new.etls);
                for (uname, rec) in &old.buckets {
                    if !new.buckets.contains_key(uname) {
                        self.partials.remove_bucket(&rec.bck);
                        let dropped = self.store.drop_bucket(&rec.bck).await?;
                        tracing::info!(bucket = %rec.bck, dropped, "bucket destroyed");
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether the store holds any object (a target with none has nothing that can be stale).
fn holds_objects(store: &Store) -> bool {
    store.usage().values().any(|bytes| *bytes > 0) || store.object_counts().values().any(|n| *n > 0)
}

/// The recent earlier cluster maps, in the state dir.
const PAST_SMAPS: &str = "past_smaps.json";

/// How long a tombstone outlives its delete: longer than any rebalance or replica write that
/// could still carry an older copy of the object.
const TOMBSTONE_KEEP: Duration = Duration::from_secs(24 * 3600);

/// Forgets tombstones older than [`TOMBSTONE_KEEP`] and the answers of multipart uploads
/// completed over an hour ago, hourly.
struct TombstonePurge(Arc<Store>);

impl gristmill_node::worker::Worker for TombstonePurge {
    fn name(&self) -> &'static str {
        "tombstone purge"
    }

    fn period(&self) -> Duration {
        Duration::from_secs(3600)
    }

    async fn round(&self) {
        match self.0.purge_tombstones(TOMBSTONE_KEEP).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(purged = n, "old tombstones purged"),
            Err(e) => tracing::warn!(error = %e, "tombstone purge failed"),
        }
        self.0.mpu_forget_completed().await;
    }
}

impl Target {
    /// Opens a target from its configuration (state dir, mountpaths), reachable at `url`: its
    /// id, store, saved map and bucket metadata, clients and in-memory state. Nothing is
    /// started (no listener, no membership, no workers): [`run`] does that.
    pub(crate) async fn open(config: &TargetConfig, url: String) -> anyhow::Result<Arc<Target>> {
        let id = persist::load_or_create_node_id(&config.state_dir, "t")?;
        let store = Store::open_with_state(
            &config.mountpaths,
            Some(&config.state_dir.join("mountpaths.json")),
            config.store.clone(),
        )
        .await?;
        let space = Arc::new(store::space::Space::new(
            config.space.clone(),
            store.clone(),
        ));
        let smap: Option<ClusterMap> = persist::load_json(&config.state_dir.join("smap.json"))?;
        let bmd: Option<BucketMetadata> = persist::load_json(&config.state_dir.join("bmd.json"))?;
        let placeholder =
            ClusterMap::new(Node::new("", smap::PROXY, ""), String::new(), String::new());
        let mut placeholder = placeholder;
        placeholder.version = 0;
        store.set_epoch(smap.as_ref().map_or(0, |m| m.version));
        let holds_objects = holds_objects(&store);
        let target = Arc::new(Target {
            id: id.clone(),
            url: url.clone(),
            store,
            smap: RwLock::new(Arc::new(smap.unwrap_or(placeholder))),
            bmd: RwLock::new(Arc::new(bmd.unwrap_or_default())),
            state_dir: config.state_dir.clone(),
            join_url: config.join_url.trim_end_matches('/').to_owned(),
            http: config.serve.peer_client(
                reqwest::Client::builder()
                    .tcp_nodelay(true)
                    .timeout(Duration::from_secs(30)),
                &id,
            )?,
            relay: config.serve.peer_client(
                reqwest::Client::builder()
                    .tcp_nodelay(true)
                    .redirect(reqwest::redirect::Policy::none()),
                &id,
            )?,
            apply_lock: tokio::sync::Mutex::new(()),
            backends: backend::Backends::new(&config.backend)?,
            fills: read::cold::Fills::default(),
            partials: read::chunks::Partials::default(),
            space: space.clone(),
            jobs: jobs::Jobs::default(),
            etls: gristmill_etl::Etls::new(gristmill_etl::EtlConfig {
                // No worker may be granted a path that holds the data or the node's state.
                protected: [
                    config.mountpaths.as_slice(),
                    std::slice::from_ref(&config.state_dir),
                ]
                .concat(),
                // This target's own (two targets of one machine share no scratch files).
                scratch_dir: config.etl.scratch_dir.as_ref().map(|root| {
                    let id =
                        xxhash_rust::xxh3::xxh3_64(config.state_dir.to_string_lossy().as_bytes());
                    root.join(format!("gristmill-etl-scratch-{id:016x}"))
                }),
                ..config.etl.clone()
            }),
            quarantine_keep: config.quarantine_keep,
            rebalance_bandwidth: config.rebalance_bandwidth,
            weight: config.weight.resolve(&config.mountpaths),
            shards: Arc::default(),
            // Persisted: a target restarted mid-rebalance still knows where objects may sit (a
            // DELETE must reach them, a GET may be served from them).
            past: std::sync::Mutex::new(
                persist::load_json::<Vec<ClusterMap>>(&config.state_dir.join(PAST_SMAPS))
                    .unwrap_or_default()
                    .unwrap_or_default()
                    .into_iter()
                    .map(Arc::new)
                    .collect(),
            ),
            drops: Default::default(),
            stages: Default::default(),
            gate: Default::default(),
            rebalanced_for: Default::default(),
            rebalance_log: Default::default(),
            // Until its first join says otherwise, a target that starts with data may have
            // been out while it was rewritten or deleted elsewhere.
            returning: std::sync::atomic::AtomicBool::new(holds_objects),
            lease: cluster::lease::MapLease::new(config.keepalive_interval),
            uploads: Default::default(),
            me: Default::default(),
        });
        let _ = target.me.set(Arc::downgrade(&target));
        Ok(target)
    }
}

/// Runs a target on `listener` until `shutdown` fires.
pub async fn run(
    config: TargetConfig,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // Install the metrics recorder before anything records.
    gristmill_node::server::metrics_handle();
    std::fs::create_dir_all(&config.state_dir)?;
    let mut config = config;
    let ip = listener.local_addr()?.ip();
    if ip.is_loopback() && ip != std::net::IpAddr::from([127, 0, 0, 1]) {
        // Listening on a loopback alias (127.a.b.c, e.g. several nodes on one machine cut
        // apart by address rules): requests to peers leave from it, not from 127.0.0.1. (Other
        // addresses are left to the kernel: a specific interface address is chosen by the
        // route anyway, and binding every outgoing socket costs ephemeral ports.)
        config.serve.source_ip = Some(ip);
    }
    let url = if config.public_url.is_empty() {
        let scheme = if config.serve.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", listener.local_addr()?)
    } else {
        config.public_url.trim_end_matches('/').to_owned()
    };
    let target = Target::open(&config, url.clone()).await?;
    let id = target.id.clone();
    let space = target.space.clone();
    gristmill_node::metrics::node_info("target", &id);
    {
        let jobs = Arc::downgrade(&target);
        gristmill_node::metrics::on_scrape(move || {
            if let Some(t) = jobs.upgrade() {
                t.jobs.report_progress();
            }
        });
    }
    target.etls.apply(&target.bmd().etls);
    if target.store.resilver_pending() {
        // A mountpath change not fully resilvered before the restart (or a new --mountpath).
        cluster::resilver::start(&target, "restarted");
    }
    tracing::info!(node = %id, %url, mountpaths = config.mountpaths.len(), "target starting");

    let members = tokio::spawn(cluster::membership::run(
        target.clone(),
        config.keepalive_interval,
        shutdown.clone(),
    ));
    use gristmill_node::worker::spawn as spawn_worker;
    spawn_worker(
        Arc::new(CapacityReport(target.store.clone())),
        shutdown.clone(),
    );
    spawn_worker(
        Arc::new(TombstonePurge(target.store.clone())),
        shutdown.clone(),
    );
    let bmd_source = target.clone();
    spawn_worker(
        Arc::new(store::space::LruWorker {
            space,
            bmd: move || bmd_source.bmd(),
        }),
        shutdown.clone(),
    );
    let mut app = api::router(target.clone());
    if let Some(keys) = config.serve.auth.clone() {
        let t = target.clone();
        app = gristmill_node::auth::Gate::new(
            keys,
            gristmill_node::auth::TARGET_ROUTES,
            Arc::new(move || t.bmd()),
        )
        .protect(app);
    }
    if let Some(tls) = &config.serve.tls {
        tls.reload_on_sighup(shutdown.clone());
    }
    let s3_port = match &config.s3 {
        Some(s3_config) => {
            let s3_listener = tokio::net::TcpListener::bind(&s3_config.listen)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", s3_config.listen))?;
            tracing::info!(node = %id, listen = %s3_config.listen, "serving S3 reads");
            let reads = s3::S3Reads::new(s3_config, config.serve.auth.clone());
            Some(tokio::spawn(gristmill_node::server::serve_with(
                s3_listener,
                s3::router(target.clone(), reads),
                shutdown.clone(),
                config.serve.clone(),
            )))
        }
        None => None,
    };
    gristmill_node::server::serve_with(listener, app, shutdown.clone(), config.serve.clone())
        .await?;
    if let Some(s3_port) = s3_port {
        let _ = s3_port.await;
    }
    shutdown.cancel();
    let _ = members.await;
    tracing::info!(node = %id, "target stopped");
    Ok(())
}

/// Publishes each mountpath's capacity, free space and device busy time every 10 s.
struct CapacityReport(Arc<Store>);

impl gristmill_node::worker::Worker for CapacityReport {
    fn name(&self) -> &'static str {
        "capacity report"
    }

    fn period(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn runs_at_start(&self) -> bool {
        true
    }

    async fn round(&self) {
        let store2 = self.0.clone();
        let stats = tokio::task::spawn_blocking(move || {
            store2
                .mountpaths()
                .iter()
                .filter_map(|m| {
                    let total = fs4::total_space(&m.path).ok()?;
                    let avail = fs4::available_space(&m.path).ok()?;
                    let busy = device_busy_ms(&m.path);
                    Some((m.path.display().to_string(), total, avail, busy))
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (path, total, avail, busy) in stats {
            metrics::gauge!("grist_mountpath_capacity_bytes", "mountpath" => path.clone())
                .set(total as f64);
            metrics::gauge!("grist_mountpath_available_bytes", "mountpath" => path.clone())
                .set(avail as f64);
            if let Some(ms) = busy {
                metrics::counter!("grist_mountpath_io_time_seconds_total", "mountpath" => path)
                    .absolute(ms / 1000);
            }
        }
    }
}

/// Milliseconds the block device under `path` has been busy (`io_ticks` in its sysfs `stat`);
/// `None` without a block device (tmpfs, overlay).
fn device_busy_ms(path: &std::path::Path) -> Option<u64> {
    let dev = rustix::fs::stat(path).ok()?.st_dev;
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    if major == 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    stat.split_whitespace().nth(9)?.parse().ok()
}
