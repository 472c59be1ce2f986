//! Another Gristmill (or AIStore) cluster as a backend: `ais://@alias/bucket` is bucket
//! `ais://bucket` of the cluster attached as `alias` (`GRISTD_REMOTE_AIS=alias=http://proxy:port`).
//! Reads and metadata go through the remote's proxy (following its redirects); a PUT goes
//! straight to the owning remote target, found by HRW over the remote's cluster map, so the
//! body is sent once.

use futures::StreamExt;
use gristmill_core::api::{ListObjectsMsg, ListObjectsPage, header as h};
use gristmill_core::{Bck, ClusterMap, Namespace};
use reqwest::header;
use tokio::sync::RwLock;

use super::{
    Backend, BackendError, BackendErrorKind, ByteStream, PutSource, RemoteAttrs, RemoteEntry,
    RemotePage, send_timed,
};

pub(super) struct AisBackend {
    alias: String,
    /// The remote cluster's proxy.
    url: String,
    http: reqwest::Client,
    /// Sends bodies: never follows redirects (a streamed body cannot be re-sent).
    direct: reqwest::Client,
    timeout: std::time::Duration,
    smap: RwLock<Option<ClusterMap>>,
}

impl AisBackend {
    pub(super) fn new(alias: &str, url: &str, timeout: std::time::Duration) -> Self {
        let build = |follow: bool| {
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .connect_timeout(timeout)
                .redirect(if follow {
                    reqwest::redirect::Policy::limited(4)
                } else {
                    reqwest::redirect::Policy::none()
                })
                .build()
                .unwrap_or_default()
        };
        Self {
            alias: alias.to_owned(),
            url: url.trim_end_matches('/').to_owned(),
            http: build(true),
            direct: build(false),
            timeout,
            smap: RwLock::new(None),
        }
    }

    /// The bucket as the remote cluster knows it: same name, its own namespace name, no alias.
    fn remote(&self, bck: &Bck) -> Bck {
        Bck {
            name: bck.name.clone(),
            provider: gristmill_core::Provider::Ais,
            namespace: Namespace {
                uuid: String::new(),
                name: bck.namespace.name.clone(),
            },
        }
    }

    fn query(&self, bck: &Bck) -> Vec<(&'static str, String)> {
        let rb = self.remote(bck);
        let mut q = vec![("provider", "ais".to_owned())];
        if !rb.namespace.is_global() {
            q.push(("namespace", rb.namespace.uname()));
        }
        q
    }

    fn object_url(&self, base: &str, bck: &Bck, obj: &str) -> String {
        format!(
            "{base}/v1/objects/{}/{}",
            bck.name,
            gristmill_core::name::encode_path(obj)
        )
    }

    fn what(&self, op: &str, bck: &Bck, obj: &str) -> String {
        format!("{op} ais://@{}/{}/{obj}", self.alias, bck.name)
    }

    /// The remote's cluster map, fetched on first use or when `refresh`.
    async fn owner_url(&self, bck: &Bck, obj: &str, refresh: bool) -> Result<String, BackendError> {
        if refresh || self.smap.read().await.is_none() {
            let what = format!("cluster map of remote cluster {}", self.alias);
            let req = self
                .http
                .get(format!("{}/v1/cluster", self.url))
                .query(&[("what", "smap")]);
            let smap: ClusterMap = send_timed(self.timeout, &what, req)
                .await?
                .json()
                .await
                .map_err(|e| BackendError::new(BackendErrorKind::Failed, format!("{what}: {e}")))?;
            *self.smap.write().await = Some(smap);
        }
        let smap = self.smap.read().await;
        smap.as_ref()
            .and_then(|m| m.owner(&self.remote(bck).object_uname(obj)))
            .map(|t| t.url().to_owned())
            .ok_or_else(|| {
                BackendError::new(
                    BackendErrorKind::Failed,
                    format!("remote cluster {} has no targets", self.alias),
                )
            })
    }
}

fn attrs(resp: &reqwest::Response, size: u64) -> RemoteAttrs {
    let hdr = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    RemoteAttrs {
        size,
        etag: hdr(header::ETAG.as_str()).trim_matches('"').to_owned(),
        version: hdr(h::VERSION),
        last_modified: hdr(header::LAST_MODIFIED.as_str()),
        checksum: None,
    }
}

/// The whole object's size from a `Content-Range: bytes a-b/total`, else the length.
fn total_size(resp: &reqwest::Response) -> u64 {
    resp.headers()
        .get(header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit_once('/'))
        .and_then(|(_, total)| total.parse().ok())
        .unwrap_or_else(|| resp.content_length().unwrap_or(0))
}

#[async_trait::async_trait]
impl Backend for AisBackend {
    async fn head_bucket(&self, bck: &Bck) -> Result<(), BackendError> {
        let what = format!("HEAD ais://@{}/{}", self.alias, bck.name);
        let req = self
            .http
            .head(format!("{}/v1/buckets/{}", self.url, bck.name))
            .query(&self.query(bck));
        send_timed(self.timeout, &what, req).await.map(|_| ())
    }

    async fn head(&self, bck: &Bck, obj: &str) -> Result<RemoteAttrs, BackendError> {
        let req = self
            .http
            .head(self.object_url(&self.url, bck, obj))
            .query(&self.query(bck));
        let resp = send_timed(self.timeout, &self.what("HEAD", bck, obj), req).await?;
        let size = resp.content_length().unwrap_or(0);
        Ok(attrs(&resp, size))
    }

    async fn get(
        &self,
        bck: &Bck,
        obj: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(RemoteAttrs, ByteStream), BackendError> {
        let what = self.what("GET", bck, obj);
        let mut req = self
            .http
            .get(self.object_url(&self.url, bck, obj))
            .query(&self.query(bck));
        if let Some((start, len)) = range {
            req = req.header(
                header::RANGE,
                format!("bytes={start}-{}", start + len.saturating_sub(1)),
            );
        }
        let resp = send_timed(self.timeout, &what, req).await?;
        let attrs = attrs(&resp, total_size(&resp));
        let stream = resp.bytes_stream().map(move |r| {
            r.map_err(|e| {
                BackendError::new(
                    BackendErrorKind::Failed,
                    format!("{what}: download broke: {e}"),
                )
            })
        });
        Ok((attrs, Box::pin(stream)))
    }

    async fn put(&self, bck: &Bck, obj: &str, src: PutSource) -> Result<RemoteAttrs, BackendError> {
        let what = self.what("PUT", bck, obj);
        for attempt in 0..2 {
            let owner = self.owner_url(bck, obj, attempt > 0).await?;
            let file = tokio::fs::File::open(&src.path)
                .await
                .map_err(|e| BackendError::new(BackendErrorKind::Failed, format!("{what}: {e}")))?;
            let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file));
            let req = self
                .direct
                .put(self.object_url(&owner, bck, obj))
                .query(&self.query(bck))
                .header(header::CONTENT_LENGTH, src.size)
                .body(body);
            let resp = send_timed(self.timeout, &what, req).await?;
            if resp.status() == reqwest::StatusCode::TEMPORARY_REDIRECT {
                continue; // the remote's map moved on: refresh and send to the new owner
            }
            return Ok(attrs(&resp, src.size));
        }
        Err(BackendError::new(
            BackendErrorKind::Failed,
            format!("{what}: the remote cluster keeps redirecting"),
        ))
    }

    async fn delete(&self, bck: &Bck, obj: &str) -> Result<(), BackendError> {
        let req = self
            .http
            .delete(self.object_url(&self.url, bck, obj))
            .query(&self.query(bck));
        send_timed(self.timeout, &self.what("DELETE", bck, obj), req)
            .await
            .map(|_| ())
    }

    async fn list(
        &self,
        bck: &Bck,
        prefix: &str,
        after: &str,
        limit: usize,
    ) -> Result<RemotePage, BackendError> {
        let what = format!("list ais://@{}/{}", self.alias, bck.name);
        let lso = ListObjectsMsg {
            prefix: prefix.to_owned(),
            pagesize: limit as u64,
            props: "name,size,checksum".into(),
            start_after: after.to_owned(),
            ..Default::default()
        };
        let req = self
            .http
            .get(format!("{}/v1/buckets/{}", self.url, bck.name))
            .query(&self.query(bck))
            .json(&serde_json::json!({"action": "list", "value": lso}));
        let page: ListObjectsPage = send_timed(self.timeout, &what, req)
            .await?
            .json()
            .await
            .map_err(|e| BackendError::new(BackendErrorKind::Failed, format!("{what}: {e}")))?;
        Ok(RemotePage {
            truncated: !page.continuation_token.is_empty(),
            entries: page
                .entries
                .into_iter()
                .map(|e| RemoteEntry {
                    name: e.name,
                    size: e.size,
                    etag: e.checksum,
                })
                .collect(),
        })
    }
}
