//! `aws` (`s3://`) backend: any S3 server through aws-sdk-s3, configured by the standard AWS
//! chain (`aws-config`): credentials from the environment, the shared config and credentials
//! files and their profiles (also `credential_process`, SSO, assume-role), a web identity
//! token file (EKS IRSA), ECS or EC2 instance metadata — refreshed before they expire; the
//! region and endpoint likewise (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_S3`, a profile's
//! `endpoint_url`). Gristmill's own settings (`GRISTD_S3_ENDPOINT`, a bucket's
//! `extra.aws.endpoint` and `cloud_region`) override them.

use aws_config::BehaviorVersion;
use aws_config::meta::region::RegionProviderChain;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::Region;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream as SdkStream;
use gristmill_core::Bck;

use super::{
    Backend, BackendError, BackendErrorKind, ByteStream, ChecksumAlgo, PutSource, RemoteAttrs,
    RemoteChecksum, RemoteEntry, RemotePage,
};

/// What makes one `s3://` client: an account (profile) and Gristmill's overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(super) struct AwsClientSpec {
    /// A named profile of the shared files (`s3://#acct/b`, or `extra.aws.profile`); empty =
    /// the default chain.
    pub(super) profile: String,
    /// Endpoint override: a bucket's `extra.aws.endpoint`.
    pub(super) endpoint: String,
    /// Region override: a bucket's `extra.aws.cloud_region`.
    pub(super) region: String,
    /// The target-wide endpoint (`GRISTD_S3_ENDPOINT`): below a profile's own, above the
    /// default chain's.
    pub(super) default_endpoint: String,
    /// Path-style addressing when set; else on whenever an endpoint is configured.
    pub(super) path_style: Option<bool>,
}

pub(super) struct AwsBackend {
    spec: AwsClientSpec,
    /// Built on first use (loading the chain's config is async).
    client: tokio::sync::OnceCell<Client>,
    /// Connect timeout, and the time limit of metadata calls.
    timeout: std::time::Duration,
}

impl AwsBackend {
    pub(super) fn new(spec: AwsClientSpec, timeout: std::time::Duration) -> Self {
        Self {
            spec,
            client: tokio::sync::OnceCell::new(),
            timeout,
        }
    }

    /// The client, loading the AWS config chain the first time. A named profile that gives no
    /// credentials is a clear 403 (and is looked at again next time).
    async fn client(&self) -> Result<&Client, BackendError> {
        self.client.get_or_try_init(|| self.build()).await
    }

    async fn build(&self) -> Result<Client, BackendError> {
        let spec = &self.spec;
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if !spec.profile.is_empty() {
            // An account's profile only: the environment's keys belong to the default account.
            let creds = aws_config::profile::ProfileFileCredentialsProvider::builder()
                .profile_name(&spec.profile)
                .build();
            use aws_credential_types::provider::ProvideCredentials;
            if let Err(e) = creds.provide_credentials().await {
                return Err(BackendError::new(
                    BackendErrorKind::Forbidden,
                    format!(
                        "no AWS profile {:?} with credentials in the shared credentials/config files \
                         (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, ~/.aws): {}",
                        spec.profile,
                        DisplayErrorContext(&e)
                    ),
                ));
            }
            loader = loader
                .profile_name(&spec.profile)
                .credentials_provider(creds);
        }
        let region = RegionProviderChain::first_try(
            Some(spec.region.clone())
                .filter(|r| !r.is_empty())
                .map(Region::new),
        )
        .or_else(
            aws_config::default_provider::region::DefaultRegionChain::builder()
                .profile_name(&spec.profile)
                .build(),
        )
        .or_else(Region::new("us-east-1"));
        let sdk = loader.region(region).load().await;
        let chain_endpoint = sdk
            .service_config()
            .and_then(|c| {
                c.load_config(
                    aws_types::service_config::ServiceConfigKey::builder()
                        .service_id("S3")
                        .env("AWS_ENDPOINT_URL")
                        .profile("endpoint_url")
                        .build()
                        .ok()?,
                )
            })
            .or_else(|| sdk.endpoint_url().map(str::to_owned));
        let mut endpoints = vec![Some(spec.endpoint.clone())];
        if spec.profile.is_empty() {
            endpoints.extend([Some(spec.default_endpoint.clone()), chain_endpoint]);
        } else {
            endpoints.extend([chain_endpoint, Some(spec.default_endpoint.clone())]);
        }
        let endpoint = endpoints.into_iter().flatten().find(|e| !e.is_empty());
        let mut b = aws_sdk_s3::config::Builder::from(&sdk)
            .response_checksum_validation(
                aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired,
            )
            .force_path_style(spec.path_style.unwrap_or(endpoint.is_some()))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(self.timeout)
                    .build(),
            );
        if let Some(e) = endpoint {
            b = b.endpoint_url(e);
        }
        Ok(Client::from_conf(b.build()))
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
        // Signing needs credentials: none found anywhere in the chain (or they could not be
        // refreshed).
        SdkError::ConstructionFailure(_) | SdkError::DispatchFailure(_)
            if format!("{}", DisplayErrorContext(&e)).contains("credentials") =>
        {
            BackendError::new(
                BackendErrorKind::Forbidden,
                format!(
                    "{what}: no usable S3 credentials on the target (environment, shared config and \
                     credentials files, web identity token, SSO, ECS, EC2 instance metadata): {}",
                    DisplayErrorContext(&e)
                ),
            )
        }
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
        let client = self.client().await?;
        let what = format!("HEAD s3://{}", bck.name);
        self.timed(&what, async {
            client
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
        let client = self.client().await?;
        let what = format!("HEAD s3://{}/{obj}", bck.name);
        self.timed(&what, async {
            let out = client
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
        let client = self.client().await?;
        let what = format!("GET s3://{}/{obj}", bck.name);
        let mut req = client.get_object().bucket(&bck.name).key(obj);
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
        let client = self.client().await?;
        let what = format!("PUT s3://{}/{obj}", bck.name);
        let body = SdkStream::read_from()
            .path(&src.path)
            .length(aws_sdk_s3::primitives::Length::Exact(src.size))
            .build()
            .await
            .map_err(|e| BackendError::new(BackendErrorKind::Failed, format!("{what}: {e}")))?;
        let out = client
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
        let client = self.client().await?;
        let what = format!("DELETE s3://{}/{obj}", bck.name);
        self.timed(&what, async {
            client
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
        let client = self.client().await?;
        let what = format!("LIST s3://{}", bck.name);
        self.timed(&what, async {
            let mut req = client
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
