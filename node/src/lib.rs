//! `gristmill-node`: what a Gristmill server process is built from, shared by proxies and
//! targets — the accept loop with its limits ([`conn`]), TLS ([`tls`]), the auth gate, tokens
//! and the signing intra-cluster client ([`auth`]), error responses, metrics and redirects
//! ([`server`]), background loops ([`worker`]), run-time settings
//! ([`settings`]) and the recent log ([`log_tail`]), S3 checksum helpers ([`s3`]), SigV4 checks with cached signing keys ([`sigv4`]), and zero-copy
//! (`sendfile`) response bodies ([`zero_copy`]).
//!
//! `gristmill-core` keeps the types, placement, wire formats and route tables; this crate does
//! the networking, so clients (the `grist` CLI, the Rust SDK) never link it.

pub mod auth;
pub mod conn;
pub mod log_tail;
pub mod metrics;
pub mod s3;
pub mod server;
pub mod settings;
pub mod sigv4;
pub mod tls;
pub mod worker;
pub mod zero_copy;
