//! One worker process and the framed protocol spoken with it (see
//! `python/gristmill/etl_worker.py` for the frame layout).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::Log;

/// Largest result a worker may send back.
const MAX_RESULT: u64 = 2 * gristmill_core::etl::MAX_ETL_OBJECT;

/// Largest piece of input sent per frame in streamed mode, and largest piece of result
/// accepted per frame.
const STREAM_FRAME: usize = 1 << 20;
const MAX_STREAM_FRAME: u32 = 16 << 20;

/// How a streamed object ended, when the worker is still usable.
pub(crate) enum StreamEnd {
    Done,
    /// The transform raised (its message).
    Failed(String),
}

pub(crate) struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
}

impl Worker {
    /// Starts the process, forwards its stderr to the ETL's log, and (python) sends the user's
    /// module and waits for it to load.
    pub(crate) async fn start(
        mut cmd: tokio::process::Command,
        code: Option<&str>,
        log: Arc<Log>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let mut child = cmd.spawn().map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    log.push(line);
                }
            });
        }
        let mut w = Self {
            child,
            stdin,
            stdout,
        };
        if let Some(code) = code {
            let load = async {
                w.stdin
                    .write_all(&(code.len() as u32).to_be_bytes())
                    .await?;
                w.stdin.write_all(code.as_bytes()).await?;
                w.stdin.flush().await?;
                w.read_reply().await
            };
            match tokio::time::timeout(timeout.max(Duration::from_secs(10)), load).await {
                Ok(Ok(Ok(_))) => {}
                Ok(Ok(Err(msg))) => {
                    w.kill().await;
                    return Err(msg);
                }
                Ok(Err(e)) => {
                    let status = w.kill().await;
                    return Err(format!("worker exited ({status}): {e}"));
                }
                Err(_) => {
                    w.kill().await;
                    return Err("loading the code timed out".into());
                }
            }
        }
        Ok(w)
    }

    /// One object: `Ok(Ok(result))`, `Ok(Err(message))` when the transform failed but the
    /// worker is fine, `Err` when the worker is broken (crashed, killed, garbage).
    pub(crate) async fn call(
        &mut self,
        path: &str,
        args: &str,
        data: &[u8],
    ) -> std::io::Result<Result<Bytes, String>> {
        let header = serde_json::json!({"path": path, "args": args}).to_string();
        self.stdin
            .write_all(&(header.len() as u32).to_be_bytes())
            .await?;
        self.stdin.write_all(header.as_bytes()).await?;
        self.stdin
            .write_all(&(data.len() as u64).to_be_bytes())
            .await?;
        self.stdin.write_all(data).await?;
        self.stdin.flush().await?;
        self.read_reply().await
    }

    /// One object, streamed both ways: `input` goes to the worker in frames while its result
    /// comes back through `out`, so neither side holds the whole object. `idle` bounds how long
    /// neither direction may move (a hung transform, or a client that stopped reading).
    /// `Err` when the worker is broken, timed out, or the input or the client failed — the
    /// caller kills it then, since it is mid-object.
    pub(crate) async fn call_stream<S, E>(
        &mut self,
        path: &str,
        args: &str,
        mut input: S,
        out: &tokio::sync::mpsc::Sender<Result<Bytes, E>>,
        idle: Duration,
    ) -> std::io::Result<StreamEnd>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Unpin,
    {
        let header = serde_json::json!({"path": path, "args": args, "stream": true}).to_string();
        self.stdin
            .write_all(&(header.len() as u32).to_be_bytes())
            .await?;
        self.stdin.write_all(header.as_bytes()).await?;
        let progress = crate::stream::Progress::new();
        let touch = || progress.touch();
        let (stdin, stdout) = (&mut self.stdin, &mut self.stdout);
        let feed = async {
            while let Some(chunk) = input.next().await {
                for piece in chunk?.chunks(STREAM_FRAME) {
                    stdin.write_all(&(piece.len() as u32).to_be_bytes()).await?;
                    stdin.write_all(piece).await?;
                    touch();
                }
            }
            stdin.write_all(&0u32.to_be_bytes()).await?;
            stdin.flush().await
        };
        let drain = async {
            loop {
                let kind = stdout.read_u8().await?;
                let len = stdout.read_u32().await?;
                if len > MAX_STREAM_FRAME {
                    return Err(std::io::Error::other(format!(
                        "worker sent a {len}-byte frame (limit {MAX_STREAM_FRAME})"
                    )));
                }
                let mut buf = vec![0u8; len as usize];
                stdout.read_exact(&mut buf).await?;
                touch();
                match kind {
                    0 => {
                        out.send(Ok(Bytes::from(buf)))
                            .await
                            .map_err(|_| std::io::Error::other("the client went away"))?;
                        touch();
                    }
                    1 => return Ok(StreamEnd::Done),
                    2 => {
                        return Ok(StreamEnd::Failed(
                            String::from_utf8_lossy(&buf).into_owned(),
                        ));
                    }
                    k => {
                        return Err(std::io::Error::other(format!("unknown frame kind {k}")));
                    }
                }
            }
        };
        tokio::select! {
            r = async { tokio::try_join!(feed, drain) } => r.map(|((), end)| end),
            () = progress.stalled(idle) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no progress for {idle:?}"),
            )),
        }
    }

    async fn read_reply(&mut self) -> std::io::Result<Result<Bytes, String>> {
        let status = self.stdout.read_u8().await?;
        let len = self.stdout.read_u64().await?;
        if len > MAX_RESULT {
            return Err(std::io::Error::other(format!(
                "worker announced a {len}-byte reply (limit {MAX_RESULT})"
            )));
        }
        let mut buf = vec![0u8; len as usize];
        self.stdout.read_exact(&mut buf).await?;
        Ok(match status {
            0 => Ok(Bytes::from(buf)),
            _ => Err(String::from_utf8_lossy(&buf).into_owned()),
        })
    }

    /// Kills the process and says how it ended.
    pub(crate) async fn kill(mut self) -> String {
        let _ = self.child.start_kill();
        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            _ => "did not exit".into(),
        }
    }
}
