//! Small pieces of node-to-node calls: internal URLs, bucket query, generation headers, a
//! peer's error body.

use axum::http::HeaderMap;
use gristmill_core::api::header as h;
use gristmill_core::{ApiError, Bck};

/// `provider` and `namespace` of a bucket, as query parameters.
pub(crate) fn bucket_query(bck: &Bck) -> [(&'static str, String); 2] {
    [
        ("provider", bck.provider.as_str().to_owned()),
        ("namespace", bck.namespace.uname()),
    ]
}

/// An object's URL on a node's internal route.
pub(crate) fn internal_url(node: &gristmill_core::Node, bck: &Bck, name: &str) -> String {
    format!(
        "{}{}/{}/{}",
        node.url(),
        gristmill_core::api::internal::OBJECTS,
        bck.name,
        gristmill_core::name::encode_path(name)
    )
}

/// The generation header of an internal answer (0 when absent).
pub(crate) fn gen_of(headers: &HeaderMap) -> u64 {
    header_u64(headers, h::GEN)
}

/// A numeric header (a generation): 0 when absent or not a number.
pub(crate) fn header_u64(headers: &HeaderMap, name: &str) -> u64 {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The error a peer answered (its JSON message when it sent one), prefixed with `what`.
pub(crate) async fn peer_error(resp: reqwest::Response, what: &str) -> ApiError {
    gristmill_node::server::peer_error(resp, what).await
}
