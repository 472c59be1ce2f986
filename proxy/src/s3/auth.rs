//! S3 access keys: SigV4 secrets for `s3s` to verify signatures, and per-user bucket grants.

use std::collections::HashMap;
use std::sync::Arc;

use gristmill_core::users::{self, Need, User};

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::{S3Result, s3_error};

pub use gristmill_core::users::S3User;

/// Where access keys come from: the users of `--s3-users` (static, with their own bucket
/// lists) and, when auth is on, the cluster's users (keys in the bucket metadata, secrets
/// derived from the cluster secret, permissions from their roles — the same as on the native
/// API).
pub(super) struct Directory {
    configured: HashMap<String, S3User>,
    cluster: Option<ClusterUsers>,
    /// The bucket metadata, for buckets anonymous clients may read.
    buckets: Arc<dyn Fn() -> Arc<gristmill_core::BucketMetadata> + Send + Sync>,
}

/// The cluster's users as the S3 front sees them.
pub(super) struct ClusterUsers {
    pub(super) keys: Arc<gristmill_node::auth::Keys>,
    pub(super) metadata: Arc<dyn Fn() -> Arc<gristmill_core::BucketMetadata> + Send + Sync>,
    /// Catches up with the leader when this proxy's state may be stale, before a cluster
    /// user's key is looked up (see `Proxy::ensure_fresh`).
    pub(super) fresh: gristmill_node::auth::Fresh,
}

impl Directory {
    pub(super) fn new(
        users: &[S3User],
        cluster: Option<ClusterUsers>,
        buckets: Arc<dyn Fn() -> Arc<gristmill_core::BucketMetadata> + Send + Sync>,
    ) -> Arc<Self> {
        Arc::new(Self {
            configured: users
                .iter()
                .map(|u| (u.access_key.clone(), u.clone()))
                .collect(),
            cluster,
            buckets,
        })
    }

    /// Whether an unsigned request may do `op` on the bucket of `path`: reads the bucket's
    /// ACL or policy grants to everyone (see `public.rs`), nothing else.
    fn anonymous_may(
        &self,
        op: &str,
        path: &s3s::path::S3Path,
        one_version: bool,
        bypass: bool,
        copy_source: Option<&str>,
    ) -> bool {
        let (name, resource) = match path {
            s3s::path::S3Path::Root => return false,
            // A multi-object delete is a request on the bucket for its objects.
            s3s::path::S3Path::Bucket { bucket } if op == "DeleteObjects" => {
                (bucket.to_string(), format!("arn:aws:s3:::{bucket}/*"))
            }
            s3s::path::S3Path::Bucket { bucket } => {
                (bucket.to_string(), format!("arn:aws:s3:::{bucket}"))
            }
            s3s::path::S3Path::Object { bucket, key } => {
                (bucket.to_string(), format!("arn:aws:s3:::{bucket}/{key}"))
            }
        };
        let granted = |bucket: &str, action: &str, resource: &str| {
            let bmd = (self.buckets)();
            let Ok(Some(bck)) = super::common::resolve(&bmd, bucket) else {
                return false;
            };
            bmd.get(&bck).is_some_and(|rec| {
                super::public::anonymous(&rec.props.public, bucket).allows(action, resource)
            })
        };
        if !granted(&name, &super::public::action_of(op, one_version), &resource) {
            return false;
        }
        // Bypassing governance retention is an action of its own.
        if bypass && !granted(&name, "s3:BypassGovernanceRetention", &resource) {
            return false;
        }
        // A copy also reads its source, which must be as open: `bucket/key[?versionId=]`,
        // split before the key is decoded (a `%3F` in it is part of the key).
        match copy_source {
            Some(src) => {
                let (path, query) = src.split_once('?').unwrap_or((src, ""));
                let path = percent_encoding::percent_decode_str(path.trim_start_matches('/'))
                    .decode_utf8_lossy()
                    .into_owned();
                let src_bucket = path.split('/').next().unwrap_or("");
                let action = if query.split('&').any(|kv| kv.starts_with("versionId=")) {
                    "s3:GetObjectVersion"
                } else {
                    "s3:GetObject"
                };
                granted(src_bucket, action, &format!("arn:aws:s3:::{path}"))
            }
            None => true,
        }
    }

    /// Whether `path` names a bucket that does not exist (in this proxy's metadata).
    fn names_no_bucket(&self, path: &s3s::path::S3Path) -> bool {
        let name = match path {
            s3s::path::S3Path::Root => return false,
            s3s::path::S3Path::Bucket { bucket } | s3s::path::S3Path::Object { bucket, .. } => {
                bucket.to_string()
            }
        };
        matches!(super::common::resolve(&(self.buckets)(), &name), Ok(None))
    }

    /// The cluster's bucket metadata (empty without cluster users).
    fn metadata(&self) -> Arc<gristmill_core::BucketMetadata> {
        self.cluster
            .as_ref()
            .map_or_else(Default::default, |c| (c.metadata)())
    }

    /// The cluster user owning `access_key`, with its derived secret.
    fn cluster_user(&self, access_key: &str) -> Option<(User, SecretKey)> {
        let c = self.cluster.as_ref()?;
        let bmd = (c.metadata)();
        let (user, key) = users::by_access_key(&bmd.users, access_key)?;
        Some((user.clone(), SecretKey::from(c.keys.s3_secret(key))))
    }
}

/// Verifies signatures: finds the secret of an access key.
pub(super) struct Users(pub(super) Arc<Directory>);

#[async_trait::async_trait]
impl S3Auth for Users {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if let Some(u) = self.0.configured.get(access_key) {
            return Ok(SecretKey::from(u.secret_key.clone()));
        }
        if let Some(c) = &self.0.cluster {
            (c.fresh)().await.map_err(|why| {
                s3_error!(
                    ServiceUnavailable,
                    "this node cannot tell whether its users are current ({why}); retry"
                )
            })?;
        }
        self.0
            .cluster_user(access_key)
            .map(|(_, secret)| secret)
            .ok_or_else(|| s3_error!(InvalidAccessKeyId, "unknown access key"))
    }
}

pub(super) struct Grants {
    directory: Arc<Directory>,
    /// Auth off: unsigned requests may do anything.
    anonymous: bool,
}

impl Grants {
    pub(super) fn new(directory: Arc<Directory>, anonymous: bool) -> Self {
        Self {
            directory,
            anonymous,
        }
    }
}

/// Operations that only read: they need read access. Every other operation — those that
/// change data, and any this list does not know (a new one the S3 front learns later, or one
/// answered NotImplemented) — needs write access: an unlisted operation fails closed.
const READS: &[&str] = &[
    "ListBuckets",
    "HeadBucket",
    "GetBucketLocation",
    "ListObjects",
    "ListObjectsV2",
    "ListObjectVersions",
    "GetObject",
    "HeadObject",
    "GetObjectAttributes",
    "GetObjectTagging",
    "GetBucketPolicy",
    "GetBucketAcl",
    "GetBucketVersioning",
    "ListParts",
    "ListMultipartUploads",
];

fn is_write(op: &str) -> bool {
    !READS.contains(&op)
}

#[async_trait::async_trait]
impl S3Access for Grants {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        // Every routed S3 request passes here first: name its operation for the metrics.
        let op = cx.s3_op().name().to_owned();
        if let Some(label) = cx
            .extensions_mut()
            .get::<gristmill_node::metrics::OpLabel>()
        {
            label.set(&op);
        }
        let Some(creds) = cx.credentials() else {
            // A policy's s3:GetObject is not s3:GetObjectVersion.
            let one_version = cx.uri().query().is_some_and(|q| {
                q.split('&').any(|kv| {
                    let key = kv.split('=').next().unwrap_or("");
                    percent_encoding::percent_decode_str(key).decode_utf8_lossy() == "versionId"
                })
            });
            if self.anonymous {
                return Ok(());
            }
            let copy_source = cx
                .headers()
                .get("x-amz-copy-source")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bypass = cx
                .headers()
                .get(gristmill_core::object_lock::BYPASS_GOVERNANCE_HEADER)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
            if self.directory.anonymous_may(
                &op,
                cx.s3_path(),
                one_version,
                bypass,
                copy_source.as_deref(),
            ) {
                // Let through by a bucket's grant: an object's own `private` ACL still
                // closes it (see `super::objects`).
                cx.extensions_mut()
                    .insert(super::public::GrantedToAnonymous);
                return Ok(());
            }
            // S3 tells anyone that a bucket does not exist (404 NoSuchBucket, not 403).
            if op != "CreateBucket" && self.directory.names_no_bucket(cx.s3_path()) {
                return Err(s3_error!(
                    NoSuchBucket,
                    "The specified bucket does not exist"
                ));
            }
            return Err(s3_error!(AccessDenied, "anonymous access is disabled"));
        };
        if !self.directory.configured.contains_key(&creds.access_key) {
            return match self.directory.cluster_user(&creds.access_key) {
                Some((user, _)) => check_cluster_user(cx, &user, self.directory.metadata()),
                None => Err(s3_error!(AccessDenied)),
            };
        }
        let Some(user) = self.directory.configured.get(&creds.access_key) else {
            return Err(s3_error!(AccessDenied));
        };
        let op = cx.s3_op().name();
        let bucket = match cx.s3_path() {
            s3s::path::S3Path::Root => return Ok(()), // ListBuckets: filtered by nothing
            s3s::path::S3Path::Bucket { bucket } => bucket.to_string(),
            s3s::path::S3Path::Object { bucket, .. } => bucket.to_string(),
        };
        let allowed = if is_write(op) {
            S3User::may_in(&user.write, &bucket)
        } else {
            user.may_read(&bucket)
        };
        if !allowed {
            return Err(s3_error!(
                AccessDenied,
                "user {} may not {op} in bucket {bucket}",
                creds.access_key
            ));
        }
        // CopyObject / UploadPartCopy also read their source.
        if let Some(src) = cx
            .headers()
            .get("x-amz-copy-source")
            .and_then(|v| v.to_str().ok())
        {
            let src = percent_encoding::percent_decode_str(src.trim_start_matches('/'))
                .decode_utf8_lossy();
            let src_bucket = src.split('/').next().unwrap_or("");
            if !user.may_read(src_bucket) {
                return Err(s3_error!(
                    AccessDenied,
                    "user may not read bucket {src_bucket}"
                ));
            }
        }
        Ok(())
    }
}

/// A cluster user's S3 request: the same needs as the native API (write access for
/// operations that change data, bucket creation and deletion included; read access
/// otherwise; any valid user may list buckets), plus read access to a copy's source.
fn check_cluster_user(
    cx: &mut S3AccessContext<'_>,
    user: &User,
    bmd: Arc<gristmill_core::BucketMetadata>,
) -> S3Result<()> {
    let op = cx.s3_op().name();
    let bucket = match cx.s3_path() {
        s3s::path::S3Path::Root => return Ok(()),
        s3s::path::S3Path::Bucket { bucket } => bucket.to_string(),
        s3s::path::S3Path::Object { bucket, .. } => bucket.to_string(),
    };
    // The bucket the name means (a remote bucket's permissions are its own).
    let bck = |name: &str| -> S3Result<gristmill_core::Bck> {
        match super::common::resolve(&bmd, name)? {
            Some(b) => Ok(b),
            None => super::common::bucket(name),
        }
    };
    let need = if is_write(op) {
        Need::Write(bck(&bucket)?)
    } else {
        Need::Read(bck(&bucket)?)
    };
    if !user.allows(&need) {
        tracing::warn!(target: "audit", user = %user.name, op, bucket, "S3 request denied");
        return Err(s3_error!(
            AccessDenied,
            "user {} lacks {need} for {op}",
            user.name
        ));
    }
    if let Some(src) = cx
        .headers()
        .get("x-amz-copy-source")
        .and_then(|v| v.to_str().ok())
    {
        let src =
            percent_encoding::percent_decode_str(src.trim_start_matches('/')).decode_utf8_lossy();
        let src_bucket = src.split('/').next().unwrap_or("");
        if !user.allows(&Need::Read(bck(src_bucket)?)) {
            return Err(s3_error!(
                AccessDenied,
                "user {} may not read bucket {src_bucket}",
                user.name
            ));
        }
    }
    if is_write(op) {
        tracing::info!(target: "audit", user = %user.name, op, bucket, "S3 request allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_listed_and_everything_else_needs_write() {
        for op in ["GetObject", "HeadObject", "ListObjectsV2", "ListParts"] {
            assert!(!is_write(op), "{op}");
        }
        for op in [
            "PutObject",
            "DeleteObjects",
            "CompleteMultipartUpload",
            // Not implemented (or not known) today: fail closed.
            "PutBucketPolicy",
            "PutObjectTagging",
            "SomethingNew",
        ] {
            assert!(is_write(op), "{op}");
        }
    }
}
