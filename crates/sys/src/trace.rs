//! The exit stop of a PID namespace's first process: the ptrace handshake
//! that lets the runner count the namespace before the kernel empties it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::*;

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
pub(crate) struct TraceHandshake {
    pub(crate) ready_r: OwnedFd,
    pub(crate) ready_w: OwnedFd,
    pub(crate) go_r: OwnedFd,
    pub(crate) go_w: OwnedFd,
}

impl TraceHandshake {
    pub(crate) fn new() -> io::Result<TraceHandshake> {
        let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (go_r, go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        Ok(TraceHandshake {
            ready_r,
            ready_w: dup_high(ready_w.as_raw_fd())?,
            go_r: dup_high(go_r.as_raw_fd())?,
            go_w,
        })
    }

    pub(crate) fn child_ends(&self) -> [RawFd; 2] {
        [self.ready_w.as_raw_fd(), self.go_r.as_raw_fd()]
    }

    pub(crate) fn parent_ends(&self) -> [RawFd; 2] {
        [self.ready_r.as_raw_fd(), self.go_w.as_raw_fd()]
    }

    /// In the parent, after the fork: wait for the child to be seizable,
    /// seize it, and let it go on whatever the answer.
    pub(crate) fn seize(self, pid: libc::pid_t) -> ExitTrace {
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
