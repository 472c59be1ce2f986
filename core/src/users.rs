//! Users and roles: who may do what, kept in the bucket metadata (versioned, pushed to every
//! node) so proxies and targets decide alike. Credentials are stored only as verifiers that
//! are useless without the cluster secret (see `auth`): a peppered PBKDF2 hash of the password,
//! and a salt per S3 access key from which the node derives the S3 secret.
//!
//! Roles, as written on the command line and in the metadata:
//! - `admin`: everything except the internal endpoints nodes use among themselves;
//! - `cluster-read`: cluster map, node and job status, ETL definitions, bucket list, metrics;
//! - `read:<bucket>`: list, get and head objects of matching buckets;
//! - `write:<bucket>`: `read:` plus put, delete, multipart, bucket create / destroy / props
//!   and jobs (prefetch, evict, copy into) on matching buckets.
//!
//! A bucket pattern is `*` (every bucket), a name (`imagenet`: that name under any provider),
//! a URI (`s3://imagenet`, `ais://@#ns/b`) or a name prefix ending in `*` (`team-a-*`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::bucket::Bck;
use crate::error::ApiError;

/// Longest user name.
pub const MAX_USER_NAME: usize = 64;

/// One role granted to a user.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Admin,
    ClusterRead,
    Read(String),
    Write(String),
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Admin => f.write_str("admin"),
            Role::ClusterRead => f.write_str("cluster-read"),
            Role::Read(p) => write!(f, "read:{p}"),
            Role::Write(p) => write!(f, "write:{p}"),
        }
    }
}

impl FromStr for Role {
    type Err = ApiError;

    fn from_str(s: &str) -> Result<Self, ApiError> {
        let bad = || {
            ApiError::bad_request(format!(
                "invalid role {s:?} (admin, cluster-read, read:<bucket>, write:<bucket>)"
            ))
        };
        let pattern = |p: &str| -> Result<String, ApiError> {
            let p = p.trim();
            if p.is_empty() || p.len() > 512 || p.bytes().any(|b| b < 0x20) {
                return Err(bad());
            }
            if p.contains("://") {
                Bck::parse_uri(p).map_err(|_| bad())?;
            }
            Ok(p.to_owned())
        };
        match s.trim() {
            "admin" => Ok(Role::Admin),
            "cluster-read" => Ok(Role::ClusterRead),
            r => match r.split_once(':') {
                Some(("read", p)) => Ok(Role::Read(pattern(p)?)),
                Some(("write", p)) => Ok(Role::Write(pattern(p)?)),
                _ => Err(bad()),
            },
        }
    }
}

impl Serialize for Role {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|e: ApiError| serde::de::Error::custom(e.message))
    }
}

/// Whether a bucket pattern of a role covers `bck`.
pub fn pattern_matches(pattern: &str, bck: &Bck) -> bool {
    if pattern == "*" {
        return true;
    }
    if pattern.contains("://") {
        return Bck::parse_uri(pattern).is_ok_and(|(p, rest)| {
            rest.is_empty()
                && p.provider == bck.provider
                && p.name == bck.name
                && p.namespace == bck.namespace
        });
    }
    match pattern.strip_suffix('*') {
        Some(prefix) => bck.name.starts_with(prefix),
        None => pattern == bck.name,
    }
}

/// What a request needs from its caller (after the gate knows who that is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Any valid user.
    Authenticated,
    /// Cluster-wide queries.
    ClusterRead,
    /// Cluster changes: users, ETLs, cluster-wide jobs.
    Admin,
    /// Reading objects of a bucket (and listing it).
    Read(Bck),
    /// Changing objects of a bucket, or the bucket itself.
    Write(Bck),
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Authenticated => f.write_str("a valid user"),
            Need::ClusterRead => f.write_str("cluster-read"),
            Need::Admin => f.write_str("admin"),
            Need::Read(b) => write!(f, "read access to {b}"),
            Need::Write(b) => write!(f, "write access to {b}"),
        }
    }
}

impl Role {
    /// Whether this role alone satisfies `need`.
    pub fn covers(&self, need: &Need) -> bool {
        match (self, need) {
            (Role::Admin, _) => true,
            (_, Need::Authenticated) => true,
            (Role::ClusterRead, Need::ClusterRead) => true,
            (Role::Read(p) | Role::Write(p), Need::Read(b)) => pattern_matches(p, b),
            (Role::Write(p), Need::Write(b)) => pattern_matches(p, b),
            _ => false,
        }
    }
}

/// A password verifier: PBKDF2-HMAC-SHA256 of the password, then HMAC'd with a key derived
/// from the cluster secret (so a copy of the metadata alone cannot be brute-forced).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PasswordHash {
    pub salt: String,
    pub iterations: u32,
    pub hash: String,
}

/// An S3 access key; the secret is derived from the cluster secret, the key and the salt,
/// and never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct S3Key {
    pub access_key: String,
    pub salt: String,
}

/// One user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    pub roles: Vec<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<PasswordHash>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub s3_keys: Vec<S3Key>,
    /// Bumped when the user is re-created or its password changes; tokens carry it, so older
    /// tokens stop working.
    #[serde(default)]
    pub generation: u64,
    #[serde(default)]
    pub created: String,
}

impl User {
    /// Whether any of the user's roles satisfies `need`.
    pub fn allows(&self, need: &Need) -> bool {
        self.roles.iter().any(|r| r.covers(need))
    }

    pub fn is_admin(&self) -> bool {
        self.roles.contains(&Role::Admin)
    }

    /// The user with its credential verifiers removed (for listings).
    pub fn redacted(&self) -> UserInfo {
        UserInfo {
            name: self.name.clone(),
            roles: self.roles.clone(),
            s3_access_keys: self.s3_keys.iter().map(|k| k.access_key.clone()).collect(),
            created: self.created.clone(),
        }
    }
}

/// A user as listed to admins: no verifiers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    pub name: String,
    pub roles: Vec<Role>,
    #[serde(default)]
    pub s3_access_keys: Vec<String>,
    #[serde(default)]
    pub created: String,
}

/// Users by name.
pub type Users = BTreeMap<String, User>;

/// The user owning an S3 access key.
pub fn by_access_key<'a>(users: &'a Users, access_key: &str) -> Option<(&'a User, &'a S3Key)> {
    users.values().find_map(|u| {
        u.s3_keys
            .iter()
            .find(|k| k.access_key == access_key)
            .map(|k| (u, k))
    })
}

/// Refuses names that would be awkward in URLs, logs and tokens.
pub fn validate_user_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_USER_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "invalid user name {name:?}: 1-{MAX_USER_NAME} of a-z A-Z 0-9 - _ . @"
        )))
    }
}

/// Create or update request body of `PUT /v1/auth/users/{name}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UserSpec {
    pub roles: Vec<Role>,
    /// Empty: a password is generated and returned once.
    #[serde(default)]
    pub password: String,
    /// Also issue an S3 access key (returned once, with its secret).
    #[serde(default)]
    pub s3_key: bool,
}

/// What creating a user returns, once: the credentials that are not stored.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewCredentials {
    pub name: String,
    /// The generated password (empty when the caller chose one).
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub s3_access_key: String,
    #[serde(default)]
    pub s3_secret_key: String,
}

/// `POST /v1/auth/login` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LoginRequest {
    pub name: String,
    pub password: String,
    /// Token lifetime (`12h`, `30d`); empty = the default.
    #[serde(default)]
    pub ttl: String,
}

/// `POST /v1/auth/token` body: a fresh token for the caller, or (admins) for another user.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TokenRequest {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub ttl: String,
}

/// A token and when it expires.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TokenResponse {
    pub token: String,
    pub user: String,
    /// Seconds since the epoch.
    pub expires: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::Provider;

    fn bck(uri: &str) -> Bck {
        Bck::parse_uri(uri).unwrap().0
    }

    #[test]
    fn roles_round_trip_and_refuse_nonsense() {
        for r in [
            "admin",
            "cluster-read",
            "read:*",
            "write:imagenet",
            "read:s3://x",
            "write:team-*",
        ] {
            let role: Role = r.parse().unwrap();
            assert_eq!(role.to_string(), r);
            let json = serde_json::to_string(&role).unwrap();
            assert_eq!(serde_json::from_str::<Role>(&json).unwrap(), role);
        }
        for bad in ["", "root", "read:", "write", "read:bad://x", "read:a\tb"] {
            assert!(bad.parse::<Role>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn coverage() {
        let ais_b = Bck::new("b", Provider::Ais).unwrap();
        let s3_b = bck("s3://b");
        let user = |roles: &[&str]| User {
            name: "u".into(),
            roles: roles.iter().map(|r| r.parse().unwrap()).collect(),
            password: None,
            s3_keys: vec![],
            generation: 0,
            created: String::new(),
        };
        let ro = user(&["read:b"]);
        assert!(ro.allows(&Need::Read(ais_b.clone())));
        assert!(ro.allows(&Need::Read(s3_b.clone())));
        assert!(!ro.allows(&Need::Write(ais_b.clone())));
        assert!(!ro.allows(&Need::ClusterRead));
        assert!(ro.allows(&Need::Authenticated));
        let rw = user(&["write:s3://b"]);
        assert!(rw.allows(&Need::Write(s3_b.clone())));
        assert!(rw.allows(&Need::Read(s3_b)));
        assert!(!rw.allows(&Need::Read(ais_b.clone())));
        let pre = user(&["write:team-*"]);
        assert!(pre.allows(&Need::Write(Bck::new("team-x", Provider::Ais).unwrap())));
        assert!(!pre.allows(&Need::Write(ais_b.clone())));
        let cr = user(&["cluster-read"]);
        assert!(cr.allows(&Need::ClusterRead) && !cr.allows(&Need::Admin));
        assert!(!cr.allows(&Need::Read(ais_b.clone())));
        let admin = user(&["admin"]);
        assert!(admin.allows(&Need::Admin) && admin.allows(&Need::Write(ais_b)));
    }

    #[test]
    fn user_names() {
        for ok in ["admin", "a.b-c_d@x", "U1"] {
            validate_user_name(ok).unwrap();
        }
        for bad in ["", ".x", "a b", "a/b", "a:b", &"x".repeat(65)] {
            assert!(validate_user_name(bad).is_err(), "{bad:?}");
        }
    }
}

/// One static S3 user (`[s3] users`): keys and the buckets it may read and write (`"*"` =
/// all). Proxies' S3 fronts and targets' S3 read ports judge them alike.
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
    /// Whether `list` (a user's `read` or `write`) names `bucket`.
    pub fn may_in(list: &[String], bucket: &str) -> bool {
        list.iter().any(|b| b == "*" || b == bucket)
    }

    /// Whether the user may read objects of `bucket` (write access includes reading).
    pub fn may_read(&self, bucket: &str) -> bool {
        Self::may_in(&self.read, bucket) || Self::may_in(&self.write, bucket)
    }
}
