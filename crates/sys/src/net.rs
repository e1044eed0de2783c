//! The one network call the safe crates lack: bringing `lo` up in a fresh
//! network namespace.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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
