//! `gristmill-etl`: the runtimes that transform objects next to the data.
//!
//! A target keeps one [`Etls`] and hands it every ETL definition it learns from the cluster
//! metadata ([`Etls::apply`]); [`Etls::transform`] then runs an object through a named ETL:
//!
//! - `python`: a pool of `gristmill.etl_worker` processes (the file is embedded in this crate,
//!   so workers need only a Python with the standard library — plus whatever the user's code
//!   imports), each loaded with the user's module and fed one object at a time over a framed
//!   pipe protocol (see `python/gristmill/etl_worker.py`);
//! - `command`: any program, per object (stdin → stdout) or long-lived on the same protocol;
//! - `http`: an external service (e.g. a pod next to the target) that gets a POST per object.
//!
//! Workers run confined ([`sandbox`]): no network, an unprivileged user, an address-space
//! limit, a per-object timeout. A worker that fails an object by raising keeps serving; one that
//! hangs, crashes or runs out of memory is killed and replaced, and only that object fails.

pub mod confine;
mod deps;
pub mod sandbox;
mod stream;
#[cfg(test)]
mod tests;
mod worker;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use gristmill_core::etl::{EtlSpec, Runtime};
use gristmill_core::{ApiError, ErrorKind};
use tokio::io::AsyncWriteExt;

use crate::sandbox::Sandbox;
use crate::worker::Worker;

/// The worker program, run with `python -c`.
pub const WORKER_SOURCE: &str = include_str!("../../python/gristmill/etl_worker.py");

/// Lines of worker stderr kept per ETL (`grist etl logs`).
const LOG_LINES: usize = 500;

/// Why an object could not be transformed.
#[derive(Debug, thiserror::Error)]
pub enum EtlError {
    #[error("ETL {0:?} does not exist or is not running on this target")]
    Unknown(String),
    #[error("ETL {etl:?} failed on {path:?}: {message}")]
    Failed {
        etl: String,
        path: String,
        message: String,
    },
    #[error("ETL {etl:?} timed out on {path:?} after {after:?}")]
    Timeout {
        etl: String,
        path: String,
        after: Duration,
    },
}

impl From<EtlError> for ApiError {
    fn from(e: EtlError) -> Self {
        let kind = match e {
            EtlError::Unknown(_) => ErrorKind::NotFound,
            EtlError::Failed { .. } => ErrorKind::BadGateway,
            EtlError::Timeout { .. } => ErrorKind::GatewayTimeout,
        };
        ApiError::new(kind, e.to_string())
    }
}

/// Counters and recent log lines of one ETL on this target.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EtlStats {
    pub name: String,
    pub runtime: String,
    pub objects: u64,
    pub errors: u64,
    /// Workers replaced after a crash, timeout or memory exhaustion.
    pub restarts: u64,
    /// Python dependencies: `installing`, `ready` or `failed: <why>` (empty without any).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dependencies: String,
}

/// Shared between an ETL's workers: its log ring.
#[derive(Default)]
pub(crate) struct Log(Mutex<VecDeque<String>>);

impl Log {
    pub(crate) fn push(&self, line: String) {
        let mut l = self.0.lock().expect("etl log lock");
        if l.len() >= LOG_LINES {
            l.pop_front();
        }
        l.push_back(line);
    }

    fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .expect("etl log lock")
            .iter()
            .cloned()
            .collect()
    }
}

/// One running ETL.
struct EtlRun {
    spec: EtlSpec,
    /// Idle workers (python and framed command); a worker is taken for one object and put
    /// back if it is still healthy.
    idle: Mutex<Vec<Worker>>,
    /// Bounds concurrent objects to the pool size.
    slots: Arc<tokio::sync::Semaphore>,
    log: Arc<Log>,
    objects: AtomicU64,
    errors: AtomicU64,
    restarts: AtomicU64,
    http: reqwest::Client,
    /// Python: the interpreter of the workers, once its dependencies are installed (or why
    /// they could not be).
    python: tokio::sync::OnceCell<Result<String, String>>,
}

impl EtlRun {
    /// The workers' interpreter: the target's, or (with dependencies) that of the ETL's
    /// environment, installed on first use.
    async fn python(&self, installer: &deps::Installer, default: &str) -> Result<String, EtlError> {
        if self.spec.dependencies.is_empty() {
            return Ok(default.to_owned());
        }
        self.python
            .get_or_init(|| installer.python_for(&self.spec.dependencies, &self.log))
            .await
            .clone()
            .map_err(|message| failed(&self.spec, "", message))
    }

    fn dependencies_state(&self) -> String {
        match (self.spec.dependencies.is_empty(), self.python.get()) {
            (true, _) => String::new(),
            (false, None) => "installing".into(),
            (false, Some(Ok(_))) => "ready".into(),
            (false, Some(Err(e))) => format!("failed: {e}"),
        }
    }
}

/// A number no other call in this process returns (temporary names).
pub(crate) fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The ETLs of one target.
pub struct Etls {
    sandbox: Sandbox,
    python: String,
    installer: deps::Installer,
    runs: Mutex<HashMap<String, Arc<EtlRun>>>,
}

/// How a target runs ETL workers (`[etl]` in gristd's config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtlConfig {
    /// Interpreter of python ETLs and of their dependency environments; it must be usable by
    /// the sandbox's user. `None`: `/usr/bin/python3` when present, else `python3`.
    pub python: Option<String>,
    /// User the workers run as when the target runs as root (empty = the target's user).
    pub user: String,
    /// Confine workers (network namespace, user switch, memory limit).
    pub sandbox: bool,
    /// Where python `dependencies` are installed; `None`: `/var/lib/gristmill/etl-envs` when
    /// workers switch user, else `<user_cache_dir>/gristmill/etl-envs`.
    pub env_dir: Option<PathBuf>,
    /// The user's cache directory (`$XDG_CACHE_HOME`, `~/.cache`), resolved by the caller.
    pub user_cache_dir: PathBuf,
    /// Longest one `pip install` may take.
    pub install_timeout: Duration,
    /// `gristd`, which confines workers with Landlock as `gristd etl-sandbox`; `None`: no
    /// Landlock layer (set by the daemon to its own executable).
    pub helper: Option<PathBuf>,
    /// Paths no worker may read, checked against every grant: the mountpaths and the state
    /// directory (set by the target).
    pub protected: Vec<PathBuf>,
    /// A directory workers may write temporary files to (their `TMPDIR`), emptied when the
    /// target starts; `None`: none (set by the target, outside every protected path).
    pub scratch_dir: Option<PathBuf>,
}

impl Default for EtlConfig {
    fn default() -> Self {
        Self {
            python: None,
            user: "nobody".into(),
            sandbox: true,
            env_dir: None,
            user_cache_dir: std::env::temp_dir(),
            install_timeout: Duration::from_secs(600),
            helper: None,
            protected: Vec::new(),
            scratch_dir: None,
        }
    }
}

impl Etls {
    /// Probes the sandbox and picks the interpreter of python ETLs.
    pub fn new(config: EtlConfig) -> Self {
        let python = config
            .python
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| {
                if std::path::Path::new("/usr/bin/python3").exists() {
                    "/usr/bin/python3".into()
                } else {
                    "python3".into()
                }
            });
        let mut sandbox = Sandbox::probe(&config);
        // Workers read their environments and, when it lives outside the system's
        // directories, the interpreter's installation: its prefixes as Python reports them
        // (a venv and the installation it was made from), never a whole home directory.
        sandbox.reads.push(deps::env_root(&config, &sandbox));
        if sandbox.landlock.is_some() {
            let system = confine::system_read_paths();
            for prefix in confine::python_prefixes(&python) {
                if confine::is_granted(&prefix, &system) {
                    continue;
                }
                if prefix.parent().is_none() || prefix.components().count() < 3 {
                    // `/` or `/home`: far more than an interpreter.
                    tracing::warn!(prefix = %prefix.display(), "ETL sandbox: the python interpreter's prefix is too broad to grant; set etl.python to an interpreter installed in its own directory");
                    continue;
                }
                sandbox.reads.push(prefix);
            }
        }
        // A scratch directory workers may write (TMPDIR), this target's own.
        if let Some(dir) = &config.scratch_dir {
            match confine::make_scratch(dir) {
                Ok(()) => sandbox.scratch = Some(dir.clone()),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "ETL sandbox: no scratch directory; workers cannot write temporary files")
                }
            }
        }
        Self {
            installer: deps::Installer::new(&config, python.clone(), sandbox.clone()),
            sandbox,
            python,
            runs: Mutex::new(HashMap::new()),
        }
    }

    /// Makes the running set match the definitions: new or changed ETLs (re)start, removed or
    /// stopped ones stop (their workers are killed).
    pub fn apply(&self, specs: &BTreeMap<String, EtlSpec>) {
        let mut runs = self.runs.lock().expect("etls lock");
        runs.retain(|name, run| {
            let keep = specs.get(name).is_some_and(|s| s.running && *s == run.spec);
            if !keep {
                tracing::info!(etl = %name, "ETL stopped");
            }
            keep
        });
        for (name, spec) in specs {
            if spec.running && !runs.contains_key(name) {
                tracing::info!(etl = %name, runtime = ?spec.runtime, "ETL started");
                let run = Arc::new(EtlRun {
                    slots: Arc::new(tokio::sync::Semaphore::new(spec.workers())),
                    spec: spec.clone(),
                    idle: Mutex::new(Vec::new()),
                    log: Arc::default(),
                    objects: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                    restarts: AtomicU64::new(0),
                    http: reqwest::Client::builder()
                        .tcp_nodelay(true)
                        .build()
                        .unwrap_or_default(),
                    python: tokio::sync::OnceCell::new(),
                });
                // Install dependencies now rather than on the first object.
                if !spec.dependencies.is_empty()
                    && let Ok(rt) = tokio::runtime::Handle::try_current()
                {
                    let (run, installer) = (run.clone(), self.installer.clone());
                    let python = self.python.clone();
                    rt.spawn(async move {
                        if let Err(e) = run.python(&installer, &python).await {
                            tracing::warn!(error = %e, "ETL dependencies");
                        }
                    });
                }
                runs.insert(name.clone(), run);
            }
        }
    }

    /// Fails with [`EtlError::Unknown`] unless every named ETL runs here.
    pub fn check(&self, names: &[String]) -> Result<(), EtlError> {
        names.iter().try_for_each(|n| self.run(n).map(drop))
    }

    fn run(&self, name: &str) -> Result<Arc<EtlRun>, EtlError> {
        self.runs
            .lock()
            .expect("etls lock")
            .get(name)
            .cloned()
            .ok_or_else(|| EtlError::Unknown(name.to_owned()))
    }

    /// Runs `data` (the object `path`) through the ETLs named in order.
    pub async fn pipeline(
        &self,
        names: &[String],
        mut data: Bytes,
        path: &str,
        args: &str,
    ) -> Result<Bytes, EtlError> {
        for name in names {
            data = self.transform(name, data, path, args).await?;
        }
        Ok(data)
    }

    /// Runs one object through one ETL.
    pub async fn transform(
        &self,
        name: &str,
        data: Bytes,
        path: &str,
        args: &str,
    ) -> Result<Bytes, EtlError> {
        let run = self.run(name)?;
        let _slot = run
            .slots
            .acquire()
            .await
            .map_err(|_| EtlError::Unknown(name.into()))?;
        let started = std::time::Instant::now();
        let result = match run.spec.runtime {
            Runtime::Python => self.framed(&run, data, path, args).await,
            Runtime::Command if run.spec.framed => self.framed(&run, data, path, args).await,
            Runtime::Command => self.per_object(&run, data, path, args).await,
            Runtime::Http => http(&run, data, path, args).await,
        };
        run.objects.fetch_add(1, Ordering::Relaxed);
        if result.is_err() {
            run.errors.fetch_add(1, Ordering::Relaxed);
        }
        count_call(&run.spec.name, started, result.is_err());
        result
    }

    /// Whether objects sent to ETL `name` can be streamed through it ([`Etls::transform_stream`]):
    /// python ETLs (the worker streams both ways; a module with only `transform` gets the
    /// object whole on the worker's side, never on the target's), per-object commands and
    /// http services. Framed commands take objects whole.
    pub fn streams(&self, name: &str) -> Result<bool, EtlError> {
        let spec = &self.run(name)?.spec;
        Ok(match spec.runtime {
            Runtime::Python | Runtime::Http => true,
            Runtime::Command => !spec.framed,
        })
    }

    /// Runs one object through an ETL as a stream (see [`Etls::streams`]): `input` (`len`
    /// bytes) is fed to
    /// the worker, program or service while its result comes back on the returned channel,
    /// so objects of any size pass with bounded memory. The channel ends after the last
    /// piece, or with the error that ended the transform (then the result is incomplete).
    /// Starting a worker or program fails here, before anything is sent. Without progress in
    /// either direction for the ETL's timeout the transform is stopped.
    pub async fn transform_stream<S>(
        &self,
        name: &str,
        input: S,
        len: u64,
        path: &str,
        args: &str,
    ) -> Result<tokio::sync::mpsc::Receiver<Result<Bytes, EtlError>>, EtlError>
    where
        S: futures::Stream<Item = std::io::Result<Bytes>> + Send + Unpin + 'static,
    {
        let run = self.run(name)?;
        if !self.streams(name)? {
            return Err(failed(
                &run.spec,
                path,
                "framed commands do not stream".into(),
            ));
        }
        let slot = run
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| EtlError::Unknown(name.into()))?;
        let started = std::time::Instant::now();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let (path, args) = (path.to_owned(), args.to_owned());
        let spec = &run.spec;
        match spec.runtime {
            Runtime::Python => {
                let mut worker = self.take_worker(&run).await?;
                tokio::spawn(async move {
                    let _slot = slot;
                    let spec = &run.spec;
                    let ended = worker
                        .call_stream(&path, &args, input, &tx, spec.timeout())
                        .await;
                    let result = match ended {
                        Ok(worker::StreamEnd::Done) => {
                            run.idle.lock().expect("etl idle lock").push(worker);
                            Ok(())
                        }
                        Ok(worker::StreamEnd::Failed(message)) => {
                            run.idle.lock().expect("etl idle lock").push(worker);
                            Err(stream::StreamError::Failed(message))
                        }
                        Err(e) => {
                            run.restarts.fetch_add(1, Ordering::Relaxed);
                            let status = worker.kill().await;
                            Err(if e.kind() == std::io::ErrorKind::TimedOut {
                                stream::StreamError::Stalled
                            } else {
                                stream::StreamError::Failed(format!(
                                    "worker stopped ({status}): {e}"
                                ))
                            })
                        }
                    };
                    finish_stream(&run, &path, started, result, &tx).await;
                });
            }
            Runtime::Command => {
                self.confinable(spec, &path)?;
                let mut env = spec.env.clone();
                env.insert("GRIST_OBJECT".into(), path.clone());
                env.insert("GRIST_ETL_ARGS".into(), args.clone());
                let child = self
                    .sandbox
                    .command(
                        &spec.command[0],
                        &spec.command[1..],
                        spec.memory_limit(),
                        &env,
                    )
                    .spawn()
                    .map_err(|e| {
                        failed(spec, &path, format!("starting {:?}: {e}", spec.command[0]))
                    })?;
                tokio::spawn(async move {
                    let _slot = slot;
                    let result =
                        stream::command(child, input, &tx, run.spec.timeout(), &run.log).await;
                    finish_stream(&run, &path, started, result, &tx).await;
                });
            }
            Runtime::Http => {
                let url = http_url(spec, &path);
                tokio::spawn(async move {
                    let _slot = slot;
                    let idle = run.spec.timeout();
                    let result = stream::http(&run.http, &url, &args, input, len, &tx, idle).await;
                    finish_stream(&run, &path, started, result, &tx).await;
                });
            }
        }
        Ok(rx)
    }

    /// Python or a framed command: an idle worker (or a new one) does the object.
    async fn framed(
        &self,
        run: &Arc<EtlRun>,
        data: Bytes,
        path: &str,
        args: &str,
    ) -> Result<Bytes, EtlError> {
        let spec = &run.spec;
        let mut worker = self.take_worker(run).await?;
        match tokio::time::timeout(spec.timeout(), worker.call(path, args, &data)).await {
            Ok(Ok(Ok(out))) => {
                run.idle.lock().expect("etl idle lock").push(worker);
                Ok(out)
            }
            // The transform raised: the worker is fine, the object failed.
            Ok(Ok(Err(message))) => {
                run.idle.lock().expect("etl idle lock").push(worker);
                Err(failed(spec, path, message))
            }
            // Crashed, killed (memory), or broke the protocol: replace it.
            Ok(Err(e)) => {
                run.restarts.fetch_add(1, Ordering::Relaxed);
                let status = worker.kill().await;
                Err(failed(spec, path, format!("worker died ({status}): {e}")))
            }
            Err(_) => {
                run.restarts.fetch_add(1, Ordering::Relaxed);
                worker.kill().await;
                Err(EtlError::Timeout {
                    etl: spec.name.clone(),
                    path: path.into(),
                    after: spec.timeout(),
                })
            }
        }
    }

    /// An idle worker of the ETL, or a new one.
    async fn take_worker(&self, run: &Arc<EtlRun>) -> Result<Worker, EtlError> {
        let idle = run.idle.lock().expect("etl idle lock").pop();
        match idle {
            Some(w) => Ok(w),
            None => self.spawn_worker(run).await,
        }
    }

    async fn spawn_worker(&self, run: &Arc<EtlRun>) -> Result<Worker, EtlError> {
        let spec = &run.spec;
        self.confinable(spec, "")?;
        let (program, args, code) = match spec.runtime {
            Runtime::Python => (
                run.python(&self.installer, &self.python).await?,
                vec!["-c".into(), WORKER_SOURCE.into()],
                Some(spec.code.as_str()),
            ),
            _ => (spec.command[0].clone(), spec.command[1..].to_vec(), None),
        };
        let cmd = self
            .sandbox
            .command(&program, &args, spec.memory_limit(), &spec.env);
        Worker::start(cmd, code, run.log.clone(), spec.timeout())
            .await
            .map_err(|message| failed(spec, "", format!("starting a worker: {message}")))
    }

    /// A command per object: the object on stdin, the result on stdout.
    async fn per_object(
        &self,
        run: &Arc<EtlRun>,
        data: Bytes,
        path: &str,
        args: &str,
    ) -> Result<Bytes, EtlError> {
        let spec = &run.spec;
        self.confinable(spec, path)?;
        let mut env = spec.env.clone();
        env.insert("GRIST_OBJECT".into(), path.into());
        env.insert("GRIST_ETL_ARGS".into(), args.into());
        let mut cmd = self.sandbox.command(
            &spec.command[0],
            &spec.command[1..],
            spec.memory_limit(),
            &env,
        );
        let mut child = cmd
            .spawn()
            .map_err(|e| failed(spec, path, format!("starting {:?}: {e}", spec.command[0])))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let feed = tokio::spawn(async move {
            let _ = stdin.write_all(&data).await;
        });
        let out = tokio::time::timeout(spec.timeout(), child.wait_with_output()).await;
        feed.abort();
        let out = match out {
            Err(_) => {
                return Err(EtlError::Timeout {
                    etl: spec.name.clone(),
                    path: path.into(),
                    after: spec.timeout(),
                });
            }
            Ok(Err(e)) => return Err(failed(spec, path, e.to_string())),
            Ok(Ok(o)) => o,
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        for line in stderr
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            run.log.push(line.to_owned());
        }
        if !out.status.success() {
            let last = stderr.lines().last().unwrap_or("").to_owned();
            return Err(failed(
                spec,
                path,
                format!("exited with {}: {last}", out.status),
            ));
        }
        Ok(Bytes::from(out.stdout))
    }

    /// Counters of one ETL (or all) on this target.
    pub fn stats(&self) -> Vec<EtlStats> {
        let runs = self.runs.lock().expect("etls lock");
        let mut out: Vec<EtlStats> = runs
            .values()
            .map(|r| EtlStats {
                name: r.spec.name.clone(),
                runtime: format!("{:?}", r.spec.runtime).to_lowercase(),
                objects: r.objects.load(Ordering::Relaxed),
                errors: r.errors.load(Ordering::Relaxed),
                restarts: r.restarts.load(Ordering::Relaxed),
                dependencies: r.dependencies_state(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Recent worker output of an ETL.
    pub fn logs(&self, name: &str) -> Result<Vec<String>, EtlError> {
        Ok(self.run(name)?.log.lines())
    }
}

impl Etls {
    /// Code runs here only where the sandbox can confine it (or it was turned off).
    fn confinable(&self, spec: &EtlSpec, path: &str) -> Result<(), EtlError> {
        match self.sandbox.refusal() {
            Some(why) => Err(failed(
                spec,
                path,
                format!("ETL sandbox unavailable: {why}"),
            )),
            None => Ok(()),
        }
    }
}

fn failed(spec: &EtlSpec, path: &str, message: String) -> EtlError {
    EtlError::Failed {
        etl: spec.name.clone(),
        path: path.to_owned(),
        message,
    }
}

/// Counts a streamed object and, if it failed, ends its channel with the error.
/// Metrics of one transform: `grist_etl_calls_total`, `_errors_total`, `_duration_seconds`
/// by ETL name.
fn count_call(etl: &str, started: std::time::Instant, failed: bool) {
    let etl = etl.to_owned();
    metrics::counter!("grist_etl_calls_total", "etl" => etl.clone()).increment(1);
    if failed {
        metrics::counter!("grist_etl_errors_total", "etl" => etl.clone()).increment(1);
    }
    metrics::histogram!("grist_etl_duration_seconds", "etl" => etl)
        .record(started.elapsed().as_secs_f64());
}

async fn finish_stream(
    run: &EtlRun,
    path: &str,
    started: std::time::Instant,
    result: Result<(), stream::StreamError>,
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, EtlError>>,
) {
    run.objects.fetch_add(1, Ordering::Relaxed);
    count_call(&run.spec.name, started, result.is_err());
    let error = match result {
        Ok(()) => return,
        Err(stream::StreamError::Stalled) => EtlError::Timeout {
            etl: run.spec.name.clone(),
            path: path.to_owned(),
            after: run.spec.timeout(),
        },
        Err(stream::StreamError::Failed(message)) => failed(&run.spec, path, message),
    };
    run.errors.fetch_add(1, Ordering::Relaxed);
    let _ = tx.send(Err(error)).await;
}

/// Where an http ETL receives object `path`.
fn http_url(spec: &EtlSpec, path: &str) -> String {
    format!(
        "{}/{}",
        spec.url.trim_end_matches('/'),
        gristmill_core::name::encode_path(path)
    )
}

/// An external service: `POST <url>/<object>?etl_args=...` with the object as the body.
async fn http(run: &Arc<EtlRun>, data: Bytes, path: &str, args: &str) -> Result<Bytes, EtlError> {
    let spec = &run.spec;
    let url = http_url(spec, path);
    let send = run
        .http
        .post(&url)
        .query(&[("etl_args", args)])
        .body(data)
        .send();
    let resp = match tokio::time::timeout(spec.timeout(), send).await {
        Err(_) => {
            return Err(EtlError::Timeout {
                etl: spec.name.clone(),
                path: path.into(),
                after: spec.timeout(),
            });
        }
        Ok(Err(e)) => return Err(failed(spec, path, format!("{url}: {e}"))),
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    let body = tokio::time::timeout(spec.timeout(), resp.bytes())
        .await
        .map_err(|_| EtlError::Timeout {
            etl: spec.name.clone(),
            path: path.into(),
            after: spec.timeout(),
        })?
        .map_err(|e| failed(spec, path, format!("{url}: {e}")))?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned();
        return Err(failed(
            spec,
            path,
            format!("{url} answered {status}: {text}"),
        ));
    }
    Ok(body)
}
