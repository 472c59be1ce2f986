//! `gristd etl-sandbox`: the last step before an ETL worker's program, confining it with what
//! the kernel offers an unprivileged process, so that workers are confined whether or not the
//! target runs as root.
//!
//! - **Landlock** (deny by default): the worker may read and execute the system's programs and
//!   libraries and the paths gristd grants (the ETL environments); nothing else on the file
//!   system — not the mountpaths, the state directory, `/etc/shadow` or `/tmp`. TCP bind and
//!   connect are refused (ABI 4+); signals and abstract unix sockets cannot reach processes
//!   outside the sandbox, gristd included (ABI 6+). Landlock also stops the worker from
//!   reading `/proc/<gristd>/…` (no ptrace rights across domains).
//! - **Seccomp**: system calls a transform never needs fail with `EPERM` — sockets other than
//!   unix ones (so UDP and raw sockets too, which Landlock does not cover and a network
//!   namespace cannot shut where user namespaces are refused), io_uring (its operations bypass
//!   seccomp), new namespaces, tracing other processes, keyrings, BPF, perf events,
//!   userfaultfd, mounts, modules and kexec. `clone3` answers `ENOSYS` (its flags cannot be
//!   inspected) so that the C library falls back to `clone`, whose namespace flags can. On
//!   x86_64 every x32-ABI call fails (`ENOSYS`), and calls of another architecture (32-bit
//!   `int 0x80`) kill the process, as seccompiler's filters do.
//! - `setsid`, and rlimits: address space (the ETL's memory limit), no core files.
//!
//! gristd runs this as a separate program (its own binary, dispatched before any runtime or
//! thread exists) so that the restriction covers the whole process, which then execs the
//! worker: Landlock domains are inherited across `exec` and cannot be lifted. The network
//! namespace (`unshare`) and the user switch under root (`setpriv`) come before it in the
//! argv `Sandbox::command` builds.
//!
//! Usage: `gristd etl-sandbox [--ro PATH]... [--rw PATH]... [--protect PATH]... [--as BYTES]
//! [--no-seccomp] -- PROGRAM [ARGS]...`, or `gristd etl-sandbox --probe` (applies an empty rule
//! set and the seccomp filter, prints what holds — `landlock full|partial|none` and `seccomp
//! on|off: why` — and exits 0 when file access is confined).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    Scope, path_beneath_rules,
};

/// The subcommand of `gristd` that runs this.
pub const COMMAND: &str = "etl-sandbox";

/// Exit status when the sandbox cannot be set up (the worker never starts).
const SETUP_FAILED: i32 = 126;

/// The Landlock ABI whose rights are handled: file system, TCP (4) and scopes (6). Older
/// kernels enforce what they know (best effort); `--probe` says what held.
const ABI_WANTED: ABI = ABI::V6;

#[derive(Debug, Default)]
struct Policy {
    probe: bool,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    protect: Vec<PathBuf>,
    address_space: Option<u64>,
    /// Leave seccomp out (the target's probe found it cannot be installed here).
    no_seccomp: bool,
    program: Vec<OsString>,
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Policy, String> {
    let mut p = Policy::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        match arg.to_str() {
            Some("--probe") => p.probe = true,
            Some("--no-seccomp") => p.no_seccomp = true,
            Some("--ro") => p.read.push(value("--ro")?.into()),
            Some("--rw") => p.write.push(value("--rw")?.into()),
            Some("--protect") => p.protect.push(value("--protect")?.into()),
            Some("--as") => {
                let v = value("--as")?;
                let bytes = v
                    .to_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("--as {v:?}: expected bytes"))?;
                p.address_space = Some(bytes);
            }
            Some("--") => {
                p.program = args.collect();
                break;
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    if !p.probe && p.program.is_empty() {
        return Err("no program to run (expected -- PROGRAM [ARGS]...)".into());
    }
    Ok(p)
}

/// A granted path that contains a protected one would open it: refused, naming both.
fn check_grants(p: &Policy) -> Result<(), String> {
    // Compared as the kernel will see them: symlinks and relative parts resolved.
    let real = |v: &[PathBuf]| -> Vec<PathBuf> {
        v.iter()
            .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
            .collect()
    };
    let protect = real(&p.protect);
    for granted in real(&p.read).iter().chain(&real(&p.write)) {
        for protected in &protect {
            if protected.starts_with(granted) {
                return Err(format!(
                    "granting {} would expose {} (a mountpath or the state directory)",
                    granted.display(),
                    protected.display()
                ));
            }
        }
    }
    Ok(())
}

/// Applies the rule set to this process; what the kernel enforced.
fn restrict(read: &[PathBuf], write: &[PathBuf]) -> Result<RulesetStatus, String> {
    let existing = |v: &[PathBuf]| -> Vec<PathBuf> {
        v.iter().filter(|p| p.exists()).cloned().collect::<Vec<_>>()
    };
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI_WANTED))
        .and_then(|r| r.handle_access(AccessNet::from_all(ABI_WANTED)))
        .and_then(|r| r.scope(Scope::from_all(ABI_WANTED)))
        .and_then(|r| r.create())
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                existing(read),
                AccessFs::from_read(ABI_WANTED),
            ))
        })
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                existing(write),
                AccessFs::from_all(ABI_WANTED),
            ))
        })
        .and_then(|r| r.restrict_self())
        .map_err(|e| format!("Landlock: {e}"))?;
    Ok(status.ruleset)
}

fn limits(address_space: Option<u64>) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let set = |resource, value: u64| {
        setrlimit(
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )
        .map_err(|e| format!("setrlimit {resource:?}: {e}"))
    };
    set(Resource::Core, 0)?;
    if let Some(bytes) = address_space {
        set(Resource::As, bytes)?;
    }
    Ok(())
}

/// Namespace flags of `clone`: a worker makes no namespaces (kernel surface, and a way
/// around the rules above inside a new user namespace). `CLONE_NEWTIME` is not among them:
/// in `clone` its bit belongs to the exit signal; only `unshare` (denied) and `clone3`
/// (`ENOSYS`) take it.
const CLONE_NAMESPACES: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// System calls that fail whatever their arguments.
const FORBIDDEN_SYSCALLS: [i64; 34] = [
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_open_by_handle_at,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
];

/// The seccomp filters a worker runs under (see the module docs): the `EPERM` rules, and
/// `clone3` answering `ENOSYS`.
fn seccomp_filters() -> Result<[seccompiler::BpfProgram; 2], String> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };
    use std::collections::BTreeMap;
    let err = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let arch = std::env::consts::ARCH.try_into().map_err(err)?;
    let arg = |index, len, op, value| -> Result<SeccompRule, String> {
        SeccompRule::new(vec![
            SeccompCondition::new(index, len, op, value).map_err(err)?,
        ])
        .map_err(err)
    };
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> = FORBIDDEN_SYSCALLS
        .iter()
        .map(|&call| (call, Vec::new()))
        .collect();
    denied.insert(
        libc::SYS_socket,
        vec![arg(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )?],
    );
    denied.insert(
        libc::SYS_clone,
        CLONE_NAMESPACES
            .iter()
            .map(|&flag| {
                arg(
                    0,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(flag),
                    flag,
                )
            })
            .collect::<Result<_, _>>()?,
    );
    let compile = |rules, errno: i32| -> Result<BpfProgram, String> {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .map_err(err)?;
        filter.try_into().map_err(err)
    };
    Ok([
        compile(denied, libc::EPERM)?,
        compile(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            libc::ENOSYS,
        )?,
    ])
}

/// On x86_64, the x32 ABI's calls carry the same audit architecture with bit 30 set in the
/// number, which the rules above (by x86_64 number) would not match: every such call fails
/// with `ENOSYS`, as on kernels built without x32. A hand-written program: seccompiler
/// filters by exact numbers only.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> seccompiler::BpfProgram {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        op(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        op(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        op(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        op(JGE_K, 0, 1, X32_SYSCALL_BIT),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Installs [`seccomp_filters`] (and on x86_64 [`x32_guard`]) on this (single-threaded)
/// process.
fn forbid_syscalls() -> Result<(), String> {
    #[cfg(target_arch = "x86_64")]
    seccompiler::apply_filter(&x32_guard()).map_err(|e| format!("seccomp: {e}"))?;
    for filter in seccomp_filters()? {
        seccompiler::apply_filter(&filter).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

/// Runs `gristd etl-sandbox ARGS` (the arguments after the subcommand): sets up the sandbox
/// and execs the program. Returns only on failure, with the exit status to use.
pub fn exec_helper(args: impl IntoIterator<Item = OsString>) -> i32 {
    let fail = |message: String| {
        eprintln!("{COMMAND}: {message}");
        SETUP_FAILED
    };
    let policy = match parse(args) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if let Err(e) = check_grants(&policy) {
        return fail(e);
    }
    let status = match restrict(&policy.read, &policy.write) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    // Seccomp fails closed: a worker whose filter cannot be installed does not start, unless
    // the target's probe found it cannot be installed here at all (`--no-seccomp`).
    let seccomp = if policy.no_seccomp {
        Err("left out (--no-seccomp)".to_owned())
    } else {
        forbid_syscalls()
    };
    if policy.probe {
        let (word, code) = match status {
            RulesetStatus::FullyEnforced => ("full", 0),
            RulesetStatus::PartiallyEnforced => ("partial", 0),
            RulesetStatus::NotEnforced => ("none", 1),
        };
        match seccomp {
            Ok(()) => println!("landlock {word}\nseccomp on"),
            Err(e) => println!("landlock {word}\nseccomp off: {e}"),
        }
        return code;
    }
    if let Err(e) = seccomp
        && !policy.no_seccomp
    {
        return fail(e);
    }
    if status == RulesetStatus::NotEnforced {
        return fail(
            "Landlock is not available on this kernel: the worker would be unconfined".into(),
        );
    }
    // Its own session: a `kill(0, …)` from the worker reaches only its own processes.
    if let Err(e) = rustix::process::setsid() {
        return fail(format!("setsid: {e}"));
    }
    if let Err(e) = limits(policy.address_space) {
        return fail(e);
    }
    let error = std::process::Command::new(&policy.program[0])
        .args(&policy.program[1..])
        .exec();
    eprintln!("{COMMAND}: starting {:?}: {error}", policy.program[0]);
    127
}

/// System paths every worker may read and execute: programs, libraries, the dynamic loader's
/// and Python's configuration, time zone, user names and CPU/memory facts numeric libraries
/// read. Never `/etc` as a whole (`/etc/shadow` is in it).
pub fn system_read_paths() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = [
        "/usr",
        "/lib",
        "/lib32",
        "/lib64",
        "/bin",
        "/sbin",
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/localtime",
        "/etc/nsswitch.conf",
        "/etc/passwd",
        "/etc/group",
        "/etc/alternatives",
        "/etc/ssl/certs",
        "/sys/devices/system/cpu",
        "/proc/cpuinfo",
        "/proc/meminfo",
        // Opened by the helper, whose pid the worker keeps across exec: its own entries.
        "/proc/self",
        "/dev/urandom",
        "/dev/random",
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect();
    // Debian's `sitecustomize.py` and friends.
    if let Ok(etc) = std::fs::read_dir("/etc") {
        for entry in etc.flatten() {
            if entry.file_name().to_string_lossy().starts_with("python3") {
                paths.push(entry.path());
            }
        }
    }
    paths
}

/// The installation prefixes of a python interpreter (`sys.base_prefix`, `sys.prefix`),
/// resolved (symlinks followed): what it needs to read to start. Empty when it cannot be run.
pub fn python_prefixes(python: &str) -> Vec<PathBuf> {
    let out = std::process::Command::new(python)
        .args([
            "-I",
            "-c",
            "import sys; print(sys.base_prefix); print(sys.prefix)",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        _ => return Vec::new(),
    };
    let mut prefixes: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| std::fs::canonicalize(l.trim()).ok())
        .collect();
    prefixes.dedup();
    prefixes
}

/// (Re)creates the scratch directory workers write to: empty, and writable by the worker's
/// user too when that is another (`nobody` under root): sticky, like `/tmp`.
pub fn make_scratch(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
}

/// Paths every worker may write: the null and zero devices only.
pub fn system_write_paths() -> Vec<PathBuf> {
    ["/dev/null", "/dev/zero"].map(PathBuf::from).to_vec()
}

/// Whether `path` lies in a system path already granted (no extra rule needed).
pub fn is_granted(path: &Path, granted: &[PathBuf]) -> bool {
    granted.iter().any(|g| path.starts_with(g))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_seccomp_filters_compile_for_this_machine() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(x32_guard().len(), 6);
        let [denied, clone3] = seccomp_filters().unwrap();
        // One check per forbidden call at least (the kernel caps programs at 4096).
        assert!(denied.len() > FORBIDDEN_SYSCALLS.len() && denied.len() < 4096);
        assert!(!clone3.is_empty());
    }

    #[test]
    fn arguments_and_the_grant_check() {
        let p = parse(args(&["--ro", "/usr", "--as", "1024", "--", "cat", "-n"])).unwrap();
        assert_eq!(p.read, [PathBuf::from("/usr")]);
        assert_eq!(p.address_space, Some(1024));
        assert_eq!(p.program, args(&["cat", "-n"]));
        assert!(parse(args(&["--ro"])).is_err());
        assert!(parse(args(&["--ro", "/usr"])).is_err(), "no program");
        assert!(parse(args(&["--as", "lots", "--", "x"])).is_err());
        assert!(parse(args(&["--probe"])).unwrap().probe);
        assert!(
            parse(args(&["--no-seccomp", "--", "x"]))
                .unwrap()
                .no_seccomp
        );

        // A grant above a mountpath would open it; one beside or below is fine.
        let mut p = parse(args(&[
            "--ro",
            "/data",
            "--protect",
            "/data/mp0",
            "--",
            "x",
        ]))
        .unwrap();
        let err = check_grants(&p).unwrap_err();
        assert!(err.contains("/data") && err.contains("/data/mp0"), "{err}");
        p.read = vec![PathBuf::from("/data/mp0-envs"), PathBuf::from("/usr")];
        check_grants(&p).unwrap();
    }
}
