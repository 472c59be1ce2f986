//! Reshard (AIStore's dsort): re-pack the samples of many input shards into new shards of a
//! target size, every sample exactly once and never split, in a chosen order.
//!
//! All targets take part; one of them (the *coordinator*, picked by the proxy by HRW of the job
//! id) also orders and assigns. Phases:
//!
//! 1. **Records.** Each target reads the member lists of the input shards it owns (a tar's
//!    index, another format's member list — no member data is read) and groups members into
//!    WebDataset samples: one *record* per sample (key, source shard, position, files and
//!    sizes). It sends its records to the coordinator in batches.
//! 2. **Order and assign.** Once every target has reported, the coordinator orders the
//!    records: by key (`alphanumeric`, optionally decreasing), by a seeded hash of the key
//!    (`shuffle`: the same seed gives the same order whatever the arrival order), in input
//!    order (`none`), or grouped by an external key → shard map. Past `max_mem_records` the
//!    records are sorted in runs spilled to disk and merged, so memory stays bounded. Walking
//!    the order it cuts output shards at the target size (a shard closes at the first sample
//!    that reaches it) and sends each shard's record list to the target that owns the shard's
//!    name — one plan at a time per target through a bounded queue, so plans never pile up.
//! 3. **Build.** Each target builds the shards assigned to it like a get-batch: the files of
//!    each sample come from the owners of their source shards as part streams (ranges found
//!    through the source shards' indexes), written in plan order into the new shard, which
//!    is stored with an ordinary PUT (atomic). Entries keep their member names and get mtime
//!    0, so the same input and order give byte-identical shards.
//!
//! Progress (the job's counters on each target): input shards read plus output shards
//! written (`objects`), bytes written; the total grows once the target knows its assignment.
//! Any target's failure (a malformed input shard) aborts the job everywhere.
use super::batch::{self, Assembly, Item, Outcome};
use super::catalog::{self, Catalog};
use super::io;
use crate::Target;
use crate::jobs::JobRun;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gristmill_core::shards::{DEFAULT_MAX_MEM_RECORDS, ReshardSpec};
use gristmill_core::{ApiError, Bck, ErrorKind};
use gristmill_shard::{Format, SampleData, group_samples};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use xxhash_rust::xxh64::xxh64;
mod coordinate;
pub(crate) use coordinate::coordinate;
#[cfg(test)]
mod tests;

/// Records sent to the coordinator per request.
const RECORD_BATCH: usize = 5000;

/// How long the coordinator waits for every target's records, and a target for its plans.
const PHASE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Plans queued per target (each holds one output shard's record list).
const PLAN_QUEUE: usize = 2;

/// One sample of an input shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// WebDataset key.
    key: String,
    /// Input shard holding it.
    shard: String,
    /// Its position among the shard's samples (input order).
    pos: u64,
    /// Member names and sizes, in archive order.
    files: Vec<(String, u64)>,
    size: u64,
}

impl Record {
    /// Bytes the sample takes in a tar: a header block per file plus its data padded to 512
    /// (output shards are cut by this, so they come out close to the target size).
    fn archived_size(&self) -> u64 {
        self.files
            .iter()
            .map(|(_, s)| 512 + s.div_ceil(512) * 512)
            .sum()
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct RecordsMsg {
    from: String,
    #[serde(default)]
    records: Vec<Record>,
    #[serde(default)]
    last: bool,
    #[serde(default)]
    error: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PlanMsg {
    /// Build this shard from these samples, in order.
    Shard { name: String, records: Vec<Record> },
    /// No more shards for you; you were sent this many.
    Done { shards: u64 },
    /// Stop: the job failed elsewhere.
    Abort { reason: String },
}

/// The sort key of a record under the job's algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SortKey {
    /// External key map: the output shard (records are grouped by it first).
    group: String,
    /// Shuffle: seeded hash of the key.
    hash: u64,
    /// Alphanumeric: the key (empty for `none`).
    key: String,
    desc: bool,
    shard: String,
    pos: u64,
}

impl Ord for SortKey {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        self.group
            .cmp(&o.group)
            .then(self.hash.cmp(&o.hash))
            .then_with(|| {
                if self.desc {
                    o.key.cmp(&self.key)
                } else {
                    self.key.cmp(&o.key)
                }
            })
            .then_with(|| self.shard.cmp(&o.shard))
            .then(self.pos.cmp(&o.pos))
    }
}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}

/// How records are ordered, from the spec.
struct Orderer {
    kind: String,
    desc: bool,
    seed: u64,
    /// Key → output shard (external key map).
    ekm: HashMap<String, String>,
    ignore_missing_key: bool,
}

impl Orderer {
    fn new(spec: &ReshardSpec) -> Result<Self, ApiError> {
        let kind = match spec.algorithm.kind.as_str() {
            "" | "alphanumeric" => "alphanumeric",
            "shuffle" => "shuffle",
            "none" => "none",
            other => {
                return Err(ApiError::bad_request(format!(
                    "reshard algorithm {other:?} (want alphanumeric, shuffle or none)"
                )));
            }
        };
        let mut ekm = HashMap::new();
        for (shard, keys) in &spec.ekm {
            gristmill_core::validate_object_name(shard)?;
            for k in keys {
                if let Some(prev) = ekm.insert(k.clone(), shard.clone())
                    && &prev != shard
                {
                    return Err(ApiError::bad_request(format!(
                        "key map puts {k:?} in both {prev:?} and {shard:?}"
                    )));
                }
            }
        }
        Ok(Orderer {
            kind: kind.to_owned(),
            desc: spec.algorithm.decreasing,
            seed: xxh64(spec.algorithm.seed.as_bytes(), 0),
            ekm,
            ignore_missing_key: spec.ekm_missing_key == "ignore",
        })
    }

    /// The record's sort key; `None` = drop it (unmapped key, ignored).
    fn key(&self, r: &Record) -> Result<Option<SortKey>, ApiError> {
        let group = if self.ekm.is_empty() {
            String::new()
        } else {
            match self.ekm.get(&r.key) {
                Some(g) => g.clone(),
                None if self.ignore_missing_key => return Ok(None),
                None => {
                    return Err(ApiError::bad_request(format!(
                        "sample key {:?} (in {}) is not in the key map",
                        r.key, r.shard
                    )));
                }
            }
        };
        let (hash, key) = match self.kind.as_str() {
            "shuffle" => (xxh64(r.key.as_bytes(), self.seed), r.key.clone()),
            "none" => (0, String::new()),
            _ => (0, r.key.clone()),
        };
        Ok(Some(SortKey {
            group,
            hash,
            key,
            desc: self.desc,
            shard: r.shard.clone(),
            pos: r.pos,
        }))
    }
}

/// The coordinator's records: reports received, records in memory, sorted runs on disk.
struct Collector {
    reported: HashSet<String>,
    errors: Vec<String>,
    buffer: Vec<(SortKey, Record)>,
    runs: Vec<PathBuf>,
    spill_dir: PathBuf,
    max_mem: usize,
    total: u64,
}

impl Collector {
    fn add(&mut self, order: &Orderer, records: Vec<Record>) -> Result<(), ApiError> {
        for r in records {
            if let Some(k) = order.key(&r)? {
                self.buffer.push((k, r));
                self.total += 1;
            }
            if self.buffer.len() >= self.max_mem {
                self.spill()?;
            }
        }
        Ok(())
    }

    /// Sorts the buffer and writes it as a run (JSON lines).
    fn spill(&mut self) -> Result<(), ApiError> {
        let err = |e: std::io::Error| ApiError::internal(format!("reshard spill: {e}"));
        std::fs::create_dir_all(&self.spill_dir).map_err(err)?;
        self.buffer.sort_by(|a, b| a.0.cmp(&b.0));
        let path = self
            .spill_dir
            .join(format!("run-{:05}.jsonl", self.runs.len()));
        let mut f = BufWriter::new(std::fs::File::create(&path).map_err(err)?);
        for rec in self.buffer.drain(..) {
            serde_json::to_writer(&mut f, &rec).map_err(|e| ApiError::internal(e.to_string()))?;
            f.write_all(b"\n").map_err(err)?;
        }
        f.flush().map_err(err)?;
        self.runs.push(path);
        metrics::counter!("grist_reshard_spilled_runs_total").increment(1);
        Ok(())
    }

    /// Every record in order: from memory if it all fit, else a merge of the runs.
    fn into_sorted(mut self) -> Result<Sorted, ApiError> {
        if self.runs.is_empty() {
            self.buffer.sort_by(|a, b| a.0.cmp(&b.0));
            return Ok(Box::new(self.buffer.into_iter().map(Ok)));
        }
        if !self.buffer.is_empty() {
            self.spill()?;
        }
        Ok(Box::new(Merge::open(&self.runs)?))
    }
}

/// Records in order, with their sort keys.
type Sorted = Box<dyn Iterator<Item = Result<(SortKey, Record), ApiError>> + Send>;

/// A k-way merge of sorted runs.
struct Merge {
    readers: Vec<std::io::Lines<BufReader<std::fs::File>>>,
    heap: BinaryHeap<std::cmp::Reverse<(SortKey, usize, Record)>>,
}

impl PartialOrd for Record {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}

impl Ord for Record {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        (&self.shard, self.pos).cmp(&(&o.shard, o.pos))
    }
}

impl Merge {
    fn open(runs: &[PathBuf]) -> Result<Self, ApiError> {
        let mut m = Merge {
            readers: Vec::new(),
            heap: BinaryHeap::new(),
        };
        for (i, p) in runs.iter().enumerate() {
            let f = std::fs::File::open(p)
                .map_err(|e| ApiError::internal(format!("reshard spill: {e}")))?;
            m.readers.push(BufReader::new(f).lines());
            m.refill(i)?;
        }
        Ok(m)
    }

    fn refill(&mut self, i: usize) -> Result<(), ApiError> {
        if let Some(line) = self.readers[i].next() {
            let line = line.map_err(|e| ApiError::internal(format!("reshard spill: {e}")))?;
            let (k, r): (SortKey, Record) =
                serde_json::from_str(&line).map_err(|e| ApiError::internal(e.to_string()))?;
            self.heap.push(std::cmp::Reverse((k, i, r)));
        }
        Ok(())
    }
}

impl Iterator for Merge {
    type Item = Result<(SortKey, Record), ApiError>;

    fn next(&mut self) -> Option<Self::Item> {
        let std::cmp::Reverse((k, i, r)) = self.heap.pop()?;
        if let Err(e) = self.refill(i) {
            return Some(Err(e));
        }
        Some(Ok((k, r)))
    }
}

/// One target's part in one reshard job.
pub(crate) struct Session {
    /// The coordinator's records (set up when its run starts).
    collector: tokio::sync::OnceCell<(Arc<Orderer>, Arc<Mutex<Collector>>)>,
    notify: Notify,
    plans_tx: mpsc::Sender<PlanMsg>,
    plans_rx: Mutex<Option<mpsc::Receiver<PlanMsg>>>,
}

/// Reshard sessions of this target, by job id.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    fn get_or_create(&self, job: &str) -> Arc<Session> {
        let mut map = self.map.lock().expect("reshard sessions lock");
        map.entry(job.to_owned())
            .or_insert_with(|| {
                let (tx, rx) = mpsc::channel(PLAN_QUEUE);
                Arc::new(Session {
                    collector: tokio::sync::OnceCell::new(),
                    notify: Notify::new(),
                    plans_tx: tx,
                    plans_rx: Mutex::new(Some(rx)),
                })
            })
            .clone()
    }

    fn get(&self, job: &str) -> Option<Arc<Session>> {
        self.map
            .lock()
            .expect("reshard sessions lock")
            .get(job)
            .cloned()
    }

    fn remove(&self, job: &str) {
        self.map.lock().expect("reshard sessions lock").remove(job);
    }
}

/// `POST /v1/shards/reshard/{job}/records` (on the coordinator): a batch of a target's records.
pub(crate) async fn receive_records(
    State(t): State<Arc<Target>>,
    Path(job): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let msg: RecordsMsg = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid records: {e}")))?;
    let session = t.shards.reshards.get_or_create(&job);
    // Records may come before this target's own run has started: wait for it to set up.
    let (order, collector) =
        tokio::time::timeout(Duration::from_secs(120), wait_collector(&session))
            .await
            .map_err(|_| ApiError::unavailable(format!("reshard {job} is not running here")))?;
    let from = msg.from.clone();
    let last = msg.last;
    let error = msg.error.clone();
    let records = msg.records;
    tokio::task::spawn_blocking(move || -> Result<(), ApiError> {
        let mut c = collector.lock().expect("collector lock");
        if !error.is_empty() {
            c.errors.push(format!("target {from}: {error}"));
            return Ok(());
        }
        if let Err(e) = c.add(&order, records) {
            c.errors.push(e.message.clone());
            return Err(e);
        }
        if last {
            c.reported.insert(from);
        }
        Ok(())
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    session.notify.notify_one();
    Ok(StatusCode::OK.into_response())
}

async fn wait_collector(session: &Session) -> (Arc<Orderer>, Arc<Mutex<Collector>>) {
    loop {
        if let Some(c) = session.collector.get() {
            return c.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `POST /v1/shards/reshard/{job}/plan` (from the coordinator): a shard to build, or the end.
pub(crate) async fn receive_plan(
    State(t): State<Arc<Target>>,
    Path(job): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let msg: PlanMsg = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid plan: {e}")))?;
    let session = t
        .shards
        .reshards
        .get(&job)
        .ok_or_else(|| ApiError::not_found(format!("reshard {job} is not running here")))?;
    session
        .plans_tx
        .send(msg)
        .await
        .map_err(|_| ApiError::new(ErrorKind::Conflict, format!("reshard {job} has ended here")))?;
    Ok(StatusCode::OK.into_response())
}

pub(crate) async fn execute(t: &Arc<Target>, run: &Arc<JobRun>) -> Result<(), ApiError> {
    let spec = run
        .spec
        .opts
        .reshard
        .clone()
        .ok_or_else(|| ApiError::bad_request("reshard job without a spec"))?;
    let input = run
        .spec
        .bck
        .clone()
        .ok_or_else(|| ApiError::bad_request("reshard job without an input bucket"))?;
    let output = run.spec.to_bck.clone().unwrap_or_else(|| input.clone());
    t.require_bucket(&input).await?;
    t.require_bucket(&output).await?;
    let job = run.spec.id.clone();
    let session = t.shards.reshards.get_or_create(&job);
    let is_coordinator = spec.coordinator == t.id;
    if is_coordinator {
        let order = Arc::new(Orderer::new(&spec)?);
        let spill_dir = t.store.mountpaths()[0]
            .path
            .join("tmp")
            .join(format!("reshard-{job}"));
        let max_mem = match spec.max_mem_records {
            0 => DEFAULT_MAX_MEM_RECORDS,
            n => n,
        } as usize;
        let collector = Collector {
            reported: HashSet::new(),
            errors: Vec::new(),
            buffer: Vec::new(),
            runs: Vec::new(),
            spill_dir,
            max_mem: max_mem.max(1),
            total: 0,
        };
        let _ = session
            .collector
            .set((order, Arc::new(Mutex::new(collector))));
    }
    let result = async {
        let coordinator = t
            .smap()
            .node(&spec.coordinator)
            .map(|n| n.url().to_owned())
            .ok_or_else(|| {
                ApiError::unavailable(format!(
                    "coordinator {} is not in the cluster map",
                    spec.coordinator
                ))
            })?;
        let coord_task = is_coordinator.then(|| {
            let (t, run, spec, output, session) = (
                t.clone(),
                run.clone(),
                spec.clone(),
                output.clone(),
                session.clone(),
            );
            tokio::spawn(async move {
                let r = coordinate(&t, &run, &spec, &output, &session).await;
                if let Err(e) = &r {
                    // Tell everyone, so no target waits for plans that never come.
                    broadcast_abort(&t, &run.spec.id, &spec, &e.message).await;
                }
                r
            })
        });
        if let Err(e) = records(t, run, &input, &coordinator).await {
            send_records(
                t,
                &coordinator,
                &job,
                &RecordsMsg {
                    from: t.id.clone(),
                    records: Vec::new(),
                    last: true,
                    error: e.message.clone(),
                },
            )
            .await
            .ok();
            return Err(e);
        }
        let built = build(t, run, &spec, &input, &output, &session).await;
        if let Some(task) = coord_task {
            task.await
                .map_err(|e| ApiError::internal(e.to_string()))??;
        }
        built
    }
    .await;
    t.shards.reshards.remove(&job);
    if is_coordinator {
        let dir = t.store.mountpaths()[0]
            .path
            .join("tmp")
            .join(format!("reshard-{job}"));
        let _ = tokio::fs::remove_dir_all(dir).await;
    }
    result
}

fn add_total(run: &JobRun, n: u64) {
    let mut total = run.total.lock().expect("job total lock");
    *total = Some(total.unwrap_or(0) + n);
}

/// Phase 1: this target's input shards → records → the coordinator.
async fn records(
    t: &Arc<Target>,
    run: &Arc<JobRun>,
    input: &Bck,
    coordinator: &str,
) -> Result<(), ApiError> {
    let mut shards = crate::jobs::enumerate(t, &run.spec, input).await?;
    if matches!(
        run.spec.selection.resolve()?,
        gristmill_core::job::Resolved::Prefix(_)
    ) {
        // A prefix selects whatever is there: only shards are inputs.
        shards.retain(|n| Format::from_name(n).is_some());
    }
    shards.sort();
    add_total(run, shards.len() as u64);
    let mut batch: Vec<Record> = Vec::new();
    for shard in shards {
        if run.cancel.is_cancelled() {
            return Err(ApiError::new(ErrorKind::Conflict, "aborted"));
        }
        let open = crate::read::local::open_or_fetch(t, input, &shard).await?;
        let (store, shards_state, bck, name) = (
            t.store.clone(),
            t.shards.clone(),
            input.clone(),
            shard.clone(),
        );
        let recs = tokio::task::spawn_blocking(move || -> Result<Vec<Record>, ApiError> {
            let file = open.file;
            let format = super::format_of(&name, None, &file)?;
            let cat = catalog::load(
                &store,
                &shards_state.catalogs,
                &bck,
                &open.meta,
                &file,
                format,
            )?;
            let files: Vec<(String, u64)> = match &*cat {
                Catalog::Tar(idx) => idx
                    .entries()
                    .iter()
                    .filter(|e| e.kind == gristmill_shard::MemberKind::File)
                    .map(|e| (e.name.clone(), e.size))
                    .collect(),
                Catalog::Members(ms) => ms
                    .iter()
                    .filter(|m| m.is_file())
                    .map(|m| (m.name.clone(), m.size))
                    .collect(),
            };
            let samples = group_samples(
                files
                    .into_iter()
                    .map(|(n, size)| Ok((n, SampleData::Range { offset: 0, size }))),
                u64::MAX,
            );
            let mut out = Vec::new();
            for (pos, s) in samples.enumerate() {
                let s = s?;
                let files: Vec<(String, u64)> = s
                    .files
                    .iter()
                    .map(|f| (f.name.clone(), f.data.len()))
                    .collect();
                out.push(Record {
                    size: files.iter().map(|f| f.1).sum(),
                    key: s.key,
                    shard: name.clone(),
                    pos: pos as u64,
                    files,
                });
            }
            Ok(out)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::new(e.kind, format!("reading {input}/{shard}: {}", e.message)))?;
        batch.extend(recs);
        run.record(&shard, Ok(crate::jobs::Outcome::Done(0)));
        if batch.len() >= RECORD_BATCH {
            let msg = RecordsMsg {
                from: t.id.clone(),
                records: std::mem::take(&mut batch),
                last: false,
                error: String::new(),
            };
            send_records(t, coordinator, &run.spec.id, &msg).await?;
        }
    }
    let msg = RecordsMsg {
        from: t.id.clone(),
        records: batch,
        last: true,
        error: String::new(),
    };
    send_records(t, coordinator, &run.spec.id, &msg).await
}

async fn send_records(t: &Target, url: &str, job: &str, msg: &RecordsMsg) -> Result<(), ApiError> {
    post(t, &format!("{url}/v1/shards/reshard/{job}/records"), msg).await
}

async fn post<T: Serialize>(t: &Target, url: &str, body: &T) -> Result<(), ApiError> {
    let resp = t
        .relay
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("reshard: {url}: {e}")))?;
    if resp.status().is_success() {
        return Ok(());
    }
    Err(crate::cluster::peer::peer_error(resp, "reshard").await)
}

async fn broadcast_abort(t: &Target, job: &str, spec: &ReshardSpec, reason: &str) {
    let smap = t.smap();
    for id in &spec.targets {
        if let Some(n) = smap.node(id) {
            let url = format!("{}/v1/shards/reshard/{job}/plan", n.url());
            let _ = post(
                t,
                &url,
                &PlanMsg::Abort {
                    reason: reason.to_owned(),
                },
            )
            .await;
        }
    }
}

/// Phase 3: build the shards the coordinator assigns to this target, until it says done.
async fn build(
    t: &Arc<Target>,
    run: &Arc<JobRun>,
    spec: &ReshardSpec,
    input: &Bck,
    output: &Bck,
    session: &Arc<Session>,
) -> Result<(), ApiError> {
    let Some(mut rx) = session.plans_rx.lock().expect("plans lock").take() else {
        return Err(ApiError::internal("reshard plans already taken"));
    };
    let format = Format::parse(spec.output_ext())?;
    let deadline = tokio::time::Instant::now() + PHASE_TIMEOUT;
    loop {
        let msg = tokio::select! {
            m = rx.recv() => m,
            _ = run.cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep_until(deadline) => {
                return Err(ApiError::new(ErrorKind::GatewayTimeout, "reshard: no plan from the coordinator"));
            }
        };
        match msg {
            None => return Err(ApiError::internal("reshard: plan queue closed")),
            Some(PlanMsg::Abort { reason }) => {
                return Err(ApiError::new(
                    ErrorKind::Conflict,
                    format!("reshard aborted: {reason}"),
                ));
            }
            Some(PlanMsg::Done { shards }) => {
                tracing::info!(job = %run.spec.id, shards, "reshard: all assigned shards written");
                return Ok(());
            }
            Some(PlanMsg::Shard { name, records }) => {
                add_total(run, 1);
                let bytes = build_one(t, input, output, format, &name, records).await?;
                run.record(&name, Ok(crate::jobs::Outcome::Done(bytes)));
            }
        }
    }
}

async fn build_one(
    t: &Arc<Target>,
    input: &Bck,
    output: &Bck,
    format: Format,
    name: &str,
    records: Vec<Record>,
) -> Result<u64, ApiError> {
    let mut items = Vec::new();
    let mut names = Vec::new();
    for r in &records {
        for (file, _) in &r.files {
            let mut it = Item::object(input, &r.shard);
            it.archpath = file.clone();
            items.push(it);
            names.push(file.clone());
        }
    }
    let prep = batch::prepare(t, &items, false).await?;
    let asm = Assembly {
        missing: Vec::new(),
        items,
        names,
        coer: false,
        skip_missing: true,
        format,
        mtime: 0,
        etl: None,
    };
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (store, shards, w2) = (t.store.clone(), t.shards.clone(), written.clone());
    let (rx, stream) = io::pipe(move |ready, out| {
        ready.send(());
        batch::write(&store, &shards, &asm, prep, &mut *out, &mut |_, o| {
            if let Outcome::Written(n) = o {
                w2.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        })?;
        Ok(())
    });
    io::ready(rx).await?;
    super::archive::put_stream(t, output, name, stream).await?;
    Ok(written.load(std::sync::atomic::Ordering::Relaxed))
}
