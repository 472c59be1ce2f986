//! `ht` backend: a plain HTTP origin, read-only. The bucket names the host — `host`, or
//! `host_PORT` for a port (bucket names cannot hold `:`; host names cannot hold `_`) — and the
//! object name is the path: `ht://host_8000/dir/file` → `http://host:8000/dir/file`.
//!
//! Origins on loopback, private, link-local or unspecified addresses are refused unless
//! allowed in config, so a bucket name cannot turn the cluster into a door to internal services.

use std::net::IpAddr;

use futures::StreamExt;
use gristmill_core::{ApiError, Bck};
use reqwest::header;

use super::{
    Backend, BackendConfig, BackendError, BackendErrorKind, ByteStream, PutSource, RemoteAttrs,
    RemotePage,
};

pub(super) struct HtBackend {
    client: reqwest::Client,
    allow_private: bool,
    timeout: std::time::Duration,
}

impl HtBackend {
    pub(super) fn new(c: &BackendConfig) -> Result<Self, ApiError> {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(c.timeout)
            // Redirects could lead to a private address behind our check.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ApiError::internal(format!("http client: {e}")))?;
        Ok(Self {
            client,
            allow_private: c.ht_allow_private,
            timeout: c.timeout,
        })
    }

    /// `host[:port]` of a bucket.
    fn authority(bck: &Bck) -> String {
        match bck.name.rsplit_once('_') {
            Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                format!("{host}:{port}")
            }
            _ => bck.name.clone(),
        }
    }

    /// The origin URL of an object, after checking where the host resolves to.
    async fn url(&self, bck: &Bck, obj: &str) -> Result<String, BackendError> {
        let authority = Self::authority(bck);
        let lookup = if authority.contains(':') {
            authority.clone()
        } else {
            format!("{authority}:80")
        };
        let addrs: Vec<_> = tokio::net::lookup_host(lookup.as_str())
            .await
            .map_err(|e| {
                BackendError::new(
                    BackendErrorKind::Failed,
                    format!("ht://{}: cannot resolve {authority}: {e}", bck.name),
                )
            })?
            .collect();
        if !self.allow_private
            && let Some(a) = addrs.iter().find(|a| is_private(a.ip()))
        {
            return Err(BackendError::new(
                BackendErrorKind::Forbidden,
                format!(
                    "ht://{}: {authority} resolves to the private or loopback address {}; \
                     refused (GRISTD_HT_ALLOW_PRIVATE=true allows it)",
                    bck.name,
                    a.ip()
                ),
            ));
        }
        let path: String = obj
            .split('/')
            .map(|s| {
                percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC)
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("/");
        Ok(format!("http://{authority}/{path}"))
    }

    async fn send(
        &self,
        what: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, BackendError> {
        super::send_timed(self.timeout, what, req).await
    }
}

fn attrs(resp: &reqwest::Response) -> RemoteAttrs {
    let hdr = |n: header::HeaderName| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    RemoteAttrs {
        size: resp.content_length().unwrap_or(0),
        etag: hdr(header::ETAG)
            .trim_start_matches("W/")
            .trim_matches('"')
            .to_owned(),
        version: String::new(),
        last_modified: hdr(header::LAST_MODIFIED),
        checksum: None,
    }
}

/// Loopback, private (RFC 1918, unique-local), link-local, CGNAT or unspecified.
fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
        }
    }
}

fn read_only(bck: &Bck) -> BackendError {
    BackendError::new(
        BackendErrorKind::Invalid,
        format!(
            "ht://{} is read-only: HTTP origins accept no writes",
            bck.name
        ),
    )
}

#[async_trait::async_trait]
impl Backend for HtBackend {
    async fn head_bucket(&self, bck: &Bck) -> Result<(), BackendError> {
        // Any HTTP answer from the origin means it exists (its root may well be a 404).
        let url = self.url(bck, "").await?;
        let what = format!("HEAD {url}");
        match self.send(&what, self.client.head(&url)).await {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.kind,
                    BackendErrorKind::NotFound | BackendErrorKind::Invalid
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    async fn head(&self, bck: &Bck, obj: &str) -> Result<RemoteAttrs, BackendError> {
        let url = self.url(bck, obj).await?;
        let what = format!("HEAD {url}");
        let resp = self.send(&what, self.client.head(&url)).await?;
        Ok(attrs(&resp))
    }

    async fn get(
        &self,
        bck: &Bck,
        obj: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(RemoteAttrs, ByteStream), BackendError> {
        let url = self.url(bck, obj).await?;
        let what = format!("GET {url}");
        let mut req = self.client.get(&url);
        if let Some((start, len)) = range {
            req = req.header(
                header::RANGE,
                format!("bytes={start}-{}", start + len.saturating_sub(1)),
            );
        }
        let resp = self.send(&what, req).await?;
        let attrs = attrs(&resp);
        let stream = resp.bytes_stream().map(move |r| {
            r.map_err(|e| {
                BackendError::new(
                    BackendErrorKind::Failed,
                    format!("{what}: download broke: {e}"),
                )
            })
        });
        Ok((attrs, Box::pin(stream)))
    }

    async fn put(&self, bck: &Bck, _: &str, _: PutSource) -> Result<RemoteAttrs, BackendError> {
        Err(read_only(bck))
    }

    async fn delete(&self, bck: &Bck, _: &str) -> Result<(), BackendError> {
        Err(read_only(bck))
    }

    /// Many origins ignore `Range`; objects are fetched in one piece.
    fn supports_ranges(&self) -> bool {
        false
    }

    async fn list(
        &self,
        bck: &Bck,
        _: &str,
        _: &str,
        _: usize,
    ) -> Result<RemotePage, BackendError> {
        Err(BackendError::new(
            BackendErrorKind::Invalid,
            format!("ht://{}: HTTP origins cannot be listed", bck.name),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_addresses() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "169.254.1.1",
            "::1",
            "fd00::1",
        ] {
            assert!(is_private(a.parse().unwrap()), "{a}");
        }
        for a in ["8.8.8.8", "2001:4860::8888"] {
            assert!(!is_private(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn bucket_to_authority() {
        let b = |n: &str| Bck::new(n, gristmill_core::Provider::Ht).unwrap();
        assert_eq!(HtBackend::authority(&b("example.com")), "example.com");
        assert_eq!(HtBackend::authority(&b("127.0.0.1_8000")), "127.0.0.1:8000");
    }
}
