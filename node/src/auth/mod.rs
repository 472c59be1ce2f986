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
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
mod tokens;
pub use tokens::{Claims, Keys, Refused, load_or_create_secret, load_secret};

mod client;
pub use client::IntraClient;

mod routes;
pub use routes::{Access, PROXY_ROUTES, Route, TARGET_ROUTES, classify, path_matches};

mod redirects;
pub use redirects::{redirect_path_query_for, redirect_query_for, signed_query_text};

mod gate;
pub use gate::{Fresh, Gate, Principal, Refresh, body_needs, query_params};
#[cfg(test)]
#[allow(unused_imports)]
mod tests;

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

// ---- keys ------------------------------------------------------------------------------------

// ---- a client for requests between nodes ------------------------------------------------------

// ---- route classification ---------------------------------------------------------------------

// ---- the gate ----------------------------------------------------------------------------------
