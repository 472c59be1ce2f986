//! TLS for the node API (rustls): a certificate chain and key from PEM files, reloaded from
//! the same files on SIGHUP (or [`TlsServer::reload`]) without dropping connections — a
//! handshake uses whichever configuration is current when it starts.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// A reloadable TLS server configuration.
#[derive(Clone)]
pub struct TlsServer {
    acceptor: Arc<RwLock<TlsAcceptor>>,
    cert: PathBuf,
    key: PathBuf,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish()
    }
}

fn invalid(path: &Path, what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}: {e}", path.display()),
    )
}

/// The rustls configuration for a certificate chain and key in PEM files.
fn server_config(cert: &Path, key: &Path) -> io::Result<rustls::ServerConfig> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| invalid(cert, "reading certificates", e))?
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(cert, "parsing certificates", e))?;
    if chain.is_empty() {
        return Err(invalid(cert, "certificates", "no PEM certificate found"));
    }
    let key_der =
        PrivateKeyDer::from_pem_file(key).map_err(|e| invalid(key, "reading the key", e))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| io::Error::other(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| invalid(cert, "certificate and key", e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

impl TlsServer {
    /// Loads `cert` (PEM chain, leaf first) and `key` (PEM private key).
    pub fn load(cert: &Path, key: &Path) -> io::Result<Self> {
        let config = server_config(cert, key)?;
        Ok(Self {
            acceptor: Arc::new(RwLock::new(TlsAcceptor::from(Arc::new(config)))),
            cert: cert.to_owned(),
            key: key.to_owned(),
        })
    }

    /// The acceptor for the next handshake.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the files again; on any error the current configuration stays.
    pub fn reload(&self) -> io::Result<()> {
        let config = server_config(&self.cert, &self.key)?;
        *self.acceptor.write().unwrap_or_else(|e| e.into_inner()) =
            TlsAcceptor::from(Arc::new(config));
        Ok(())
    }

    /// Reloads on every SIGHUP until `shutdown`.
    pub fn reload_on_sighup(&self, shutdown: CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            let Ok(mut hup) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            else {
                tracing::warn!("cannot listen for SIGHUP; TLS certificates will not reload");
                return;
            };
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    got = hup.recv() => if got.is_none() { return },
                }
                match this.reload() {
                    Ok(()) => {
                        tracing::info!(cert = %this.cert.display(), "TLS certificate reloaded")
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "TLS reload failed; keeping the old certificate")
                    }
                }
            }
        });
    }
}
