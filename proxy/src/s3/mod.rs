//! The S3 front: path-style S3 at the root of the proxy's port (and on an optional dedicated
//! port). The `s3s` crate does the protocol — routing, XML, SigV4 (header, presigned, streaming
//! chunked payloads and trailers); [`ops`] maps each operation onto the cluster: bucket
//! operations onto the primary's metadata, object operations onto the owning target's native
//! API, streamed in both directions (S3 clients do not follow redirects).

mod auth;
mod buckets;
mod chunked;
mod common;
mod cors;
mod listing;
mod multipart;
mod object_lock;
mod objects;
mod ops;
mod public;
mod sse;
mod tagging;
mod versioning;

use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use s3s::service::{S3Service, S3ServiceBuilder};

pub use auth::S3User;

use crate::meta::Proxy;
use gristmill_core::ApiError;

/// Bucket names the S3 front refuses because the native API owns those paths.
pub const RESERVED_BUCKETS: &[&str] = &["v1", "metrics"];

/// Access key and secret accepted when no users are configured (auth off), so clients that
/// always sign (aws cli, s3cmd, rclone...) work against a playground out of the box. Defined
/// in `gristmill_core::api::s3_default` so clients can print them without this crate.
pub use gristmill_core::api::s3_default::{
    ACCESS_KEY as DEFAULT_ACCESS_KEY, SECRET_KEY as DEFAULT_SECRET_KEY,
};

/// Checks a `public` bucket-property change (native `set-bprops`): its policy must be one the
/// S3 front can keep (see `public.rs`).
pub(crate) fn check_public(public: &serde_json::Value, bucket: &str) -> Result<(), ApiError> {
    match public.get("policy").and_then(|p| p.as_str()) {
        Some(doc) if !doc.is_empty() => {
            public::policy_grants(doc, bucket).map(|_| ()).map_err(|e| {
                ApiError::bad_request(format!(
                    "invalid bucket policy: {}",
                    e.message().unwrap_or("not supported")
                ))
            })
        }
        _ => Ok(()),
    }
}

/// Builds the S3 service. With no `users` and auth off, unsigned requests and requests
/// signed with the default key are served; otherwise every request must be signed by one of
/// `users` (checked against its bucket grants) or, with auth on, by an access key of a
/// cluster user (checked against its roles).
/// The S3 front: the s3s service and the proxy whose bucket settings (CORS) it answers
/// preflights from.
pub(crate) struct Front {
    service: S3Service,
    proxy: Arc<Proxy>,
    hosts: Option<Arc<VirtualHosts>>,
}

impl Front {
    /// The bucket a request names: by its Host (virtual-hosted style) or its first path
    /// segment.
    fn bucket_named(&self, parts: &http::request::Parts) -> Option<String> {
        if let Some(hosts) = &self.hosts
            && let Some(host) = parts
                .headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
            && let Some(bucket) = hosts.bucket_of(&host.to_ascii_lowercase())
        {
            return Some(bucket.to_owned());
        }
        let first = parts.uri.path().trim_start_matches('/').split('/').next()?;
        (!first.is_empty()).then(|| first.to_owned())
    }
}

pub(crate) fn service(proxy: Arc<Proxy>, users: &[S3User], domain: Option<&str>) -> Arc<Front> {
    let mut builder = S3ServiceBuilder::new(common::GristS3 {
        proxy: proxy.clone(),
    });
    let cluster = proxy.auth.clone().map(|keys| {
        let (p, current) = (proxy.clone(), proxy.clone());
        auth::ClusterUsers {
            keys,
            metadata: Arc::new(move || p.bmd()),
            fresh: Arc::new(move || {
                let p = current.clone();
                Box::pin(async move { p.ensure_fresh().await.map_err(|e| e.message) })
            }),
        }
    });
    let auth_off = users.is_empty() && cluster.is_none();
    let default_user = [S3User {
        access_key: DEFAULT_ACCESS_KEY.into(),
        secret_key: DEFAULT_SECRET_KEY.into(),
        read: vec!["*".into()],
        write: vec!["*".into()],
    }];
    let users = if auth_off { &default_user[..] } else { users };
    let p = proxy.clone();
    let directory = auth::Directory::new(users, cluster, Arc::new(move || p.bmd()));
    let hosts = domain.map(|d| Arc::new(VirtualHosts::new(d)));
    if let Some(hosts) = &hosts {
        builder.set_host(SharedHosts(hosts.clone()));
    }
    builder.set_auth(auth::Users(directory.clone()));
    builder.set_access(auth::Grants::new(directory, auth_off));
    // XML bodies (CompleteMultipartUpload, DeleteObjects, ...) are read whole: bound them.
    let mut config = s3s::config::S3Config::default();
    config.xml_max_body_size = gristmill_core::limits::MAX_XML_BODY;
    builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        config,
    ))));
    Arc::new(Front {
        service: builder.build(),
        proxy,
        hosts,
    })
}

/// Virtual-hosted-style addressing: `bucket.DOMAIN[:port]` names the bucket; any other host
/// (an IP, `localhost`, the domain itself) is path-style.
struct VirtualHosts {
    domain: String,
}

impl VirtualHosts {
    fn new(domain: &str) -> Self {
        Self {
            domain: domain.trim_matches('.').to_ascii_lowercase(),
        }
    }

    /// The bucket a Host header names, if it is `bucket.DOMAIN`.
    fn bucket_of<'h>(&self, host: &'h str) -> Option<&'h str> {
        let name = host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        let bucket = name.strip_suffix(self.domain.as_str())?.strip_suffix('.')?;
        (!bucket.is_empty() && name.len() == bucket.len() + 1 + self.domain.len()).then_some(bucket)
    }
}

/// [`VirtualHosts`] as s3s's host parser (shared with the CORS lookup).
struct SharedHosts(Arc<VirtualHosts>);

impl s3s::host::S3Host for SharedHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> s3s::S3Result<s3s::host::VirtualHost<'a>> {
        let vh = s3s::host::VirtualHost::new(self.0.domain.as_str());
        let lower = host.to_ascii_lowercase();
        Ok(match self.0.bucket_of(&lower) {
            Some(bucket) => vh.with_bucket(bucket.to_owned()),
            None => vh,
        })
    }
}

/// Axum handler that hands a request to the S3 service.
pub(crate) async fn handle(front: Arc<Front>, req: Request) -> Response {
    let mut resp = call(&front, req).await;
    // The request's id under the name S3 clients read (boto3's ResponseMetadata.RequestId);
    // `track_requests` adds it to error documents.
    if let Some(id) = gristmill_node::metrics::current_request_id()
        && let Ok(v) = http::HeaderValue::from_str(&id)
    {
        resp.headers_mut().insert("x-amz-request-id", v);
    }
    resp
}

/// The S3 service's answer to `req`.
async fn call(front: &Front, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    sig_v2_bucket_path(&mut parts);
    let bucket = front.bucket_named(&parts);
    if parts.method == http::Method::OPTIONS {
        return cors::preflight(&front.proxy, bucket.as_deref(), &parts.headers);
    }
    // The CORS headers a browser's request is granted (computed before s3s takes it).
    let mut cors_headers = http::HeaderMap::new();
    cors::decorate(
        &front.proxy,
        bucket.as_deref(),
        &parts.method,
        &parts.headers,
        &mut cors_headers,
    );
    if let Some(refused) = presigned_expiry_out_of_range(&parts.uri) {
        return refused;
    }
    if let Some(refused) = unsupported_headers(&parts.headers) {
        return refused;
    }
    let body = if carries_xml(&parts.method, &parts.uri) {
        // Read whole (bounded) here: s3s would read it whole anyway, and its own limit
        // answers 500 for a streamed body.
        match axum::body::to_bytes(body, gristmill_core::limits::MAX_XML_BODY).await {
            Ok(bytes) => s3s::Body::from(bytes),
            Err(_) => return xml_too_large(),
        }
    } else if unframed_upload(&parts) {
        // Transfer-Encoding: chunked with no length anywhere: s3s must know the length to
        // check the payload's signature, so a small body is read here (bounded) and given one.
        match axum::body::to_bytes(body, gristmill_core::limits::MAX_UNFRAMED_PUT).await {
            Ok(bytes) => {
                parts.headers.remove(http::header::TRANSFER_ENCODING);
                parts
                    .headers
                    .insert(http::header::CONTENT_LENGTH, bytes.len().into());
                s3s::Body::from(bytes)
            }
            Err(_) => {
                return error_xml(
                    http::StatusCode::LENGTH_REQUIRED,
                    "MissingContentLength",
                    &format!(
                        "a body sent with Transfer-Encoding: chunked and no Content-Length may be at most {} bytes; send Content-Length (or aws-chunked with x-amz-decoded-content-length)",
                        gristmill_core::limits::MAX_UNFRAMED_PUT
                    ),
                );
            }
        }
    } else {
        s3s::Body::http_body_unsync(body)
    };
    let attributes = parts.method == http::Method::GET && query_has(&parts.uri, "attributes");
    let req = http::Request::from_parts(parts, body);
    let mut resp = match front.service.call(req).await {
        Ok(resp) if attributes && resp.status().is_success() => {
            bare_attributes_etag(resp.map(axum::body::Body::new)).await
        }
        Ok(resp) => resp.map(axum::body::Body::new),
        Err(e) => {
            tracing::error!(error = ?e, "S3 request failed");
            (http::StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    };
    resp.headers_mut().extend(cors_headers);
    resp
}

/// SigV2 clients (botocore's `s3` signer, s3cmd) sign a path-style bucket request as
/// `/bucket/` while sending `/bucket`; s3s signs what was sent. The path gets the slash the
/// client signed (a path-style bucket path means the same with or without it).
fn sig_v2_bucket_path(parts: &mut http::request::Parts) {
    let v2_header = parts
        .headers
        .get(http::header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes().starts_with(b"AWS "));
    let v2_query = query_has(&parts.uri, "AWSAccessKeyId") && query_has(&parts.uri, "Signature");
    let path = parts.uri.path();
    let one_segment = path.len() > 1 && !path[1..].contains('/');
    if !(v2_header || v2_query) || !one_segment {
        return;
    }
    let with_slash = match parts.uri.query() {
        Some(q) => format!("{path}/?{q}"),
        None => format!("{path}/"),
    };
    let mut uri = parts.uri.clone().into_parts();
    if let Ok(pq) = with_slash.parse() {
        uri.path_and_query = Some(pq);
        if let Ok(u) = http::Uri::from_parts(uri) {
            parts.uri = u;
        }
    }
}

/// Whether the request's query has `key` (with or without a value).
fn query_has(uri: &http::Uri, key: &str) -> bool {
    uri.query()
        .unwrap_or("")
        .split('&')
        .any(|kv| kv.split_once('=').map_or(kv, |(k, _)| k) == key)
}

/// GetObjectAttributes answers the ETag without quotes (AWS's API reference; SDKs and
/// ceph/s3-tests compare it bare), where every other answer quotes it. s3s always quotes it,
/// so the (small) document is rewritten here.
async fn bare_attributes_etag(resp: Response) -> Response {
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, gristmill_core::limits::MAX_XML_BODY).await else {
        return error_xml(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "GetObjectAttributes answer over the XML limit",
        );
    };
    let text = String::from_utf8_lossy(&bytes);
    // The quote as s3s writes it (escaped or not) around the one <ETag> of the document.
    let bare = ["&quot;", "\""]
        .iter()
        .find_map(|q| {
            let (open, close) = (format!("<ETag>{q}"), format!("{q}</ETag>"));
            let a = text.find(&open)?;
            let b = text.find(&close).filter(|b| a < *b)?;
            Some(format!(
                "{}<ETag>{}</ETag>{}",
                &text[..a],
                &text[a + open.len()..b],
                &text[b + close.len()..]
            ))
        })
        .unwrap_or_else(|| text.into_owned());
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(bare))
}

/// Whether an S3 request's body is an XML document (bucket configuration, DeleteObjects,
/// CompleteMultipartUpload, ...) rather than object data.
fn carries_xml(method: &http::Method, uri: &http::Uri) -> bool {
    let path = uri.path().trim_start_matches('/');
    let object_level = path.split_once('/').is_some_and(|(_, key)| !key.is_empty());
    let query = uri.query().unwrap_or("");
    let keys: Vec<&str> = query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| kv.split_once('=').map_or(kv, |(k, _)| k))
        .collect();
    let only = |allowed: &[&str]| {
        keys.iter().all(|k| {
            allowed.contains(k)
                || k.starts_with("X-Amz-")
                || k.starts_with("x-amz-")
                || *k == "x-id"
        })
    };
    match *method {
        // Object data: PutObject and UploadPart (and UploadPartCopy, no body).
        http::Method::PUT => !(object_level && only(&["partNumber", "uploadId"])),
        // Browser form uploads (bucket level, multipart/form-data) have their own limits.
        http::Method::POST => object_level || keys.contains(&"delete"),
        _ => false,
    }
}

/// The S3 error for an XML body over [`gristmill_core::limits::MAX_XML_BODY`].
fn xml_too_large() -> Response {
    error_xml(
        http::StatusCode::BAD_REQUEST,
        "MaxMessageLengthExceeded",
        &format!(
            "request XML is over the {}-byte limit",
            gristmill_core::limits::MAX_XML_BODY
        ),
    )
}

/// An S3 error document answered before s3s sees the request.
fn error_xml(status: http::StatusCode, code: &str, message: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message></Error>",
        message
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    );
    (
        status,
        [(http::header::CONTENT_TYPE, "application/xml")],
        body,
    )
        .into_response()
}

/// A presigned URL whose `X-Amz-Expires` is negative or over a week: S3 refuses it with 403
/// AuthorizationQueryParametersError (s3s would serve it).
fn presigned_expiry_out_of_range(uri: &http::Uri) -> Option<Response> {
    /// SigV4's longest presigned validity, seven days.
    const MAX_EXPIRES_S: i64 = 7 * 24 * 3600;
    let value = uri
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("X-Amz-Expires="))?;
    let message = match value.parse::<i64>() {
        Ok(s) if s < 0 => "X-Amz-Expires must be non-negative",
        Ok(s) if s > MAX_EXPIRES_S => {
            "X-Amz-Expires must be less than a week (in seconds) that is 604800"
        }
        Ok(_) => return None,
        Err(_) => "X-Amz-Expires should be a number",
    };
    Some(error_xml(
        http::StatusCode::FORBIDDEN,
        "AuthorizationQueryParametersError",
        message,
    ))
}

/// Requests for what this front does not do — SSE-KMS and SSE-S3, and SSE-C on copies — are
/// refused with S3's errors instead of served as if the header were not there: data the
/// client believes encrypted must not be stored in the clear. (SSE-C on PUT, GET, HEAD and
/// multipart uploads is `sse`'s; Object Lock headers are the operations' own: `object_lock`.)
fn unsupported_headers(headers: &http::HeaderMap) -> Option<Response> {
    let copy = headers.contains_key("x-amz-copy-source");
    let refused = headers.keys().any(|k| {
        let k = k.as_str();
        let customer = k.starts_with("x-amz-server-side-encryption-customer-");
        (k.starts_with("x-amz-server-side-encryption") && (!customer || copy))
            || k.starts_with("x-amz-copy-source-server-side-encryption")
    });
    if refused {
        return Some(error_xml(
            http::StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "server-side encryption other than SSE-C (SSE-KMS, SSE-S3), and SSE-C on copies, is not supported: the object would not be encrypted as asked",
        ));
    }
    None
}

/// A PUT whose body is sent with `Transfer-Encoding: chunked` and no declared length
/// (neither Content-Length nor aws-chunked's x-amz-decoded-content-length).
fn unframed_upload(parts: &http::request::Parts) -> bool {
    let h = &parts.headers;
    parts.method == http::Method::PUT
        && !h.contains_key(http::header::CONTENT_LENGTH)
        && !h.contains_key("x-amz-decoded-content-length")
        && h.get(http::header::TRANSFER_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"))
}

#[cfg(test)]
mod tests {
    use super::{VirtualHosts, carries_xml};

    #[test]
    fn virtual_hosts_name_buckets_only_under_their_domain() {
        let hosts = VirtualHosts::new("s3.example.com");
        assert_eq!(hosts.bucket_of("data.s3.example.com"), Some("data"));
        assert_eq!(hosts.bucket_of("data.s3.example.com:8080"), Some("data"));
        assert_eq!(
            hosts.bucket_of("my.dotted.bucket.s3.example.com"),
            Some("my.dotted.bucket")
        );
        assert_eq!(hosts.bucket_of("s3.example.com"), None);
        assert_eq!(hosts.bucket_of("s3.example.com:8080"), None);
        assert_eq!(hosts.bucket_of("datas3.example.com"), None);
        assert_eq!(hosts.bucket_of("localhost:8080"), None);
        assert_eq!(hosts.bucket_of("127.0.0.1:8080"), None);
    }

    #[test]
    fn xml_bodies_are_told_from_object_data() {
        let xml = |m: &str, u: &str| carries_xml(&m.parse().unwrap(), &u.parse().unwrap());
        assert!(!xml("PUT", "/b/key"));
        assert!(!xml("PUT", "/b/key?partNumber=2&uploadId=u"));
        assert!(!xml("PUT", "/b/key?x-id=PutObject"));
        assert!(xml("PUT", "/b"));
        assert!(xml("PUT", "/b?tagging"));
        assert!(xml("PUT", "/b/key?tagging"));
        assert!(xml("POST", "/b?delete"));
        assert!(xml("POST", "/b/key?uploadId=u"));
        assert!(xml("POST", "/b/key?uploads"));
        assert!(!xml("POST", "/b"));
        assert!(!xml("GET", "/b?list-type=2"));
    }
}
