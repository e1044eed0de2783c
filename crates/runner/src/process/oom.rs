//! Who the kernel's OOM killer killed. The memory cgroup counts OOM kills
//! (`memory.events` / `memory.oom_control`) but does not name the victim,
//! and a process of the run can SIGKILL the main process right after a
//! sibling was OOM-killed: "SIGKILL and an OOM kill counted" is not proof
//! that the main process was the victim. The kernel's own log is: its
//! `Killed process PID (…)` record carries the kernel facility, which no
//! process can write through `/dev/kmsg` (the kernel turns a userspace
//! write's facility 0 into LOG_USER). So the runner opens `/dev/kmsg` at its
//! end before the child exists and, after the run, looks for the main
//! process's pid among the kernel's records written since.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

/// A position in the kernel log, taken before the child exists.
pub struct KernelLog(Option<File>);

impl KernelLog {
    /// At the end of `/dev/kmsg`, or nothing where it cannot be read
    /// (`dmesg_restrict` without CAP_SYSLOG, a container without it).
    pub(crate) fn at_end() -> KernelLog {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/kmsg")
            .ok()
            .and_then(|f| {
                nix::unistd::lseek(
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    0,
                    nix::unistd::Whence::SeekEnd,
                )
                .ok()
                .map(|_| f)
            });
        KernelLog(file)
    }

    /// Whether the kernel logged an OOM kill of `pid` since the position
    /// was taken: `None` when the log could not be read.
    pub(crate) fn oom_killed(self, pid: i32) -> Option<bool> {
        let mut f = self.0?;
        let want = format!("Killed process {pid} (");
        let mut buf = vec![0u8; 8192];
        // Bounded: the records written during one run, at most this many.
        for _ in 0..100_000 {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if kernel_record_names(&buf[..n], &want) {
                        return Some(true);
                    }
                }
                // Overwritten records (EPIPE): go on with the next one.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // EAGAIN: nothing more; anything else: as far as it goes.
                Err(_) => break,
            }
        }
        Some(false)
    }
}

/// One `/dev/kmsg` record (`PRIO,SEQ,TS,FLAGS;MESSAGE`): whether it has the
/// kernel facility (PRIO >> 3 == 0) and its message contains `want`.
fn kernel_record_names(record: &[u8], want: &str) -> bool {
    let text = String::from_utf8_lossy(record);
    let Some((prefix, message)) = text.split_once(';') else {
        return false;
    };
    let kernel = prefix
        .split(',')
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|prio| prio >> 3 == 0);
    kernel && message.contains(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_kernel_record_naming_the_pid_counts() {
        let want = "Killed process 42 (";
        assert!(kernel_record_names(
            b"3,1,2,-;Memory cgroup out of memory: Killed process 42 (python3) total-vm:1kB\n",
            want
        ));
        // A userspace write (LOG_USER = 1, so PRIO 8..15) cannot pass.
        assert!(!kernel_record_names(
            b"12,1,2,-;Memory cgroup out of memory: Killed process 42 (python3)\n",
            want
        ));
        assert!(!kernel_record_names(
            b"3,1,2,-;Memory cgroup out of memory: Killed process 421 (python3)\n",
            want
        ));
        assert!(!kernel_record_names(b"garbage", want));
    }
}
