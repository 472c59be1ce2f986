//! Metrics of every backend call: requests, errors, time to answer and bytes received, by
//! provider and operation — a decorator around any [`Backend`].

use super::{
    Backend, BackendError, BackendErrorKind, ByteStream, PutSource, RemoteAttrs, RemotePage,
};
use futures::StreamExt;
use gristmill_core::Bck;
use std::sync::Arc;
use std::time::Instant;

pub(super) struct Metered {
    inner: Arc<dyn Backend>,
    provider: &'static str,
}

impl Metered {
    pub(super) fn wrap(inner: Arc<dyn Backend>, provider: &'static str) -> Arc<dyn Backend> {
        Arc::new(Self { inner, provider })
    }

    /// Records one call of `op` that started at `started`.
    fn record<T>(&self, op: &'static str, started: Instant, result: &Result<T, BackendError>) {
        let provider = self.provider;
        metrics::counter!("grist_backend_requests_total", "provider" => provider, "op" => op)
            .increment(1);
        metrics::histogram!("grist_backend_request_duration_seconds", "provider" => provider, "op" => op)
            .record(started.elapsed().as_secs_f64());
        if let Err(e) = result
            && e.kind != BackendErrorKind::NotFound
        {
            let kind = match e.kind {
                BackendErrorKind::NotFound => "not_found",
                BackendErrorKind::Forbidden => "forbidden",
                BackendErrorKind::Invalid => "invalid",
                BackendErrorKind::Failed => "failed",
                BackendErrorKind::Timeout => "timeout",
            };
            metrics::counter!("grist_backend_errors_total", "provider" => provider, "op" => op, "kind" => kind)
                .increment(1);
        }
    }
}

#[async_trait::async_trait]
impl Backend for Metered {
    async fn head_bucket(&self, bck: &Bck) -> Result<(), BackendError> {
        let started = Instant::now();
        let r = self.inner.head_bucket(bck).await;
        self.record("head_bucket", started, &r);
        r
    }

    async fn head(&self, bck: &Bck, obj: &str) -> Result<RemoteAttrs, BackendError> {
        let started = Instant::now();
        let r = self.inner.head(bck, obj).await;
        self.record("head", started, &r);
        r
    }

    async fn get(
        &self,
        bck: &Bck,
        obj: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(RemoteAttrs, ByteStream), BackendError> {
        let started = Instant::now();
        let r = self.inner.get(bck, obj, range).await;
        self.record("get", started, &r);
        let (attrs, stream) = r?;
        let received =
            metrics::counter!("grist_backend_received_bytes_total", "provider" => self.provider);
        let counted = stream.inspect(move |chunk| {
            if let Ok(bytes) = chunk {
                received.increment(bytes.len() as u64);
            }
        });
        Ok((attrs, Box::pin(counted)))
    }

    async fn put(&self, bck: &Bck, obj: &str, src: PutSource) -> Result<RemoteAttrs, BackendError> {
        let started = Instant::now();
        let r = self.inner.put(bck, obj, src).await;
        self.record("put", started, &r);
        r
    }

    async fn delete(&self, bck: &Bck, obj: &str) -> Result<(), BackendError> {
        let started = Instant::now();
        let r = self.inner.delete(bck, obj).await;
        self.record("delete", started, &r);
        r
    }

    fn supports_ranges(&self) -> bool {
        self.inner.supports_ranges()
    }

    async fn list(
        &self,
        bck: &Bck,
        prefix: &str,
        after: &str,
        limit: usize,
    ) -> Result<RemotePage, BackendError> {
        let started = Instant::now();
        let r = self.inner.list(bck, prefix, after, limit).await;
        self.record("list", started, &r);
        r
    }
}
