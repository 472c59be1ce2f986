//! Blocking I/O helpers of the shard paths: positioned readers over shared data files that
//! count archive bytes read from disk, opening objects from blocking threads, reading an HTTP
//! body from a blocking thread, and the pipe that turns a blocking writer into a response
//! body.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use gristmill_core::{ApiError, Bck, ErrorKind};
use tokio::sync::{mpsc, oneshot};

use crate::store::Store;
use crate::store::meta::ObjectMeta;

/// Counter of bytes read from shard files by archive operations (index builds, member reads,
/// scans): with an index, reading a member adds the member's size and nothing more.
pub(crate) const BYTES_READ_METRIC: &str = "grist_archive_read_bytes_total";

/// Chunk of streamed member data and of pipe writes.
pub(crate) const CHUNK: usize = 256 * 1024;

pub(crate) fn count_read(n: u64) {
    if n > 0 {
        metrics::counter!(BYTES_READ_METRIC).increment(n);
    }
}

/// A byte range of a shared file, read with positioned reads (so any number of readers can
/// share one handle) and counted in [`BYTES_READ_METRIC`]. Seeks move within the range.
pub(crate) struct FileRange {
    file: Arc<File>,
    start: u64,
    pos: u64,
    end: u64,
}

impl FileRange {
    pub(crate) fn new(file: Arc<File>, start: u64, len: u64) -> Self {
        FileRange {
            file,
            start,
            pos: start,
            end: start.saturating_add(len),
        }
    }

    /// The whole file, from offset 0.
    pub(crate) fn whole(file: Arc<File>, size: u64) -> Self {
        Self::new(file, 0, size)
    }
}

impl Read for FileRange {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        if left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "data file shorter than its metadata says",
            ));
        }
        self.pos += n as u64;
        count_read(n as u64);
        Ok(n)
    }
}

impl Seek for FileRange {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let len = self.end - self.start;
        let rel = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => (self.pos - self.start).checked_add_signed(d),
            SeekFrom::End(d) => len.checked_add_signed(d),
        }
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        self.pos = self.start.saturating_add(rel);
        Ok(rel)
    }
}

/// Opens a local object from a blocking thread: index lookup, then the data file (retried if
/// an overwrite replaced the file in between).
pub(crate) fn open_local(
    store: &Store,
    bck: &Bck,
    name: &str,
) -> Result<(ObjectMeta, File), ApiError> {
    for _ in 0..3 {
        // Any mountpath: a resilver may not have moved it to its HRW mountpath yet.
        let Some((mp, meta)) = store.locate(bck, name)? else {
            break;
        };
        match File::open(mp.path.join(&meta.file)) {
            Ok(f) => return Ok((meta, f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ApiError::internal(format!("opening {bck}/{name}: {e}"))),
        }
    }
    Err(ApiError::not_found(format!("{bck}/{name} does not exist")))
}

/// A streamed HTTP body read from a blocking thread (blocks on the runtime for each chunk).
pub(crate) struct BlockingBody {
    handle: tokio::runtime::Handle,
    stream: futures::stream::BoxStream<'static, io::Result<Bytes>>,
    current: Bytes,
}

impl BlockingBody {
    /// Must be created on the runtime (it keeps the runtime's handle).
    pub(crate) fn new<S, E>(stream: S) -> Self
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: std::fmt::Display,
    {
        BlockingBody {
            handle: tokio::runtime::Handle::current(),
            stream: stream
                .map(|r| r.map_err(|e| io::Error::other(e.to_string())))
                .boxed(),
            current: Bytes::new(),
        }
    }
}

impl Read for BlockingBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.handle.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        let _ = self.current.split_to(n);
        Ok(n)
    }
}

/// The writing end of a [`pipe`]: buffers writes into chunks and hands them to the response
/// body; a write fails once the body is gone (client disconnected).
pub(crate) struct PipeWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl PipeWriter {
    fn push(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the reader went away"))
    }
}

impl Write for PipeWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.push()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.push()
    }
}

/// Tells the async side what it needs to answer (sizes, names) before the first byte.
pub(crate) struct Ready<M>(Option<oneshot::Sender<Result<M, ApiError>>>);

impl<M> Ready<M> {
    pub(crate) fn send(&mut self, m: M) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(Ok(m));
        }
    }
}

/// A stream of body chunks from a pipe.
pub(crate) type PipeStream = futures::stream::BoxStream<'static, io::Result<Bytes>>;

/// Runs `work` on a blocking thread, writing into a pipe whose chunks come out of the returned
/// stream. `work` calls [`Ready::send`] once it knows the answer is a success (say, the
/// member exists): an error before that is returned through the receiver (the response can
/// still be a clean 4xx); an error after it ends the stream with an I/O error, so the
/// response is cut off rather than silently short.
pub(crate) fn pipe<M, F>(work: F) -> (oneshot::Receiver<Result<M, ApiError>>, PipeStream)
where
    M: Send + 'static,
    F: FnOnce(&mut Ready<M>, &mut PipeWriter) -> Result<(), ApiError> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<io::Result<Bytes>>(8);
    let (ready_tx, ready_rx) = oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let mut ready = Ready(Some(ready_tx));
        let mut out = PipeWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
        };
        let result = work(&mut ready, &mut out).and_then(|()| {
            out.push()
                .map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))
        });
        if let Err(e) = result {
            match ready.0.take() {
                Some(r) => {
                    let _ = r.send(Err(e));
                }
                None => {
                    tracing::warn!(error = %e.message, "streamed response cut off");
                    let _ = tx.blocking_send(Err(io::Error::other(e.message)));
                }
            }
        }
    });
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed();
    (ready_rx, stream)
}

/// Awaits a pipe's [`Ready`]: the value, or the error the work failed with first.
pub(crate) async fn ready<M>(rx: oneshot::Receiver<Result<M, ApiError>>) -> Result<M, ApiError> {
    rx.await
        .unwrap_or_else(|_| Err(ApiError::internal("archive worker ended without an answer")))
}

/// An I/O error from a pipe or a file, as an API error.
pub(crate) fn io_err(e: io::Error) -> ApiError {
    // Errors carrying a ShardError (archive trouble seen through a reader) keep their kind.
    let shard = gristmill_shard::ShardError::from(e);
    ApiError::from(shard)
}

/// Largest member read in the same blocking-pool trip that locates it (one trip per small
/// `archpath` GET, as for small objects).
pub(crate) const INLINE_MAX: u64 = 128 * 1024;

/// Reads `len` bytes at `offset` (blocking), counted as archive bytes.
pub(crate) fn read_exact_at(file: &File, offset: u64, len: u64) -> Result<Bytes, ApiError> {
    let mut buf =
        vec![0u8; usize::try_from(len).map_err(|_| ApiError::internal("read too large"))?];
    file.read_exact_at(&mut buf, offset)
        .map_err(|e| ApiError::internal(format!("reading shard data: {e}")))?;
    count_read(len);
    Ok(Bytes::from(buf))
}

/// `len` bytes of a shared file from `start`, as a stream of chunks read on the blocking pool
/// (counted as archive bytes).
pub(crate) fn range_stream(file: Arc<File>, start: u64, len: u64) -> PipeStream {
    futures::stream::unfold((file, start, len), |(file, offset, left)| async move {
        if left == 0 {
            return None;
        }
        let want = left.min(CHUNK as u64);
        let f = file.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; want as usize];
            f.read_exact_at(&mut buf, offset).map(|()| Bytes::from(buf))
        })
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e.to_string())));
        match read {
            Ok(bytes) => {
                count_read(want);
                Some((Ok(bytes), (file, offset + want, left - want)))
            }
            Err(e) => Some((Err(e), (file, offset, 0))),
        }
    })
    .boxed()
}

/// Copies all of `src` into `dst` in large chunks; returns the bytes copied.
pub(crate) fn copy(src: &mut dyn Read, dst: &mut dyn Write) -> io::Result<u64> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        dst.write_all(&buf[..n])?;
        total += n as u64;
    }
}
