//! How ETL processes are confined, with the stock Linux tools (util-linux): `unshare --net`
//! (no network), `setpriv` to an unprivileged user when the target runs as root (so neither
//! the data directories — mode 0700 — nor `/etc/shadow` are readable), and `prlimit --as`
//! (an address-space limit). Each layer is probed once at startup and used where this machine
//! allows it; what is missing is logged, never silently assumed.

use std::process::Stdio;

/// The confinement available on this machine.
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    /// Run in a new, empty network namespace.
    pub no_network: bool,
    /// Run as this user and group (names) instead of the target's user.
    pub user: Option<(String, String)>,
    /// Enforce the memory limit with `prlimit --as`.
    pub memory_limit: bool,
}

fn works(program: &str, args: &[&str]) -> bool {
    std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

impl Sandbox {
    /// Probes the tools. `config.user` names the user to drop to (empty = keep the target's
    /// user); `config.sandbox = false` turns confinement off (tests of the sandbox itself
    /// should not).
    pub fn probe(config: &crate::EtlConfig) -> Self {
        if !config.sandbox {
            tracing::warn!("ETL sandbox turned off (etl.sandbox = off)");
            return Self::default();
        }
        let no_network = works("unshare", &["--net", "--", "true"]);
        let wanted = config.user.clone();
        let user = if wanted.is_empty() || !running_as_root() {
            None
        } else {
            ["nogroup", "nobody", &wanted].iter().find_map(|group| {
                let (reuid, regid) = (format!("--reuid={wanted}"), format!("--regid={group}"));
                let args = [
                    reuid.as_str(),
                    regid.as_str(),
                    "--clear-groups",
                    "--",
                    "true",
                ];
                works("setpriv", &args).then(|| (wanted.clone(), group.to_string()))
            })
        };
        let memory_limit = works("prlimit", &["--as=1073741824", "--", "true"]);
        let s = Self {
            no_network,
            user,
            memory_limit,
        };
        if !(s.no_network && s.memory_limit) || (running_as_root() && s.user.is_none()) {
            tracing::warn!(sandbox = ?s, "ETL sandbox is partial on this machine");
        } else {
            tracing::info!(sandbox = ?s, "ETL sandbox");
        }
        s
    }

    /// A command running `program args` inside the sandbox, with a clean environment.
    pub fn command(
        &self,
        program: &str,
        args: &[String],
        memory_limit: u64,
        env: &std::collections::BTreeMap<String, String>,
    ) -> tokio::process::Command {
        let mut argv: Vec<String> = Vec::new();
        if self.no_network {
            argv.extend(["unshare", "--net", "--"].map(String::from));
        }
        if let Some((user, group)) = &self.user {
            argv.extend([
                "setpriv".into(),
                format!("--reuid={user}"),
                format!("--regid={group}"),
                "--clear-groups".into(),
                "--".into(),
            ]);
        }
        if self.memory_limit {
            argv.extend([
                "prlimit".into(),
                format!("--as={memory_limit}"),
                "--".into(),
            ]);
        }
        argv.push(program.to_owned());
        argv.extend(args.iter().cloned());
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("HOME", "/nonexistent")
            // One thread per worker: numeric libraries otherwise reserve memory per core.
            .env("OPENBLAS_NUM_THREADS", "1")
            .env("OMP_NUM_THREADS", "1")
            .envs(env)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }
}
