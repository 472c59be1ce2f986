//! `gristmill-client`: the Rust SDK of Gristmill's native API, what `grist` (the CLI) and
//! `grist-bench` (the load generator) are built on. It depends on `gristmill-core`'s wire
//! types only (no server code, no storage engine), so it builds wherever `reqwest` does.
//!
//! ```text
//!  "http://p1:8080,http://p2:8080" ── endpoint: first proxy that accepts TCP ──▶ endpoint
//!  credentials: --token / $GRIST_TOKEN, else the token file `grist auth login` saved
//!        │                                      (Authorization: Bearer, TLS CA / insecure)
//!        ▼
//!  Client ── control calls: buckets, listing, jobs, ETL, cluster ──▶ the proxy
//!         ── GET / DELETE object ──▶ the proxy ── 307 (signed) ──▶ the owning target
//!         ── PUT object: cluster map (fetched once) ── HRW owner (urls::direct_url)
//!                         ──▶ the target directly; a 307 (map moved on) re-sends the body
//!  any refusal ── HttpError { status, message } (the node's JSON error body)
//! ```
//!
//! Modules: `client` ([`Client`], [`ClientOptions`]: typed calls), `endpoint` (failover among
//! several proxies), [`credentials`] (the token file), `urls` (bucket query, object paths,
//! HRW direct URLs), `error` ([`HttpError`]). Errors are `anyhow` with an [`HttpError`] root
//! cause where a node answered.

#![deny(missing_docs)]

mod client;
pub mod credentials;
mod endpoint;
mod error;
mod urls;

pub use client::{BucketInfo, Client, ClientOptions};
pub use error::HttpError;
pub use reqwest::{Method, Url};
pub use urls::{bucket_query, direct_url, object_path, object_url};
