//! Bucket identity: provider, namespace and name, as AIStore spells them on the wire.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// Where a bucket's data lives. `Ais` buckets are native; the others are remote buckets that
/// Gristmill caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Native Gristmill bucket (`ais://`).
    Ais,
    /// Amazon S3 or any S3-compatible server (`s3://`; wire name `aws`).
    Aws,
    /// Plain HTTP(S) origin (`ht://`).
    Ht,
}

impl Provider {
    /// The name used in `?provider=` and in unames (`ais`, `aws`, `ht`).
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Ais => "ais",
            Provider::Aws => "aws",
            Provider::Ht => "ht",
        }
    }

    /// The URI scheme users type (`ais://`, `s3://`, `ht://`).
    pub fn scheme(self) -> &'static str {
        match self {
            Provider::Ais => "ais",
            Provider::Aws => "s3",
            Provider::Ht => "ht",
        }
    }

    /// Whether the bucket's objects are owned elsewhere and only cached here.
    pub fn is_remote(self) -> bool {
        !matches!(self, Provider::Ais)
    }
}

impl FromStr for Provider {
    type Err = ApiError;
    fn from_str(s: &str) -> Result<Self, ApiError> {
        match s {
            "" | "ais" => Ok(Provider::Ais),
            "aws" | "s3" => Ok(Provider::Aws),
            "ht" => Ok(Provider::Ht),
            other => Err(ApiError::bad_request(format!(
                "unknown provider {other:?} (expected one of: ais, aws|s3, ht)"
            ))),
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Bucket namespace, AIStore style: `@uuid#name`. `uuid` names a remote cluster, `name` an
/// account or profile alias; both empty is the global namespace (`@#`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Namespace {
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub name: String,
}

impl Namespace {
    /// The global namespace.
    pub fn global() -> Self {
        Self::default()
    }

    pub fn is_global(&self) -> bool {
        self.uuid.is_empty() && self.name.is_empty()
    }

    /// The `@uuid#name` form used in unames (`@#` for global).
    pub fn uname(&self) -> String {
        let mut s = String::with_capacity(2 + self.uuid.len() + self.name.len());
        self.push_uname(&mut s);
        s
    }

    fn push_uname(&self, s: &mut String) {
        s.push('@');
        s.push_str(&self.uuid);
        s.push('#');
        s.push_str(&self.name);
    }

    /// Parses `@uuid#name`, `#name`, `@uuid` or the empty string.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        if s.is_empty() {
            return Ok(Self::global());
        }
        let rest = s.strip_prefix('@').unwrap_or(s);
        let (uuid, name) = match rest.split_once('#') {
            Some((u, n)) => (u, n),
            None if s.starts_with('@') => (rest, ""),
            None => return Err(ApiError::bad_request(format!("invalid namespace {s:?}"))),
        };
        let ok = |p: &str| {
            p.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if !ok(uuid) || !ok(name) {
            return Err(ApiError::bad_request(format!("invalid namespace {s:?}")));
        }
        Ok(Self {
            uuid: uuid.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// A bucket: provider + namespace + name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Bck {
    pub name: String,
    pub provider: Provider,
    #[serde(default)]
    pub namespace: Namespace,
}

/// Longest bucket name accepted (AIStore's limit).
pub const MAX_BUCKET_NAME: usize = 64;

impl Bck {
    /// A bucket in the global namespace; validates the name.
    pub fn new(name: &str, provider: Provider) -> Result<Self, ApiError> {
        validate_bucket_name(name)?;
        Ok(Self {
            name: name.to_owned(),
            provider,
            namespace: Namespace::global(),
        })
    }

    /// A bucket from the pieces of a native-API request: the path segment and the optional
    /// `provider` and `namespace` query parameters.
    pub fn from_request(
        name: &str,
        provider: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Self, ApiError> {
        let mut bck = Bck::new(name, provider.unwrap_or("").parse()?)?;
        if let Some(ns) = namespace {
            bck.namespace = Namespace::parse(ns)?;
        }
        Ok(bck)
    }

    /// 404 for this bucket, worded as AIStore does (its SDK classifies errors by the wording).
    pub fn not_found(&self) -> ApiError {
        ApiError::new(
            crate::error::ErrorKind::BucketNotFound,
            format!("bucket \"{self}\" does not exist"),
        )
    }

    /// 409 for creating a bucket that exists, worded as AIStore does.
    pub fn already_exists(&self) -> ApiError {
        ApiError::new(
            crate::error::ErrorKind::AlreadyExists,
            format!("bucket \"{self}\" already exists"),
        )
    }

    /// 409 for creating a bucket another user owns.
    pub fn owned_by_another(&self) -> ApiError {
        ApiError::new(
            crate::error::ErrorKind::BucketAlreadyExists,
            format!("bucket \"{self}\" already exists and belongs to another user"),
        )
    }

    /// Whether the bucket's objects live elsewhere (a cloud bucket, an HTTP origin, or a bucket
    /// of another cluster: `ais://@alias/name`), so the cluster holds a cache of them.
    pub fn is_remote(&self) -> bool {
        self.provider.is_remote() || self.is_remote_ais()
    }

    /// `ais://@alias/name`: a bucket of the attached cluster `alias`.
    pub fn is_remote_ais(&self) -> bool {
        self.provider == Provider::Ais && !self.namespace.uuid.is_empty()
    }

    /// `provider/@uuid#ns/name`: the bucket part of every object uname, and its index key.
    pub fn uname(&self) -> String {
        // Built without the formatting machinery: it names the bucket in every object
        // request's lookups.
        let provider = self.provider.as_str();
        let ns = &self.namespace;
        let mut s = String::with_capacity(
            provider.len() + ns.uuid.len() + ns.name.len() + self.name.len() + 4,
        );
        s.push_str(provider);
        s.push('/');
        ns.push_uname(&mut s);
        s.push('/');
        s.push_str(&self.name);
        s
    }

    /// The placement name of one object: `provider/@uuid#ns/bucket/object`.
    pub fn object_uname(&self, object: &str) -> String {
        let mut s = self.uname();
        s.push('/');
        s.push_str(object);
        s
    }

    /// Parses a bucket URI: `ais://b`, `s3://b`, `ht://b`, `ais://@uuid#ns/b`; a bare name means
    /// `ais://`. Returns the bucket and the object part after the first `/` (may be empty).
    pub fn parse_uri(uri: &str) -> Result<(Self, String), ApiError> {
        let (provider, rest) = match uri.split_once("://") {
            Some((scheme, rest)) => (scheme.parse::<Provider>()?, rest),
            None => (Provider::Ais, uri),
        };
        let (namespace, rest) = if rest.starts_with('@') || rest.starts_with('#') {
            let (ns, r) = rest.split_once('/').unwrap_or((rest, ""));
            (Namespace::parse(ns)?, r)
        } else {
            (Namespace::global(), rest)
        };
        let (name, object) = rest.split_once('/').unwrap_or((rest, ""));
        let mut bck = Bck::new(name, provider)?;
        bck.namespace = namespace;
        Ok((bck, object.to_owned()))
    }
}

impl fmt::Display for Bck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.provider.scheme())?;
        if !self.namespace.is_global() {
            write!(f, "{}/", self.namespace.uname())?;
        }
        f.write_str(&self.name)
    }
}

/// Bucket names: 1–64 characters of `[A-Za-z0-9._-]`, not `.` or `..`.
pub fn validate_bucket_name(name: &str) -> Result<(), ApiError> {
    let bad = |why: &str| {
        Err(ApiError::bad_request(format!(
            "invalid bucket name {name:?}: {why}"
        )))
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_BUCKET_NAME {
        return bad("longer than 64 characters");
    }
    if name == "." || name == ".." {
        return bad("reserved name");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    {
        return bad("only letters, digits, '.', '-' and '_' are allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unames_match_aistore() {
        let b = Bck::new("imagenet", Provider::Ais).unwrap();
        assert_eq!(
            b.object_uname("train/0001.jpg"),
            "ais/@#/imagenet/train/0001.jpg"
        );
        let (s3, obj) = Bck::parse_uri("s3://#prod/logs/a.txt").unwrap();
        assert_eq!(s3.object_uname(&obj), "aws/@#prod/logs/a.txt");
    }

    #[test]
    fn parse_uri_forms() {
        let (b, o) = Bck::parse_uri("ais://b1/dir/x").unwrap();
        assert_eq!(
            (b.name.as_str(), b.provider, o.as_str()),
            ("b1", Provider::Ais, "dir/x")
        );
        assert_eq!(b.to_string(), "ais://b1");
        assert!(Bck::parse_uri("gs://x").is_err());
        assert!(Bck::parse_uri("ais://bad name").is_err());
    }

    #[test]
    fn bucket_names() {
        assert!(validate_bucket_name("ok-name_1.2").is_ok());
        for bad in ["", ".", "..", "a/b", "sp ace", &"x".repeat(65)] {
            assert!(validate_bucket_name(bad).is_err(), "{bad}");
        }
    }
}
