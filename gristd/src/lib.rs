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
//!  gristd playground ─▶ playground::run: spawns `gristd proxy|target` children, restarts
//!                       the ones that die, stops all on SIGINT / SIGTERM
//! ```

pub mod cli;
pub mod config;
pub mod playground;
pub mod security;

/// Sets up `tracing` from `RUST_LOG` (else the `default` filter), logging to stderr as text
/// or (`json`) one JSON object per line with the current spans (the request id).
pub fn init_tracing(default: &str, format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        fmt.json()
            .with_current_span(false)
            .with_span_list(true)
            .try_init()
    } else {
        fmt.with_target(false).try_init()
    };
}
