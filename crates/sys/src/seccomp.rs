//! Classic-BPF seccomp filters, assembled and tried in a throw-away child
//! before a use is spent.

use std::io;

pub(crate) const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;

pub(crate) const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;

pub(crate) const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

pub(crate) const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;

pub(crate) const BPF_LD_W_ABS: u16 = 0x20;

pub(crate) const BPF_JEQ_K: u16 = 0x15;

pub(crate) const BPF_JGE_K: u16 = 0x35;

pub(crate) const BPF_JSET_K: u16 = 0x45;

pub(crate) const BPF_RET_K: u16 = 0x06;

/// Offsets in `struct seccomp_data`: nr, arch, args[0] (its low 32 bits on
/// a little-endian machine).
pub(crate) const SD_NR: u32 = 0;

pub(crate) const SD_ARCH: u32 = 4;

pub(crate) const SD_ARG0_LO: u32 = 16;

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
    pub(crate) prog: Vec<libc::sock_filter>,
}

#[derive(Clone, Copy)]
pub(crate) enum Bpf {
    Ld(u32),
    Jeq(u32, usize, usize),
    Jge(u32, usize, usize),
    /// Jump to the first label when `A & k` is not zero.
    Jset(u32, usize, usize),
    Ret(u32),
    Label(usize),
}

/// Resolve label jumps of a tiny straight-line program into relative ones.
pub(crate) fn assemble(code: &[Bpf]) -> Option<Vec<libc::sock_filter>> {
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
            Bpf::Jset(k, t, e) => out.push(f(BPF_JSET_K, rel(i, t)?, rel(i, e)?, k)),
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
        match try_filter(&self.prog, socket_trial)? {
            0 => Ok(()),
            120 => Err(FilterCheckError::InetAllowed),
            121 => Err(FilterCheckError::UnixRefused),
            c => Err(FilterCheckError::Ended(Ok(
                nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(0), c),
            ))),
        }
    }
}

/// The socket filter's trial: 0, 120 (an `AF_INET` socket was not refused
/// with EAFNOSUPPORT) or 121 (an `AF_UNIX` socket was refused).
///
/// # Safety
/// Only in the forked probe child.
unsafe fn socket_trial() -> i32 {
    // SAFETY: socket(2) on integers and errno, in the probe child.
    unsafe {
        let inet = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if inet >= 0 || *libc::__errno_location() != libc::EAFNOSUPPORT {
            return 120;
        }
        let unix = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if unix >= 0 {
            0
        } else {
            121
        }
    }
}

/// Install `prog` in a throw-away child (after `no_new_privs`), run
/// `trial` there under it and return the code it exits with (0 or, for a
/// finding of its own, 120 and up). Errors: the fork, `no_new_privs`, the
/// install itself, or a child that ended otherwise (killed by the filter).
pub(crate) fn try_filter(
    prog: &[libc::sock_filter],
    trial: unsafe fn() -> i32,
) -> Result<i32, FilterCheckError> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: fork; the child makes only raw async-signal-safe syscalls
    // on stack values and memory prepared before the fork, then _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(FilterCheckError::Fork(io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: the child of fork, see above; `trial` makes raw syscalls.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                libc::_exit(10);
            }
            if libc::syscall(libc::SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) < 0 {
                libc::_exit(11 + (*libc::__errno_location()).min(100));
            }
            libc::_exit(trial())
        }
    }
    match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
        Ok(nix::sys::wait::WaitStatus::Exited(_, 10)) => Err(FilterCheckError::NoNewPrivs),
        Ok(nix::sys::wait::WaitStatus::Exited(_, c)) if (11..=111).contains(&c) => Err(
            FilterCheckError::Install(io::Error::from_raw_os_error(c - 11)),
        ),
        Ok(nix::sys::wait::WaitStatus::Exited(_, c)) => Ok(c),
        other => Err(FilterCheckError::Ended(other)),
    }
}

/// Why a seccomp filter (the socket filter, the syscall policy) cannot be
/// used here, as its probe child found: the `seccomp:` cause of
/// `--no-network`'s or the syscall policy's `isolation::Unavailable`, and
/// doctor's `seccomp` and `syscall_policy` rows.
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
    /// The syscall policy was installed but did not do what it says.
    #[error("the syscall policy was installed, but {0}")]
    PolicyNotEnforced(&'static str),
    #[error("the probe child ended unexpectedly: {0:?}")]
    Ended(nix::Result<nix::sys::wait::WaitStatus>),
}
