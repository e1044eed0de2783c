//! Process handles that cannot name another process after a pid is reused
//! (`pidfd_open`, `pidfd_send_signal`), and the subreaper bit that hands
//! every orphan of the run to the runner.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::*;

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
