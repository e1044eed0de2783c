//! Opt-in isolation (CONTRACT §7): each option is either enforced or the run
//! is refused with `isolation_unavailable` — never silently downgraded.
//!
//! Everything that can fail is done here, in the parent and before the
//! `executing` record, so a refusal spends no use: the Landlock ruleset is
//! built into an fd (the child only calls `landlock_restrict_self`), the
//! network namespace is unshared (the parent never uses the network), and
//! the rights to create a PID namespace (which `spawn` does with `clone`)
//! and to switch uid are checked.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, ABI,
};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{getegid, geteuid};

use crate::model::{IsolationReport, IsolationRequest};
use crate::sys::{self, ChildCreds};

pub struct Prepared {
    pub creds: Option<ChildCreds>,
    pub landlock_fd: Option<OwnedFd>,
    pub report: IsolationReport,
}

pub fn boundary_text(req: &IsolationRequest, uid: u32) -> String {
    let mut parts = Vec::new();
    let sandboxed =
        req.as_user.is_some() || req.fs_write.is_some() || req.no_network || req.pid_namespace;
    if sandboxed {
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
    parts.push(if req.no_network {
        "it has no network but its own loopback".into()
    } else {
        "it can use the network".into()
    });
    if req.pid_namespace {
        parts.push(
            "it is PID 1 of its own PID namespace and cannot see or signal host processes by pid"
                .into(),
        );
    }
    parts.join("; ")
}

fn unavailable(what: &str, why: impl std::fmt::Display) -> String {
    format!("{what} cannot be enforced here: {why}")
}

/// Check and set up everything the lease asks for; `writable` are the
/// directories always writable under a Landlock scope (workspace, HOME, TMPDIR).
pub fn prepare(req: &IsolationRequest, writable: &[PathBuf]) -> Result<Prepared, String> {
    let euid = geteuid().as_raw();
    let creds = match req.as_user {
        Some(u) if euid != 0 => {
            return Err(unavailable(
                &format!("--as-user {}:{}", u.uid, u.gid),
                format!("governed-exec runs as uid {euid}; switching uid needs root"),
            ))
        }
        Some(u) => Some(ChildCreds {
            uid: u.uid,
            gid: u.gid,
        }),
        None => None,
    };
    let (child_uid, child_gid) = creds.map_or((euid, getegid().as_raw()), |c| (c.uid, c.gid));

    let mut landlock_abi = None;
    let mut landlock_writable = Vec::new();
    let landlock_fd = match &req.fs_write {
        None => None,
        Some(extra) => {
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
            landlock_abi = Some(abi);
            landlock_writable = paths.iter().map(|p| p.display().to_string()).collect();
            Some(fd)
        }
    };
    if req.no_network {
        unshare(CloneFlags::CLONE_NEWNET)
            .map_err(|e| unavailable("--no-network", format!("unshare(CLONE_NEWNET): {e}")))?;
        sys::loopback_up()
            .map_err(|e| unavailable("--no-network", format!("bringing up loopback: {e}")))?;
    }
    // The PID namespace is created by the spawn itself (clone with
    // CLONE_NEWPID); here we only check that we hold what it needs.
    const CAP_SYS_ADMIN: u32 = 21;
    if req.pid_namespace && !sys::has_effective_capability(CAP_SYS_ADMIN) {
        return Err(unavailable(
            "--pid-namespace",
            "creating a PID namespace needs CAP_SYS_ADMIN, which governed-exec does not hold",
        ));
    }
    let report = IsolationReport {
        boundary: boundary_text(req, child_uid),
        os_sandbox: req.as_user.is_some()
            || req.fs_write.is_some()
            || req.no_network
            || req.pid_namespace,
        uid: child_uid,
        gid: child_gid,
        no_new_privs: true,
        inherited_fds_closed: true,
        parent_death_signal: true,
        capabilities_dropped: creds.is_some(),
        landlock_abi,
        landlock_writable,
        landlock_readable: req.fs_read.clone().unwrap_or_default(),
        network_namespace: req.no_network,
        pid_namespace: req.pid_namespace,
        // Replaced by the pids cgroup's kind when `run` gets one.
        process_limit: "rlimit_nproc (counts every process of the uid)".into(),
        kernel_view: None,
    };
    Ok(Prepared {
        creds,
        landlock_fd,
        report,
    })
}

/// Writes only beneath `writable`; reads and execution everywhere. Every
/// access right of the kernel's ABI is handled, and the ruleset is a hard
/// requirement: a right the kernel cannot restrict is an error, not a gap.
fn build_ruleset(
    abi: i64,
    writable: &[PathBuf],
    readable: Option<&[PathBuf]>,
) -> Result<OwnedFd, String> {
    let abi = ABI::from(abi as i32);
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(|e| e.to_string())?
        .create()
        .map_err(|e| e.to_string())?;
    let root = [PathBuf::from("/")];
    for p in readable.unwrap_or(&root) {
        let fd = PathFd::new(p).map_err(|e| format!("readable path {}: {e}", p.display()))?;
        let access = if p.is_dir() {
            read
        } else {
            read & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("readable path {}: {e}", p.display()))?;
    }
    for p in writable {
        let fd = PathFd::new(p).map_err(|e| format!("writable path {}: {e}", p.display()))?;
        let access = if Path::new(p).is_dir() {
            all
        } else {
            all & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("writable path {}: {e}", p.display()))?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| "Landlock ruleset was not created".to_string())
}
