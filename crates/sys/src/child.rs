//! The forked child, between `clone` and `execveat`: only raw,
//! async-signal-safe syscalls on values the parent prepared; a failing step
//! is written to the error pipe and the child exits.

use std::os::fd::RawFd;

use super::*;

/// `/proc/self/fd/<fd>` into `buf`, NUL-terminated, without allocating.
pub(crate) fn fd_path(fd: RawFd, buf: &mut [u8; 32]) -> *const libc::c_char {
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

/// The kernel's `struct sigaction` (x86_64 and aarch64 layout, with a
/// 64-bit mask), for the raw `rt_sigaction` syscall.
#[repr(C)]
pub(crate) struct KernelSigaction {
    pub(crate) handler: libc::sighandler_t,
    pub(crate) flags: libc::c_ulong,
    pub(crate) restorer: usize,
    pub(crate) mask: u64,
}

pub(crate) struct ChildPlan<'a> {
    pub(crate) exe: RawFd,
    pub(crate) exe_is_script: bool,
    pub(crate) cwd: RawFd,
    pub(crate) stdio: [RawFd; 3],
    pub(crate) err_w: RawFd,
    pub(crate) argv: *const *const libc::c_char,
    pub(crate) envp: *const *const libc::c_char,
    pub(crate) rlimits: &'a [(libc::__rlimit_resource_t, u64)],
    pub(crate) creds: Option<ChildCreds>,
    pub(crate) cap_last: u32,
    /// Signals this process ignores (bit `n - 1` for signal `n`).
    pub(crate) ignored: u64,
    pub(crate) landlock: Option<RawFd>,
    pub(crate) landlock_guard: Option<RawFd>,
    pub(crate) landlock_guard_access: u64,
    /// A scopes-only ruleset (no filesystem rule), stacked last.
    pub(crate) landlock_scope: Option<RawFd>,
    /// v1 `tasks` files to join, `-1` for an unused slot.
    pub(crate) cgroup_tasks: [RawFd; MAX_V1_TASKS],
    pub(crate) mounts: Option<&'a MountPlan>,
    pub(crate) root_caps_keep: Option<u64>,
    pub(crate) seccomp: *const libc::sock_fprog,
    /// The syscall policy, installed last, right before `execveat`.
    pub(crate) syscall_policy: *const libc::sock_fprog,
    pub(crate) cgroup_procs: RawFd,
    pub(crate) parent: libc::pid_t,
    /// Under a new PID namespace: the write end of the init's status pipe
    /// (`-1` otherwise). The child becomes the namespace's init and forks
    /// the program (see `init`).
    pub(crate) init_status_w: RawFd,
    /// Fault injection (decided before the fork): the init leaves without a
    /// report when the program ends, as an init killed from outside would.
    pub(crate) init_lost: bool,
}

/// `struct landlock_path_beneath_attr` (packed, as the kernel reads it).
#[repr(C, packed)]
pub(crate) struct LandlockPathBeneath {
    pub(crate) allowed_access: u64,
    pub(crate) parent_fd: i32,
}

/// Add to `ruleset` a rule granting `access` beneath `path`. Raw syscalls
/// only (the forked child).
///
/// # Safety
/// Only in the forked child, before `landlock_restrict_self`.
pub(crate) unsafe fn landlock_allow_beneath(
    ruleset: RawFd,
    path: &std::ffi::CStr,
    access: u64,
) -> bool {
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
pub(crate) unsafe fn child_fail(err_w: RawFd, step: ChildStep) -> ! {
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
pub(crate) unsafe fn child_main(p: &ChildPlan<'_>) -> ! {
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
        new_session_dying_with(p.parent, p.err_w);
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
        // Under a new PID namespace this process is its init: it forks the
        // program here, after the setup both share (cgroups, session, cwd,
        // mount namespace), and never returns; the program goes on below.
        if p.init_status_w >= 0 {
            start_program_under_init(p);
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
        for ruleset in [p.landlock, p.landlock_guard, p.landlock_scope]
            .into_iter()
            .flatten()
        {
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
        // The syscall policy last, after every step of governed-exec's own
        // that needs what it denies (the mount namespace, capabilities,
        // Landlock): it allows what follows, `execveat` and the `write`
        // of a failure report.
        if !p.syscall_policy.is_null()
            && libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_SET_MODE_FILTER,
                0,
                p.syscall_policy,
            ) < 0
        {
            child_fail(err_w, ChildStep::SyscallPolicy);
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

/// Start a new session, and die with SIGKILL when `parent` does: checked
/// after the parent-death signal is set, since the parent may have died
/// before it.
///
/// # Safety
/// Only in a forked child, before exec.
unsafe fn new_session_dying_with(parent: libc::pid_t, err_w: RawFd) {
    // SAFETY: setsid, prctl and getppid on integers; async-signal-safe.
    unsafe {
        if libc::setsid() < 0 {
            child_fail(err_w, ChildStep::Setsid);
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) < 0
        {
            child_fail(err_w, ChildStep::DeathSignal);
        }
        if libc::getppid() != parent {
            child_fail(err_w, ChildStep::ParentGone);
        }
    }
}

/// In the namespace's init: fork the program and, in the init, serve it
/// until the runner ends the init; return only in the program, which is
/// then a new session of its own under the init, dying with it.
///
/// # Safety
/// Only in the forked child, with `p.init_status_w` open.
pub(crate) unsafe fn start_program_under_init(p: &ChildPlan<'_>) {
    // SAFETY: each step is an async-signal-safe function of this crate
    // (see `init`) or a raw syscall on integers, in the forked child.
    unsafe {
        init_block_signals();
        let program = init_fork_program(p.err_w);
        if program > 0 {
            init_close_all_but(p.init_status_w);
            init_loop(program, p.init_status_w, p.init_lost);
        }
        program_unblock_signals();
        // Its parent is the init, PID 1 of the namespace.
        new_session_dying_with(1, p.err_w);
    }
}

/// A uid-0 child keeps only `keep` (bit mask) in its bounding, permitted,
/// effective and inheritable sets; ambient is cleared.
///
/// # Safety
/// Only in the forked child.
pub(crate) unsafe fn keep_only(keep: u64, cap_last: u32, err_w: RawFd) {
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
pub(crate) unsafe fn shrink_ambient_and_bounding(keep: u64, cap_last: u32, err_w: RawFd) {
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
pub(crate) unsafe fn capset_all(low: u32, high: u32, err_w: RawFd) {
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
pub(crate) unsafe fn drop_to(creds: ChildCreds, cap_last: u32, err_w: RawFd) {
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
