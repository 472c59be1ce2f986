//! HTTP side of the load generator: one connection-reusing client (TCP_NODELAY, no system
//! proxy), the URL of every object for the chosen mode, and the GET / PUT operations.
//!
//! URLs are computed once per object before the run, so the timed loop does no placement or
//! formatting: in direct mode the owner comes from the cluster map by HRW
//! ([`gristmill_core::ClusterMap::owner`]), exactly as the target itself computes it.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use gristmill_core::{Bck, ClusterMap};
use reqwest::{StatusCode, Url};

use crate::config::{Config, Mode};
use crate::workload::ObjectSet;

/// Why an operation failed, classified for the error summary.
#[derive(Debug)]
pub struct OpError {
    /// `http 404`, `transport`, `short body`, `verify`.
    pub class: String,
    pub detail: String,
}

impl OpError {
    fn new(class: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            class: class.into(),
            detail: detail.into(),
        }
    }

    fn transport(e: reqwest::Error) -> Self {
        let class = if e.is_timeout() {
            "timeout"
        } else if e.is_connect() {
            "connect"
        } else {
            "transport"
        };
        // `{:#}`-style chain without the URL noise of the top-level message.
        let mut detail = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            detail.push_str(": ");
            detail.push_str(&s.to_string());
            src = s.source();
        }
        Self::new(class, detail)
    }
}

/// The client every worker shares (reqwest pools connections per host internally).
pub fn build_client(cfg: &Config) -> anyhow::Result<reqwest::Client> {
    let redirects = match cfg.mode {
        // The proxy answers 307 to the owner; a target may forward once more (`tfwd`).
        Mode::Proxy | Mode::Direct => reqwest::redirect::Policy::limited(3),
        Mode::Http | Mode::S3 => reqwest::redirect::Policy::none(),
    };
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .no_proxy()
        .pool_max_idle_per_host(cfg.workers * 2)
        .pool_idle_timeout(Duration::from_secs(90))
        .redirect(redirects)
        .timeout(cfg.timeout)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .context("building the HTTP client")
}

/// Where each object of the set is read from and written to.
pub async fn object_urls(
    client: &reqwest::Client,
    cfg: &Config,
    set: &ObjectSet,
) -> anyhow::Result<Vec<Url>> {
    let bck = &cfg.bucket;
    let urls: Vec<String> = match cfg.mode {
        Mode::Http => (0..set.len())
            .map(|i| format!("{}/{}", cfg.endpoint, set.name(i)))
            .collect(),
        Mode::Proxy => (0..set.len())
            .map(|i| object_url(&cfg.endpoint, bck, set.name(i)))
            .collect(),
        Mode::Direct => {
            let smap = cluster_map(client, &cfg.endpoint).await?;
            if smap.active_targets().next().is_none() {
                bail!("the cluster map at {} has no active targets", cfg.endpoint);
            }
            (0..set.len())
                .map(|i| {
                    let owner = smap
                        .owner(&bck.object_uname(set.name(i)))
                        .expect("a map with active targets has an owner for every name");
                    object_url(owner.url(), bck, set.name(i))
                })
                .collect()
        }
        Mode::S3 => bail!("S3 mode is not supported"),
    };
    urls.iter()
        .map(|u| Url::parse(u).with_context(|| format!("invalid URL {u}")))
        .collect()
}

/// `<base>/v1/objects/<bucket>/<name>[?provider=..&namespace=..]` (names are validated
/// URL-safe; see `config`).
fn object_url(base: &str, bck: &Bck, name: &str) -> String {
    let mut url = format!("{base}/v1/objects/{}/{name}", bck.name);
    let mut sep = '?';
    if bck.provider.is_remote() {
        url.push(sep);
        url.push_str("provider=");
        url.push_str(bck.provider.as_str());
        sep = '&';
    }
    if !bck.namespace.is_global() {
        url.push(sep);
        url.push_str("namespace=");
        url.push_str(&bck.namespace.uname().replace('#', "%23"));
    }
    url
}

async fn cluster_map(client: &reqwest::Client, endpoint: &str) -> anyhow::Result<ClusterMap> {
    let url = format!("{endpoint}/v1/cluster?what=smap");
    let resp = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    if !resp.status().is_success() {
        bail!("GET {url}: HTTP {}", resp.status());
    }
    resp.json::<ClusterMap>()
        .await
        .with_context(|| format!("decoding the cluster map from {url}"))
}

/// Creates the bucket through the proxy; an existing bucket is fine.
pub async fn create_bucket(
    client: &reqwest::Client,
    endpoint: &str,
    bck: &Bck,
) -> anyhow::Result<()> {
    let url = format!("{endpoint}/v1/buckets/{}", bck.name);
    let resp = client
        .post(&url)
        .json(&serde_json::json!({ "action": "create-bck" }))
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    match resp.status() {
        s if s.is_success() || s == StatusCode::CONFLICT => Ok(()),
        s => {
            let body = resp.text().await.unwrap_or_default();
            bail!("creating bucket {bck}: HTTP {s}: {body}")
        }
    }
}

/// GETs one object, streaming the body; checks its length (always) and bytes (`verify`).
/// Returns the bytes received.
pub async fn get(
    client: &reqwest::Client,
    url: &Url,
    expected: &Bytes,
    verify: bool,
) -> Result<u64, OpError> {
    let mut resp = client
        .get(url.clone())
        .send()
        .await
        .map_err(OpError::transport)?;
    let status = resp.status();
    if status != StatusCode::OK {
        let body = resp.text().await.unwrap_or_default();
        return Err(OpError::new(
            format!("http {}", status.as_u16()),
            format!("GET {url}: {}", truncate(&body, 300)),
        ));
    }
    let mut got: u64 = 0;
    while let Some(chunk) = resp.chunk().await.map_err(OpError::transport)? {
        if verify {
            let start = got as usize;
            let end = start + chunk.len();
            if end > expected.len() || expected[start..end] != chunk[..] {
                return Err(OpError::new(
                    "verify",
                    format!("GET {url}: content differs at bytes {start}..{end}"),
                ));
            }
        }
        got += chunk.len() as u64;
    }
    if got != expected.len() as u64 {
        return Err(OpError::new(
            "short body",
            format!("GET {url}: got {got} bytes, expected {}", expected.len()),
        ));
    }
    Ok(got)
}

/// PUTs one object (the body is a reusable `Bytes`, so a 307 can re-send it).
pub async fn put(client: &reqwest::Client, url: &Url, body: Bytes) -> Result<u64, OpError> {
    let len = body.len() as u64;
    let resp = client
        .put(url.clone())
        .body(body)
        .send()
        .await
        .map_err(OpError::transport)?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        return Err(OpError::new(
            format!("http {}", status.as_u16()),
            format!("PUT {url}: {}", truncate(&body, 300)),
        ));
    }
    // Drain the (empty) body so the connection goes back to the pool.
    let _ = resp.bytes().await;
    Ok(len)
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gristmill_core::Provider;

    #[test]
    fn native_urls() {
        let bck = Bck::new("b", Provider::Ais).unwrap();
        assert_eq!(
            object_url("http://h:1", &bck, "p/00000001"),
            "http://h:1/v1/objects/b/p/00000001"
        );
        let remote = Bck::new("r", Provider::Aws).unwrap();
        assert_eq!(
            object_url("http://h:1", &remote, "x"),
            "http://h:1/v1/objects/r/x?provider=aws"
        );
    }
}
