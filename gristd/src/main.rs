//! `gristd`: run a Gristmill node, or a whole playground cluster on this machine.

use anyhow::Context;
use clap::Parser;
use gristmill_daemon::cli::{Cli, Command};
use gristmill_daemon::config::FileConfig;
use gristmill_daemon::playground::{self, PlaygroundOptions};
use gristmill_daemon::runtime;
use tokio_util::sync::CancellationToken;

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

fn main() -> anyhow::Result<()> {
    // `gristd etl-sandbox …` confines an ETL worker and execs it. It must run before any
    // thread exists (Landlock restricts the calling thread, and the worker inherits it), so it
    // is dispatched here, ahead of the runtime and of the command-line parser (it is not a
    // command people run, and stays out of `--help`).
    let mut args = std::env::args_os();
    if args
        .nth(1)
        .is_some_and(|a| a == gristmill_etl::confine::COMMAND)
    {
        std::process::exit(gristmill_etl::confine::exec_helper(args));
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let log_level = gristmill_daemon::logging::init("info", &cli.log_format);
    gristmill_node::metrics::set_access_log(cli.access_log);
    // Playground children log the same way.
    playground::child_env(vec![
        ("GRISTD_LOG_FORMAT".into(), cli.log_format.clone()),
        ("GRISTD_ACCESS_LOG".into(), cli.access_log.to_string()),
    ]);
    let file = FileConfig::load(cli.config.as_deref())?;
    match cli.command {
        Command::Proxy(args) => {
            let c = file.for_proxy(&args)?;
            let state_dir = c.node.state_dir();
            runtime::register_log(log_level, &state_dir);
            runtime::publish(&c, None, &state_dir, &cli.log_format);
            let join = c.node.join();
            let serve = gristmill_daemon::security::serve_options(&c, &state_dir, join.is_empty())?;
            let listener = bind(&c.node.listen()).await?;
            let config = gristmill_proxy::ProxyConfig {
                public_url: c.node.public_url(),
                keepalive_interval: c.node.keepalive_interval(),
                s3_users: c.s3.users.clone().unwrap_or_default().0,
                s3_listen: c.s3.listen.clone().filter(|l| !l.is_empty()),
                s3_domain: c.s3.domain.clone().filter(|d| !d.is_empty()),
                keepalive_retries: c.proxy.keepalive_retries.unwrap_or(5),
                suspect_grace: std::time::Duration::from_millis(
                    c.proxy.suspect_grace_ms.unwrap_or(0),
                ),
                restart_grace: std::time::Duration::from_millis(
                    c.proxy.restart_grace_ms.unwrap_or(600_000),
                ),
                admin_password: c.proxy.admin_password.clone().filter(|p| !p.is_empty()),
                raft: c.proxy.raft()?,
                ui_dir: c.proxy.ui_dir.clone(),
                state_dir,
                join_url: join,
                serve,
            };
            gristmill_proxy::run(config, listener, shutdown_on_signals()).await
        }
        Command::Target(args) => {
            let mut c = file.for_target(&args)?;
            let state_dir = c.node.state_dir();
            runtime::apply_local(&mut c, &state_dir)?;
            let space = gristmill_target::SharedSpaceConfig::new(c.space.resolve()?);
            runtime::register_log(log_level, &state_dir);
            runtime::publish(&c, Some(&space.get()), &state_dir, &cli.log_format);
            runtime::register_space(c.space.clone(), space.clone());
            let join = c.node.join();
            if join.is_empty() {
                anyhow::bail!("a target needs --join <proxy-url> (or node.join in the config)");
            }
            let config = gristmill_target::TargetConfig {
                mountpaths: c.target.mountpaths(&state_dir),
                public_url: c.node.public_url(),
                keepalive_interval: c.node.keepalive_interval(),
                backend: c.backend.resolve()?,
                space,
                store: c.target.store()?,
                quarantine_keep: c.target.quarantine_keep(),
                weight: c.target.weight(),
                rebalance_bandwidth: c.target.rebalance_bandwidth(),
                etl: c.etl.resolve()?,
                serve: gristmill_daemon::security::serve_options(&c, &state_dir, false)?,
                s3: c.s3.listen.clone().filter(|l| !l.is_empty()).map(|listen| {
                    gristmill_target::S3Config {
                        listen,
                        users: c.s3.users.clone().unwrap_or_default().0,
                        domain: c.s3.domain.clone().filter(|d| !d.is_empty()),
                    }
                }),
                state_dir,
                join_url: join,
            };
            let listener = bind(&c.node.listen()).await?;
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
                target_s3_port: a.target_s3_port,
            };
            playground::run(opts, shutdown_on_signals()).await
        }
    }
}
