//! Remote backends: where the objects of a remote bucket really live. One [`Backend`] per
//! provider (`aws` → any S3 server through aws-sdk-s3, `ht` → a plain HTTP origin, read-only),
//! chosen from a table by the bucket's provider ([`Backends::for_bucket`]).
//!
//! Errors carry the backend's status and reason and classify themselves: 404 → not found,
//! 403 → forbidden, unreachable or 5xx → 502, no answer in time → 504.

mod ais;
mod aws;
mod ht;
mod metered;

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use gristmill_core::api::BucketProps;
use gristmill_core::{ApiError, Bck, ErrorKind, Provider};

/// What a backend knows about one remote object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteAttrs {
    pub size: u64,
    /// Entity tag without quotes; empty when the backend gives none (many HTTP origins).
    pub etag: String,
    /// Object version (S3 versioning); empty when unversioned.
    pub version: String,
    /// `Last-Modified` as the backend sent it (HTTP date); empty when unknown.
    pub last_modified: String,
    /// The whole-object checksum the backend stored and sent with the object (S3's
    /// `x-amz-checksum-*`, asked for with `x-amz-checksum-mode: ENABLED`); a cold GET checks
    /// the bytes against it.
    pub checksum: Option<RemoteChecksum>,
}

/// A whole-object checksum from a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteChecksum {
    pub algo: ChecksumAlgo,
    /// The digest's bytes (big-endian for the CRCs, as S3 sends them base64-encoded).
    pub value: Vec<u8>,
}

/// The checksum algorithms a cold GET validates, cheapest first: the order in which one is
/// chosen when a backend sends several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumAlgo {
    Crc64Nvme,
    Crc32c,
    Crc32,
    Sha256,
}

impl ChecksumAlgo {
    pub fn as_str(self) -> &'static str {
        match self {
            ChecksumAlgo::Crc64Nvme => "crc64nvme",
            ChecksumAlgo::Crc32c => "crc32c",
            ChecksumAlgo::Crc32 => "crc32",
            ChecksumAlgo::Sha256 => "sha256",
        }
    }
}

impl RemoteChecksum {
    /// From S3's base64 header value; `None` for a composite (per-part, `…-N`) checksum of a
    /// multipart object, which says nothing about the whole object's bytes, or a malformed one.
    pub fn from_s3(algo: ChecksumAlgo, value: &str) -> Option<Self> {
        use base64::Engine;
        if value.contains('-') {
            return None;
        }
        let value = base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .ok()?;
        let want = match algo {
            ChecksumAlgo::Crc64Nvme => 8,
            ChecksumAlgo::Crc32c | ChecksumAlgo::Crc32 => 4,
            ChecksumAlgo::Sha256 => 32,
        };
        (value.len() == want).then_some(Self { algo, value })
    }
}

impl RemoteAttrs {
    /// The version Gristmill records for the cached copy: the remote version, else the ETag.
    pub fn cache_version(&self) -> String {
        if self.version.is_empty() {
            self.etag.clone()
        } else {
            self.version.clone()
        }
    }
}

/// Bytes of a remote object, in order.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, BackendError>> + Send>>;

/// One object of a remote listing.
#[derive(Debug, Clone)]
pub struct RemoteEntry {
    pub name: String,
    pub size: u64,
    pub etag: String,
}

/// One page of a remote listing, in name order.
#[derive(Debug, Clone, Default)]
pub struct RemotePage {
    pub entries: Vec<RemoteEntry>,
    /// Whether the backend has more names after the last entry.
    pub truncated: bool,
}

/// How a backend failed, in terms of what the client should see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendErrorKind {
    NotFound,
    Forbidden,
    /// The request itself is wrong (bad name, unsupported operation): not retryable.
    Invalid,
    /// Unreachable, connection broken, or a 5xx answer: 502.
    Failed,
    /// No answer within the configured timeout: 504.
    Timeout,
}

/// A backend failure with the backend's own reason.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    pub kind: BackendErrorKind,
    pub message: String,
}

impl BackendError {
    pub fn new(kind: BackendErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// From an HTTP status the backend answered with.
    pub fn from_status(status: u16, message: impl Into<String>) -> Self {
        let kind = match status {
            404 => BackendErrorKind::NotFound,
            401 | 403 => BackendErrorKind::Forbidden,
            408 | 504 => BackendErrorKind::Timeout,
            400..=499 => BackendErrorKind::Invalid,
            _ => BackendErrorKind::Failed,
        };
        Self::new(kind, message)
    }

    /// Whether the same request may succeed later (5xx, broken connections, timeouts).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            BackendErrorKind::Failed | BackendErrorKind::Timeout
        )
    }

    pub fn is_not_found(&self) -> bool {
        self.kind == BackendErrorKind::NotFound
    }
}

impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        let kind = match e.kind {
            BackendErrorKind::NotFound => ErrorKind::NotFound,
            BackendErrorKind::Forbidden => ErrorKind::Forbidden,
            BackendErrorKind::Invalid => ErrorKind::BadRequest,
            BackendErrorKind::Failed => ErrorKind::BadGateway,
            BackendErrorKind::Timeout => ErrorKind::GatewayTimeout,
        };
        ApiError::new(kind, format!("backend: {}", e.message))
    }
}

impl From<BackendError> for crate::StoreError {
    fn from(e: BackendError) -> Self {
        crate::StoreError::Api(e.into())
    }
}

/// Where a write-through PUT's bytes are: a complete local temp file, so the upload can be
/// retried and signed without holding the object in memory.
#[derive(Debug, Clone)]
pub struct PutSource {
    pub path: PathBuf,
    pub size: u64,
}

/// One remote storage service.
#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// Whether the bucket exists there (and we may access it).
    async fn head_bucket(&self, bck: &Bck) -> Result<(), BackendError>;
    async fn head(&self, bck: &Bck, obj: &str) -> Result<RemoteAttrs, BackendError>;
    /// The object's bytes (`range`: first byte and length), and its attributes. Dropping the
    /// stream cancels the download.
    async fn get(
        &self,
        bck: &Bck,
        obj: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(RemoteAttrs, ByteStream), BackendError>;
    async fn put(&self, bck: &Bck, obj: &str, src: PutSource) -> Result<RemoteAttrs, BackendError>;
    async fn delete(&self, bck: &Bck, obj: &str) -> Result<(), BackendError>;
    /// Whether range GETs are honoured (so large objects may be fetched in parallel parts).
    fn supports_ranges(&self) -> bool {
        true
    }
    /// Up to `limit` names starting with `prefix`, strictly after `after`, in name order.
    async fn list(
        &self,
        bck: &Bck,
        prefix: &str,
        after: &str,
        limit: usize,
    ) -> Result<RemotePage, BackendError>;
}

/// How cold GETs of large objects are split into parallel range requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParallelDownload {
    /// Objects larger than this are fetched in parts (`GRISTD_COLD_GET_PARALLEL_ABOVE`,
    /// default 128 MiB).
    pub threshold: u64,
    /// Part size (`GRISTD_COLD_GET_CHUNK`, default 16 MiB).
    pub chunk: u64,
    /// Parts in flight at once (`GRISTD_COLD_GET_WORKERS`, default 4).
    pub workers: usize,
}

impl Default for ParallelDownload {
    fn default() -> Self {
        Self {
            threshold: 128 << 20,
            chunk: 16 << 20,
            workers: 4,
        }
    }
}

/// Backend settings of a target. Environment: see `docs/operations.md`.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// S3 endpoint URL (SeaweedFS, MinIO...) for every `s3://` bucket without its own
    /// (`GRISTD_S3_ENDPOINT`); empty = the AWS chain's (`AWS_ENDPOINT_URL[_S3]`, a profile's
    /// `endpoint_url`), else AWS itself. Credentials and the region come from the AWS chain
    /// (see `backend/aws.rs`).
    pub s3_endpoint: String,
    /// Path-style S3 addressing (`GRISTD_S3_PATH_STYLE`); unset = on whenever an endpoint is
    /// configured.
    pub s3_path_style: Option<bool>,
    /// Allow `ht://` origins on loopback, private or link-local addresses
    /// (`GRISTD_HT_ALLOW_PRIVATE=true`); refused by default.
    pub ht_allow_private: bool,
    /// Connect timeout, time limit of metadata calls, and the longest a download may stall
    /// between two chunks (`GRISTD_BACKEND_TIMEOUT_SECS`, default 30).
    pub timeout: Duration,
    /// Cold GETs of objects above a size are fetched with parallel range requests.
    pub parallel: ParallelDownload,
    /// Attached clusters for `ais://@alias/...` buckets: (alias, proxy URL)
    /// (`GRISTD_REMOTE_AIS=alias=http://host:port,...`).
    pub remote_ais: Vec<(String, String)>,
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            s3_endpoint: String::new(),
            s3_path_style: None,
            ht_allow_private: false,
            timeout: Duration::from_secs(30),
            parallel: ParallelDownload::default(),
            remote_ais: Vec::new(),
        }
    }
}

/// Which `s3://` client a bucket uses: (profile, endpoint, region) from its properties.
type AwsKey = (String, String, String);

/// The table of backends: per provider, and for `s3://` per endpoint/account settings.
pub struct Backends {
    config: BackendConfig,
    /// `s3://` clients by (profile, endpoint, region): one per account and server.
    aws: std::sync::Mutex<std::collections::HashMap<AwsKey, Arc<dyn Backend>>>,
    ht: Arc<dyn Backend>,
    /// Attached clusters (`ais://@alias/...`), by alias.
    ais: std::collections::HashMap<String, Arc<dyn Backend>>,
    /// Longest a download may stall between two chunks.
    pub(crate) idle_timeout: Duration,
    pub(crate) parallel: ParallelDownload,
}

impl Backends {
    pub fn new(config: &BackendConfig) -> Result<Self, ApiError> {
        let ais = config
            .remote_ais
            .iter()
            .map(|(alias, url)| {
                let b = metered::Metered::wrap(
                    Arc::new(ais::AisBackend::new(alias, url, config.timeout)),
                    "ais",
                );
                (alias.clone(), b)
            })
            .collect();
        Ok(Self {
            config: config.clone(),
            aws: Default::default(),
            ht: metered::Metered::wrap(Arc::new(ht::HtBackend::new(config)?), "ht"),
            ais,
            idle_timeout: config.timeout,
            parallel: config.parallel,
        })
    }

    /// The backend of a remote bucket, with its properties (endpoint, profile, region).
    pub fn for_bucket(
        &self,
        bck: &Bck,
        props: Option<&BucketProps>,
    ) -> Result<Arc<dyn Backend>, ApiError> {
        if bck.is_remote_ais() {
            let alias = &bck.namespace.uuid;
            return self.ais.get(alias).cloned().ok_or_else(|| {
                ApiError::not_found(format!(
                    "no remote cluster {alias:?} is attached (GRISTD_REMOTE_AIS=alias=url,...)"
                ))
            });
        }
        match bck.provider {
            Provider::Aws => self.aws_for(bck, props),
            Provider::Ht => Ok(self.ht.clone()),
            Provider::Ais => Err(ApiError::bad_request(format!(
                "{bck} is a native bucket, not a remote one"
            ))),
        }
    }

    fn aws_for(
        &self,
        bck: &Bck,
        props: Option<&BucketProps>,
    ) -> Result<Arc<dyn Backend>, ApiError> {
        let extra = props.map(|p| p.extra.aws.clone()).unwrap_or_default();
        // A namespace is an account: `s3://#acct/b` uses profile `acct`.
        let profile = if extra.profile.is_empty() {
            bck.namespace.name.clone()
        } else {
            extra.profile.clone()
        };
        let key = (
            profile.clone(),
            extra.endpoint.clone(),
            extra.cloud_region.clone(),
        );
        if let Some(b) = self.aws.lock().expect("backends lock").get(&key) {
            return Ok(b.clone());
        }
        let spec = aws::AwsClientSpec {
            profile,
            endpoint: extra.endpoint.clone(),
            region: extra.cloud_region.clone(),
            default_endpoint: self.config.s3_endpoint.clone(),
            path_style: self.config.s3_path_style,
        };
        let b = metered::Metered::wrap(
            Arc::new(aws::AwsBackend::new(spec, self.config.timeout)),
            "aws",
        );
        self.aws
            .lock()
            .expect("backends lock")
            .insert(key, b.clone());
        Ok(b)
    }
}

/// Sends an HTTP request to a backend under `timeout` (for the response head); maps failures
/// and non-2xx answers to [`BackendError`]s that name the request.
pub(crate) async fn send_timed(
    timeout: Duration,
    what: &str,
    req: reqwest::RequestBuilder,
) -> Result<reqwest::Response, BackendError> {
    let resp = match tokio::time::timeout(timeout, req.send()).await {
        Err(_) => {
            return Err(BackendError::new(
                BackendErrorKind::Timeout,
                format!("{what}: no answer within {timeout:?}"),
            ));
        }
        Ok(Err(e)) if e.is_timeout() => {
            return Err(BackendError::new(
                BackendErrorKind::Timeout,
                format!("{what}: {e}"),
            ));
        }
        Ok(Err(e)) => {
            return Err(BackendError::new(
                BackendErrorKind::Failed,
                format!("{what}: {e}"),
            ));
        }
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let reason = status.canonical_reason().unwrap_or("").to_owned();
    // A Gristmill/AIStore peer explains itself in a JSON body; keep its message.
    let body = resp.bytes().await.unwrap_or_default();
    let detail = serde_json::from_slice::<gristmill_core::ErrorBody>(&body)
        .map(|_| {
            format!(
                ": {}",
                ApiError::from_peer(status.as_u16(), &body, "").message
            )
        })
        .unwrap_or_default();
    Err(BackendError::from_status(
        status.as_u16(),
        format!("{what}: {} {reason}{detail}", status.as_u16()),
    ))
}
