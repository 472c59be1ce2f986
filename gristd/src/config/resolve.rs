//! From layered settings to the typed configs of the library crates, checking every value:
//! a percentage over 100, a zero part size or a malformed list stops the node at start. The
//! few variables that are not settings of ours are read here too (the AWS credentials of
//! `s3://` backends, the user's cache directory), so no library crate reads the environment.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use gristmill_target::{BackendConfig, SpaceConfig, StoreTuning};

use super::{BackendSettings, EtlSettings, FileConfig, NodeSettings, SpaceSettings};
use super::{TargetSettings, layered};
use crate::cli::{CommonArgs, ProxyArgs, TargetArgs};

impl NodeSettings {
    pub fn listen(&self) -> String {
        nonempty(&self.listen).unwrap_or_else(|| "127.0.0.1:8080".into())
    }

    pub fn public_url(&self) -> String {
        nonempty(&self.public_url).unwrap_or_default()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("gristmill-state"))
    }

    /// The proxy to join; empty = none.
    pub fn join(&self) -> String {
        nonempty(&self.join).unwrap_or_default()
    }

    pub fn keepalive_interval(&self) -> Duration {
        Duration::from_millis(self.keepalive_interval_ms.unwrap_or(2000).max(100))
    }
}

fn nonempty(s: &Option<String>) -> Option<String> {
    s.clone().filter(|s| !s.is_empty())
}

impl FileConfig {
    fn with_common(&self, a: &CommonArgs) -> anyhow::Result<Self> {
        let mut c = self.clone();
        c.node = layered(&self.node, &a.node)?;
        c.auth = layered(&self.auth, &a.auth)?;
        c.tls = layered(&self.tls, &a.tls)?;
        Ok(c)
    }

    /// The file's settings with a proxy's flags over them.
    pub fn for_proxy(&self, a: &ProxyArgs) -> anyhow::Result<Self> {
        let mut c = self.with_common(&a.common)?;
        c.proxy = layered(&self.proxy, &a.proxy)?;
        c.s3 = layered(&self.s3, &a.s3)?;
        Ok(c)
    }

    /// The file's settings with a target's flags over them.
    pub fn for_target(&self, a: &TargetArgs) -> anyhow::Result<Self> {
        let mut c = self.with_common(&a.common)?;
        c.target = layered(&self.target, &a.target)?;
        c.space = layered(&self.space, &a.space)?;
        c.backend = layered(&self.backend, &a.backend)?;
        c.etl = layered(&self.etl, &a.etl)?;
        c.s3 = layered(&self.s3, &a.s3)?;
        Ok(c)
    }
}

impl super::ProxySettings {
    /// Raft timing: heartbeat below the election timeout, both above zero.
    pub fn raft(&self) -> anyhow::Result<gristmill_proxy::RaftSettings> {
        let d = gristmill_proxy::RaftSettings::default();
        let heartbeat = self
            .raft_heartbeat_ms
            .map_or(d.heartbeat, Duration::from_millis);
        let election_timeout = self
            .raft_election_timeout_ms
            .map_or(d.election_timeout, Duration::from_millis);
        if heartbeat.is_zero() || heartbeat >= election_timeout {
            bail!(
                "proxy.raft_heartbeat_ms ({}) must be above 0 and below proxy.raft_election_timeout_ms ({})",
                heartbeat.as_millis(),
                election_timeout.as_millis()
            );
        }
        Ok(gristmill_proxy::RaftSettings {
            heartbeat,
            election_timeout,
        })
    }
}

impl TargetSettings {
    /// The mountpaths, else `<state_dir>/mp0`.
    pub fn mountpaths(&self, state_dir: &std::path::Path) -> Vec<PathBuf> {
        if self.mountpaths.is_empty() {
            vec![state_dir.join("mp0")]
        } else {
            self.mountpaths.clone()
        }
    }

    pub fn store(&self) -> anyhow::Result<StoreTuning> {
        let d = StoreTuning::default();
        let index_cache_bytes = match self.index_cache_mib {
            None => d.index_cache_bytes,
            Some(0) => {
                bail!("target.index_cache_mib = 0: the index needs a page cache (MiB above 0)")
            }
            Some(mib) => mib.saturating_mul(1 << 20),
        };
        Ok(StoreTuning {
            meta_cache_entries: self.meta_cache.unwrap_or(d.meta_cache_entries),
            open_files: self.open_files.unwrap_or(d.open_files),
            index_cache_bytes,
        })
    }

    /// The placement weight (unset: the default every target has).
    pub fn weight(&self) -> gristmill_target::Weight {
        self.weight
            .map_or(gristmill_target::Weight::Fixed(0), |w| w.0)
    }

    /// Bytes per second a rebalance may send (0: no limit).
    pub fn rebalance_bandwidth(&self) -> u64 {
        self.rebalance_bandwidth.map_or(0, |s| s.0)
    }

    pub fn quarantine_keep(&self) -> Duration {
        Duration::from_secs(
            self.quarantine_keep_days
                .unwrap_or(7)
                .saturating_mul(86_400),
        )
    }
}

impl SpaceSettings {
    pub fn resolve(&self) -> anyhow::Result<SpaceConfig> {
        let d = SpaceConfig::default();
        let c = SpaceConfig {
            high_wm: self.high_wm.unwrap_or(d.high_wm),
            low_wm: self.low_wm.unwrap_or(d.low_wm),
            out_of_space: self.out_of_space_wm.unwrap_or(d.out_of_space),
            dont_evict_time: self.dont_evict_time.map_or(d.dont_evict_time, |v| v.0),
            check_interval: self
                .check_interval
                .map_or(d.check_interval, |v| v.0)
                .max(Duration::from_millis(100)),
            max_cache_bytes: self.max_cache_bytes.map_or(d.max_cache_bytes, |v| v.0),
        };
        c.validate().map_err(|e| anyhow::anyhow!("space: {e}"))?;
        Ok(c)
    }
}

impl BackendSettings {
    pub fn resolve(&self) -> anyhow::Result<BackendConfig> {
        let d = BackendConfig::default();
        let endpoint = nonempty(&self.s3_endpoint).unwrap_or_default();
        let positive = |key: &str, v: Option<u64>, default: u64| match v {
            Some(0) => bail!("backend.{key} = 0: expected a number above 0"),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        let mut parallel = d.parallel;
        parallel.threshold = self
            .cold_get_parallel_above
            .map_or(parallel.threshold, |s| s.0);
        parallel.chunk = positive(
            "cold_get_chunk",
            self.cold_get_chunk.map(|s| s.0),
            parallel.chunk,
        )?;
        parallel.workers = positive(
            "cold_get_workers",
            self.cold_get_workers.map(|w| w as u64),
            parallel.workers as u64,
        )? as usize;
        Ok(BackendConfig {
            s3_path_style: self.s3_path_style,
            s3_endpoint: endpoint,
            ht_allow_private: self.ht_allow_private.unwrap_or(false),
            timeout: Duration::from_secs(positive(
                "timeout_secs",
                self.timeout_secs,
                d.timeout.as_secs(),
            )?),
            parallel,
            remote_ais: remote_ais(self.remote_ais.as_deref().unwrap_or_default())?,
        })
    }
}

/// `alias=http://host:port,...`
fn remote_ais(list: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.split_once('=') {
            Some((alias, url)) if !alias.trim().is_empty() && !url.trim().is_empty() => {
                out.push((alias.trim().to_owned(), url.trim().to_owned()))
            }
            _ => bail!("backend.remote_ais: {item:?} is not alias=url"),
        }
    }
    Ok(out)
}

impl EtlSettings {
    pub fn resolve(&self) -> anyhow::Result<gristmill_target::EtlConfig> {
        let d = gristmill_target::EtlConfig::default();
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let user_cache_dir = var("XDG_CACHE_HOME")
            .or_else(|| var("HOME").map(|h| h.join(".cache")))
            .unwrap_or(d.user_cache_dir);
        let install_timeout = match self.install_timeout_secs {
            Some(0) => bail!("etl.install_timeout_secs = 0: expected seconds above 0"),
            Some(s) => Duration::from_secs(s),
            None => d.install_timeout,
        };
        Ok(gristmill_target::EtlConfig {
            python: nonempty(&self.python),
            user: self.user.clone().unwrap_or(d.user),
            sandbox: self.sandbox.unwrap_or(d.sandbox),
            env_dir: self.env_dir.clone().filter(|p| !p.as_os_str().is_empty()),
            user_cache_dir,
            install_timeout,
            // Workers are confined by this same binary (`gristd etl-sandbox`).
            helper: std::env::current_exe().ok(),
            protected: Vec::new(),
            // The target makes its own directory in there.
            scratch_dir: Some(std::env::temp_dir()),
        })
    }
}

/// The limits from the file's `[limits]`, then `GRISTD_<KEY>` variables.
pub fn limits(file: &FileConfig) -> anyhow::Result<gristmill_core::limits::Limits> {
    let mut l = gristmill_core::limits::Limits::default();
    for (key, value) in &file.limits {
        let v = match value {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        l.set(key, &v).map_err(anyhow::Error::msg)?;
    }
    let keys: Vec<&str> = gristmill_core::limits::Limits::keys().collect();
    for key in keys {
        let var = limit_env(key);
        if let Ok(v) = std::env::var(&var) {
            l.set(key, &v)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("{var}={v}"))?;
        }
    }
    Ok(l)
}

/// The variable of a limit: `GRISTD_<KEY>`.
pub fn limit_env(key: &str) -> String {
    format!("GRISTD_{}", key.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn target(args: &[&str]) -> anyhow::Result<()> {
        let mut argv = vec!["gristd", "target", "--join", "http://127.0.0.1:1"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{e}"))?;
        let Command::Target(a) = cli.command else {
            unreachable!()
        };
        let c = super::FileConfig::default().for_target(&a)?;
        c.space.resolve()?;
        c.backend.resolve()?;
        c.etl.resolve()?;
        c.target.store()?;
        Ok(())
    }

    #[test]
    fn a_wrong_value_is_an_error_naming_the_setting() {
        target(&[]).unwrap();
        for (args, needle) in [
            (&["--lru-high-wm", "150"][..], "percentage"),
            (&["--lru-high-wm", "lots"], "lru-high-wm"),
            (&["--lru-low-wm", "95"], "low (95) <= high (90)"),
            (&["--lru-dont-evict-time", "soon"], "lru-dont-evict-time"),
            (&["--max-cache-bytes", "big"], "max-cache-bytes"),
            (&["--cold-get-chunk", "0"], "backend.cold_get_chunk"),
            (&["--cold-get-workers", "0"], "backend.cold_get_workers"),
            (&["--remote-ais", "alias-without-url"], "backend.remote_ais"),
            (&["--index-cache-mib", "0"], "target.index_cache_mib"),
            (&["--open-files", "many"], "open-files"),
            (&["--etl-sandbox", "maybe"], "etl-sandbox"),
            (&["--s3-path-style", "sideways"], "s3-path-style"),
        ] {
            let err = format!("{:#}", target(args).unwrap_err());
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn settings_reach_the_library_configs() {
        let argv = [
            "gristd",
            "target",
            "--join",
            "http://p",
            "--lru-high-wm",
            "80",
            "--lru-low-wm",
            "70",
            "--max-cache-bytes",
            "2GiB",
            "--cold-get-chunk",
            "8MiB",
            "--remote-ais",
            "other=http://10.0.0.9:8080",
            "--etl-sandbox",
            "off",
            "--meta-cache",
            "0",
            "--index-cache-mib",
            "8",
            "--quarantine-keep-days",
            "2",
            "--etl-user",
            "",
        ];
        let Command::Target(a) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!()
        };
        let c = super::FileConfig::default().for_target(&a).unwrap();
        let space = c.space.resolve().unwrap();
        assert_eq!(
            (space.high_wm, space.low_wm, space.out_of_space),
            (80, 70, 95)
        );
        assert_eq!(space.max_cache_bytes, 2 << 30);
        let backend = c.backend.resolve().unwrap();
        assert_eq!(backend.parallel.chunk, 8 << 20);
        assert_eq!(
            backend.remote_ais,
            [("other".into(), "http://10.0.0.9:8080".into())]
        );
        let etl = c.etl.resolve().unwrap();
        assert!(!etl.sandbox);
        assert_eq!(etl.user, "");
        let store = c.target.store().unwrap();
        assert_eq!(
            (store.meta_cache_entries, store.index_cache_bytes),
            (0, 8 << 20)
        );
        assert_eq!(c.target.quarantine_keep().as_secs(), 2 * 86_400);
    }
}
