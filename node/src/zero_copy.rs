//! Zero-copy response bodies: the bytes of a file go from the page cache to the socket with
//! `sendfile(2)`, while hyper keeps doing HTTP/1.1 — heads, keep-alive, pipelining, errors.
//!
//! Hyper writes a response body by handing the connection's IO the body's chunks, uncopied
//! (vectored writes, forced with `http1::Builder::writev(true)`). A zero-copy body
//! ([`ZeroCopy::body`]) registers its file segment with its connection and then yields
//! *placeholder* chunks: slices of one static zero-filled region, as many bytes as the
//! segment holds. The connection's IO ([`SendfileIo`]) recognises a placeholder by its address
//! and sends the segment's next bytes with `sendfile` in its place; hyper counts them (content
//! length, progress) as if it had written them itself. A placeholder with no segment behind it
//! is an error that ends the connection: zeros are never sent in place of data.
//!
//! Only plain-HTTP connections carry a [`ZeroCopy`] (as a request extension); TLS connections
//! encrypt in user space and keep the copying path.
//!
//! `sendfile` runs on the async worker. It does not block there as long as the bytes are in
//! the page cache, which is why a handler checks [`resident`] first and streams through the
//! blocking pool otherwise.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// Size of the placeholder region (a zero-filled static: virtual memory only). A body longer
/// than this yields several placeholders.
const PLACEHOLDER_LEN: usize = 4 << 20;

static PLACEHOLDER: [u8; PLACEHOLDER_LEN] = [0; PLACEHOLDER_LEN];

/// At most this many bytes per `sendfile` call, so one call's time on the worker is bounded.
const MAX_SENDFILE: u64 = 8 << 20;

fn is_placeholder(buf: &[u8]) -> bool {
    let start = PLACEHOLDER.as_ptr() as usize;
    let at = buf.as_ptr() as usize;
    !buf.is_empty() && at >= start && at < start + PLACEHOLDER_LEN
}

/// The part of a file one body sends.
struct Segment {
    file: Arc<File>,
    offset: u64,
    left: u64,
}

#[derive(Default)]
struct Queue {
    /// Segments of bodies hyper has started polling, in the order their bytes will be written.
    segments: VecDeque<Segment>,
    /// A body was dropped before it yielded all its placeholders: which placeholder belongs to
    /// which segment is no longer known, so every later placeholder fails.
    poisoned: bool,
}

/// One plain-HTTP connection's zero-copy channel, handed to handlers as a request extension.
#[derive(Clone, Default)]
pub struct ZeroCopy(Arc<Mutex<Queue>>);

impl std::fmt::Debug for ZeroCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZeroCopy")
    }
}

impl ZeroCopy {
    /// A body of `len` bytes of `file` from `offset`, sent with `sendfile` on this request's
    /// connection. The file must not shrink while it is sent (an object's data file is never
    /// rewritten in place); if it does, the connection ends with an error, short of bytes.
    pub fn body(&self, file: Arc<File>, offset: u64, len: u64) -> Body {
        if len == 0 {
            return Body::empty();
        }
        Body::new(Placeholders {
            queue: self.clone(),
            segment: Some(Segment {
                file,
                offset,
                left: len,
            }),
            left: len,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The body hyper polls: registers its segment on the first poll, then yields placeholders.
struct Placeholders {
    queue: ZeroCopy,
    segment: Option<Segment>,
    /// Placeholder bytes not yielded yet.
    left: u64,
}

impl http_body::Body for Placeholders {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if let Some(segment) = this.segment.take() {
            this.queue.lock().segments.push_back(segment);
        }
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let n = this.left.min(PLACEHOLDER_LEN as u64) as usize;
        this.left -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&PLACEHOLDER[..n])))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0 && self.segment.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        // Registered but not all placeholders handed out: the segment left in the queue would
        // be matched with the next body's placeholders.
        if self.segment.is_none() && self.left > 0 {
            self.queue.lock().poisoned = true;
        }
    }
}

/// Whether `len` bytes of `file` from `offset` are all in the page cache (Linux `cachestat`,
/// 6.5+). `false` when unknown: the caller then reads through the blocking pool.
pub fn resident(file: &File, offset: u64, len: u64) -> bool {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        const SYS_CACHESTAT: libc::c_long = 451;
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct Stat {
            nr_cache: u64,
            nr_dirty: u64,
            nr_writeback: u64,
            nr_evicted: u64,
            nr_recently_evicted: u64,
        }
        if len == 0 {
            return true;
        }
        let page = 4096u64;
        let first = offset / page;
        let last = (offset + len - 1) / page;
        let pages = last - first + 1;
        let range = Range {
            off: first * page,
            len: pages * page,
        };
        let mut stat = Stat::default();
        // The project's only unsafe code: rustix and libc have no safe `cachestat`.
        // SAFETY: `range` and `stat` are valid, properly aligned `#[repr(C)]` values that
        // outlive the call; the kernel reads `range` and writes only `stat`; the descriptor is
        // open (borrowed from `file`). An unknown syscall number returns ENOSYS, nothing else.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                file.as_raw_fd(),
                &range as *const Range,
                &mut stat as *mut Stat,
                0u32,
            )
        };
        rc == 0 && stat.nr_cache >= pages
    }
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        let _ = (file, offset, len);
        false
    }
}

/// A plain TCP connection that sends placeholders' segments with `sendfile` and everything
/// else as written. A head followed by a placeholder goes with `MSG_MORE`, so head and first
/// bytes share packets as they would in one write.
pub(crate) struct SendfileIo {
    tcp: TcpStream,
    queue: ZeroCopy,
}

impl SendfileIo {
    pub(crate) fn new(tcp: TcpStream, queue: ZeroCopy) -> Self {
        Self { tcp, queue }
    }

    /// Sends up to `max` bytes of the current segment.
    fn poll_sendfile(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.tcp.poll_write_ready(cx))?;
            let mut queue = self.queue.lock();
            if queue.poisoned {
                return Poll::Ready(Err(io::Error::other(
                    "zero-copy body abandoned mid-way; closing the connection",
                )));
            }
            while queue.segments.front().is_some_and(|s| s.left == 0) {
                queue.segments.pop_front();
            }
            let Some(segment) = queue.segments.front_mut() else {
                return Poll::Ready(Err(io::Error::other(
                    "zero-copy placeholder with no file segment; closing the connection",
                )));
            };
            let count = (max as u64).min(segment.left).min(MAX_SENDFILE) as usize;
            let tcp = &self.tcp;
            let sent = tcp.try_io(Interest::WRITABLE, || {
                let mut offset = segment.offset;
                match rustix::fs::sendfile(tcp, &*segment.file, Some(&mut offset), count) {
                    Ok(0) => Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file ended before its zero-copy segment did",
                    )),
                    Ok(n) => Ok(n),
                    Err(e) => Err(e.into()),
                }
            });
            match sent {
                Ok(n) => {
                    segment.offset += n as u64;
                    segment.left -= n as u64;
                    return Poll::Ready(Ok(n));
                }
                // `try_io` cleared the readiness: wait for the socket again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Writes `bufs` with `MSG_MORE`: more bytes (a `sendfile`) follow at once.
    fn poll_send_more(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.tcp.poll_write_ready(cx))?;
            let tcp = &self.tcp;
            let bufs = &bufs[..bufs.len().min(1024)];
            let sent = tcp.try_io(Interest::WRITABLE, || {
                use rustix::net::{SendAncillaryBuffer, SendFlags, sendmsg};
                let flags = SendFlags::MORE | SendFlags::NOSIGNAL;
                sendmsg(tcp, bufs, &mut SendAncillaryBuffer::default(), flags).map_err(Into::into)
            });
            match sent {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncRead for SendfileIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for SendfileIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if is_placeholder(buf) {
            return self.poll_sendfile(cx, buf.len());
        }
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let Some(first) = bufs.iter().position(|b| !b.is_empty()) else {
            return Poll::Ready(Ok(0));
        };
        if is_placeholder(&bufs[first]) {
            return self.poll_sendfile(cx, bufs[first].len());
        }
        let end = bufs[first..]
            .iter()
            .position(|b| is_placeholder(b))
            .map_or(bufs.len(), |i| first + i);
        if end < bufs.len() {
            return self.poll_send_more(cx, &bufs[first..end]);
        }
        Pin::new(&mut self.tcp).poll_write_vectored(cx, &bufs[first..end])
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn placeholders_are_recognised_by_address_only() {
        assert!(is_placeholder(&PLACEHOLDER[..1]));
        assert!(is_placeholder(&PLACEHOLDER[PLACEHOLDER_LEN - 1..]));
        assert!(!is_placeholder(&PLACEHOLDER[..0]));
        let zeros = vec![0u8; 16];
        assert!(!is_placeholder(&zeros));
    }

    #[test]
    fn a_file_just_written_is_resident() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 3 * 4096 + 5]).unwrap();
        assert!(resident(&f, 0, 3 * 4096 + 5));
        assert!(resident(&f, 4095, 2));
        assert!(resident(&f, 0, 0));
    }
}
