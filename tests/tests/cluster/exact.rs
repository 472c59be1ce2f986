//! Answers are exact while the cluster changes (issue 14, DESIGN §9). Under a continuous LIST +
//! GET + PUT + DELETE load, through a join, maintenance start and stop, a decommission, a kill -9
//! followed by removal (`mirror.copies = 2`), two map changes back to back, an aborted rebalance
//! followed by the next change, and with two targets' clocks 10 minutes ahead and behind:
//! - every listing (page size 100) holds every object that was live and not being written or
//!   deleted while it ran exactly once, and no object deleted before it started;
//! - every GET of a live object returns its latest acknowledged bytes (no failure, no stale
//!   version), and a deleted object never comes back (during the change or after it);
//! - a copy job started mid-change copies every object once, with the bytes it had.
//!
//! `GRIST_EXACT_OBJECTS` (default 2,000) objects of `GRIST_EXACT_SIZE` bytes (default 1 MiB), so
//! each rebalance lasts seconds. Every operation is stamped when it starts and when its answer
//! arrives, under the same lock that updates the model, so "being written or deleted while the
//! listing ran" is an exact overlap of intervals, not a guess.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use gristmill_core::ClusterMap;
use gristmill_core::api::ListObjectsPage;
use gristmill_core::job::{JobState, JobStatus};
use gristmill_tests::{Cluster, content, faketime_env};
use rand::{Rng, SeedableRng};

/// Listing page size: small, so that a listing is many pages across the change.
const PAGE: u64 = 100;
/// Listings per scenario; those the change did not last for are taken after it.
const MIN_LISTINGS: u64 = 100;
/// Concurrent listers, readers and writers of the load, and PUTs of the fill.
const LISTERS: usize = 3;
const READERS: usize = 2;
const WRITERS: usize = 2;
const FILL: usize = 16;
/// Examples kept of each kind of wrong answer.
const EXAMPLES: usize = 5;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn name(i: usize) -> String {
    format!("ex-{i:05}")
}

fn index(name: &str) -> Option<usize> {
    name.strip_prefix("ex-")?.parse().ok()
}

/// The content seed of version `version` of object `i` (version 0 is the fill).
fn seed(i: usize, version: u32) -> u64 {
    ((i as u64) << 24) | u64::from(version)
}

/// What the model knows of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Live with this version's bytes.
    Live(u32),
    Deleted,
    /// Mutated at some moment of a listing's window (see [`Model::settled`]): listed once or
    /// not at all.
    Unknown,
    /// A mutation whose answer was lost (no answer, or a refused DELETE): the state before it
    /// or the one it makes (`None`: deleted). Not mutated again; judged once the cluster
    /// settled, when a read must find one of the two.
    Either(Option<u32>, Option<u32>),
}

impl State {
    fn version(self) -> Option<u32> {
        match self {
            State::Live(v) => Some(v),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutation {
    Put(u32),
    Delete,
}

/// One mutation: stamped when sent and when answered (`None` while in flight).
struct Op {
    start: Instant,
    end: Option<Instant>,
    what: Mutation,
}

struct Obj {
    state: State,
    /// Highest version ever sent (acknowledged or not).
    written: u32,
    ops: Vec<Op>,
}

/// Counts of one scenario, with the first few examples of each kind of wrong answer.
#[derive(Default, Debug)]
struct Tally {
    listings_during: u64,
    listings_after: u64,
    wrong_listings: u64,
    gets: u64,
    final_gets: u64,
    failed_gets: u64,
    stale_reads: u64,
    /// Reads of a version whose PUT was refused (a failed PUT must change nothing).
    unacked: u64,
    back: u64,
    deletes: u64,
    rewrites: u64,
    failed_mutations: u64,
    /// GET bodies cut short by a transport error (and retried): a target killed mid-answer.
    broken_bodies: u64,
    examples: BTreeMap<&'static str, Vec<String>>,
}

const WRONG_LISTING: &str = "wrong listing";
const FAILED_GET: &str = "failed GET";
const STALE_READ: &str = "stale read";
const BACK: &str = "deleted object back";
const UNACKED: &str = "refused PUT visible";
const FAILED_MUTATION: &str = "failed mutation";

impl Tally {
    fn count(&mut self, kind: &'static str, text: String) {
        *match kind {
            WRONG_LISTING => &mut self.wrong_listings,
            FAILED_GET => &mut self.failed_gets,
            STALE_READ => &mut self.stale_reads,
            UNACKED => &mut self.unacked,
            BACK => &mut self.back,
            _ => &mut self.failed_mutations,
        } += 1;
        let ex = self.examples.entry(kind).or_default();
        if ex.len() < EXAMPLES {
            ex.push(text);
        }
    }
}

struct Model {
    objs: Vec<Obj>,
    /// Whether the change's window is open (listings and GETs started now count as "during").
    during: bool,
    tally: Tally,
}

impl Model {
    /// The mutations of object `i` in flight at any moment of `[from, to]`.
    fn overlapping(&self, i: usize, from: Instant, to: Instant) -> Vec<Mutation> {
        self.objs[i]
            .ops
            .iter()
            .filter(|o| o.start <= to && o.end.is_none_or(|e| e >= from))
            .map(|o| o.what)
            .collect()
    }

    fn states(&self) -> Vec<State> {
        self.objs.iter().map(|o| o.state).collect()
    }

    /// `before` (the states when `from` was stamped), with every object mutated at some moment
    /// of `[from, to]` as `Unknown`: what an answer taken in that interval must show.
    fn settled(&self, before: &[State], from: Instant, to: Instant) -> Vec<State> {
        before
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if self.overlapping(i, from, to).is_empty() {
                    *s
                } else {
                    State::Unknown
                }
            })
            .collect()
    }
}

/// What is wrong with a listing that should show `expect` (`Unknown`: may be listed once or
/// not at all).
fn judge_listing(expect: &[State], names: &[String]) -> Option<String> {
    let mut seen = vec![0u32; expect.len()];
    let mut strangers = Vec::new();
    for n in names {
        match index(n) {
            Some(i) if i < expect.len() => seen[i] += 1,
            _ => strangers.push(n.clone()),
        }
    }
    let (mut missing, mut twice, mut back) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (s, k)) in expect.iter().zip(&seen).enumerate() {
        if *k > 1 {
            twice.push(name(i));
        }
        match s {
            State::Live(_) if *k == 0 => missing.push(name(i)),
            State::Deleted if *k > 0 => back.push(name(i)),
            _ => {}
        }
    }
    if missing.is_empty() && twice.is_empty() && back.is_empty() && strangers.is_empty() {
        return None;
    }
    let some = |v: &[String]| v[..v.len().min(EXAMPLES)].join(" ");
    Some(format!(
        "{} names: {} missing [{}], {} twice [{}], {} deleted but listed [{}], {} unknown [{}]",
        names.len(),
        missing.len(),
        some(&missing),
        twice.len(),
        some(&twice),
        back.len(),
        some(&back),
        strangers.len(),
        some(&strangers)
    ))
}

/// Which version of object `i` `body` is, if any (up to `written`).
fn version_of(i: usize, body: &[u8], written: u32, size: usize) -> Option<u32> {
    if body.len() != size {
        return None;
    }
    let head = size.min(8);
    (0..=written)
        .rev()
        .find(|v| content(seed(i, *v), head) == body[..head])
        .filter(|v| content(seed(i, *v), size) == body)
}

/// Judges a GET of object `i` that was `expect` when sent, with `overlap` in flight while it
/// ran; `Err((kind, text))` when the answer is wrong.
fn judge_read(
    i: usize,
    size: usize,
    expect: State,
    overlap: &[Mutation],
    written: u32,
    got: &Result<(u16, Bytes), String>,
) -> Result<(), (&'static str, String)> {
    let mut versions: Vec<u32> = overlap
        .iter()
        .filter_map(|m| match m {
            Mutation::Put(v) => Some(*v),
            Mutation::Delete => None,
        })
        .collect();
    let either_deleted = match expect {
        State::Live(v) => {
            versions.push(v);
            false
        }
        State::Either(a, b) => {
            versions.extend(a.into_iter().chain(b));
            a.is_none() || b.is_none()
        }
        _ => false,
    };
    let absent_ok =
        expect == State::Deleted || either_deleted || overlap.contains(&Mutation::Delete);
    let n = name(i);
    match got {
        Err(e) => Err((FAILED_GET, format!("{n} ({expect:?}): {e}"))),
        Ok((404, _)) if absent_ok => Ok(()),
        Ok((200, body)) => match version_of(i, body, written, size) {
            Some(v) if versions.contains(&v) => Ok(()),
            Some(v) if versions.is_empty() => Err((BACK, format!("{n}: v{v} read after delete"))),
            Some(v) if versions.iter().all(|w| v < *w) => Err((
                STALE_READ,
                format!("{n}: v{v} read, latest acknowledged {versions:?}"),
            )),
            Some(v) => Err((
                UNACKED,
                format!("{n}: v{v} read, from a PUT that was refused ({expect:?})"),
            )),
            None => Err((
                FAILED_GET,
                format!("{n}: {} bytes of no version", body.len()),
            )),
        },
        Ok((status, body)) => Err((
            FAILED_GET,
            format!(
                "{n} ({expect:?}): {status} {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ),
        )),
    }
}

/// The HTTP side of the load: the proxy, the bucket and the shared model.
#[derive(Clone)]
struct Ctx {
    http: reqwest::Client,
    endpoint: String,
    bucket: String,
    n: usize,
    size: usize,
    model: Arc<Mutex<Model>>,
}

impl Ctx {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint)
    }

    fn object_url(&self, bucket: &str, i: usize) -> String {
        self.url(&format!("/v1/objects/{bucket}/{}", name(i)))
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap()
    }

    async fn put(&self, i: usize, body: Vec<u8>) -> Result<u16, String> {
        let r = self
            .http
            .put(self.object_url(&self.bucket, i))
            .body(body)
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await;
        r.map(|r| r.status().as_u16()).map_err(|e| e.to_string())
    }

    async fn get(&self, bucket: &str, i: usize) -> Result<(u16, Bytes), String> {
        // A GET redirected to a target at the moment it is killed finds no one listening, or
        // loses the answer it was getting (headers, or a body cut short when the process
        // died): a GET is idempotent and is retried on a transport error, as the SDK's retry
        // policy does (through the proxy again, which by then routes by the next map). An
        // answer — any status, whole — is never retried. Bodies cut short are counted: only a
        // scenario that kills a target may have any.
        let mut tries = 0;
        loop {
            tries += 1;
            let r = match self
                .http
                .get(self.object_url(bucket, i))
                .timeout(REQUEST_TIMEOUT)
                .send()
                .await
            {
                Ok(r) => r,
                Err(_) if tries < 10 => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(e) => return Err(e.to_string()),
            };
            let status = r.status().as_u16();
            match r.bytes().await {
                Ok(body) => return Ok((status, body)),
                Err(_) if tries < 10 => {
                    self.lock().tally.broken_bodies += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(format!("{status}, body: {e}")),
            }
        }
    }
    /// The whole bucket through the proxy, page by page.
    async fn list(&self, bucket: &str, page: u64) -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        let mut token = String::new();
        loop {
            let body = serde_json::json!({"action": "list", "value": {
                "pagesize": page, "continuation_token": token, "props": "name"}});
            let r = self
                .http
                .get(self.url(&format!("/v1/buckets/{bucket}")))
                .json(&body)
                .timeout(REQUEST_TIMEOUT)
                .send()
                .await
                .map_err(|e| format!("page {}: {e}", names.len() / page as usize))?;
            let status = r.status();
            if !status.is_success() {
                return Err(format!("{status} {}", r.text().await.unwrap_or_default()));
            }
            let p: ListObjectsPage = r.json().await.map_err(|e| e.to_string())?;
            names.extend(p.entries.into_iter().map(|e| e.name));
            if p.continuation_token.is_empty() {
                return Ok(names);
            }
            if names.len() > 10 * self.n + 1000 {
                return Err(format!("{} names and still more pages", names.len()));
            }
            token = p.continuation_token;
        }
    }

    /// One GET of object `i` judged against the model; skipped while it is being mutated or its
    /// state is unknown.
    async fn read(&self, i: usize, after: bool) {
        let (sent, expect) = {
            let m = self.lock();
            let o = &m.objs[i];
            // A lost answer is judged only once the cluster settled (`after`).
            let lost = matches!(o.state, State::Either(..)) && !after;
            if o.state == State::Unknown || lost || o.ops.last().is_some_and(|op| op.end.is_none())
            {
                return;
            }
            (Instant::now(), o.state)
        };
        let got = self.get(&self.bucket, i).await;
        let (overlap, written) = {
            let m = self.lock();
            (m.overlapping(i, sent, Instant::now()), m.objs[i].written)
        };
        let verdict = judge_read(i, self.size, expect, &overlap, written, &got);
        let mut m = self.lock();
        if after {
            m.tally.final_gets += 1;
        } else {
            m.tally.gets += 1;
        }
        if let Err((kind, text)) = verdict {
            let when = if after { "after" } else { "during" };
            m.tally.count(kind, format!("{when}: {text}"));
        }
    }

    /// Deletes object `i` or writes its next version; an acknowledged answer updates the model,
    /// a refused PUT changes nothing, no answer (or a refused DELETE) makes the state unknown.
    async fn mutate(&self, i: usize, delete: bool) {
        let (state, written) = {
            let m = self.lock();
            (m.objs[i].state, m.objs[i].written)
        };
        if matches!(state, State::Unknown | State::Either(..))
            || (delete && state == State::Deleted)
        {
            return;
        }
        let what = if delete {
            Mutation::Delete
        } else {
            Mutation::Put(written + 1)
        };
        let body = match what {
            Mutation::Put(v) => content(seed(i, v), self.size),
            Mutation::Delete => Vec::new(),
        };
        {
            let mut m = self.lock();
            let o = &mut m.objs[i];
            if let Mutation::Put(v) = what {
                o.written = v;
            }
            o.ops.push(Op {
                start: Instant::now(),
                end: None,
                what,
            });
        }
        let answer = match what {
            Mutation::Put(_) => self.put(i, body).await,
            Mutation::Delete => self
                .http
                .delete(self.object_url(&self.bucket, i))
                .timeout(REQUEST_TIMEOUT)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .map_err(|e| e.to_string()),
        };
        let mut m = self.lock();
        let o = &mut m.objs[i];
        o.ops.last_mut().expect("the op").end = Some(Instant::now());
        let (next, failure) = match (&answer, what) {
            (Ok(200..=299), Mutation::Put(v)) => (State::Live(v), None),
            (Ok(200..=299), Mutation::Delete) => (State::Deleted, None),
            (Ok(status), Mutation::Put(_)) => (state, Some(format!("PUT: {status}"))),
            (Ok(status), Mutation::Delete) => (
                State::Either(state.version(), None),
                Some(format!("DELETE: {status}")),
            ),
            (Err(e), Mutation::Put(v)) => (
                State::Either(state.version(), Some(v)),
                Some(format!("{what:?}: {e}")),
            ),
            (Err(e), Mutation::Delete) => (
                State::Either(state.version(), None),
                Some(format!("{what:?}: {e}")),
            ),
        };
        o.state = next;
        match failure {
            Some(f) => m.tally.count(FAILED_MUTATION, format!("{}: {f}", name(i))),
            None if delete => m.tally.deletes += 1,
            None => m.tally.rewrites += 1,
        }
    }

    /// Lists the bucket and judges each listing until stopped, and then until `MIN_LISTINGS`
    /// have been taken, at least two of them after the change's window.
    async fn lister(self, stop: Arc<AtomicBool>) {
        loop {
            let (from, before, during) = {
                let m = self.lock();
                let t = &m.tally;
                if stop.load(Ordering::SeqCst)
                    && t.listings_during + t.listings_after >= MIN_LISTINGS
                    && t.listings_after >= 2
                {
                    return;
                }
                (Instant::now(), m.states(), m.during)
            };
            let listed = self.list(&self.bucket, PAGE).await;
            let expect = {
                let m = self.lock();
                m.settled(&before, from, Instant::now())
            };
            let verdict = match &listed {
                Ok(names) => judge_listing(&expect, names),
                Err(e) => Some(format!("listing failed: {e}")),
            };
            let mut m = self.lock();
            if during {
                m.tally.listings_during += 1;
            } else {
                m.tally.listings_after += 1;
            }
            if let Some(v) = verdict {
                let when = if during { "during" } else { "after" };
                m.tally.count(WRONG_LISTING, format!("{when}: {v}"));
            }
        }
    }

    async fn reader(self, stop: Arc<AtomicBool>, seed: u64) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        while !stop.load(Ordering::SeqCst) {
            let i = rng.random_range(0..self.n);
            self.read(i, false).await;
        }
    }

    /// Runs `plan` once, then keeps rewriting its rewrites until stopped.
    async fn writer(self, stop: Arc<AtomicBool>, plan: Vec<(usize, bool)>) {
        let rewrites: Vec<usize> = plan.iter().filter(|p| !p.1).map(|p| p.0).collect();
        let mut k = 0;
        while !stop.load(Ordering::SeqCst) {
            let (i, delete) = match plan.get(k) {
                Some(p) => *p,
                None if rewrites.is_empty() => return,
                None => (rewrites[(k - plan.len()) % rewrites.len()], false),
            };
            k += 1;
            self.mutate(i, delete).await;
        }
    }

    async fn job(&self, id: &str) -> Option<JobStatus> {
        let r = self
            .http
            .get(self.url(&format!("/v1/jobs/{id}")))
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.json().await.ok()
    }

    /// Waits until job `id` has ended.
    async fn job_end(&self, id: &str) -> JobStatus {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            if let Some(j) = self.job(id).await
                && j.state != JobState::Running
            {
                return j;
            }
            assert!(Instant::now() < deadline, "job {id} did not end");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A membership action (`PUT /v1/cluster`) on target `sid`; returns the status and text.
    async fn node_action(&self, action: &str, sid: &str) -> (u16, String) {
        let r = self
            .http
            .put(self.url("/v1/cluster"))
            .json(&serde_json::json!({"action": action, "value": {"sid": sid}}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    async fn node_action_ok(&self, action: &str, sid: &str) {
        let (status, text) = self.node_action(action, sid).await;
        assert!(
            (200..300).contains(&status),
            "{action} {sid}: {status} {text}"
        );
    }

    async fn version(&self) -> u64 {
        let smap: ClusterMap = self
            .http
            .get(self.url("/v1/cluster?what=smap"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        smap.version
    }

    /// Starts copying the bucket to `to` (created by the copy).
    async fn start_copy(&self, to: &str) -> CopyJob {
        self.start_job(to, "copy-bck", serde_json::json!({})).await
    }

    /// Starts transforming the bucket into `to` through ETL `etl` (an identity transform, so
    /// the destination is checked like a copy's).
    async fn start_transform(&self, to: &str, etl: &str) -> CopyJob {
        self.start_job(to, "etl-bck", serde_json::json!({"id": etl}))
            .await
    }

    /// Starts a copy-like job (`action`, extra `value` fields) into `to`.
    async fn start_job(&self, to: &str, action: &str, mut value: serde_json::Value) -> CopyJob {
        let (started, before) = {
            let m = self.lock();
            (Instant::now(), m.states())
        };
        value["tobck"] = serde_json::json!({"name": to, "provider": "ais"});
        let r = self
            .http
            .post(self.url(&format!("/v1/buckets/{}?provider=ais", self.bucket)))
            .json(&serde_json::json!({"action": action, "value": value}))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        assert!(status.is_success(), "copy to {to}: {status} {text}");
        CopyJob {
            id: text.trim().trim_matches('"').to_owned(),
            to: to.to_owned(),
            started,
            before,
        }
    }

    /// Waits for the copy job, then checks its destination: every object untouched while the
    /// job ran is there exactly once with the bytes it had (none that was deleted), and the job
    /// processed no object twice. Returns what is wrong.
    async fn check_copy(&self, job: CopyJob) -> Vec<String> {
        let status = self.job_end(&job.id).await;
        let expect = {
            let m = self.lock();
            m.settled(&job.before, job.started, Instant::now())
        };
        let mut problems = Vec::new();
        if status.state != JobState::Finished {
            problems.push(format!("copy job {} ended {:?}", job.id, status.state));
        }
        let stable = expect
            .iter()
            .filter(|s| matches!(s, State::Live(_)))
            .count() as u64;
        let ever = job
            .before
            .iter()
            .filter(|s| !matches!(s, State::Deleted))
            .count() as u64;
        if !(stable..=ever).contains(&status.objects) {
            problems.push(format!(
                "copy job {} processed {} objects: {stable} were live throughout, {ever} at most",
                job.id, status.objects
            ));
        }
        match self.list(&job.to, 1000).await {
            Err(e) => problems.push(format!("listing {}: {e}", job.to)),
            Ok(names) => {
                problems.extend(judge_listing(&expect, &names).map(|v| format!("{}: {v}", job.to)))
            }
        }
        let to = job.to.as_str();
        let written: Vec<u32> = self.lock().objs.iter().map(|o| o.written).collect();
        let written = &written;
        let bad: Vec<String> = futures::stream::iter(expect.iter().enumerate())
            .filter_map(|(i, s)| async move {
                match s {
                    State::Live(v) => Some((i, *v)),
                    _ => None,
                }
            })
            .map(|(i, v)| async move {
                let got = self.get(to, i).await;
                judge_read(i, self.size, State::Live(v), &[], written[i], &got)
                    .err()
                    .map(|(kind, text)| format!("{kind}: {text}"))
            })
            .buffer_unordered(FILL)
            .filter_map(|bad| async move { bad })
            .collect()
            .await;
        if !bad.is_empty() {
            problems.push(format!(
                "{} of {stable} copied objects wrong in {}: {:?}",
                bad.len(),
                job.to,
                &bad[..bad.len().min(EXAMPLES)]
            ));
        }
        println!(
            "exact: copy job {} ({:?}) into {}: {} objects, {} errors, {} skipped; {stable} checked",
            job.id, status.state, job.to, status.objects, status.errors, status.skipped
        );
        // Objects deleted while the job ran are errors that belong; the samples say which.
        if !problems.is_empty() && status.errors > 0 {
            let samples: Vec<String> = status
                .targets
                .iter()
                .flat_map(|t| {
                    t.error_samples
                        .iter()
                        .map(move |e| format!("{}: {e:?}", t.node))
                })
                .collect();
            problems.push(format!("copy job {} errors: {samples:?}", job.id));
        }
        problems
    }
}

struct CopyJob {
    id: String,
    to: String,
    started: Instant,
    before: Vec<State>,
}

/// A cluster of `targets` (one mountpath each, `target_env(i)` for target `i`) with `bucket`
/// (`copies` copies of each object) filled with version 0 of every object.
async fn filled(
    targets: usize,
    bucket: &str,
    copies: usize,
    target_env: impl Fn(usize) -> Vec<(String, String)>,
) -> (Cluster, Ctx) {
    let c = Cluster::start_each(targets, 1, &[], target_env)
        .await
        .unwrap();
    c.create_bucket(bucket).await.unwrap();
    if copies > 1 {
        let uri = format!("ais://{bucket}");
        c.grist_ok(&[
            "bucket",
            "props",
            "set",
            &uri,
            &format!("mirror.copies={copies}"),
        ]);
    }
    let n = env_usize("GRIST_EXACT_OBJECTS", 2000);
    let size = env_usize("GRIST_EXACT_SIZE", 1 << 20);
    let objs = (0..n)
        .map(|_| Obj {
            state: State::Live(0),
            written: 0,
            ops: Vec::new(),
        })
        .collect();
    let ctx = Ctx {
        http: c.http.clone(),
        endpoint: c.endpoint.clone(),
        bucket: bucket.to_owned(),
        n,
        size,
        model: Arc::new(Mutex::new(Model {
            objs,
            during: false,
            tally: Tally::default(),
        })),
    };
    let t = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(FILL, |i| {
            let ctx = &ctx;
            async move {
                let r = ctx.put(i, content(seed(i, 0), ctx.size)).await;
                assert!(matches!(r, Ok(200..=299)), "fill {}: {r:?}", name(i));
            }
        })
        .await;
    println!(
        "exact: {n} objects of {size} B into ais://{bucket} (copies={copies}) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    (c, ctx)
}

/// Waits until the map satisfies `ready` and no rebalance runs, then for the rebalance of the
/// map's version to have ended (or, 3 s on, to have never started: a removal after a
/// decommission starts none). Returns the newest rebalance (by map version) and when the
/// cluster was first seen settled.
async fn settle(
    c: &Cluster,
    ctx: &Ctx,
    ready: impl Fn(&ClusterMap) -> bool,
) -> (Option<JobStatus>, Instant) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut quiet: Option<(u64, Instant)> = None;
    // Map changes reach targets asynchronously: give them a moment to start.
    tokio::time::sleep(Duration::from_millis(300)).await;
    loop {
        let smap = c.smap().await.unwrap();
        let jobs: Vec<JobStatus> = match ctx
            .http
            .get(ctx.url("/v1/jobs?kind=rebalance"))
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let running: Vec<&str> = jobs
            .iter()
            .filter(|j| j.state == JobState::Running)
            .map(|j| j.id.as_str())
            .collect();
        if ready(&smap) && running.is_empty() {
            let since = match quiet {
                Some((v, t)) if v == smap.version => t,
                _ => quiet.insert((smap.version, Instant::now())).1,
            };
            let version = |j: &JobStatus| j.id.strip_prefix("rb")?.parse::<u64>().ok();
            let newest = jobs
                .iter()
                .filter(|j| version(j).is_some())
                .max_by_key(|j| version(j));
            if newest.is_some_and(|j| version(j) == Some(smap.version))
                || since.elapsed() > Duration::from_secs(3)
            {
                return (newest.cloned(), since);
            }
        } else {
            quiet = None;
        }
        if Instant::now() > deadline {
            for t in &c.targets {
                eprintln!("--- {} log:\n{}", t.name, t.log_tail());
            }
            panic!(
                "rebalance of map v{} did not end; running: {running:?}\nproxy log:\n{}",
                smap.version,
                c.proxy.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The load of one membership change: listers, readers and writers (round `round` of
/// `rounds`: of the objects `i` with `(i / 10) % rounds == round`, every 10th is deleted and
/// every 10th+5 rewritten, again and again until the window closes).
struct Load {
    ctx: Ctx,
    started: Instant,
    stop: Arc<AtomicBool>,
    stop_listing: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    listers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(ctx: &Ctx, round: usize, rounds: usize) -> Self {
        {
            let mut m = ctx.lock();
            m.tally = Tally::default();
            m.during = true;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop_listing = Arc::new(AtomicBool::new(false));
        let plan: Vec<(usize, bool)> = (0..ctx.n)
            .filter(|i| (i / 10) % rounds == round && i % 5 == 0)
            .map(|i| (i, i % 10 == 0))
            .collect();
        let mut workers = Vec::new();
        for w in 0..WRITERS {
            let mine = plan.iter().copied().skip(w).step_by(WRITERS).collect();
            workers.push(tokio::spawn(ctx.clone().writer(stop.clone(), mine)));
        }
        for r in 0..READERS {
            let seed = (round * READERS + r) as u64;
            workers.push(tokio::spawn(ctx.clone().reader(stop.clone(), seed)));
        }
        let listers = (0..LISTERS)
            .map(|_| tokio::spawn(ctx.clone().lister(stop_listing.clone())))
            .collect();
        Self {
            ctx: ctx.clone(),
            started: Instant::now(),
            stop,
            stop_listing,
            workers,
            listers,
        }
    }

    /// The change has been made: waits for its rebalance (once the map satisfies `ready`) and
    /// a second more, stops the mutations and GETs, lists until `MIN_LISTINGS`, then reads every
    /// object once more (live: its latest bytes; deleted: 404).
    async fn finish(self, c: &Cluster, name: &str, ready: impl Fn(&ClusterMap) -> bool) -> Report {
        let (rb, settled) = settle(c, &self.ctx, ready).await;
        let took = settled - self.started;
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.ctx.lock().during = false;
        self.stop.store(true, Ordering::SeqCst);
        for w in self.workers {
            w.await.unwrap();
        }
        self.stop_listing.store(true, Ordering::SeqCst);
        for l in self.listers {
            l.await.unwrap();
        }
        let ctx = &self.ctx;
        futures::stream::iter(0..ctx.n)
            .for_each_concurrent(FILL, |i| ctx.read(i, true))
            .await;
        let tally = std::mem::take(&mut ctx.lock().tally);
        let mut problems = Vec::new();
        if let Some(j) = &rb
            && j.state != JobState::Finished
        {
            problems.push(format!("rebalance {} ended {:?}", j.id, j.state));
        }
        if tally.deletes == 0 || tally.rewrites == 0 || tally.gets == 0 {
            problems.push("the load did not run".into());
        }
        // A change that refuses many mutations hides what it would have got wrong.
        let mutations = tally.deletes + tally.rewrites + tally.failed_mutations;
        if tally.failed_mutations * 100 > mutations * MAX_REFUSED_PERCENT {
            problems.push(format!(
                "{} of {mutations} mutations refused or unanswered (more than {MAX_REFUSED_PERCENT}%)",
                tally.failed_mutations
            ));
        }
        let report = Report {
            name: name.to_owned(),
            rebalance: rb
                .map(|j| format!("{} {:?}, {} objects", j.id, j.state, j.objects))
                .unwrap_or_else(|| "no rebalance job".into()),
            took,
            tally,
            problems,
        };
        println!("{}", report.line());
        for (kind, ex) in &report.tally.examples {
            for e in ex {
                println!("    {kind}: {e}");
            }
        }
        report
    }
}

struct Report {
    name: String,
    rebalance: String,
    took: Duration,
    tally: Tally,
    problems: Vec<String>,
}

impl Report {
    fn line(&self) -> String {
        let t = &self.tally;
        format!(
            "exact[{}]: change + rebalance {:.1} s ({}); listings {} during + {} after, {} wrong; \
             GETs {} during + {} after, {} failed, {} stale, {} of refused PUTs; deletes {}, \
             rewrites {}, {} failed mutations; {} deleted back; {} bodies cut short (retried)",
            self.name,
            self.took.as_secs_f64(),
            self.rebalance,
            t.listings_during,
            t.listings_after,
            t.wrong_listings,
            t.gets,
            t.final_gets,
            t.failed_gets,
            t.stale_reads,
            t.unacked,
            t.deletes,
            t.rewrites,
            t.failed_mutations,
            t.back,
            t.broken_bodies
        )
    }

    fn failures(&self) -> Vec<String> {
        let t = &self.tally;
        let mut out: Vec<String> = [
            (t.wrong_listings, WRONG_LISTING),
            (t.failed_gets, FAILED_GET),
            (t.stale_reads, STALE_READ),
            (t.back, BACK),
            (t.unacked, UNACKED),
        ]
        .into_iter()
        .filter(|(k, _)| *k > 0)
        .map(|(k, kind)| {
            let ex = t.examples.get(kind).cloned().unwrap_or_default();
            format!("{}: {k} × {kind}, e.g. {ex:#?}", self.name)
        })
        .collect();
        out.extend(self.problems.iter().map(|p| format!("{}: {p}", self.name)));
        if t.broken_bodies > 0 && !self.name.contains("kill") {
            out.push(format!(
                "{}: {} GET bodies cut short with no target killed",
                self.name, t.broken_bodies
            ));
        }
        out
    }
}

/// Every scenario exact: 0 wrong listings, failed GETs, stale reads, reads of refused PUTs and
/// deleted objects back.
fn assert_exact(reports: &[Report]) {
    println!("exact: summary");
    for r in reports {
        println!("  {}", r.line());
    }
    let failures: Vec<String> = reports.iter().flat_map(Report::failures).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const BUCKET: &str = "exact";

/// The most mutations a scenario may see refused or unanswered (the kill -9 run refuses about
/// 4%: writes that had to ask the dead target while it was still in the map).
const MAX_REFUSED_PERCENT: u64 = 10;

/// Join (a 5th target), maintenance start (with a copy job and an ETL job started
/// mid-change), maintenance stop, and decommission of the target that joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_through_join_maintenance_and_decommission() {
    let (mut c, ctx) = filled(4, BUCKET, 1, |_| Vec::new()).await;
    let mut reports = Vec::new();

    let load = Load::start(&ctx, 0, 4);
    let joined = c.add_target().await.unwrap();
    reports.push(load.finish(&c, "join", |_| true).await);
    let joined = c.target_id(joined).await.unwrap();

    let first = c.target_id(0).await.unwrap();
    let load = Load::start(&ctx, 1, 4);
    // An identity ETL (a command runtime: `cat`, object on stdin, result on stdout).
    let r = ctx
        .http
        .put(ctx.url("/v1/etl"))
        .json(&serde_json::json!({"name": "ident", "runtime": "command", "command": ["cat"]}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "ETL init: {}", r.status());
    ctx.node_action_ok("start-maintenance", &first).await;
    let (copy, transform) = tokio::join!(
        ctx.start_copy("exact-copy"),
        ctx.start_transform("exact-etl", "ident")
    );
    let mut report = load.finish(&c, "maintenance start", |_| true).await;
    report.problems.extend(ctx.check_copy(copy).await);
    report.problems.extend(ctx.check_copy(transform).await);
    reports.push(report);

    let load = Load::start(&ctx, 2, 4);
    ctx.node_action_ok("stop-maintenance", &first).await;
    reports.push(load.finish(&c, "maintenance stop", |_| true).await);

    let load = Load::start(&ctx, 3, 4);
    ctx.node_action_ok("decommission-node", &joined).await;
    reports.push(
        load.finish(&c, "decommission", |m| !m.tmap.contains_key(&joined))
            .await,
    );
    assert_exact(&reports);
}

/// `mirror.copies = 2`: a target killed with SIGKILL and removed from the map at once; every
/// object stays live. A copy job started right after the removal copies each object once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_through_kill9_and_removal_with_two_copies() {
    let (mut c, ctx) = filled(4, "exact2", 2, |_| Vec::new()).await;
    let victim = c.target_id(3).await.unwrap();
    let load = Load::start(&ctx, 0, 1);
    // The load runs before the kill, too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.targets[3].kill9();
    let (status, text) = ctx.node_action("remove-node", &victim).await;
    // 404: the keepalive monitor removed it first.
    assert!(
        (200..300).contains(&status) || status == 404,
        "remove-node {victim}: {status} {text}"
    );
    let copy = ctx.start_copy("exact2-copy").await;
    let mut report = load
        .finish(&c, "kill -9 + removal", |m| !m.tmap.contains_key(&victim))
        .await;
    report.problems.extend(ctx.check_copy(copy).await);
    assert_exact(&[report]);
}

/// Two map changes back to back (maintenance on one target, then at once on another: the first
/// rebalance is superseded), then an aborted rebalance (maintenance stop of the first, its
/// rebalance stopped as soon as it runs) followed by the next change (maintenance stop of the
/// second).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_through_superseded_and_aborted_rebalances() {
    let (c, ctx) = filled(4, BUCKET, 1, |_| Vec::new()).await;
    let (a, b) = (c.target_id(0).await.unwrap(), c.target_id(1).await.unwrap());
    let mut reports = Vec::new();

    let load = Load::start(&ctx, 0, 2);
    ctx.node_action_ok("start-maintenance", &a).await;
    let first = ctx.version().await;
    ctx.node_action_ok("start-maintenance", &b).await;
    let mut report = load
        .finish(&c, "two map changes back to back", |_| true)
        .await;
    let superseded = ctx.job(&format!("rb{first}")).await;
    println!(
        "exact: the first rebalance rb{first} ended {:?}",
        superseded.map(|j| j.state)
    );
    reports.push(report);

    let load = Load::start(&ctx, 1, 2);
    ctx.node_action_ok("stop-maintenance", &a).await;
    let aborted = abort_rebalance(&ctx, ctx.version().await).await;
    ctx.node_action_ok("stop-maintenance", &b).await;
    report = load
        .finish(&c, "aborted rebalance, then the next", |_| true)
        .await;
    match aborted {
        Ok(j) if j.state == JobState::Aborted => {
            println!("exact: {} aborted after {} objects", j.id, j.objects)
        }
        Ok(j) => println!(
            "exact: {} ended {:?} before it could be stopped (nothing aborted)",
            j.id, j.state
        ),
        Err(e) => report.problems.push(e),
    }
    reports.push(report);
    assert_exact(&reports);
}

/// Stops rebalance `rb<version>` as soon as it runs; returns how it ended.
async fn abort_rebalance(ctx: &Ctx, version: u64) -> Result<JobStatus, String> {
    let id = format!("rb{version}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match ctx.job(&id).await {
            Some(j) if j.state == JobState::Running => break,
            Some(j) => return Ok(j),
            None if Instant::now() > deadline => return Err(format!("{id} never started")),
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let r = ctx
        .http
        .delete(ctx.url(&format!("/v1/jobs/{id}")))
        .send()
        .await
        .map_err(|e| format!("stopping {id}: {e}"))?;
    let status = r.status();
    if !status.is_success() {
        let text = r.text().await.unwrap_or_default();
        return Err(format!("stopping {id}: {status} {text}"));
    }
    Ok(ctx.job_end(&id).await)
}

/// Two of the four targets run under libfaketime, one 10 minutes ahead and one 10 minutes
/// behind; the same load through maintenance start and stop of the one ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_with_two_clocks_ten_minutes_off() {
    const SKEW: [(usize, &str, i64); 2] = [(2, "+10m", 600), (3, "-10m", -600)];
    let wall = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64
    };
    let before = wall();
    let (c, ctx) = filled(4, BUCKET, 1, |i| {
        SKEW.iter()
            .find(|s| s.0 == i)
            .map(|s| faketime_env(s.1).unwrap())
            .unwrap_or_default()
    })
    .await;
    let after = wall();
    // The skew is in effect: the objects each skewed target stored carry its shifted mtime.
    let smap = c.smap().await.unwrap();
    for (i, offset, secs) in SKEW {
        let id = c.target_id(i).await.unwrap();
        let entries = c.entries_on(smap.tmap[&id].url(), BUCKET).await;
        let slack = 60 * 1_000_000_000;
        let (lo, hi) = (
            before + secs * 1_000_000_000 - slack,
            after + secs * 1_000_000_000 + slack,
        );
        let off = entries.iter().filter(|e| !(lo..=hi).contains(&e.mtime_ns));
        assert!(
            !entries.is_empty() && off.count() == 0,
            "target-{i} (FAKETIME={offset}): mtimes not shifted: {:?}",
            entries.first().map(|e| e.mtime_ns - after)
        );
    }
    let ahead = c.target_id(SKEW[0].0).await.unwrap();
    let mut reports = Vec::new();
    let load = Load::start(&ctx, 0, 2);
    ctx.node_action_ok("start-maintenance", &ahead).await;
    reports.push(load.finish(&c, "skew: maintenance start", |_| true).await);
    let load = Load::start(&ctx, 1, 2);
    ctx.node_action_ok("stop-maintenance", &ahead).await;
    reports.push(load.finish(&c, "skew: maintenance stop", |_| true).await);
    assert_exact(&reports);
}

/// The judges themselves: each kind of wrong answer is caught, and what an interval overlaps is
/// exempt (no cluster needed).
#[test]
fn the_judges_catch_each_kind_of_wrong_answer() {
    use State::{Deleted, Live, Unknown};
    let names = |v: &[usize]| v.iter().map(|i| name(*i)).collect::<Vec<_>>();
    let expect = [Live(0), Deleted, Unknown, Live(3)];
    assert_eq!(judge_listing(&expect, &names(&[0, 3])), None);
    assert_eq!(judge_listing(&expect, &names(&[0, 2, 3])), None);
    for (wrong, what) in [
        (names(&[0]), "1 missing [ex-00003]"),
        (names(&[0, 0, 3]), "1 twice [ex-00000]"),
        (names(&[0, 2, 2, 3]), "1 twice [ex-00002]"),
        (names(&[0, 1, 3]), "1 deleted but listed [ex-00001]"),
        (vec![name(0), name(3), "zz".into()], "1 unknown [zz]"),
    ] {
        let verdict = judge_listing(&expect, &wrong).unwrap_or_default();
        assert!(verdict.contains(what), "{wrong:?}: {verdict}");
    }

    const SIZE: usize = 64;
    let body = |v: u32| Ok((200, Bytes::from(content(seed(7, v), SIZE))));
    let kind = |expect: State, overlap: &[Mutation], got| {
        judge_read(7, SIZE, expect, overlap, 3, &got).map_err(|e| e.0)
    };
    assert_eq!(kind(Live(2), &[], body(2)), Ok(()));
    assert_eq!(kind(Live(2), &[], body(1)), Err(STALE_READ));
    assert_eq!(kind(Live(2), &[], body(3)), Err(UNACKED));
    assert_eq!(kind(Live(2), &[Mutation::Put(3)], body(3)), Ok(()));
    assert_eq!(kind(Live(2), &[], Ok((404, Bytes::new()))), Err(FAILED_GET));
    let gone = Ok((404, Bytes::new()));
    assert_eq!(kind(Live(2), &[Mutation::Delete], gone.clone()), Ok(()));
    assert_eq!(kind(Deleted, &[], gone), Ok(()));
    assert_eq!(kind(Deleted, &[], body(2)), Err(BACK));
    let garbage = Ok((200, Bytes::from(vec![0u8; SIZE])));
    assert_eq!(kind(Live(2), &[], garbage), Err(FAILED_GET));
    assert_eq!(kind(Live(2), &[], Err("refused".into())), Err(FAILED_GET));
    assert_eq!(kind(Live(2), &[], Ok((503, Bytes::new()))), Err(FAILED_GET));

    let t0 = Instant::now();
    let t = |ms: u64| t0 + Duration::from_millis(ms);
    let ops = vec![
        Op {
            start: t(10),
            end: Some(t(20)),
            what: Mutation::Delete,
        },
        Op {
            start: t(40),
            end: None,
            what: Mutation::Put(1),
        },
    ];
    let m = Model {
        objs: vec![Obj {
            state: Deleted,
            written: 1,
            ops,
        }],
        during: true,
        tally: Tally::default(),
    };
    assert!(m.overlapping(0, t(0), t(5)).is_empty());
    assert_eq!(m.overlapping(0, t(15), t(30)), [Mutation::Delete]);
    assert_eq!(m.overlapping(0, t(0), t(100)).len(), 2);
    assert!(m.overlapping(0, t(21), t(39)).is_empty());
    assert_eq!(m.overlapping(0, t(50), t(60)), [Mutation::Put(1)]);
    assert_eq!(m.settled(&[Live(0)], t(21), t(39)), [Live(0)]);
    assert_eq!(m.settled(&[Live(0)], t(15), t(16)), [Unknown]);
}
