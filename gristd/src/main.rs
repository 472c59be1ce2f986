//! `gristd`: run a Gristmill node, or a whole playground cluster on this machine.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use gristmill_daemon::config::FileConfig;
use gristmill_daemon::playground::{self, PlaygroundOptions};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(name = "gristd", version, about = "Gristmill node daemon")]
struct Cli {
    /// TOML configuration file (flags and GRISTD_* variables override it).
    #[arg(long, global = true, env = "GRISTD_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a proxy (gateway). Without --join it is the primary of a new or restarted cluster.
    Proxy {
        #[command(flatten)]
        node: NodeArgs,
        /// Extra address serving only the S3 API, e.g. 127.0.0.1:9000.
        #[arg(long, env = "GRISTD_S3_LISTEN")]
        s3_listen: Option<String>,
        /// S3 users as JSON: [{"access_key","secret_key","read":["*"],"write":["b1"]}].
        /// None configured = anonymous S3 access.
        #[arg(long, env = "GRISTD_S3_USERS")]
        s3_users: Option<String>,
        /// Keepalives a target may miss before the primary removes it from the map.
        #[arg(long, env = "GRISTD_KEEPALIVE_RETRIES", default_value_t = 5)]
        keepalive_retries: u32,
    },
    /// Run a target (storage node); --join names a proxy to register with.
    Target {
        #[command(flatten)]
        node: NodeArgs,
        /// Data directory; repeat for several disks (GRISTD_MOUNTPATHS: comma-separated).
        #[arg(long = "mountpath", env = "GRISTD_MOUNTPATHS", value_delimiter = ',')]
        mountpaths: Vec<PathBuf>,
    },
    /// Start a local cluster (proxies + targets as separate processes) and supervise it.
    Playground(PlaygroundArgs),
}

#[derive(Args)]
struct NodeArgs {
    /// Address to listen on, e.g. 127.0.0.1:8080.
    #[arg(long, env = "GRISTD_LISTEN")]
    listen: Option<String>,
    /// URL other nodes and clients use to reach this node.
    #[arg(long, env = "GRISTD_PUBLIC_URL")]
    public_url: Option<String>,
    /// Directory for node id and cluster metadata.
    #[arg(long, env = "GRISTD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Proxy URL to register with.
    #[arg(long, env = "GRISTD_JOIN")]
    join: Option<String>,
    /// Keepalive period between nodes and the primary, milliseconds.
    #[arg(long, env = "GRISTD_KEEPALIVE_INTERVAL_MS")]
    keepalive_interval_ms: Option<u64>,
    #[command(flatten)]
    security: gristmill_daemon::security::SecurityArgs,
}

#[derive(Args)]
struct PlaygroundArgs {
    #[arg(long, default_value_t = 1)]
    proxies: usize,
    #[arg(long, default_value_t = 3)]
    targets: usize,
    #[arg(long, default_value_t = 2)]
    mountpaths_per_target: usize,
    /// Where all nodes keep their state and data (reuse it to bring the same cluster back).
    #[arg(long, env = "GRIST_PLAYGROUND_DIR")]
    data_dir: Option<PathBuf>,
    /// Port of the first proxy; the other nodes take the following ports.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Turn on users, tokens and signed intra-cluster requests; a new playground prints its
    /// first admin's password once.
    #[arg(long)]
    auth: bool,
}

fn merge(file: &FileConfig, args: &NodeArgs) -> FileConfig {
    let mut c = file.clone();
    if let Some(v) = &args.listen {
        c.node.listen = v.clone();
    }
    if let Some(v) = &args.public_url {
        c.node.public_url = v.clone();
    }
    if let Some(v) = &args.state_dir {
        c.node.state_dir = v.clone();
    }
    if let Some(v) = &args.join {
        c.node.join = v.clone();
    }
    if let Some(v) = args.keepalive_interval_ms {
        c.node.keepalive_interval_ms = v;
    }
    c
}

/// A token cancelled on SIGINT or SIGTERM.
fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {}
        }
        tracing::info!("shutting down");
        t.cancel();
    });
    playground::exit_with_parent(token.clone());
    token
}

async fn bind(addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    gristmill_daemon::init_tracing("info");
    let cli = Cli::parse();
    let file = FileConfig::load(cli.config.as_deref())?;
    match cli.command {
        Command::Proxy {
            node: args,
            s3_listen,
            s3_users,
            keepalive_retries,
        } => {
            let c = merge(&file, &args);
            let users = match s3_users {
                Some(json) => serde_json::from_str(&json).context("parsing --s3-users")?,
                None => c.s3.users.clone(),
            };
            let serve = gristmill_daemon::security::serve_options(
                &c,
                &args.security,
                &c.node.state_dir,
                c.node.join.is_empty(),
            )?;
            let listener = bind(&c.node.listen).await?;
            let config = gristmill_proxy::ProxyConfig {
                state_dir: c.node.state_dir.clone(),
                public_url: c.node.public_url.clone(),
                join_url: c.node.join.clone(),
                keepalive_interval: c.keepalive_interval(),
                s3_users: users,
                s3_listen: s3_listen.or(c.s3.listen.clone()),
                keepalive_retries,
                serve,
            };
            gristmill_proxy::run(config, listener, shutdown_on_signals()).await
        }
        Command::Target { node, mountpaths } => {
            let c = merge(&file, &node);
            let mut mps = if mountpaths.is_empty() {
                c.target.mountpaths.clone()
            } else {
                mountpaths
            };
            if mps.is_empty() {
                mps.push(c.node.state_dir.join("mp0"));
            }
            if c.node.join.is_empty() {
                anyhow::bail!("a target needs --join <proxy-url> (or node.join in the config)");
            }
            let serve = gristmill_daemon::security::serve_options(
                &c,
                &node.security,
                &c.node.state_dir,
                false,
            )?;
            let listener = bind(&c.node.listen).await?;
            let config = gristmill_target::TargetConfig {
                state_dir: c.node.state_dir.clone(),
                mountpaths: mps,
                public_url: c.node.public_url.clone(),
                join_url: c.node.join.clone(),
                keepalive_interval: c.keepalive_interval(),
                backend: gristmill_target::BackendConfig::from_env(),
                space: gristmill_target::SpaceConfig::from_env()?,
                serve,
            };
            gristmill_target::run(config, listener, shutdown_on_signals()).await
        }
        Command::Playground(a) => {
            let data_dir = a.data_dir.unwrap_or_else(playground::default_data_dir);
            let opts = PlaygroundOptions {
                proxies: a.proxies.max(1),
                targets: a.targets.max(1),
                mountpaths_per_target: a.mountpaths_per_target.max(1),
                data_dir,
                port: a.port,
                auth: a.auth,
            };
            playground::run(opts, shutdown_on_signals()).await
        }
    }
}
