//! Signed redirects: the proxy signs the whole query of a 307 it sends, so the target can\n//! trust who the client is without asking the proxy again.

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
use axum::http::Method;
use gristmill_core::bmd::BucketMetadata;
use gristmill_core::bucket::Bck;
use gristmill_core::users::User;
use std::collections::HashMap;
use std::sync::Arc;
pub use tokens::{Keys, Refused};

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

/// Who a verified redirect signature speaks for; the refusal (a 401's message) when it does
/// not verify or names a user that no longer exists.
pub(crate) fn redirect_principal(
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
pub(crate) fn signer_of(extensions: &axum::http::Extensions) -> Option<(&Arc<Keys>, &str)> {
    let keys = extensions.get::<Arc<Keys>>()?;
    let user = match extensions.get::<Principal>()? {
        Principal::Node(_) => NODE_USER,
        Principal::User(name) => name.as_str(),
    };
    Some((keys, user))
}
