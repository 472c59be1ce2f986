//! The command line of `gristd`. Node settings are the section structs of [`crate::config`]
//! flattened into each subcommand, so a flag, its variable and its file key are one field.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{
    AuthSettings, BackendSettings, EtlSettings, NodeSettings, ProxySettings, S3Settings,
    SpaceSettings, TargetSettings, TlsSettings,
};

#[derive(Parser, Debug)]
#[command(name = "gristd", version, about = "Gristmill node daemon")]
pub struct Cli {
    /// TOML configuration file (flags and GRISTD_* variables override it).
    #[arg(long, global = true, env = "GRISTD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log lines as plain text or as JSON objects (one per line, with the request id of the
    /// request they belong to).
    #[arg(long, global = true, env = "GRISTD_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Log one line per request (its id, method, path, status, time) at info level.
    #[arg(long, global = true, env = "GRISTD_ACCESS_LOG")]
    pub access_log: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a proxy (gateway). Without --join it is the primary of a new or restarted cluster.
    Proxy(Box<ProxyArgs>),
    /// Run a target (storage node); --join names a proxy to register with.
    Target(Box<TargetArgs>),
    /// Start a local cluster (proxies + targets as separate processes) and supervise it.
    Playground(PlaygroundArgs),
}

/// Settings every node has.
#[derive(Args, Debug, Clone, Default)]
pub struct CommonArgs {
    #[command(flatten)]
    pub node: NodeSettings,
    #[command(flatten)]
    pub auth: AuthSettings,
    #[command(flatten)]
    pub tls: TlsSettings,
}

#[derive(Args, Debug, Clone, Default)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub proxy: ProxySettings,
    #[command(flatten)]
    pub s3: S3Settings,
}

#[derive(Args, Debug, Clone, Default)]
pub struct TargetArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub target: TargetSettings,
    #[command(flatten)]
    pub space: SpaceSettings,
    #[command(flatten)]
    pub backend: BackendSettings,
    #[command(flatten)]
    pub etl: EtlSettings,
    #[command(flatten)]
    pub s3: S3Settings,
}

#[derive(Args, Debug)]
pub struct PlaygroundArgs {
    #[arg(long, default_value_t = 1)]
    pub proxies: usize,
    #[arg(long, default_value_t = 3)]
    pub targets: usize,
    #[arg(long, default_value_t = 2)]
    pub mountpaths_per_target: usize,
    /// Where all nodes keep their state and data (reuse it to bring the same cluster back).
    #[arg(long, env = "GRIST_PLAYGROUND_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Port of the first proxy; the other nodes take the following ports.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Turn on users, tokens and signed intra-cluster requests; a new playground prints its
    /// first admin's password once.
    #[arg(long)]
    pub auth: bool,
    /// Give target i an S3 port of its own at this port + i (S3 reads served by targets).
    #[arg(long, value_name = "PORT")]
    pub target_s3_port: Option<u16>,
}
