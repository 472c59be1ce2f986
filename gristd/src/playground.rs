//! `gristd playground`: a whole cluster on one machine from one command. Each node is a
//! separate `gristd` process with its own state directory under the data dir; the playground
//! restarts nodes that die and stops them all on Ctrl-C / SIGTERM. Ports and directories are a
//! pure function of the options, so running the same command again brings back the same
//! cluster with its data.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

/// Environment variable through which a node learns its supervisor's pid: the node exits when
/// that process is gone, so a killed playground leaves no orphans.
pub const PARENT_PID_ENV: &str = "GRISTD_EXIT_WITH_PARENT";

#[derive(Debug, Clone)]
pub struct PlaygroundOptions {
    pub proxies: usize,
    pub targets: usize,
    pub mountpaths_per_target: usize,
    pub data_dir: PathBuf,
    pub port: u16,
    /// Users, tokens and signed intra-cluster requests (`--auth`); the cluster secret lives
    /// in the data dir and the first admin's password is printed once.
    pub auth: bool,
    /// Target i serves S3 reads on this port + i.
    pub target_s3_port: Option<u16>,
}

/// The playground's cluster secret (with `--auth`).
fn secret_path(o: &PlaygroundOptions) -> PathBuf {
    o.data_dir.join("cluster.secret")
}

/// `$XDG_DATA_HOME/gristmill/playground`, else `~/.local/share/gristmill/playground`.
pub fn default_data_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("gristmill").join("playground")
}

/// One node the playground runs.
struct NodeSpec {
    name: String,
    args: Vec<String>,
}

fn node_specs(o: &PlaygroundOptions) -> Vec<NodeSpec> {
    let url = |port: u16| format!("http://127.0.0.1:{port}");
    let primary = url(o.port);
    let mut specs = Vec::new();
    for i in 0..o.proxies {
        let port = o.port + i as u16;
        let dir = o.data_dir.join(format!("proxy-{i}"));
        let mut args = vec![
            "proxy".to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--state-dir".into(),
            dir.display().to_string(),
        ];
        if i > 0 {
            args.extend(["--join".into(), primary.clone()]);
        }
        specs.push(NodeSpec {
            name: format!("proxy-{i}"),
            args,
        });
    }
    for i in 0..o.targets {
        let port = o.port + (o.proxies + i) as u16;
        let dir = o.data_dir.join(format!("target-{i}"));
        let mut args = vec![
            "target".to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--state-dir".into(),
            dir.display().to_string(),
            "--join".into(),
            primary.clone(),
        ];
        if let Some(base) = o.target_s3_port {
            args.extend([
                "--s3-listen".into(),
                format!("127.0.0.1:{}", base + i as u16),
            ]);
        }
        for m in 0..o.mountpaths_per_target {
            args.extend([
                "--mountpath".into(),
                dir.join(format!("mp{m}")).display().to_string(),
            ]);
        }
        specs.push(NodeSpec {
            name: format!("target-{i}"),
            args,
        });
    }
    specs
}

/// With `--auth`, every node reads the playground's cluster secret.
fn auth_args(o: &PlaygroundOptions, specs: &mut [NodeSpec]) {
    if !o.auth {
        return;
    }
    for spec in specs {
        spec.args.extend([
            "--auth".into(),
            "--cluster-secret-file".into(),
            secret_path(o).display().to_string(),
        ]);
    }
}

/// Environment every child node gets (how the playground itself was told to log).
static CHILD_ENV: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Sets the environment of the nodes a playground starts (once).
pub fn child_env(env: Vec<(String, String)>) {
    let _ = CHILD_ENV.set(env);
}

fn spawn(spec: &NodeSpec, data_dir: &std::path::Path) -> anyhow::Result<Child> {
    spawn_with(spec, data_dir, &[])
}

/// [`spawn`] with extra environment (the first admin's password for a new primary proxy
/// with `--auth`: never on a command line).
fn spawn_with(
    spec: &NodeSpec,
    data_dir: &std::path::Path,
    env: &[(&str, &str)],
) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("locating gristd")?;
    let log_path = data_dir.join(format!("{}.log", spec.name));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let child = Command::new(exe)
        .args(&spec.args)
        .env(PARENT_PID_ENV, std::process::id().to_string())
        .envs(CHILD_ENV.get().into_iter().flatten().map(|(k, v)| (k, v)))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", spec.name))?;
    Ok(child)
}

/// Starts the cluster, waits until every target has joined, prints how to use it, and
/// supervises the nodes until `shutdown`.
pub async fn run(opts: PlaygroundOptions, shutdown: CancellationToken) -> anyhow::Result<()> {
    std::fs::create_dir_all(&opts.data_dir)
        .with_context(|| format!("creating {}", opts.data_dir.display()))?;
    let mut specs = node_specs(&opts);
    auth_args(&opts, &mut specs);
    // With --auth: a new playground gets a secret, and its first admin a password that the
    // primary proxy stores (hashed) and we print once.
    let mut first_admin = None;
    let mut keys = None;
    if opts.auth {
        let (secret, created) = gristmill_node::auth::load_or_create_secret(&secret_path(&opts))?;
        keys = Some(std::sync::Arc::new(
            gristmill_node::auth::Keys::from_secret(&secret),
        ));
        if created {
            first_admin = Some(gristmill_node::auth::generate_password());
        }
    }
    let mut children = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let env = match &first_admin {
            Some(pw) if i == 0 => vec![(crate::config::ADMIN_PASSWORD_ENV, pw.as_str())],
            _ => Vec::new(),
        };
        children.push(Some(spawn_with(spec, &opts.data_dir, &env)?));
    }
    let endpoint = format!("http://127.0.0.1:{}", opts.port);
    match wait_ready(&endpoint, opts.targets, &shutdown, keys).await {
        Ok(()) => {
            print_banner(&opts, &endpoint);
            print_auth(&opts, first_admin.as_deref());
        }
        Err(e) => {
            stop_all(&mut children).await;
            return Err(e.context(format!(
                "cluster did not come up; see the logs in {}",
                opts.data_dir.display()
            )));
        }
    }

    let mut restarts: Vec<Vec<Instant>> = vec![Vec::new(); specs.len()];
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        for (i, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            if let Ok(Some(status)) = child.try_wait() {
                let recent = &mut restarts[i];
                recent.retain(|t| t.elapsed() < Duration::from_secs(60));
                if recent.len() >= 5 {
                    eprintln!(
                        "{} keeps exiting ({status}); not restarting it",
                        specs[i].name
                    );
                    *slot = None;
                    continue;
                }
                recent.push(Instant::now());
                eprintln!("{} exited ({status}); restarting", specs[i].name);
                *slot = spawn(&specs[i], &opts.data_dir).ok();
            }
        }
    }
    eprintln!("stopping the playground");
    stop_all(&mut children).await;
    Ok(())
}

async fn wait_ready(
    endpoint: &str,
    targets: usize,
    shutdown: &CancellationToken,
    keys: Option<std::sync::Arc<gristmill_node::auth::Keys>>,
) -> anyhow::Result<()> {
    // With auth on, the supervisor holds the cluster secret and asks as a node would.
    let http = gristmill_node::auth::IntraClient::new(reqwest::Client::new(), keys, "playground");
    // Joins slow down as the map grows (each one reaches every node): a second per target
    // beyond the first 60.
    let deadline = Instant::now() + Duration::from_secs(60.max(targets as u64));
    loop {
        if shutdown.is_cancelled() {
            anyhow::bail!("interrupted");
        }
        if let Ok(resp) = http
            .get(format!("{endpoint}/v1/cluster?what=smap"))
            .send()
            .await
            && let Ok(smap) = resp.json::<gristmill_core::ClusterMap>().await
            && smap.tmap.len() >= targets
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out waiting for {targets} targets to join");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGTERM every node, wait up to 10 s, then SIGKILL the stragglers.
async fn stop_all(children: &mut [Option<Child>]) {
    for child in children.iter().flatten() {
        if let Some(pid) = child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for child in children.iter_mut().flatten() {
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, child.wait()).await.is_err() {
            let _ = child.kill().await;
        }
    }
}

fn print_banner(o: &PlaygroundOptions, endpoint: &str) {
    println!(
        "Gristmill playground is up: {} prox{}, {} target{} ({} mountpath{} each); data in {}",
        o.proxies,
        if o.proxies == 1 { "y" } else { "ies" },
        o.targets,
        if o.targets == 1 { "" } else { "s" },
        o.mountpaths_per_target,
        if o.mountpaths_per_target == 1 {
            ""
        } else {
            "s"
        },
        o.data_dir.display()
    );
    println!("endpoint: {endpoint}");
    println!();
    println!("Try:");
    println!("  export GRIST_ENDPOINT={endpoint}");
    println!("  grist bucket create ais://demo");
    println!("  grist put README.md ais://demo/readme.md");
    println!("  grist ls ais://demo --props name,size,checksum");
    println!("  grist get ais://demo/readme.md -");
    println!("  curl -L -T README.md {endpoint}/v1/objects/demo/readme2.md");
    println!("  curl -L {endpoint}/v1/objects/demo/readme.md");
    println!(
        "  python3 -c 'import gristmill; print(gristmill.Client(\"{endpoint}\").bucket(\"demo\").object(\"readme.md\").get()[:80])'"
    );
    println!();
    if let Some(base) = o.target_s3_port {
        let last = base + o.targets.saturating_sub(1) as u16;
        println!(
            "S3 reads served by the targets themselves: http://127.0.0.1:{base} .. :{last} (any of them; the rest is relayed to the proxy)"
        );
        println!();
    }
    if o.auth {
        println!("S3 (path-style, same endpoint): with the access key of a user (--s3-key).");
        println!();
        println!("Ctrl-C stops the cluster; the same command brings it back with its data.");
        return;
    }
    println!(
        "S3 (path-style, same endpoint): unsigned, or access key {:?} / secret {:?}:",
        gristmill_proxy::DEFAULT_ACCESS_KEY,
        gristmill_proxy::DEFAULT_SECRET_KEY
    );
    println!(
        "  AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={} aws --endpoint-url {endpoint} s3 ls s3://demo",
        gristmill_proxy::DEFAULT_ACCESS_KEY,
        gristmill_proxy::DEFAULT_SECRET_KEY
    );
    println!(
        "  python3 -c 'import boto3; s3 = boto3.client(\"s3\", endpoint_url=\"{endpoint}\", aws_access_key_id=\"{}\", aws_secret_access_key=\"{}\", region_name=\"us-east-1\"); print(s3.list_buckets()[\"Buckets\"])'",
        gristmill_proxy::DEFAULT_ACCESS_KEY,
        gristmill_proxy::DEFAULT_SECRET_KEY
    );
    println!();
    println!("Ctrl-C stops the cluster; the same command brings it back with its data.");
}

fn print_auth(o: &PlaygroundOptions, first_admin: Option<&str>) {
    if !o.auth {
        return;
    }
    println!();
    match first_admin {
        Some(pw) => {
            println!("Auth is on. First admin credential (shown once, store it now):");
            println!("  user: admin  password: {pw}");
            println!("  GRIST_PASSWORD='{pw}' grist auth login admin");
        }
        None => println!(
            "Auth is on: log in with the admin credential printed when this playground was created \
             (grist auth login admin)."
        ),
    }
    println!("  grist auth user add alice --role write:demo --s3-key");
}

/// For nodes started by a playground: cancel `token` when the supervisor process is gone.
pub fn exit_with_parent(token: CancellationToken) {
    let Some(parent) = std::env::var(PARENT_PID_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return;
    };
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if nix::unistd::getppid().as_raw() != parent {
                tracing::warn!("playground supervisor is gone; shutting down");
                token.cancel();
                return;
            }
        }
    });
}
