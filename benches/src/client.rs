//! HTTP side of the load generator: one connection-reusing client (TCP_NODELAY, no system
//! proxy), the URL of every object for the chosen mode, and the GET / PUT operations.
//!
//! URLs are computed once per object before the run, so the timed loop does no placement or
//! formatting. Object URLs, the cluster map and HRW direct mode come from the SDK
//! (`gristmill_client`: [`gristmill_client::object_url`], [`gristmill_client::direct_url`],
//! the owner computed exactly as the target itself computes it); the timed GETs and PUTs use
//! a bare, tuned `reqwest::Client` of their own.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use gristmill_client::HttpError;
use reqwest::{StatusCode, Url};

use crate::config::{Config, Mode, S3Keys};
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
pub async fn object_urls(cfg: &Config, set: &ObjectSet) -> anyhow::Result<Vec<Url>> {
    let bck = &cfg.bucket;
    match cfg.mode {
        Mode::Http => (0..set.len())
            .map(|i| {
                let u = format!("{}/{}", cfg.endpoint, set.name(i));
                Url::parse(&u).with_context(|| format!("invalid URL {u}"))
            })
            .collect(),
        Mode::Proxy => (0..set.len())
            .map(|i| gristmill_client::object_url(&cfg.endpoint, bck, set.name(i)))
            .collect(),
        Mode::Direct => {
            let smap = gristmill_client::Client::new(&cfg.endpoint)?
                .cluster_map()
                .await
                .with_context(|| format!("the cluster map from {}", cfg.endpoint))?;
            if smap.active_targets().next().is_none() {
                bail!("the cluster map at {} has no active targets", cfg.endpoint);
            }
            (0..set.len())
                .map(|i| {
                    gristmill_client::direct_url(&smap, bck, set.name(i)).with_context(|| {
                        format!("no owner URL for {} in the cluster map", set.name(i))
                    })
                })
                .collect()
        }
        // Path-style S3 URLs on the same endpoint (the proxy serves S3 on its main port).
        Mode::S3 => (0..set.len())
            .map(|i| {
                let u = format!("{}/{}/{}", cfg.endpoint, bck.name, set.name(i));
                Url::parse(&u).with_context(|| format!("invalid URL {u}"))
            })
            .collect(),
    }
}

/// `?archpath=<member>` on every object URL: the timed GETs read that member of each archive.
pub fn with_archpath(urls: Vec<Url>, member: &str) -> Vec<Url> {
    urls.into_iter()
        .map(|mut u| {
            u.query_pairs_mut()
                .append_pair(gristmill_core::shards::query::ARCHPATH, member);
            u
        })
        .collect()
}

/// Signs requests with AWS SigV4 for `--mode s3` (unsigned payload, as large uploads do).
pub struct Signer {
    identity: aws_smithy_runtime_api::client::identity::Identity,
    region: String,
}

impl Signer {
    pub fn new(keys: &S3Keys) -> Self {
        let credentials = aws_credential_types::Credentials::new(
            &keys.access_key,
            &keys.secret_key,
            None,
            None,
            "grist-bench",
        );
        Self {
            identity: credentials.into(),
            region: keys.region.clone(),
        }
    }

    fn sign(&self, req: &mut reqwest::Request) -> Result<(), OpError> {
        use aws_sigv4::http_request::{
            PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings, sign,
        };
        let fail = |e: &dyn std::fmt::Display| OpError::new("sign", e.to_string());
        let mut settings = SigningSettings::default();
        // S3 wants `x-amz-content-sha256` on every signed request.
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name("s3")
            .time(std::time::SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| fail(&e))?
            .into();
        let headers = req
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
        let signable = SignableRequest::new(
            req.method().as_str(),
            req.url().as_str(),
            headers,
            SignableBody::UnsignedPayload,
        )
        .map_err(|e| fail(&e))?;
        let (instructions, _) = sign(signable, &params).map_err(|e| fail(&e))?.into_parts();
        for (name, value) in instructions.headers() {
            let name =
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|e| fail(&e))?;
            let value = reqwest::header::HeaderValue::from_str(value).map_err(|e| fail(&e))?;
            req.headers_mut().insert(name, value);
        }
        Ok(())
    }
}

/// Builds a request, signs it when `signer` is given, and sends it.
async fn send(
    client: &reqwest::Client,
    builder: reqwest::RequestBuilder,
    signer: Option<&Signer>,
) -> Result<reqwest::Response, OpError> {
    let mut req = builder.build().map_err(OpError::transport)?;
    if let Some(signer) = signer {
        signer.sign(&mut req)?;
    }
    client.execute(req).await.map_err(OpError::transport)
}

/// Evicts a remote bucket's cached objects, keeping the bucket (`--evict-first`).
pub async fn evict(endpoint: &str, bck: &gristmill_core::Bck) -> anyhow::Result<()> {
    gristmill_client::Client::new(endpoint)?
        .bucket_action(
            reqwest::Method::DELETE,
            bck,
            gristmill_core::api::action::EVICT_REMOTE_BUCKET,
            serde_json::Value::Null,
            &[("keep_md", "true".to_owned())],
        )
        .await
        .with_context(|| format!("evicting {bck}"))?;
    Ok(())
}

/// One get-batch request (`--batch-size`) for `names`: the archive's bytes received.
pub async fn get_batch(
    client: &reqwest::Client,
    endpoint: &str,
    bck: &gristmill_core::Bck,
    names: &[&str],
) -> Result<u64, OpError> {
    let url = format!(
        "{endpoint}/v1/ml/moss/{}?provider={}",
        bck.name,
        bck.provider.as_str()
    );
    let items: Vec<serde_json::Value> = names
        .iter()
        .map(|n| serde_json::json!({ "objname": n }))
        .collect();
    let body = serde_json::to_vec(&serde_json::json!({ "in": items, "strm": true }))
        .expect("JSON of strings");
    let mut resp = client
        .get(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(OpError::transport)?;
    let status = resp.status();
    if status != StatusCode::OK {
        let body = resp.text().await.unwrap_or_default();
        return Err(OpError::new(
            format!("http {}", status.as_u16()),
            format!("get-batch {url}: {}", truncate(&body, 300)),
        ));
    }
    let mut got = 0u64;
    while let Some(chunk) = resp.chunk().await.map_err(OpError::transport)? {
        got += chunk.len() as u64;
    }
    if got == 0 {
        return Err(OpError::new(
            "short body",
            format!("get-batch {url}: empty answer"),
        ));
    }
    Ok(got)
}

/// Creates the bucket through the proxy; an existing bucket is fine.
pub async fn create_bucket(endpoint: &str, bck: &gristmill_core::Bck) -> anyhow::Result<()> {
    match gristmill_client::Client::new(endpoint)?
        .create_bucket(bck)
        .await
    {
        Err(e)
            if e.downcast_ref::<HttpError>()
                .is_some_and(|h| h.status == StatusCode::CONFLICT) =>
        {
            Ok(())
        }
        r => r.with_context(|| format!("creating bucket {bck}")),
    }
}

/// GETs one object, streaming the body; checks its length (always, unless `expected` is
/// `None`: an archive member) and bytes (`verify`). Returns the bytes received.
pub async fn get(
    client: &reqwest::Client,
    url: &Url,
    expected: Option<&Bytes>,
    verify: bool,
    signer: Option<&Signer>,
) -> Result<u64, OpError> {
    let mut resp = send(client, client.get(url.clone()), signer).await?;
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
        if let (true, Some(expected)) = (verify, expected) {
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
    if let Some(expected) = expected
        && got != expected.len() as u64
    {
        return Err(OpError::new(
            "short body",
            format!("GET {url}: got {got} bytes, expected {}", expected.len()),
        ));
    }
    Ok(got)
}

/// PUTs one object (the body is a reusable `Bytes`, so a 307 can re-send it).
pub async fn put(
    client: &reqwest::Client,
    url: &Url,
    body: Bytes,
    signer: Option<&Signer>,
) -> Result<u64, OpError> {
    let len = body.len() as u64;
    let resp = send(client, client.put(url.clone()).body(body), signer).await?;
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
