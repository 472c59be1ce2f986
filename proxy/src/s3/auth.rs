//! S3 access keys: SigV4 secrets for `s3s` to verify signatures, and per-user bucket grants.

use std::collections::HashMap;

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::{S3Result, s3_error};
use serde::{Deserialize, Serialize};

/// One S3 user: keys and the buckets it may read and write (`"*"` = all).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct S3User {
    pub access_key: String,
    pub secret_key: String,
    #[serde(default)]
    pub read: Vec<String>,
    #[serde(default)]
    pub write: Vec<String>,
}

impl S3User {
    fn may(list: &[String], bucket: &str) -> bool {
        list.iter().any(|b| b == "*" || b == bucket)
    }
}

pub(super) struct Users(HashMap<String, SecretKey>);

impl Users {
    pub(super) fn new(users: &[S3User]) -> Self {
        Self(
            users
                .iter()
                .map(|u| (u.access_key.clone(), SecretKey::from(u.secret_key.clone())))
                .collect(),
        )
    }
}

#[async_trait::async_trait]
impl S3Auth for Users {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0
            .get(access_key)
            .cloned()
            .ok_or_else(|| s3_error!(InvalidAccessKeyId, "unknown access key"))
    }
}

pub(super) struct Grants {
    users: HashMap<String, S3User>,
    /// Auth off: unsigned requests may do anything.
    anonymous: bool,
}

impl Grants {
    pub(super) fn new(users: &[S3User], anonymous: bool) -> Self {
        Self {
            users: users
                .iter()
                .map(|u| (u.access_key.clone(), u.clone()))
                .collect(),
            anonymous,
        }
    }
}

/// Operations that change data; everything else needs read access.
fn is_write(op: &str) -> bool {
    matches!(
        op,
        "PutObject"
            | "CopyObject"
            | "DeleteObject"
            | "DeleteObjects"
            | "CreateBucket"
            | "DeleteBucket"
            | "CreateMultipartUpload"
            | "UploadPart"
            | "UploadPartCopy"
            | "CompleteMultipartUpload"
            | "AbortMultipartUpload"
    )
}

#[async_trait::async_trait]
impl S3Access for Grants {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(creds) = cx.credentials() else {
            if self.anonymous {
                return Ok(());
            }
            return Err(s3_error!(AccessDenied, "anonymous access is disabled"));
        };
        let Some(user) = self.users.get(&creds.access_key) else {
            return Err(s3_error!(AccessDenied));
        };
        let op = cx.s3_op().name();
        let bucket = match cx.s3_path() {
            s3s::path::S3Path::Root => return Ok(()), // ListBuckets: filtered by nothing
            s3s::path::S3Path::Bucket { bucket } => bucket.to_string(),
            s3s::path::S3Path::Object { bucket, .. } => bucket.to_string(),
        };
        let allowed = if is_write(op) {
            S3User::may(&user.write, &bucket)
        } else {
            S3User::may(&user.read, &bucket) || S3User::may(&user.write, &bucket)
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
            if !(S3User::may(&user.read, src_bucket) || S3User::may(&user.write, src_bucket)) {
                return Err(s3_error!(
                    AccessDenied,
                    "user may not read bucket {src_bucket}"
                ));
            }
        }
        Ok(())
    }
}
