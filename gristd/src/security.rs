//! Access control, TLS and limits (`[auth]`, `[tls]`, `[limits]`, already layered) turned
//! into the options a node serves with (`gristmill_node::conn::ServeOptions`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use gristmill_node::conn::ServeOptions;

use crate::config::FileConfig;

/// How a node serves: limits, TLS and auth. `may_create_secret`: a primary proxy creates
/// the cluster secret file when it does not exist; other nodes need it to exist.
pub fn serve_options(
    file: &FileConfig,
    state_dir: &Path,
    may_create_secret: bool,
) -> anyhow::Result<ServeOptions> {
    let mut opts = ServeOptions {
        limits: crate::config::resolve::limits(file)?,
        ..Default::default()
    };
    let cert = file.tls.cert.clone();
    let key = file.tls.key.clone();
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
    if let Some(ca) = file.tls.ca.clone() {
        opts.peer_ca = Some(
            std::fs::read(&ca).with_context(|| format!("reading CA bundle {}", ca.display()))?,
        );
    }
    if file.auth.enabled.unwrap_or(false) {
        let path = file
            .auth
            .secret_file
            .clone()
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
        if let Some(ttl) = file.auth.redirect_ttl {
            keys.redirect_ttl = ttl.0;
        }
        opts.auth = Some(Arc::new(keys));
    }
    Ok(opts)
}
