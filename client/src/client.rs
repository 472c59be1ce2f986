//! [`Client`]: typed calls of the native API over one proxy endpoint. Object PUTs go straight
//! to the owning target (HRW over the cached cluster map, [`crate::direct_url`]) so a streamed
//! body is sent exactly once; a 307 (the map moved on) is followed by re-sending to the new
//! owner.

use std::path::Path;

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::StreamExt;
use gristmill_core::api::{ActionMsg, ListEntry, ListObjectsMsg, ListObjectsPage, action};
use gristmill_core::job::JobStatus;
use gristmill_core::{Bck, ClusterMap};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use tokio::io::AsyncWriteExt;
use tokio::sync::OnceCell;

use crate::endpoint::pick_endpoint;
use crate::error::check;
use crate::urls::{bucket_query as query, direct_url, object_path, object_url};

/// A bucket as listed by `GET /v1/buckets`.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
pub struct BucketInfo {
    /// The bucket's name.
    pub name: String,
    /// Its provider (`ais`, `aws`, ...).
    pub provider: String,
}

/// How long [`Client::retrying`] keeps retrying a request that finds no one to answer it.
pub const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// A client of one cluster: one proxy endpoint (picked among several), the token and TLS
/// settings, and the cluster map fetched once for direct PUTs.
#[derive(Debug)]
pub struct Client {
    /// The proxy every control request goes to (`http[s]://host:port`, no trailing `/`).
    endpoint: String,
    /// Client that follows redirects (a proxy answers object requests with a 307).
    http: reqwest::Client,
    /// Client that does not follow redirects (PUTs handle them by re-sending the body).
    no_redirect: reqwest::Client,
    /// The cluster map, fetched on the first PUT: where HRW sends each object.
    smap: OnceCell<ClusterMap>,
}

/// How a client authenticates and verifies the cluster's TLS certificate.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// Bearer token sent on every request (auth on).
    pub token: Option<String>,
    /// PEM bundle of CAs to trust besides the system roots.
    pub ca_bundle: Option<std::path::PathBuf>,
    /// Accept any certificate (tests and throwaway clusters only).
    pub insecure: bool,
    /// Give up on a connection not made within this long (none: the system's).
    pub connect_timeout: Option<std::time::Duration>,
    /// Give up on a request whose answer has not begun this long after it was sent (reqwest
    /// counts the upload in), or whose answer body then stalls this long (none: wait forever).
    pub read_timeout: Option<std::time::Duration>,
}

impl Client {
    /// A client without a token, trusting the system's CAs. `endpoint` may list several
    /// proxies, comma-separated (any proxy serves any request): the first that accepts a TCP
    /// connection within a second is used, else the first listed.
    pub fn new(endpoint: &str) -> anyhow::Result<Self> {
        Self::with_options(endpoint, &ClientOptions::default())
    }

    /// A client with a token and TLS settings.
    pub fn with_options(endpoint: &str, opts: &ClientOptions) -> anyhow::Result<Self> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &opts.token {
            let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .context("the token is not a valid header value")?;
            v.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        let certs = match &opts.ca_bundle {
            Some(path) => reqwest::Certificate::from_pem_bundle(
                &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
            )
            .with_context(|| format!("parsing CA bundle {}", path.display()))?,
            None => Vec::new(),
        };
        // Redirects to another node drop the Authorization header (reqwest does so across
        // origins); the proxy's signed redirect URL stands in for it.
        let build = |redirects: bool| {
            let mut b = reqwest::Client::builder()
                .tcp_nodelay(true)
                .default_headers(headers.clone())
                .tls_danger_accept_invalid_certs(opts.insecure)
                .redirect(if redirects {
                    reqwest::redirect::Policy::limited(5)
                } else {
                    reqwest::redirect::Policy::none()
                });
            for c in &certs {
                b = b.add_root_certificate(c.clone());
            }
            if let Some(t) = opts.connect_timeout {
                b = b.connect_timeout(t);
            }
            if let Some(t) = opts.read_timeout {
                b = b.read_timeout(t);
            }
            b.build()
        };
        Ok(Self {
            endpoint: pick_endpoint(endpoint),
            http: build(true)?,
            no_redirect: build(false)?,
            smap: OnceCell::new(),
        })
    }

    /// The proxy this client talks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A request to `path` on the endpoint, with the client's token and TLS settings (for
    /// API calls this client has no helper for).
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, self.url(path))
    }

    /// A request to an absolute URL (a node found in the cluster map), with the client's
    /// token and TLS settings.
    pub fn request_url(&self, method: Method, url: &str) -> RequestBuilder {
        self.http.request(method, url)
    }

    /// Sends `req`; a non-success status becomes an error whose root cause is an
    /// [`crate::HttpError`] with the server's message.
    pub async fn send(req: RequestBuilder) -> anyhow::Result<Response> {
        check(req.send().await?).await
    }

    /// Sends an idempotent request until it gets an answer that is not "try again": a
    /// connection that cannot be made or breaks before the answer (a proxy restarting), or
    /// 502/503/504 (honouring `Retry-After`), are retried with exponential backoff for up to
    /// [`RETRY_FOR`]; any other answer is final. Every retry is logged at `warn`.
    pub async fn retrying<F, Fut>(&self, send: F) -> anyhow::Result<Response>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = reqwest::Result<Response>>,
    {
        self.retry(send, true).await
    }

    /// Sends a request that must not run twice (a bucket create, a job start) and retries it
    /// only when it cannot have reached the server: the connection could not be made (a
    /// proxy restarting). An answer, or a connection that broke after the request went out,
    /// is final — the server may have acted on it.
    pub async fn retrying_unsent<F, Fut>(&self, send: F) -> anyhow::Result<Response>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = reqwest::Result<Response>>,
    {
        self.retry(send, false).await
    }

    async fn retry<F, Fut>(&self, mut send: F, idempotent: bool) -> anyhow::Result<Response>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = reqwest::Result<Response>>,
    {
        let started = std::time::Instant::now();
        let mut delay = std::time::Duration::from_millis(100);
        loop {
            let why = match send().await {
                Ok(resp) if !idempotent || !matches!(resp.status().as_u16(), 502..=504) => {
                    return check(resp).await;
                }
                Ok(resp) => {
                    let after = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok()?.parse::<f64>().ok())
                        .map(std::time::Duration::from_secs_f64);
                    if let Some(a) = after {
                        delay = delay.max(a.min(std::time::Duration::from_secs(5)));
                    }
                    if started.elapsed() + delay > RETRY_FOR {
                        return check(resp).await;
                    }
                    format!("{}", resp.status())
                }
                Err(e)
                    if (e.is_connect() || (idempotent && (e.is_request() || e.is_timeout())))
                        && started.elapsed() + delay <= RETRY_FOR =>
                {
                    e.to_string()
                }
                Err(e) => return Err(e.into()),
            };
            tracing::warn!(%why, retry_in = ?delay, "request failed; retrying");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(5));
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint)
    }

    fn action(&self, method: Method, path: &str, msg: &ActionMsg) -> RequestBuilder {
        self.http.request(method, self.url(path)).json(msg)
    }

    /// The cluster map as the proxy has it now (`GET /v1/cluster?what=smap`).
    pub async fn cluster_map(&self) -> anyhow::Result<ClusterMap> {
        let resp = self
            .retrying(|| {
                self.http
                    .get(self.url("/v1/cluster"))
                    .query(&[("what", "smap")])
                    .send()
            })
            .await
            .with_context(|| format!("cannot reach {}", self.endpoint))?;
        Ok(resp.json().await?)
    }

    async fn cached_map(&self) -> anyhow::Result<&ClusterMap> {
        self.smap.get_or_try_init(|| self.cluster_map()).await
    }

    /// Creates a bucket (one that exists already fails with an [`crate::HttpError`], 409).
    pub async fn create_bucket(&self, bck: &Bck) -> anyhow::Result<()> {
        self.bucket_change(Method::POST, bck, action::CREATE_BUCKET)
            .await
    }

    /// Destroys a bucket and its objects.
    pub async fn destroy_bucket(&self, bck: &Bck) -> anyhow::Result<()> {
        self.bucket_change(Method::DELETE, bck, action::DESTROY_BUCKET)
            .await
    }

    /// A bucket-level action that must not run twice (see [`Client::retrying_unsent`]).
    async fn bucket_change(&self, method: Method, bck: &Bck, act: &str) -> anyhow::Result<()> {
        let path = format!("/v1/buckets/{}", bck.name);
        let msg = ActionMsg::new(act);
        self.retrying_unsent(|| {
            self.action(method.clone(), &path, &msg)
                .query(&query(bck))
                .send()
        })
        .await?;
        Ok(())
    }

    /// Every bucket the cluster knows.
    pub async fn list_buckets(&self) -> anyhow::Result<Vec<BucketInfo>> {
        let resp = self
            .retrying(|| {
                self.action(Method::GET, "/v1/buckets", &ActionMsg::new(action::LIST))
                    .send()
            })
            .await?;
        Ok(resp.json().await?)
    }

    /// One page of a bucket listing; pass the page's continuation token back for the next.
    pub async fn list_page(
        &self,
        bck: &Bck,
        lso: &ListObjectsMsg,
    ) -> anyhow::Result<ListObjectsPage> {
        let msg = ActionMsg {
            action: action::LIST.into(),
            name: String::new(),
            value: serde_json::to_value(lso)?,
        };
        let resp = self
            .retrying(|| {
                self.action(Method::GET, &format!("/v1/buckets/{}", bck.name), &msg)
                    .query(&query(bck))
                    .send()
            })
            .await?;
        Ok(resp.json().await?)
    }

    /// A bucket listing's entries, page after page: all of them, or the first `limit` when it
    /// is not 0.
    pub async fn list_entries(
        &self,
        bck: &Bck,
        mut lso: ListObjectsMsg,
        limit: usize,
    ) -> anyhow::Result<Vec<ListEntry>> {
        let mut all = Vec::new();
        loop {
            let page = self.list_page(bck, &lso).await?;
            all.extend(page.entries);
            if limit > 0 && all.len() >= limit {
                all.truncate(limit);
                return Ok(all);
            }
            if page.continuation_token.is_empty() {
                return Ok(all);
            }
            lso.continuation_token = page.continuation_token;
            lso.uuid = page.uuid;
        }
    }

    /// PUTs a body produced by `body` (called again if the request must be re-sent).
    async fn put_with<F>(&self, bck: &Bck, name: &str, mut body: F) -> anyhow::Result<()>
    where
        F: AsyncFnMut() -> anyhow::Result<reqwest::Body>,
    {
        let smap = self.cached_map().await?;
        let mut url = match direct_url(smap, bck, name) {
            Some(url) => url,
            None => object_url(&self.endpoint, bck, name)?,
        };
        let started = std::time::Instant::now();
        let mut delay = std::time::Duration::from_millis(100);
        let mut redirects = 0;
        while redirects < 3 {
            // A whole-object PUT is idempotent: a connection that fails or breaks, or a
            // 502/503/504, is retried with backoff (the body made again) for up to RETRY_FOR,
            // through the proxy (a target sent to directly may be the one that is gone).
            let sent = self
                .no_redirect
                .put(url.clone())
                .body(body().await?)
                .send()
                .await;
            let retry = match &sent {
                Err(e) if e.is_connect() || e.is_request() => Some(e.to_string()),
                Ok(r) if matches!(r.status().as_u16(), 502..=504) => Some(r.status().to_string()),
                _ => None,
            };
            if let Some(why) = retry
                && started.elapsed() + delay <= RETRY_FOR
            {
                tracing::warn!(%why, retry_in = ?delay, "PUT {bck}/{name} failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(5));
                url = object_url(&self.endpoint, bck, name)?;
                continue;
            }
            let resp = sent?;
            if resp.status() == StatusCode::TEMPORARY_REDIRECT {
                redirects += 1;
                // The location carries the query.
                let location = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .context("redirect without a location")?;
                url = reqwest::Url::parse(location)
                    .with_context(|| format!("invalid redirect location {location}"))?;
                continue;
            }
            check(resp).await?;
            return Ok(());
        }
        bail!("too many redirects storing {bck}/{name}")
    }

    /// Stores `data` as `bck/name`, sent straight to the owning target.
    pub async fn put_bytes(&self, bck: &Bck, name: &str, data: Bytes) -> anyhow::Result<()> {
        self.put_with(bck, name, async || Ok(reqwest::Body::from(data.clone())))
            .await
    }

    /// Stores a file as `bck/name`, streamed (never read whole into memory) straight to the
    /// owning target.
    pub async fn put_file(&self, bck: &Bck, name: &str, path: &Path) -> anyhow::Result<()> {
        self.put_with(bck, name, async || {
            let f = tokio::fs::File::open(path)
                .await
                .with_context(|| format!("opening {}", path.display()))?;
            Ok(reqwest::Body::wrap_stream(
                tokio_util::io::ReaderStream::with_capacity(f, 256 * 1024),
            ))
        })
        .await
    }

    /// Streams an object into `out`; returns its size.
    pub async fn get_into<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        bck: &Bck,
        name: &str,
        out: &mut W,
    ) -> anyhow::Result<u64> {
        self.get_version_into(bck, name, None, out).await
    }

    /// Like [`Client::get_into`], of one version of the object when `version_id` is given
    /// (versioned buckets).
    pub async fn get_version_into<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        bck: &Bck,
        name: &str,
        version_id: Option<&str>,
        out: &mut W,
    ) -> anyhow::Result<u64> {
        let mut q = query(bck);
        if let Some(id) = version_id {
            q.push((gristmill_core::api::query::VERSION_ID, id.to_owned()));
        }
        let resp = self
            .retrying(|| {
                self.http
                    .get(self.url(&object_path(bck, name)))
                    .query(&q)
                    .send()
            })
            .await?;
        let mut stream = resp.bytes_stream();
        let mut n = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            n += chunk.len() as u64;
            out.write_all(&chunk).await?;
        }
        out.flush().await?;
        Ok(n)
    }

    /// Sends a bucket action (`{"action", "value"}`) and returns the response text (a job id
    /// for job-starting actions).
    pub async fn bucket_action(
        &self,
        method: Method,
        bck: &Bck,
        act: &str,
        value: serde_json::Value,
        extra: &[(&str, String)],
    ) -> anyhow::Result<String> {
        let msg = ActionMsg {
            action: act.to_owned(),
            name: String::new(),
            value,
        };
        let mut q = query(bck);
        q.extend(extra.iter().map(|(k, v)| (*k, v.clone())));
        let resp = self
            .action(method, &format!("/v1/buckets/{}", bck.name), &msg)
            .query(&q)
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.endpoint))?;
        Ok(check(resp).await?.text().await?)
    }

    /// A bucket's properties (`HEAD`, the `Ais-Bucket-Props` header).
    pub async fn bucket_props(&self, bck: &Bck) -> anyhow::Result<serde_json::Value> {
        let resp = self
            .retrying(|| {
                self.http
                    .head(self.url(&format!("/v1/buckets/{}", bck.name)))
                    .query(&query(bck))
                    .send()
            })
            .await?;
        let props = resp
            .headers()
            .get(gristmill_core::api::header::BUCKET_PROPS)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("{}");
        Ok(serde_json::from_str(props)?)
    }

    /// One job across the cluster.
    pub async fn job(&self, id: &str) -> anyhow::Result<JobStatus> {
        let resp = self
            .retrying(|| self.http.get(self.url(&format!("/v1/jobs/{id}"))).send())
            .await?;
        Ok(resp.json().await?)
    }

    /// Jobs across the cluster, newest first.
    pub async fn jobs(&self, kind: Option<&str>, running: bool) -> anyhow::Result<Vec<JobStatus>> {
        let mut q = vec![("running", running.to_string())];
        if let Some(k) = kind {
            q.push(("kind", k.to_owned()));
        }
        let resp = self
            .retrying(|| self.http.get(self.url("/v1/jobs")).query(&q).send())
            .await?;
        Ok(resp.json().await?)
    }

    /// Stops (aborts) a running job.
    pub async fn stop_job(&self, id: &str) -> anyhow::Result<()> {
        let url = self.url(&format!("/v1/jobs/{id}"));
        self.retrying_unsent(|| self.http.delete(&url).send())
            .await?;
        Ok(())
    }

    /// `PUT /v1/cluster {"action": ..., "value": ...}` (membership changes).
    pub async fn cluster_action(&self, act: &str, value: serde_json::Value) -> anyhow::Result<()> {
        let msg = ActionMsg {
            action: act.to_owned(),
            name: String::new(),
            value,
        };
        self.retrying_unsent(|| self.action(Method::PUT, "/v1/cluster", &msg).send())
            .await?;
        Ok(())
    }

    /// Every node's configuration (`node` = None) or one node's, by node id: `{id: {"config",
    /// "runtime", "local"} | {"error"}}` (`GET /v1/cluster?what=config`).
    pub async fn node_configs(&self, node: Option<&str>) -> anyhow::Result<serde_json::Value> {
        let mut q = vec![("what", "config")];
        if let Some(n) = node {
            q.push(("node", n));
        }
        let resp = self
            .retrying(|| self.http.get(self.url("/v1/cluster")).query(&q).send())
            .await?;
        Ok(resp.json().await?)
    }

    /// Changes run-time settings on every node that has them, or on one node; kept across
    /// restarts unless `transient` (`PUT /v1/cluster/set-config`). Answers which nodes changed.
    pub async fn set_config(
        &self,
        node: Option<&str>,
        changes: &[(String, String)],
        transient: bool,
    ) -> anyhow::Result<serde_json::Value> {
        let mut q: Vec<(&str, &str)> = changes
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if let Some(n) = node {
            q.push(("node", n));
        }
        if transient {
            q.push(("transient", "true"));
        }
        // Setting the same values again is harmless: retried like a read.
        let resp = self
            .retrying(|| {
                self.http
                    .put(self.url("/v1/cluster/set-config"))
                    .query(&q)
                    .send()
            })
            .await?;
        Ok(resp.json().await?)
    }

    /// The last `lines` lines of a node's log (`GET /v1/cluster?what=log&node=`).
    pub async fn node_log(&self, node: &str, lines: usize) -> anyhow::Result<String> {
        let lines = lines.to_string();
        let q = [("what", "log"), ("node", node), ("lines", &lines)];
        let resp = self
            .retrying(|| self.http.get(self.url("/v1/cluster")).query(&q).send())
            .await?;
        Ok(resp.text().await?)
    }

    /// Starts a node-wide job by kind (`lru`); returns its id.
    pub async fn start_job(&self, kind: &str, value: serde_json::Value) -> anyhow::Result<String> {
        let mut value = value;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("kind".into(), kind.into());
        }
        let msg = ActionMsg {
            action: action::START.into(),
            name: String::new(),
            value,
        };
        let resp = self
            .retrying_unsent(|| self.action(Method::PUT, "/v1/cluster", &msg).send())
            .await?;
        Ok(resp.text().await?)
    }

    /// Defines an ETL; returns its name.
    pub async fn etl_init(&self, spec: &gristmill_core::etl::EtlSpec) -> anyhow::Result<String> {
        let resp = self.http.put(self.url("/v1/etl")).json(spec).send().await?;
        Ok(check(resp).await?.text().await?)
    }

    /// All ETLs (`name` = None) or one.
    pub async fn etl_show(&self, name: Option<&str>) -> anyhow::Result<serde_json::Value> {
        let path = match name {
            Some(n) => format!("/v1/etl/{n}"),
            None => "/v1/etl".into(),
        };
        let resp = self.http.get(self.url(&path)).send().await?;
        Ok(check(resp).await?.json().await?)
    }

    /// `op` (`start`, `stop`) on an ETL.
    pub async fn etl_control(&self, name: &str, op: &str) -> anyhow::Result<()> {
        let resp = self
            .http
            .post(self.url(&format!("/v1/etl/{name}/{op}")))
            .send()
            .await?;
        check(resp).await?;
        Ok(())
    }

    /// Removes an ETL definition.
    pub async fn etl_remove(&self, name: &str) -> anyhow::Result<()> {
        let resp = self
            .http
            .delete(self.url(&format!("/v1/etl/{name}")))
            .send()
            .await?;
        check(resp).await?;
        Ok(())
    }

    /// The ETL's worker logs, per target.
    pub async fn etl_logs(&self, name: &str) -> anyhow::Result<serde_json::Value> {
        let resp = self
            .http
            .get(self.url(&format!("/v1/etl/{name}/logs")))
            .send()
            .await?;
        Ok(check(resp).await?.json().await?)
    }

    /// An object run through an ETL (or a comma-separated pipeline).
    pub async fn get_transformed(
        &self,
        bck: &Bck,
        name: &str,
        etl: &str,
        args: &str,
    ) -> anyhow::Result<Bytes> {
        let mut q = query(bck);
        q.push(("etl_name", etl.to_owned()));
        if !args.is_empty() {
            q.push(("etl_args", args.to_owned()));
        }
        let resp = self
            .http
            .get(self.url(&object_path(bck, name)))
            .query(&q)
            .send()
            .await?;
        Ok(check(resp).await?.bytes().await?)
    }

    /// Deletes one object.
    pub async fn delete_object(&self, bck: &Bck, name: &str) -> anyhow::Result<()> {
        self.delete_version(bck, name, None).await
    }

    /// Deletes one version of an object for good when `version_id` is given (versioned
    /// buckets); else like [`Client::delete_object`] (a delete marker in a versioned bucket).
    pub async fn delete_version(
        &self,
        bck: &Bck,
        name: &str,
        version_id: Option<&str>,
    ) -> anyhow::Result<()> {
        let mut q = query(bck);
        if let Some(id) = version_id {
            q.push((gristmill_core::api::query::VERSION_ID, id.to_owned()));
        }
        // Not retried after the request went out: in a versioned bucket a second delete would
        // add a second delete marker.
        let url = self.url(&object_path(bck, name));
        self.retrying_unsent(|| self.http.delete(&url).query(&q).send())
            .await?;
        Ok(())
    }
}
