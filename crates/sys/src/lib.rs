//! The only module with `unsafe`: raw syscalls the safe crates do not cover.
//!
//! Everything here is a thin, documented wrapper. The one large piece is
//! [`spawn`], the fork-and-exec of the governed child: between `fork` and
//! `execveat` the child may only make async-signal-safe raw syscalls, so every
//! argument (argv/envp pointer arrays, rlimits, fd numbers, credentials, the
//! Landlock ruleset fd) is prepared by the parent before `fork`, and the child
//! reports a failing step through a close-on-exec pipe instead of panicking.

pub mod safe_io;
pub mod wait;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The fd number the verified executable is placed at in the child. For a
/// `#!` script it stays open (the kernel hands the interpreter `/dev/fd/3`);
/// for any other file it is close-on-exec.
pub(crate) const CHILD_EXE_FD: RawFd = 3;
/// Close-on-exec fd in the child on which a failed setup step is reported.
const CHILD_ERR_FD: RawFd = 4;
/// Fds the parent passes to the child are moved at or above this number first,
/// so the child's `dup2` onto 0..=4 can never clobber one it still needs.
const HIGH_FD_FLOOR: RawFd = 10;

fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `pidfd_open(2)`: a handle to one process that can never name another one
/// after the pid is reused.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments; on success it returns a new
    // fd that nothing else owns.
    let fd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_send_signal(2)`.
pub fn pidfd_send_signal(pidfd: &OwnedFd, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: integer arguments and a null siginfo pointer, which the syscall
    // documents as "behave like kill(2)".
    cvt(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })?;
    Ok(())
}

/// Mark this process a child subreaper: orphaned descendants (double fork,
/// `setsid` daemons) are re-parented to us instead of to init, so they stay
/// ours to find, kill and reap.
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    cvt(r as libc::c_long).map(|_| ())
}

/// Birth time of the file behind `fd`, in nanoseconds since the epoch, when
/// the filesystem reports one (`statx` with `STATX_BTIME`).
pub fn birth_time_ns(fd: RawFd) -> Option<i64> {
    // SAFETY: an all-zero `statx` is a valid value of this plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: `fd` is a valid open fd owned by the caller, `empty` is a valid
    // NUL-terminated string, and `stx` is a properly sized out-buffer.
    let r = unsafe {
        libc::statx(
            fd,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BTIME,
            &mut stx,
        )
    };
    if r != 0 || stx.stx_mask & libc::STATX_BTIME == 0 {
        return None;
    }
    Some(stx.stx_btime.tv_sec * 1_000_000_000 + i64::from(stx.stx_btime.tv_nsec))
}

/// The inode generation (`FS_IOC_GETVERSION`), which changes when an inode
/// number is reused, where the filesystem supports it.
pub fn inode_generation(fd: RawFd) -> Option<i64> {
    const FS_IOC_GETVERSION: libc::c_ulong = 0x8008_7601;
    let mut generation: libc::c_long = 0;
    // SAFETY: the ioctl writes one `long` into `generation`, which outlives it.
    let r = unsafe { libc::ioctl(fd, FS_IOC_GETVERSION as _, &mut generation) };
    (r == 0).then_some(generation as i64)
}

/// The Landlock ABI version the running kernel offers, or `None`.
pub fn landlock_abi_version() -> Option<i64> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: documented probe form of the syscall: null attr, size 0, the
    // VERSION flag; it returns a number, not an fd.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (r > 0).then_some(r as i64)
}

/// The highest capability number this kernel knows.
pub(crate) fn cap_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// The signals this process ignores, as `/proc/self/status` (`SigIgn`)
/// reports them: bit `n - 1` for signal `n`. Every bit is set when that
/// cannot be read, so a caller resetting "the ignored ones" resets all.
pub(crate) fn ignored_signals() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(u64::MAX)
}

/// `CAP_SYS_RESOURCE`: raise a hard rlimit.
pub const CAP_SYS_RESOURCE: u32 = 24;

/// Whether this process holds `cap` in its effective set: one `capget(2)`
/// (version 3, two 32-bit words), instead of reading and parsing
/// `/proc/self/status` on the run's path. A failed call holds nothing.
pub fn has_effective_capability(cap: u32) -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    if cap >= 64 {
        return false;
    }
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget with a version-3 header writes exactly two `Data`
    // structs (the kernel's `__user_cap_data_struct`, three u32s each) into
    // `data`, which is that size; both pointers are valid for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return false;
    }
    data[(cap / 32) as usize].effective & (1u32 << (cap % 32)) != 0
}

/// Bring the loopback interface up in the current (fresh) network namespace.
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: creating a socket has no memory-safety preconditions.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `sock` was just created and is owned only here.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: an all-zero ifreq is valid; we fill the name and flags below.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags union of `req`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just initialised the flags member of the union.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads `req`, which is fully initialised.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Move `fd` to a number at or above [`HIGH_FD_FLOOR`], close-on-exec.
pub(crate) fn dup_high(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC duplicates a caller-owned fd into a fresh one.
    let r = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD_FLOOR) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `r` is a new fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Make this process non-dumpable: `/proc/<self>/{mem,fd,root,environ}` and
/// ptrace then need CAP_SYS_PTRACE, even for a process of the same uid.
pub fn set_non_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    cvt(r as libc::c_long).map(|_| ())
}

/// Whether this process is dumpable (`PR_GET_DUMPABLE`).
pub fn is_dumpable() -> bool {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 1 }
}

/// Make this process dumpable again. A non-dumpable process's `/proc/self`
/// files belong to root, so an unprivileged runner must be dumpable for the
/// moment it writes its own `uid_map`/`gid_map` (no child exists yet then).
pub fn set_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    cvt(r as libc::c_long).map(|_| ())
}

/// What a uid-0 child does in its own mount namespace before exec, so that
/// nothing it can still do reaches the runner's key, state dir or cgroups.
/// All strings and fds are prepared by the parent.
#[derive(Default)]
pub struct MountPlan {
    /// Also unshare the cgroup namespace (rooted at the run's cgroups).
    pub new_cgroup_ns: bool,
    /// Files covered by a bind mount of `/dev/null` (the key and its aliases).
    pub cover_files: Vec<CString>,
    /// Directories covered by an empty read-only tmpfs, in this order.
    pub cover_dirs: Vec<CString>,
    /// Bind `/sys` onto itself without the mounts beneath it (cgroupfs,
    /// bpf, debugfs, securityfs), read-only.
    pub fresh_sys: bool,
    /// A fresh tmpfs on `/dev` holding only these device nodes (at most
    /// [`MAX_DEV_NODES`]), each a bind of the host's node of the same path.
    pub dev_nodes: Vec<CString>,
    /// Mount a fresh `/proc` (the child's PID namespace).
    pub fresh_proc: bool,
}

/// How many device nodes a [`MountPlan`] may carry into the fresh `/dev`.
pub const MAX_DEV_NODES: usize = 8;

/// `/proc/self/fd/<fd>` into `buf`, NUL-terminated, without allocating.
fn fd_path(fd: RawFd, buf: &mut [u8; 32]) -> *const libc::c_char {
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 12];
    let mut n = fd.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[prefix.len() + i] = digits[len - 1 - i];
    }
    buf[prefix.len() + len] = 0;
    buf.as_ptr().cast()
}

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
    /// The child is PID 1 of a new PID namespace: its parent is outside it
    /// and `getppid()` reads 0 there.
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
}

impl ChildStep {
    fn from_u8(v: u8) -> Option<Self> {
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
        ]
        .into_iter()
        .find(|s| *s as u8 == v)
    }
}

const CLONE_PIDFD: u64 = 0x1000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of clone3(2), version 2 (with `cgroup`).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
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
        /// Under a new PID namespace: whether the main process's exit is
        /// watched through ptrace ([`ExitTrace`]).
        exit_trace: ExitTrace,
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
fn clone3_unusable(errno: i32) -> bool {
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

/// Whether the main process's exit is watched through ptrace. Under a new
/// PID namespace the kernel kills every other process of the namespace as
/// part of PID 1's exit, before any wait can report it; seized with
/// `PTRACE_O_TRACEEXIT`, the main process stops at the start of its exit
/// while the rest of its namespace is still alive and can be counted
/// (CONTRACT §7: `no_leftover_processes` means the same under every
/// isolation). Only that exit stop and the stops ptrace imposes (signal
/// delivery, group-stop) are handled; each is resumed at once as the
/// kernel would have run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitTrace {
    /// No new PID namespace: the runner sees leftovers after main exits.
    NotAsked,
    /// Seized: the exit stop will come.
    Seized,
    /// `PTRACE_SEIZE` failed with this errno (a seccomp profile, Yama's
    /// mode 3, a kernel without it): the namespace's teardown is unobserved.
    Refused(i32),
}

/// The handshake by which the parent seizes the child before it runs
/// anything: the child says it is ready (seizable), the parent seizes it
/// and says go.
struct TraceHandshake {
    ready_r: OwnedFd,
    ready_w: OwnedFd,
    go_r: OwnedFd,
    go_w: OwnedFd,
}

impl TraceHandshake {
    fn new() -> io::Result<TraceHandshake> {
        let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (go_r, go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        Ok(TraceHandshake {
            ready_r,
            ready_w: dup_high(ready_w.as_raw_fd())?,
            go_r: dup_high(go_r.as_raw_fd())?,
            go_w,
        })
    }

    fn child_ends(&self) -> [RawFd; 2] {
        [self.ready_w.as_raw_fd(), self.go_r.as_raw_fd()]
    }

    fn parent_ends(&self) -> [RawFd; 2] {
        [self.ready_r.as_raw_fd(), self.go_w.as_raw_fd()]
    }

    /// In the parent, after the fork: wait for the child to be seizable,
    /// seize it, and let it go on whatever the answer.
    fn seize(self, pid: libc::pid_t) -> ExitTrace {
        let TraceHandshake {
            ready_r,
            ready_w,
            go_r,
            go_w,
        } = self;
        drop((ready_w, go_r));
        let mut byte = [0u8; 1];
        let trace = match read_full(ready_r.as_raw_fd(), &mut byte) {
            // As a seccomp profile that denies ptrace would answer.
            Ok(1) if governed_fault::fail("ptrace_refused") => ExitTrace::Refused(libc::EPERM),
            Ok(1) => {
                // SAFETY: PTRACE_SEIZE on our own child with integer
                // arguments; no memory is passed.
                let r = unsafe {
                    libc::ptrace(
                        libc::PTRACE_SEIZE,
                        pid,
                        std::ptr::null_mut::<libc::c_void>(),
                        libc::PTRACE_O_TRACEEXIT as libc::c_long,
                    )
                };
                if r == 0 {
                    ExitTrace::Seized
                } else {
                    ExitTrace::Refused(io::Error::last_os_error().raw_os_error().unwrap_or(0))
                }
            }
            // The child is gone before it was ready; the error pipe says why.
            _ => ExitTrace::Refused(libc::ESRCH),
        };
        let _ = nix::unistd::write(&go_w, &[1]);
        trace
    }
}

/// A ptrace-stop of the traced main process, taken off the wait queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceStop {
    /// `PTRACE_EVENT_EXIT`: the process has begun to exit; the rest of its
    /// PID namespace is still alive.
    Exit,
    /// A group-stop (`PTRACE_EVENT_STOP`) with this signal.
    Group(i32),
    /// A signal about to be delivered.
    Signal(i32),
}

/// Take one pending ptrace-stop of `pid` off the wait queue, if there is
/// one. Only stops: an exit stays queued for `waitid(WEXITED)`.
pub fn trace_take_stop(pid: libc::pid_t) -> io::Result<Option<TraceStop>> {
    // SAFETY: an all-zero siginfo_t is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only into `info`, which we own.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WSTOPPED | libc::WNOHANG,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: waitid filled a SIGCHLD siginfo (or left it zeroed: pid 0).
    let (from, status) = unsafe { (info.si_pid(), info.si_status()) };
    if from == 0 {
        return Ok(None);
    }
    let (sig, event) = (status & 0xff, status >> 8);
    Ok(Some(match event {
        libc::PTRACE_EVENT_EXIT => TraceStop::Exit,
        libc::PTRACE_EVENT_STOP => TraceStop::Group(sig),
        _ => TraceStop::Signal(sig),
    }))
}

/// Let a stopped tracee go on as the kernel would have run it untraced:
/// the exit continues (and the trace ends), a signal is delivered, a real
/// group-stop stays stopped until SIGCONT (`PTRACE_LISTEN`).
pub fn trace_resume(pid: libc::pid_t, stop: TraceStop) -> io::Result<()> {
    let stop_signal = |s: i32| {
        matches!(
            s,
            libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
        )
    };
    let (request, data) = match stop {
        TraceStop::Exit => (libc::PTRACE_DETACH, 0),
        TraceStop::Group(s) if stop_signal(s) => (libc::PTRACE_LISTEN, 0),
        TraceStop::Group(_) => (libc::PTRACE_CONT, 0),
        TraceStop::Signal(s) => (libc::PTRACE_CONT, s),
    };
    // SAFETY: a ptrace request on our own stopped tracee with integer
    // arguments; no memory is passed.
    let r = unsafe {
        libc::ptrace(
            request,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            data as libc::c_long,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

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
    // Under a new PID namespace the main process is seized before it runs
    // anything of its own (see `ExitTrace`): a two-pipe handshake.
    let handshake = if spec.new_pid_namespace {
        Some(TraceHandshake::new()?)
    } else {
        None
    };
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
        cgroup_tasks: cgroup_tasks_raw,
        mounts: spec.mounts,
        root_caps_keep: spec.root_caps_keep,
        seccomp: seccomp_prog
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
        trace_child_ends: handshake
            .as_ref()
            .map_or([-1, -1], TraceHandshake::child_ends),
        trace_parent_ends: handshake
            .as_ref()
            .map_or([-1, -1], TraceHandshake::parent_ends),
    };
    let ns_flags = if spec.new_pid_namespace {
        libc::CLONE_NEWPID as u64
    } else {
        0
    };

    let cgroup_procs = cgroup_procs.as_ref().map_or(-1, |f| f.as_raw_fd());
    let (pid, pidfd, path) = fork_child(spec, ns_flags, &mut child, cgroup_procs)?;
    drop(err_w);
    let exit_trace = match handshake {
        Some(h) => h.seize(pid),
        None => ExitTrace::NotAsked,
    };
    governed_fault::point("after_fork");
    exec_report(&err_r, (pid, pidfd, path), exit_trace)
}

/// Fork the child by the first mechanism this kernel and its seccomp
/// profile allow (see [`SpawnPath`]).
fn fork_child(
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
fn exec_report(
    err_r: &OwnedFd,
    (pid, pidfd, path): (libc::pid_t, OwnedFd, SpawnPath),
    exit_trace: ExitTrace,
) -> io::Result<Spawned> {
    let Some((step, errno)) = read_child_failure(err_r)? else {
        return Ok(Spawned::Running {
            pid,
            pidfd,
            path,
            exit_trace,
        });
    };
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    let step = ChildStep::from_u8(step).unwrap_or(ChildStep::Exec);
    Ok(Spawned::Failed { step, errno, path })
}

/// The first choice: `clone3` with a pidfd, the new PID namespace if asked,
/// and `CLONE_INTO_CGROUP` when there is a v2 group.
fn clone3_fork(
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
fn clone_pidfd_fork(ns_flags: u64, child: &ChildPlan<'_>) -> io::Result<(libc::pid_t, OwnedFd)> {
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
fn legacy_clone(
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
fn fork_then_pidfd_open(
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
fn read_child_failure(err_r: &OwnedFd) -> io::Result<Option<(u8, i32)>> {
    let mut report = [0u8; 5];
    Ok(match read_full(err_r.as_raw_fd(), &mut report)? {
        0 => None,
        _ => Some((
            report[0],
            i32::from_ne_bytes([report[1], report[2], report[3], report[4]]),
        )),
    })
}

fn read_full(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
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

/// The kernel's `struct sigaction` (x86_64 and aarch64 layout, with a
/// 64-bit mask), for the raw `rt_sigaction` syscall.
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

struct ChildPlan<'a> {
    exe: RawFd,
    exe_is_script: bool,
    cwd: RawFd,
    stdio: [RawFd; 3],
    err_w: RawFd,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    rlimits: &'a [(libc::__rlimit_resource_t, u64)],
    creds: Option<ChildCreds>,
    cap_last: u32,
    /// Signals this process ignores (bit `n - 1` for signal `n`).
    ignored: u64,
    landlock: Option<RawFd>,
    landlock_guard: Option<RawFd>,
    landlock_guard_access: u64,
    /// v1 `tasks` files to join, `-1` for an unused slot.
    cgroup_tasks: [RawFd; MAX_V1_TASKS],
    mounts: Option<&'a MountPlan>,
    root_caps_keep: Option<u64>,
    seccomp: *const libc::sock_fprog,
    cgroup_procs: RawFd,
    parent: libc::pid_t,
    /// Under a new PID namespace: `[ready_w, go_r]`, the child's ends of the
    /// handshake that lets the parent seize it before anything else runs
    /// (`-1` when unused), and `[ready_r, go_w]`, the parent's ends, which
    /// the child closes so that a parent that dies is seen as EOF.
    trace_child_ends: [RawFd; 2],
    trace_parent_ends: [RawFd; 2],
}

/// `struct landlock_path_beneath_attr` (packed, as the kernel reads it).
#[repr(C, packed)]
struct LandlockPathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// Add to `ruleset` a rule granting `access` beneath `path`. Raw syscalls
/// only (the forked child).
///
/// # Safety
/// Only in the forked child, before `landlock_restrict_self`.
unsafe fn landlock_allow_beneath(ruleset: RawFd, path: &std::ffi::CStr, access: u64) -> bool {
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_long = 1;
    // SAFETY: open/syscall/close on a C string the parent built and a stack
    // struct; async-signal-safe.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let attr = LandlockPathBeneath {
            allowed_access: access,
            parent_fd: fd,
        };
        let added = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const LandlockPathBeneath,
            0,
        );
        libc::close(fd);
        added == 0
    }
}

/// Report the failing step and errno, then `_exit`.
///
/// # Safety
/// Only called in the forked child.
unsafe fn child_fail(err_w: RawFd, step: ChildStep) -> ! {
    // SAFETY: __errno_location is async-signal-safe and always valid.
    let errno = unsafe { *libc::__errno_location() };
    let e = errno.to_ne_bytes();
    let msg = [step as u8, e[0], e[1], e[2], e[3]];
    // SAFETY: write of a stack buffer to an fd we own; _exit never returns.
    unsafe {
        libc::write(err_w, msg.as_ptr().cast(), msg.len());
        libc::_exit(127)
    }
}

/// The child between fork and exec. Only raw syscalls, no allocation, no locks.
///
/// # Safety
/// Must be called only in the child of `fork`, with `p` prepared by [`spawn`].
unsafe fn child_main(p: &ChildPlan<'_>) -> ! {
    // SAFETY: every call below is a raw, async-signal-safe
    // syscall on integers, fds prepared by the parent, or pointers into
    // memory the parent built before fork and that the child's copy of the
    // address space still holds.
    unsafe {
        // Default dispositions and an empty mask: the parent blocks the
        // signals it reads through a signalfd, and the Rust runtime ignores
        // SIGPIPE; neither may leak into the governed program. `execve`
        // resets caught signals to their default itself but keeps ignored
        // ones, so only those are reset here (one syscall each, usually
        // just SIGPIPE, instead of one per signal number). The raw syscall,
        // because glibc's wrapper refuses its own signals 32 and 33, which
        // a caller may have left ignored too.
        let default = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        for sig in 1..=64 {
            if p.ignored & (1u64 << (sig - 1)) != 0 && sig != libc::SIGKILL && sig != libc::SIGSTOP
            {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &default as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    std::mem::size_of::<u64>(),
                );
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());

        // Under a new PID namespace: become seizable for the parent (this
        // copy of its address space is non-dumpable, and without
        // CAP_SYS_PTRACE it could not attach), say so, wait until it has
        // seized us, and be non-dumpable again. A parent that died reads
        // as EOF: its ends were closed here first.
        if p.trace_child_ends[0] >= 0 {
            libc::close(p.trace_parent_ends[0]);
            libc::close(p.trace_parent_ends[1]);
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            let byte = 1u8;
            libc::write(p.trace_child_ends[0], (&byte as *const u8).cast(), 1);
            let mut go = 0u8;
            if libc::read(p.trace_child_ends[1], (&mut go as *mut u8).cast(), 1) != 1 {
                child_fail(p.err_w, ChildStep::ParentGone);
            }
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            libc::close(p.trace_child_ends[0]);
            libc::close(p.trace_child_ends[1]);
        }

        // Join the run's v1 cgroups first (one thread: no threadgroup lock),
        // so every descendant is born inside.
        for fd in p.cgroup_tasks {
            if fd >= 0 && libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                child_fail(p.err_w, ChildStep::Cgroup);
            }
        }
        // Without CLONE_INTO_CGROUP: join the v2 group before anything else.
        if p.cgroup_procs >= 0 && libc::write(p.cgroup_procs, c"0".as_ptr().cast(), 1) != 1 {
            child_fail(p.err_w, ChildStep::Cgroup);
        }
        if libc::setsid() < 0 {
            child_fail(p.err_w, ChildStep::Setsid);
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) < 0
        {
            child_fail(p.err_w, ChildStep::DeathSignal);
        }
        // Close the race: the parent may have died before PDEATHSIG was set.
        if libc::getppid() != p.parent {
            child_fail(p.err_w, ChildStep::ParentGone);
        }
        // Enter the checked cwd *before* a mount namespace is made:
        // unshare(CLONE_NEWNS) moves the cwd onto the new namespace's copy
        // of its mount. An fchdir after it would go back to the runner's
        // mount tree, from where `..` walks around every covering mount
        // (the key, the state dir, the read-only /proc/sys and /sys) and
        // out of the run's cgroups.
        if libc::fchdir(p.cwd) < 0 {
            child_fail(p.err_w, ChildStep::Chdir);
        }
        if let Some(m) = p.mounts {
            setup_mounts(m, p.err_w);
            if let Some(guard) = p.landlock_guard {
                // The fresh /dev and /proc are new inodes: a path walk from
                // inside them meets no rule of the guard (mount points are
                // skipped), so grant them what the guard grants any entry
                // it does not protect.
                for (fresh, path) in [(!m.dev_nodes.is_empty(), c"/dev"), (m.fresh_proc, c"/proc")]
                {
                    if fresh && !landlock_allow_beneath(guard, path, p.landlock_guard_access) {
                        child_fail(p.err_w, ChildStep::Landlock);
                    }
                }
            }
        }
        for &(resource, value) in p.rlimits {
            let lim = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &lim) < 0 {
                child_fail(p.err_w, ChildStep::Rlimit);
            }
        }
        if let Some(creds) = p.creds {
            drop_to(creds, p.cap_last, p.err_w);
        } else if let Some(keep) = p.root_caps_keep {
            keep_only(keep, p.cap_last, p.err_w);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            child_fail(p.err_w, ChildStep::NoNewPrivs);
        }
        for ruleset in [p.landlock, p.landlock_guard].into_iter().flatten() {
            if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) < 0 {
                child_fail(p.err_w, ChildStep::Landlock);
            }
        }
        if !p.seccomp.is_null()
            && libc::syscall(libc::SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, p.seccomp) < 0
        {
            child_fail(p.err_w, ChildStep::Seccomp);
        }
        for (target, &fd) in p.stdio.iter().enumerate() {
            if libc::dup2(fd, target as RawFd) < 0 {
                child_fail(p.err_w, ChildStep::Stdio);
            }
        }
        // dup2 clears close-on-exec on the new number.
        if libc::dup2(p.exe, CHILD_EXE_FD) < 0 {
            child_fail(p.err_w, ChildStep::Stdio);
        }
        if libc::dup3(p.err_w, CHILD_ERR_FD, libc::O_CLOEXEC) < 0 {
            child_fail(p.err_w, ChildStep::Stdio);
        }
        let err_w = CHILD_ERR_FD;
        if libc::syscall(
            libc::SYS_close_range,
            CHILD_ERR_FD + 1,
            libc::c_uint::MAX,
            0,
        ) < 0
        {
            child_fail(err_w, ChildStep::CloseFds);
        }
        if !p.exe_is_script && libc::fcntl(CHILD_EXE_FD, libc::F_SETFD, libc::FD_CLOEXEC) < 0 {
            child_fail(err_w, ChildStep::CloseFds);
        }
        libc::syscall(
            libc::SYS_execveat,
            CHILD_EXE_FD,
            c"".as_ptr(),
            p.argv,
            p.envp,
            libc::AT_EMPTY_PATH,
        );
        child_fail(err_w, ChildStep::Exec)
    }
}

/// `mount(2)` with optional strings.
///
/// # Safety
/// Every non-null pointer is a NUL-terminated string.
unsafe fn mnt(
    src: *const libc::c_char,
    target: *const libc::c_char,
    fstype: *const libc::c_char,
    flags: libc::c_ulong,
    data: *const libc::c_char,
) -> bool {
    // SAFETY: the caller passes valid C strings or null.
    unsafe { libc::mount(src, target, fstype, flags, data.cast()) == 0 }
}

/// The child's own mount namespace (see [`MountPlan`]). Raw syscalls only.
///
/// # Safety
/// Only in the forked child, before the capabilities are dropped.
unsafe fn setup_mounts(m: &MountPlan, err_w: RawFd) {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: raw unshare/mount/open/mkdir/symlink syscalls on strings the
    // parent built before fork; async-signal-safe.
    unsafe {
        let mut flags = libc::CLONE_NEWNS;
        if m.new_cgroup_ns {
            flags |= libc::CLONE_NEWCGROUP;
        }
        if libc::unshare(flags) < 0 {
            child_fail(err_w, ChildStep::Mount);
        }
        // Nothing we mount propagates back to the host, nothing of the
        // host's later mounts reaches us.
        if !mnt(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            null,
        ) {
            child_fail(err_w, ChildStep::Mount);
        }
        for f in &m.cover_files {
            if !mnt(c"/dev/null".as_ptr(), f.as_ptr(), null, libc::MS_BIND, null) {
                child_fail(err_w, ChildStep::Mount);
            }
        }
        let sealed = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        for d in &m.cover_dirs {
            if !mnt(
                c"none".as_ptr(),
                d.as_ptr(),
                c"tmpfs".as_ptr(),
                sealed,
                c"size=4k,mode=000".as_ptr(),
            ) {
                child_fail(err_w, ChildStep::Mount);
            }
        }
        // /sys again without the mounts beneath it (cgroupfs, bpf, debugfs,
        // securityfs, efivarfs): a non-recursive bind, then read-only.
        if m.fresh_sys
            && (!mnt(
                c"/sys".as_ptr(),
                c"/sys".as_ptr(),
                null,
                libc::MS_BIND,
                null,
            ) || !mnt(
                null,
                c"/sys".as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REMOUNT | sealed,
                null,
            ))
        {
            child_fail(err_w, ChildStep::Mount);
        }
        if !m.dev_nodes.is_empty() {
            // Hold the host's nodes by fd (opened in this namespace), so they
            // can be bound into the fresh /dev that covers them.
            let mut held: [RawFd; MAX_DEV_NODES] = [-1; MAX_DEV_NODES];
            for (slot, target) in held.iter_mut().zip(&m.dev_nodes) {
                *slot = libc::open(target.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                if *slot < 0 {
                    child_fail(err_w, ChildStep::Mount);
                }
            }
            if !mnt(
                c"none".as_ptr(),
                c"/dev".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                c"size=64k,mode=755".as_ptr(),
            ) {
                child_fail(err_w, ChildStep::Mount);
            }
            for (&fd, target) in held.iter().zip(&m.dev_nodes) {
                let made = libc::open(
                    target.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o666,
                );
                if made < 0 {
                    child_fail(err_w, ChildStep::Mount);
                }
                libc::close(made);
                let mut buf = [0u8; 32];
                if !mnt(
                    fd_path(fd, &mut buf),
                    target.as_ptr(),
                    null,
                    libc::MS_BIND,
                    null,
                ) {
                    child_fail(err_w, ChildStep::Mount);
                }
                libc::close(fd);
            }
            for (link, to) in [
                (c"/dev/fd", c"/proc/self/fd"),
                (c"/dev/stdin", c"/proc/self/fd/0"),
                (c"/dev/stdout", c"/proc/self/fd/1"),
                (c"/dev/stderr", c"/proc/self/fd/2"),
            ] {
                if libc::symlink(to.as_ptr(), link.as_ptr()) < 0 {
                    child_fail(err_w, ChildStep::Mount);
                }
            }
            if libc::mkdir(c"/dev/shm".as_ptr(), 0o1777) < 0
                || !mnt(
                    c"none".as_ptr(),
                    c"/dev/shm".as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    c"mode=1777".as_ptr(),
                )
            {
                child_fail(err_w, ChildStep::Mount);
            }
        }
        if m.fresh_proc
            && !mnt(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                null,
            )
        {
            child_fail(err_w, ChildStep::Mount);
        }
        // Kernel knobs root could turn without any capability (core_pattern
        // runs a program as full root on the host; /proc/irq steers host
        // interrupts): read-only, and without the mounts beneath
        // (binfmt_misc). /proc/sys must be there; the others where they are.
        for (knobs, required) in [
            (c"/proc/sys", true),
            (c"/proc/irq", false),
            (c"/proc/bus", false),
            (c"/proc/fs", false),
        ] {
            if !required && libc::access(knobs.as_ptr(), libc::F_OK) != 0 {
                continue;
            }
            if !mnt(knobs.as_ptr(), knobs.as_ptr(), null, libc::MS_BIND, null)
                || !mnt(
                    null,
                    knobs.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REMOUNT | sealed,
                    null,
                )
            {
                child_fail(err_w, ChildStep::Mount);
            }
        }
        let sysrq = c"/proc/sysrq-trigger";
        if libc::access(sysrq.as_ptr(), libc::F_OK) == 0
            && !mnt(
                c"/dev/null".as_ptr(),
                sysrq.as_ptr(),
                null,
                libc::MS_BIND,
                null,
            )
        {
            child_fail(err_w, ChildStep::Mount);
        }
    }
}

/// A uid-0 child keeps only `keep` (bit mask) in its bounding, permitted,
/// effective and inheritable sets; ambient is cleared.
///
/// # Safety
/// Only in the forked child.
unsafe fn keep_only(keep: u64, cap_last: u32, err_w: RawFd) {
    // SAFETY: in the forked child, as this function requires.
    unsafe {
        shrink_ambient_and_bounding(keep, cap_last, err_w);
        capset_all(keep as u32, (keep >> 32) as u32, err_w);
    }
}

/// Clear the ambient set and drop every capability not in `keep` from the
/// bounding set (EINVAL, a number this kernel does not know, is not an
/// error). Permitted/effective/inheritable are the caller's to set after.
///
/// # Safety
/// Only in the forked child.
unsafe fn shrink_ambient_and_bounding(keep: u64, cap_last: u32, err_w: RawFd) {
    // SAFETY: raw prctl syscalls on integers, async-signal-safe.
    unsafe {
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ) < 0
        {
            child_fail(err_w, ChildStep::Credentials);
        }
        for cap in 0..=cap_last {
            if keep & (1u64 << cap) != 0 {
                continue;
            }
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                let errno = *libc::__errno_location();
                if errno != libc::EINVAL {
                    child_fail(err_w, ChildStep::Credentials);
                }
            }
        }
    }
}

/// Set effective = permitted = inheritable to the given 64-bit mask.
///
/// # Safety
/// Only in the forked child.
unsafe fn capset_all(low: u32, high: u32, err_w: RawFd) {
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = CapHeader {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [
        CapData {
            effective: low,
            permitted: low,
            inheritable: low,
        },
        CapData {
            effective: high,
            permitted: high,
            inheritable: high,
        },
    ];
    // SAFETY: capset with a v3 header and two data structs, as documented.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } < 0 {
        // SAFETY: in the forked child.
        unsafe { child_fail(err_w, ChildStep::Credentials) }
    }
}

/// Become `creds` with no supplementary groups and every capability set empty.
///
/// # Safety
/// Only in the forked child.
unsafe fn drop_to(creds: ChildCreds, cap_last: u32, err_w: RawFd) {
    // Raw syscalls, never glibc's wrappers: in a multi-threaded runner
    // (output readers, the egress proxy) glibc's setgroups/setres[ug]id
    // broadcast the change to every thread it believes exists and wait for
    // them, and a child made by a raw clone3/clone has none of them: it
    // waited on that futex forever.
    // SAFETY: raw prctl/setgroups/setres[ug]id/capset syscalls on integers
    // and stack structs, async-signal-safe.
    unsafe {
        shrink_ambient_and_bounding(0, cap_last, err_w);
        if libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) < 0
            || libc::syscall(libc::SYS_setresgid, creds.gid, creds.gid, creds.gid) < 0
            || libc::syscall(libc::SYS_setresuid, creds.uid, creds.uid, creds.uid) < 0
        {
            child_fail(err_w, ChildStep::Credentials);
        }
        // setresuid away from 0 already cleared permitted and effective;
        // clear inheritable too (and everything, if the target uid is 0).
        capset_all(0, 0, err_w);
    }
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
        };
        f.write_str(s)
    }
}

/// Create `name` inside the directory `dir` as a new regular file:
/// `O_CREAT|O_EXCL|O_NOFOLLOW`, so nothing already there (a symlink, a FIFO,
/// a planted file) is ever opened.
pub(crate) fn create_exclusive_at(
    dir: &std::fs::File,
    name: &std::ffi::OsStr,
    mode: u32,
) -> io::Result<std::fs::File> {
    use nix::fcntl::OFlag;
    let fd = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::from_bits_truncate(mode),
    )?;
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// `renameat` within one directory fd (replaces the entry `to`, whatever it
/// is, without following it).
pub(crate) fn rename_at(
    dir: &std::fs::File,
    from: &std::ffi::OsStr,
    to: &std::ffi::OsStr,
) -> io::Result<()> {
    let d = Some(dir.as_raw_fd());
    nix::fcntl::renameat(d, from, d, to)?;
    Ok(())
}

/// A cancelling signal (SIGTERM, SIGINT, SIGHUP) pending for this process:
/// blocked and not yet read. Asking does not consume it, so the signalfd
/// reader still sees it.
pub(crate) fn pending_cancel_signal() -> Option<i32> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigpending writes a whole sigset_t into memory we own.
    if unsafe { libc::sigpending(set.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: the successful sigpending above initialised it.
    let set = unsafe { set.assume_init() };
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP]
        .into_iter()
        // SAFETY: `set` is an initialised sigset_t; sigismember only reads it.
        .find(|s| unsafe { libc::sigismember(&set, *s) } == 1)
}

/// `linkat` within one directory fd: fails with `EEXIST` if `to` exists
/// (never replaces it, never follows `from` if it is a symlink).
pub(crate) fn link_at(
    dir: &std::fs::File,
    from: &std::ffi::OsStr,
    to: &std::ffi::OsStr,
) -> io::Result<()> {
    let d = Some(dir.as_raw_fd());
    nix::unistd::linkat(d, from, d, to, nix::fcntl::AtFlags::empty())?;
    Ok(())
}

/// `unlinkat` of a file entry within a directory fd.
pub(crate) fn unlink_at(dir: &std::fs::File, name: &std::ffi::OsStr) -> io::Result<()> {
    nix::unistd::unlinkat(
        Some(dir.as_raw_fd()),
        name,
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    )?;
    Ok(())
}

/// `MFD_EXEC` (Linux 6.3): the memfd may be executed even where the
/// `vm.memfd_noexec` sysctl makes memfds non-executable by default.
const MFD_EXEC: libc::c_uint = 0x0010;

/// A new anonymous in-memory file that can be sealed and executed,
/// close-on-exec. Older kernels do not know `MFD_EXEC` (EINVAL): then every
/// memfd is executable and the flag is not needed.
pub fn memfd_for_exec(name: &std::ffi::CStr) -> io::Result<OwnedFd> {
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    let base = MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING;
    let with_exec = base | MemFdCreateFlag::from_bits_retain(MFD_EXEC);
    match memfd_create(name, with_exec) {
        Err(nix::errno::Errno::EINVAL) => Ok(memfd_create(name, base)?),
        r => Ok(r?),
    }
}

/// Seal a memfd for good: no write, grow or shrink, and no further seal
/// changes. Fails (EBUSY) if a writable shared mapping of it exists.
pub fn seal_for_good(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_SEAL;
    fcntl(fd.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals))?;
    Ok(())
}

/// The seals a memfd carries (for checks before exec).
pub fn seals(fd: &OwnedFd) -> io::Result<libc::c_int> {
    Ok(nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_GET_SEALS,
    )?)
}

// ---------------------------------------------------------------- seccomp

const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
/// Offsets in `struct seccomp_data`: nr, arch, args[0] (its low 32 bits on
/// a little-endian machine).
const SD_NR: u32 = 0;
const SD_ARCH: u32 = 4;
const SD_ARG0_LO: u32 = 16;

/// The socket families `--no-network` keeps when it is enforced by seccomp:
/// `AF_UNIX` (local by construction) and `AF_NETLINK` (a channel to this
/// kernel; glibc's resolver and `ip` use it, and it carries no packet off
/// the machine). Everything else is denied at `socket`/`socketpair`:
/// `AF_INET`/`AF_INET6` too, because a filter cannot read the address a
/// socket will connect to, so it cannot tell 127.0.0.1 from the world — and
/// without a network namespace 127.0.0.1 is the *host's* loopback, which a
/// network namespace would have hidden. `AF_PACKET`, `AF_VSOCK` (the
/// hypervisor), `AF_BLUETOOTH`, … are denied as well.
pub const SECCOMP_ALLOWED_FAMILIES: &[(&str, u32)] = &[
    ("AF_UNIX", libc::AF_UNIX as u32),
    ("AF_NETLINK", libc::AF_NETLINK as u32),
];

/// A compiled classic-BPF seccomp program (see [`SocketFilter::no_network`]).
pub struct SocketFilter {
    prog: Vec<libc::sock_filter>,
}

#[derive(Clone, Copy)]
enum Bpf {
    Ld(u32),
    Jeq(u32, usize, usize),
    Jge(u32, usize, usize),
    Ret(u32),
    Label(usize),
}

/// Resolve label jumps of a tiny straight-line program into relative ones.
fn assemble(code: &[Bpf]) -> Option<Vec<libc::sock_filter>> {
    let mut at = std::collections::HashMap::new();
    let mut n = 0usize;
    for ins in code {
        match ins {
            Bpf::Label(l) => {
                at.insert(*l, n);
            }
            _ => n += 1,
        }
    }
    let mut out = Vec::with_capacity(n);
    let rel = |from: usize, to: usize| -> Option<u8> {
        u8::try_from(at.get(&to)?.checked_sub(from + 1)?).ok()
    };
    for ins in code {
        let i = out.len();
        let f = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
        match *ins {
            Bpf::Label(_) => continue,
            Bpf::Ld(off) => out.push(f(BPF_LD_W_ABS, 0, 0, off)),
            Bpf::Ret(k) => out.push(f(BPF_RET_K, 0, 0, k)),
            Bpf::Jeq(k, t, e) => out.push(f(BPF_JEQ_K, rel(i, t)?, rel(i, e)?, k)),
            Bpf::Jge(k, t, e) => out.push(f(BPF_JGE_K, rel(i, t)?, rel(i, e)?, k)),
        }
    }
    Some(out)
}

impl SocketFilter {
    /// The `--no-network` filter: `socket`/`socketpair` only for the
    /// families in [`SECCOMP_ALLOWED_FAMILIES`] (others get EAFNOSUPPORT);
    /// `io_uring_setup` is ENOSYS (io_uring can create sockets past this
    /// filter); on x86_64 the x32 ABI is refused and the i386 ABI gets the
    /// same family check (its `socketcall` multiplexer, whose arguments a
    /// filter cannot read, is refused). `None` on an architecture this
    /// filter is not written for.
    pub fn no_network() -> Option<SocketFilter> {
        use Bpf::*;
        #[cfg(target_arch = "x86_64")]
        let (native, socket, socketpair, uring) = (0xc000_003e_u32, 41u32, 53u32, 425u32);
        #[cfg(target_arch = "aarch64")]
        let (native, socket, socketpair, uring) = (0xc000_00b7_u32, 198u32, 199u32, 425u32);
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        return None;
        let (l_native, l_family, l_foreign, l_allow, l_afno, l_nosys, l_perm) =
            (1, 2, 3, 4, 5, 6, 7);
        let l_family32 = 8;
        let (n1, n2, n3, n4, n5, n6, n7) = (10, 11, 12, 13, 14, 15, 16);
        // Classic BPF only jumps forward, so each ABI gets its own copy of
        // the family check.
        let family_check = |label: usize, base: usize| {
            let mut v = vec![Label(label), Ld(SD_ARG0_LO)];
            for (i, (_, fam)) in SECCOMP_ALLOWED_FAMILIES.iter().enumerate() {
                v.extend([Jeq(*fam, l_allow, base + i), Label(base + i)]);
            }
            v.push(Ret(SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32));
            v
        };
        let mut code = vec![
            Ld(SD_ARCH),
            Jeq(native, l_native, l_foreign),
            Label(l_native),
            Ld(SD_NR),
        ];
        if cfg!(target_arch = "x86_64") {
            // x32 syscalls carry bit 30.
            code.extend([Jge(0x4000_0000, l_perm, n1), Label(n1)]);
        }
        code.extend([
            Jeq(socket, l_family, n2),
            Label(n2),
            Jeq(socketpair, l_family, n3),
            Label(n3),
            Jeq(uring, l_nosys, l_allow),
        ]);
        code.extend(family_check(l_family, 100));
        code.push(Label(l_foreign));
        if cfg!(target_arch = "x86_64") {
            // i386: socketcall 102, socket 359, socketpair 360, io_uring_setup 425.
            code.extend([
                Jeq(0x4000_0003, n4, l_perm),
                Label(n4),
                Ld(SD_NR),
                Jeq(102, l_afno, n5),
                Label(n5),
                Jeq(359, l_family32, n6),
                Label(n6),
                Jeq(360, l_family32, n7),
                Label(n7),
                Jeq(425, l_nosys, l_allow),
            ]);
            code.extend(family_check(l_family32, 200));
        } else {
            code.push(Ret(SECCOMP_RET_ERRNO | libc::EPERM as u32));
        }
        code.extend([
            Label(l_allow),
            Ret(SECCOMP_RET_ALLOW),
            Label(l_afno),
            Ret(SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32),
            Label(l_nosys),
            Ret(SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
            Label(l_perm),
            Ret(SECCOMP_RET_ERRNO | libc::EPERM as u32),
        ]);
        assemble(&code).map(|prog| SocketFilter { prog })
    }

    /// Check, in a throw-away child, that this kernel accepts the filter
    /// and that it does what it says: an `AF_INET` socket is refused and an
    /// `AF_UNIX` one is not. Run before the use is spent, so a kernel that
    /// cannot enforce it is a refusal, never a failed spawn.
    pub fn check(&self) -> Result<(), FilterCheckError> {
        let prog = libc::sock_fprog {
            len: self.prog.len() as libc::c_ushort,
            filter: self.prog.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: fork; the child makes only raw async-signal-safe syscalls
        // on stack values and memory prepared before the fork, then _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(FilterCheckError::Fork(io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: the child of fork, see above.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                    libc::_exit(10);
                }
                if libc::syscall(libc::SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0 {
                    libc::_exit(11 + (*libc::__errno_location() as i32).min(100));
                }
                let inet = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                if inet >= 0 || *libc::__errno_location() != libc::EAFNOSUPPORT {
                    libc::_exit(120);
                }
                let unix = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                libc::_exit(if unix >= 0 { 0 } else { 121 })
            }
        }
        match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 10)) => Err(FilterCheckError::NoNewPrivs),
            Ok(nix::sys::wait::WaitStatus::Exited(_, c)) if (11..=111).contains(&c) => Err(
                FilterCheckError::Install(io::Error::from_raw_os_error(c - 11)),
            ),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 120)) => Err(FilterCheckError::InetAllowed),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 121)) => Err(FilterCheckError::UnixRefused),
            other => Err(FilterCheckError::Ended(other)),
        }
    }
}

/// Why the seccomp socket filter cannot be used here, as its probe child
/// found: the `seccomp:` cause of `--no-network`'s `isolation::Unavailable`
/// and doctor's `seccomp` row.
#[derive(Debug, thiserror::Error)]
pub enum FilterCheckError {
    #[error("fork: {0}")]
    Fork(#[source] io::Error),
    #[error("prctl(PR_SET_NO_NEW_PRIVS) failed")]
    NoNewPrivs,
    #[error("seccomp(SECCOMP_SET_MODE_FILTER): {0}")]
    Install(#[source] io::Error),
    #[error("the filter did not refuse an AF_INET socket")]
    InetAllowed,
    #[error("the filter refused an AF_UNIX socket")]
    UnixRefused,
    #[error("the probe child ended unexpectedly: {0:?}")]
    Ended(nix::Result<nix::sys::wait::WaitStatus>),
}

/// Whether this process is single-threaded (`Threads:` in its status).
pub(crate) fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .map(|v| v.trim() == "1")
        })
        .unwrap_or(false)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The seccomp probe's findings read as `doctor` and the
    /// `isolation_unavailable` refusal have always printed them.
    #[test]
    fn filter_check_errors_read_as_before() {
        assert_eq!(
            FilterCheckError::Install(io::Error::from_raw_os_error(libc::EINVAL)).to_string(),
            "seccomp(SECCOMP_SET_MODE_FILTER): Invalid argument (os error 22)"
        );
        assert_eq!(
            FilterCheckError::NoNewPrivs.to_string(),
            "prctl(PR_SET_NO_NEW_PRIVS) failed"
        );
        assert_eq!(
            FilterCheckError::InetAllowed.to_string(),
            "the filter did not refuse an AF_INET socket"
        );
        assert_eq!(
            FilterCheckError::UnixRefused.to_string(),
            "the filter refused an AF_UNIX socket"
        );
        let ended = nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(7), 3);
        assert_eq!(
            FilterCheckError::Ended(Ok(ended)).to_string(),
            "the probe child ended unexpectedly: Ok(Exited(Pid(7), 3))"
        );
    }

    /// The test harness runs tests on threads: a probe is refused before
    /// anything is forked, in the words doctor prints.
    #[test]
    fn a_probe_needs_a_single_threaded_process() {
        let spawned =
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(200)));
        let r = probe_in_child(|| Ok::<_, ProbeError>("never".to_string()));
        let _ = spawned.join();
        let e = r.unwrap_err();
        assert!(matches!(e, ProbeError::Threaded));
        assert_eq!(
            e.to_string(),
            "internal: probe_in_child needs a single-threaded process"
        );
    }

    /// `capget` and the kernel's own text agree on every capability, as
    /// root (most set) and as any other uid (none set).
    #[test]
    fn capget_agrees_with_proc_status_on_every_capability() {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .expect("CapEff");
        for cap in 0..64u32 {
            assert_eq!(
                has_effective_capability(cap),
                mask & (1u64 << cap) != 0,
                "capability {cap} (CapEff {mask:x})"
            );
        }
        assert!(!has_effective_capability(64));
    }
}
