//! The sealed in-memory copy an executable runs from: a memfd that can be
//! executed, sealed against every later change.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `MFD_EXEC` (Linux 6.3): the memfd may be executed even where the
/// `vm.memfd_noexec` sysctl makes memfds non-executable by default.
pub(crate) const MFD_EXEC: libc::c_uint = 0x0010;

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
