//! The fork-and-exec of the governed child: the spec the parent prepares,
//! `clone3` (or `clone` with `CLONE_PIDFD`, or `fork` + `pidfd_open`), the
//! report of a failed step through a close-on-exec pipe, and throw-away
//! probe children.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::*;

/// The fd number the verified executable is placed at in the child. For a
/// `#!` script it stays open (the kernel hands the interpreter `/dev/fd/3`);
/// for any other file it is close-on-exec.
pub(crate) const CHILD_EXE_FD: RawFd = 3;

/// Close-on-exec fd in the child on which a failed setup step is reported.
pub(crate) const CHILD_ERR_FD: RawFd = 4;

/// Fds the parent passes to the child are moved at or above this number first,
/// so the child's `dup2` onto 0..=4 can never clobber one it still needs.
pub(crate) const HIGH_FD_FLOOR: RawFd = 10;

/// Credentials the child switches to before exec (only when running as root).
#[derive(Debug, Clone, Copy)]
pub struct ChildCreds {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// Everything the forked child needs, prepared before `fork`.
pub struct SpawnSpec<'a> {
    pub exe_fd: RawFd,
    /// Keep the executable fd open across exec (a `#!` script).
    pub exe_is_script: bool,
    pub cwd_fd: RawFd,
    pub stdin_fd: RawFd,
    pub stdout_fd: RawFd,
    pub stderr_fd: RawFd,
    pub argv: &'a [CString],
    pub envp: &'a [CString],
    pub rlimits: &'a [(libc::__rlimit_resource_t, u64)],
    pub creds: Option<ChildCreds>,
    pub landlock_ruleset_fd: Option<RawFd>,
    /// A second Landlock ruleset, stacked on the first: the one that keeps
    /// the runner's key and state dir from a child of the runner's uid.
    pub landlock_guard_fd: Option<RawFd>,
    /// Every filesystem right the guard ruleset handles (its bits), granted
    /// in the child to the fresh `/dev` and `/proc` it mounts for itself:
    /// the ruleset, built before the fork, has no rule for those new inodes.
    pub landlock_guard_access: u64,
    /// A third Landlock ruleset that handles no access right, only scopes:
    /// under the seccomp form of `--no-network`, the abstract unix socket
    /// scope, whether or not a guard is built.
    pub landlock_scope_fd: Option<RawFd>,
    /// cgroup v1 `tasks` files the child moves its one thread into first
    /// (at most [`MAX_V1_TASKS`]; more are ignored).
    pub cgroup_v1_tasks_fds: &'a [RawFd],
    /// A cgroup v2 directory the child is born in (`CLONE_INTO_CGROUP`).
    pub cgroup_v2_dir_fd: Option<RawFd>,
    /// That directory's `cgroup.procs`, which the child writes `0` into
    /// before exec when `clone3` (and so `CLONE_INTO_CGROUP`) is unavailable.
    pub cgroup_v2_procs_fd: Option<RawFd>,
    /// A seccomp filter installed last before exec (`--no-network` where no
    /// network namespace can be made).
    pub seccomp: Option<&'a SocketFilter>,
    /// The syscall policy of an isolated lease (CONTRACT §7), installed
    /// in the child right before `execveat`, after everything else.
    pub syscall_policy: Option<&'a SyscallFilter>,
    /// A new PID namespace whose PID 1 is governed-exec's init (see
    /// `init`): the program is its pid 2.
    pub new_pid_namespace: bool,
    /// A uid-0 child under isolation: its own mount namespace, set up so.
    pub mounts: Option<&'a MountPlan>,
    /// A uid-0 child under isolation keeps only these capabilities (bit
    /// mask) in every set, bounding included.
    pub root_caps_keep: Option<u64>,
}

/// Which setup step of the child failed, reported through the error pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildStep {
    Setsid = 1,
    Cgroup,
    Mount,
    DeathSignal,
    ParentGone,
    Chdir,
    Rlimit,
    Credentials,
    NoNewPrivs,
    Landlock,
    Seccomp,
    Stdio,
    CloseFds,
    Exec,
    SyscallPolicy,
    /// The namespace's init could not fork the program.
    Init,
}

impl ChildStep {
    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        use ChildStep::*;
        [
            Setsid,
            Cgroup,
            Mount,
            DeathSignal,
            ParentGone,
            Chdir,
            Rlimit,
            Credentials,
            NoNewPrivs,
            Landlock,
            Seccomp,
            Stdio,
            CloseFds,
            Exec,
            SyscallPolicy,
            Init,
        ]
        .into_iter()
        .find(|s| *s as u8 == v)
    }
}

pub(crate) const CLONE_PIDFD: u64 = 0x1000;

pub(crate) const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of clone3(2), version 2 (with `cgroup`).
#[repr(C)]
pub(crate) struct CloneArgs {
    pub(crate) flags: u64,
    pub(crate) pidfd: u64,
    pub(crate) child_tid: u64,
    pub(crate) parent_tid: u64,
    pub(crate) exit_signal: u64,
    pub(crate) stack: u64,
    pub(crate) stack_size: u64,
    pub(crate) tls: u64,
    pub(crate) set_tid: u64,
    pub(crate) set_tid_size: u64,
    pub(crate) cgroup: u64,
}

/// How the child was created. `clone3` is the first choice (a pidfd and
/// the v2 cgroup placement in one atomic step); where it is missing or
/// filtered — Docker's default seccomp profile answers it with ENOSYS —
/// `clone` with `CLONE_PIDFD` still hands back a pidfd from birth, and the
/// child joins the v2 group itself before exec; on a kernel without
/// `CLONE_PIDFD` the pid of our own unreaped child is pinned, so a
/// `pidfd_open` right after `fork` names exactly that child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnPath {
    Clone3,
    ClonePidfd,
    ForkPidfdOpen,
}

impl SpawnPath {
    pub fn as_str(self) -> &'static str {
        match self {
            SpawnPath::Clone3 => "clone3",
            SpawnPath::ClonePidfd => "clone_pidfd",
            SpawnPath::ForkPidfdOpen => "fork_pidfd_open",
        }
    }
}

/// Result of [`spawn`].
pub enum Spawned {
    /// The child reached `execveat` successfully.
    Running {
        pid: libc::pid_t,
        pidfd: OwnedFd,
        path: SpawnPath,
        /// Under a new PID namespace, `pid` and `pidfd` are the init's, and
        /// this pipe says how the program ended.
        init: Option<InitStatus>,
    },
    /// A setup step or the exec itself failed; the child has already exited
    /// and been reaped. No program of the request ran.
    Failed {
        step: ChildStep,
        errno: i32,
        path: SpawnPath,
    },
}

/// Errors of `clone3` that mean "not this way here" rather than "not at
/// all": missing (ENOSYS), filtered (EPERM, ENOSYS), or a kernel that knows
/// clone3 but not `CLONE_INTO_CGROUP` (EINVAL, E2BIG). A real failure of
/// the same request fails again on the fallback, with its own errno.
pub(crate) fn clone3_unusable(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENOSYS | libc::EPERM | libc::EINVAL | libc::E2BIG
    )
}

/// Probe `clone3` without creating anything: a null argument of size 0 is
/// EINVAL from a kernel that implements it, and ENOSYS/EPERM from a kernel
/// or seccomp filter that does not let it through. `Ok` means `spawn`
/// starts with clone3; `Err(errno)` means it will fall back.
pub fn clone3_probe() -> Result<(), i32> {
    // SAFETY: a null pointer with size 0 is rejected by the kernel before
    // anything is read or created; no process results from this call.
    let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<CloneArgs>(), 0usize) };
    let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
    if r < 0 && errno == libc::EINVAL {
        Ok(())
    } else {
        Err(errno)
    }
}

/// The most v1 cgroup `tasks` files a child joins (pids, memory, cpuacct,
/// blkio).
pub const MAX_V1_TASKS: usize = 4;

/// Fork the governed child and exec the verified executable through its fd.
pub fn spawn(spec: &SpawnSpec<'_>) -> io::Result<Spawned> {
    // Everything the child touches is prepared here, before fork.
    let exe = dup_high(spec.exe_fd)?;
    let cwd = dup_high(spec.cwd_fd)?;
    let stdin = dup_high(spec.stdin_fd)?;
    let stdout = dup_high(spec.stdout_fd)?;
    let stderr = dup_high(spec.stderr_fd)?;
    let landlock = spec.landlock_ruleset_fd.map(dup_high).transpose()?;
    let landlock_guard = spec.landlock_guard_fd.map(dup_high).transpose()?;
    let landlock_scope = spec.landlock_scope_fd.map(dup_high).transpose()?;
    let cgroup_tasks = spec
        .cgroup_v1_tasks_fds
        .iter()
        .take(MAX_V1_TASKS)
        .map(|fd| dup_high(*fd))
        .collect::<io::Result<Vec<_>>>()?;
    let mut cgroup_tasks_raw = [-1; MAX_V1_TASKS];
    for (slot, f) in cgroup_tasks_raw.iter_mut().zip(&cgroup_tasks) {
        *slot = f.as_raw_fd();
    }
    let cgroup_procs = spec.cgroup_v2_procs_fd.map(dup_high).transpose()?;
    // Under a new PID namespace the child is the namespace's init, which
    // reports the program's end on this pipe (see `init`).
    let (init_status, init_status_w) = if spec.new_pid_namespace {
        let (r, w) = status_pipe()?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    // Decided before the fork: the child reads no environment.
    let init_lost = spec.new_pid_namespace && governed_fault::fail("pid_init_lost");
    let (err_r, err_w_low) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let err_w = dup_high(err_w_low.as_raw_fd())?;
    // Only the child may hold a write end, or EOF would never come.
    drop(err_w_low);
    let mut argv: Vec<*const libc::c_char> = spec.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = spec.envp.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let seccomp_prog = spec.seccomp.map(|f| libc::sock_fprog {
        len: f.prog.len() as libc::c_ushort,
        filter: f.prog.as_ptr() as *mut libc::sock_filter,
    });
    let policy_prog = spec.syscall_policy.map(|f| libc::sock_fprog {
        len: f.prog.len() as libc::c_ushort,
        filter: f.prog.as_ptr() as *mut libc::sock_filter,
    });
    let mut child = ChildPlan {
        exe: exe.as_raw_fd(),
        exe_is_script: spec.exe_is_script,
        cwd: cwd.as_raw_fd(),
        stdio: [stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()],
        err_w: err_w.as_raw_fd(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        rlimits: spec.rlimits,
        creds: spec.creds,
        // Read only when the child will drop capabilities.
        cap_last: if spec.creds.is_some() || spec.root_caps_keep.is_some() {
            cap_last_cap()
        } else {
            0
        },
        ignored: ignored_signals(),
        landlock: landlock.as_ref().map(|f| f.as_raw_fd()),
        landlock_guard: landlock_guard.as_ref().map(|f| f.as_raw_fd()),
        landlock_guard_access: spec.landlock_guard_access,
        landlock_scope: landlock_scope.as_ref().map(|f| f.as_raw_fd()),
        cgroup_tasks: cgroup_tasks_raw,
        mounts: spec.mounts,
        root_caps_keep: spec.root_caps_keep,
        seccomp: seccomp_prog
            .as_ref()
            .map_or(std::ptr::null(), |p| p as *const _),
        syscall_policy: policy_prog
            .as_ref()
            .map_or(std::ptr::null(), |p| p as *const _),
        // Set only when the child must join the v2 group itself.
        cgroup_procs: -1,
        parent: if spec.new_pid_namespace {
            0
        } else {
            // SAFETY: getpid has no preconditions.
            unsafe { libc::getpid() }
        },
        init_status_w: init_status_w.as_ref().map_or(-1, |w| w.as_raw_fd()),
        init_lost,
    };
    let ns_flags = if spec.new_pid_namespace {
        libc::CLONE_NEWPID as u64
    } else {
        0
    };

    let cgroup_procs = cgroup_procs.as_ref().map_or(-1, |f| f.as_raw_fd());
    let (pid, pidfd, path) = fork_child(spec, ns_flags, &mut child, cgroup_procs)?;
    // Only the init may hold a write end of either pipe.
    drop(err_w);
    drop(init_status_w);
    governed_fault::point("after_fork");
    exec_report(&err_r, (pid, pidfd, path), init_status)
}

/// Fork the child by the first mechanism this kernel and its seccomp
/// profile allow (see [`SpawnPath`]).
pub(crate) fn fork_child(
    spec: &SpawnSpec<'_>,
    ns_flags: u64,
    child: &mut ChildPlan<'_>,
    cgroup_procs: RawFd,
) -> io::Result<(libc::pid_t, OwnedFd, SpawnPath)> {
    match clone3_fork(spec, ns_flags, child) {
        Ok((pid, pidfd)) => Ok((pid, pidfd, SpawnPath::Clone3)),
        Err(e) if clone3_unusable(e.raw_os_error().unwrap_or(0)) => {
            child.cgroup_procs = cgroup_procs;
            match clone_pidfd_fork(ns_flags, child) {
                Ok((pid, pidfd)) => Ok((pid, pidfd, SpawnPath::ClonePidfd)),
                // A kernel before CLONE_PIDFD (5.2) rejects the flag.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let (pid, pidfd) = fork_then_pidfd_open(ns_flags, child)?;
                    Ok((pid, pidfd, SpawnPath::ForkPidfdOpen))
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// What the error pipe says once the child exec'd (EOF: running) or failed
/// a setup step (then it has exited, and is reaped here).
pub(crate) fn exec_report(
    err_r: &OwnedFd,
    (pid, pidfd, path): (libc::pid_t, OwnedFd, SpawnPath),
    init: Option<InitStatus>,
) -> io::Result<Spawned> {
    let Some((step, errno)) = read_child_failure(err_r)? else {
        return Ok(Spawned::Running {
            pid,
            pidfd,
            path,
            init,
        });
    };
    if init.is_some() {
        // The init outlives a program that failed a step: end it (it may
        // have exited already; unreaped, its pid still names it).
        let _ = pidfd_send_signal(&pidfd, libc::SIGKILL);
    }
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    let step = ChildStep::from_u8(step).unwrap_or(ChildStep::Exec);
    Ok(Spawned::Failed { step, errno, path })
}

/// The first choice: `clone3` with a pidfd, the new PID namespace if asked,
/// and `CLONE_INTO_CGROUP` when there is a v2 group.
pub(crate) fn clone3_fork(
    spec: &SpawnSpec<'_>,
    ns_flags: u64,
    child: &ChildPlan<'_>,
) -> io::Result<(libc::pid_t, OwnedFd)> {
    let mut flags = CLONE_PIDFD | ns_flags;
    if spec.cgroup_v2_dir_fd.is_some() {
        flags |= CLONE_INTO_CGROUP;
    }
    let mut pidfd_out: libc::c_int = -1;
    let args = CloneArgs {
        flags,
        pidfd: &mut pidfd_out as *mut libc::c_int as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: spec.cgroup_v2_dir_fd.unwrap_or(0) as u64,
    };
    // A fork-like clone3: a null stack makes the child continue on a copy of
    // our stack, as with fork. It returns a pidfd atomically, can place the
    // child in a v2 cgroup and a new PID namespace, and leaves the parent
    // free to create threads (unshare(CLONE_NEWPID) would not).
    // SAFETY: `args` is a valid, fully initialised clone_args of the size we
    // pass; `pidfd_out` outlives the call. The child only runs `child_main`
    // (raw syscalls, no allocation, no locks), so skipping glibc's fork
    // bookkeeping is sound.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    } as libc::pid_t;
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: we are the freshly forked child; see `child_main`.
        unsafe { child_main(child) }
    }
    // SAFETY: with CLONE_PIDFD the kernel stored a new fd that only we own.
    Ok((pid, unsafe { OwnedFd::from_raw_fd(pidfd_out) }))
}

/// The fallback: legacy `clone` with `CLONE_PIDFD`, which also returns the
/// pidfd atomically with the child's birth. No `CLONE_INTO_CGROUP` here:
/// the child joins the v2 group itself (`ChildPlan::cgroup_procs`).
pub(crate) fn clone_pidfd_fork(
    ns_flags: u64,
    child: &ChildPlan<'_>,
) -> io::Result<(libc::pid_t, OwnedFd)> {
    let mut pidfd_out: libc::c_int = -1;
    let flags = CLONE_PIDFD | ns_flags | libc::SIGCHLD as u64;
    let pid = legacy_clone(flags, &mut pidfd_out, child)?;
    // SAFETY: with CLONE_PIDFD the kernel stored a new fd that only we own.
    Ok((pid, unsafe { OwnedFd::from_raw_fd(pidfd_out) }))
}

/// The legacy `clone` syscall with a null stack, which behaves like fork
/// (the child runs on a copy of our stack) and runs only `child_main` in
/// the child. With `CLONE_PIDFD` in `flags` the kernel writes the pidfd
/// through `parent_tid`, which must then point at a live local.
pub(crate) fn legacy_clone(
    flags: u64,
    parent_tid: *mut libc::c_int,
    child: &ChildPlan<'_>,
) -> io::Result<libc::pid_t> {
    // SAFETY: the raw clone syscall with a null stack behaves like fork;
    // `parent_tid` is null or a live local of the caller (written only with
    // CLONE_PIDFD). The argument order (flags, stack, parent_tid,
    // child_tid, tls) is the x86_64/aarch64 one.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            std::ptr::null_mut::<libc::c_void>(),
            parent_tid,
            std::ptr::null_mut::<libc::c_int>(),
            0usize,
        )
    } as libc::pid_t;
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: we are the freshly forked child; see `child_main`.
        unsafe { child_main(child) }
    }
    Ok(pid)
}

/// The last resort: `clone` without `CLONE_PIDFD`, then `pidfd_open`. Our
/// own child's pid cannot be reused before we reap it, so the pidfd names
/// exactly the child we made.
pub(crate) fn fork_then_pidfd_open(
    ns_flags: u64,
    child: &ChildPlan<'_>,
) -> io::Result<(libc::pid_t, OwnedFd)> {
    let pid = legacy_clone(ns_flags | libc::SIGCHLD as u64, std::ptr::null_mut(), child)?;
    match pidfd_open(pid) {
        Ok(fd) => Ok((pid, fd)),
        Err(e) => {
            // No handle, no supervision: take the child down now.
            // SAFETY: kill with integer arguments on our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            Err(e)
        }
    }
}

/// A mount plan being tried in a throwaway child (fork, set up the mount
/// namespace, exit), so a kernel or container that refuses a step is found
/// before a use is spent. Started early and asked for its verdict later,
/// so the child sets up its namespace on the other core while the runner
/// goes on preparing the run (it shares nothing with the runner but the
/// pipe it reports on). Dropped without a verdict, it is killed and
/// reaped: no probe outlives the setup that started it.
pub struct MountProbe {
    pid: libc::pid_t,
    err_r: OwnedFd,
    reaped: bool,
}

impl MountProbe {
    /// Fork the probe. `Err` only when the fork itself fails.
    pub fn start(plan: &MountPlan) -> io::Result<MountProbe> {
        let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let w = err_w.as_raw_fd();
        // Decided before the fork: the child reads no environment.
        let refuse = governed_fault::fail("mount_probe_refused");
        // SAFETY: the child only runs `setup_mounts` (raw async-signal-safe
        // syscalls on memory prepared before the fork) and then `_exit`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: we are the forked child; `setup_mounts` reports
            // through `w` and exits on failure; on success we exit 0 at
            // once. The injected refusal reports EPERM as a refused
            // `mount` would.
            unsafe {
                if refuse {
                    *libc::__errno_location() = libc::EPERM;
                    child_fail(w, ChildStep::Mount);
                }
                setup_mounts(plan, w);
                libc::_exit(0)
            }
        }
        Ok(MountProbe {
            pid,
            err_r,
            reaped: false,
        })
    }

    /// Wait for the probe: `Err` carries the errno of the step that failed.
    pub fn verdict(mut self) -> io::Result<()> {
        let failure = read_child_failure(&self.err_r);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(self.pid), None);
        self.reaped = true;
        match failure? {
            None => Ok(()),
            Some((_, errno)) => Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

impl Drop for MountProbe {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // SAFETY: `pid` is our own child, not yet reaped (only `verdict`
        // reaps it, and says so), so it names no other process.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(self.pid), None);
    }
}

/// What a forked child wrote through `child_fail` before it exited: the
/// failing step and errno, or `None` at EOF (the pipe closed on exec, or on
/// a child that succeeded and exited).
pub(crate) fn read_child_failure(err_r: &OwnedFd) -> io::Result<Option<(u8, i32)>> {
    let mut report = [0u8; 5];
    Ok(match read_full(err_r.as_raw_fd(), &mut report)? {
        0 => None,
        _ => Some((
            report[0],
            i32::from_ne_bytes([report[1], report[2], report[3], report[4]]),
        )),
    })
}

pub(crate) fn read_full(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(fd, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(got)
}

impl std::fmt::Display for ChildStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            ChildStep::Setsid => "setsid",
            ChildStep::Cgroup => "join the run's cgroup",
            ChildStep::Mount => "set up its mount namespace",
            ChildStep::DeathSignal => "set the parent-death signal",
            ChildStep::ParentGone => "start (governed-exec died during fork)",
            ChildStep::Chdir => "enter the cwd",
            ChildStep::Rlimit => "set an rlimit",
            ChildStep::Credentials => "switch uid/gid and drop capabilities",
            ChildStep::NoNewPrivs => "set no_new_privs",
            ChildStep::Landlock => "apply the Landlock ruleset",
            ChildStep::Seccomp => "install the seccomp socket filter",
            ChildStep::Stdio => "set up stdio",
            ChildStep::CloseFds => "close inherited fds",
            ChildStep::Exec => "execveat",
            ChildStep::SyscallPolicy => "install the seccomp syscall policy",
            ChildStep::Init => "start the program under the PID namespace's init (fork)",
        };
        f.write_str(s)
    }
}

/// Why a probe child gave no answer, or the probe's own error in the words
/// it wrote back (text: it crossed a pipe).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("internal: probe_in_child needs a single-threaded process")]
    Threaded,
    #[error("pipe: {0}")]
    Pipe(#[source] nix::errno::Errno),
    #[error("fork: {0}")]
    Fork(#[source] io::Error),
    /// The probe failed; its error as the child wrote it.
    #[error("{0}")]
    Failed(String),
    #[error("the probe child ended unexpectedly: {0:?}")]
    Ended(nix::Result<nix::sys::wait::WaitStatus>),
}

/// Run `probe` in a forked child and return the line it produced (or, when
/// it fails, its error's text). Used by `doctor` to try what `run` would do
/// (enter namespaces, …) without changing itself. Refused unless this
/// process is single-threaded, which is what makes ordinary code
/// (allocation included) safe after `fork`.
pub fn probe_in_child<E: std::fmt::Display>(
    probe: impl FnOnce() -> Result<String, E>,
) -> Result<String, ProbeError> {
    if !single_threaded() {
        return Err(ProbeError::Threaded);
    }
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(ProbeError::Pipe)?;
    // SAFETY: this process is single-threaded (checked above), so the child
    // is a complete copy with no lock held by a vanished thread; it runs
    // `probe`, writes one line and `_exit`s without running destructors.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(ProbeError::Fork(io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(r);
        let (code, line) = match probe() {
            Ok(l) => (0, l),
            Err(e) => (1, e.to_string()),
        };
        let _ = nix::unistd::write(&w, line.as_bytes());
        // SAFETY: leave the child without unwinding or atexit handlers.
        unsafe { libc::_exit(code) }
    }
    drop(w);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = nix::unistd::read(r.as_raw_fd(), &mut chunk) {
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf).to_string();
    match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
        Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(line),
        Ok(nix::sys::wait::WaitStatus::Exited(_, _)) => Err(ProbeError::Failed(line)),
        other => Err(ProbeError::Ended(other)),
    }
}
