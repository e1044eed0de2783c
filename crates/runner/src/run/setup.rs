//! Stage 3, `setup`: everything the child needs, built while the Goal's
//! session is still open and before the use is spent — the private
//! HOME/TMPDIR, isolation (`process::isolation::prepare`, the egress proxy
//! included), the cgroups, the process and memory limits, argv, envp and
//! rlimits, `/dev/null` for stdin. A failure here is a refusal recorded in
//! the session; nothing has been spent.

use std::ffi::CString;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use crate::gate::admission::{Admitted, Refusal};
use crate::gate::reach;
use crate::process::cgroup::RunCgroups;
use crate::process::isolation::Cover;
use crate::process::network::{self, Proxy};
use crate::process::scratch::{self, Scratch};
use crate::process::{env, isolation, process_limit};
use governed_ledger::{GoalSession, Ledger};
use governed_model::Reason;

use super::admit::Admission;
use super::draft::{record_refusal, Stop};
use super::prepare::Inputs;
use super::{beside, new_id};

/// Why the child could not be set up: a refusal after admission, before
/// the use is spent, with the one mapping to its reason.
#[derive(Debug, thiserror::Error)]
pub(super) enum SetupError {
    #[error("cannot create the private HOME/TMPDIR under {bases}: {source}")]
    Scratch {
        bases: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Isolation(#[from] isolation::Unavailable),
    #[error(transparent)]
    ProcessLimit(#[from] process_limit::Unenforceable),
    #[error(transparent)]
    AsUser(#[from] AsUserError),
    #[error("argv contains a NUL byte")]
    NulInArgv,
    #[error("executable {0} lies on a noexec mount: the kernel does not execute files there")]
    Noexec(String),
    #[error("internal: the executable was admitted without its sealed snapshot")]
    NoSnapshot,
    #[error("/dev/null: {0}")]
    DevNull(#[source] std::io::Error),
}

impl SetupError {
    /// The one mapping from a setup failure to the receipt's reason.
    pub(super) fn reason(&self) -> Reason {
        match self {
            SetupError::Scratch { .. } | SetupError::Isolation(_) | SetupError::ProcessLimit(_) => {
                Reason::IsolationUnavailable
            }
            SetupError::AsUser(_)
            | SetupError::Noexec(_)
            | SetupError::NoSnapshot
            | SetupError::DevNull(_) => Reason::ExecFailed,
            SetupError::NulInArgv => Reason::InvalidInput,
        }
    }
}

/// `--as-user UID:GID` could not run the approved executable itself.
#[derive(Debug, thiserror::Error)]
pub(super) enum AsUserError {
    #[error("{path}: {source}")]
    Stat {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--as-user {uid}:{gid} cannot reach {path}: no search permission on {dir} ({modes}); the child may run only what its uid could run itself")]
    NoSearch {
        uid: u32,
        gid: u32,
        path: String,
        dir: String,
        modes: String,
    },
    #[error("--as-user {uid}:{gid} may not {} {path} ({modes}); the child may run only what its uid could run itself", if *.script { "read and execute" } else { "execute" })]
    NoExec {
        uid: u32,
        gid: u32,
        path: String,
        modes: String,
        script: bool,
    },
}

/// The admitted run, carried through the stages: its inputs, the lease and
/// its opened files, the ledger that counts it.
pub(super) struct Run<'a> {
    pub(super) inputs: &'a Inputs,
    pub(super) admitted: Admitted,
    pub(super) ledger: Box<dyn Ledger>,
}

/// The child's rlimits, set just before exec (soft = hard).
pub(super) type Rlimits = Vec<(libc::__rlimit_resource_t, u64)>;

/// What the child will be given, prepared before the use is spent.
pub(super) struct Child {
    pub(super) attempt_id: String,
    pub(super) scratch: Scratch,
    /// The workspace this run is in: the lease's (machine binding) or the
    /// one `run` was pointed at (portable).
    pub(super) workspace_path: PathBuf,
    /// A portable run's git HEAD, read before the child exists.
    pub(super) workspace_git: Option<governed_model::GitCheckout>,
    pub(super) prepared: isolation::Prepared,
    /// Its cgroups, limits, command line and sealed executable.
    pub(super) launch: Launch,
}

/// Ready to spend the use: the run, the child's setup, the open session.
pub(super) struct Ready<'a> {
    pub(super) run: Run<'a>,
    pub(super) child: Child,
    pub(super) session: Box<dyn GoalSession>,
}

/// Stage 3: `Admission` → `Ready`, or a refusal recorded in the session.
pub(super) fn setup(admission: Admission<'_>) -> Result<Ready<'_>, Stop> {
    let Admission {
        inputs,
        mut admitted,
        ledger,
        session,
    } = admission;
    match child(inputs, &mut admitted, &*ledger) {
        Ok(child) => Ok(Ready {
            run: Run {
                inputs,
                admitted,
                ledger,
            },
            child,
            session,
        }),
        // Refusals decided after admission are journaled like admission's,
        // so the audit trail is complete (the session is still held here).
        Err(e) => {
            let r = Refusal {
                reason: e.reason(),
                message: e.to_string(),
                lease: Some(Box::new(admitted.lease.clone())),
            };
            record_refusal(session, &r);
            Err(Stop::Refused(r))
        }
    }
}

/// The child's setup, or why not.
fn child(inputs: &Inputs, admitted: &mut Admitted, led: &dyn Ledger) -> Result<Child, SetupError> {
    let body = &admitted.lease.body;
    let attempt_id = new_id("att");
    // Under a PID namespace governed-exec's init is a process of the run's
    // groups too: the lease's number is the program's, so one more for it.
    let init = u64::from(body.isolation.pid_namespace);
    let make_cgroups = || {
        RunCgroups::create(
            &attempt_id,
            body.limits.max_processes.limit().map(|n| n + init),
            Some(body.limits.memory_bytes),
            inputs.sweep,
        )
    };
    let (cgroups, placed) = if isolation::any_isolation(&body.isolation) {
        // Entering a user namespace needs this process single-threaded,
        // and the mount probe forks: in order, on this thread.
        let placed = place(inputs, admitted, &attempt_id, led)?;
        (make_cgroups(), placed)
    } else {
        // The cgroupfs `mkdir`s wait on the kernel's cgroup lock; the
        // scratch tree and the reach check need none of them meanwhile.
        let (cgroups, placed) = beside(make_cgroups, || place(inputs, admitted, &attempt_id, led));
        (cgroups, placed?)
    };
    let Placed {
        scratch,
        workspace_path,
        workspace_git,
        mut prepared,
    } = placed;
    // The mount plan's probe runs beside the rest; its verdict is asked for
    // on every path, and a refused plan is the cause reported even when a
    // later step failed too (it was found first, as when it was waited for
    // at once).
    let rest = launch(admitted, &scratch, cgroups, &mut prepared);
    prepared.confirm_mounts()?;
    Ok(Child {
        attempt_id,
        scratch,
        workspace_path,
        workspace_git,
        prepared,
        launch: rest?,
    })
}

/// Where the child will be: its scratch tree, its workspace, its isolation.
struct Placed {
    scratch: Scratch,
    workspace_path: PathBuf,
    workspace_git: Option<governed_model::GitCheckout>,
    prepared: isolation::Prepared,
}

/// The scratch HOME/TMPDIR, a portable run's git HEAD, and the isolation
/// the lease asks for (`process::isolation::prepare`).
fn place(
    inputs: &Inputs,
    admitted: &Admitted,
    attempt_id: &str,
    led: &dyn Ledger,
) -> Result<Placed, SetupError> {
    let body = &admitted.lease.body;
    let owner = body.isolation.as_user.map(|u| (u.uid, u.gid));
    let tmpfs_ok = !isolation::any_isolation(&body.isolation);
    let scratch =
        Scratch::create(attempt_id, owner, tmpfs_ok).map_err(|source| SetupError::Scratch {
            bases: scratch::bases(tmpfs_ok)
                .iter()
                .map(|b| b.display().to_string())
                .collect::<Vec<_>>()
                .join(" or "),
            source,
        })?;
    let workspace_path = PathBuf::from(&admitted.workspace.identity.path);
    // A portable receipt's git HEAD is read now, before the child exists:
    // the child cannot choose the commit its receipt attests.
    let workspace_git = body
        .portable
        .is_some()
        .then(|| crate::gate::git::head(&workspace_path))
        .flatten();
    let writable = vec![
        workspace_path.clone(),
        scratch.home.clone(),
        scratch.tmp.clone(),
    ];
    let (ledger_dir, credentials) = led.protected_paths();
    let protect = isolation::Protect {
        key: &inputs.key_path,
        state_dir: &inputs.state_dir,
        ledger_dir: ledger_dir.as_deref(),
        credentials: &credentials,
    };
    let prepared = isolation::prepare(&body.isolation, &writable, &protect)?;
    Ok(Placed {
        scratch,
        workspace_path,
        workspace_git,
        prepared,
    })
}

/// What the child is started with, beyond its scratch dirs and isolation.
pub(super) struct Launch {
    pub(super) cgroups: RunCgroups,
    pub(super) cgroup_v1_tasks: Vec<RawFd>,
    pub(super) process_limit: process_limit::Plan,
    /// `--allow-net`'s egress proxy, until `supervise` finishes it.
    pub(super) proxy: Option<Proxy>,
    pub(super) argv: Vec<CString>,
    pub(super) envp: Vec<CString>,
    pub(super) rlimits: Rlimits,
    /// The sealed copy of the executable that was hashed: what runs.
    pub(super) exe_snapshot: OwnedFd,
    pub(super) devnull: std::fs::File,
}

/// The rest of the child's setup, once its isolation is prepared and its
/// cgroups made: the limits, argv and envp, the sealed executable.
fn launch(
    admitted: &mut Admitted,
    scratch: &Scratch,
    cgroups: RunCgroups,
    prepared: &mut isolation::Prepared,
) -> Result<Launch, SetupError> {
    let body = &admitted.lease.body;
    // The sealed copy is executable by anyone; the file it copies may not
    // be. A child switched to another uid runs only what that uid could
    // run itself.
    if let Some(c) = prepared.creds {
        child_may_execute(&admitted.exe, c.uid, c.gid)?;
    }
    let (process_limit, rlimits) = limits(&body.limits, prepared, &cgroups)?;
    // The egress proxy (CONTRACT §8), started by `isolation::prepare`
    // before the use is spent: listening in the child's namespace, dialling
    // from the runner's.
    let proxy = prepared.proxy.take();
    let (argv, envp) = command_line(&admitted.lease.body, scratch, proxy.is_some())?;
    let exe_snapshot = sealed_exe(admitted)?;
    let devnull = std::fs::File::open("/dev/null").map_err(SetupError::DevNull)?;
    let cgroup_v1_tasks = cgroups.v1_tasks_fds();
    Ok(Launch {
        cgroups,
        cgroup_v1_tasks,
        process_limit,
        proxy,
        argv,
        envp,
        rlimits,
        exe_snapshot,
        devnull,
    })
}

/// The child's process limit and rlimits, recorded in its isolation report.
fn limits(
    l: &governed_model::Limits,
    prepared: &mut isolation::Prepared,
    cgroups: &RunCgroups,
) -> Result<(process_limit::Plan, Rlimits), SetupError> {
    let mut process_limit = process_limit::choose(l.max_processes, prepared.report.uid, cgroups)?;
    if let (true, Some(_), Some(n)) = (
        prepared.report.pid_namespace,
        cgroups.process_limit(),
        l.max_processes.limit(),
    ) {
        // `child` made the pids group one larger, for the init.
        process_limit.report.detail = format!(
            "a pids cgroup made for this run alone, pids.max = {} ({n} for the program's processes, 1 for governed-exec's init of its PID namespace)",
            n + 1
        );
    }
    prepared.report.process_limit = process_limit.report.mechanism.clone();
    prepared.report.process_limit_evadable = process_limit::evadable(
        &process_limit.report.mechanism,
        prepared.report.uid,
        prepared.mounts.is_some() && root_child_guarded(prepared),
        cgroups,
    );
    let rlimits = rlimits(l, prepared, cgroups, &process_limit);
    Ok((process_limit, rlimits))
}

/// argv and envp, as execve takes them.
fn command_line(
    body: &governed_model::LeaseBody,
    scratch: &Scratch,
    proxy: bool,
) -> Result<(Vec<CString>, Vec<CString>), SetupError> {
    let mut child_env = env::child_env(&body.env, &scratch.home, &scratch.tmp);
    if proxy {
        child_env.extend(network::proxy_env());
    }
    let envp: Vec<CString> = child_env
        .iter()
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect();
    let mut argv: Vec<CString> = Vec::with_capacity(body.request.argv.len() + 1);
    for a in std::iter::once(&body.request.executable).chain(&body.request.argv) {
        match CString::new(a.as_bytes()) {
            Ok(c) => argv.push(c),
            Err(_) => {
                return Err(SetupError::NulInArgv);
            }
        }
    }
    Ok((argv, envp))
}

/// The sealed copy that was hashed is what runs; it must not become a way
/// to execute a file the kernel would refuse (a `noexec` mount).
fn sealed_exe(admitted: &mut Admitted) -> Result<OwnedFd, SetupError> {
    if admitted.exe.on_noexec_mount {
        return Err(SetupError::Noexec(
            admitted.exe.identity.canonical_path.clone(),
        ));
    }
    admitted.exe.snapshot.take().ok_or(SetupError::NoSnapshot)
}

/// The child's rlimits; records in the isolation report which memory limit
/// applies and whether the child could leave it.
fn rlimits(
    l: &governed_model::Limits,
    prepared: &mut isolation::Prepared,
    cgroups: &RunCgroups,
    process_limit: &process_limit::Plan,
) -> Rlimits {
    let mut rlimits = vec![
        (libc::RLIMIT_CPU, l.cpu_time_s),
        (libc::RLIMIT_NOFILE, l.max_open_files),
        (libc::RLIMIT_FSIZE, l.max_file_size_bytes),
        (libc::RLIMIT_CORE, 0),
    ];
    // CONTRACT §9: the memory cgroup limits resident memory of the whole
    // run; only without one does the v1.1 limit on each process's virtual
    // address space apply (it would break programs that reserve large
    // ranges they never touch: JVMs, V8, ASan).
    let covered = prepared.mounts.is_some() && root_child_guarded(prepared);
    let uid = prepared.report.uid;
    let evadable = match cgroups.memory_limit() {
        Some(kind) => {
            prepared.report.memory_limit = Some(kind.into());
            cgroups.leavable_by(uid, covered)
        }
        None => {
            rlimits.push((libc::RLIMIT_AS, l.memory_bytes));
            prepared.report.memory_limit = Some("rlimit_as".into());
            // Only CAP_SYS_RESOURCE raises a hard limit: a uid-0 child
            // keeps it unless isolation dropped its capabilities.
            uid == 0
                && prepared.report.capabilities_kept.is_none()
                && governed_sys::has_effective_capability(governed_sys::CAP_SYS_RESOURCE)
        }
    };
    prepared.report.memory_limit_evadable = Some(evadable);
    if let Some(n) = process_limit.rlimit_nproc {
        rlimits.push((libc::RLIMIT_NPROC, n));
    }
    rlimits
}

/// Whether uid `uid` (group `gid`, no supplementary groups, no
/// capabilities: what `--as-user` leaves) could execute the file the sealed
/// copy was made from, as the kernel checks it: search on every directory
/// above it, execute on the file, and read too for a `#!` script (its
/// interpreter reads it).
fn child_may_execute(
    exe: &crate::gate::identity::OpenedExecutable,
    uid: u32,
    gid: u32,
) -> Result<(), AsUserError> {
    let ids = reach::ChildIds::switched(uid, gid);
    let path = Path::new(&exe.identity.canonical_path);
    let stat = |p: &Path| {
        let path = p.display().to_string();
        move |source| AsUserError::Stat { path, source }
    };
    for dir in path.ancestors().skip(1) {
        let meta = std::fs::metadata(dir).map_err(stat(dir))?;
        if !ids.may(&meta, 1) {
            return Err(AsUserError::NoSearch {
                uid,
                gid,
                path: path.display().to_string(),
                dir: dir.display().to_string(),
                modes: reach::mode_text(&meta),
            });
        }
    }
    let meta = exe.file.metadata().map_err(stat(path))?;
    let want = if exe.identity.interpreter.is_some() {
        5
    } else {
        1
    };
    if ids.may(&meta, want) {
        Ok(())
    } else {
        Err(AsUserError::NoExec {
            uid,
            gid,
            path: path.display().to_string(),
            modes: reach::mode_text(&meta),
            script: want == 5,
        })
    }
}

/// A uid-0 child under isolation with its Landlock guard in place (no
/// mount, not even in a user namespace of its own); `true` for a child that
/// dropped to `--as-user`, which cannot map uid 0 in a user namespace.
pub(super) fn root_child_guarded(prepared: &isolation::Prepared) -> bool {
    prepared.creds.is_some() || prepared.key_landlocked.as_ref().is_some_and(Cover::holds)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A HOME that cannot be made is the isolation the lease asked for
    /// failing; an executable the child may not run is `exec_failed`.
    #[test]
    fn each_setup_failure_maps_to_its_reason() {
        let io = || std::io::Error::from_raw_os_error(libc::EACCES);
        let cases = [
            (
                SetupError::Scratch {
                    bases: "/tmp".into(),
                    source: io(),
                },
                Reason::IsolationUnavailable,
            ),
            (
                SetupError::ProcessLimit(process_limit::Unenforceable {
                    limit: 5,
                    why: vec![],
                }),
                Reason::IsolationUnavailable,
            ),
            (
                SetupError::AsUser(AsUserError::Stat {
                    path: "/x".into(),
                    source: io(),
                }),
                Reason::ExecFailed,
            ),
            (SetupError::Noexec("/x".into()), Reason::ExecFailed),
            (SetupError::NoSnapshot, Reason::ExecFailed),
            (SetupError::DevNull(io()), Reason::ExecFailed),
            (SetupError::NulInArgv, Reason::InvalidInput),
        ];
        for (e, want) in cases {
            assert_eq!(e.reason(), want, "{e}");
        }
    }
}
