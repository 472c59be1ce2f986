//! [`IntraClient`]: the one client every node-to-node call goes through; it adds this node's\n//! short-lived credential to each request.

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
use std::sync::Arc;
pub use tokens::Keys;

/// A `reqwest` client whose requests carry this node's signature when auth is on. Its
/// `get`/`put`/... take the URL as a string (the signature covers the method and the path);
/// anything else reaches the inner client unsigned through `Deref` (and is refused by peers
/// that check).
#[derive(Clone)]
pub struct IntraClient {
    pub(crate) inner: reqwest::Client,
    pub(crate) signer: Option<(Arc<Keys>, String)>,
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
        let mut rb = self.inner.request(method.clone(), url);
        // The request this one serves keeps its id across nodes.
        if let Some(id) = crate::metrics::current_request_id() {
            rb = rb.header(crate::metrics::REQUEST_ID, &*id);
        }
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
