//! Node flags for access control, TLS and limits, turned into the options a node serves with
//! (`gristmill_node::conn::ServeOptions`). Flags override the config file's `[auth]`, `[tls]`
//! and `[limits]` sections; limits also read `GRISTD_<LIMIT>` variables.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use gristmill_core::limits::Limits;
use gristmill_node::conn::ServeOptions;

use crate::config::FileConfig;

/// Security flags shared by `gristd proxy` and `gristd target`.
#[derive(Args, Debug, Clone, Default)]
pub struct SecurityArgs {
    /// Require users and signed tokens on every request, and sign requests between nodes
    /// with the cluster secret. A new primary creates the first admin and prints its
    /// password once.
    #[arg(long, env = "GRISTD_AUTH")]
    pub auth: bool,
    /// File with the cluster secret (hex; default `<state-dir>/cluster.secret`). Every node
    /// of the cluster needs the same file; the primary proxy creates it when missing.
    #[arg(long, env = "GRISTD_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Lifetime of the signed redirects proxies hand out (default 60s).
    #[arg(long, env = "GRISTD_REDIRECT_TTL")]
    pub redirect_ttl: Option<String>,
    /// Serve HTTPS with this certificate chain (PEM); reloaded on SIGHUP.
    #[arg(long, env = "GRISTD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "GRISTD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA bundle (PEM) to trust when calling other nodes over HTTPS.
    #[arg(long, env = "GRISTD_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
}

/// The limits from the config file's `[limits]`, then `GRISTD_*` variables.
pub fn limits(file: &FileConfig) -> anyhow::Result<Limits> {
    let mut l = Limits::default();
    for (key, value) in &file.limits {
        let v = match value {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        l.set(key, &v).map_err(anyhow::Error::msg)?;
    }
    l.apply_env().map_err(anyhow::Error::msg)?;
    Ok(l)
}

/// How a node serves: limits, TLS and auth. `may_create_secret`: a primary proxy creates
/// the cluster secret file when it does not exist; other nodes need it to exist.
pub fn serve_options(
    file: &FileConfig,
    args: &SecurityArgs,
    state_dir: &Path,
    may_create_secret: bool,
) -> anyhow::Result<ServeOptions> {
    let mut opts = ServeOptions {
        limits: limits(file)?,
        ..Default::default()
    };
    let cert = args.tls_cert.clone().or(file.tls.cert.clone());
    let key = args.tls_key.clone().or(file.tls.key.clone());
    match (cert, key) {
        (Some(cert), Some(key)) => {
            opts.tls = Some(
                gristmill_node::tls::TlsServer::load(&cert, &key)
                    .with_context(|| format!("loading TLS certificate {}", cert.display()))?,
            );
        }
        (None, None) => {}
        _ => anyhow::bail!("TLS needs both a certificate and a key"),
    }
    if let Some(ca) = args.tls_ca.clone().or(file.tls.ca.clone()) {
        opts.peer_ca = Some(
            std::fs::read(&ca).with_context(|| format!("reading CA bundle {}", ca.display()))?,
        );
    }
    if args.auth || file.auth.enabled {
        let path = args
            .cluster_secret_file
            .clone()
            .or(file.auth.secret_file.clone())
            .unwrap_or_else(|| state_dir.join("cluster.secret"));
        let secret = if may_create_secret {
            let (secret, created) = gristmill_node::auth::load_or_create_secret(&path)
                .with_context(|| format!("cluster secret {}", path.display()))?;
            if created {
                tracing::warn!(path = %path.display(), "created a new cluster secret: copy it to every node");
            }
            secret
        } else {
            gristmill_node::auth::load_secret(&path).with_context(|| {
                format!(
                    "reading the cluster secret {} (copy the primary proxy's file here)",
                    path.display()
                )
            })?
        };
        let mut keys = gristmill_node::auth::Keys::from_secret(&secret);
        if let Some(ttl) = args.redirect_ttl.clone().or(file.auth.redirect_ttl.clone()) {
            keys.redirect_ttl = gristmill_core::time::parse_duration(&ttl)
                .map_err(|e| anyhow::anyhow!("redirect TTL: {e}"))?;
        }
        opts.auth = Some(Arc::new(keys));
    }
    Ok(opts)
}
