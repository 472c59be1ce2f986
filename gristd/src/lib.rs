//! `gristmill-daemon`: `gristd`, the node daemon. `gristd proxy` and `gristd target` run one
//! node (`gristmill_proxy::run`, `gristmill_target::run`); `gristd playground` runs a whole
//! local cluster, each node a child `gristd` process. The library part holds what the binary
//! is made of:
//!
//! ```text
//!  cli::Cli (flags / GRISTD_*) ──┐  one section struct = flags + file table (config)
//!  --config TOML ────────────────┴─▶ FileConfig::for_proxy|for_target (layered)
//!        ─▶ config::resolve (checked) + security::serve_options (auth, TLS, limits)
//!        ─▶ ProxyConfig / TargetConfig ─▶ run(listener)
//!  config.local.json (state dir) ─▶ runtime: kept run-time changes, applied over the layers;
//!                                   `grist config set` changes space and log settings live
//!  gristd playground ─▶ playground::run: spawns `gristd proxy|target` children, restarts
//!                       the ones that die, stops all on SIGINT / SIGTERM
//! ```

pub mod cli;
pub mod config;
pub mod logging;
pub mod playground;
pub mod runtime;
pub mod security;
