//! The node's log: `tracing` to stderr as text or JSON lines, each line also kept in memory
//! for `grist log show` (`gristmill_node::log_tail`), with a filter that changes while the
//! node runs (`grist config set log.level=debug`).

use std::sync::Mutex;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// The filter in force, as given (`RUST_LOG`, the default, or the latest change).
static CURRENT: Mutex<String> = Mutex::new(String::new());

/// Changes the log filter of a running node.
#[derive(Clone)]
pub struct LogLevel(reload::Handle<EnvFilter, Registry>);

impl LogLevel {
    /// Sets a `RUST_LOG`-style filter (`debug`, `info,gristmill_target=debug`).
    pub fn set(&self, filter: &str) -> Result<(), String> {
        let parsed =
            EnvFilter::try_new(filter).map_err(|e| format!("log.level = {filter}: {e}"))?;
        self.0.reload(parsed).map_err(|e| e.to_string())?;
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = filter.to_owned();
        Ok(())
    }
}

/// The filter in force.
pub fn current_level() -> String {
    CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Sets up `tracing` from `RUST_LOG` (else the `default` filter), logging to stderr as text
/// or (`json`) one JSON object per line with the current spans (the request id).
pub fn init(default: &str, format: &str) -> LogLevel {
    let given = std::env::var("RUST_LOG")
        .ok()
        .filter(|f| EnvFilter::try_new(f).is_ok())
        .unwrap_or_else(|| default.to_owned());
    let (filter, handle) = reload::Layer::new(EnvFilter::new(&given));
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = given;
    let writer = gristmill_node::log_tail::writer;
    let json = format == "json";
    let json_lines = json.then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(writer)
            .json()
            .with_current_span(false)
            .with_span_list(true)
    });
    let text_lines = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(writer)
            .with_target(false)
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(json_lines)
        .with(text_lines)
        .try_init();
    LogLevel(handle)
}
