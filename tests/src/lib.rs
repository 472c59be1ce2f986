//! Cluster harness for integration tests: starts real `gristd` processes (one proxy, N targets)
//! on 127.0.0.1 with per-test temp directories, and stops them when dropped.
//!
//! The binary is `$GRISTD_BIN`, else `<workspace>/build/<profile>/gristd`; the README's test
//! command builds it first.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gristmill_core::{Bck, ClusterMap, Provider};

pub mod proxies;
pub mod secure;

/// Path of the `gristd` binary under test.
pub fn gristd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GRISTD_BIN") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    for profile in ["debug", "release"] {
        let p = root.join("build").join(profile).join("gristd");
        if p.exists() {
            return p;
        }
    }
    panic!("gristd not built: run `cargo build --bins` first (or set GRISTD_BIN)");
}

/// A free TCP port on 127.0.0.1 (bound, then released): see [`free_port_on`].
pub fn free_port() -> u16 {
    free_port_on("127.0.0.1")
}

/// A free TCP port on `ip` (bound, then released), below the kernel's ephemeral range.
///
/// A port the kernel picked (`bind` to port 0) is one it hands out again: as the local port of
/// any outgoing connection or to the next `--listen …:0` of a target, in this test or in one
/// running beside it. Between this pick and the node's own bind, such a socket took the port
/// once on CI and the proxy could not listen. Below the ephemeral range only another test's
/// pick can take it, at random among ~17,000 ports.
pub fn free_port_on(ip: &str) -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 15_000u16.min(ephemeral_low.saturating_sub(1_000));
    for _ in 0..1_000 {
        let port = rand::random_range(low..ephemeral_low);
        if std::net::TcpListener::bind((ip, port)).is_ok() {
            return port;
        }
    }
    let l = std::net::TcpListener::bind((ip, 0)).expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// One node process and how to start it again.
pub struct NodeProcess {
    pub name: String,
    args: Vec<String>,
    /// Extra environment for the process (e.g. backend endpoint and credentials); changes
    /// apply at the next start.
    pub env: Vec<(String, String)>,
    child: Option<Child>,
    log: PathBuf,
    /// Run as this user and group id instead of the test's (`setpriv`; the test runs as root).
    run_as: Option<u32>,
}

/// The out-of-space mark a test's target gets unless the test sets marks (or a config file) of
/// its own: 100% instead of 95%, so only a write that does not fit is refused. The default
/// counts the host's whole disk, which a CI machine's build and other tests may fill past 95%
/// (CI's was 95.6 % full once); a test that is not about space must not fail because of that.
fn host_disk_marks(args: &[String], env: &[(String, String)]) -> Vec<(String, String)> {
    let is_target = matches!(
        args.first().map(String::as_str),
        Some("target" | "playground")
    );
    let own_marks = env
        .iter()
        .any(|(k, _)| k == "GRISTD_CONFIG" || (k.starts_with("GRISTD_") && k.ends_with("_WM")));
    if is_target && !own_marks {
        vec![("GRISTD_OUT_OF_SPACE_WM".to_owned(), "100".to_owned())]
    } else {
        Vec::new()
    }
}

impl NodeProcess {
    pub fn spawn(
        name: &str,
        args: Vec<String>,
        env: Vec<(String, String)>,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        Self::spawn_as(name, args, env, dir, None)
    }

    /// Like [`NodeProcess::spawn`], as user and group `run_as` when given.
    pub fn spawn_as(
        name: &str,
        args: Vec<String>,
        env: Vec<(String, String)>,
        dir: &Path,
        run_as: Option<u32>,
    ) -> anyhow::Result<Self> {
        let mut n = Self {
            name: name.to_owned(),
            args,
            env,
            child: None,
            log: dir.join(format!("{name}.log")),
            run_as,
        };
        n.start()?;
        Ok(n)
    }

    pub fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        // `setpriv` execs gristd: the child's pid is gristd's.
        let mut command = match self.run_as {
            Some(id) => {
                let mut c = Command::new("setpriv");
                c.args([
                    format!("--reuid={id}"),
                    format!("--regid={id}"),
                    "--clear-groups".into(),
                    "--".into(),
                ])
                .arg(gristd_bin());
                c
            }
            None => Command::new(gristd_bin()),
        };
        let child = command
            .args(&self.args)
            .envs(host_disk_marks(&self.args, &self.env))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.name))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL: no chance to clean up, like a power cut for the process.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to the running process.
    pub fn signal(&self, signal: &str) {
        if let Some(c) = self.child.as_ref() {
            let _ = Command::new("kill")
                .args([&format!("-{signal}"), &c.id().to_string()])
                .status();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Peak resident memory of the running process (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// The node's whole log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last 30 lines of the log, after the process's final error if it exited with one
    /// (`Error: …` and its causes come before a backtrace that would fill the tail).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines.len().saturating_sub(30);
        let error = lines.iter().rposition(|l| l.starts_with("Error: "));
        match error {
            Some(e) if e < tail => {
                let cause = &lines[e..lines.len().min(e + 8)];
                format!("{}\n…\n{}", cause.join("\n"), lines[tail..].join("\n"))
            }
            _ => lines[tail..].join("\n"),
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A running cluster: one proxy and `targets` targets.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub endpoint: String,
    pub proxy: NodeProcess,
    pub targets: Vec<NodeProcess>,
    /// Mountpath directories of each target, in target order.
    pub mountpaths: Vec<Vec<PathBuf>>,
    pub http: reqwest::Client,
}

impl Cluster {
    pub async fn start(targets: usize, mountpaths_per_target: usize) -> anyhow::Result<Self> {
        Self::start_with(targets, mountpaths_per_target, &[]).await
    }

    /// Like [`Cluster::start`], with extra arguments for the proxy (e.g. `--s3-users`).
    pub async fn start_with(
        targets: usize,
        mountpaths_per_target: usize,
        proxy_args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_full(targets, mountpaths_per_target, proxy_args, &[]).await
    }

    /// Like [`Cluster::start_with`], with extra environment for every target (backend
    /// endpoints and credentials of remote buckets).
    pub async fn start_full(
        targets: usize,
        mountpaths_per_target: usize,
        proxy_args: &[&str],
        target_env: &[(String, String)],
    ) -> anyhow::Result<Self> {
        Self::start_each(targets, mountpaths_per_target, proxy_args, |_| {
            target_env.to_vec()
        })
        .await
    }

    /// Like [`Cluster::start_full`], with each target's extra environment given by its index
    /// (e.g. a skewed clock for some of them: [`faketime_env`]).
    pub async fn start_each(
        targets: usize,
        mountpaths_per_target: usize,
        proxy_args: &[&str],
        target_env: impl Fn(usize) -> Vec<(String, String)>,
    ) -> anyhow::Result<Self> {
        Self::start_inner(targets, mountpaths_per_target, proxy_args, target_env, None).await
    }

    /// Like [`Cluster::start`], with every node run as an unprivileged user: uid and gid
    /// `uid` when the test runs as root (its directory is handed to that user), else the
    /// test's own user. Their caches (ETL environments) are in the cluster's directory.
    pub async fn start_unprivileged(
        targets: usize,
        mountpaths_per_target: usize,
        uid: u32,
    ) -> anyhow::Result<Self> {
        let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                == Some("0")
        });
        let run_as = root.then_some(uid);
        Self::start_inner(targets, mountpaths_per_target, &[], |_| Vec::new(), run_as).await
    }

    async fn start_inner(
        targets: usize,
        mountpaths_per_target: usize,
        proxy_args: &[&str],
        target_env: impl Fn(usize) -> Vec<(String, String)>,
        run_as: Option<u32>,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("gristmill-test-")
            .tempdir()?;
        let mut base_env = Vec::new();
        if let Some(id) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(id), Some(id))?;
            let cache = dir.path().join("cache");
            std::fs::create_dir(&cache)?;
            std::os::unix::fs::chown(&cache, Some(id), Some(id))?;
            base_env.push(("XDG_CACHE_HOME".to_owned(), cache.display().to_string()));
        }
        let port = free_port();
        let endpoint = format!("http://127.0.0.1:{port}");
        let proxy = NodeProcess::spawn_as(
            "proxy",
            [
                "proxy".into(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--state-dir".into(),
                dir.path().join("proxy").display().to_string(),
            ]
            .into_iter()
            .chain(proxy_args.iter().map(|a| a.to_string()))
            .collect(),
            base_env.clone(),
            dir.path(),
            run_as,
        )?;
        let mut nodes = Vec::new();
        let mut mps = Vec::new();
        for i in 0..targets {
            let state = dir.path().join(format!("target-{i}"));
            let mut args = vec![
                "target".into(),
                // Port 0: the target advertises whatever port it gets.
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--state-dir".into(),
                state.display().to_string(),
                "--join".into(),
                endpoint.clone(),
            ];
            let mut these = Vec::new();
            for m in 0..mountpaths_per_target {
                let mp = state.join(format!("mp{m}"));
                args.extend(["--mountpath".into(), mp.display().to_string()]);
                these.push(mp);
            }
            nodes.push(NodeProcess::spawn_as(
                &format!("target-{i}"),
                args,
                [base_env.clone(), target_env(i)].concat(),
                dir.path(),
                run_as,
            )?);
            mps.push(these);
        }
        let cluster = Self {
            dir,
            endpoint,
            proxy,
            targets: nodes,
            mountpaths: mps,
            http: reqwest::Client::builder().tcp_nodelay(true).build()?,
        };
        cluster.wait_for_targets(targets).await?;
        Ok(cluster)
    }

    /// `GET url` answered with JSON (any node's URL); panics on a transport error or a body
    /// that is not JSON.
    pub async fn get_json(&self, url: &str) -> serde_json::Value {
        let resp = self.http.get(url).send().await.expect("GET");
        resp.json().await.expect("a JSON body")
    }

    pub async fn smap(&self) -> anyhow::Result<ClusterMap> {
        Ok(self
            .http
            .get(format!("{}/v1/cluster?what=smap", self.endpoint))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Waits until the proxy's map lists `n` targets and each of them answers health checks.
    pub async fn wait_for_targets(&self, n: usize) -> anyhow::Result<ClusterMap> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(smap) = self.smap().await
                && smap.tmap.len() >= n
            {
                let mut healthy = 0;
                for t in smap.tmap.values() {
                    if let Ok(r) = self.http.get(format!("{}/v1/health", t.url())).send().await
                        && r.status().is_success()
                    {
                        healthy += 1;
                    }
                }
                if healthy >= n {
                    return Ok(smap);
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "cluster did not reach {n} targets; proxy log:\n{}",
                    self.proxy.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Restarts one target and waits until the primary's map has it at its (possibly new) URL
    /// and it answers.
    pub async fn restart_target(&mut self, i: usize) -> anyhow::Result<ClusterMap> {
        let before = self.smap().await?.version;
        self.targets[i].start()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let smap = self.smap().await?;
            // Re-registering at a new port bumps the map version.
            if smap.version > before {
                let mut up = 0;
                for t in smap.tmap.values() {
                    if let Ok(r) = self.http.get(format!("{}/v1/health", t.url())).send().await
                        && r.status().is_success()
                    {
                        up += 1;
                    }
                }
                if up == smap.tmap.len() {
                    return Ok(smap);
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "target-{i} did not come back:\n{}",
                    self.targets[i].log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts one more target (same environment as target 0) and waits until the map has it;
    /// returns its index.
    pub async fn add_target(&mut self) -> anyhow::Result<usize> {
        let i = self.targets.len();
        let state = self.dir.path().join(format!("target-{i}"));
        let mp = state.join("mp0");
        let args = vec![
            "target".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--state-dir".into(),
            state.display().to_string(),
            "--join".into(),
            self.endpoint.clone(),
            "--mountpath".into(),
            mp.display().to_string(),
        ];
        let env = self
            .targets
            .first()
            .map(|t| t.env.clone())
            .unwrap_or_default();
        self.targets.push(NodeProcess::spawn(
            &format!("target-{i}"),
            args,
            env,
            self.dir.path(),
        )?);
        self.mountpaths.push(vec![mp]);
        self.wait_for_targets(i + 1).await?;
        Ok(i)
    }

    /// The daemon id of target process `i`: the map's node whose URL that process logged
    /// last when it started (targets listen on port 0).
    pub async fn target_id(&self, i: usize) -> anyhow::Result<String> {
        let log = self.targets[i].log_text();
        let started = log
            .lines()
            .rfind(|l| l.contains("target starting"))
            .with_context(|| format!("target-{i} has not started"))?;
        let smap = self.smap().await?;
        smap.tmap
            .values()
            .find(|n| {
                // The URL exactly: not a prefix of a longer port number.
                started.match_indices(n.url()).any(|(at, u)| {
                    !started[at + u.len()..].starts_with(|ch: char| ch.is_ascii_digit())
                })
            })
            .map(|n| n.daemon_id.clone())
            .with_context(|| format!("target-{i} is not in the cluster map"))
    }

    /// The URL of the first target in the cluster map (for tests that talk to a target).
    pub async fn first_target_url(&self) -> String {
        let smap = self.smap().await.expect("cluster map");
        smap.tmap
            .values()
            .next()
            .expect("a target in the map")
            .url()
            .to_owned()
    }

    /// The names one target holds of a native bucket (its local listing, not the cluster's).
    pub async fn names_on(&self, target_url: &str, bucket: &str) -> Vec<String> {
        let entries = self.entries_on(target_url, bucket).await;
        entries.into_iter().map(|e| e.name).collect()
    }

    /// The entries (name, size, mtime...) one target holds of a native bucket.
    pub async fn entries_on(
        &self,
        target_url: &str,
        bucket: &str,
    ) -> Vec<gristmill_core::api::ListEntry> {
        let page: gristmill_core::api::ListObjectsPage = self
            .http
            .get(format!("{target_url}/v1/buckets/{bucket}?provider=ais"))
            .json(&serde_json::json!({"action": "list", "value": {"pagesize": 100000}}))
            .send()
            .await
            .expect("target listing")
            .json()
            .await
            .expect("target listing page");
        page.entries
    }

    /// Runs the `grist` CLI against this cluster (blocking); the caller checks the outcome.
    pub fn grist(&self, args: &[&str]) -> std::process::Output {
        let bin = gristd_bin().with_file_name("grist");
        std::process::Command::new(&bin)
            .args(args)
            .env("GRIST_ENDPOINT", &self.endpoint)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()))
    }

    /// Runs `grist` and returns its stdout, panicking with its stderr if it failed.
    pub fn grist_ok(&self, args: &[&str]) -> String {
        let out = self.grist(args);
        assert!(
            out.status.success(),
            "grist {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint)
    }

    pub async fn create_bucket(&self, name: &str) -> anyhow::Result<Bck> {
        let r = self
            .http
            .post(self.url(&format!("/v1/buckets/{name}?provider=ais")))
            .json(&serde_json::json!({"action": "create-bck"}))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("create {name}: {} {}", r.status(), r.text().await?);
        }
        Ok(Bck::new(name, Provider::Ais)?)
    }
}

/// Environment that runs a process under libfaketime (Debian's `faketime` package) with its
/// wall clock shifted by `offset` (e.g. `"+10m"`, `"-10m"`); monotonic clocks are left alone.
pub fn faketime_env(offset: &str) -> anyhow::Result<Vec<(String, String)>> {
    const LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    if !Path::new(LIB).exists() {
        bail!("{LIB} is missing: install the faketime package (scripts/test.sh does)");
    }
    Ok(vec![
        ("LD_PRELOAD".into(), LIB.into()),
        ("FAKETIME".into(), offset.into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ])
}

/// Deterministic pseudo-random bytes for object `i` (so content can be re-derived to verify).
pub fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
