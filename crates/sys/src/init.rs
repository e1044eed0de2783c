//! governed-exec's init: PID 1 of the child's PID namespace (CONTRACT §7,
//! v1.3), as bubblewrap and `docker --init` have one.
//!
//! When the first process of a PID namespace exits, the kernel kills every
//! other process of it at once, before any wait can see them: a program
//! that was PID 1 took its leftovers with it uncounted. So the forked child
//! stays PID 1 itself and forks the program (pid 2 of the namespace) after
//! the setup they share (cgroups, session, cwd, mount namespace); the
//! program goes on with the rest of the setup and execs. The init then only
//! waits for signals: each one the runner (or anyone) sends it is forwarded
//! to the program, and on every SIGCHLD it reaps whatever has exited. When
//! the program exits, the init writes the program's wait status — a
//! native-endian `int`, exactly what `wait4` gave — to the status pipe, and
//! then stays alive, still reaping, so that every leftover (re-parented to
//! it, and so still in the runner's process tree under it) is killed and
//! counted by the runner as without the namespace. The runner ends the
//! init with SIGKILL once the tree under it is observed empty; if the
//! runner dies, the parent-death signal does.
//!
//! Everything here runs in the forked child: raw async-signal-safe syscalls
//! on values prepared before the fork, no allocation, no locks.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::*;

/// The pid of the program in its namespace: the init's first and, until the
/// program exits, only fork.
pub const PROGRAM_NS_PID: libc::pid_t = 2;

/// The runner's end of the init's status pipe: the program's wait status,
/// once it has exited.
#[derive(Debug)]
pub struct InitStatus {
    pub fd: OwnedFd,
}

/// What the status pipe says now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitReport {
    /// Nothing yet: the program is running.
    Running,
    /// The program exited with this wait status (as `wait4` gives it).
    Exited(libc::c_int),
    /// The pipe closed without a status: the init is gone (killed, or a
    /// step of its own failed) and the namespace with it.
    InitGone,
}

impl InitStatus {
    /// Read the report without blocking (the read end is non-blocking).
    pub fn poll(&self) -> io::Result<InitReport> {
        let mut buf = [0u8; 4];
        loop {
            match nix::unistd::read(self.fd.as_raw_fd(), &mut buf) {
                Ok(4) => return Ok(InitReport::Exited(libc::c_int::from_ne_bytes(buf))),
                // A write of four bytes to a pipe is atomic: anything else
                // is not the init's report.
                Ok(0) | Ok(_) => return Ok(InitReport::InitGone),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => return Ok(InitReport::Running),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The status pipe: the read end for the runner (non-blocking, close on
/// exec) and the write end for the init, above [`HIGH_FD_FLOOR`].
pub(crate) fn status_pipe() -> io::Result<(InitStatus, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    nix::fcntl::fcntl(
        r.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )?;
    let w = dup_high(w.as_raw_fd())?;
    Ok((InitStatus { fd: r }, w))
}

/// Every signal number, as the kernel's 64-bit mask (it leaves SIGKILL and
/// SIGSTOP out itself).
const ALL_SIGNALS: u64 = !0;

/// Block every signal in the init, before it forks the program: from here
/// on the init takes its signals with `rt_sigtimedwait`, so none is acted
/// on by default (and none is lost: a blocked signal is queued even for a
/// namespace's PID 1, whose default actions the kernel otherwise drops).
///
/// # Safety
/// Only in the forked child.
pub(crate) unsafe fn init_block_signals() {
    // SAFETY: rt_sigprocmask with a mask on our stack and the kernel's
    // sigset size; async-signal-safe.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &ALL_SIGNALS as *const u64,
            std::ptr::null_mut::<u64>(),
            std::mem::size_of::<u64>(),
        );
    }
}

/// In the program, right after the init forked it: an empty signal mask
/// again, as the program is owed (CONTRACT §6: nothing of governed-exec's
/// own signal handling leaks into it).
///
/// # Safety
/// Only in the forked program, before exec.
pub(crate) unsafe fn program_unblock_signals() {
    let none: u64 = 0;
    // SAFETY: as in `init_block_signals`.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &none as *const u64,
            std::ptr::null_mut::<u64>(),
            std::mem::size_of::<u64>(),
        );
    }
}

/// Fork the program off the init: returns 0 in the program, the program's
/// pid in the init; a failed fork is reported as the init's step.
///
/// # Safety
/// Only in the forked child (the init), with every signal blocked.
pub(crate) unsafe fn init_fork_program(err_w: RawFd) -> libc::pid_t {
    // SAFETY: a fork-like raw clone (null stack) of a process that runs only
    // raw syscalls on memory prepared before the first fork; glibc's fork
    // bookkeeping is not needed (the runner's own spawn path does the same).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0usize,
        )
    } as libc::pid_t;
    if pid < 0 {
        // SAFETY: in the forked child.
        unsafe { child_fail(err_w, ChildStep::Init) }
    }
    pid
}

/// The init keeps only the status pipe: the program's stdio, the error
/// pipe (so the runner sees EOF at the program's exec), the executable and
/// every other fd are closed.
///
/// # Safety
/// Only in the init, after it forked the program.
pub(crate) unsafe fn init_close_all_but(status_w: RawFd) {
    // SAFETY: close_range on integer bounds; async-signal-safe. Failure
    // leaves fds open, which only delays the runner's EOFs until it kills
    // the init; a fallback of single closes covers old kernels.
    unsafe {
        if status_w > 0
            && libc::syscall(libc::SYS_close_range, 0, status_w as libc::c_uint - 1, 0) < 0
        {
            for fd in 0..status_w {
                libc::close(fd);
            }
        }
        libc::syscall(
            libc::SYS_close_range,
            status_w as libc::c_uint + 1,
            libc::c_uint::MAX,
            0,
        );
    }
}

/// The init's loop: wait for a signal; forward it to the program while the
/// program lives; reap every child that has exited; report the program's
/// wait status once. Never returns: the runner's SIGKILL (or the
/// parent-death signal) ends it; a runner that closed the pipe ends it too.
///
/// # Safety
/// Only in the init, with every signal blocked, after
/// [`init_close_all_but`]. `lost` (fault injection) makes the init leave
/// when the program ends, without a report, as an init killed from outside
/// would.
pub(crate) unsafe fn init_loop(program: libc::pid_t, status_w: RawFd, lost: bool) -> ! {
    let mut program_alive = true;
    loop {
        // SAFETY: rt_sigtimedwait with a mask on our stack, no siginfo and
        // no timeout (it waits until a blocked signal is pending).
        let sig = unsafe {
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &ALL_SIGNALS as *const u64,
                std::ptr::null_mut::<libc::siginfo_t>(),
                std::ptr::null::<libc::timespec>(),
                std::mem::size_of::<u64>(),
            )
        } as libc::c_int;
        if sig > 0 && sig != libc::SIGCHLD && program_alive {
            // SAFETY: kill with integers; `program` is our own child, not
            // yet reaped (it is reaped only below, which clears
            // `program_alive`), so its pid names no other process.
            unsafe { libc::kill(program, sig) };
        }
        // Every child is reaped, the program's leftovers too; the program's
        // status is reported once (a later process given its pid after a
        // wrap of the namespace's pids is not the program).
        let watched = if program_alive { program } else { -1 };
        // SAFETY: reaps our own children into a stack int, and writes that
        // int to the status pipe we hold.
        if unsafe { init_reap(watched, status_w, lost) } {
            program_alive = false;
        }
    }
}

/// Reap every child that has exited; when the program (`-1`: no longer
/// watched) is among them, write its wait status to the status pipe and
/// return true.
///
/// # Safety
/// Only in the init.
unsafe fn init_reap(program: libc::pid_t, status_w: RawFd, lost: bool) -> bool {
    let mut reported = false;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: wait4 writes only into `status`, on our stack.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_wait4,
                -1 as libc::pid_t,
                &mut status as *mut libc::c_int,
                libc::WNOHANG,
                std::ptr::null_mut::<libc::rusage>(),
            )
        } as libc::pid_t;
        if pid <= 0 {
            return reported;
        }
        if pid == program {
            if lost {
                // SAFETY: _exit never returns.
                unsafe { libc::_exit(0) }
            }
            let bytes = status.to_ne_bytes();
            // SAFETY: write of a stack buffer to the pipe we hold; a runner
            // that is gone (EPIPE, SIGPIPE being blocked) leaves nothing to
            // report to, so the init ends and the namespace with it.
            unsafe {
                if libc::write(status_w, bytes.as_ptr().cast(), bytes.len()) != 4 {
                    libc::_exit(127);
                }
            }
            reported = true;
        }
    }
}
