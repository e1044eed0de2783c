//! Stages 5 and 6, `spawn` and `supervise`. `spawn` turns a `Spent` into the
//! plan `process::supervise` runs — the plan carries the ledger's
//! `Committed`, which only a spent use has. `supervise` starts the child,
//! watches it and kills and confirms gone everything it started (its
//! `TreeOwner` does so on every path), and only then returns an `Ended`:
//! what `classify` and `seal` are built from.

use std::os::fd::AsRawFd;

use nix::sys::signalfd::SignalFd;

use crate::process::network::Proxy;
use crate::process::supervise::{self, RunResult, SuperviseError};
use governed_model::NetworkReport;
use governed_sys::SpawnSpec;

use super::commit::Spent;

/// Stage 5: what the child is started with, from a spent use only.
pub(super) fn spawn<'a>(
    spent: &'a Spent<'_>,
    signals: &'a mut SignalFd,
    mirror: bool,
) -> supervise::Plan<'a> {
    let (admitted, child) = (&spent.run.admitted, &spent.child);
    let prepared = &child.prepared;
    let spec = SpawnSpec {
        exe_fd: child.launch.exe_snapshot.as_raw_fd(),
        exe_is_script: admitted.exe.identity.interpreter.is_some(),
        cwd_fd: admitted.cwd.file.as_raw_fd(),
        stdin_fd: child.launch.devnull.as_raw_fd(),
        stdout_fd: -1,
        stderr_fd: -1,
        argv: &child.launch.argv,
        envp: &child.launch.envp,
        rlimits: &child.launch.rlimits,
        creds: prepared.creds,
        landlock_ruleset_fd: prepared.landlock_fd.as_ref().map(|f| f.as_raw_fd()),
        landlock_guard_fd: prepared.landlock_guard_fd.as_ref().map(|f| f.as_raw_fd()),
        landlock_guard_access: prepared.landlock_guard_access,
        landlock_scope_fd: prepared.landlock_scope_fd.as_ref().map(|f| f.as_raw_fd()),
        cgroup_v1_tasks_fds: &child.launch.cgroup_v1_tasks,
        cgroup_v2_dir_fd: child.launch.cgroups.v2_dir_fd(),
        cgroup_v2_procs_fd: child.launch.cgroups.v2_procs_fd(),
        seccomp: prepared.seccomp.as_ref(),
        syscall_policy: prepared.syscall_policy.as_ref(),
        new_pid_namespace: admitted.lease.body.isolation.pid_namespace,
        mounts: prepared.mounts.as_ref(),
        root_caps_keep: prepared.root_caps_keep,
    };
    supervise::Plan {
        spec,
        limits: admitted.lease.body.limits,
        mirror: supervise::Mirror::for_stderr(mirror),
        signals,
        cgroups: &child.launch.cgroups,
        committed: spent.committed(),
    }
}

/// How the run ended, once every process of it is gone (or the outcome
/// says that is not known). Made only by `supervise`.
pub(super) struct Ended {
    pub(super) result: Result<RunResult, SuperviseError>,
    /// What the egress proxy carried, cut and counted after the run.
    pub(super) network: Option<NetworkReport>,
    _sealed: (),
}

/// Stage 6: run the plan to its confirmed end.
pub(super) fn supervise(plan: supervise::Plan<'_>, proxy: Option<Proxy>) -> Ended {
    let fence = supervise::CommandFence::open(plan.mirror);
    let result = supervise::run(plan);
    // Every reader of the child's pipes has ended: workflow commands resume.
    drop(fence);
    // Every process of the run is gone (or the outcome says it is not
    // known): what is still open through the proxy is cut and counted.
    let network = proxy.map(Proxy::finish);
    Ended {
        result,
        network,
        _sealed: (),
    }
}
