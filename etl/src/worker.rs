//! One worker process and the framed protocol spoken with it (see
//! `python/gristmill/etl_worker.py` for the frame layout).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::Log;

/// Largest result a worker may send back.
const MAX_RESULT: u64 = 2 * gristmill_core::etl::MAX_ETL_OBJECT;

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
