//! `gristmill-cli`: `grist`, the client command line. The library part holds its
//! subcommands (one module per command group); every one talks to the cluster through
//! `gristmill_client` (the SDK: endpoints, tokens, HRW direct PUTs, typed calls). The node
//! daemon `gristd` is another package (`gristmill-daemon`, `gristd/`), so nothing here pulls
//! in proxy or target code.

pub mod auth;
pub mod cluster;
pub mod config;
pub mod etl;
pub mod jobs;
pub mod node_config;
pub mod performance;
pub mod shards;
pub mod storage;
pub mod transfer;

/// Sets up `tracing` from `RUST_LOG` (else the `default` filter), logging to stderr.
pub fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Reports what a command did: `value` as one JSON line with `--json`, else `text`.
pub fn report(json_out: bool, text: impl std::fmt::Display, value: serde_json::Value) {
    if json_out {
        println!("{value}");
    } else {
        println!("{text}");
    }
}
