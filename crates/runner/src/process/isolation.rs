//! Opt-in isolation (CONTRACT §7): each option is either enforced or the run
//! is refused with `isolation_unavailable` — never silently downgraded.
//!
//! Everything that can fail is done here, in the parent and before the
//! `executing` record, so a refusal spends no use: the Landlock ruleset is
//! built into an fd (the child only calls `landlock_restrict_self`), the
//! network namespace is unshared (the parent never uses the network), and
//! the rights to create a PID namespace (which `spawn` does with `clone`)
//! and to switch uid are checked.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, ABI,
};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{getegid, geteuid};

use crate::gate::reach;
use crate::process::network::{self, Proxy};
use governed_model::{
    IsolationReport, IsolationRequest, ReachEntry, SyscallPolicyReport, SyscallPolicyState,
    Syscalls,
};
use governed_sys as sys;
use governed_sys::{ChildCreds, MountPlan, MountProbe, SocketFilter, SyscallFilter};

pub struct Prepared {
    pub creds: Option<ChildCreds>,
    pub landlock_fd: Option<OwnedFd>,
    pub seccomp: Option<SocketFilter>,
    /// The syscall policy (CONTRACT §7, v1.3), checked here; installed in
    /// the child right before exec.
    pub syscall_policy: Option<SyscallFilter>,
    pub report: IsolationReport,
    /// The child's own mount namespace (a root runner under isolation).
    pub mounts: Option<MountPlan>,
    /// That plan being tried in a throwaway child; `confirm_mounts` waits
    /// for its verdict, which must come before the use is spent.
    mount_probe: Option<MountProbe>,
    /// A uid-0 child under isolation keeps only these capabilities.
    pub root_caps_keep: Option<u64>,
    /// Whether the mount namespace covers every path of the runner key:
    /// `Ok(how)` or `Err(why not)`; `None` without a mount namespace.
    pub key_covered: Option<Cover>,
    /// A non-root runner under isolation: the Landlock ruleset that denies
    /// the child its key and state dir.
    pub landlock_guard_fd: Option<OwnedFd>,
    /// The rights the guard handles (bits), for the child's fresh mounts.
    pub landlock_guard_access: u64,
    /// Whether that ruleset covers every path of the key (as `key_covered`).
    pub key_landlocked: Option<Cover>,
    /// Under the seccomp form of `--no-network`: a Landlock ruleset of
    /// scopes only (the abstract unix socket scope), stacked in the child
    /// whether or not a guard is built.
    pub landlock_scope_fd: Option<OwnedFd>,
    /// `--allow-net`: the egress proxy (CONTRACT §8), listening in the
    /// child's network namespace, dialling from the runner's.
    pub proxy: Option<Proxy>,
}

/// Whether a mechanism keeps every path of the runner key from the child:
/// how it does, or why it does not. Words for the receipt's signing report
/// (`run::classify`), not an error: a cover that fails is stated there.
#[derive(Debug, Clone)]
pub enum Cover {
    Holds(String),
    Fails(String),
}

impl Prepared {
    /// The verdict of the mount plan's probe, started by `prepare`: a plan
    /// this machine refuses is `isolation_unavailable`, found before the
    /// use is spent. Waited for here rather than in `prepare`, so that the
    /// probe runs beside the rest of the run's setup.
    pub(crate) fn confirm_mounts(&mut self) -> Result<(), Unavailable> {
        match self.mount_probe.take().map(MountProbe::verdict) {
            Some(Err(e)) => Err(unavailable(
                "isolation for a root child",
                format!("setting up the child's mount namespace failed here: {e}"),
            )),
            _ => Ok(()),
        }
    }
}

impl Cover {
    pub fn holds(&self) -> bool {
        matches!(self, Cover::Holds(_))
    }
}

/// What the runner must keep from the child: its key and its state dir, and
/// every other file its decisions rest on — the directory a lease's
/// `--ledger DIR` names (its uses, revocations, unknown outcomes) and the
/// files a PostgreSQL ledger's credentials come from.
pub struct Protect<'a> {
    pub key: &'a Path,
    pub state_dir: &'a Path,
    pub ledger_dir: Option<&'a Path>,
    pub credentials: &'a [PathBuf],
}

/// Whether the lease asks for any isolation option of §7.
pub fn any_isolation(req: &IsolationRequest) -> bool {
    req.as_user.is_some()
        || req.fs_write.is_some()
        || req.no_network
        || !req.allow_net.is_empty()
        || req.pid_namespace
}

/// Whether the syscall policy applies: the lease asks for an isolation
/// option and its approver did not waive the policy (`--syscalls
/// unconfined`). An isolated lease signed before v1.3 has no `syscalls`
/// and gets the policy.
pub fn syscall_policy_applies(req: &IsolationRequest) -> bool {
    any_isolation(req) && req.syscalls != Some(Syscalls::Unconfined)
}

/// The syscall policy for this lease, tried in a throw-away child: `None`
/// where it does not apply, `Unavailable` where this machine cannot
/// enforce it (no policy for the architecture, no seccomp in the kernel,
/// or a filter that does not do what it says).
pub fn syscall_policy(req: &IsolationRequest) -> Result<Option<SyscallFilter>, Unavailable> {
    if !syscall_policy_applies(req) {
        return Ok(None);
    }
    let what = format!("the syscall policy ({})", sys::SYSCALL_POLICY_NAME);
    let filter = SyscallFilter::docker_default().ok_or_else(|| {
        unavailable(
            &what,
            "no seccomp syscall policy is written for this architecture (approve --syscalls unconfined waives it)",
        )
    })?;
    // The test suite's stand-in for a kernel without seccomp filters.
    let checked = if governed_fault::fail("syscall_policy_refused") {
        Err(sys::FilterCheckError::Install(
            std::io::Error::from_raw_os_error(22),
        ))
    } else {
        filter.check()
    };
    checked.map_err(|e| {
        unavailable(
            &what,
            format!("seccomp: {e} (approve --syscalls unconfined waives it)"),
        )
    })?;
    Ok(Some(filter))
}

/// The policy's digest: SHA-256 (hex) of its program's bytes.
pub fn syscall_policy_sha256(filter: &SyscallFilter) -> String {
    governed_model::digest::sha256_hex(&filter.sha256_input())
}

/// What the receipt says of the syscall policy: `filter` is the policy
/// `prepare` checked and the spawn installs (`None` when none applies).
pub fn syscall_policy_report(
    req: &IsolationRequest,
    filter: Option<&SyscallFilter>,
) -> SyscallPolicyReport {
    match filter {
        Some(f) => SyscallPolicyReport {
            state: SyscallPolicyState::Enforced,
            name: Some(sys::SYSCALL_POLICY_NAME.to_string()),
            sha256: Some(syscall_policy_sha256(f)),
            mechanism: Some("seccomp_bpf".to_string()),
            detail: SYSCALL_POLICY_BOUNDARY.to_string(),
        },
        None if any_isolation(req) => SyscallPolicyReport {
            state: SyscallPolicyState::Waived,
            name: None,
            sha256: None,
            mechanism: None,
            detail: SYSCALL_POLICY_WAIVED.to_string(),
        },
        None => SyscallPolicyReport {
            state: SyscallPolicyState::NotApplicable,
            name: None,
            sha256: None,
            mechanism: None,
            detail: "the lease asks for no isolation option, so no syscall policy applies: the child may make every system call its uid may".to_string(),
        },
    }
}

/// The syscall policy in words (summary, boundary, receipt).
pub const SYSCALL_POLICY_BOUNDARY: &str = "a seccomp syscall policy modelled on Docker's default profile answers EPERM to mount and the new mount API, unshare, setns and clone with a namespace flag, ptrace and reading other processes' memory, bpf, perf_event_open, userfaultfd, io_uring, the kernel keyring, loading kernel modules or kernels, reboot, swap, quotas, accounting, the kernel log, setting the clock, NUMA placement and file handles; clone3 answers ENOSYS (libc falls back to clone); a system call of another ABI (i386, x32) kills the process";

/// The waived syscall policy in words.
pub const SYSCALL_POLICY_WAIVED: &str = "the syscall policy is waived by the approver (--syscalls unconfined): every system call the kernel lets its uid make is open to it, namespaces and mount included where its uid may";

/// The boundary in words. `mount_ns`: whether the child gets its own mount
/// namespace; `net`: the `--no-network` mechanism. Both are known at `run`;
/// at `approve` they are `None` (they depend on the runner's machine) and
/// the text says what each possibility means.
pub fn boundary_text(
    req: &IsolationRequest,
    uid: u32,
    mount_ns: Option<bool>,
    net: Option<NetMechanism>,
    abstract_scope: Option<&AbstractScope>,
) -> String {
    let mut parts = Vec::new();
    let sandboxed = any_isolation(req);
    if sandboxed && uid == 0 && req.as_user.is_none() {
        let covers = "its own mount namespace where the runner's key and state dir, cgroupfs and the host's device nodes are covered and /sys and /proc/sys are read-only";
        parts.push(format!(
            "runs as uid 0 but keeps only {} of root's capabilities, {}; it can still read and write every file uid 0 owns{}",
            reach::root_keep_names().join(", "),
            match mount_ns {
                Some(true) => format!("in {covers}"),
                Some(false) => "in the runner's mount namespace (governed-exec lacks CAP_SYS_ADMIN here), where the runner's key and state dir are not hidden from it".to_string(),
                None => format!("and where the runner holds CAP_SYS_ADMIN runs in {covers}"),
            },
            if req.fs_write.is_some() { " within the write scope below" } else { ", and so change what the host runs later" }
        ));
    } else if sandboxed {
        parts.push(format!(
            "runs as uid {uid}; this is an OS sandbox only in the ways listed here, and otherwise the process may do whatever uid {uid} can"
        ));
    } else {
        parts.push(format!("runs as uid {uid}; this is not an OS sandbox: the process may read, write and delete anything uid {uid} can, use the network, and signal other processes of uid {uid}"));
    }
    match &req.fs_write {
        Some(paths) => parts.push(format!(
            "writes are confined by Landlock to the workspace, its private HOME and TMPDIR{}",
            if paths.is_empty() {
                String::new()
            } else {
                format!(" and {}", paths.join(", "))
            }
        )),
        None => parts.push("the cwd is not a filesystem boundary".into()),
    }
    match &req.fs_read {
        Some(paths) => parts.push(format!(
            "reads and execution are confined to {} and the writable paths",
            paths.join(", ")
        )),
        None if req.fs_write.is_some() => parts.push("reads are not restricted".into()),
        None => {}
    }
    let network: Option<String> = match (req.no_network, net) {
        (false, _) if !req.allow_net.is_empty() => Some(format!(
            "{ALLOW_NET_BOUNDARY} {}",
            req.allow_net.join(", ")
        )),
        // The not-a-sandbox sentence above already says it.
        (false, _) if !sandboxed => None,
        (false, _) => Some("it can use the network".into()),
        (true, Some(NetMechanism::Seccomp)) => Some(match abstract_scope {
            Some(AbstractScope::Applied(abi)) => format!(
                "{SECCOMP_BOUNDARY}; Landlock (ABI {abi}) scopes its abstract unix sockets to its own processes: it cannot connect to one that a process outside the run listens on"
            ),
            Some(AbstractScope::Lacking(why)) => format!(
                "{SECCOMP_BOUNDARY}; this kernel lacks Landlock's abstract unix socket scope ({why}), so it can still connect to an abstract unix socket that any process of the host listens on (a local proxy or daemon)"
            ),
            None => format!("{SECCOMP_BOUNDARY}; {ABSTRACT_SCOPE_WHERE}"),
        }),
        (true, Some(_)) => Some("it has no network but its own loopback".into()),
        (true, None) => Some(format!("it has no network but its own loopback where a network namespace can be made here; otherwise {SECCOMP_BOUNDARY}, and {ABSTRACT_SCOPE_WHERE}")),
    };
    parts.extend(network);
    if sandboxed {
        parts.push(if syscall_policy_applies(req) {
            SYSCALL_POLICY_BOUNDARY.to_string()
        } else {
            SYSCALL_POLICY_WAIVED.to_string()
        });
    }
    if req.pid_namespace {
        parts.push(if mount_ns == Some(false) {
            "it runs in its own PID namespace under governed-exec's init and cannot signal host processes by pid, but /proc is not remounted and still lists them".into()
        } else {
            "it runs in its own PID namespace under governed-exec's init, with a fresh /proc that shows only that namespace; it cannot see or signal host processes by pid".into()
        });
    }
    parts.join("; ")
}

const ALLOW_NET_BOUNDARY: &str = "it has its own network namespace with only loopback, where governed-exec's HTTP proxy (named in HTTPS_PROXY, HTTP_PROXY, ALL_PROXY) is its only way out: a program that ignores those variables has no route at all, and the child cannot resolve names itself; the proxy passes CONNECT and absolute-form http:// requests only to";

const SECCOMP_BOUNDARY: &str = "a seccomp filter lets it open only AF_UNIX and AF_NETLINK sockets: no TCP or UDP at all, not even to loopback";

const ABSTRACT_SCOPE_WHERE: &str = "Landlock's abstract unix socket scope (ABI 6) keeps it from abstract unix sockets that processes outside the run listen on where the kernel has that scope; where it lacks it, the receipt says so and such a socket stays open to it";

/// Under the seccomp form of `--no-network` the child shares the host's
/// network namespace, where abstract unix sockets live: whether Landlock's
/// abstract unix socket scope closes them to it (with the kernel's
/// Landlock ABI), or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbstractScope {
    Applied(i64),
    Lacking(String),
}

/// The scopes-only Landlock ruleset for the seccomp form of
/// `--no-network`: the abstract unix socket scope, and no filesystem rule
/// (a ruleset that handles no access right needs none). Built here, before
/// the use is spent; the child only restricts itself with it.
fn abstract_unix_scope() -> (Option<OwnedFd>, AbstractScope) {
    let abi = match sys::landlock_abi_version() {
        None => {
            return (
                None,
                AbstractScope::Lacking("the kernel offers no Landlock".into()),
            )
        }
        Some(abi) if abi < 6 => {
            return (
                None,
                AbstractScope::Lacking(format!("its Landlock is ABI {abi}; the scope needs ABI 6")),
            )
        }
        Some(abi) => abi,
    };
    let made = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(landlock::Scope::AbstractUnixSocket)
        .and_then(|r| r.create())
        .map(Option::<OwnedFd>::from);
    match made {
        Ok(Some(fd)) => (Some(fd), AbstractScope::Applied(abi)),
        Ok(None) => (
            None,
            AbstractScope::Lacking(format!("Landlock ABI {abi} made no ruleset")),
        ),
        Err(e) => (
            None,
            AbstractScope::Lacking(format!("Landlock ABI {abi}: {e}")),
        ),
    }
}

/// How `--no-network` is enforced, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetMechanism {
    /// `unshare(CLONE_NEWNET)` with CAP_SYS_ADMIN: a fresh namespace, loopback up.
    NetworkNamespace,
    /// The same inside an unprivileged user namespace (non-root callers).
    UserAndNetworkNamespace,
    /// No namespace can be made (e.g. Docker's default seccomp profile and
    /// capabilities): a seccomp filter on the socket families.
    Seccomp,
}

impl NetMechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            NetMechanism::NetworkNamespace => "network_namespace",
            NetMechanism::UserAndNetworkNamespace => "user_and_network_namespace",
            NetMechanism::Seccomp => "seccomp_socket_families",
        }
    }
}

/// What [`enter_namespaces`] set up.
pub struct Namespaces {
    pub net: Option<NetMechanism>,
    /// `pid_namespace` or `user_and_pid_namespace`: the spawn adds CLONE_NEWPID.
    pub pid: Option<&'static str>,
    /// Installed in the child last before exec when `net` is `Seccomp`.
    pub seccomp: Option<SocketFilter>,
    /// Whether this process now lives in a user namespace of its own.
    pub user_namespace: bool,
    /// `allow_net`: the proxy, listening in the new network namespace.
    pub proxy: Option<Proxy>,
}

const CAP_SYS_ADMIN: u32 = 21;

/// Why no user namespace could be entered: one cause of an
/// [`Unavailable`] ("no user namespace: …"), and doctor's `user_namespace`
/// row.
#[derive(Debug, thiserror::Error)]
pub enum UserNamespaceError {
    #[error("unshare(CLONE_NEWUSER): {0}")]
    Unshare(#[source] nix::errno::Errno),
    #[error("PR_SET_DUMPABLE: {0}")]
    Dumpable(#[source] std::io::Error),
    #[error("writing {file}: {source}")]
    Map {
        file: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Enter a new user namespace in which this process keeps its own uid and
/// gid (mapped to themselves) and holds the capabilities needed to create
/// network and PID namespaces. Needs a single-threaded process.
pub fn enter_user_namespace() -> Result<(), UserNamespaceError> {
    let (uid, gid) = (geteuid().as_raw(), getegid().as_raw());
    let was_dumpable = sys::is_dumpable();
    unshare(CloneFlags::CLONE_NEWUSER).map_err(UserNamespaceError::Unshare)?;
    // The runner is non-dumpable (its /proc/self files then belong to root);
    // it must own them to write its maps. No child exists yet.
    sys::set_dumpable().map_err(UserNamespaceError::Dumpable)?;
    let write = |file: &'static str, text: String| {
        std::fs::write(file, text).map_err(|source| UserNamespaceError::Map { file, source })
    };
    let maps = write("/proc/self/setgroups", "deny".into())
        .and_then(|()| write("/proc/self/uid_map", format!("{uid} {uid} 1")))
        .and_then(|()| write("/proc/self/gid_map", format!("{gid} {gid} 1")));
    if !was_dumpable {
        sys::set_non_dumpable().map_err(UserNamespaceError::Dumpable)?;
    }
    maps
}

/// Set up, in this process, the namespaces `--no-network` and
/// `--pid-namespace` need, by the first mechanism that works: with
/// CAP_SYS_ADMIN directly; without it inside an unprivileged user namespace;
/// for `--no-network` alone, failing both, a seccomp socket filter (checked
/// in a throw-away child). `run` calls this before the use is spent;
/// `doctor` calls it inside a probe child, so it reports what `run` does.
///
/// `allow_net` (the lease's entries; empty: not asked) needs a network
/// namespace, directly or inside a user namespace, with the egress proxy's
/// acceptor thread started before it is made (it stays in this process's
/// original network namespace and dials from there); a seccomp filter
/// would cut the proxy off too, so it is no fallback here.
pub fn enter_namespaces(
    no_network: bool,
    allow_net: &[String],
    pid_namespace: bool,
) -> Result<Namespaces, Unavailable> {
    let mut out = Namespaces {
        net: None,
        pid: None,
        seccomp: None,
        user_namespace: false,
        proxy: None,
    };
    if !no_network && allow_net.is_empty() && !pid_namespace {
        return Ok(out);
    }
    let mut why: Vec<String> = Vec::new();
    let admin = sys::has_effective_capability(CAP_SYS_ADMIN);
    if !admin {
        why.push("governed-exec does not hold CAP_SYS_ADMIN".into());
        match enter_user_namespace() {
            Ok(()) => out.user_namespace = true,
            Err(e) => why.push(format!("no user namespace: {e}")),
        }
    }
    if !allow_net.is_empty() {
        if !admin && !out.user_namespace {
            return Err(unavailable("--allow-net", why.join("; ")));
        }
        let pending =
            network::Proxy::prepare(allow_net).map_err(|e| unavailable("--allow-net", e))?;
        unshare(CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))
            .and_then(|()| sys::loopback_up().map_err(|e| format!("bringing up loopback: {e}")))
            .map_err(|e| unavailable("--allow-net", e))?;
        let mechanism = if out.user_namespace {
            NetMechanism::UserAndNetworkNamespace
        } else {
            NetMechanism::NetworkNamespace
        };
        out.proxy = Some(
            pending
                .listen(mechanism.as_str())
                .map_err(|e| unavailable("--allow-net", e))?,
        );
        out.net = Some(mechanism);
    }
    if no_network && out.net.is_none() {
        if admin || out.user_namespace {
            let made = unshare(CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))
                .and_then(|()| {
                    sys::loopback_up().map_err(|e| format!("bringing up loopback: {e}"))
                });
            match made {
                Ok(()) if out.user_namespace => {
                    out.net = Some(NetMechanism::UserAndNetworkNamespace)
                }
                Ok(()) => out.net = Some(NetMechanism::NetworkNamespace),
                Err(e) => why.push(e),
            }
        }
        if out.net.is_none() {
            let filter = sys::SocketFilter::no_network()
                .ok_or_else(|| "no seccomp socket filter for this architecture".to_string())
                .and_then(|f| f.check().map(|()| f).map_err(|e| e.to_string()));
            match filter {
                Ok(f) => {
                    out.net = Some(NetMechanism::Seccomp);
                    out.seccomp = Some(f);
                }
                Err(e) => {
                    why.push(format!("seccomp: {e}"));
                    return Err(unavailable("--no-network", why.join("; ")));
                }
            }
        }
    }
    if pid_namespace {
        if admin {
            out.pid = Some("pid_namespace");
        } else if out.user_namespace {
            out.pid = Some("user_and_pid_namespace");
        } else {
            return Err(unavailable("--pid-namespace", why.join("; ")));
        }
    }
    Ok(out)
}

/// An isolation option of the lease that cannot be enforced on this
/// machine: always `isolation_unavailable`. `why` is every cause found.
#[derive(Debug, thiserror::Error)]
#[error("{what} cannot be enforced here: {why}")]
pub struct Unavailable {
    pub what: String,
    pub why: String,
}

fn unavailable(what: &str, why: impl std::fmt::Display) -> Unavailable {
    Unavailable {
        what: what.to_string(),
        why: why.to_string(),
    }
}

/// Check and set up everything the lease asks for; `writable` are the
/// directories always writable under a Landlock scope (workspace, HOME, TMPDIR).
pub(crate) fn prepare(
    req: &IsolationRequest,
    writable: &[PathBuf],
    protect: &Protect<'_>,
) -> Result<Prepared, Unavailable> {
    const CAP_SYS_ADMIN: u32 = 21;
    let euid = geteuid().as_raw();
    let creds = child_creds(req, euid)?;
    let (child_uid, child_gid) = creds.map_or((euid, getegid().as_raw()), |c| (c.uid, c.gid));
    let scope = write_scope(req, writable)?;
    let syscall_policy = syscall_policy(req)?;
    // Whether this runner can give a child a mount namespace at all: a root
    // runner without CAP_SYS_ADMIN (Docker's defaults) cannot. Read before
    // `enter_namespaces`, whose user namespace would grant it there.
    let can_mount = sys::has_effective_capability(CAP_SYS_ADMIN);
    // The network namespace is entered here (the parent never uses the
    // network); the PID namespace is created by the spawn itself (clone
    // with CLONE_NEWPID), for which this checks that we hold what it needs:
    // directly, through a user namespace, or (--no-network only) a seccomp
    // socket filter.
    // The daemons this child could ask to act for it, found before the
    // mount namespace is planned (it covers them) and before the network
    // namespace is entered (`/proc/net/unix` lists the listening sockets of
    // the namespace one is in).
    let sockets = reach::daemon_sockets(child_uid, euid, &req.daemon_sockets);
    // The mount table, read once: the cover plan, the guard and the reach
    // check all find a path's aliases in it.
    let mount_table = reach::mounts();
    // Owners and modes as the host sees them, read before a user namespace
    // is entered: inside one, every owner it does not map reads as the
    // overflow uid (65534), which a runner of that very uid would take
    // for its own.
    let host_meta = host_metadata(
        sockets
            .iter()
            .map(|(p, _)| p.as_path())
            .chain(protect.ledger_dir)
            .chain(protect.credentials.iter().map(PathBuf::as_path)),
    );
    let ns = enter_namespaces(req.no_network, &req.allow_net, req.pid_namespace)?;
    let root_child = uid0_child(req, euid, child_uid)?;
    // A root runner under isolation gives the child its own mount namespace
    // (the child is root until it drops to --as-user, and a uid-0 child stays
    // root): the runner's key and state dir, cgroupfs and host devices are
    // covered there, /proc is fresh in a PID namespace.
    let (mounts, key_covered, mount_probe) = if euid == 0 && any_isolation(req) {
        mount_namespace(req, writable, protect, (&sockets, &mount_table), can_mount)?
    } else {
        (None, None, None)
    };
    let root_caps_keep = (root_child && creds.is_none()).then(reach::root_keep_mask);
    // The seccomp form of --no-network leaves the child in the host's
    // network namespace: its abstract unix sockets are closed to it by a
    // Landlock scope of their own, whether or not a guard is built below
    // (a root runner's child of another uid gets none).
    let (landlock_scope_fd, abstract_scope) = if ns.net == Some(NetMechanism::Seccomp) {
        let (fd, scope) = abstract_unix_scope();
        (fd, Some(scope))
    } else {
        (None, None)
    };
    let (landlock_guard_fd, landlock_guard_access, key_landlocked) =
        if (euid != 0 || root_child) && any_isolation(req) {
            guard(writable, protect, root_child, &mount_table)
        } else {
            (None, 0, None)
        };
    let ids = creds.map_or_else(reach::ChildIds::runners_own, |c| {
        reach::ChildIds::switched(c.uid, c.gid)
    });
    let guarded = landlock_guard_fd.is_some();
    let reach = reach_entries(&ReachInputs {
        ids: &ids,
        runner_uid: euid,
        sockets: &sockets,
        host_meta: &host_meta,
        protect,
        plan: mounts.as_ref(),
        mounts: &mount_table,
        guard: guarded.then(|| sys::landlock_abi_version().unwrap_or(0)),
        pid_namespace: req.pid_namespace,
    });
    let report = isolation_report(
        req,
        (&ns, abstract_scope.as_ref()),
        (creds, root_caps_keep),
        (child_uid, child_gid),
        mounts.as_ref(),
        &scope,
        reach,
    );
    let report = IsolationReport {
        syscall_policy: Some(syscall_policy_report(req, syscall_policy.as_ref())),
        ..report
    };
    Ok(Prepared {
        creds,
        landlock_fd: scope.fd,
        seccomp: ns.seccomp,
        syscall_policy,
        report,
        mounts,
        mount_probe,
        root_caps_keep,
        key_covered,
        landlock_guard_access,
        landlock_guard_fd,
        key_landlocked,
        landlock_scope_fd,
        proxy: ns.proxy,
    })
}

/// Whether the child is a uid 0 under isolation, and if so that the
/// capabilities that would undo it can be dropped from its bounding set.
/// `--as-user 0` is a uid-0 child too: it loses every capability, but uid 0
/// still owns the directories above the state dir and may rename them, so it
/// gets the same Landlock guard as any isolated uid-0 child.
fn uid0_child(req: &IsolationRequest, euid: u32, child_uid: u32) -> Result<bool, Unavailable> {
    const CAP_SETPCAP: u32 = 8;
    let root_child = euid == 0 && child_uid == 0 && any_isolation(req);
    if root_child && !sys::has_effective_capability(CAP_SETPCAP) {
        return Err(unavailable(
            "isolation for a uid-0 child",
            "dropping the capabilities that would undo it from the bounding set needs CAP_SETPCAP, which governed-exec does not hold (use --as-user)",
        ));
    }
    Ok(root_child)
}

/// The child's mount plan, whether it covers every path of the key, and
/// the plan's probe, started.
type MountNamespace = (Option<MountPlan>, Option<Cover>, Option<MountProbe>);

/// A root runner's mount namespace for a child under isolation, its probe
/// started here (its verdict is `Prepared::confirm_mounts`). It needs
/// CAP_SYS_ADMIN (a container without it still runs
/// --as-user and --fs-write children; their receipts then say the key was
/// covered by nothing but file modes).
fn mount_namespace(
    req: &IsolationRequest,
    writable: &[PathBuf],
    protect: &Protect<'_>,
    (sockets, mount_table): (&[(PathBuf, String)], &[reach::Mount]),
    can_mount: bool,
) -> Result<MountNamespace, Unavailable> {
    if !can_mount {
        return Ok((
            None,
            Some(Cover::Fails(
                "governed-exec lacks CAP_SYS_ADMIN to give the child a mount namespace that covers the key".to_string(),
            )),
            None,
        ));
    }
    let (plan, covered) = mount_plan(req, writable, protect, sockets, mount_table)
        .map_err(|e| unavailable("isolation for a root child", e))?;
    let probe = MountProbe::start(&plan).map_err(|e| {
        unavailable(
            "isolation for a root child",
            format!("no child to try the mount namespace in: {e}"),
        )
    })?;
    Ok((Some(plan), Some(covered), Some(probe)))
}

/// `--as-user`: the child's uid and gid, which only a root runner can give.
fn child_creds(req: &IsolationRequest, euid: u32) -> Result<Option<ChildCreds>, Unavailable> {
    match req.as_user {
        Some(u) if euid != 0 => Err(unavailable(
            &format!("--as-user {}:{}", u.uid, u.gid),
            format!("governed-exec runs as uid {euid}; switching uid needs root"),
        )),
        Some(u) => {
            // A lease signed before approve refused (uid_t)-1 still names it.
            u.check()
                .map_err(|e| unavailable(&format!("--as-user {}:{}", u.uid, u.gid), e))?;
            Ok(Some(ChildCreds {
                uid: u.uid,
                gid: u.gid,
            }))
        }
        None => Ok(None),
    }
}

/// `--fs-write`/`--fs-read`: the Landlock ruleset of the write scope.
#[derive(Default)]
struct WriteScope {
    fd: Option<OwnedFd>,
    abi: Option<i64>,
    writable: Vec<String>,
}

fn write_scope(req: &IsolationRequest, writable: &[PathBuf]) -> Result<WriteScope, Unavailable> {
    let Some(extra) = &req.fs_write else {
        return Ok(WriteScope::default());
    };
    let abi = sys::landlock_abi_version()
        .ok_or_else(|| unavailable("--fs-write", "the kernel offers no Landlock"))?;
    let mut paths: Vec<PathBuf> = writable.to_vec();
    paths.extend(extra.iter().map(PathBuf::from));
    paths.push(PathBuf::from("/dev/null"));
    let readable: Option<Vec<PathBuf>> = req
        .fs_read
        .as_ref()
        .map(|r| r.iter().map(PathBuf::from).collect());
    let fd = build_ruleset(abi, &paths, readable.as_deref())
        .map_err(|e| unavailable("--fs-write/--fs-read", e))?;
    Ok(WriteScope {
        fd: Some(fd),
        abi: Some(abi),
        writable: paths.iter().map(|p| p.display().to_string()).collect(),
    })
}

/// The guard of a child under isolation that is not dropped to `--as-user`
/// by a root runner: its ruleset fd, the rights it handles, and whether it
/// denies every path of the key (`Ok(how)`) or why not.
///
/// A non-root runner under isolation: a child of its own uid is kept from
/// the key and the state dir by Landlock (which also forbids it to ptrace
/// the runner, outside its domain).
///
/// A uid-0 child under isolation gets the same guard on top of its mount
/// namespace: without it, root may rename a directory above the covered
/// state dir or key (a cover moves with its mountpoint's parent) and
/// plant its own in their place, and may make a user namespace of its
/// own in which it mounts cgroupfs and raises its pids.max. A Landlock
/// domain forbids both: the guard leaves the directories above the key
/// and the state dir read-only, and no landlocked process may mount.
type Guard = (Option<OwnedFd>, u64, Option<Cover>);

fn guard(
    writable: &[PathBuf],
    protect: &Protect<'_>,
    root_child: bool,
    mount_table: &[reach::Mount],
) -> Guard {
    let Some(abi) = sys::landlock_abi_version() else {
        return (
            None,
            0,
            Some(Cover::Fails(
                "the kernel offers no Landlock to deny the child the key".to_string(),
            )),
        );
    };
    match guard_ruleset(abi, writable, protect, root_child, mount_table) {
        Ok((fd, how)) => (
            Some(fd),
            AccessFs::from_all(ABI::from(abi as i32)).bits(),
            Some(Cover::Holds(how)),
        ),
        Err(why) => (None, 0, Some(Cover::Fails(why.to_string()))),
    }
}

/// The receipt's isolation report of what `prepare` set up.
fn isolation_report(
    req: &IsolationRequest,
    (ns, abstract_scope): (&Namespaces, Option<&AbstractScope>),
    (creds, root_caps_keep): (Option<ChildCreds>, Option<u64>),
    (child_uid, child_gid): (u32, u32),
    mounts: Option<&MountPlan>,
    scope: &WriteScope,
    reach: Vec<ReachEntry>,
) -> IsolationReport {
    IsolationReport {
        boundary: boundary_text(
            req,
            child_uid,
            Some(mounts.is_some()),
            ns.net,
            abstract_scope,
        ),
        os_sandbox: any_isolation(req),
        uid: child_uid,
        gid: child_gid,
        no_new_privs: true,
        inherited_fds_closed: true,
        parent_death_signal: true,
        capabilities_dropped: creds.is_some() || root_caps_keep.is_some(),
        landlock_abi: scope.abi,
        landlock_writable: scope.writable.clone(),
        landlock_readable: req.fs_read.clone().unwrap_or_default(),
        network_namespace: matches!(
            ns.net,
            Some(NetMechanism::NetworkNamespace | NetMechanism::UserAndNetworkNamespace)
        ),
        pid_namespace: req.pid_namespace,
        network_mechanism: ns.net.map(|m| m.as_str().to_string()),
        pid_namespace_mechanism: ns.pid.map(str::to_string),
        // Set by `run` from `process_limit::choose`.
        process_limit: String::new(),
        process_limit_evadable: false,
        // Set by `run` from the run's cgroups.
        memory_limit: None,
        memory_limit_evadable: None,
        capabilities_kept: if creds.is_some() {
            Some(vec![])
        } else {
            root_caps_keep.map(|_| reach::root_keep_names())
        },
        mount_namespace: mounts.is_some(),
        proc_remounted: mounts.is_some_and(|m| m.fresh_proc),
        kernel_view: None,
        reach,
        // Set by `prepare` from the policy it checked.
        syscall_policy: None,
    }
}

/// What [`reach_entries`] decides from.
struct ReachInputs<'a> {
    ids: &'a reach::ChildIds,
    runner_uid: u32,
    sockets: &'a [(PathBuf, String)],
    /// [`host_metadata`] of the sockets and protected files.
    host_meta: &'a HashMap<PathBuf, std::fs::Metadata>,
    protect: &'a Protect<'a>,
    /// The child's own mount namespace, when it gets one.
    plan: Option<&'a MountPlan>,
    /// This mount namespace's table, read once per run.
    mounts: &'a [reach::Mount],
    /// The Landlock guard's ABI, when the child gets the guard.
    guard: Option<i64>,
    pid_namespace: bool,
}

/// Whether every path of `path` in this mount namespace is covered in the
/// child's (a file by `/dev/null`, a directory by an empty tmpfs); `meta`
/// is its [`host_metadata`], read once.
fn covered(
    plan: Option<&MountPlan>,
    mounts: &[reach::Mount],
    path: &Path,
    (dir, meta): (bool, &std::fs::Metadata),
) -> bool {
    let Some(plan) = plan else { return false };
    // Covers go by path: a second hard link elsewhere is not covered.
    if !dir && meta.nlink() != 1 {
        return false;
    }
    let aliases = reach::aliases(path, mounts).unwrap_or_default();
    let set = if dir {
        &plan.cover_dirs
    } else {
        &plan.cover_files
    };
    !aliases.is_empty()
        && aliases
            .iter()
            .all(|a| cstr(a).is_ok_and(|c| set.contains(&c)))
}

/// The metadata of each path that exists, read now (see `prepare`).
fn host_metadata<'p>(paths: impl Iterator<Item = &'p Path>) -> HashMap<PathBuf, std::fs::Metadata> {
    paths
        .filter_map(|p| std::fs::metadata(p).ok().map(|m| (p.to_path_buf(), m)))
        .collect()
}

/// The child's reach, channel by channel: covered, denied, or reachable and
/// why. `run` reads these to decide what the receipt may claim (a reachable
/// daemon socket means the key is in reach and the cleanup evadable).
fn reach_entries(inp: &ReachInputs<'_>) -> Vec<ReachEntry> {
    // A cover holds only with the guard or a fresh /proc (`reach::covers_hold`).
    let covers_hold =
        reach::covers_hold(inp.guard.is_some(), inp.plan.is_some_and(|p| p.fresh_proc));
    let plan = inp.plan.filter(|_| covers_hold);
    let mut out = socket_entries(inp, plan);
    out.extend(file_entries(inp, plan));
    out.push(signal_entry(inp));
    out
}

/// One channel of the child's reach.
fn reach_entry(channel: &str, path: Option<&Path>, reachable: bool, how: String) -> ReachEntry {
    ReachEntry {
        channel: channel.into(),
        path: path.map(|p| p.display().to_string()),
        reachable,
        how,
    }
}

/// Each daemon socket that exists: covered, reachable, or denied by its modes.
fn socket_entries(inp: &ReachInputs<'_>, plan: Option<&MountPlan>) -> Vec<ReachEntry> {
    let ids = inp.ids;
    let who = ids.describe();
    let mut out = Vec::new();
    for (sock, daemon) in inp.sockets {
        let Some(meta) = inp.host_meta.get(sock) else {
            continue;
        };
        let e = match reach::socket_reach(ids, covered(plan, inp.mounts, sock, (false, meta)), meta) {
            reach::SocketReach::Covered => reach_entry(
                "daemon_socket",
                Some(sock),
                false,
                format!("{daemon}: covered by /dev/null in the child's mount namespace"),
            ),
            reach::SocketReach::Reachable => reach_entry("daemon_socket", Some(sock), true, format!(
                "{daemon}: the child ({who}) may connect ({}); the daemon can read the runner key and start processes outside every witness of this run",
                reach::mode_text(meta)
            )),
            reach::SocketReach::Denied => reach_entry(
                "daemon_socket",
                Some(sock),
                false,
                format!(
                    "{daemon}: file modes ({}) deny the child ({who}) a connection",
                    reach::mode_text(meta)
                ),
            )
        };
        out.push(e);
    }
    out
}

/// The ledger directory and credentials that exist: covered, guarded,
/// reachable, or denied by their modes.
fn file_entries(inp: &ReachInputs<'_>, plan: Option<&MountPlan>) -> Vec<ReachEntry> {
    let ids = inp.ids;
    let who = ids.describe();
    let mut out = Vec::new();
    let files = inp
        .protect
        .ledger_dir
        .map(|d| ("ledger_dir", d, true))
        .into_iter()
        .chain(
            inp.protect
                .credentials
                .iter()
                .map(|f| ("ledger_credentials", f.as_path(), false)),
        );
    for (channel, path, dir) in files {
        let Some(meta) = inp.host_meta.get(path) else {
            continue;
        };
        let e = if covered(plan, inp.mounts, path, (dir, meta)) {
            reach_entry(
                channel,
                Some(path),
                false,
                "covered in the child's mount namespace".into(),
            )
        } else if let Some(abi) = inp.guard {
            reach_entry(
                channel,
                Some(path),
                false,
                format!("the Landlock guard (ABI {abi}) denies it"),
            )
        } else if ids.may(meta, if dir { 3 } else { 4 }) {
            reach_entry(
                channel,
                Some(path),
                true,
                format!(
                    "the child ({who}) may {} it ({})",
                    if dir { "write" } else { "read" },
                    reach::mode_text(meta)
                ),
            )
        } else {
            reach_entry(
                channel,
                Some(path),
                false,
                format!(
                    "file modes ({}) deny the child ({who})",
                    reach::mode_text(meta)
                ),
            )
        };
        out.push(e);
    }
    out
}

/// Whether the child may signal the runner.
fn signal_entry(inp: &ReachInputs<'_>) -> ReachEntry {
    let ids = inp.ids;
    let who = ids.describe();
    let (reachable, how) = if inp.pid_namespace {
        (
            false,
            "the child is in its own PID namespace, where the runner has no pid".to_string(),
        )
    } else if let Some(abi) = inp.guard.filter(|abi| *abi >= 6) {
        (
            false,
            format!("Landlock (ABI {abi}) scopes the child's signals to its own processes"),
        )
    } else if ids.uid != inp.runner_uid && !(ids.uid == 0 && ids.dac_override) {
        (
            false,
            format!(
                "the child runs as uid {} without CAP_KILL, the runner as uid {}",
                ids.uid, inp.runner_uid
            ),
        )
    } else {
        (true, format!(
            "the child ({who}) may signal the runner: a SIGSTOP would stop the wall time and cancellation from being enforced"
        ))
    };
    reach_entry("runner_signals", None, reachable, how)
}

/// A block device node under `/dev` (or `/dev/mapper`) this process can open
/// for reading.
fn readable_block_device() -> Option<PathBuf> {
    ["/dev", "/dev/mapper"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|rd| rd.flatten())
        .map(|e| e.path())
        .find(|p| {
            std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_block_device())
                && nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::R_OK).is_ok()
        })
}

/// A ruleset that handles every filesystem right and grants all of them
/// everywhere except beneath the runner's key and state dir (and every alias
/// path of them): each directory above a protected path gets only
/// `READ_DIR`, each of its other entries everything. So the child can
/// neither read, replace nor delete the key or anything in the state dir,
/// and cannot create new entries directly in the directories above them.
fn guard_ruleset(
    abi: i64,
    writable: &[PathBuf],
    protect: &Protect<'_>,
    root_child: bool,
    mounts: &[reach::Mount],
) -> Result<(OwnedFd, String), LandlockError> {
    let key_paths = guard_key_paths(protect, root_child, mounts)?;
    let protected = guard_protected(&key_paths, writable, protect, mounts)?;
    let ancestors: std::collections::HashSet<PathBuf> = protected
        .iter()
        .flat_map(|p| p.ancestors().skip(1).map(Path::to_path_buf))
        .collect();
    let abi_v = ABI::from(abi as i32);
    let all = AccessFs::from_all(abi_v);
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)?
        .scope(guard_scopes(abi))?
        .create()?;
    let guarded = Guarded {
        writable,
        protected: &protected,
        ancestors: &ancestors,
        abi: abi_v,
    };
    let (created, rules, unlisted) = guard_walk(created, &guarded)?;
    let fd: Option<OwnedFd> = created.into();
    let fd = fd.ok_or(LandlockError::NotCreated)?;
    Ok((
        fd,
        format!(
            "Landlock (ABI {abi}) denies the child {} path(s) of the key and the state dir ({rules} rules{})",
            key_paths.len(),
            if unlisted > 0 {
                format!("; {unlisted} directory(ies) on the way this uid cannot list: only the writable paths in them are open to the child")
            } else {
                String::new()
            }
        ),
    ))
}

/// The key's paths (every alias of it), when Landlock can protect it: a
/// single hard link, and no raw disk this uid can read.
fn guard_key_paths(
    protect: &Protect<'_>,
    root_child: bool,
    mounts: &[reach::Mount],
) -> Result<Vec<PathBuf>, LandlockError> {
    let key_paths =
        reach::aliases(protect.key, mounts).map_err(|source| LandlockError::KeyAliases {
            key: protect.key.to_path_buf(),
            source,
        })?;
    let nlink = std::fs::metadata(protect.key).map_or(0, |m| m.nlink());
    if nlink != 1 {
        return Err(LandlockError::KeyHardLinks(nlink));
    }
    // A raw disk this uid can read (group `disk`) holds the key's blocks. (A
    // uid-0 child's devices are its mount namespace's business: a fresh
    // `/dev` without raw disks, or no cover and so no claim at all.)
    if let Some(dev) = (!root_child).then(readable_block_device).flatten() {
        return Err(LandlockError::RawDisk(dev));
    }
    Ok(key_paths)
}

/// Every path the guard denies: the key's, the state dir's, the ledger
/// directory's and credentials' (and their aliases); none may contain or
/// lie within a writable path.
fn guard_protected(
    key_paths: &[PathBuf],
    writable: &[PathBuf],
    protect: &Protect<'_>,
    mounts: &[reach::Mount],
) -> Result<Vec<PathBuf>, LandlockError> {
    let mut protected = key_paths.to_vec();
    for p in [Some(protect.state_dir), protect.ledger_dir]
        .into_iter()
        .flatten()
        .chain(protect.credentials.iter().map(PathBuf::as_path))
    {
        if let Ok(a) = reach::aliases(p, mounts) {
            protected.extend(a);
        }
    }
    for w in writable {
        if protected
            .iter()
            .any(|p| w.starts_with(p) || p.starts_with(w))
        {
            return Err(LandlockError::Overlap(w.clone()));
        }
    }
    Ok(protected)
}

/// ABI 6 scopes: the child may not signal a process outside its domain
/// (a SIGSTOP'd runner enforces no wall time and no cancellation). The
/// abstract unix socket scope of the seccomp form of --no-network is a
/// ruleset of its own ([`abstract_unix_scope`]): it must hold where no
/// guard is built too.
fn guard_scopes(abi: i64) -> landlock::BitFlags<landlock::Scope> {
    let mut scopes = landlock::BitFlags::<landlock::Scope>::empty();
    if abi >= 6 {
        scopes |= landlock::Scope::Signal;
    }
    scopes
}

/// What the guard's walk of the tree goes by.
struct Guarded<'a> {
    writable: &'a [PathBuf],
    protected: &'a [PathBuf],
    /// The directories above a protected path.
    ancestors: &'a std::collections::HashSet<PathBuf>,
    abi: ABI,
}

/// Walk the tree from `/`: each directory above a protected path gets
/// `READ_DIR` and its other entries everything. Returns the ruleset, the
/// number of rules added, and the number of directories this uid could not
/// list.
fn guard_walk(
    mut created: landlock::RulesetCreated,
    g: &Guarded<'_>,
) -> Result<(landlock::RulesetCreated, usize, usize), LandlockError> {
    let (protected, ancestors) = (g.protected, g.ancestors);
    let all = AccessFs::from_all(g.abi);
    let mut rules = 0usize;
    let mut unlisted = 0usize;
    let mut stack = vec![PathBuf::from("/")];
    while let Some(dir) = stack.pop() {
        let fd = PathFd::new(&dir).map_err(at("", &dir))?;
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::ReadDir))
            .map_err(at("", &dir))?;
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // A directory this uid may enter but not list.
                unlisted += 1;
                let (c, n) = unlisted_dir_rules(created, &dir, g, &mut stack)?;
                created = c;
                rules += n;
                continue;
            }
            Err(e) => return Err(at("", &dir)(e)),
        };
        for entry in rd.flatten() {
            let p = entry.path();
            if protected.contains(&p) {
                continue;
            }
            if ancestors.contains(&p) {
                stack.push(p);
                continue;
            }
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_symlink() {
                // Resolved at use, and checked where it points.
                continue;
            }
            let access = if ft.is_dir() {
                all
            } else {
                all & AccessFs::from_file(g.abi)
            };
            let Ok(fd) = PathFd::new(&p) else { continue };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(at("", &p))?;
            rules += 1;
        }
    }
    Ok((created, rules, unlisted))
}

/// A directory this uid may enter but not list (a 0711 scratch root of an
/// outer governed-exec, a shared home): its entries cannot be enumerated,
/// so only the ones known from the paths involved get rules — the way on to
/// the key and state dir, and the writable paths below it; the rest of it
/// is denied to the child, which could not list it either. Directories on
/// the way go onto `stack`; returns the ruleset and the rules added.
fn unlisted_dir_rules(
    mut created: landlock::RulesetCreated,
    dir: &Path,
    g: &Guarded<'_>,
    stack: &mut Vec<PathBuf>,
) -> Result<(landlock::RulesetCreated, usize), LandlockError> {
    let (writable, protected, ancestors) = (g.writable, g.protected, g.ancestors);
    let all = AccessFs::from_all(g.abi);
    let mut rules = 0usize;
    let below = |p: &Path| {
        p.strip_prefix(dir)
            .ok()
            .and_then(|rest| rest.components().next())
            .map(|c| dir.join(c))
    };
    let mut known: Vec<PathBuf> = writable
        .iter()
        .chain(ancestors.iter())
        .filter_map(|p| below(p))
        .collect();
    known.sort();
    known.dedup();
    for p in known {
        if protected.contains(&p) {
            continue;
        }
        if ancestors.contains(&p) {
            stack.push(p);
            continue;
        }
        let Ok(fd) = PathFd::new(&p) else { continue };
        created = created
            .add_rule(PathBeneath::new(fd, all))
            .map_err(at("", &p))?;
        rules += 1;
    }
    Ok((created, rules))
}

/// A path the kernel cannot take (a NUL byte in it).
#[derive(Debug, thiserror::Error)]
#[error("{0} has a NUL byte")]
struct NulInPath(String);

fn cstr(p: &Path) -> Result<CString, NulInPath> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| NulInPath(p.display().to_string()))
}

/// The mount namespace of a root runner's isolated child; the second value
/// says whether every path of the runner key is covered in it.
fn mount_plan(
    req: &IsolationRequest,
    writable: &[PathBuf],
    protect: &Protect<'_>,
    sockets: &[(PathBuf, String)],
    mounts: &[reach::Mount],
) -> Result<(MountPlan, Cover), NulInPath> {
    let mut plan = MountPlan {
        new_cgroup_ns: true,
        fresh_proc: req.pid_namespace,
        ..MountPlan::default()
    };
    let mut covered_key = Cover::Fails("the runner key does not exist yet".to_string());
    if let Ok(aliases) = reach::aliases(protect.key, mounts) {
        for a in &aliases {
            plan.cover_files.push(cstr(a)?);
        }
        let nlink = std::fs::metadata(protect.key).map_or(0, |m| m.nlink());
        covered_key = if nlink == 1 {
            Cover::Holds(format!("{} path(s) of the key covered", aliases.len()))
        } else {
            Cover::Fails(format!(
                "the key file has {nlink} hard links; only paths of the same mount were covered"
            ))
        };
    }
    // Daemon sockets and credential files: `/dev/null` over every path.
    let files = sockets
        .iter()
        .map(|(p, _)| p.as_path())
        .chain(protect.credentials.iter().map(PathBuf::as_path));
    for f in files {
        for a in reach::aliases(f, mounts).unwrap_or_default() {
            let c = cstr(&a)?;
            if !plan.cover_files.contains(&c) {
                plan.cover_files.push(c);
            }
        }
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in [Some(protect.state_dir), protect.ledger_dir]
        .into_iter()
        .flatten()
    {
        if let Ok(aliases) = reach::aliases(d, mounts) {
            // Never cover what the child must use (a workspace inside the state dir).
            for a in aliases {
                if !writable.iter().any(|w| w.starts_with(&a)) && !dirs.contains(&a) {
                    dirs.push(a);
                }
            }
        }
    }
    plan.fresh_sys = mounts
        .iter()
        .any(|m| m.point == Path::new("/sys") && m.fstype == "sysfs");
    for m in mounts {
        let cg = m.fstype == "cgroup" || m.fstype == "cgroup2";
        if cg && !(plan.fresh_sys && m.point.starts_with("/sys")) && !dirs.contains(&m.point) {
            dirs.push(m.point.clone());
        }
    }
    // Deepest first, so every mount point still resolves when it is covered.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in &dirs {
        plan.cover_dirs.push(cstr(d)?);
    }
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let p = Path::new("/dev").join(name);
        let is_char = std::fs::metadata(&p).is_ok_and(|m| m.file_type().is_char_device());
        if !is_char {
            continue;
        }
        if plan.dev_nodes.len() < sys::MAX_DEV_NODES {
            plan.dev_nodes.push(cstr(&p)?);
        }
    }
    Ok((plan, covered_key))
}

/// Writes only beneath `writable`; reads and execution everywhere. Every
/// access right of the kernel's ABI is handled, and the ruleset is a hard
/// requirement: a right the kernel cannot restrict is an error, not a gap.
fn build_ruleset(
    abi: i64,
    writable: &[PathBuf],
    readable: Option<&[PathBuf]>,
) -> Result<OwnedFd, LandlockError> {
    let abi = ABI::from(abi as i32);
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)?
        .create()?;
    let root = [PathBuf::from("/")];
    for p in readable.unwrap_or(&root) {
        let fd = PathFd::new(p).map_err(at("readable path ", p))?;
        let access = if p.is_dir() {
            read
        } else {
            read & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(at("readable path ", p))?;
    }
    for p in writable {
        let fd = PathFd::new(p).map_err(at("writable path ", p))?;
        let access = if Path::new(p).is_dir() {
            all
        } else {
            all & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(at("writable path ", p))?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or(LandlockError::NotCreated)
}

/// Why a Landlock ruleset could not be made: the "why" of an
/// [`Unavailable`] (`--fs-write`/`--fs-read`: [`build_ruleset`]) or of the
/// guard's `Cover::Fails` ([`guard_ruleset`]); the reason is chosen by
/// their callers.
#[derive(Debug, thiserror::Error)]
enum LandlockError {
    #[error(transparent)]
    Ruleset(#[from] landlock::RulesetError),
    /// A path the ruleset names: `role` is `readable path `, `writable
    /// path ` or empty (the guard's walk).
    #[error("{role}{}: {source}", .path.display())]
    Path {
        role: &'static str,
        path: PathBuf,
        #[source]
        source: PathCause,
    },
    #[error("Landlock ruleset was not created")]
    NotCreated,
    #[error("runner key {}: {source}", .key.display())]
    KeyAliases {
        key: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the key file has {0} hard links; Landlock covers paths, not the inode")]
    KeyHardLinks(u64),
    #[error("the block device {} is readable by this uid, and the key's blocks with it", .0.display())]
    RawDisk(PathBuf),
    #[error("{} and the runner's key or state dir contain one another", .0.display())]
    Overlap(PathBuf),
}

/// What failed at one path of a ruleset: opening it, adding its rule, or
/// listing the directory.
#[derive(Debug, thiserror::Error)]
enum PathCause {
    #[error(transparent)]
    Open(#[from] landlock::PathFdError),
    #[error(transparent)]
    Rule(#[from] landlock::RulesetError),
    #[error(transparent)]
    List(#[from] std::io::Error),
}

/// The error at `path` (`role` names it in the message).
fn at<'a, E: Into<PathCause>>(
    role: &'static str,
    path: &'a Path,
) -> impl FnOnce(E) -> LandlockError + 'a {
    move |e| LandlockError::Path {
        role,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words of a ruleset that cannot be made are the receipt's and the
    /// refusal's: `role`, path, then the cause, as they always read.
    #[test]
    fn landlock_errors_read_as_before() {
        let denied = || std::io::Error::from_raw_os_error(libc::EACCES);
        let walk = at("", Path::new("/srv"))(denied());
        assert_eq!(walk.to_string(), "/srv: Permission denied (os error 13)");
        let scope = at("writable path ", Path::new("/w"))(denied());
        assert_eq!(
            scope.to_string(),
            "writable path /w: Permission denied (os error 13)"
        );
        assert_eq!(
            LandlockError::KeyHardLinks(2).to_string(),
            "the key file has 2 hard links; Landlock covers paths, not the inode"
        );
        assert_eq!(
            LandlockError::RawDisk(PathBuf::from("/dev/sda")).to_string(),
            "the block device /dev/sda is readable by this uid, and the key's blocks with it"
        );
        assert_eq!(
            LandlockError::Overlap(PathBuf::from("/s")).to_string(),
            "/s and the runner's key or state dir contain one another"
        );
        assert_eq!(
            LandlockError::KeyAliases {
                key: PathBuf::from("/k"),
                source: denied()
            }
            .to_string(),
            "runner key /k: Permission denied (os error 13)"
        );
        assert_eq!(
            LandlockError::NotCreated.to_string(),
            "Landlock ruleset was not created"
        );
    }

    #[test]
    fn user_namespace_errors_read_as_before() {
        let e = UserNamespaceError::Unshare(nix::errno::Errno::EPERM);
        assert_eq!(
            e.to_string(),
            "unshare(CLONE_NEWUSER): EPERM: Operation not permitted"
        );
        let e = UserNamespaceError::Map {
            file: "/proc/self/uid_map",
            source: std::io::Error::from_raw_os_error(libc::EPERM),
        };
        assert_eq!(
            e.to_string(),
            "writing /proc/self/uid_map: Operation not permitted (os error 1)"
        );
    }
}
