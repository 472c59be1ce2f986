//! A small client of the native API, used by `grist` (and handy in tests). Object PUTs go
//! straight to the owning target (HRW over the cached cluster map) so a streamed body is sent
//! exactly once; a 307 (the map moved on) is followed by re-sending to the new owner.

use std::path::Path;

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::StreamExt;
use gristmill_core::api::{ActionMsg, ListObjectsMsg, ListObjectsPage, action};
use gristmill_core::{Bck, ClusterMap, ErrorBody};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use tokio::io::AsyncWriteExt;
use tokio::sync::OnceCell;

/// Characters escaped in object names inside URL paths (`/` is kept).
const PATH: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A bucket as listed by `GET /v1/buckets`.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
pub struct BucketInfo {
    pub name: String,
    pub provider: String,
}

#[derive(Debug)]
pub struct Client {
    endpoint: String,
    http: reqwest::Client,
    /// Client that does not follow redirects (PUTs handle them by re-sending the body).
    no_redirect: reqwest::Client,
    smap: OnceCell<ClusterMap>,
}

fn query(bck: &Bck) -> Vec<(&'static str, String)> {
    let mut q = vec![("provider", bck.provider.as_str().to_owned())];
    if !bck.namespace.is_global() {
        q.push(("namespace", bck.namespace.uname()));
    }
    q
}

/// Turns a non-success response into an error carrying the server's message.
async fn check(resp: Response) -> anyhow::Result<Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body = resp.bytes().await.unwrap_or_default();
    let message = serde_json::from_slice::<ErrorBody>(&body)
        .map(|b| b.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
    if message.is_empty() {
        bail!("{status}");
    }
    bail!("{message} ({status})")
}

impl Client {
    pub fn new(endpoint: &str) -> anyhow::Result<Self> {
        let build = |redirects: bool| {
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .redirect(if redirects {
                    reqwest::redirect::Policy::limited(5)
                } else {
                    reqwest::redirect::Policy::none()
                })
                .build()
        };
        Ok(Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            http: build(true)?,
            no_redirect: build(false)?,
            smap: OnceCell::new(),
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint)
    }

    fn object_path(bck: &Bck, name: &str) -> String {
        format!(
            "/v1/objects/{}/{}",
            bck.name,
            percent_encoding::utf8_percent_encode(name, PATH)
        )
    }

    fn action(&self, method: Method, path: &str, msg: &ActionMsg) -> RequestBuilder {
        self.http.request(method, self.url(path)).json(msg)
    }

    pub async fn cluster_map(&self) -> anyhow::Result<ClusterMap> {
        let resp = self
            .http
            .get(self.url("/v1/cluster"))
            .query(&[("what", "smap")])
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.endpoint))?;
        Ok(check(resp).await?.json().await?)
    }

    async fn cached_map(&self) -> anyhow::Result<&ClusterMap> {
        self.smap.get_or_try_init(|| self.cluster_map()).await
    }

    pub async fn create_bucket(&self, bck: &Bck) -> anyhow::Result<()> {
        let resp = self
            .action(
                Method::POST,
                &format!("/v1/buckets/{}", bck.name),
                &ActionMsg::new(action::CREATE_BUCKET),
            )
            .query(&query(bck))
            .send()
            .await?;
        check(resp).await?;
        Ok(())
    }

    pub async fn destroy_bucket(&self, bck: &Bck) -> anyhow::Result<()> {
        let resp = self
            .action(
                Method::DELETE,
                &format!("/v1/buckets/{}", bck.name),
                &ActionMsg::new(action::DESTROY_BUCKET),
            )
            .query(&query(bck))
            .send()
            .await?;
        check(resp).await?;
        Ok(())
    }

    pub async fn list_buckets(&self) -> anyhow::Result<Vec<BucketInfo>> {
        let resp = self
            .action(Method::GET, "/v1/buckets", &ActionMsg::new(action::LIST))
            .send()
            .await?;
        Ok(check(resp).await?.json().await?)
    }

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
            .action(Method::GET, &format!("/v1/buckets/{}", bck.name), &msg)
            .query(&query(bck))
            .send()
            .await?;
        Ok(check(resp).await?.json().await?)
    }

    /// PUTs a body produced by `body` (called again if the request must be re-sent).
    async fn put_with<F>(&self, bck: &Bck, name: &str, mut body: F) -> anyhow::Result<()>
    where
        F: AsyncFnMut() -> anyhow::Result<reqwest::Body>,
    {
        let smap = self.cached_map().await?;
        let path = Self::object_path(bck, name);
        let mut url = match smap.owner(&bck.object_uname(name)) {
            Some(t) => format!("{}{path}", t.url()),
            None => self.url(&path),
        };
        let mut with_query = true;
        for _ in 0..3 {
            let mut req = self.no_redirect.put(&url).body(body().await?);
            if with_query {
                req = req.query(&query(bck));
            }
            let resp = req.send().await?;
            if resp.status() == StatusCode::TEMPORARY_REDIRECT {
                url = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .context("redirect without a location")?
                    .to_owned();
                with_query = false; // the location carries the query
                continue;
            }
            check(resp).await?;
            return Ok(());
        }
        bail!("too many redirects storing {bck}/{name}")
    }

    pub async fn put_bytes(&self, bck: &Bck, name: &str, data: Bytes) -> anyhow::Result<()> {
        self.put_with(bck, name, async || Ok(reqwest::Body::from(data.clone())))
            .await
    }

    /// Streams a file (never read whole into memory).
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
        let resp = self
            .http
            .get(self.url(&Self::object_path(bck, name)))
            .query(&query(bck))
            .send()
            .await?;
        let resp = check(resp).await?;
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

    pub async fn delete_object(&self, bck: &Bck, name: &str) -> anyhow::Result<()> {
        let resp = self
            .http
            .delete(self.url(&Self::object_path(bck, name)))
            .query(&query(bck))
            .send()
            .await?;
        check(resp).await?;
        Ok(())
    }
}
