//! The child's mount namespace: the plan the parent builds before the
//! fork, and the raw steps the child takes to carry it out.

use std::ffi::CString;
use std::os::fd::RawFd;

use super::*;

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

/// `mount(2)` with optional strings.
///
/// # Safety
/// Every non-null pointer is a NUL-terminated string.
pub(crate) unsafe fn mnt(
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
pub(crate) unsafe fn setup_mounts(m: &MountPlan, err_w: RawFd) {
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
            // A path that is gone since the plan was made (a container's
            // socket removed as its container ended) has nothing left to
            // cover: there is nothing at it to reach.
            if !mnt(c"/dev/null".as_ptr(), f.as_ptr(), null, libc::MS_BIND, null)
                && *libc::__errno_location() != libc::ENOENT
            {
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
            ) && *libc::__errno_location() != libc::ENOENT
            {
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
