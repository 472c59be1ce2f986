//! `gristmill-proxy`: the gateway. It holds no data.
//!
//! Every proxy serves the whole API: object requests are answered with a 307 to the target that
//! owns the object by HRW ([`http`]); listings are fanned out to all targets and merged
//! ([`list`]). The proxies keep the cluster's metadata in a replicated log ([`raft`]): the
//! Raft leader is the primary; it alone changes the cluster map and bucket metadata, each
//! change acknowledged once a majority of proxies has it, then pushed to every target
//! ([`meta`]); it takes up the primary's duties when elected ([`leader`]). Nodes register
//! with it and send keepalives ([`membership`]).

mod auth_api;
mod config_api;
mod etl_api;
mod forward;
mod http;
mod job_api;
mod jobs;
mod leader;
mod list;
mod membership;
mod meta;
mod raft;
mod remote;
#[cfg(test)]
mod router_tests;
mod s3;
mod shards;
mod ui;

pub use raft::RaftSettings;
pub use s3::{DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, S3User};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub(crate) use meta::Proxy;

/// Runtime configuration of a proxy.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where the node keeps its id, cluster map and bucket metadata.
    pub state_dir: PathBuf,
    /// URL clients and nodes use to reach this proxy; derived from the listener when empty.
    pub public_url: String,
    /// Primary to join as a non-primary proxy; empty = be the primary.
    pub join_url: String,
    /// Keepalive period expected from nodes (and sent to the primary by non-primaries).
    pub keepalive_interval: Duration,
    /// S3 users; empty = anonymous S3 access.
    pub s3_users: Vec<S3User>,
    /// Keepalives a target may miss before the primary removes it from the map.
    pub keepalive_retries: u32,
    /// How long a silent target stays in the map as suspect (restarting) before it is removed
    /// (zero: removed at once).
    pub suspect_grace: Duration,
    /// How long a target marked restarting may stay silent before it is removed.
    pub restart_grace: Duration,
    /// Extra address serving only the S3 API (the main port serves it at its root too).
    pub s3_listen: Option<String>,
    /// Base domain of virtual-hosted-style S3 requests (`bucket.domain`); `None`: path-style
    /// only.
    pub s3_domain: Option<String>,
    /// Limits, TLS and access control (auth off by default).
    pub serve: gristmill_node::conn::ServeOptions,
    /// Password of the first admin a new cluster with auth creates (else one is generated).
    pub admin_password: Option<String>,
    /// Raft timing of the proxies' control plane.
    pub raft: RaftSettings,
    /// Serve the dashboard's files from this directory instead of the embedded copies.
    pub ui_dir: Option<PathBuf>,
}

/// Runs a proxy on `listener` until `shutdown` fires.
pub async fn run(
    config: ProxyConfig,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // Install the metrics recorder before anything records.
    gristmill_node::server::metrics_handle();
    let url = if config.public_url.is_empty() {
        let scheme = if config.serve.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", listener.local_addr()?)
    } else {
        config.public_url.trim_end_matches('/').to_owned()
    };
    let mut config = config;
    let ip = listener.local_addr()?.ip();
    if ip.is_loopback() && ip != std::net::IpAddr::from([127, 0, 0, 1]) {
        // Listening on a loopback alias (127.a.b.c, e.g. several nodes on one machine cut
        // apart by address rules): requests to peers leave from it, not from 127.0.0.1. (Other
        // addresses are left to the kernel: a specific interface address is chosen by the
        // route anyway, and binding every outgoing socket costs ephemeral ports.)
        config.serve.source_ip = Some(ip);
    }
    let proxy = Arc::new(Proxy::start(&config, url).await?);
    if config.join_url.is_empty() {
        leader::found_or_import(&proxy).await?;
    }
    // Objects may still be moving for the map this proxy starts with: the replicated version
    // of the last change of active targets when the state has it, else this map's.
    let changed_at = match proxy.raft.state().borrow().active_changed_at {
        0 => proxy.smap().version,
        v => v,
    };
    proxy
        .active_changed_at
        .store(changed_at, std::sync::atomic::Ordering::SeqCst);
    leader::lead_if_alone(&proxy).await?;
    tracing::info!(node = %proxy.id, url = %proxy.url, primary = proxy.is_primary(), "proxy starting");
    gristmill_node::metrics::node_info("proxy", &proxy.id);
    if let Some(tls) = &config.serve.tls {
        tls.reload_on_sighup(shutdown.clone());
    }
    tokio::spawn(publish_applied(proxy.clone(), shutdown.clone()));
    tokio::spawn(leader::run(proxy.clone(), shutdown.clone()));
    let members = tokio::spawn(membership::run(
        proxy.clone(),
        config.join_url.trim_end_matches('/').to_owned(),
        config.keepalive_interval,
        config.keepalive_retries.max(1),
        shutdown.clone(),
    ));
    gristmill_node::worker::spawn(
        Arc::new(jobs::PlacementWatch(proxy.clone())),
        shutdown.clone(),
    );
    let s3 = s3::service(proxy.clone(), &config.s3_users, config.s3_domain.as_deref());
    if let Some(addr) = &config.s3_listen {
        let s3_listener = TcpListener::bind(addr).await?;
        tracing::info!(addr = %s3_listener.local_addr()?, "S3 API listening");
        let app = http::s3_only_router(s3.clone());
        tokio::spawn(gristmill_node::server::serve_with(
            s3_listener,
            app,
            shutdown.clone(),
            config.serve.clone(),
        ));
    }
    let app = auth_api::secure(
        &proxy,
        http::router(proxy.clone(), s3)
            .merge(raft::api::router(proxy.raft.clone()))
            .merge(ui::routes(config.ui_dir.clone())),
    );
    gristmill_node::server::serve_with(listener, app, shutdown.clone(), config.serve.clone())
        .await?;
    shutdown.cancel();
    let _ = members.await;
    let _ = proxy.raft.shutdown().await;
    tracing::info!(node = %proxy.id, "proxy stopped");
    Ok(())
}

/// Publishes each batch the Raft state machine applies (what `Proxy::smap` / `bmd` return).
async fn publish_applied(proxy: Arc<Proxy>, shutdown: CancellationToken) {
    let mut state = proxy.raft.state();
    loop {
        proxy.publish();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = state.changed() => if changed.is_err() { return },
        }
    }
}
