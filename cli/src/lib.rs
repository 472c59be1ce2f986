//! `gristmill-cli`: the executables. `gristd` runs a node (proxy or target) or a whole local
//! playground cluster; `grist` is the client command line. The library part holds what both
//! binaries and the tests share: node configuration, the playground supervisor and a small
//! native-API client.

pub mod auth;
pub mod client;
pub mod cluster;
pub mod config;
pub mod etl;
pub mod jobs;
pub mod playground;
pub mod security;
pub mod shards;
pub mod storage;

/// Sets up `tracing` from `RUST_LOG` (default `info`), logging to stderr.
pub fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
