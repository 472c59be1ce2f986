//! The accept loop behind [`crate::server::serve`]: one HTTP/1.1 connection per accepted
//! socket (TCP_NODELAY, optional TLS), with the [`Limits`] enforced before any handler runs.
//!
//! What each part defends against:
//! - connection accounting per client address and in all: one client cannot take every
//!   socket (429), nor can everyone together exhaust file descriptors (503);
//! - hyper's header limits and header read timeout: oversized or endless request heads
//!   (431) and slowloris clients that trickle a head byte by byte (closed);
//! - a gap timeout on request bodies: an upload that stops sending (408);
//! - an activity watchdog: a connection with no request running and no byte moving in
//!   either direction (a client that stopped reading) is closed;
//! - URL and total header size checks (414, 431) before routing.
//!
//! Shutdown stops accepting, lets running requests finish, and gives up after
//! [`crate::server::SHUTDOWN_GRACE`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;
use http_body::Frame;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use gristmill_core::error::{ApiError, ErrorKind};
use gristmill_core::limits::Limits;

/// How a node serves its API and reaches its peers: limits, TLS, and access control.
#[derive(Clone, Default)]
pub struct ServeOptions {
    pub limits: Limits,
    /// TLS certificate and key (reloadable); `None` = plain HTTP.
    pub tls: Option<crate::tls::TlsServer>,
    /// Keys derived from the cluster secret; `None` = auth off (no gate, unsigned requests).
    pub auth: Option<Arc<crate::auth::Keys>>,
    /// PEM bundle of the CA(s) this node trusts when it calls its peers over HTTPS (besides
    /// the system roots).
    pub peer_ca: Option<Vec<u8>>,
    /// Source address of requests to peers (the node's listen IP when it listens on a
    /// specific address, so that a partition between addresses cuts them); `None` = the
    /// system's choice.
    pub source_ip: Option<std::net::IpAddr>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("limits", &self.limits)
            .field("tls", &self.tls.is_some())
            .field("auth", &self.auth.is_some())
            .field("peer_ca", &self.peer_ca.is_some())
            .finish()
    }
}

impl ServeOptions {
    /// A client for requests to peers: trusts [`Self::peer_ca`] and signs its requests as
    /// `node` when auth is on.
    pub fn peer_client(
        &self,
        builder: reqwest::ClientBuilder,
        node: &str,
    ) -> reqwest::Result<crate::auth::IntraClient> {
        let mut builder = builder;
        if let Some(ip) = self.source_ip {
            builder = builder.local_address(ip);
        }
        if let Some(pem) = &self.peer_ca {
            for cert in reqwest::Certificate::from_pem_bundle(pem)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(crate::auth::IntraClient::new(
            builder.build()?,
            self.auth.clone(),
            node,
        ))
    }
}

/// Serves `app` on `listener` until `shutdown` fires, then drains for at most
/// [`crate::server::SHUTDOWN_GRACE`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
    opts: ServeOptions,
) -> io::Result<()> {
    let limits = Arc::new(opts.limits.clone());
    let conns = Arc::new(Conns::new(&limits));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    if limits.max_headers != gristmill_core::limits::HYPER_MAX_HEADERS {
        // (hyper's default is the same limit, parsed without a heap allocation per request)
        http.max_headers(limits.max_headers);
    }
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a connection reset before accept: back off a
                    // little instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Without TCP_NODELAY small responses stall ~40 ms behind delayed ACKs.
        let _ = tcp.set_nodelay(true);
        let slot = match conns.acquire(peer.ip()) {
            Ok(slot) => slot,
            Err(refusal) => {
                metrics::counter!("grist_limit_refusals_total", "limit" => refusal.limit)
                    .increment(1);
                tokio::spawn(refuse_socket(tcp, opts.tls.clone(), refusal));
                continue;
            }
        };
        let conn = Connection {
            app: app.clone(),
            limits: limits.clone(),
            http: http.clone(),
            peer,
            tls: opts.tls.clone(),
            watcher: graceful.watcher(),
            _slot: slot,
        };
        tokio::spawn(conn.run(tcp));
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(crate::server::SHUTDOWN_GRACE) => {
            tracing::warn!("shutdown grace period over; dropping remaining connections");
        }
    }
    Ok(())
}

/// Open connections, per client address and in all.
struct Conns {
    per_client: Mutex<HashMap<IpAddr, usize>>,
    total: AtomicUsize,
    max_per_client: usize,
    max_total: usize,
}

/// Why a connection is refused before it is served.
struct Refusal {
    status: StatusCode,
    limit: &'static str,
    message: String,
}

/// Holds one connection's place in [`Conns`] until dropped.
struct Slot {
    conns: Arc<Conns>,
    ip: IpAddr,
}

impl Conns {
    fn new(limits: &Limits) -> Self {
        Self {
            per_client: Mutex::new(HashMap::new()),
            total: AtomicUsize::new(0),
            max_per_client: limits.max_conns_per_client,
            max_total: limits.max_conns,
        }
    }

    fn acquire(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let mut per = self.per_client.lock().unwrap_or_else(|e| e.into_inner());
        if self.total.load(Ordering::Relaxed) >= self.max_total {
            return Err(Refusal {
                status: StatusCode::SERVICE_UNAVAILABLE,
                limit: "max_conns",
                message: format!(
                    "the node has {} connections open, its limit; retry later",
                    self.max_total
                ),
            });
        }
        let n = per.entry(ip).or_insert(0);
        if *n >= self.max_per_client {
            return Err(Refusal {
                status: StatusCode::TOO_MANY_REQUESTS,
                limit: "max_conns_per_client",
                message: format!(
                    "{ip} has {} connections open, the per-client limit; reuse connections or retry later",
                    self.max_per_client
                ),
            });
        }
        *n += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            conns: self.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per = self
            .conns
            .per_client
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = per.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.ip);
            }
        }
        self.conns.total.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The raw HTTP/1.1 response for a refusal, written before (or instead of) parsing a request.
fn canned_response(status: StatusCode, message: &str) -> Vec<u8> {
    let body = serde_json::to_vec(
        &ApiError::new(ErrorKind::from_status(status), message).body("", "", ""),
    )
    .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\nretry-after: 1\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Answers a refused connection with its status and closes it, without letting the client
/// hold the socket: everything is bounded by a few seconds.
async fn refuse_socket(tcp: TcpStream, tls: Option<crate::tls::TlsServer>, refusal: Refusal) {
    let response = canned_response(refusal.status, &refusal.message);
    let work = async move {
        match tls {
            Some(tls) => {
                if let Ok(stream) = tls.acceptor().accept(tcp).await {
                    write_and_close(stream, &response).await;
                }
            }
            None => write_and_close(tcp, &response).await,
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), work).await;
}

/// Reads what the client already sent (so closing does not reset the connection before it
/// sees the answer), writes `response` and closes.
async fn write_and_close<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, response: &[u8]) {
    let mut sink = [0u8; 16 << 10];
    let _ = tokio::time::timeout(Duration::from_millis(100), io.read(&mut sink)).await;
    let _ = io.write_all(response).await;
    let _ = io.shutdown().await;
}

/// One accepted connection and what serving it needs.
struct Connection {
    app: Router,
    limits: Arc<Limits>,
    http: hyper::server::conn::http1::Builder,
    peer: SocketAddr,
    tls: Option<crate::tls::TlsServer>,
    watcher: hyper_util::server::graceful::Watcher,
    _slot: Slot,
}

impl Connection {
    async fn run(self, tcp: TcpStream) {
        let Some(tls) = self.tls.clone() else {
            // Plain HTTP: bodies may be sent with sendfile (see `zero_copy`); hyper must then
            // hand body chunks to the IO uncopied (vectored writes).
            let zero_copy = crate::zero_copy::ZeroCopy::default();
            let io = crate::zero_copy::SendfileIo::new(tcp, zero_copy.clone());
            let mut conn = self;
            conn.http.writev(true);
            return conn.serve_io(io, Some(zero_copy)).await;
        };
        // The TLS handshake gets the header read timeout too, and a plain-HTTP request on a
        // TLS port gets a plain-text answer saying so instead of a handshake failure.
        let deadline = self.limits.header_read_timeout;
        let mut first = [0u8; 1];
        match tokio::time::timeout(deadline, tcp.peek(&mut first)).await {
            Ok(Ok(1)) if first[0] == 0x16 => {}
            Ok(Ok(1)) => {
                metrics::counter!("grist_limit_refusals_total", "limit" => "plain_http_on_tls")
                    .increment(1);
                let response = canned_response(
                    StatusCode::BAD_REQUEST,
                    "this port serves HTTPS only: use https://",
                );
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), write_and_close(tcp, &response))
                        .await;
                return;
            }
            _ => return,
        }
        match tokio::time::timeout(deadline, tls.acceptor().accept(tcp)).await {
            Ok(Ok(stream)) => self.serve_io(stream, None).await,
            Ok(Err(e)) => tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(peer = %self.peer, "TLS handshake timed out"),
        }
    }

    async fn serve_io<I>(self, io: I, zero_copy: Option<crate::zero_copy::ZeroCopy>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched {
            inner: io,
            activity: activity.clone(),
        });
        let Connection {
            app,
            limits,
            http,
            peer,
            watcher,
            ..
        } = self;
        let service = {
            let activity = activity.clone();
            let limits = limits.clone();
            hyper::service::service_fn(move |req: Request<Incoming>| {
                let app = app.clone();
                let limits = limits.clone();
                let busy = activity.enter();
                let zero_copy = zero_copy.clone();
                async move {
                    let _busy = busy;
                    Ok::<_, Infallible>(handle(app, &limits, peer, zero_copy, req).await)
                }
            })
        };
        let conn = watcher.watch(http.serve_connection(io, service));
        tokio::pin!(conn);
        let tick =
            (limits.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            tokio::select! {
                r = &mut conn => {
                    if let Err(e) = r {
                        tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = tokio::time::sleep(tick) => {
                    if activity.idle_for() > limits.idle_timeout {
                        metrics::counter!("grist_limit_refusals_total", "limit" => "idle_timeout")
                            .increment(1);
                        tracing::debug!(peer = %peer, "closing a stalled connection");
                        return;
                    }
                }
            }
        }
    }
}

/// One request: the head checks, then the router with the body under the gap timeout.
async fn handle(
    app: Router,
    limits: &Limits,
    peer: SocketAddr,
    zero_copy: Option<crate::zero_copy::ZeroCopy>,
    req: Request<Incoming>,
) -> Response<Body> {
    if let Some(refusal) = check_head(limits, &req) {
        metrics::counter!("grist_limit_refusals_total", "limit" => refusal.limit).increment(1);
        let mut resp =
            ApiError::new(ErrorKind::from_status(refusal.status), refusal.message).into_response();
        // The rest of this request cannot be trusted to be read sanely: end the connection.
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return resp;
    }
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(ConnectInfo(peer));
    if let Some(zero_copy) = zero_copy {
        parts.extensions.insert(zero_copy);
    }
    // A client that sent `Expect: 100-continue` holds its body back until hyper sends
    // `100 Continue`, which hyper does on the first read of the body.
    let expects_continue =
        waits_for_continue(&parts.headers) && !http_body::Body::is_end_stream(&body);
    let watch = Arc::new(BodyWatch::default());
    let body = Body::new(GapTimeout::new(
        body,
        limits.body_read_timeout,
        watch.clone(),
    ));
    let mut resp = match tower::ServiceExt::oneshot(app, Request::from_parts(parts, body)).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    };
    if watch.stalled.load(Ordering::Relaxed) {
        // Whatever the handler made of its failed body read, the cause is the client's.
        let mut resp = ApiError::new(
            ErrorKind::RequestTimeout,
            BodyStalled(limits.body_read_timeout).to_string(),
        )
        .into_response();
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return resp;
    }
    if expects_continue && !watch.read.load(Ordering::Relaxed) {
        // Answered before asking for the body: the client may send it anyway (curl after a
        // second) or not at all (botocore, which then reuses the connection). hyper would
        // read the next bytes as this body, the next request's head included, which then
        // fails its signature. Closing is the one unambiguous end (RFC 9110 §10.1.1).
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// Whether the client holds its body back until it is asked for it (`Expect: 100-continue`).
pub fn waits_for_continue(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// URL and total header size: what hyper's own limits leave to us.
fn check_head<B>(limits: &Limits, req: &Request<B>) -> Option<Refusal> {
    let url_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if url_len > limits.max_url_bytes {
        return Some(Refusal {
            status: StatusCode::URI_TOO_LONG,
            limit: "max_url_bytes",
            message: format!(
                "request URL is {url_len} bytes, over the {}-byte limit",
                limits.max_url_bytes
            ),
        });
    }
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    if header_bytes > limits.max_header_bytes {
        return Some(Refusal {
            status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            limit: "max_header_bytes",
            message: format!(
                "request headers are {header_bytes} bytes, over the {}-byte limit",
                limits.max_header_bytes
            ),
        });
    }
    None
}

/// When a connection last moved a byte, and how many requests it is running.
struct Activity {
    started: Instant,
    /// Milliseconds since `started` of the last read or write that moved bytes.
    last_ms: AtomicU64,
    busy: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// How long nothing has happened: zero while a request is running.
    fn idle_for(&self) -> Duration {
        if self.busy.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        let now = self.started.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }

    fn enter(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::Relaxed);
        self.touch();
        Busy(self.clone())
    }
}

/// A running request (its handler has not answered yet).
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A socket (plain or TLS) that records when bytes move.
struct Watched<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body that fails with 408 when the client sends nothing for `gap` while the
/// handler waits for more.
struct GapTimeout<B> {
    inner: B,
    gap: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    watch: Arc<BodyWatch>,
}

/// What became of a request body, for the response to act on.
#[derive(Default)]
struct BodyWatch {
    /// The handler asked for the body (so hyper sent `100 Continue` to a client waiting
    /// for it).
    read: AtomicBool,
    /// The gap ran out, so the response says 408 whatever the handler answered.
    stalled: AtomicBool,
}

impl<B> GapTimeout<B> {
    fn new(inner: B, gap: Duration, watch: Arc<BodyWatch>) -> Self {
        Self {
            inner,
            gap,
            timer: None,
            watch,
        }
    }
}

/// The error a stalled body ends with; handlers turn body errors into their own answers, so
/// the message says what happened.
#[derive(Debug, thiserror::Error)]
#[error("request body stalled: nothing received for {0:?} (body_read_timeout)")]
pub struct BodyStalled(Duration);

impl<B> http_body::Body for GapTimeout<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        this.watch.read.store(true, Ordering::Relaxed);
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.timer = None;
                Poll::Ready(r.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let gap = this.gap;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.watch.stalled.store(true, Ordering::Relaxed);
                        metrics::counter!("grist_limit_refusals_total", "limit" => "body_read_timeout")
                            .increment(1);
                        Poll::Ready(Some(Err(Box::new(BodyStalled(gap)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_and_total_limits() {
        let limits = Limits {
            max_conns_per_client: 2,
            max_conns: 3,
            ..Limits::default()
        };
        let conns = Arc::new(Conns::new(&limits));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = conns.acquire(a).ok().unwrap();
        let _s2 = conns.acquire(a).ok().unwrap();
        let r = conns.acquire(a).err().unwrap();
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        let _s3 = conns.acquire(b).ok().unwrap();
        let r = conns.acquire(b).err().unwrap();
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        drop(s1);
        assert!(conns.acquire(a).is_ok());
    }

    #[test]
    fn head_checks() {
        let limits = Limits {
            max_url_bytes: 32,
            max_header_bytes: 64,
            ..Limits::default()
        };
        let ok = Request::get("/v1/health").body(()).unwrap();
        assert!(check_head(&limits, &ok).is_none());
        let long = Request::get(format!("/v1/objects/b/{}", "x".repeat(40)))
            .body(())
            .unwrap();
        assert_eq!(
            check_head(&limits, &long).unwrap().status,
            StatusCode::URI_TOO_LONG
        );
        let fat = Request::get("/")
            .header("x-big", "y".repeat(100))
            .body(())
            .unwrap();
        assert_eq!(
            check_head(&limits, &fat).unwrap().status,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
    }

    #[test]
    fn canned_responses_are_http() {
        let r = canned_response(StatusCode::TOO_MANY_REQUESTS, "slow down");
        let text = String::from_utf8(r).unwrap();
        assert!(text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
        assert!(text.ends_with('}'));
        assert!(text.contains("\"status\":429"));
    }
}
