//! Remote backends: where the objects of a remote bucket really live. One [`Backend`] per
//! provider (`aws` → any S3 server through aws-sdk-s3, `ht` → a plain HTTP origin, read-only),
//! chosen from a table by the bucket's provider ([`Backends::for_bucket`]).
//!
//! Errors carry the backend's status and reason and classify themselves: 404 → not found,
//! 403 → forbidden, unreachable or 5xx → 502, no answer in time → 504.

mod aws;
mod ht;

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
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
    /// Up to `limit` names starting with `prefix`, strictly after `after`, in name order.
    async fn list(
        &self,
        bck: &Bck,
        prefix: &str,
        after: &str,
        limit: usize,
    ) -> Result<RemotePage, BackendError>;
}

/// Backend settings of a target. Environment: see `docs/operations.md`.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// S3 endpoint URL (SeaweedFS, MinIO...); empty = AWS itself (`GRISTD_S3_ENDPOINT`).
    pub s3_endpoint: String,
    /// S3 region (`AWS_REGION`, default `us-east-1`).
    pub s3_region: String,
    /// Path-style S3 addressing (`GRISTD_S3_PATH_STYLE`; default on when an endpoint is set).
    pub s3_path_style: bool,
    /// Static credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
    pub s3_access_key: String,
    pub s3_secret_key: String,
    pub s3_session_token: Option<String>,
    /// Allow `ht://` origins on loopback, private or link-local addresses
    /// (`GRISTD_HT_ALLOW_PRIVATE=true`); refused by default.
    pub ht_allow_private: bool,
    /// Connect timeout, time limit of metadata calls, and the longest a download may stall
    /// between two chunks (`GRISTD_BACKEND_TIMEOUT_SECS`, default 30).
    pub timeout: Duration,
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            s3_endpoint: String::new(),
            s3_region: "us-east-1".into(),
            s3_path_style: false,
            s3_access_key: String::new(),
            s3_secret_key: String::new(),
            s3_session_token: None,
            ht_allow_private: false,
            timeout: Duration::from_secs(30),
        }
    }
}

impl BackendConfig {
    /// Reads the settings from the environment; unset variables keep their defaults.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let flag = |k: &str| var(k).map(|v| matches!(v.as_str(), "1" | "true" | "yes" | "on"));
        let d = Self::default();
        let endpoint = var("GRISTD_S3_ENDPOINT").unwrap_or_default();
        Self {
            s3_path_style: flag("GRISTD_S3_PATH_STYLE").unwrap_or(!endpoint.is_empty()),
            s3_endpoint: endpoint,
            s3_region: var("AWS_REGION")
                .or_else(|| var("AWS_DEFAULT_REGION"))
                .unwrap_or(d.s3_region),
            s3_access_key: var("AWS_ACCESS_KEY_ID").unwrap_or_default(),
            s3_secret_key: var("AWS_SECRET_ACCESS_KEY").unwrap_or_default(),
            s3_session_token: var("AWS_SESSION_TOKEN"),
            ht_allow_private: flag("GRISTD_HT_ALLOW_PRIVATE").unwrap_or(false),
            timeout: var("GRISTD_BACKEND_TIMEOUT_SECS")
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(d.timeout),
        }
    }
}

/// The table of backends, one per remote provider.
pub struct Backends {
    aws: Arc<dyn Backend>,
    ht: Arc<dyn Backend>,
    /// Longest a download may stall between two chunks.
    pub(crate) idle_timeout: Duration,
}

impl Backends {
    pub fn new(config: &BackendConfig) -> Result<Self, ApiError> {
        Ok(Self {
            aws: Arc::new(aws::AwsBackend::new(config)),
            ht: Arc::new(ht::HtBackend::new(config)?),
            idle_timeout: config.timeout,
        })
    }

    /// The backend of a remote bucket.
    pub fn for_bucket(&self, bck: &Bck) -> Result<Arc<dyn Backend>, ApiError> {
        match bck.provider {
            Provider::Aws => Ok(self.aws.clone()),
            Provider::Ht => Ok(self.ht.clone()),
            Provider::Ais => Err(ApiError::bad_request(format!(
                "{bck} is a native bucket, not a remote one"
            ))),
        }
    }
}
