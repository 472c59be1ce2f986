//! The one error type that crosses the wire: a kind that knows its HTTP status, and a message.

use http::StatusCode;
use serde::{Deserialize, Serialize};

/// What went wrong, in terms a client can act on. Each kind maps to one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    BadRequest,
    NotFound,
    BucketNotFound,
    AlreadyExists,
    /// Creating a bucket that exists and belongs to another user: 409.
    BucketAlreadyExists,
    Conflict,
    PreconditionFailed,
    RangeNotSatisfiable,
    PayloadTooLarge,
    Forbidden,
    Unauthorized,
    MethodNotAllowed,
    Busy,
    Unavailable,
    /// A remote backend (S3, HTTP origin) failed or could not be reached: 502.
    BadGateway,
    /// A remote backend did not answer within the configured timeout: 504.
    GatewayTimeout,
    InsufficientStorage,
    Internal,
    /// Multipart: a listed part was not uploaded, or its ETag differs.
    InvalidPart,
    /// Multipart: parts not in ascending order.
    InvalidPartOrder,
    /// A checksum the client declared does not match the data: 400.
    BadDigest,
    /// Multipart: a part other than the last is smaller than 5 MiB.
    EntityTooSmall,
    /// Multipart: unknown upload id.
    NoSuchUpload,
    /// Versioning: a well-formed version id this object does not have: 404.
    NoSuchVersion,
    /// The client stopped sending its request body: 408.
    RequestTimeout,
    /// The request URL is over the node's limit: 414.
    UriTooLong,
    /// The request headers are over the node's count or size limit: 431.
    HeadersTooLarge,
}

impl ErrorKind {
    pub fn status(self) -> StatusCode {
        use ErrorKind::*;
        match self {
            BadRequest => StatusCode::BAD_REQUEST,
            NotFound | BucketNotFound => StatusCode::NOT_FOUND,
            AlreadyExists | BucketAlreadyExists | Conflict => StatusCode::CONFLICT,
            PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            RangeNotSatisfiable => StatusCode::RANGE_NOT_SATISFIABLE,
            PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Forbidden => StatusCode::FORBIDDEN,
            Unauthorized => StatusCode::UNAUTHORIZED,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Busy => StatusCode::TOO_MANY_REQUESTS,
            Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            BadGateway => StatusCode::BAD_GATEWAY,
            GatewayTimeout => StatusCode::GATEWAY_TIMEOUT,
            InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
            Internal => StatusCode::INTERNAL_SERVER_ERROR,
            InvalidPart | InvalidPartOrder | EntityTooSmall | BadDigest => StatusCode::BAD_REQUEST,
            NoSuchUpload | NoSuchVersion => StatusCode::NOT_FOUND,
            RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            UriTooLong => StatusCode::URI_TOO_LONG,
            HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        }
    }

    /// Whether the same request may succeed if retried later.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Busy
                | ErrorKind::Unavailable
                | ErrorKind::Internal
                | ErrorKind::BadGateway
                | ErrorKind::GatewayTimeout
        )
    }

    /// Best kind for a status received from a peer.
    pub fn from_status(status: StatusCode) -> Self {
        use ErrorKind::*;
        match status.as_u16() {
            400 => BadRequest,
            401 => Unauthorized,
            403 => Forbidden,
            404 => NotFound,
            405 => MethodNotAllowed,
            408 => RequestTimeout,
            409 => Conflict,
            412 => PreconditionFailed,
            413 => PayloadTooLarge,
            414 => UriTooLong,
            416 => RangeNotSatisfiable,
            429 => Busy,
            431 => HeadersTooLarge,
            502 => BadGateway,
            503 => Unavailable,
            504 => GatewayTimeout,
            507 => InsufficientStorage,
            _ => Internal,
        }
    }
}

/// An error returned to a client: the JSON body is AIStore's error shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The JSON body sent to clients.
    pub fn body(&self, method: &str, path: &str, node: &str) -> ErrorBody {
        ErrorBody {
            message: self.message.clone(),
            method: method.to_owned(),
            url_path: path.to_owned(),
            node: node.to_owned(),
            status: self.status().as_u16(),
            tcode: self.kind,
        }
    }
}

impl ApiError {
    /// Another node's error answer, decoded once for every caller: its JSON message and kind
    /// (`tcode`) when it sent one, else the body as text and a kind from the status. `what`
    /// (when not empty) says what was being done and prefixes the message.
    pub fn from_peer(status: u16, body: &[u8], what: &str) -> ApiError {
        let (kind, message) = match serde_json::from_slice::<ErrorBody>(body) {
            Ok(b) => (b.tcode, b.message),
            Err(_) => (
                ErrorKind::from_status(
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                ),
                String::from_utf8_lossy(body).trim().to_owned(),
            ),
        };
        let message = if what.is_empty() {
            message
        } else {
            format!("{what}: {message}")
        };
        ApiError::new(kind, message)
    }
}

/// AIStore-compatible JSON error body (`{"message", "method", "url_path", "node", "status"}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub message: String,
    #[serde(default)]
    pub method: String,
    #[serde(default)]
    pub url_path: String,
    #[serde(default)]
    pub node: String,
    pub status: u16,
    /// Machine-readable kind; AIStore calls this field `tcode`.
    pub tcode: ErrorKind,
}

/// How an error goes out over HTTP: its status and the JSON body AIStore's clients decode.
/// (Only the response *type* comes from `axum-core`, a crate of HTTP types with no server in
/// it; core does no networking.)
impl axum_core::response::IntoResponse for ApiError {
    fn into_response(self) -> axum_core::response::Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), error = %self.message, "request failed");
        } else {
            tracing::debug!(status = status.as_u16(), error = %self.message, "request refused");
        }
        let body = serde_json::to_vec(&self.body("", "", "")).unwrap_or_default();
        let mut resp = axum_core::response::Response::new(axum_core::body::Body::from(body));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        if status == http::StatusCode::SERVICE_UNAVAILABLE {
            // Every 503 here is a state that passes (a map change, a node coming back):
            // clients that honour Retry-After try again instead of failing.
            resp.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_error_keeps_its_kind_and_message() {
        let sent = ApiError::new(ErrorKind::NotFound, "no such object").body("GET", "/x", "t1");
        let body = serde_json::to_vec(&sent).unwrap();
        let e = ApiError::from_peer(404, &body, "reading x");
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert_eq!(e.message, "reading x: no such object");
        // Not ours (a load balancer's page): the status decides, the text is kept.
        let e = ApiError::from_peer(503, b"upstream down\n", "");
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert_eq!(e.message, "upstream down");
    }
}
