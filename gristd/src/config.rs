//! Node configuration in three layers: built-in defaults, a TOML file (`--config`), then flags
//! and their `GRISTD_*` environment variables. Unknown keys in the file are warned about, not
//! fatal.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The TOML file. Every field has a default; see `docs/operations.md` for an example.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct FileConfig {
    pub node: NodeSection,
    pub target: TargetSection,
    pub s3: S3Section,
    /// Users, tokens and intra-cluster signatures (see `docs/security.md`).
    pub auth: AuthSection,
    /// HTTPS for the node API.
    pub tls: TlsSection,
    /// Request and connection limits by key (`max_headers = 128`, `header_read_timeout =
    /// "30s"`; see `gristmill_core::limits`).
    pub limits: std::collections::BTreeMap<String, toml::Value>,
}

/// Access control (proxies and targets alike).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AuthSection {
    /// Require users and tokens, and sign requests between nodes.
    pub enabled: bool,
    /// File with the cluster secret (hex); default `<state_dir>/cluster.secret`. Every node
    /// of a cluster reads the same secret; a primary proxy creates it when missing.
    pub secret_file: Option<PathBuf>,
    /// Lifetime of signed redirects (`60s`).
    pub redirect_ttl: Option<String>,
}

/// TLS certificate and key (PEM), and the CA bundle used to verify peers.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TlsSection {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
}

/// S3 API settings (proxies).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct S3Section {
    /// Extra address serving only the S3 API (the main port serves it at its root too).
    pub listen: Option<String>,
    /// Users with SigV4 keys and bucket grants; none = anonymous access.
    pub users: Vec<gristmill_proxy::S3User>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct NodeSection {
    /// Address to listen on.
    pub listen: String,
    /// URL others use to reach this node (default: `http://<listen>`).
    pub public_url: String,
    /// Directory for the node id, cluster map and bucket metadata.
    pub state_dir: PathBuf,
    /// Proxy to register with (targets, and non-primary proxies).
    pub join: String,
    /// Keepalive period in milliseconds.
    pub keepalive_interval_ms: u64,
}

impl Default for NodeSection {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            public_url: String::new(),
            state_dir: PathBuf::from("gristmill-state"),
            join: String::new(),
            keepalive_interval_ms: 2000,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TargetSection {
    /// Data directories (one per disk). Default: `<state_dir>/mp0`.
    pub mountpaths: Vec<PathBuf>,
}

impl FileConfig {
    /// Loads the file, warning about keys it does not know.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let raw: toml::Value = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("parsing {}: {e}", path.display()))?;
        warn_unknown(&raw);
        raw.try_into()
            .map_err(|e| anyhow::anyhow!("invalid config {}: {e}", path.display()))
    }

    pub fn keepalive_interval(&self) -> Duration {
        Duration::from_millis(self.node.keepalive_interval_ms.max(100))
    }
}

fn warn_unknown(raw: &toml::Value) {
    const KNOWN: &[(&str, &[&str])] = &[
        (
            "node",
            &[
                "listen",
                "public_url",
                "state_dir",
                "join",
                "keepalive_interval_ms",
            ],
        ),
        ("target", &["mountpaths"]),
        ("s3", &["listen", "users"]),
        ("auth", &["enabled", "secret_file", "redirect_ttl"]),
        ("tls", &["cert", "key", "ca"]),
    ];
    let Some(table) = raw.as_table() else { return };
    for (section, value) in table {
        if section == "limits" {
            let keys: Vec<&str> = gristmill_core::limits::Limits::keys().collect();
            for key in value.as_table().into_iter().flat_map(|t| t.keys()) {
                if !keys.contains(&key.as_str()) {
                    tracing::warn!(section, key, "unknown config key ignored");
                }
            }
            continue;
        }
        match KNOWN.iter().find(|(s, _)| s == section) {
            None => tracing::warn!(section, "unknown config section ignored"),
            Some((_, keys)) => {
                for key in value.as_table().into_iter().flat_map(|t| t.keys()) {
                    if !keys.contains(&key.as_str()) {
                        tracing::warn!(section, key, "unknown config key ignored");
                    }
                }
            }
        }
    }
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
        assert_eq!(c.node.listen, "127.0.0.1:9999");
        assert_eq!(c.target.mountpaths.len(), 2);
        assert_eq!(c.node.keepalive_interval_ms, 2000);
        assert_eq!(c.s3.listen.as_deref(), Some("127.0.0.1:9000"));
        let users: Vec<_> = c.s3.users.iter().map(|u| u.access_key.as_str()).collect();
        assert_eq!(users, ["a", "b"]);
        assert_eq!(c.s3.users[1].write, ["ckpt"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
