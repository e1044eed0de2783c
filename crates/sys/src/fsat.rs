//! Files by descriptor: creation stamps of an open file, and the `*at`
//! calls (exclusive create, rename, link, unlink inside a directory fd) that
//! keep a path swap from redirecting a write.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::*;

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
