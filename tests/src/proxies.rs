//! Clusters with several proxies, optionally each node on its own loopback address
//! (127.a.b.x) so that tests can cut the network between groups of nodes with nftables.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gristmill_core::ClusterMap;

pub use crate::free_port_on;
use crate::{Cluster, NodeProcess};

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct ProxiesSpec {
    pub proxies: usize,
    pub targets: usize,
    /// One address per node, proxies first, then targets; empty = every node on 127.0.0.1.
    pub ips: Vec<String>,
    /// Extra arguments for every node (e.g. `--keepalive-interval-ms`).
    pub node_args: Vec<String>,
    /// Extra arguments for proxies only (e.g. `--keepalive-retries`).
    pub proxy_args: Vec<String>,
    /// Auth on (`node_args` carry `--auth` and the secret): the first admin's password
    /// (`--admin-password`); the cluster's client then carries the admin's token.
    pub admin_password: Option<String>,
}

/// A cluster of several proxies: proxy 0 (`Cluster::proxy`) starts as the primary, the others
/// join it. Dereferences to [`Cluster`] (whose `endpoint` is proxy 0's URL).
pub struct ProxiesCluster {
    pub cluster: Cluster,
    /// Proxies 1.. (proxy 0 is `cluster.proxy`).
    pub more_proxies: Vec<NodeProcess>,
    /// Every proxy's URL, proxy 0 first.
    pub proxy_urls: Vec<String>,
    /// Every node's address (proxies first, then targets).
    pub ips: Vec<String>,
}

impl std::ops::Deref for ProxiesCluster {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

impl std::ops::DerefMut for ProxiesCluster {
    fn deref_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }
}

impl Cluster {
    /// Starts `spec.proxies` proxies and `spec.targets` targets (one mountpath each) and waits
    /// until every proxy and target is in the primary's map.
    pub async fn start_proxies(spec: ProxiesSpec) -> anyhow::Result<ProxiesCluster> {
        let n = spec.proxies + spec.targets;
        let ips: Vec<String> = if spec.ips.is_empty() {
            vec!["127.0.0.1".to_owned(); n]
        } else {
            spec.ips.clone()
        };
        if ips.len() != n || spec.proxies == 0 {
            bail!("start_proxies: one address per node and at least one proxy");
        }
        let dir = tempfile::Builder::new()
            .prefix("gristmill-test-")
            .tempdir()?;
        let proxy_urls: Vec<String> = ips[..spec.proxies]
            .iter()
            .map(|ip| format!("http://{ip}:{}", free_port_on(ip)))
            .collect();
        let primary = proxy_urls[0].clone();
        let mut proxies = Vec::new();
        for (i, url) in proxy_urls.iter().enumerate() {
            let listen = url.trim_start_matches("http://").to_owned();
            let mut args: Vec<String> = vec![
                "proxy".into(),
                "--listen".into(),
                listen,
                "--state-dir".into(),
                dir.path().join(format!("proxy-{i}")).display().to_string(),
            ];
            if i > 0 {
                args.extend(["--join".into(), primary.clone()]);
            }
            args.extend(spec.node_args.iter().cloned());
            args.extend(spec.proxy_args.iter().cloned());
            proxies.push(NodeProcess::spawn(
                &format!("proxy-{i}"),
                args,
                Vec::new(),
                dir.path(),
            )?);
        }
        let mut targets = Vec::new();
        let mut mountpaths = Vec::new();
        for i in 0..spec.targets {
            let state = dir.path().join(format!("target-{i}"));
            let mp = state.join("mp0");
            let mut args: Vec<String> = vec![
                "target".into(),
                "--listen".into(),
                format!("{}:0", ips[spec.proxies + i]),
                "--state-dir".into(),
                state.display().to_string(),
                "--join".into(),
                primary.clone(),
                "--mountpath".into(),
                mp.display().to_string(),
            ];
            args.extend(spec.node_args.iter().cloned());
            targets.push(NodeProcess::spawn(
                &format!("target-{i}"),
                args,
                Vec::new(),
                dir.path(),
            )?);
            mountpaths.push(vec![mp]);
        }
        let mut proxies = proxies.into_iter();
        let http = match &spec.admin_password {
            None => reqwest::Client::builder()
                .tcp_nodelay(true)
                .timeout(Duration::from_secs(10))
                .build()?,
            Some(password) => {
                let deadline = Instant::now() + Duration::from_secs(60);
                let token = loop {
                    match crate::secure::login_at(&primary, None, "admin", password, "").await {
                        Ok(t) => break t,
                        Err(e) if Instant::now() > deadline => bail!("admin login: {e}"),
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                };
                crate::secure::client(None, Some(&token))
            }
        };
        let cluster = Cluster {
            dir,
            endpoint: primary,
            proxy: proxies.next().expect("proxy 0"),
            targets,
            mountpaths,
            http,
        };
        let c = ProxiesCluster {
            cluster,
            more_proxies: proxies.collect(),
            proxy_urls,
            ips,
        };
        c.wait_for_targets(spec.targets).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while c.smap().await?.pmap.len() < spec.proxies {
            if Instant::now() > deadline {
                bail!("not every proxy joined:\n{}", c.proxy.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(c)
    }
}

impl ProxiesCluster {
    /// Proxy `i` (0 = the first primary).
    pub fn proxy_mut(&mut self, i: usize) -> &mut NodeProcess {
        if i == 0 {
            &mut self.cluster.proxy
        } else {
            &mut self.more_proxies[i - 1]
        }
    }

    /// The map a node (proxy or target) holds now.
    pub async fn map_of(&self, url: &str) -> anyhow::Result<ClusterMap> {
        Ok(self
            .http
            .get(format!("{url}/v1/daemon?what=smap"))
            .timeout(Duration::from_secs(3))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Waits until every node at `urls` holds the same map (version, term and primary) and
    /// `accept` holds for it; returns it.
    pub async fn one_map(
        &self,
        urls: &[String],
        accept: impl Fn(&ClusterMap) -> bool,
        within: Duration,
    ) -> anyhow::Result<ClusterMap> {
        let deadline = Instant::now() + within;
        loop {
            let mut maps = Vec::new();
            for u in urls {
                maps.push(self.map_of(u).await.ok());
            }
            if let Some(Some(first)) = maps.first()
                && maps.iter().all(|m| {
                    m.as_ref().is_some_and(|m| {
                        (m.version, m.term, &m.proxy_si.daemon_id)
                            == (first.version, first.term, &first.proxy_si.daemon_id)
                    })
                })
                && accept(first)
            {
                return Ok(first.clone());
            }
            let last = maps
                .iter()
                .map(|m| {
                    m.as_ref().map(|m| {
                        format!(
                            "v{} term {} primary {} ({}p/{}t)",
                            m.version,
                            m.term,
                            m.proxy_si.daemon_id,
                            m.pmap.len(),
                            m.tmap.len()
                        )
                    })
                })
                .collect::<Vec<_>>();
            if Instant::now() > deadline {
                bail!("no single map on {urls:?} after {within:?}: {last:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// [`Self::one_map`] on every node of the map proxy 0 holds, read again each round (a
    /// restarted target listens on a new port).
    pub async fn one_map_everywhere(
        &self,
        accept: impl Fn(&ClusterMap) -> bool,
        within: Duration,
    ) -> anyhow::Result<ClusterMap> {
        let deadline = Instant::now() + within;
        loop {
            let urls = match self.map_of(&self.proxy_urls[0]).await {
                Ok(m) => Self::node_urls(&m),
                Err(_) => self.proxy_urls.clone(),
            };
            match self.one_map(&urls, &accept, Duration::from_secs(5)).await {
                Ok(m) => return Ok(m),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => {}
            }
        }
    }

    /// The URL of every node in `map` (proxies, then targets).
    pub fn node_urls(map: &ClusterMap) -> Vec<String> {
        map.pmap
            .values()
            .chain(map.tmap.values())
            .map(|n| n.url().to_owned())
            .collect()
    }
}

/// An nftables table that drops traffic between two groups of addresses; deleted when dropped
/// (also when a test panics).
pub struct Partition {
    table: String,
}

impl Partition {
    /// Drops every packet from a member of `a` to a member of `b` and back.
    pub fn cut(a: &[String], b: &[String]) -> anyhow::Result<Self> {
        let table = format!(
            "gristmill_test_{}_{}",
            std::process::id(),
            rand::random::<u32>()
        );
        let set = |ips: &[String]| format!("{{ {} }}", ips.join(", "));
        let script = format!(
            "table inet {table} {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n    ip saddr {a} ip daddr {b} drop\n    ip saddr {b} ip daddr {a} drop\n  }}\n}}\n",
            a = set(a),
            b = set(b),
        );
        let mut child = std::process::Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .context("running nft (install the nftables package)")?;
        std::io::Write::write_all(child.stdin.as_mut().expect("nft stdin"), script.as_bytes())?;
        drop(child.stdin.take());
        let status = child.wait()?;
        if !status.success() {
            bail!("nft -f failed ({status}) for:\n{script}");
        }
        Ok(Self { table })
    }

    /// Removes the drop rules.
    pub fn heal(self) {}
}

impl Drop for Partition {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .status();
    }
}
