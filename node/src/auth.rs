//! Access control: the one gate every request to a proxy or a target passes when auth is on.
//!
//! ```text
//!  client ── Bearer JWT ──▶ proxy gate ── route table → Need ── user's roles ──▶ handler
//!                              │ object requests: 307 + signed redirect (method, bucket,
//!                              │ object, user, expiry) — the target's gate checks it again
//!  node ── grist-node-auth (HMAC of method + path + expiry) ──▶ internal endpoints
//!  S3 client ── SigV4 (key → same users, secret derived from the cluster secret) ──▶ s3s
//! ```
//!
//! Everything derives from one **cluster secret** that every node reads from a file and no
//! client ever has: the JWT signing key, the intra-cluster request key, the redirect key, the
//! S3 secret derivation key and the password pepper are HMACs of it with distinct labels.
//!
//! The route tables ([`PROXY_ROUTES`], [`TARGET_ROUTES`]) classify every endpoint; a request
//! that matches no entry is treated as internal (only nodes may call it), so a new route that
//! nobody classified fails closed, and the route-table test fails until it is classified.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};

use gristmill_core::api::ActionMsg;
use gristmill_core::bmd::BucketMetadata;
use gristmill_core::bucket::Bck;
use gristmill_core::error::{ApiError, ErrorKind};
use gristmill_core::users::{Need, PasswordHash, S3Key, User};

/// Header carrying a node's signature on requests between nodes.
pub const NODE_AUTH_HEADER: &str = "grist-node-auth";

/// Query parameters of a signed redirect.
pub const REDIRECT_EXPIRES: &str = "gexp";
pub const REDIRECT_USER: &str = "guser";
pub const REDIRECT_SIG: &str = "gsig";

/// The user name a redirect carries when a node (not a user) was redirected.
const NODE_USER: &str = "#node";

/// How long a node's request signature is valid (clock skew between nodes must be smaller).
const INTRA_TTL: Duration = Duration::from_secs(60);

/// Default lifetime of a signed redirect.
pub const DEFAULT_REDIRECT_TTL: Duration = Duration::from_secs(60);

/// Default and longest lifetime of a token.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(366 * 24 * 3600);

/// PBKDF2 rounds for new password hashes.
const PBKDF2_ROUNDS: u32 = 100_000;

/// Bytes of a cluster secret.
const SECRET_BYTES: usize = 32;

/// JWT issuer.
const ISSUER: &str = "gristmill";

/// Largest bucket action body the gate reads to classify it (handlers read at most the same).
const MAX_ACTION_BODY: usize = 1 << 20;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Random bytes from the system's generator.
fn random(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    // aws-lc's generator only fails when the OS cannot provide entropy at all.
    aws_lc_rs::rand::fill(&mut buf).expect("system random generator");
    buf
}

/// A random password: 24 URL-safe characters (144 bits).
pub fn generate_password() -> String {
    B64.encode(random(18))
}

/// A random S3 access key: `GM` and 18 upper-case letters and digits.
pub fn generate_access_key() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let chars: String = random(18)
        .iter()
        .map(|b| ALPHABET[(*b & 31) as usize] as char)
        .collect();
    format!("GM{chars}")
}

// ---- the cluster secret --------------------------------------------------------------------

/// Reads a cluster secret file (hex, at least 32 bytes).
pub fn load_secret(path: &Path) -> std::io::Result<Vec<u8>> {
    let text = std::fs::read_to_string(path)?;
    let secret = hex::decode(text.trim()).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: not a hex cluster secret: {e}", path.display()),
        )
    })?;
    if secret.len() < SECRET_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: a cluster secret has at least {SECRET_BYTES} bytes",
                path.display()
            ),
        ));
    }
    Ok(secret)
}

/// Reads the cluster secret file, creating it (mode 0600, random) when it does not exist.
/// Returns the secret and whether it was created.
pub fn load_or_create_secret(path: &Path) -> std::io::Result<(Vec<u8>, bool)> {
    match load_secret(path) {
        Ok(s) => return Ok((s, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let secret = random(SECRET_BYTES);
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?
    };
    writeln!(f, "{}", hex::encode(&secret))?;
    f.sync_all()?;
    Ok((secret, true))
}

// ---- keys ------------------------------------------------------------------------------------

/// Every key derived from the cluster secret, and the lifetimes this node uses.
pub struct Keys {
    jwt_encode: jsonwebtoken::EncodingKey,
    jwt_decode: jsonwebtoken::DecodingKey,
    intra: hmac::Key,
    redirect: hmac::Key,
    s3: hmac::Key,
    pepper: hmac::Key,
    /// Lifetime of signed redirects.
    pub redirect_ttl: Duration,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("redirect_ttl", &self.redirect_ttl)
            .finish_non_exhaustive()
    }
}

/// Why a credential was refused (the message tells the client which; never the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Missing,
    Malformed,
    BadSignature,
    Expired,
    UnknownUser,
    Revoked,
    WrongTarget,
}

impl Refused {
    fn message(self, what: &str) -> String {
        match self {
            Refused::Missing => format!("{what} required"),
            Refused::Malformed => format!("malformed {what}"),
            Refused::BadSignature => format!("{what} has an invalid signature"),
            Refused::Expired => format!("{what} has expired"),
            Refused::UnknownUser => format!("{what} names an unknown user"),
            Refused::Revoked => format!("{what} was revoked"),
            Refused::WrongTarget => format!("{what} was issued for another request"),
        }
    }
}

/// JWT claims.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub iss: String,
    pub iat: u64,
    pub exp: u64,
    /// The user's generation when issued; a re-created user's old tokens stop working.
    #[serde(default)]
    pub generation: u64,
}

impl Keys {
    /// Keys derived from a cluster secret.
    pub fn from_secret(secret: &[u8]) -> Self {
        let master = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let derive = |label: &str| hmac::sign(&master, label.as_bytes());
        let jwt = derive("gristmill/jwt/v1");
        let key = |label: &str| hmac::Key::new(hmac::HMAC_SHA256, derive(label).as_ref());
        Self {
            // Only an empty key is refused; an HMAC-SHA256 tag has 32 bytes.
            jwt_encode: jsonwebtoken::EncodingKey::from_secret(jwt.as_ref())
                .expect("non-empty HMAC key"),
            jwt_decode: jsonwebtoken::DecodingKey::from_secret(jwt.as_ref())
                .expect("non-empty HMAC key"),
            intra: key("gristmill/intra/v1"),
            redirect: key("gristmill/redirect/v1"),
            s3: key("gristmill/s3/v1"),
            pepper: key("gristmill/password/v1"),
            redirect_ttl: DEFAULT_REDIRECT_TTL,
        }
    }

    // ---- passwords and S3 secrets ----

    fn pbkdf2(password: &str, salt: &[u8], rounds: u32) -> [u8; 32] {
        let mut out = [0u8; 32];
        let rounds = std::num::NonZeroU32::new(rounds.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
        aws_lc_rs::pbkdf2::derive(
            aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA256,
            rounds,
            salt,
            password.as_bytes(),
            &mut out,
        );
        out
    }

    /// A verifier for `password`.
    pub fn hash_password(&self, password: &str) -> PasswordHash {
        let salt = random(16);
        let derived = Self::pbkdf2(password, &salt, PBKDF2_ROUNDS);
        PasswordHash {
            salt: hex::encode(&salt),
            iterations: PBKDF2_ROUNDS,
            hash: hex::encode(hmac::sign(&self.pepper, &derived).as_ref()),
        }
    }

    /// Whether `password` matches the verifier (constant-time comparison).
    pub fn verify_password(&self, password: &str, stored: &PasswordHash) -> bool {
        let (Ok(salt), Ok(hash)) = (hex::decode(&stored.salt), hex::decode(&stored.hash)) else {
            return false;
        };
        if stored.iterations == 0 || stored.iterations > 10_000_000 {
            return false;
        }
        let derived = Self::pbkdf2(password, &salt, stored.iterations);
        hmac::verify(&self.pepper, &derived, &hash).is_ok()
    }

    /// A new S3 access key (the secret is [`Keys::s3_secret`] of it).
    pub fn new_s3_key(&self) -> S3Key {
        S3Key {
            access_key: generate_access_key(),
            salt: hex::encode(random(16)),
        }
    }

    /// The S3 secret of an access key: derived, never stored.
    pub fn s3_secret(&self, key: &S3Key) -> String {
        let tag = hmac::sign(
            &self.s3,
            format!("{}\n{}", key.access_key, key.salt).as_bytes(),
        );
        B64.encode(tag.as_ref())[..40].to_owned()
    }

    // ---- tokens ----

    /// A signed token for `user`, valid for `ttl`; returns it and its expiry (epoch seconds).
    pub fn issue_token(&self, user: &User, ttl: Duration) -> Result<(String, u64), ApiError> {
        let iat = now_secs();
        let exp = iat + ttl.min(MAX_TOKEN_TTL).as_secs().max(1);
        let claims = Claims {
            sub: user.name.clone(),
            iss: ISSUER.into(),
            iat,
            exp,
            generation: user.generation,
        };
        let token = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &self.jwt_encode,
        )
        .map_err(|e| ApiError::internal(format!("signing a token: {e}")))?;
        Ok((token, exp))
    }

    /// The claims of a valid, unexpired token.
    pub fn verify_token(&self, token: &str) -> Result<Claims, Refused> {
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        v.leeway = 0;
        v.validate_aud = false;
        v.set_issuer(&[ISSUER]);
        v.set_required_spec_claims(&["exp", "sub", "iss"]);
        match jsonwebtoken::decode::<Claims>(token, &self.jwt_decode, &v) {
            Ok(data) => Ok(data.claims),
            Err(e) => {
                use jsonwebtoken::errors::ErrorKind as K;
                Err(match e.kind() {
                    K::ExpiredSignature => Refused::Expired,
                    K::InvalidSignature => Refused::BadSignature,
                    _ => Refused::Malformed,
                })
            }
        }
    }

    // ---- requests between nodes ----

    fn intra_tag(&self, node: &str, exp: u64, method: &str, path: &str) -> hmac::Tag {
        hmac::sign(
            &self.intra,
            format!("v1\n{node}\n{exp}\n{method}\n{path}").as_bytes(),
        )
    }

    /// The [`NODE_AUTH_HEADER`] value for a request from `node`.
    pub fn sign_intra(&self, node: &str, method: &str, path: &str) -> String {
        let exp = now_secs() + INTRA_TTL.as_secs();
        let tag = self.intra_tag(node, exp, method, path);
        format!("v1 {node} {exp} {}", B64.encode(tag.as_ref()))
    }

    /// The node that signed a request, if the signature holds for this method and path.
    pub fn verify_intra(&self, value: &str, method: &str, path: &str) -> Result<String, Refused> {
        let parts: Vec<&str> = value.split(' ').collect();
        let [version, node, exp, sig] = parts.as_slice() else {
            return Err(Refused::Malformed);
        };
        if *version != "v1" || node.is_empty() {
            return Err(Refused::Malformed);
        }
        let exp: u64 = exp.parse().map_err(|_| Refused::Malformed)?;
        let sig = B64.decode(sig).map_err(|_| Refused::Malformed)?;
        let now = now_secs();
        let data = format!("v1\n{node}\n{exp}\n{method}\n{path}");
        hmac::verify(&self.intra, data.as_bytes(), &sig).map_err(|_| Refused::BadSignature)?;
        if exp < now {
            return Err(Refused::Expired);
        }
        if exp > now + 2 * INTRA_TTL.as_secs() {
            return Err(Refused::Malformed);
        }
        Ok((*node).to_owned())
    }

    // ---- redirects ----

    /// What a redirect signature covers: the user, expiry and method, and its scope — one
    /// object (`<bucket uname>\n<object>`) or one path (`path\n<path>`; bucket unames hold a
    /// `/`, so the two never read alike).
    fn redirect_data(user: &str, exp: u64, method: &str, scope: &str) -> String {
        format!("v1\n{user}\n{exp}\n{method}\n{scope}")
    }

    fn object_scope(bck: &Bck, object: &str, query: &HashMap<String, String>) -> String {
        format!("{}\n{object}\n{}", bck.uname(), signed_query_text(query))
    }

    fn path_scope(path: &str, query: &HashMap<String, String>) -> String {
        format!("path\n{path}\n{}", signed_query_text(query))
    }

    /// Query parameters (`gexp=..&guser=..&gsig=..`) that let whoever holds the URL do
    /// `method` on this one object as `user`, with exactly the query parameters `query`
    /// (see [`signed_query_text`]), until the redirect TTL runs out.
    pub fn redirect_query(
        &self,
        user: &str,
        method: &str,
        bck: &Bck,
        object: &str,
        query: &HashMap<String, String>,
    ) -> String {
        self.signed_query(user, method, &Self::object_scope(bck, object, query))
    }

    /// Like [`Keys::redirect_query`], for a request on `path` (get-batch: what it reads is in
    /// its body, and the user's rights are checked again on each bucket it names).
    pub fn redirect_path_query(
        &self,
        user: &str,
        method: &str,
        path: &str,
        query: &HashMap<String, String>,
    ) -> String {
        self.signed_query(user, method, &Self::path_scope(path, query))
    }

    fn signed_query(&self, user: &str, method: &str, scope: &str) -> String {
        let exp = now_secs() + self.redirect_ttl.as_secs().max(1);
        let tag = hmac::sign(
            &self.redirect,
            Self::redirect_data(user, exp, method, scope).as_bytes(),
        );
        format!(
            "{REDIRECT_EXPIRES}={exp}&{REDIRECT_USER}={}&{REDIRECT_SIG}={}",
            percent_encoding::utf8_percent_encode(user, percent_encoding::NON_ALPHANUMERIC),
            B64.encode(tag.as_ref())
        )
    }

    /// The user a redirect was signed for, if it holds for this method, bucket and object.
    pub fn verify_redirect(
        &self,
        query: &HashMap<String, String>,
        method: &str,
        bck: &Bck,
        object: &str,
    ) -> Result<String, Refused> {
        self.verify_signed(query, method, &Self::object_scope(bck, object, query))
    }

    /// The user a path redirect ([`Keys::redirect_path_query`]) was signed for.
    pub fn verify_redirect_path(
        &self,
        query: &HashMap<String, String>,
        method: &str,
        path: &str,
    ) -> Result<String, Refused> {
        self.verify_signed(query, method, &Self::path_scope(path, query))
    }

    fn verify_signed(
        &self,
        query: &HashMap<String, String>,
        method: &str,
        scope: &str,
    ) -> Result<String, Refused> {
        let get = |k: &str| query.get(k).ok_or(Refused::Malformed);
        let exp: u64 = get(REDIRECT_EXPIRES)?
            .parse()
            .map_err(|_| Refused::Malformed)?;
        let user = get(REDIRECT_USER)?;
        let sig = B64
            .decode(get(REDIRECT_SIG)?)
            .map_err(|_| Refused::Malformed)?;
        let data = Self::redirect_data(user, exp, method, scope);
        hmac::verify(&self.redirect, data.as_bytes(), &sig).map_err(|_| Refused::WrongTarget)?;
        if exp < now_secs() {
            return Err(Refused::Expired);
        }
        Ok(user.clone())
    }
}

// ---- a client for requests between nodes ------------------------------------------------------

/// A `reqwest` client whose requests carry this node's signature when auth is on. Its
/// `get`/`put`/... take the URL as a string (the signature covers the method and the path);
/// anything else reaches the inner client unsigned through `Deref` (and is refused by peers
/// that check).
#[derive(Clone)]
pub struct IntraClient {
    inner: reqwest::Client,
    signer: Option<(Arc<Keys>, String)>,
}

impl std::fmt::Debug for IntraClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntraClient")
            .field("signed", &self.signer.is_some())
            .finish()
    }
}

impl std::ops::Deref for IntraClient {
    type Target = reqwest::Client;
    fn deref(&self) -> &reqwest::Client {
        &self.inner
    }
}

impl IntraClient {
    /// Wraps `inner`; with `keys`, every request is signed as `node`.
    pub fn new(inner: reqwest::Client, keys: Option<Arc<Keys>>, node: &str) -> Self {
        Self {
            inner,
            signer: keys.map(|k| (k, node.to_owned())),
        }
    }

    /// The inner client: requests sent through it carry no node signature (relaying a
    /// client's own request, for example).
    pub fn unsigned(&self) -> &reqwest::Client {
        &self.inner
    }

    pub fn request<U: AsRef<str>>(
        &self,
        method: reqwest::Method,
        url: U,
    ) -> reqwest::RequestBuilder {
        let url = url.as_ref();
        let rb = self.inner.request(method.clone(), url);
        match &self.signer {
            Some((keys, node)) => {
                let path = reqwest::Url::parse(url)
                    .map(|u| u.path().to_owned())
                    .unwrap_or_default();
                rb.header(
                    NODE_AUTH_HEADER,
                    keys.sign_intra(node, method.as_str(), &path),
                )
            }
            None => rb,
        }
    }

    pub fn get<U: AsRef<str>>(&self, url: U) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::GET, url)
    }
    pub fn put<U: AsRef<str>>(&self, url: U) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::PUT, url)
    }
    pub fn post<U: AsRef<str>>(&self, url: U) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::POST, url)
    }
    pub fn delete<U: AsRef<str>>(&self, url: U) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::DELETE, url)
    }
    pub fn head<U: AsRef<str>>(&self, url: U) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::HEAD, url)
    }
    pub fn patch<U: AsRef<str>>(&self, url: U) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::PATCH, url)
    }
}

// ---- route classification ---------------------------------------------------------------------

/// What an endpoint requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health checks, login).
    Public,
    /// Only other nodes of the cluster (node signature); client credentials are refused.
    Internal,
    /// Any valid user.
    Authenticated,
    /// `cluster-read` (or admin).
    ClusterRead,
    /// `GET /v1/cluster|daemon?what=`: the cluster map, node identity and job status
    /// (`smap`, `snode`, `status`, `qryxstats`) to any user (clients route by the map and
    /// wait for the jobs they start); anything else (`bmd`, ...) is cluster-read.
    ClusterQuery,
    /// `admin`.
    Admin,
    /// `/v1/objects/{bucket}/{object}`: read for GET/HEAD, write otherwise; a signed
    /// redirect stands in for the token.
    Object,
    /// A bucket's listing or properties: read access to it.
    BucketRead,
    /// A bucket action (`{"action": ...}` body): what the action needs.
    BucketAction,
    /// Get-batch (`{"in": [...]}` body): read access to every bucket it names.
    Batch,
    /// The S3 API: SigV4 with the same users, checked by the S3 front.
    S3,
}

/// One endpoint: methods (`*` = any; `GET` also covers `HEAD`, as routing does), path
/// pattern (`{name}` = one segment, `{*rest}` = the rest) and its access class.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub methods: &'static [&'static str],
    pub path: &'static str,
    pub access: Access,
}

const fn r(methods: &'static [&'static str], path: &'static str, access: Access) -> Route {
    Route {
        methods,
        path,
        access,
    }
}

const ANY: &[&str] = &["*"];
const GET: &[&str] = &["GET"];
const HEAD: &[&str] = &["HEAD"];
const PUT: &[&str] = &["PUT"];
const POST: &[&str] = &["POST"];
const DELETE: &[&str] = &["DELETE"];
const CHANGE: &[&str] = &["POST", "DELETE", "PATCH"];

/// Every endpoint of a proxy (`proxy/src/**/*.rs` routes), first match wins. Paths outside
/// `/v1/` are S3 (the proxy's S3 front).
pub const PROXY_ROUTES: &[Route] = &[
    r(ANY, "/v1/objects/{bucket}/{*object}", Access::Object),
    r(ANY, "/v1/objects/{bucket}", Access::Authenticated),
    r(ANY, "/v1/objects/{bucket}/", Access::Authenticated),
    r(GET, "/v1/buckets", Access::Authenticated),
    r(GET, "/v1/buckets/", Access::Authenticated),
    r(GET, "/v1/buckets/{bucket}", Access::BucketRead),
    r(HEAD, "/v1/buckets/{bucket}", Access::BucketRead),
    r(CHANGE, "/v1/buckets/{bucket}", Access::BucketAction),
    r(PUT, "/v1/buckets/{bucket}", Access::BucketAction),
    r(GET, "/v1/cluster", Access::ClusterQuery),
    r(PUT, "/v1/cluster", Access::Admin),
    r(GET, "/v1/etl", Access::ClusterRead),
    r(PUT, "/v1/etl", Access::Admin),
    r(GET, "/v1/etl/{name}", Access::ClusterRead),
    r(DELETE, "/v1/etl/{name}", Access::Admin),
    r(GET, "/v1/etl/{name}/logs", Access::ClusterRead),
    r(POST, "/v1/etl/{name}/{op}", Access::Admin),
    // Job status: any user (the one who started a job waits for it).
    r(GET, "/v1/jobs", Access::Authenticated),
    r(GET, "/v1/jobs/{id}", Access::Authenticated),
    r(DELETE, "/v1/jobs/{id}", Access::Admin),
    r(GET, "/v1/ml/moss", Access::Batch),
    r(GET, "/v1/ml/moss/{bucket}", Access::Batch),
    r(POST, "/v1/sort", Access::Admin),
    r(GET, "/v1/sort", Access::Authenticated),
    r(DELETE, "/v1/sort/abort", Access::Admin),
    r(GET, "/v1/daemon", Access::ClusterQuery),
    r(POST, "/v1/cluster/join", Access::Internal),
    r(POST, "/v1/cluster/keepalive", Access::Internal),
    r(PUT, "/v1/metasync", Access::Internal),
    r(POST, "/v1/vote", Access::Internal),
    r(GET, "/v1/health", Access::Public),
    r(POST, "/v1/auth/login", Access::Public),
    r(POST, "/v1/auth/token", Access::Authenticated),
    r(GET, "/v1/auth/whoami", Access::Authenticated),
    r(GET, "/v1/auth/users", Access::Admin),
    r(PUT, "/v1/auth/users/{name}", Access::Admin),
    r(DELETE, "/v1/auth/users/{name}", Access::Admin),
    r(GET, "/metrics", Access::ClusterRead),
    r(ANY, "/metrics", Access::S3),
];

/// Every endpoint of a target (`target/src/**/*.rs` routes). Paths outside `/v1/` are S3,
/// relayed to the proxy's S3 front, which checks the signature.
pub const TARGET_ROUTES: &[Route] = &[
    r(ANY, "/v1/objects/{bucket}/{*object}", Access::Object),
    r(ANY, "/v1/objects/{bucket}", Access::Authenticated),
    r(ANY, "/v1/objects/{bucket}/", Access::Authenticated),
    r(
        ANY,
        "/v1/internal/objects/{bucket}/{*object}",
        Access::Internal,
    ),
    r(PUT, "/v1/internal/placed", Access::Internal),
    r(GET, "/v1/buckets/{bucket}", Access::Internal),
    r(&["GET", "POST"], "/v1/remote/{bucket}", Access::Internal),
    r(POST, "/v1/cached/{bucket}", Access::Internal),
    r(ANY, "/v1/mpu/{bucket}/{*object}", Access::Internal),
    r(GET, "/v1/mpu/{bucket}", Access::Internal),
    r(&["GET", "POST"], "/v1/jobs", Access::Internal),
    r(DELETE, "/v1/jobs/{id}", Access::Internal),
    r(GET, "/v1/etl", Access::Internal),
    r(GET, "/v1/etl/{name}/logs", Access::Internal),
    r(PUT, "/v1/metasync", Access::Internal),
    r(POST, "/v1/vote", Access::Internal),
    r(GET, "/v1/ml/moss", Access::Batch),
    r(GET, "/v1/ml/moss/{bucket}", Access::Batch),
    r(POST, "/v1/shards/part", Access::Internal),
    r(POST, "/v1/shards/reshard/{job}/records", Access::Internal),
    r(POST, "/v1/shards/reshard/{job}/plan", Access::Internal),
    r(GET, "/v1/daemon", Access::ClusterQuery),
    r(PUT, "/v1/daemon/mountpaths", Access::Admin),
    r(GET, "/v1/health", Access::Public),
    r(GET, "/metrics", Access::ClusterRead),
];

/// Largest get-batch body the gate reads to find its buckets (the handlers' limit too).
const MAX_BATCH_BODY: usize = 64 << 20;

/// The query parameters a redirect signature covers, in one canonical text: every decoded
/// `key=value` pair, sorted, except the signature's own parameters and the two that nodes add
/// on the way (the proxy's id and a target's forward mark, which carry no privilege). Adding,
/// dropping or changing any other parameter of a signed URL breaks the signature.
pub fn signed_query_text(query: &HashMap<String, String>) -> String {
    let mut pairs: Vec<(&String, &String)> = query
        .iter()
        .filter(|(k, _)| {
            ![
                REDIRECT_EXPIRES,
                REDIRECT_USER,
                REDIRECT_SIG,
                gristmill_core::api::query::PROXY_ID,
                gristmill_core::api::query::FORWARDED,
            ]
            .contains(&k.as_str())
        })
        .collect();
    pairs.sort();
    let mut out = String::new();
    for (k, v) in pairs {
        // Percent-encoded, so no key or value can forge a separator.
        let enc = |s: &str| {
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        out.push_str(&enc(k));
        out.push('=');
        out.push_str(&enc(v));
        out.push('&');
    }
    out
}

/// Whether `path` matches a route pattern.
pub fn path_matches(pattern: &str, path: &str) -> bool {
    let mut pat = pattern.split('/');
    let mut segs = path.split('/');
    loop {
        match (pat.next(), segs.next()) {
            (None, None) => return true,
            (Some(p), Some(s)) if p.starts_with("{*") => {
                // The rest: at least one non-empty byte.
                let rest: Vec<&str> = std::iter::once(s).chain(segs).collect();
                return !rest.join("/").is_empty();
            }
            (Some(p), Some(s)) if p.starts_with('{') => {
                if s.is_empty() {
                    return false;
                }
            }
            (Some(p), Some(s)) => {
                if p != s {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

fn method_matches(methods: &[&str], method: &Method) -> bool {
    methods
        .iter()
        .any(|m| *m == "*" || *m == method.as_str() || (*m == "GET" && *method == Method::HEAD))
}

/// The access class of a request: the first matching route; outside `/v1/` S3; else
/// internal (fail closed).
pub fn classify(routes: &[Route], method: &Method, path: &str) -> Access {
    if let Some(route) = routes
        .iter()
        .find(|r| method_matches(r.methods, method) && path_matches(r.path, path))
    {
        return route.access;
    }
    if path == "/v1" || path.starts_with("/v1/") {
        Access::Internal
    } else {
        Access::S3
    }
}

// ---- the gate ----------------------------------------------------------------------------------

/// Who made a request, once the gate has checked it. Handlers find it in the request
/// extensions when auth is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Another node of this cluster.
    Node(String),
    /// A user (by token, or by a redirect signed for it).
    User(String),
}

/// The gate's configuration on one node.
pub struct Gate {
    keys: Arc<Keys>,
    routes: &'static [Route],
    metadata: Arc<dyn Fn() -> Arc<BucketMetadata> + Send + Sync>,
}

impl Gate {
    pub fn new(
        keys: Arc<Keys>,
        routes: &'static [Route],
        metadata: Arc<dyn Fn() -> Arc<BucketMetadata> + Send + Sync>,
    ) -> Self {
        Self {
            keys,
            routes,
            metadata,
        }
    }

    /// `router` with every request checked by this gate.
    pub fn protect(self, router: Router) -> Router {
        router.layer(axum::middleware::from_fn_with_state(Arc::new(self), check))
    }
}

fn deny(status: StatusCode, message: String) -> Response {
    let kind = if status == StatusCode::UNAUTHORIZED {
        ErrorKind::Unauthorized
    } else {
        ErrorKind::Forbidden
    };
    let mut resp = ApiError::new(kind, message).into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"gristmill\""),
        );
    }
    resp
}

/// Decoded query parameters (`+` is a space, as form decoding has it).
pub fn query_params(query: Option<&str>) -> HashMap<String, String> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// A path segment, percent-decoded as routing decodes it.
fn decode_segment(s: &str) -> Result<String, ApiError> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| ApiError::bad_request("path is not valid UTF-8"))
}

/// The bucket (and object name, for object paths) a request addresses.
fn target_of(
    path: &str,
    params: &HashMap<String, String>,
) -> Result<(Bck, Option<String>), ApiError> {
    let mut parts = path.splitn(5, '/'); // "", "v1", area, bucket, object
    let (_, _, _) = (parts.next(), parts.next(), parts.next());
    let bucket = decode_segment(parts.next().unwrap_or(""))?;
    let object = parts.next().map(decode_segment).transpose()?;
    let bck = Bck::from_request(
        &bucket,
        params
            .get(gristmill_core::api::query::PROVIDER)
            .map(String::as_str),
        params
            .get(gristmill_core::api::query::NAMESPACE)
            .map(String::as_str),
    )?;
    Ok((bck, object))
}

/// The destination bucket of a copy-like action: `value.tobck` or `?bck_to=`.
fn destination(msg: &ActionMsg, params: &HashMap<String, String>) -> Result<Option<Bck>, ApiError> {
    if let Some(v) = msg.value.get("tobck").filter(|v| !v.is_null()) {
        let name = v.get("name").and_then(|n| n.as_str()).unwrap_or("");
        let provider = v.get("provider").and_then(|p| p.as_str());
        let mut bck = Bck::from_request(name, provider, None)?;
        if let Some(ns) = v.get("namespace").filter(|n| !n.is_null()) {
            bck.namespace = serde_json::from_value(ns.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid tobck namespace: {e}")))?;
        }
        return Ok(Some(bck));
    }
    let Some(to) = params
        .get(gristmill_core::api::query::BCK_TO)
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    if to.contains("://") {
        return Ok(Some(Bck::parse_uri(to)?.0));
    }
    let parts: Vec<&str> = to.trim_end_matches('/').split('/').collect();
    Ok(Some(match parts.as_slice() {
        [provider, ns, name] => Bck::from_request(name, Some(provider), Some(ns))?,
        [provider, name] => Bck::from_request(name, Some(provider), None)?,
        _ => {
            return Err(ApiError::bad_request(format!(
                "invalid destination bucket {to:?}"
            )));
        }
    }))
}

/// What a bucket action needs: the bucket's own actions need write access to it; copies
/// read the source and write the destination; anything unknown needs admin.
fn action_needs(
    method: &Method,
    bck: &Bck,
    msg: &ActionMsg,
    params: &HashMap<String, String>,
) -> Result<Vec<Need>, ApiError> {
    use gristmill_core::api::action as a;
    Ok(match msg.action.as_str() {
        a::LIST => vec![Need::Read(bck.clone())],
        a::CREATE_BUCKET
        | a::DESTROY_BUCKET
        | a::ADD_REMOTE_BUCKET
        | a::SET_BPROPS
        | a::PREFETCH
        | a::EVICT_OBJECTS
        | a::EVICT_REMOTE_BUCKET => vec![Need::Write(bck.clone())],
        a::COPY_BUCKET | a::COPY_OBJECTS | a::ETL_BUCKET | a::ETL_OBJECTS => {
            let mut needs = vec![Need::Read(bck.clone())];
            match destination(msg, params)? {
                Some(to) => needs.push(Need::Write(to)),
                None => needs.push(Need::Admin),
            }
            needs
        }
        // Shards from the bucket's objects, into it or the destination.
        "archive" => vec![
            Need::Read(bck.clone()),
            Need::Write(destination(msg, params)?.unwrap_or_else(|| bck.clone())),
        ],
        _ if *method == Method::GET => vec![Need::Read(bck.clone())],
        _ => vec![Need::Admin],
    })
}

/// What a request whose needs depend on its body needs: a bucket action
/// ([`Access::BucketAction`]: the action in its JSON message) or a get-batch
/// ([`Access::Batch`]: every bucket it names). Other classes need nothing from the body.
pub fn body_needs(
    access: Access,
    method: &Method,
    path: &str,
    params: &HashMap<String, String>,
    body: &[u8],
) -> Result<Vec<Need>, ApiError> {
    match access {
        Access::BucketAction => {
            let (bck, _) = target_of(path, params)?;
            let msg: ActionMsg = if body.is_empty() {
                ActionMsg::new("")
            } else {
                serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("invalid action message: {e}")))?
            };
            action_needs(method, &bck, &msg, params)
        }
        Access::Batch => batch_needs(path, params, body),
        _ => Ok(Vec::new()),
    }
}

/// What a get-batch needs: read access to its default bucket (`/v1/ml/moss/{bucket}`) and to
/// every bucket an item names.
fn batch_needs(
    path: &str,
    params: &HashMap<String, String>,
    body: &[u8],
) -> Result<Vec<Need>, ApiError> {
    let provider = params
        .get(gristmill_core::api::query::PROVIDER)
        .map(String::as_str);
    let namespace = params
        .get(gristmill_core::api::query::NAMESPACE)
        .map(String::as_str);
    let mut buckets: Vec<Bck> = Vec::new();
    let default = match path.strip_prefix("/v1/ml/moss/") {
        Some(b) if !b.is_empty() => {
            Some(Bck::from_request(&decode_segment(b)?, provider, namespace)?)
        }
        _ => None,
    };
    if let Some(b) = &default {
        buckets.push(b.clone());
    }
    let req: gristmill_core::shards::MossReq = if body.is_empty() {
        Default::default()
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid get-batch request: {e}")))?
    };
    for item in &req.items {
        let bck = if !item.uname.is_empty() {
            let mut it = item.uname.splitn(4, '/');
            match (it.next(), it.next(), it.next(), it.next()) {
                (Some(p), Some(ns), Some(b), Some(_)) => Bck::from_request(b, Some(p), Some(ns))?,
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "invalid item uname {:?}",
                        item.uname
                    )));
                }
            }
        } else if item.bucket.is_empty() {
            match &default {
                Some(b) => b.clone(),
                None => {
                    return Err(ApiError::bad_request(format!(
                        "item {:?} names no bucket",
                        item.objname
                    )));
                }
            }
        } else {
            let p = if item.provider.is_empty() {
                provider
            } else {
                Some(item.provider.as_str())
            };
            Bck::from_request(&item.bucket, p, None)?
        };
        if !buckets.contains(&bck) {
            buckets.push(bck);
        }
    }
    if buckets.is_empty() {
        return Ok(vec![Need::Authenticated]);
    }
    Ok(buckets.into_iter().map(Need::Read).collect())
}

/// Who the caller is, from a node signature or a bearer token; `Ok(None)` = no credential.
/// The error is the refusal to send (built once per refused request: its size is no cost).
#[allow(clippy::result_large_err)]
fn identify(
    keys: &Keys,
    req: &Request,
    md: &BucketMetadata,
) -> Result<Option<(Principal, Option<User>)>, Response> {
    let path = req.uri().path();
    if let Some(v) = req.headers().get(NODE_AUTH_HEADER) {
        let v = v.to_str().unwrap_or("");
        return match keys.verify_intra(v, req.method().as_str(), path) {
            Ok(node) => Ok(Some((Principal::Node(node), None))),
            Err(why) => Err(deny(
                StatusCode::UNAUTHORIZED,
                why.message("node signature"),
            )),
        };
    }
    let Some(auth) = req.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let token = auth
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let Some(token) = token else {
        return Err(deny(
            StatusCode::UNAUTHORIZED,
            "unsupported Authorization scheme (expected Bearer <token>)".into(),
        ));
    };
    let claims = keys
        .verify_token(token)
        .map_err(|why| deny(StatusCode::UNAUTHORIZED, why.message("token")))?;
    let user = md.users.get(&claims.sub).ok_or_else(|| {
        deny(
            StatusCode::UNAUTHORIZED,
            Refused::UnknownUser.message("token"),
        )
    })?;
    if user.generation != claims.generation {
        return Err(deny(
            StatusCode::UNAUTHORIZED,
            Refused::Revoked.message("token"),
        ));
    }
    Ok(Some((
        Principal::User(user.name.clone()),
        Some(user.clone()),
    )))
}

/// The middleware: classify, identify, authorize; then the handler.
async fn check(State(gate): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let access = classify(gate.routes, &method, &path);
    match access {
        Access::Public => return next.run(req).await,
        // The S3 front verifies SigV4 against the same users; a node relaying an S3 request
        // vouches for nothing.
        Access::S3 => return next.run(req).await,
        _ => {}
    }
    let md = (gate.metadata)();
    let params = query_params(req.uri().query());
    let mut who = match identify(&gate.keys, &req, &md) {
        Ok(w) => w,
        Err(resp) => {
            audit_denied(&req, "", resp.status());
            return resp;
        }
    };

    // What the request needs (bucket-scoped classes look at the path, query and body).
    let mut req = req;
    let needs: Vec<Need> = match access {
        Access::Internal => {
            return match who {
                Some((Principal::Node(_), _)) => next.run(req).await,
                Some((Principal::User(name), _)) => {
                    audit_denied(&req, &name, StatusCode::FORBIDDEN);
                    deny(
                        StatusCode::FORBIDDEN,
                        format!(
                            "{} {path} is internal to the cluster: client credentials are not accepted",
                            method
                        ),
                    )
                }
                None => {
                    audit_denied(&req, "", StatusCode::UNAUTHORIZED);
                    deny(
                        StatusCode::UNAUTHORIZED,
                        format!("{method} {path} is internal to the cluster"),
                    )
                }
            };
        }
        Access::Authenticated => vec![Need::Authenticated],
        Access::ClusterRead => vec![Need::ClusterRead],
        Access::ClusterQuery => match params
            .get(gristmill_core::api::query::WHAT)
            .map(String::as_str)
        {
            // The map (clients route by it), a node's identity (a target's answer without
            // `what`), and job status (AIStore's SDK waits for jobs this way).
            Some("smap" | "snode" | "status" | "qryxstats") => vec![Need::Authenticated],
            None if path == "/v1/daemon" => vec![Need::Authenticated],
            _ => vec![Need::ClusterRead],
        },
        Access::Admin => vec![Need::Admin],
        Access::Object | Access::BucketRead => {
            let (bck, object) = match target_of(&path, &params) {
                Ok(t) => t,
                Err(e) => return e.into_response(),
            };
            let write = access == Access::Object && !matches!(method, Method::GET | Method::HEAD);
            // A proxy's signed redirect stands in for the token it checked.
            if who.is_none()
                && access == Access::Object
                && params.contains_key(REDIRECT_SIG)
                && let Some(object) = &object
            {
                let signed = gate
                    .keys
                    .verify_redirect(&params, method.as_str(), &bck, object);
                match redirect_principal(signed, &md) {
                    Ok(w) => who = Some(w),
                    Err(why) => {
                        audit_denied(&req, "", StatusCode::UNAUTHORIZED);
                        return deny(StatusCode::UNAUTHORIZED, why);
                    }
                }
            }
            if write {
                vec![Need::Write(bck)]
            } else {
                vec![Need::Read(bck)]
            }
        }
        Access::BucketAction | Access::Batch => {
            // A proxy's signed get-batch redirect stands in for the token it checked; the
            // user's rights on every bucket the body names are checked all the same.
            if who.is_none() && access == Access::Batch && params.contains_key(REDIRECT_SIG) {
                let signed = gate
                    .keys
                    .verify_redirect_path(&params, method.as_str(), &path);
                match redirect_principal(signed, &md) {
                    Ok(w) => who = Some(w),
                    Err(why) => {
                        audit_denied(&req, "", StatusCode::UNAUTHORIZED);
                        return deny(StatusCode::UNAUTHORIZED, why);
                    }
                }
            }
            let limit = if access == Access::Batch {
                MAX_BATCH_BODY
            } else {
                MAX_ACTION_BODY
            };
            let (parts, body) = req.into_parts();
            let bytes = match axum::body::to_bytes(body, limit).await {
                Ok(b) => b,
                Err(e) => {
                    return ApiError::new(
                        ErrorKind::PayloadTooLarge,
                        format!("request body over {limit} bytes: {e}"),
                    )
                    .into_response();
                }
            };
            let needs = match body_needs(access, &method, &path, &params, &bytes) {
                Ok(n) => n,
                Err(e) => return e.into_response(),
            };
            req = Request::from_parts(parts, Body::from(bytes));
            needs
        }
        Access::Public | Access::S3 => unreachable!("handled above"),
    };

    let (principal, user) = match who {
        None => {
            audit_denied(&req, "", StatusCode::UNAUTHORIZED);
            return deny(
                StatusCode::UNAUTHORIZED,
                "authentication required: send Authorization: Bearer <token> (grist auth login)"
                    .into(),
            );
        }
        Some(w) => w,
    };
    if let Some(user) = &user
        && let Some(missing) = needs.iter().find(|n| !user.allows(n))
    {
        audit_denied(&req, &user.name, StatusCode::FORBIDDEN);
        return deny(
            StatusCode::FORBIDDEN,
            format!("user {} lacks {missing} for {method} {path}", user.name),
        );
    }
    if !matches!(method, Method::GET | Method::HEAD)
        && let Principal::User(name) = &principal
    {
        // Changes to buckets, jobs, ETLs and users at info; object writes (the data path)
        // at debug, so auditing them is a RUST_LOG choice (`audit=debug`).
        if access == Access::Object {
            tracing::debug!(target: "audit", user = %name, %method, %path, "allowed");
        } else {
            tracing::info!(target: "audit", user = %name, %method, %path, "allowed");
        }
    }
    let redact = !matches!(principal, Principal::Node(_))
        && params
            .get(gristmill_core::api::query::WHAT)
            .is_some_and(|w| w == "bmd");
    req.extensions_mut().insert(principal);
    req.extensions_mut().insert(gate.keys.clone());
    let resp = next.run(req).await;
    if redact {
        return redact_users(resp).await;
    }
    resp
}

/// Who a verified redirect signature speaks for; the refusal (a 401's message) when it does
/// not verify or names a user that no longer exists.
fn redirect_principal(
    signed: Result<String, Refused>,
    md: &BucketMetadata,
) -> Result<(Principal, Option<User>), String> {
    match signed {
        Ok(user) if user == NODE_USER => Ok((Principal::Node(NODE_USER.into()), None)),
        Ok(user) => match md.users.get(&user) {
            Some(u) => Ok((Principal::User(user), Some(u.clone()))),
            None => Err(Refused::UnknownUser.message("redirect")),
        },
        Err(why) => Err(why.message("signed redirect")),
    }
}

fn audit_denied(req: &Request, user: &str, status: StatusCode) {
    tracing::warn!(
        target: "audit",
        user,
        method = %req.method(),
        path = %req.uri().path(),
        status = status.as_u16(),
        "denied"
    );
}

/// Drops credential verifiers from a bucket-metadata answer for anyone but a node.
async fn redact_users(resp: Response) -> Response {
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 256 << 20).await else {
        return ApiError::internal("bucket metadata too large to answer").into_response();
    };
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    if let Some(users) = v.get_mut("users").and_then(|u| u.as_object_mut()) {
        for u in users.values_mut() {
            if let Some(u) = u.as_object_mut() {
                u.remove("password");
                u.remove("s3_keys");
            }
        }
    }
    let out = serde_json::to_vec(&v).unwrap_or_default();
    let mut resp = Response::from_parts(parts, Body::from(out));
    resp.headers_mut().remove(header::CONTENT_LENGTH);
    resp
}

/// For a proxy redirecting an object request: the query parameters that let the owner accept
/// the redirected request without the token (absent when auth is off).
pub fn redirect_query_for(
    extensions: &axum::http::Extensions,
    method: &Method,
    bck: &Bck,
    object: &str,
    query: &HashMap<String, String>,
) -> Option<String> {
    let (keys, user) = signer_of(extensions)?;
    Some(keys.redirect_query(user, method.as_str(), bck, object, query))
}

/// [`redirect_query_for`] for a redirect scoped to a path (get-batch).
pub fn redirect_path_query_for(
    extensions: &axum::http::Extensions,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
) -> Option<String> {
    let (keys, user) = signer_of(extensions)?;
    Some(keys.redirect_path_query(user, method.as_str(), path, query))
}

/// The keys and the user a redirect is signed for: whoever the gate let through.
fn signer_of(extensions: &axum::http::Extensions) -> Option<(&Arc<Keys>, &str)> {
    let keys = extensions.get::<Arc<Keys>>()?;
    let user = match extensions.get::<Principal>()? {
        Principal::Node(_) => NODE_USER,
        Principal::User(name) => name.as_str(),
    };
    Some((keys, user))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gristmill_core::bucket::Provider;

    fn keys() -> Keys {
        Keys::from_secret(&[7u8; 32])
    }

    fn user(name: &str, roles: &[&str]) -> User {
        User {
            name: name.into(),
            roles: roles.iter().map(|r| r.parse().unwrap()).collect(),
            password: None,
            s3_keys: vec![],
            generation: 3,
            created: String::new(),
        }
    }

    #[test]
    fn passwords_verify_and_need_the_secret() {
        let k = keys();
        let h = k.hash_password("hunter2");
        assert!(k.verify_password("hunter2", &h));
        assert!(!k.verify_password("hunter3", &h));
        assert!(!Keys::from_secret(&[8u8; 32]).verify_password("hunter2", &h));
    }

    #[test]
    fn tokens_expire_and_do_not_cross_clusters() {
        let k = keys();
        let (t, exp) = k
            .issue_token(&user("u", &["admin"]), Duration::from_secs(60))
            .unwrap();
        assert!(exp > now_secs());
        let c = k.verify_token(&t).unwrap();
        assert_eq!((c.sub.as_str(), c.generation), ("u", 3));
        assert_eq!(
            Keys::from_secret(&[8u8; 32]).verify_token(&t).unwrap_err(),
            Refused::BadSignature
        );
        // Tampered payload: the signature no longer matches.
        let mut parts: Vec<String> = t.split('.').map(str::to_owned).collect();
        let payload = String::from_utf8(B64.decode(&parts[1]).unwrap()).unwrap();
        parts[1] = B64.encode(payload.replace("\"u\"", "\"admin\""));
        assert!(k.verify_token(&parts.join(".")).is_err());
        assert_eq!(k.verify_token("x.y.z").unwrap_err(), Refused::Malformed);
        // An expired token (signed by hand with exp in the past).
        let claims = Claims {
            sub: "u".into(),
            iss: ISSUER.into(),
            iat: 1,
            exp: now_secs() - 5,
            generation: 3,
        };
        let old = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &k.jwt_encode,
        )
        .unwrap();
        assert_eq!(k.verify_token(&old).unwrap_err(), Refused::Expired);
        // "alg": "none" is refused.
        let none = format!(
            "{}.{}.",
            B64.encode(r#"{"alg":"none","typ":"JWT"}"#),
            B64.encode(serde_json::to_vec(&claims).unwrap())
        );
        assert!(k.verify_token(&none).is_err());
    }

    #[test]
    fn intra_signatures_bind_method_and_path() {
        let k = keys();
        let v = k.sign_intra("p1", "PUT", "/v1/metasync");
        assert_eq!(k.verify_intra(&v, "PUT", "/v1/metasync").unwrap(), "p1");
        assert_eq!(
            k.verify_intra(&v, "PUT", "/v1/jobs").unwrap_err(),
            Refused::BadSignature
        );
        assert_eq!(
            k.verify_intra(&v, "GET", "/v1/metasync").unwrap_err(),
            Refused::BadSignature
        );
        assert!(
            k.verify_intra("v1 p1 1 AAAA", "PUT", "/v1/metasync")
                .is_err()
        );
        assert!(k.verify_intra("garbage", "PUT", "/").is_err());
    }

    #[test]
    fn path_redirects_bind_the_path_and_never_pass_for_an_object() {
        let k = keys();
        let none = HashMap::new();
        let q = query_params(Some(&k.redirect_path_query(
            "bob",
            "GET",
            "/v1/ml/moss",
            &none,
        )));
        assert_eq!(
            k.verify_redirect_path(&q, "GET", "/v1/ml/moss").unwrap(),
            "bob"
        );
        assert!(k.verify_redirect_path(&q, "GET", "/v1/ml/moss/b").is_err());
        assert!(k.verify_redirect_path(&q, "PUT", "/v1/ml/moss").is_err());
        let b = Bck::new("path", Provider::Ais).unwrap();
        assert!(k.verify_redirect(&q, "GET", &b, "/v1/ml/moss").is_err());
    }

    #[test]
    fn node_to_node_operations_are_internal_by_path_never_by_flag() {
        // Every internal object operation has its own route, classified internal.
        for m in [
            Method::GET,
            Method::HEAD,
            Method::PUT,
            Method::DELETE,
            Method::POST,
        ] {
            assert_eq!(
                classify(TARGET_ROUTES, &m, "/v1/internal/objects/b/o/x"),
                Access::Internal,
                "{m}"
            );
        }
        // No user route takes a node-only flag: the handlers refuse them (400) before
        // anything else, and the gate's table names no flag at all.
        for flag in gristmill_core::api::NODE_ONLY_PARAMS {
            let keys = [String::from("provider"), flag.to_string()];
            let e = gristmill_core::api::refuse_node_only_params(keys.iter()).unwrap_err();
            assert_eq!(e.kind, ErrorKind::BadRequest, "{flag}");
        }
        let fine = [String::from("provider"), String::from("tfwd")];
        assert!(gristmill_core::api::refuse_node_only_params(fine.iter()).is_ok());
        // Every user-reachable object route stays a user route, and nothing under
        // /v1/internal/ is reachable with a user's access class.
        for r in TARGET_ROUTES.iter().chain(PROXY_ROUTES) {
            if r.path.starts_with("/v1/internal/") {
                assert_eq!(r.access, Access::Internal, "{}", r.path);
            }
        }
    }

    #[test]
    fn redirect_signatures_cover_the_whole_query() {
        let k = keys();
        let b = Bck::new("b", Provider::Ais).unwrap();
        let asked = HashMap::from([
            ("provider".to_string(), "ais".to_string()),
            ("etl_name".to_string(), "resize".to_string()),
        ]);
        let signed = k.redirect_query("alice", "GET", &b, "x", &asked);
        let url = format!("provider=ais&etl_name=resize&pid=p1&{signed}");
        let q = query_params(Some(&url));
        assert_eq!(k.verify_redirect(&q, "GET", &b, "x").unwrap(), "alice");
        // A target's forward mark may be added on the way.
        let mut fwd = q.clone();
        fwd.insert(gristmill_core::api::query::FORWARDED.into(), "7".into());
        assert_eq!(k.verify_redirect(&fwd, "GET", &b, "x").unwrap(), "alice");
        for (key, value) in [("replica", "1"), ("etl_name", "other"), ("latest", "true")] {
            let mut changed = q.clone();
            changed.insert(key.into(), value.into());
            assert_eq!(
                k.verify_redirect(&changed, "GET", &b, "x").unwrap_err(),
                Refused::WrongTarget,
                "{key}={value} added to a signed URL"
            );
        }
        let mut dropped = q.clone();
        dropped.remove("etl_name");
        assert!(k.verify_redirect(&dropped, "GET", &b, "x").is_err());
        let path = k.redirect_path_query("bob", "GET", "/v1/ml/moss", &asked);
        let mut pq = query_params(Some(&format!("provider=ais&etl_name=resize&{path}")));
        assert!(k.verify_redirect_path(&pq, "GET", "/v1/ml/moss").is_ok());
        pq.insert("etl_args".into(), "x".into());
        assert!(k.verify_redirect_path(&pq, "GET", "/v1/ml/moss").is_err());
    }

    #[test]
    fn redirects_bind_object_method_and_time() {
        let k = keys();
        let b = Bck::new("b", Provider::Ais).unwrap();
        let none = HashMap::new();
        let q = query_params(Some(
            &k.redirect_query("alice", "GET", &b, "x/y.jpg", &none),
        ));
        assert_eq!(
            k.verify_redirect(&q, "GET", &b, "x/y.jpg").unwrap(),
            "alice"
        );
        assert_eq!(
            k.verify_redirect(&q, "GET", &b, "x/z.jpg").unwrap_err(),
            Refused::WrongTarget
        );
        assert_eq!(
            k.verify_redirect(&q, "PUT", &b, "x/y.jpg").unwrap_err(),
            Refused::WrongTarget
        );
        let other = Bck::new("c", Provider::Ais).unwrap();
        assert!(k.verify_redirect(&q, "GET", &other, "x/y.jpg").is_err());
        let mut forged = q.clone();
        forged.insert(REDIRECT_USER.into(), "admin".into());
        assert!(k.verify_redirect(&forged, "GET", &b, "x/y.jpg").is_err());
        let mut later = q.clone();
        let exp: u64 = q[REDIRECT_EXPIRES].parse().unwrap();
        later.insert(REDIRECT_EXPIRES.into(), (exp + 3600).to_string());
        assert!(k.verify_redirect(&later, "GET", &b, "x/y.jpg").is_err());
        let mut short = Keys::from_secret(&[7u8; 32]);
        short.redirect_ttl = Duration::ZERO;
        // TTL 0 still signs for one second; a past expiry is refused.
        let past = HashMap::from([
            (REDIRECT_EXPIRES.to_string(), "10".to_string()),
            (REDIRECT_USER.to_string(), "alice".to_string()),
            (
                REDIRECT_SIG.to_string(),
                B64.encode(
                    hmac::sign(
                        &k.redirect,
                        Keys::redirect_data(
                            "alice",
                            10,
                            "GET",
                            &Keys::object_scope(&b, "x/y.jpg", &HashMap::new()),
                        )
                        .as_bytes(),
                    )
                    .as_ref(),
                ),
            ),
        ]);
        assert_eq!(
            short
                .verify_redirect(&past, "GET", &b, "x/y.jpg")
                .unwrap_err(),
            Refused::Expired
        );
    }

    #[test]
    fn s3_secrets_are_derived() {
        let k = keys();
        let key = k.new_s3_key();
        assert!(key.access_key.starts_with("GM") && key.access_key.len() == 20);
        assert_eq!(k.s3_secret(&key), k.s3_secret(&key));
        assert_eq!(k.s3_secret(&key).len(), 40);
        assert_ne!(
            k.s3_secret(&key),
            Keys::from_secret(&[8u8; 32]).s3_secret(&key)
        );
    }

    #[test]
    fn classification() {
        let c = |m: Method, p: &str| classify(PROXY_ROUTES, &m, p);
        assert_eq!(c(Method::GET, "/v1/objects/b/x/y"), Access::Object);
        assert_eq!(c(Method::PUT, "/v1/objects/b/x"), Access::Object);
        assert_eq!(c(Method::GET, "/v1/objects/b"), Access::Authenticated);
        assert_eq!(c(Method::HEAD, "/v1/buckets/b"), Access::BucketRead);
        assert_eq!(c(Method::POST, "/v1/buckets/b"), Access::BucketAction);
        assert_eq!(c(Method::PUT, "/v1/metasync"), Access::Internal);
        assert_eq!(c(Method::GET, "/v1/health"), Access::Public);
        assert_eq!(c(Method::HEAD, "/v1/health"), Access::Public);
        assert_eq!(c(Method::GET, "/v1/nonexistent"), Access::Internal);
        assert_eq!(c(Method::GET, "/metrics"), Access::ClusterRead);
        assert_eq!(c(Method::PUT, "/metrics"), Access::S3);
        assert_eq!(c(Method::PUT, "/bucket/key"), Access::S3);
        assert_eq!(c(Method::GET, "/"), Access::S3);
        assert_eq!(c(Method::PUT, "/v1/cluster"), Access::Admin);
        assert_eq!(c(Method::DELETE, "/v1/jobs/j1"), Access::Admin);
        let t = |m: Method, p: &str| classify(TARGET_ROUTES, &m, p);
        assert_eq!(t(Method::GET, "/v1/buckets/b"), Access::Internal);
        assert_eq!(t(Method::POST, "/v1/jobs"), Access::Internal);
        assert_eq!(t(Method::PUT, "/v1/mpu/b/o"), Access::Internal);
        assert!(!path_matches(
            "/v1/objects/{bucket}/{*object}",
            "/v1/objects/b/"
        ));
        assert!(!path_matches("/v1/etl/{name}", "/v1/etl/"));
    }

    #[test]
    fn bucket_actions() {
        let b = Bck::new("src", Provider::Ais).unwrap();
        let none = HashMap::new();
        let msg = |a: &str, v: serde_json::Value| ActionMsg {
            action: a.into(),
            name: String::new(),
            value: v,
        };
        assert_eq!(
            action_needs(
                &Method::POST,
                &b,
                &msg("create-bck", serde_json::Value::Null),
                &none
            )
            .unwrap(),
            vec![Need::Write(b.clone())]
        );
        let dst = HashMap::from([("bck_to".to_string(), "ais://dst".to_string())]);
        assert_eq!(
            action_needs(
                &Method::POST,
                &b,
                &msg("copy-bck", serde_json::json!({})),
                &dst
            )
            .unwrap(),
            vec![
                Need::Read(b.clone()),
                Need::Write(Bck::new("dst", Provider::Ais).unwrap())
            ]
        );
        assert_eq!(
            action_needs(
                &Method::POST,
                &b,
                &msg("mystery", serde_json::Value::Null),
                &none
            )
            .unwrap(),
            vec![Need::Admin]
        );
    }
}
