//! The cluster secret, signed tokens (user logins and node credentials) and how a request's\n//! credential is checked against them ([`Keys`]).

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
use super::*;
use aws_lc_rs::hmac;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use gristmill_core::bucket::Bck;
use gristmill_core::error::ApiError;
use gristmill_core::users::{PasswordHash, S3Key, User};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

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

/// Every key derived from the cluster secret, and the lifetimes this node uses.
pub struct Keys {
    pub(crate) jwt_encode: jsonwebtoken::EncodingKey,
    pub(crate) jwt_decode: jsonwebtoken::DecodingKey,
    pub(crate) intra: hmac::Key,
    pub(crate) redirect: hmac::Key,
    s3: hmac::Key,
    pub(crate) pepper: hmac::Key,
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
    pub(crate) fn message(self, what: &str) -> String {
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

    pub(crate) fn pbkdf2(password: &str, salt: &[u8], rounds: u32) -> [u8; 32] {
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

    pub(crate) fn intra_tag(&self, node: &str, exp: u64, method: &str, path: &str) -> hmac::Tag {
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
    pub(crate) fn redirect_data(user: &str, exp: u64, method: &str, scope: &str) -> String {
        format!("v1\n{user}\n{exp}\n{method}\n{scope}")
    }

    pub(crate) fn object_scope(bck: &Bck, object: &str, query: &HashMap<String, String>) -> String {
        format!("{}\n{object}\n{}", bck.uname(), signed_query_text(query))
    }

    pub(crate) fn path_scope(path: &str, query: &HashMap<String, String>) -> String {
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

    pub(crate) fn signed_query(&self, user: &str, method: &str, scope: &str) -> String {
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

    pub(crate) fn verify_signed(
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
