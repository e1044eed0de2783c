//! Who the kernel's OOM killer killed. The memory cgroup counts OOM kills
//! (`memory.events` / `memory.oom_control`) but does not name the victim,
//! and a process of the run can SIGKILL the main process right after a
//! sibling was OOM-killed: "SIGKILL and an OOM kill counted" is not proof
//! that the main process was the victim. The kernel's own log is: its
//! `Killed process PID (…)` record carries the kernel facility, which no
//! process can write through `/dev/kmsg` (the kernel turns a userspace
//! write's facility 0 into LOG_USER). But the kernel also logs text others
//! choose (an audit record quoting a command line, a driver echoing a
//! device's name), so a record counts only in the OOM killer's exact format
//! from its first byte (`Memory cgroup out of memory: Killed process N
//! (comm) total-vm:…`), and where the kernel's summary line
//! (`oom-kill:…,oom_memcg=/path,…,pid=N,uid=U`) names the cgroup whose
//! limit was enforced, that cgroup must be the run's. So the runner opens
//! `/dev/kmsg` at its end before the child exists and, after the run, looks
//! for the main process's pid among the kernel's records written since.

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
    /// was taken: `None` when the log could not be read. `group` is the
    /// name of the run's memory cgroup (the last component of its path):
    /// where the OOM killer's summary record names the cgroup whose limit
    /// was hit, it must be that one.
    pub(crate) fn oom_killed(self, pid: i32, group: Option<&str>) -> Option<bool> {
        let mut f = self.0?;
        let mut seen = OomSeen::default();
        let mut buf = vec![0u8; 8192];
        // Bounded: the records written during one run, at most this many.
        for _ in 0..100_000 {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => seen.add(parse_record(&buf[..n]), pid),
                // Overwritten records (EPIPE): go on with the next one.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // EAGAIN: nothing more; anything else: as far as it goes.
                Err(_) => break,
            }
        }
        Some(seen.verdict(group))
    }
}

/// What the OOM killer logs for one kill, as far as it concerns us.
#[derive(Debug, PartialEq, Eq)]
enum OomRecord {
    /// `Memory cgroup out of memory: Killed process N (comm) total-vm:…`
    /// (or `Out of memory…`): the victim.
    Killed { pid: i32 },
    /// `oom-kill:constraint=…,oom_memcg=/path,task_memcg=…,task=comm,pid=N,uid=U`
    /// (kernels since 4.19, printed just before the kill): the victim and
    /// the memory cgroup whose limit was hit (`None`: a global OOM).
    Summary { pid: i32, oom_memcg: Option<String> },
}

/// The records about one pid.
#[derive(Default)]
struct OomSeen {
    killed: bool,
    /// `oom_memcg` of every summary naming the pid.
    summaries: Vec<Option<String>>,
}

impl OomSeen {
    fn add(&mut self, record: Option<OomRecord>, want: i32) {
        match record {
            Some(OomRecord::Killed { pid }) if pid == want => self.killed = true,
            Some(OomRecord::Summary { pid, oom_memcg }) if pid == want => {
                self.summaries.push(oom_memcg);
            }
            _ => {}
        }
    }

    /// Killed by the OOM killer, and, where the kernel named the cgroup
    /// whose limit it enforced, killed for the run's own limit: a kill for
    /// another cgroup's limit (an enclosing container's) or a global OOM
    /// is not the run's memory limit reaping it.
    fn verdict(&self, group: Option<&str>) -> bool {
        self.killed
            && self.summaries.iter().all(|m| match (m, group) {
                (Some(path), Some(g)) => path.rsplit('/').next() == Some(g),
                (Some(_), None) => true,
                (None, _) => false,
            })
    }
}

/// The prefixes the kernel puts before `: Killed process` (`mm/oom_kill.c`).
const KILLED_PREFIXES: [&str; 3] = [
    "Memory cgroup out of memory",
    "Out of memory",
    "Out of memory (oom_kill_allocating_task)",
];

/// One `/dev/kmsg` record (`PRIO,SEQ,TS,FLAGS;MESSAGE\n[ KEY=VALUE\n…]`)
/// read as an OOM killer record: only with the kernel facility
/// (PRIO >> 3 == 0; a userspace write is LOG_USER at least) and only in the
/// OOM killer's exact format, from the message's first byte. A kernel
/// record that merely contains the words (an audit record quoting a
/// command line, a driver echoing a name) is not one.
fn parse_record(record: &[u8]) -> Option<OomRecord> {
    let text = String::from_utf8_lossy(record);
    let (prefix, rest) = text.split_once(';')?;
    let prio = prefix.split(',').next()?.parse::<u32>().ok()?;
    if prio >> 3 != 0 {
        return None;
    }
    // The message is the first line; continuation lines are dictionary.
    let message = rest.split('\n').next()?;
    if let Some(summary) = message.strip_prefix("oom-kill:") {
        return parse_summary(summary);
    }
    KILLED_PREFIXES.iter().find_map(|p| {
        let after = message.strip_prefix(p)?.strip_prefix(": Killed process ")?;
        parse_killed(after)
    })
}

/// `N (comm) total-vm:NkB, anon-rss:NkB, file-rss:NkB, shmem-rss:NkB…`.
/// `comm` is at most 15 bytes (`\xNN`-escaped by `/dev/kmsg`, so at most 60
/// characters) and may itself hold `) total-vm:`: every candidate end is
/// tried.
fn parse_killed(after: &str) -> Option<OomRecord> {
    let (digits, rest) = after.split_once(" (")?;
    let pid = parse_number(digits)?;
    let pid = i32::try_from(pid).ok()?;
    let window = rest.char_indices().take_while(|(i, _)| *i <= 64);
    let found = window
        .filter(|(i, _)| rest[*i..].starts_with(") total-vm:"))
        .any(|(i, _)| sizes_follow(&rest[i + ") ".len()..]));
    found.then_some(OomRecord::Killed { pid })
}

/// `total-vm:NkB, anon-rss:NkB, file-rss:NkB, shmem-rss:NkB` at the start.
fn sizes_follow(mut s: &str) -> bool {
    for (i, field) in ["total-vm:", "anon-rss:", "file-rss:", "shmem-rss:"]
        .iter()
        .enumerate()
    {
        if i > 0 {
            let Some(r) = s.strip_prefix(", ") else {
                return false;
            };
            s = r;
        }
        let Some(r) = s.strip_prefix(field) else {
            return false;
        };
        let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        if end == 0 || !r[end..].starts_with("kB") {
            return false;
        }
        s = &r[end + 2..];
    }
    true
}

/// The `oom-kill:` line after its tag: `pid=N,uid=U` at its end (the task's
/// name before them may hold commas), `oom_memcg=` before `task_memcg=`.
fn parse_summary(s: &str) -> Option<OomRecord> {
    if !s.starts_with("constraint=CONSTRAINT_") {
        return None;
    }
    let (head, uid) = s.rsplit_once(",uid=")?;
    parse_number(uid)?;
    let (head, pid) = head.rsplit_once(",pid=")?;
    let pid = i32::try_from(parse_number(pid)?).ok()?;
    let (head, _task) = head.rsplit_once(",task=")?;
    let oom_memcg = head.split_once(",oom_memcg=").map(|(_, m)| {
        m.split_once(",task_memcg=")
            .map_or(m, |(memcg, _)| memcg)
            .to_string()
    });
    Some(OomRecord::Summary { pid, oom_memcg })
}

fn parse_number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: &str = "governed-exec-a1b2";

    fn verdict(records: &[&[u8]], pid: i32, group: Option<&str>) -> bool {
        let mut seen = OomSeen::default();
        for r in records {
            seen.add(parse_record(r), pid);
        }
        seen.verdict(group)
    }

    /// Records as a 6.x kernel writes them for a memory cgroup's limit.
    const SUMMARY: &[u8] = b"6,1001,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/system.slice/governed-exec-a1b2,task_memcg=/system.slice/governed-exec-a1b2,task=python3,pid=42,uid=0\n";
    const KILLED: &[u8] = b"3,1002,3,-;Memory cgroup out of memory: Killed process 42 (python3) total-vm:1052388kB, anon-rss:1036288kB, file-rss:4096kB, shmem-rss:0kB, UID:0 pgtables:2108kB oom_score_adj:0\n SUBSYSTEM=memory\n";

    #[test]
    fn the_oom_killers_records_for_the_runs_cgroup_count() {
        assert_eq!(parse_record(KILLED), Some(OomRecord::Killed { pid: 42 }));
        assert_eq!(
            parse_record(SUMMARY),
            Some(OomRecord::Summary {
                pid: 42,
                oom_memcg: Some("/system.slice/governed-exec-a1b2".into())
            })
        );
        assert!(verdict(&[SUMMARY, KILLED], 42, Some(GROUP)));
        // A kernel without the summary line: the kill record alone.
        assert!(verdict(&[KILLED], 42, Some(GROUP)));
        // The global form and a comm with spaces, parentheses and commas.
        assert!(verdict(
            &[b"3,9,9,-;Out of memory: Killed process 42 (a) b,c) total-vm:1kB, anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"],
            42,
            None
        ));
        // A comm that itself holds `) total-vm:`.
        assert!(verdict(
            &[b"3,9,9,-;Memory cgroup out of memory: Killed process 42 () total-vm:9kB) total-vm:1kB, anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"],
            42,
            Some(GROUP)
        ));
        // A summary whose task name holds `,pid=7,uid=0`.
        assert_eq!(
            parse_record(b"6,1,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/governed-exec-a1b2,task_memcg=/governed-exec-a1b2,task=x,pid=7,uid=0,pid=42,uid=0"),
            Some(OomRecord::Summary { pid: 42, oom_memcg: Some("/governed-exec-a1b2".into()) })
        );
    }

    #[test]
    fn forged_or_foreign_records_do_not_count() {
        // A userspace write (LOG_USER = 1, so PRIO 8..15) cannot pass.
        assert!(!verdict(
            &[b"12,1,2,-;Memory cgroup out of memory: Killed process 42 (python3) total-vm:1kB, anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"],
            42,
            Some(GROUP)
        ));
        // A kernel record that only contains the words: an audit record
        // quoting a command line, a driver echoing a name.
        for forged in [
            &b"5,7,8,-;audit: type=1400 audit(1.2:3): apparmor=\"DENIED\" comm=\"Killed process 42 (x) total-vm:1kB, anon-rss:0kB, file-rss:0kB, shmem-rss:0kB\""[..],
            b"3,7,8,-;usb 1-1: Product: Memory cgroup out of memory: Killed process 42 (x) total-vm:1kB, anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
            b"3,7,8,-;Killed process 42 (python3) total-vm:1kB",
            b"3,7,8,-;Memory cgroup out of memory: Killed process 42 (python3)",
            b"3,7,8,-;Memory cgroup out of memory: Killed process 42 (python3) total-vm:kB, anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
            b"3,7,8,-;Memory cgroup out of memory: Killed process 42x (python3) total-vm:1kB, anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
            b"3,7,8,-;nothing\nMemory cgroup out of memory: Killed process 42 (p) total-vm:1kB, anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
            b"garbage",
        ] {
            assert_eq!(parse_record(forged), None, "{}", String::from_utf8_lossy(forged));
            assert!(!verdict(&[forged], 42, Some(GROUP)));
        }
        // Another pid.
        assert!(!verdict(&[SUMMARY, KILLED], 421, Some(GROUP)));
        assert!(!verdict(&[SUMMARY, KILLED], 4, Some(GROUP)));
        // The kill was for another cgroup's limit (an enclosing
        // container's), or a global OOM: not the run's limit reaping it.
        let other = b"6,1001,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/docker/abc,task_memcg=/docker/abc/governed-exec-a1b2,task=python3,pid=42,uid=0";
        assert!(!verdict(&[other, KILLED], 42, Some(GROUP)));
        let prefix = b"6,1001,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/governed-exec-a1b2x,task_memcg=/governed-exec-a1b2x,task=python3,pid=42,uid=0";
        assert!(!verdict(&[prefix, KILLED], 42, Some(GROUP)));
        let global = b"6,1001,2,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/governed-exec-a1b2,task=python3,pid=42,uid=0";
        assert!(!verdict(&[global, KILLED], 42, Some(GROUP)));
    }
}
