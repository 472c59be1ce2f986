//! The S3 front: path-style S3 at the root of the proxy's port (and on an optional dedicated
//! port). The `s3s` crate does the protocol — routing, XML, SigV4 (header, presigned, streaming
//! chunked payloads and trailers); [`ops`] maps each operation onto the cluster: bucket
//! operations onto the primary's metadata, object operations onto the owning target's native
//! API, streamed in both directions (S3 clients do not follow redirects).

mod auth;
mod chunked;
mod ops;

use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use s3s::service::{S3Service, S3ServiceBuilder};

pub use auth::S3User;

use crate::meta::Proxy;

/// Bucket names the S3 front refuses because the native API owns those paths.
pub const RESERVED_BUCKETS: &[&str] = &["v1", "metrics"];

/// Access key and secret accepted when no users are configured (auth off), so clients that
/// always sign (aws cli, s3cmd, rclone...) work against a playground out of the box.
pub const DEFAULT_ACCESS_KEY: &str = "gristmill";
pub const DEFAULT_SECRET_KEY: &str = "gristmill-secret";

/// Builds the S3 service. With `users` empty (auth off), unsigned requests and requests signed
/// with the default key are served; otherwise every request must be signed by one of `users`
/// and is checked against that user's bucket grants.
pub(crate) fn service(proxy: Arc<Proxy>, users: &[S3User]) -> Arc<S3Service> {
    let mut builder = S3ServiceBuilder::new(ops::GristS3 { proxy });
    let auth_off = users.is_empty();
    let default_user = [S3User {
        access_key: DEFAULT_ACCESS_KEY.into(),
        secret_key: DEFAULT_SECRET_KEY.into(),
        read: vec!["*".into()],
        write: vec!["*".into()],
    }];
    let users = if auth_off { &default_user[..] } else { users };
    builder.set_auth(auth::Users::new(users));
    builder.set_access(auth::Grants::new(users, auth_off));
    Arc::new(builder.build())
}

/// Axum handler that hands a request to the S3 service.
pub(crate) async fn handle(service: Arc<S3Service>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let req = http::Request::from_parts(parts, s3s::Body::http_body_unsync(body));
    match service.call(req).await {
        Ok(resp) => resp.map(axum::body::Body::new),
        Err(e) => {
            tracing::error!(error = ?e, "S3 request failed");
            (http::StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}
