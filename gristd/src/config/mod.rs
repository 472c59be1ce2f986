//! Node configuration in one place. Every setting is a field of one section struct below,
//! which is at once a table of the TOML file (`[space]`) and flags of `gristd proxy|target`
//! with their `GRISTD_*` variables; the flag's id is the file's key (`space.high_wm`).
//! Layers, later ones winning: built-in defaults, the file (`--config`), flags and variables.
//! Resolving ([`resolve`]) checks every value, so a wrong one stops the node at start instead
//! of being ignored. Library crates read no environment: they get typed configs
//! (`ProxyConfig`, `TargetConfig`) built here. `docs/operations.md`'s settings table is
//! generated from these structs ([`table`]) and a test keeps the two equal.

pub mod resolve;
pub mod table;
pub mod values;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use clap::builder::BoolishValueParser;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use values::{Dur, S3Users, Size};

/// The TOML file. Every field has a default; see `docs/operations.md` for an example.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FileConfig {
    pub node: NodeSettings,
    /// Users, tokens and intra-cluster signatures (see `docs/security.md`).
    pub auth: AuthSettings,
    /// HTTPS for the node API.
    pub tls: TlsSettings,
    pub proxy: ProxySettings,
    pub s3: S3Settings,
    pub target: TargetSettings,
    pub space: SpaceSettings,
    pub backend: BackendSettings,
    pub etl: EtlSettings,
    /// Request and connection limits by key (`max_headers = 128`, `header_read_timeout =
    /// "30s"`; see `gristmill_core::limits`); variables `GRISTD_<KEY>`.
    pub limits: BTreeMap<String, toml::Value>,
}

/// `[node]`: every node.
#[derive(Args, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "Node")]
pub struct NodeSettings {
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(
        id = "node.listen",
        long = "listen",
        env = "GRISTD_LISTEN",
        value_name = "ADDR"
    )]
    pub listen: Option<String>,
    /// URL other nodes and clients use to reach this node (default: http:// and the listen address).
    #[arg(
        id = "node.public_url",
        long = "public-url",
        env = "GRISTD_PUBLIC_URL",
        value_name = "URL"
    )]
    pub public_url: Option<String>,
    /// Directory for the node id and cluster metadata (default gristmill-state).
    #[arg(
        id = "node.state_dir",
        long = "state-dir",
        env = "GRISTD_STATE_DIR",
        value_name = "DIR"
    )]
    pub state_dir: Option<PathBuf>,
    /// Proxy to register with: every target; a proxy joining a cluster.
    #[arg(
        id = "node.join",
        long = "join",
        env = "GRISTD_JOIN",
        value_name = "URL"
    )]
    pub join: Option<String>,
    /// Keepalive period between nodes and the primary, milliseconds (default 2000).
    #[arg(
        id = "node.keepalive_interval_ms",
        long = "keepalive-interval-ms",
        env = "GRISTD_KEEPALIVE_INTERVAL_MS",
        value_name = "MS"
    )]
    pub keepalive_interval_ms: Option<u64>,
}

/// `[auth]`: every node (see docs/security.md).
#[derive(Args, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "Auth")]
pub struct AuthSettings {
    /// Require users and tokens, and sign requests between nodes (default off).
    #[arg(
        id = "auth.enabled",
        long = "auth",
        env = "GRISTD_AUTH",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL"
    )]
    pub enabled: Option<bool>,
    /// File with the cluster secret, hex; every node needs the same (default: cluster.secret in the state dir).
    #[arg(
        id = "auth.secret_file",
        long = "cluster-secret-file",
        env = "GRISTD_CLUSTER_SECRET_FILE",
        value_name = "FILE"
    )]
    pub secret_file: Option<PathBuf>,
    /// Lifetime of the signed redirects proxies hand out (default 60s).
    #[arg(
        id = "auth.redirect_ttl",
        long = "redirect-ttl",
        env = "GRISTD_REDIRECT_TTL",
        value_name = "DURATION"
    )]
    pub redirect_ttl: Option<Dur>,
}

/// `[tls]`: HTTPS on this node's port (reloaded on SIGHUP).
#[derive(Args, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "TLS")]
pub struct TlsSettings {
    /// Certificate chain (PEM) to serve HTTPS with.
    #[arg(
        id = "tls.cert",
        long = "tls-cert",
        env = "GRISTD_TLS_CERT",
        value_name = "PEM"
    )]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of the certificate.
    #[arg(
        id = "tls.key",
        long = "tls-key",
        env = "GRISTD_TLS_KEY",
        value_name = "PEM"
    )]
    pub key: Option<PathBuf>,
    /// CA bundle (PEM) to trust when calling other nodes over HTTPS.
    #[arg(
        id = "tls.ca",
        long = "tls-ca",
        env = "GRISTD_TLS_CA",
        value_name = "PEM"
    )]
    pub ca: Option<PathBuf>,
}

/// `[proxy]`: proxies.
#[derive(Args, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "Proxy")]
pub struct ProxySettings {
    /// Keepalives a target may miss before the primary removes it from the map (default 5).
    #[arg(
        id = "proxy.keepalive_retries",
        long = "keepalive-retries",
        env = "GRISTD_KEEPALIVE_RETRIES",
        value_name = "N"
    )]
    pub keepalive_retries: Option<u32>,
    /// How long a target that went silent stays in the map as *suspect* (restarting: requests
    /// skip it, writes meant for it are hinted elsewhere, nothing moves) before it is removed
    /// and its data rebalanced, milliseconds (default 0: removed at once).
    #[arg(
        id = "proxy.suspect_grace_ms",
        long = "suspect-grace-ms",
        env = "GRISTD_SUSPECT_GRACE_MS",
        value_name = "MS"
    )]
    pub suspect_grace_ms: Option<u64>,
    /// How long a target an operator marked restarting (`grist cluster maintenance start
    /// --no-rebalance`) may stay silent before it is removed, milliseconds (default 600000).
    #[arg(
        id = "proxy.restart_grace_ms",
        long = "restart-grace-ms",
        env = "GRISTD_RESTART_GRACE_MS",
        value_name = "MS"
    )]
    pub restart_grace_ms: Option<u64>,
    /// Password of the first admin a new cluster with auth creates (default: generated, printed once).
    #[arg(
        id = "proxy.admin_password",
        long = "admin-password",
        env = ADMIN_PASSWORD_ENV,
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub admin_password: Option<String>,
    /// How often the Raft leader among the proxies sends heartbeats, milliseconds; the same on every proxy (default 150).
    #[arg(
        id = "proxy.raft_heartbeat_ms",
        long = "raft-heartbeat-ms",
        env = "GRISTD_RAFT_HEARTBEAT_MS",
        value_name = "MS"
    )]
    pub raft_heartbeat_ms: Option<u64>,
    /// A proxy that hears no leader for between this and twice this starts an election, milliseconds; above the heartbeat (default 750).
    #[arg(
        id = "proxy.raft_election_timeout_ms",
        long = "raft-election-timeout-ms",
        env = "GRISTD_RAFT_ELECTION_TIMEOUT_MS",
        value_name = "MS"
    )]
    pub raft_election_timeout_ms: Option<u64>,
    /// Serve the dashboard (`/ui/`) from this directory instead of the copy built into the binary (for working on the page).
    #[arg(
        id = "proxy.ui_dir",
        long = "ui-dir",
        env = "GRISTD_UI_DIR",
        value_name = "DIR"
    )]
    pub ui_dir: Option<PathBuf>,
}

/// The variable a playground hands its first proxy the admin password in.
pub const ADMIN_PASSWORD_ENV: &str = "GRISTD_ADMIN_PASSWORD";

/// `[s3]`: the S3 API of proxies, and of targets that serve S3 reads themselves.
#[derive(Args, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "S3")]
pub struct S3Settings {
    /// Extra address serving only the S3 API (proxies: the main port serves it too; targets: reads answered here, the rest relayed to a proxy).
    #[arg(
        id = "s3.listen",
        long = "s3-listen",
        env = "GRISTD_S3_LISTEN",
        value_name = "ADDR"
    )]
    pub listen: Option<String>,
    /// S3 users with keys and bucket grants (JSON on the command line); none = anonymous access. Give targets with an S3 port the same users as the proxies.
    #[arg(
        id = "s3.users",
        long = "s3-users",
        env = "GRISTD_S3_USERS",
        value_name = "JSON"
    )]
    pub users: Option<S3Users>,
    /// Base domain for virtual-hosted-style S3 (`bucket.DOMAIN`, the default of many SDKs);
    /// requests to any other host stay path-style.
    #[arg(
        id = "s3.domain",
        long = "s3-domain",
        env = "GRISTD_S3_DOMAIN",
        value_name = "DOMAIN"
    )]
    pub domain: Option<String>,
}

/// `[target]`: storage and memory of targets.
#[derive(Args, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "Target")]
pub struct TargetSettings {
    /// Data directories, one per disk; repeat the flag, or comma-separate (default: mp0 in the state dir).
    #[arg(
        id = "target.mountpaths",
        long = "mountpath",
        env = "GRISTD_MOUNTPATHS",
        value_delimiter = ',',
        value_name = "DIR"
    )]
    pub mountpaths: Vec<PathBuf>,
    /// Records of recently read objects kept in memory for warm GETs, a few hundred bytes each; 0 turns the fast path off (default 100000).
    #[arg(
        id = "target.meta_cache",
        long = "meta-cache",
        env = "GRISTD_META_CACHE",
        value_name = "N"
    )]
    pub meta_cache: Option<usize>,
    /// Page cache of each mountpath's index, MiB (default 64).
    #[arg(
        id = "target.index_cache_mib",
        long = "index-cache-mib",
        env = "GRISTD_INDEX_CACHE_MIB",
        value_name = "MIB"
    )]
    pub index_cache_mib: Option<usize>,
    /// Data files of cached records kept open, at most a quarter of RLIMIT_NOFILE; 0 turns it off (default 4096).
    #[arg(
        id = "target.open_files",
        long = "open-files",
        env = "GRISTD_OPEN_FILES",
        value_name = "N"
    )]
    pub open_files: Option<usize>,
    /// Days scrub keeps quarantined copies for inspection (default 7).
    #[arg(
        id = "target.quarantine_keep_days",
        long = "quarantine-keep-days",
        env = "GRISTD_QUARANTINE_KEEP_DAYS",
        value_name = "DAYS"
    )]
    pub quarantine_keep_days: Option<u64>,
    /// Placement weight: a target of weight 200 owns twice the objects of one of 100; `capacity` = the mountpaths' total size in GiB (default 100 on every target: equal shares, AIStore's placement).
    #[arg(
        id = "target.weight",
        long = "weight",
        env = "GRISTD_WEIGHT",
        value_name = "N|capacity"
    )]
    pub weight: Option<values::WeightSetting>,
    /// Most bytes per second a rebalance sends from this target, e.g. `100MiB`; 0 = no limit (default).
    #[arg(
        id = "target.rebalance_bandwidth",
        long = "rebalance-bandwidth",
        env = "GRISTD_REBALANCE_BANDWIDTH",
        value_name = "BYTES"
    )]
    pub rebalance_bandwidth: Option<Size>,
}

/// `[space]`: cache space of targets (watermarks, quotas, LRU).
#[derive(Args, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "Space")]
pub struct SpaceSettings {
    /// Eviction starts above this much of a mountpath or quota, percent (default 90).
    #[arg(
        id = "space.high_wm",
        long = "lru-high-wm",
        env = "GRISTD_LRU_HIGH_WM",
        value_name = "PERCENT"
    )]
    pub high_wm: Option<u8>,
    /// Eviction stops at this much, percent (default 75).
    #[arg(
        id = "space.low_wm",
        long = "lru-low-wm",
        env = "GRISTD_LRU_LOW_WM",
        value_name = "PERCENT"
    )]
    pub low_wm: Option<u8>,
    /// PUTs and cold GETs on a mountpath this full fail with 507, percent (default 95).
    #[arg(
        id = "space.out_of_space_wm",
        long = "out-of-space-wm",
        env = "GRISTD_OUT_OF_SPACE_WM",
        value_name = "PERCENT"
    )]
    pub out_of_space_wm: Option<u8>,
    /// Objects read this recently are not evicted; buckets may set their own (default 2h).
    #[arg(
        id = "space.dont_evict_time",
        long = "lru-dont-evict-time",
        env = "GRISTD_LRU_DONT_EVICT_TIME",
        value_name = "DURATION"
    )]
    pub dont_evict_time: Option<Dur>,
    /// How often usage is checked and access times saved (default 30s, at least 100ms).
    #[arg(
        id = "space.check_interval",
        long = "space-check-interval",
        env = "GRISTD_SPACE_CHECK_INTERVAL",
        value_name = "DURATION"
    )]
    pub check_interval: Option<Dur>,
    /// Most bytes of cached remote objects on this node, e.g. 500GiB; 0 = no limit (default 0).
    #[arg(
        id = "space.max_cache_bytes",
        long = "max-cache-bytes",
        env = "GRISTD_MAX_CACHE_BYTES",
        value_name = "SIZE"
    )]
    pub max_cache_bytes: Option<Size>,
}

/// `[backend]`: remote buckets of targets (`s3://`, `ht://`, `ais://@alias`).
#[derive(Args, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "Backend")]
pub struct BackendSettings {
    /// S3 endpoint URL (SeaweedFS, MinIO, ...); unset = AWS.
    #[arg(
        id = "backend.s3_endpoint",
        long = "s3-endpoint",
        env = "GRISTD_S3_ENDPOINT",
        value_name = "URL"
    )]
    pub s3_endpoint: Option<String>,
    /// Path-style S3 addressing (default on when an endpoint is set).
    #[arg(
        id = "backend.s3_path_style",
        long = "s3-path-style",
        env = "GRISTD_S3_PATH_STYLE",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL"
    )]
    pub s3_path_style: Option<bool>,
    /// Allow ht:// origins on loopback, private or link-local addresses (default refused).
    #[arg(
        id = "backend.ht_allow_private",
        long = "ht-allow-private",
        env = "GRISTD_HT_ALLOW_PRIVATE",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL"
    )]
    pub ht_allow_private: Option<bool>,
    /// Connect timeout, limit on metadata calls and longest stall of a download, seconds (default 30).
    #[arg(
        id = "backend.timeout_secs",
        long = "backend-timeout-secs",
        env = "GRISTD_BACKEND_TIMEOUT_SECS",
        value_name = "SECS"
    )]
    pub timeout_secs: Option<u64>,
    /// Cold GETs of larger objects use parallel range requests (default 128MiB).
    #[arg(
        id = "backend.cold_get_parallel_above",
        long = "cold-get-parallel-above",
        env = "GRISTD_COLD_GET_PARALLEL_ABOVE",
        value_name = "SIZE"
    )]
    pub cold_get_parallel_above: Option<Size>,
    /// Part size of those parallel range requests, and the chunk a range GET of an uncached large object fetches and keeps (default 16MiB).
    #[arg(
        id = "backend.cold_get_chunk",
        long = "cold-get-chunk",
        env = "GRISTD_COLD_GET_CHUNK",
        value_name = "SIZE"
    )]
    pub cold_get_chunk: Option<Size>,
    /// Parts in flight at once (default 4).
    #[arg(
        id = "backend.cold_get_workers",
        long = "cold-get-workers",
        env = "GRISTD_COLD_GET_WORKERS",
        value_name = "N"
    )]
    pub cold_get_workers: Option<usize>,
    /// Attached clusters for ais://@alias buckets: alias=http://proxy:port,... (default none).
    #[arg(
        id = "backend.remote_ais",
        long = "remote-ais",
        env = "GRISTD_REMOTE_AIS",
        value_name = "LIST"
    )]
    pub remote_ais: Option<String>,
}

/// `[etl]`: ETL workers of targets (see docs/etl.md).
#[derive(Args, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "ETL")]
pub struct EtlSettings {
    /// Interpreter of python ETL workers and their environments (default /usr/bin/python3).
    #[arg(
        id = "etl.python",
        long = "etl-python",
        env = "GRISTD_ETL_PYTHON",
        value_name = "PATH"
    )]
    pub python: Option<String>,
    /// User the workers run as when gristd runs as root; empty keeps the target's user (default nobody).
    #[arg(
        id = "etl.user",
        long = "etl-user",
        env = "GRISTD_ETL_USER",
        value_name = "USER"
    )]
    pub user: Option<String>,
    /// Confine workers: network namespace, user switch, memory limit; off only for tests (default on).
    #[arg(
        id = "etl.sandbox",
        long = "etl-sandbox",
        env = "GRISTD_ETL_SANDBOX",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL"
    )]
    pub sandbox: Option<bool>,
    /// Where python dependencies are installed, one venv per requirement list (default /var/lib/gristmill/etl-envs as root, else ~/.cache/gristmill/etl-envs).
    #[arg(
        id = "etl.env_dir",
        long = "etl-env-dir",
        env = "GRISTD_ETL_ENV_DIR",
        value_name = "DIR"
    )]
    pub env_dir: Option<PathBuf>,
    /// Longest one pip install may take, seconds (default 600).
    #[arg(
        id = "etl.install_timeout_secs",
        long = "etl-install-timeout",
        env = "GRISTD_ETL_INSTALL_TIMEOUT",
        value_name = "SECS"
    )]
    pub install_timeout_secs: Option<u64>,
}

impl FileConfig {
    /// Loads the file, warning about keys it does not know; a value of the wrong type is an
    /// error.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let raw: toml::Value = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("parsing {}: {e}", path.display()))?;
        for key in unknown_keys(&raw) {
            tracing::warn!(key, "unknown config key ignored");
        }
        raw.try_into()
            .map_err(|e| anyhow::anyhow!("invalid config {}: {e}", path.display()))
    }

    /// Every `section.key` the file may set (the limits included).
    pub fn keys() -> Vec<String> {
        let mut keys = Vec::new();
        let value = serde_json::to_value(Self::default()).expect("config serializes");
        for (section, table) in value.as_object().into_iter().flatten() {
            if section == "limits" {
                let limits = gristmill_core::limits::Limits::keys();
                keys.extend(limits.map(|k| format!("limits.{k}")));
                continue;
            }
            for key in table.as_object().into_iter().flat_map(|t| t.keys()) {
                keys.push(format!("{section}.{key}"));
            }
        }
        keys
    }
}

/// Keys of `raw` that no setting has (`section` or `section.key`).
fn unknown_keys(raw: &toml::Value) -> Vec<String> {
    let known = FileConfig::keys();
    let mut unknown = Vec::new();
    for (section, value) in raw.as_table().into_iter().flatten() {
        let Some(table) = value.as_table() else {
            unknown.push(section.clone());
            continue;
        };
        if !known.iter().any(|k| k.starts_with(&format!("{section}."))) {
            unknown.push(section.clone());
            continue;
        }
        for key in table.keys() {
            let full = format!("{section}.{key}");
            if !known.contains(&full) {
                unknown.push(full);
            }
        }
    }
    unknown
}

/// `file` with every setting `flags` has (a flag or a variable) put over it.
pub fn layered<T: Serialize + DeserializeOwned>(file: &T, flags: &T) -> anyhow::Result<T> {
    let mut base = serde_json::to_value(file)?;
    let over = serde_json::to_value(flags)?;
    if let (Some(base), Some(over)) = (base.as_object_mut(), over.as_object()) {
        for (key, value) in over {
            let unset = value.is_null() || value.as_array().is_some_and(Vec::is_empty);
            if !unset {
                base.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(serde_json::from_value(base)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_overrides_defaults_and_tolerates_unknown_keys() {
        let dir = std::env::temp_dir().join(format!("gm-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.toml");
        std::fs::write(
            &path,
            "[node]\nlisten = \"127.0.0.1:9999\"\nbogus = 1\n[target]\nmountpaths = [\"/a\", \"/b\"]\n\
             [s3]\nlisten = \"127.0.0.1:9000\"\n\
             [[s3.users]]\naccess_key = \"a\"\nsecret_key = \"s\"\nread = [\"*\"]\n\
             [[s3.users]]\naccess_key = \"b\"\nsecret_key = \"t\"\nwrite = [\"ckpt\"]\n",
        )
        .unwrap();
        let c = FileConfig::load(Some(&path)).unwrap();
        assert_eq!(c.node.listen.as_deref(), Some("127.0.0.1:9999"));
        assert_eq!(c.target.mountpaths.len(), 2);
        assert_eq!(c.node.keepalive_interval_ms, None);
        assert_eq!(c.s3.listen.as_deref(), Some("127.0.0.1:9000"));
        let users = c.s3.users.clone().unwrap_or_default().0;
        let names: Vec<_> = users.iter().map(|u| u.access_key.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(users[1].write, ["ckpt"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_keys_are_named_and_known_ones_are_not() {
        let raw: toml::Value = toml::from_str(
            "[node]\nlisten = \"x\"\nlistne = \"y\"\n[space]\nhigh_wm = 80\n\
             [limits]\nmax_conns = 5\nmax_cons = 6\n[nodes]\nlisten = \"z\"\n",
        )
        .unwrap();
        let mut unknown = unknown_keys(&raw);
        unknown.sort();
        assert_eq!(unknown, ["limits.max_cons", "node.listne", "nodes"]);
    }

    #[test]
    fn a_weight_is_a_number_or_capacity_in_the_file() {
        let dir = tempfile_dir("weight");
        let path = dir.join("c.toml");
        for (text, want) in [
            (
                "[target]\nweight = 200\n",
                gristmill_target::Weight::Fixed(200),
            ),
            (
                "[target]\nweight = \"300\"\n",
                gristmill_target::Weight::Fixed(300),
            ),
            (
                "[target]\nweight = \"capacity\"\n",
                gristmill_target::Weight::Capacity,
            ),
            ("[target]\n", gristmill_target::Weight::Fixed(0)),
        ] {
            std::fs::write(&path, text).unwrap();
            let file = FileConfig::load(Some(&path)).unwrap();
            assert_eq!(file.target.weight(), want, "{text}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_value_of_the_wrong_type_in_the_file_is_an_error() {
        let dir = tempfile_dir("wrong-type");
        for text in [
            "[space]\nhigh_wm = \"high\"\n",
            "[space]\ndont_evict_time = \"soon\"\n",
            "[backend]\ncold_get_chunk = \"big\"\n",
            "[target]\nopen_files = -1\n",
            "[target]\nweight = 0\n",
            "[target]\nweight = \"most\"\n",
        ] {
            let path = dir.join("c.toml");
            std::fs::write(&path, text).unwrap();
            let err = FileConfig::load(Some(&path)).unwrap_err().to_string();
            assert!(err.contains("invalid config"), "{text}: {err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn flags_win_over_the_file_and_unset_flags_keep_it() {
        let file = SpaceSettings {
            high_wm: Some(80),
            low_wm: Some(60),
            ..Default::default()
        };
        let flags = SpaceSettings {
            high_wm: Some(85),
            ..Default::default()
        };
        let merged = layered(&file, &flags).unwrap();
        assert_eq!(merged.high_wm, Some(85));
        assert_eq!(merged.low_wm, Some(60));
        let file = TargetSettings {
            mountpaths: vec!["/a".into()],
            ..Default::default()
        };
        let merged = layered(&file, &TargetSettings::default()).unwrap();
        assert_eq!(merged.mountpaths, [PathBuf::from("/a")]);
    }

    pub(crate) fn tempfile_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gm-cfg-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
