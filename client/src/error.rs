//! What a failed call carries: the node's status and message, as a typed root cause.

use reqwest::{Response, StatusCode};

/// A non-success answer from a node: its status and the message of its JSON error body (or
/// the body's text). Every call that reaches the cluster and is refused fails with this as
/// the root cause, so a caller can tell "already exists" or "not found" apart with
/// `err.downcast_ref::<HttpError>()`.
#[derive(Debug, Clone)]
pub struct HttpError {
    /// The HTTP status the node answered with.
    pub status: StatusCode,
    /// The node's message (`ErrorBody::message`), or the raw body when it was not JSON.
    pub message: String,
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.status)
        } else {
            write!(f, "{} ({})", self.message, self.status)
        }
    }
}

impl std::error::Error for HttpError {}

/// Passes a success response through; turns any other into an [`HttpError`].
pub(crate) async fn check(resp: Response) -> anyhow::Result<Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body = resp.bytes().await.unwrap_or_default();
    let message = serde_json::from_slice::<gristmill_core::ErrorBody>(&body)
        .map(|b| b.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
    Err(HttpError { status, message }.into())
}
