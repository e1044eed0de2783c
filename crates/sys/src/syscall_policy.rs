//! The syscall policy of an isolated child (CONTRACT §7, v1.3): a
//! classic-BPF seccomp filter modelled on Docker's default profile for an
//! unprivileged container, assembled by [`seccomp::assemble`] and tried in
//! a throw-away child before a use is spent.
//!
//! What it does, in order:
//! - a system call of another ABI than the native one (i386 on x86_64,
//!   arm32 on aarch64, the x32 ABI's bit 30) kills the process: the deny
//!   list below is written for the native numbering only, and an
//!   `EPERM` answer to a foreign `exit` would let the program run on;
//! - `clone3` answers `ENOSYS`, as under Docker: its flags live in memory,
//!   which a filter cannot read, and libc falls back to `clone`;
//! - `clone` with a namespace flag (`CLONE_NEWNS`, `NEWUTS`, `NEWIPC`,
//!   `NEWUSER`, `NEWPID`, `NEWNET`, `NEWCGROUP`) answers `EPERM`; every
//!   other `clone` (threads, fork, vfork) is allowed;
//! - `personality` is allowed only with the values Docker allows (query,
//!   `PER_LINUX`, `PER_LINUX32`, `UNAME26` and their union);
//! - every call of [`denied`] answers `EPERM`;
//! - everything else is allowed.

use std::io;

use super::seccomp::*;

/// The policy's name, in the approval summary and the receipt. A change to
/// what the filter does is a new name (`…-v2`), never a new meaning of this
/// one; its digest is [`SyscallFilter::sha256_input`] hashed.
pub const SYSCALL_POLICY_NAME: &str = "docker-default-v1";

/// The `clone` flags that make a namespace: Docker's mask (0x7E020000).
pub const CLONE_NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u32;

/// The `personality` values allowed (Docker's): `PER_LINUX`,
/// `PER_LINUX32`, `UNAME26`, `UNAME26 | PER_LINUX32`, and `0xffffffff`
/// (a query that changes nothing).
pub const PERSONALITY_ALLOWED: [u32; 5] = [0x0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// The system calls the policy answers with `EPERM` on every architecture
/// it is written for, by name and native number ([`denied`] adds the
/// architecture's own). Each is one Docker's default profile blocks for a container
/// without extra capabilities: loading kernel code or rebooting it,
/// mounting, namespaces, the kernel keyring, bpf and perf, userfaultfd,
/// another process's memory (ptrace and its kin: Docker allows them on
/// kernels from 4.8, this policy does not, see `ARCHITECTURE.md`), file
/// handles, port I/O, the clock, swap, quotas, accounting, the kernel log,
/// NUMA placement, io_uring (its operations pass this filter by), and
/// obsolete calls.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const DENIED_EVERYWHERE: &[(&str, libc::c_long)] = &[
    ("acct", libc::SYS_acct),
    ("add_key", libc::SYS_add_key),
    ("bpf", libc::SYS_bpf),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("clock_settime", libc::SYS_clock_settime),
    ("delete_module", libc::SYS_delete_module),
    ("finit_module", libc::SYS_finit_module),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fsopen", libc::SYS_fsopen),
    ("fspick", libc::SYS_fspick),
    ("get_mempolicy", libc::SYS_get_mempolicy),
    ("init_module", libc::SYS_init_module),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("kcmp", libc::SYS_kcmp),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("kexec_load", libc::SYS_kexec_load),
    ("keyctl", libc::SYS_keyctl),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("mbind", libc::SYS_mbind),
    ("migrate_pages", libc::SYS_migrate_pages),
    ("mount", libc::SYS_mount),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("move_mount", libc::SYS_move_mount),
    ("move_pages", libc::SYS_move_pages),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("nfsservctl", libc::SYS_nfsservctl),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("open_tree", libc::SYS_open_tree),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("pivot_root", libc::SYS_pivot_root),
    ("process_madvise", libc::SYS_process_madvise),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("ptrace", libc::SYS_ptrace),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("reboot", libc::SYS_reboot),
    ("request_key", libc::SYS_request_key),
    ("set_mempolicy", libc::SYS_set_mempolicy),
    ("set_mempolicy_home_node", libc::SYS_set_mempolicy_home_node),
    ("setns", libc::SYS_setns),
    ("settimeofday", libc::SYS_settimeofday),
    ("swapoff", libc::SYS_swapoff),
    ("swapon", libc::SYS_swapon),
    ("syslog", libc::SYS_syslog),
    ("umount2", libc::SYS_umount2),
    ("unshare", libc::SYS_unshare),
    ("userfaultfd", libc::SYS_userfaultfd),
];

/// x86_64 only: aarch64 has no `ioperm`, `iopl`, `_sysctl`, `sysfs`,
/// `uselib` or `ustat`.
#[cfg(target_arch = "x86_64")]
const DENIED_HERE: &[(&str, libc::c_long)] = &[
    ("ioperm", libc::SYS_ioperm),
    ("iopl", libc::SYS_iopl),
    ("_sysctl", libc::SYS__sysctl),
    ("sysfs", libc::SYS_sysfs),
    ("uselib", libc::SYS_uselib),
    ("ustat", libc::SYS_ustat),
];

#[cfg(target_arch = "aarch64")]
const DENIED_HERE: &[(&str, libc::c_long)] = &[];

/// Every system call the policy answers with `EPERM` on this
/// architecture, by name and native number (none on one it is not
/// written for).
pub fn denied() -> impl Iterator<Item = (&'static str, libc::c_long)> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    let all: &[&[(&str, libc::c_long)]] = &[DENIED_EVERYWHERE, DENIED_HERE];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let all: &[&[(&str, libc::c_long)]] = &[];
    all.iter().flat_map(|l| l.iter().copied())
}

/// `AUDIT_ARCH_X86_64` / `AUDIT_ARCH_AARCH64`: the one ABI the policy admits.
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xc000_00b7;

/// The assembled syscall policy (see the module's text).
pub struct SyscallFilter {
    pub(crate) prog: Vec<libc::sock_filter>,
}

impl SyscallFilter {
    /// The policy [`SYSCALL_POLICY_NAME`] for this architecture; `None` on
    /// one it is not written for (an isolated lease is then refused unless
    /// the approver waived the policy).
    pub fn docker_default() -> Option<SyscallFilter> {
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        return None;
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            use Bpf::*;
            let (l_allow, l_deny, l_nosys, l_kill, l_clone, l_pers) = (1, 2, 3, 4, 5, 6);
            let mut next = 1000usize;
            let mut fresh = || {
                next += 1;
                next
            };
            let mut code = vec![Ld(SD_ARCH)];
            let native = fresh();
            code.extend([Jeq(NATIVE_ARCH, native, l_kill), Label(native), Ld(SD_NR)]);
            if cfg!(target_arch = "x86_64") {
                // x32 system calls carry bit 30.
                let n = fresh();
                code.extend([Jge(0x4000_0000, l_kill, n), Label(n)]);
            }
            let special = [
                (libc::SYS_clone3, l_nosys),
                (libc::SYS_clone, l_clone),
                (libc::SYS_personality, l_pers),
            ];
            let denied = denied().map(|(_, nr)| (nr, l_deny));
            for (nr, to) in special.into_iter().chain(denied) {
                let n = fresh();
                code.extend([Jeq(nr as u32, to, n), Label(n)]);
            }
            code.push(Ret(SECCOMP_RET_ALLOW));
            // clone: the flags are its first argument on both ABIs; the
            // namespace bits all lie in the low word the kernel reads.
            code.extend([
                Label(l_clone),
                Ld(SD_ARG0_LO),
                Jset(CLONE_NAMESPACE_FLAGS, l_deny, l_allow),
            ]);
            code.extend([Label(l_pers), Ld(SD_ARG0_LO)]);
            for v in PERSONALITY_ALLOWED {
                let n = fresh();
                code.extend([Jeq(v, l_allow, n), Label(n)]);
            }
            code.extend([
                Ret(SECCOMP_RET_ERRNO | libc::EPERM as u32),
                Label(l_allow),
                Ret(SECCOMP_RET_ALLOW),
                Label(l_deny),
                Ret(SECCOMP_RET_ERRNO | libc::EPERM as u32),
                Label(l_nosys),
                Ret(SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
                Label(l_kill),
                Ret(SECCOMP_RET_KILL_PROCESS),
            ]);
            assemble(&code).map(|prog| SyscallFilter { prog })
        }
    }

    /// The bytes the policy's digest is the SHA-256 of: every instruction
    /// as the kernel reads `struct sock_filter` on a little-endian machine
    /// (code u16, jt u8, jf u8, k u32; little-endian whatever the host), in
    /// order. The same program gives the same digest on every run and every
    /// machine of this architecture.
    pub fn sha256_input(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prog.len() * 8);
        for ins in &self.prog {
            out.extend(ins.code.to_le_bytes());
            out.extend([ins.jt, ins.jf]);
            out.extend(ins.k.to_le_bytes());
        }
        out
    }

    /// The program's length in instructions.
    pub fn len(&self) -> usize {
        self.prog.len()
    }

    /// Never true: a policy has at least its return.
    pub fn is_empty(&self) -> bool {
        self.prog.is_empty()
    }

    /// Check, in a throw-away child, that this kernel accepts the policy
    /// and that it does what it says: `unshare` is `EPERM`, `clone3` is
    /// `ENOSYS`, a `personality` query is allowed and a change to
    /// `ADDR_NO_RANDOMIZE` is `EPERM`. Run before the use is spent, so a
    /// kernel without seccomp is a refusal (`isolation_unavailable`), never
    /// a failed spawn.
    pub fn check(&self) -> Result<(), FilterCheckError> {
        match try_filter(&self.prog, policy_trial)? {
            0 => Ok(()),
            c @ 120..=123 => Err(FilterCheckError::PolicyNotEnforced(
                POLICY_TRIAL_STEPS[(c - 120) as usize],
            )),
            c => Err(FilterCheckError::Ended(Ok(
                nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(0), c),
            ))),
        }
    }
}

/// What [`policy_trial`] found wrong, by its exit code minus 120.
const POLICY_TRIAL_STEPS: [&str; 4] = [
    "unshare was not refused with EPERM",
    "clone3 was not answered with ENOSYS",
    "a personality query was refused",
    "personality(ADDR_NO_RANDOMIZE) was not refused with EPERM",
];

/// The probe child's trial under the policy: 0, or 120 + the index of the
/// step of [`POLICY_TRIAL_STEPS`] that went wrong.
///
/// # Safety
/// Only in the forked probe child: raw syscalls on integers.
unsafe fn policy_trial() -> i32 {
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: raw syscalls with integer (or null, size 0) arguments; each
    // is refused by the filter, or by the kernel before anything is made.
    unsafe {
        if libc::syscall(libc::SYS_unshare, 0) >= 0 || errno() != libc::EPERM {
            return 120;
        }
        if libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) >= 0
            || errno() != libc::ENOSYS
        {
            return 121;
        }
        if libc::syscall(libc::SYS_personality, 0xffff_ffffu32 as libc::c_ulong) < 0 {
            return 122;
        }
        if libc::syscall(libc::SYS_personality, 0x0004_0000 as libc::c_ulong) >= 0
            || errno() != libc::EPERM
        {
            return 123;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of `struct seccomp_data` the filter reads.
    struct Call {
        arch: u32,
        nr: u32,
        arg0: u64,
    }

    /// A classic-BPF interpreter for the instructions [`assemble`] emits:
    /// what the kernel would answer for `call`.
    fn eval(prog: &[libc::sock_filter], call: &Call) -> u32 {
        let mut a = 0u32;
        let mut pc = 0usize;
        loop {
            let ins = prog[pc];
            pc += 1;
            let jump = |taken: bool| usize::from(if taken { ins.jt } else { ins.jf });
            match ins.code {
                BPF_LD_W_ABS => {
                    a = match ins.k {
                        SD_NR => call.nr,
                        SD_ARCH => call.arch,
                        SD_ARG0_LO => call.arg0 as u32,
                        20 => (call.arg0 >> 32) as u32,
                        k => panic!("load of offset {k}"),
                    }
                }
                BPF_JEQ_K => pc += jump(a == ins.k),
                BPF_JGE_K => pc += jump(a >= ins.k),
                BPF_JSET_K => pc += jump(a & ins.k != 0),
                BPF_RET_K => return ins.k,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    fn answer(nr: libc::c_long, arg0: u64) -> u32 {
        let f = SyscallFilter::docker_default().expect("written for this arch");
        eval(
            &f.prog,
            &Call {
                arch: NATIVE_ARCH,
                nr: nr as u32,
                arg0,
            },
        )
    }

    const EPERM: u32 = SECCOMP_RET_ERRNO | libc::EPERM as u32;

    #[test]
    fn every_listed_call_is_eperm_whatever_its_arguments() {
        for (name, nr) in denied() {
            for arg0 in [0, 1, u64::MAX] {
                assert_eq!(answer(nr, arg0), EPERM, "{name}({arg0})");
            }
        }
    }

    #[test]
    fn what_a_program_needs_is_allowed() {
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_openat,
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_exit_group,
            libc::SYS_mmap,
            libc::SYS_socket,
            libc::SYS_wait4,
            libc::SYS_close_range,
            libc::SYS_dup3,
            libc::SYS_fcntl,
            libc::SYS_adjtimex,
            libc::SYS_seccomp,
            libc::SYS_prctl,
        ] {
            assert_eq!(answer(nr, 0), SECCOMP_RET_ALLOW, "syscall {nr}");
        }
    }

    #[test]
    fn clone3_is_enosys_so_libc_falls_back_to_clone() {
        assert_eq!(
            answer(libc::SYS_clone3, 0),
            SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
    }

    #[test]
    fn clone_is_refused_only_with_a_namespace_flag() {
        let thread = (libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM
            | libc::CLONE_SETTLS
            | libc::CLONE_PARENT_SETTID
            | libc::CLONE_CHILD_CLEARTID) as u64;
        let fork = libc::SIGCHLD as u64;
        let vfork = (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64;
        for flags in [thread, fork, vfork, 0x1000 /* CLONE_PIDFD */] {
            assert_eq!(
                answer(libc::SYS_clone, flags),
                SECCOMP_RET_ALLOW,
                "{flags:#x}"
            );
        }
        for ns in [
            libc::CLONE_NEWNS,
            libc::CLONE_NEWUTS,
            libc::CLONE_NEWIPC,
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWPID,
            libc::CLONE_NEWNET,
            libc::CLONE_NEWCGROUP,
        ] {
            let flags = ns as u64 | fork;
            assert_eq!(answer(libc::SYS_clone, flags), EPERM, "{flags:#x}");
        }
        assert_eq!(CLONE_NAMESPACE_FLAGS, 0x7E02_0000, "Docker's mask");
    }

    #[test]
    fn personality_only_with_dockers_values() {
        for v in PERSONALITY_ALLOWED {
            assert_eq!(answer(libc::SYS_personality, v as u64), SECCOMP_RET_ALLOW);
        }
        // ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC.
        for v in [0x0004_0000u64, 0x0040_0000] {
            assert_eq!(answer(libc::SYS_personality, v), EPERM, "{v:#x}");
        }
    }

    #[test]
    fn another_abi_is_killed() {
        let f = SyscallFilter::docker_default().expect("written for this arch");
        let i386 = Call {
            arch: 0x4000_0003,
            nr: 1,
            arg0: 0,
        };
        assert_eq!(eval(&f.prog, &i386), SECCOMP_RET_KILL_PROCESS);
        if cfg!(target_arch = "x86_64") {
            let x32 = Call {
                arch: NATIVE_ARCH,
                nr: 0x4000_0000 | libc::SYS_read as u32,
                arg0: 0,
            };
            assert_eq!(eval(&f.prog, &x32), SECCOMP_RET_KILL_PROCESS);
        }
    }

    /// The kernel this runs on enforces the policy as written (the same
    /// trial `run` makes before a use is spent).
    #[test]
    fn this_kernel_enforces_the_policy() {
        let f = SyscallFilter::docker_default().expect("policy");
        f.check().expect("seccomp enforces the policy here");
    }

    #[test]
    fn the_digest_input_is_stable_and_names_every_instruction() {
        let a = SyscallFilter::docker_default().expect("policy");
        let b = SyscallFilter::docker_default().expect("policy");
        assert_eq!(a.sha256_input(), b.sha256_input());
        assert_eq!(a.sha256_input().len(), a.len() * 8);
        assert!(a.len() > denied().count());
    }
}
