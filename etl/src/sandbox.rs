//! How ETL processes are confined. Layers, outermost first:
//! - a new, empty network namespace (`unshare --net`; without root, inside a new user
//!   namespace, `unshare --user --map-current-user --net`);
//! - `setpriv` to an unprivileged user when the target runs as root (so neither the data
//!   directories — mode 0700 — nor `/etc/shadow` are readable);
//! - Landlock, with or without root (`gristd etl-sandbox`, see [`crate::confine`]): only the
//!   system's programs and libraries and the ETL environments can be read, no TCP, no
//!   signals out; it also sets the address-space limit. Without the helper, `prlimit --as`.
//!
//! Each layer is probed once at startup and used where this machine allows it; what is
//! missing is logged, never silently assumed. Without root and without Landlock nothing keeps
//! a worker from the data, so python and command ETLs are then refused (see [`Sandbox::refusal`]).

use std::path::PathBuf;
use std::process::Stdio;

/// The confinement available on this machine.
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    /// The command prefix that puts a worker in a new, empty network namespace.
    pub network: Option<Vec<String>>,
    /// Run as this user and group (names) instead of the target's user.
    pub user: Option<(String, String)>,
    /// Enforce the memory limit with `prlimit --as` (when there is no helper).
    pub memory_limit: bool,
    /// `gristd`, to run as `gristd etl-sandbox` (Landlock) in front of every worker.
    pub landlock: Option<PathBuf>,
    /// Whether that helper also installs its seccomp filter (`--no-seccomp` otherwise: the
    /// probe found it cannot be installed here).
    pub seccomp: bool,
    /// Paths workers may read and execute, besides the system's.
    pub reads: Vec<PathBuf>,
    /// Paths no grant may contain (mountpaths, the state directory).
    pub protected: Vec<PathBuf>,
    /// Why workers that run code here cannot be confined, when they cannot.
    pub unconfined: Option<String>,
    /// The directory workers may write temporary files to (their `TMPDIR`).
    pub scratch: Option<PathBuf>,
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

/// What a successful run printed; `None` when it failed.
fn output_of(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
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
        let root = running_as_root();
        let network = if root {
            vec!["unshare", "--net", "--"]
        } else {
            vec!["unshare", "--user", "--map-current-user", "--net", "--"]
        };
        let network = works(network[0], &[&network[1..], &["true"]].concat())
            .then(|| network.into_iter().map(String::from).collect());
        let wanted = config.user.clone();
        let user = if wanted.is_empty() || !root {
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
        // The helper must work as the worker's user (after `setpriv` under root). Landlock
        // decides whether it is used; its report says whether seccomp holds too.
        let probed = config.helper.clone().and_then(|helper| {
            let path = helper.display().to_string();
            let probe = [path.as_str(), crate::confine::COMMAND, "--probe"];
            let report = match &user {
                Some((u, g)) => {
                    let (reuid, regid) = (format!("--reuid={u}"), format!("--regid={g}"));
                    let setpriv = [reuid.as_str(), regid.as_str(), "--clear-groups", "--"];
                    output_of("setpriv", &[&setpriv[..], &probe].concat())
                }
                None => output_of(probe[0], &probe[1..]),
            }?;
            let seccomp = report.lines().any(|l| l == "seccomp on");
            if !seccomp {
                tracing::warn!(report = %report.trim(), "ETL workers run without a seccomp filter");
            }
            Some((helper, seccomp))
        });
        let (landlock, seccomp) = match probed {
            Some((helper, seccomp)) => (Some(helper), seccomp),
            None => (None, false),
        };
        let unconfined = (!root && landlock.is_none()).then(|| {
            "gristd runs without root and this kernel offers no Landlock: a worker could read \
             every data directory. Run gristd as root, use a kernel with Landlock (5.13+, in \
             the `lsm=` list), or turn the sandbox off for trusted code (etl.sandbox = off)"
                .to_owned()
        });
        let s = Self {
            network,
            user,
            memory_limit,
            landlock,
            seccomp,
            reads: Vec::new(),
            protected: config.protected.clone(),
            unconfined,
            scratch: None,
        };
        if s.unconfined.is_some() {
            tracing::error!(sandbox = ?s, "ETL sandbox unavailable: python and command ETLs are refused");
        } else if s.network.is_none()
            || s.landlock.is_none()
            || !s.seccomp
            || (root && s.user.is_none())
        {
            tracing::warn!(sandbox = ?s, "ETL sandbox is partial on this machine");
        } else {
            tracing::info!(sandbox = ?s, "ETL sandbox");
        }
        s
    }

    /// Why ETLs that run code on this target must not start, if they must not.
    pub fn refusal(&self) -> Option<&str> {
        self.unconfined.as_deref()
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
        if let Some(prefix) = &self.network {
            argv.extend(prefix.iter().cloned());
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
        if let Some(helper) = &self.landlock {
            argv.extend([helper.display().to_string(), crate::confine::COMMAND.into()]);
            let system = crate::confine::system_read_paths();
            let mut writes = crate::confine::system_write_paths();
            writes.extend(self.scratch.clone());
            let mut reads: Vec<PathBuf> = self.reads.clone();
            // A command ETL's program outside the system paths: that file only, and never one
            // inside a mountpath or the state directory.
            let program_path = std::path::Path::new(program);
            if program_path.is_absolute()
                && !crate::confine::is_granted(program_path, &system)
                && !crate::confine::is_granted(program_path, &self.protected)
            {
                reads.push(program_path.to_path_buf());
            }
            for (flag, paths) in [
                ("--ro", system.iter().chain(&reads).collect::<Vec<_>>()),
                ("--rw", writes.iter().collect()),
                ("--protect", self.protected.iter().collect()),
            ] {
                for p in paths {
                    argv.extend([flag.to_owned(), p.display().to_string()]);
                }
            }
            if !self.seccomp {
                argv.push("--no-seccomp".into());
            }
            argv.extend(["--as".into(), memory_limit.to_string(), "--".into()]);
        } else if self.memory_limit {
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
            .env("OMP_NUM_THREADS", "1");
        if let Some(dir) = &self.scratch {
            // Temporary files and caches (tempfile, matplotlib) go where the sandbox lets
            // workers write.
            cmd.env("TMPDIR", dir).env("MPLCONFIGDIR", dir);
        }
        cmd.envs(env)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }
}
