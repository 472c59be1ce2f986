//! Where `grist` finds its cluster: `--endpoint`, else `$GRIST_ENDPOINT`, else `$AIS_ENDPOINT`
//! (AIStore users keep their setup), else `endpoint` in the CLI config file, else
//! `http://127.0.0.1:8080`. The config file (`$GRIST_CONFIG`, else
//! `$XDG_CONFIG_HOME/grist/config.toml`, else `~/.config/grist/config.toml`) may also hold a
//! `token`, used when neither `--token`/`$GRIST_TOKEN` nor a saved login gives one.
//!
//! ```toml
//! endpoint = "http://proxy-1:8080,http://proxy-2:8080"
//! token = "..."
//! ```

use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;

pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:8080";

/// The CLI config file's settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliConfig {
    pub endpoint: Option<String>,
    pub token: Option<String>,
}

/// The config file's path (it need not exist).
pub fn config_path() -> PathBuf {
    let var = |k| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(p) = var("GRIST_CONFIG") {
        return p;
    }
    let base = var("XDG_CONFIG_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("grist").join("config.toml")
}

/// The config file's settings; none when it does not exist.
pub fn load() -> anyhow::Result<CliConfig> {
    let path = config_path();
    match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text).with_context(|| format!("reading {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CliConfig::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The endpoint to use: `given` (the flag or `$GRIST_ENDPOINT`), `$AIS_ENDPOINT`, the config
/// file, the default.
pub fn endpoint(given: Option<String>, config: &CliConfig) -> String {
    given
        .filter(|e| !e.trim().is_empty())
        .or_else(|| {
            std::env::var("AIS_ENDPOINT")
                .ok()
                .filter(|e| !e.trim().is_empty())
        })
        .or_else(|| config.endpoint.clone().filter(|e| !e.trim().is_empty()))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
}
