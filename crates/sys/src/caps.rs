//! What this process may do and is: its effective capabilities, the
//! kernel's last capability, its dumpable bit, ignored and pending signals,
//! whether it is single-threaded, the Landlock ABI.

use std::io;

use super::*;

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
