//! Python dependencies of ETLs (`dependencies: ["numpy>=1.26", ...]`, `grist etl init --deps`).
//!
//! Each distinct (interpreter, requirement list) gets one virtual environment, created with
//! `python -m venv --system-site-packages` (so what the machine's Python has stays importable)
//! and filled by that environment's pip, with the network, as the target's user, before any
//! worker starts. Workers then run the environment's `bin/python` inside the sandbox as usual.
//!
//! Environments are content-addressed (`py-<hash of interpreter and requirements>`), so ETLs
//! and nodes on one machine with the same list share one install, and a restart reuses it. An
//! environment is built under a temporary name and renamed into place only when pip succeeded:
//! a name that exists is complete. Nothing deletes them; remove the directory to reclaim space.
//!
//! Where: `GRISTD_ETL_ENV_DIR`; by default `/var/lib/gristmill/etl-envs` when workers drop to
//! another user (root only — the sandbox user must be able to read the environment, and a
//! home directory such as `/root` is private), else `$XDG_CACHE_HOME/gristmill/etl-envs` or
//! `~/.cache/gristmill/etl-envs`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::Log;
use crate::sandbox::Sandbox;

/// Longest a venv creation may take.
const VENV_TIMEOUT: Duration = Duration::from_secs(120);

/// Builds and finds the environments of one target.
#[derive(Debug, Clone)]
pub(crate) struct Installer {
    root: PathBuf,
    /// The interpreter environments are made from.
    python: String,
    sandbox: Sandbox,
    /// Longest one `pip install` may take.
    pip_timeout: Duration,
}

impl Installer {
    pub(crate) fn new(config: &crate::EtlConfig, python: String, sandbox: Sandbox) -> Self {
        let root = env_root(config, &sandbox);
        Self {
            root,
            python,
            sandbox,
            pip_timeout: config.install_timeout,
        }
    }

    /// The directory of the environment for `deps`.
    fn env_dir(&self, deps: &[String]) -> PathBuf {
        let key = format!("{}\n{}", self.python, deps.join("\n"));
        self.root
            .join(format!("py-{:016x}", gristmill_core::hrw::digest(&key)))
    }

    /// The interpreter of an environment holding `deps`, installing it first if needed. Pip's
    /// output goes to the ETL's log; the error names what failed.
    pub(crate) async fn python_for(
        &self,
        deps: &[String],
        log: &Arc<Log>,
    ) -> Result<String, String> {
        let dir = self.env_dir(deps);
        let python = dir.join("bin").join("python");
        if !python.exists() {
            self.install(&dir, deps, log).await?;
        }
        self.check_readable(&dir, &python).await?;
        Ok(python.display().to_string())
    }

    async fn install(&self, dir: &Path, deps: &[String], log: &Arc<Log>) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&self.root)
            .map_err(|e| format!("creating {}: {e}", self.root.display()))?;
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let tmp = self.root.join(format!(
            ".{name}.{}.{}",
            std::process::id(),
            crate::unique()
        ));
        let built = self.build(&tmp, deps, log).await;
        if let Err(e) = built {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        // Another node (or ETL) may have finished the same environment first: keep theirs.
        if std::fs::rename(&tmp, dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
            if !dir.join("bin").join("python").exists() {
                return Err(format!(
                    "could not move the environment into {}",
                    dir.display()
                ));
            }
        }
        log.push(format!("dependencies installed in {}", dir.display()));
        tracing::info!(env = %dir.display(), ?deps, "ETL dependencies installed");
        Ok(())
    }

    async fn build(&self, tmp: &Path, deps: &[String], log: &Arc<Log>) -> Result<(), String> {
        log.push(format!("installing dependencies: {}", deps.join(" ")));
        let mut venv = tokio::process::Command::new(&self.python);
        venv.args(["-m", "venv", "--system-site-packages"]).arg(tmp);
        run_logged(venv, VENV_TIMEOUT, log)
            .await
            .map_err(|e| format!("creating a virtual environment with {}: {e}", self.python))?;
        let mut pip = tokio::process::Command::new(tmp.join("bin").join("python"));
        pip.args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
        ])
        .args(deps);
        run_logged(pip, self.pip_timeout, log)
            .await
            .map_err(|e| format!("installing dependencies {deps:?}: {e}"))
    }

    /// Workers run as the sandbox's user: make sure it can use the environment, with a clear
    /// error instead of a worker that cannot start.
    async fn check_readable(&self, dir: &Path, python: &Path) -> Result<(), String> {
        if self.sandbox.user.is_none() {
            return Ok(());
        }
        let args = ["-c".to_owned(), "import sys".to_owned()];
        let mut cmd = self.sandbox.command(
            &python.display().to_string(),
            &args,
            1 << 30,
            &Default::default(),
        );
        cmd.stdin(Stdio::null());
        match tokio::time::timeout(VENV_TIMEOUT, cmd.output()).await {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(format!(
                "the ETL user cannot use the environment {} ({}): set GRISTD_ETL_ENV_DIR to a directory it can read",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Ok(Err(e)) => Err(format!("checking {}: {e}", dir.display())),
            Err(_) => Err(format!("checking {}: timed out", dir.display())),
        }
    }
}

/// Where environments are installed (workers read them).
pub(crate) fn env_root(config: &crate::EtlConfig, sandbox: &Sandbox) -> PathBuf {
    config
        .env_dir
        .clone()
        .unwrap_or_else(|| default_root(sandbox, &config.user_cache_dir))
}

fn default_root(sandbox: &Sandbox, user_cache_dir: &std::path::Path) -> PathBuf {
    if sandbox.user.is_some() {
        return PathBuf::from("/var/lib/gristmill/etl-envs");
    }
    user_cache_dir.join("gristmill").join("etl-envs")
}

/// Runs a command with its output lines going to the ETL log; an error carries the last line.
async fn run_logged(
    mut cmd: tokio::process::Command,
    timeout: Duration,
    log: &Arc<Log>,
) -> Result<(), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let last = Arc::new(std::sync::Mutex::new(String::new()));
    let mut readers = Vec::new();
    for out in [
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
    ]
    .into_iter()
    .flatten()
    {
        let (log, last) = (log.clone(), last.clone());
        readers.push(tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if !line.trim().is_empty() {
                    *last.lock().expect("last line lock") = line.clone();
                }
                log.push(line);
            }
        }));
    }
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => {
            let _ = child.kill().await;
            return Err(format!("timed out after {timeout:?}"));
        }
    };
    for r in readers {
        let _ = r.await;
    }
    if status.success() {
        Ok(())
    } else {
        let last = last.lock().expect("last line lock").clone();
        Err(format!("{status}: {last}"))
    }
}
