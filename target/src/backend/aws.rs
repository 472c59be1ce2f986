//! `aws` (`s3://`) backend: any S3 server through aws-sdk-s3, with an explicit endpoint,
//! region, path-style switch and static credentials from the environment.

use aws_sdk_s3::Client;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream as SdkStream;
use gristmill_core::Bck;

use super::{
    Backend, BackendConfig, BackendError, BackendErrorKind, ByteStream, ChecksumAlgo, PutSource,
    RemoteAttrs, RemoteChecksum, RemoteEntry, RemotePage,
};

pub(super) struct AwsBackend {
    client: Client,
    /// Metadata calls (HEAD, LIST, DELETE, PUT responses) time out after this.
    timeout: std::time::Duration,
    /// Whether credentials were configured; without them every call fails with a clear reason.
    has_credentials: bool,
}

impl AwsBackend {
    pub(super) fn new(c: &BackendConfig) -> Self {
        let mut b = aws_sdk_s3::config::Builder::new()
            .behavior_version_latest()
            .response_checksum_validation(
                aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired,
            )
            .region(Region::new(c.s3_region.clone()))
            .force_path_style(c.s3_path_style)
            .timeout_config(TimeoutConfig::builder().connect_timeout(c.timeout).build())
            .credentials_provider(Credentials::new(
                c.s3_access_key.clone(),
                c.s3_secret_key.clone(),
                c.s3_session_token.clone(),
                None,
                "gristd-environment",
            ));
        if !c.s3_endpoint.is_empty() {
            b = b.endpoint_url(c.s3_endpoint.clone());
        }
        Self {
            client: Client::from_conf(b.build()),
            timeout: c.timeout,
            has_credentials: !c.s3_access_key.is_empty(),
        }
    }

    fn check(&self) -> Result<(), BackendError> {
        if self.has_credentials {
            Ok(())
        } else {
            Err(BackendError::new(
                BackendErrorKind::Forbidden,
                "no S3 credentials configured on the target (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
            ))
        }
    }

    /// Runs a metadata call under the configured timeout.
    async fn timed<T>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T, BackendError>>,
    ) -> Result<T, BackendError> {
        tokio::time::timeout(self.timeout, f)
            .await
            .unwrap_or_else(|_| {
                Err(BackendError::new(
                    BackendErrorKind::Timeout,
                    format!("{what}: no answer within {:?}", self.timeout),
                ))
            })
    }
}

/// Classifies an SDK error, keeping the server's status, code and message.
fn sdk_error<E>(what: &str, e: SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> BackendError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &e {
        SdkError::ServiceError(se) => {
            let status = se.raw().status().as_u16();
            let err = se.err();
            let reason = match (err.code(), err.message()) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.to_owned(),
                (None, Some(m)) => m.to_owned(),
                (None, None) => format!("HTTP {status}"),
            };
            BackendError::from_status(status, format!("{what}: {status} {reason}"))
        }
        SdkError::TimeoutError(_) => BackendError::new(
            BackendErrorKind::Timeout,
            format!("{what}: timed out: {}", DisplayErrorContext(&e)),
        ),
        SdkError::DispatchFailure(d) if d.is_timeout() => BackendError::new(
            BackendErrorKind::Timeout,
            format!("{what}: timed out: {}", DisplayErrorContext(&e)),
        ),
        _ => BackendError::new(
            BackendErrorKind::Failed,
            format!("{what}: {}", DisplayErrorContext(&e)),
        ),
    }
}

fn unquote(etag: Option<&str>) -> String {
    etag.unwrap_or_default().trim_matches('"').to_owned()
}

fn http_date(t: Option<&aws_sdk_s3::primitives::DateTime>) -> String {
    t.and_then(|t| t.fmt(aws_sdk_s3::primitives::DateTimeFormat::HttpDate).ok())
        .unwrap_or_default()
}

#[async_trait::async_trait]
impl Backend for AwsBackend {
    async fn head_bucket(&self, bck: &Bck) -> Result<(), BackendError> {
        self.check()?;
        let what = format!("HEAD s3://{}", bck.name);
        self.timed(&what, async {
            self.client
                .head_bucket()
                .bucket(&bck.name)
                .send()
                .await
                .map_err(|e| sdk_error(&what, e))?;
            Ok(())
        })
        .await
    }

    async fn head(&self, bck: &Bck, obj: &str) -> Result<RemoteAttrs, BackendError> {
        self.check()?;
        let what = format!("HEAD s3://{}/{obj}", bck.name);
        self.timed(&what, async {
            let out = self
                .client
                .head_object()
                .bucket(&bck.name)
                .key(obj)
                .send()
                .await
                .map_err(|e| sdk_error(&what, e))?;
            Ok(RemoteAttrs {
                size: out.content_length().unwrap_or(0).max(0) as u64,
                etag: unquote(out.e_tag()),
                version: out.version_id().unwrap_or_default().to_owned(),
                last_modified: http_date(out.last_modified()),
                checksum: None,
            })
        })
        .await
    }

    async fn get(
        &self,
        bck: &Bck,
        obj: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(RemoteAttrs, ByteStream), BackendError> {
        self.check()?;
        let what = format!("GET s3://{}/{obj}", bck.name);
        let mut req = self.client.get_object().bucket(&bck.name).key(obj);
        if let Some((start, len)) = range {
            req = req.range(format!("bytes={start}-{}", start + len.saturating_sub(1)));
        }
        // Ask for the checksums S3 stored with the object. The cold GET validates them on its
        // own thread (`read/cold.rs`); the SDK's inline validation is off (`WhenRequired`,
        // and the header set here instead of `checksum_mode`), so the bytes are hashed once,
        // off the path that feeds waiting clients.
        let req = req.customize().mutate_request(|r| {
            r.headers_mut().insert("x-amz-checksum-mode", "ENABLED");
        });
        // The timeout covers the response head only; the body is watched chunk by chunk.
        let out = self
            .timed(&what, async {
                req.send().await.map_err(|e| sdk_error(&what, e))
            })
            .await?;
        let checksum = [
            (ChecksumAlgo::Crc64Nvme, out.checksum_crc64_nvme()),
            (ChecksumAlgo::Crc32c, out.checksum_crc32_c()),
            (ChecksumAlgo::Crc32, out.checksum_crc32()),
            (ChecksumAlgo::Sha256, out.checksum_sha256()),
        ]
        .into_iter()
        .find_map(|(algo, v)| v.and_then(|v| RemoteChecksum::from_s3(algo, v)));
        let attrs = RemoteAttrs {
            size: out.content_length().unwrap_or(0).max(0) as u64,
            etag: unquote(out.e_tag()),
            version: out.version_id().unwrap_or_default().to_owned(),
            last_modified: http_date(out.last_modified()),
            // A range's headers carry no whole-object checksum worth checking it against.
            checksum: if range.is_none() { checksum } else { None },
        };
        let body = out.body;
        let stream = futures::stream::unfold((body, what), |(mut body, what)| async move {
            match body.next().await {
                Some(Ok(b)) => Some((Ok(b), (body, what))),
                Some(Err(e)) => Some((
                    Err(BackendError::new(
                        BackendErrorKind::Failed,
                        format!("{what}: download broke: {}", DisplayErrorContext(&e)),
                    )),
                    (body, what),
                )),
                None => None,
            }
        });
        Ok((attrs, Box::pin(stream)))
    }

    async fn put(&self, bck: &Bck, obj: &str, src: PutSource) -> Result<RemoteAttrs, BackendError> {
        self.check()?;
        let what = format!("PUT s3://{}/{obj}", bck.name);
        let body = SdkStream::read_from()
            .path(&src.path)
            .length(aws_sdk_s3::primitives::Length::Exact(src.size))
            .build()
            .await
            .map_err(|e| BackendError::new(BackendErrorKind::Failed, format!("{what}: {e}")))?;
        let out = self
            .client
            .put_object()
            .bucket(&bck.name)
            .key(obj)
            .content_length(src.size as i64)
            .body(body)
            .send()
            .await
            .map_err(|e| sdk_error(&what, e))?;
        Ok(RemoteAttrs {
            size: src.size,
            etag: unquote(out.e_tag()),
            version: out.version_id().unwrap_or_default().to_owned(),
            last_modified: String::new(),
            checksum: None,
        })
    }

    async fn delete(&self, bck: &Bck, obj: &str) -> Result<(), BackendError> {
        self.check()?;
        let what = format!("DELETE s3://{}/{obj}", bck.name);
        self.timed(&what, async {
            self.client
                .delete_object()
                .bucket(&bck.name)
                .key(obj)
                .send()
                .await
                .map_err(|e| sdk_error(&what, e))?;
            Ok(())
        })
        .await
    }

    async fn list(
        &self,
        bck: &Bck,
        prefix: &str,
        after: &str,
        limit: usize,
    ) -> Result<RemotePage, BackendError> {
        self.check()?;
        let what = format!("LIST s3://{}", bck.name);
        self.timed(&what, async {
            let mut req = self
                .client
                .list_objects_v2()
                .bucket(&bck.name)
                .max_keys(limit.min(1000) as i32);
            if !prefix.is_empty() {
                req = req.prefix(prefix);
            }
            if !after.is_empty() {
                req = req.start_after(after);
            }
            let out = req.send().await.map_err(|e| sdk_error(&what, e))?;
            Ok(RemotePage {
                entries: out
                    .contents()
                    .iter()
                    .map(|o| RemoteEntry {
                        name: o.key().unwrap_or_default().to_owned(),
                        size: o.size().unwrap_or(0).max(0) as u64,
                        etag: unquote(o.e_tag()),
                    })
                    .collect(),
                truncated: out.is_truncated().unwrap_or(false),
            })
        })
        .await
    }
}
