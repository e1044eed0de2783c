//! The only module with `unsafe`: raw syscalls the safe crates do not cover.
//!
//! Everything here is a thin, documented wrapper. The one large piece is
//! [`spawn`], the fork-and-exec of the governed child: between `fork` and
//! `execveat` the child may only make async-signal-safe raw syscalls, so every
//! argument (argv/envp pointer arrays, rlimits, fd numbers, credentials, the
//! Landlock ruleset fd) is prepared by the parent before `fork`, and the child
//! reports a failing step through a close-on-exec pipe instead of panicking.
//!
//! One file a concern: `pidfd`, `caps`, `fsat`, `memfd`, `net`, `seccomp`
//! (the assembler and the socket filter), `syscall_policy`, `mount`,
//! `init` (PID 1 of a child's PID namespace), `spawn` (the parent's side of the fork) and `child` (what the
//! child runs before exec). Every `unsafe` block of the project
//! is in this crate, each with a `// SAFETY:` line.

pub mod safe_io;
pub mod wait;

mod caps;
mod child;
use child::*;
mod fsat;
mod init;
mod memfd;
mod mount;
mod net;
mod pidfd;
mod seccomp;
mod spawn;
mod syscall_policy;

pub use caps::*;
pub use fsat::*;
pub use init::*;
pub use memfd::*;
pub use mount::*;
pub use net::*;
pub use pidfd::*;
pub use seccomp::*;
pub use spawn::*;
pub use syscall_policy::*;

use std::io;

fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seccomp probe's findings read as `doctor` and the
    /// `isolation_unavailable` refusal have always printed them.
    #[test]
    fn filter_check_errors_read_as_before() {
        assert_eq!(
            FilterCheckError::Install(io::Error::from_raw_os_error(libc::EINVAL)).to_string(),
            "seccomp(SECCOMP_SET_MODE_FILTER): Invalid argument (os error 22)"
        );
        assert_eq!(
            FilterCheckError::NoNewPrivs.to_string(),
            "prctl(PR_SET_NO_NEW_PRIVS) failed"
        );
        assert_eq!(
            FilterCheckError::InetAllowed.to_string(),
            "the filter did not refuse an AF_INET socket"
        );
        assert_eq!(
            FilterCheckError::UnixRefused.to_string(),
            "the filter refused an AF_UNIX socket"
        );
        let ended = nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(7), 3);
        assert_eq!(
            FilterCheckError::Ended(Ok(ended)).to_string(),
            "the probe child ended unexpectedly: Ok(Exited(Pid(7), 3))"
        );
    }

    /// The test harness runs tests on threads: a probe is refused before
    /// anything is forked, in the words doctor prints.
    #[test]
    fn a_probe_needs_a_single_threaded_process() {
        let spawned =
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(200)));
        let r = probe_in_child(|| Ok::<_, ProbeError>("never".to_string()));
        let _ = spawned.join();
        let e = r.unwrap_err();
        assert!(matches!(e, ProbeError::Threaded));
        assert_eq!(
            e.to_string(),
            "internal: probe_in_child needs a single-threaded process"
        );
    }

    /// `capget` and the kernel's own text agree on every capability, as
    /// root (most set) and as any other uid (none set).
    #[test]
    fn capget_agrees_with_proc_status_on_every_capability() {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .expect("CapEff");
        for cap in 0..64u32 {
            assert_eq!(
                has_effective_capability(cap),
                mask & (1u64 << cap) != 0,
                "capability {cap} (CapEff {mask:x})"
            );
        }
        assert!(!has_effective_capability(64));
    }
}
