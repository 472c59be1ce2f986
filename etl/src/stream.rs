//! Streaming an object through an ETL without holding it whole: the pieces shared by the
//! runtimes, and the `command` (per object: stdin → stdout) and `http` (a POST with a streamed
//! body, its answer streamed back) runtimes. Python workers stream over their framed protocol
//! (`worker.rs`).
//!
//! Every stream is bounded by *inactivity*, not by its length: when neither input is taken
//! nor output produced (or the client stops reading) for the ETL's timeout, it is stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::Sender;

use crate::{EtlError, Log};

/// Why a streamed object failed.
pub(crate) enum StreamError {
    /// Nothing moved for the ETL's timeout.
    Stalled,
    Failed(String),
}

/// When data last moved, in either direction.
pub(crate) struct Progress {
    base: Instant,
    last_ms: AtomicU64,
}

impl Progress {
    pub(crate) fn new() -> Self {
        Self {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn touch(&self) {
        self.last_ms
            .store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Resolves once nothing has moved for `idle`.
    pub(crate) async fn stalled(&self, idle: Duration) {
        let limit = idle.as_millis() as u64;
        loop {
            tokio::time::sleep(idle / 4).await;
            let now = self.base.elapsed().as_millis() as u64;
            if now.saturating_sub(self.last_ms.load(Ordering::Relaxed)) > limit {
                return;
            }
        }
    }
}

/// Sends one piece of the result to the client.
async fn send(
    out: &Sender<Result<Bytes, EtlError>>,
    piece: Bytes,
    progress: &Progress,
) -> Result<(), StreamError> {
    progress.touch();
    out.send(Ok(piece))
        .await
        .map_err(|_| StreamError::Failed("the client went away".into()))?;
    progress.touch();
    Ok(())
}

/// A per-object `command` ETL, streamed: the object goes to the program's stdin while its
/// stdout goes to `out`; a non-zero exit, even after all output, fails the object. A program
/// that stops reading early (closes stdin) is its own business: the rest of the input is
/// not sent.
pub(crate) async fn command<S>(
    mut child: tokio::process::Child,
    mut input: S,
    out: &Sender<Result<Bytes, EtlError>>,
    idle: Duration,
    log: &Arc<Log>,
) -> Result<(), StreamError>
where
    S: Stream<Item = std::io::Result<Bytes>> + Unpin,
{
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take().expect("piped stdout");
    // The last lines of stderr: the ETL's log, and the message of a failed exit.
    let stderr = child.stderr.take().map(|e| {
        tokio::spawn(async move {
            let mut tail = std::collections::VecDeque::new();
            let mut lines = BufReader::new(e).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tail.len() == 20 {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            tail
        })
    });
    let progress = Progress::new();
    let feed = async {
        let Some(pipe) = stdin.as_mut() else {
            return Ok(());
        };
        while let Some(chunk) = input.next().await {
            let chunk =
                chunk.map_err(|e| StreamError::Failed(format!("reading the object: {e}")))?;
            match pipe.write_all(&chunk).await {
                Ok(()) => progress.touch(),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(StreamError::Failed(format!("writing to the program: {e}"))),
            }
        }
        stdin = None; // end of input
        Ok(())
    };
    let drain = async {
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = stdout
                .read(&mut buf)
                .await
                .map_err(|e| StreamError::Failed(format!("reading the program's output: {e}")))?;
            if n == 0 {
                return Ok(());
            }
            send(out, Bytes::copy_from_slice(&buf[..n]), &progress).await?;
        }
    };
    let pumped = tokio::select! {
        r = async { tokio::try_join!(feed, drain) } => r.map(|_| ()),
        () = progress.stalled(idle) => Err(StreamError::Stalled),
    };
    if pumped.is_err() {
        let _ = child.start_kill();
    }
    let status = tokio::time::timeout(idle, child.wait()).await;
    let tail = match stderr {
        Some(t) => t.await.unwrap_or_default(),
        None => Default::default(),
    };
    let last = tail.back().cloned().unwrap_or_default();
    for line in tail {
        log.push(line);
    }
    pumped?;
    match status {
        Ok(Ok(s)) if s.success() => Ok(()),
        Ok(Ok(s)) => Err(StreamError::Failed(format!("exited with {s}: {last}"))),
        Ok(Err(e)) => Err(StreamError::Failed(e.to_string())),
        Err(_) => {
            let _ = child.kill().await;
            Err(StreamError::Stalled)
        }
    }
}

/// An `http` ETL, streamed: the object (`len` bytes, announced as the Content-Length, so
/// services that need one get it) is the body of the POST as it is read, and the answer goes
/// to `out` as it arrives.
pub(crate) async fn http<S>(
    client: &reqwest::Client,
    url: &str,
    args: &str,
    input: S,
    len: u64,
    out: &Sender<Result<Bytes, EtlError>>,
    idle: Duration,
) -> Result<(), StreamError>
where
    S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
{
    let progress = Arc::new(Progress::new());
    let p = progress.clone();
    let body = reqwest::Body::wrap_stream(input.inspect(move |_| p.touch()));
    let send_req = client
        .post(url)
        .query(&[("etl_args", args)])
        .header(reqwest::header::CONTENT_LENGTH, len)
        .body(body)
        .send();
    let resp = tokio::select! {
        r = send_req => r.map_err(|e| StreamError::Failed(format!("{url}: {e}")))?,
        () = progress.stalled(idle) => return Err(StreamError::Stalled),
    };
    let status = resp.status();
    if !status.is_success() {
        let text = tokio::time::timeout(idle, resp.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let text: String = text.chars().take(500).collect();
        return Err(StreamError::Failed(format!(
            "{url} answered {status}: {text}"
        )));
    }
    let mut pieces = resp.bytes_stream();
    loop {
        tokio::select! {
            piece = pieces.next() => match piece {
                None => return Ok(()),
                Some(Ok(b)) => send(out, b, &progress).await?,
                Some(Err(e)) => return Err(StreamError::Failed(format!("{url}: {e}"))),
            },
            () = progress.stalled(idle) => return Err(StreamError::Stalled),
        }
    }
}
