//! A run: optional bucket creation and populate pass, then the timed phase; each phase spawns
//! the workers and a reporter that prints a line per interval and the final numbers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Url;

use crate::client::{self, OpError};
use crate::config::{Config, Order};
use crate::stats::{Op, Recorder, Summary, Totals, process_cpu_seconds};
use crate::workload::{ObjectSet, Schedule};

/// Error details printed to stderr before going quiet (the counts are always complete).
const MAX_ERRORS_SHOWN: usize = 5;

/// Runs everything `cfg` asks for; `Ok(false)` when some operation failed.
pub async fn run(cfg: Config) -> anyhow::Result<bool> {
    let set = Arc::new(ObjectSet::new(
        &cfg.prefix,
        cfg.objects,
        cfg.min_size,
        cfg.max_size,
    ));
    if let Some(dir) = &cfg.write_files {
        let bytes = set.write_files(dir)?;
        eprintln!(
            "wrote {} objects ({bytes} bytes) under {}",
            set.len(),
            dir.display()
        );
        return Ok(true);
    }
    let client = client::build_client(&cfg)?;
    let mut urls = client::object_urls(&cfg, &set).await?;
    if let Some(member) = &cfg.archpath {
        urls = client::with_archpath(urls, member);
    }
    let urls = Arc::new(urls);
    if cfg.create_bucket {
        client::create_bucket(&cfg.endpoint, &cfg.bucket).await?;
    }
    if cfg.evict_first {
        client::evict(&cfg.endpoint, &cfg.bucket).await?;
        eprintln!("evicted {}: the timed GETs are cold", cfg.bucket);
    }
    eprintln!(
        "grist-bench: mode {:?}, {} objects of {}, {} workers, {} threads, put {}%, order {:?}, seed {}",
        cfg.mode,
        set.len(),
        size_desc(cfg.min_size, cfg.max_size),
        cfg.workers,
        cfg.threads,
        cfg.pct_put,
        cfg.order,
        cfg.seed
    );
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupted: finishing in-flight requests");
                stop.store(true, Ordering::Relaxed);
            }
        });
    }
    if !cfg.json {
        println!("{}", Summary::text_header());
    }
    let mut clean = true;
    if cfg.put_first {
        let phase = Phase {
            name: "populate",
            schedule: Schedule::new(set.len(), Order::Seq, cfg.seed, Some(set.len() as u64)),
            pct_put: 100,
            duration: None,
        };
        clean &= run_phase(&cfg, phase, &client, &set, &urls, &stop).await;
    }
    if !stop.load(Ordering::Relaxed) {
        let phase = Phase {
            name: "final",
            schedule: Schedule::new(set.len(), cfg.order, cfg.seed, cfg.limit),
            pct_put: cfg.pct_put,
            duration: cfg.duration,
        };
        clean &= run_phase(&cfg, phase, &client, &set, &urls, &stop).await;
    }
    Ok(clean)
}

fn size_desc(min: u64, max: u64) -> String {
    if min == max {
        format!("{min} B")
    } else {
        format!("{min}..={max} B")
    }
}

/// One timed pass of the workers.
struct Phase {
    /// Label of the closing line (`populate` or `final`).
    name: &'static str,
    schedule: Schedule,
    pct_put: u32,
    duration: Option<Duration>,
}

/// Runs one phase to its end and prints its numbers; `false` when some operation failed.
async fn run_phase(
    cfg: &Config,
    phase: Phase,
    client: &reqwest::Client,
    set: &Arc<ObjectSet>,
    urls: &Arc<Vec<Url>>,
    stop: &Arc<AtomicBool>,
) -> bool {
    let start = Instant::now();
    let cpu_start = process_cpu_seconds();
    let shared = Arc::new(Shared {
        client: client.clone(),
        set: set.clone(),
        urls: urls.clone(),
        schedule: phase.schedule,
        shown: AtomicUsize::new(0),
        stop: stop.clone(),
        deadline: phase.duration.map(|d| start + d),
        pct_put: phase.pct_put,
        verify: cfg.verify,
        signer: cfg.s3.as_ref().map(client::Signer::new),
        member: cfg.archpath.is_some(),
        batch: cfg.batch_size,
        endpoint: cfg.endpoint.clone(),
        bucket: cfg.bucket.clone(),
    });
    let recorders: Vec<Arc<Recorder>> = (0..cfg.workers)
        .map(|_| Arc::new(Recorder::default()))
        .collect();
    let mut handles = tokio::task::JoinSet::new();
    for (w, recorder) in recorders.iter().enumerate() {
        let worker = Worker {
            shared: shared.clone(),
            recorder: recorder.clone(),
            rng: StdRng::seed_from_u64(
                cfg.seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ),
        };
        handles.spawn(worker.run());
    }

    let mut totals = Totals::default();
    let mut last = start;
    let mut ticker = cfg.interval.map(|i| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + i, i);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    loop {
        let tick = async {
            match ticker.as_mut() {
                Some(t) => t.tick().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            joined = handles.join_next() => match joined {
                None => break,
                Some(Ok(())) => {}
                Some(Err(e)) => eprintln!("worker failed: {e}"),
            },
            _ = tick => {
                let mut iv = Totals::default();
                for r in &recorders {
                    r.drain_into(&mut iv);
                }
                let now = Instant::now();
                for mut s in iv.summaries("interval", now - last) {
                    s.elapsed_s = round1((now - start).as_secs_f64());
                    print_summary(cfg, &s);
                }
                totals.merge(&iv);
                last = now;
            }
        }
    }
    let elapsed = start.elapsed();
    for r in &recorders {
        r.drain_into(&mut totals);
    }
    let client_cpu = match (cpu_start, process_cpu_seconds()) {
        (Some(a), Some(b)) => Some(((b - a) * 100.0).round() / 100.0),
        _ => None,
    };
    for mut s in totals.summaries(phase.name, elapsed) {
        s.client_cpu_s = client_cpu;
        print_summary(cfg, &s);
    }
    if let (Some(cpu), false) = (client_cpu, cfg.json) {
        println!(
            "{:<8} client CPU {cpu:.2} s ({:.0}% of one core)",
            phase.name,
            cpu / elapsed.as_secs_f64().max(1e-9) * 100.0
        );
    }
    if !totals.error_kinds.is_empty() {
        let kinds: Vec<String> = totals
            .error_kinds
            .iter()
            .map(|(k, v)| format!("{v}x {k}"))
            .collect();
        eprintln!(
            "{}: {} errors: {}",
            phase.name,
            totals.errors(),
            kinds.join(", ")
        );
    }
    totals.errors() == 0
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn print_summary(cfg: &Config, s: &Summary) {
    if cfg.json {
        println!("{}", serde_json::to_string(s).expect("summaries serialize"));
    } else {
        println!("{}", s.text());
    }
}

/// What every worker of a phase shares.
struct Shared {
    client: reqwest::Client,
    set: Arc<ObjectSet>,
    urls: Arc<Vec<Url>>,
    schedule: Schedule,
    /// Error details printed so far.
    shown: AtomicUsize,
    stop: Arc<AtomicBool>,
    deadline: Option<Instant>,
    pct_put: u32,
    verify: bool,
    /// `--mode s3`: requests are signed.
    signer: Option<client::Signer>,
    /// `--archpath`: GETs read archive members (their sizes are not the objects').
    member: bool,
    /// `--batch-size`: every GET is a get-batch of this many objects.
    batch: Option<usize>,
    endpoint: String,
    bucket: gristmill_core::Bck,
}

/// One closed-loop worker: next object, one request, record, repeat.
struct Worker {
    shared: Arc<Shared>,
    recorder: Arc<Recorder>,
    rng: StdRng,
}

impl Worker {
    async fn run(mut self) {
        let s = self.shared.clone();
        loop {
            if s.stop.load(Ordering::Relaxed) || s.deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            let Some(i) = s.schedule.next() else { return };
            if let Some(n) = s.batch {
                // This object and the next n - 1 of the schedule, in one request.
                let mut names = vec![s.set.name(i)];
                while names.len() < n {
                    let Some(j) = s.schedule.next() else { break };
                    names.push(s.set.name(j));
                }
                let started = Instant::now();
                let result = client::get_batch(&s.client, &s.endpoint, &s.bucket, &names).await;
                match result {
                    Ok(bytes) => self.recorder.success(Op::Get, started.elapsed(), bytes),
                    Err(e) => self.failed(Op::Get, e),
                }
                continue;
            }
            let op = if s.pct_put >= 100
                || (s.pct_put > 0 && self.rng.random_range(0..100) < s.pct_put)
            {
                Op::Put
            } else {
                Op::Get
            };
            let url = &s.urls[i];
            let started = Instant::now();
            let result = match op {
                Op::Get => {
                    let content = (!s.member).then(|| s.set.content(i));
                    let signer = s.signer.as_ref();
                    client::get(&s.client, url, content.as_ref(), s.verify, signer).await
                }
                Op::Put => {
                    let signer = s.signer.as_ref();
                    client::put(&s.client, url, s.set.content(i), signer).await
                }
            };
            match result {
                Ok(bytes) => self.recorder.success(op, started.elapsed(), bytes),
                Err(e) => self.failed(op, e),
            }
        }
    }

    fn failed(&self, op: Op, e: OpError) {
        self.recorder.error(op, &e.class);
        let n = self.shared.shown.fetch_add(1, Ordering::Relaxed);
        if n < MAX_ERRORS_SHOWN {
            eprintln!("error: {}: {}", e.class, e.detail);
        } else if n == MAX_ERRORS_SHOWN {
            eprintln!("(further errors are counted, not shown)");
        }
    }
}
