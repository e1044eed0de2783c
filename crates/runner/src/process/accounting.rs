//! What the whole run used, read once from its cgroups at the end of the
//! run (after every process is observed gone, before the groups are
//! removed), like a benchmark harness (BenchExec) reads them.
//!
//! Every figure is a counter or a peak the kernel keeps itself, so there is
//! no sampling thread: CPU (`cpu.stat` / `cpuacct.usage_user|sys`), peak
//! memory (`memory.peak` / `memory.max_usage_in_bytes`), IO bytes (`io.stat`
//! / `blkio.throttle.io_service_bytes`), peak processes (`pids.peak`, v2
//! and v1 since Linux 6.x) and OOM kills (`memory.events` /
//! `memory.oom_control`). A figure the kernel does not keep is `null` with
//! a `…_why` naming the missing file. Where no group could be made, the
//! children's `getrusage` stands in (`mechanism: rusage`): CPU and IO of the
//! processes that were waited for, and no tree-wide peak.
//!
//! The parsers are pure, so the v2 formats are tested on fixture text on
//! machines (like a v1 hybrid) that cannot produce them.

use std::fs;
use std::path::Path;

use crate::process::cgroup::CounterDirs;
use governed_model::{Fit, FitEntry, Limits, Resources};

/// `(user, system)` microseconds from a v2 `cpu.stat`.
pub(crate) fn parse_cpu_stat_v2(text: &str) -> Option<(u64, u64)> {
    Some((
        key_value(text, "user_usec")?,
        key_value(text, "system_usec")?,
    ))
}

/// The value of a `key N` line (`cpu.stat`, `memory.events`,
/// `memory.oom_control`, `cpuacct.stat`).
pub(crate) fn key_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

/// `(read, written)` bytes summed over the devices of a v2 `io.stat`
/// (`MAJ:MIN rbytes=… wbytes=… rios=… …`).
pub(crate) fn parse_io_stat_v2(text: &str) -> (u64, u64) {
    let mut read = 0u64;
    let mut written = 0u64;
    for l in text.lines() {
        for field in l.split_whitespace().skip(1) {
            if let Some((k, v)) = field.split_once('=') {
                let v: u64 = v.parse().unwrap_or(0);
                match k {
                    "rbytes" => read = read.saturating_add(v),
                    "wbytes" => written = written.saturating_add(v),
                    _ => {}
                }
            }
        }
    }
    (read, written)
}

/// `(read, written)` bytes summed over the devices of a v1
/// `blkio.throttle.io_service_bytes` (`MAJ:MIN Read N` lines; the `Total`
/// lines are skipped).
pub(crate) fn parse_blkio_v1(text: &str) -> (u64, u64) {
    let mut read = 0u64;
    let mut written = 0u64;
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let [_dev, op, n] = f.as_slice() {
            let n: u64 = n.parse().unwrap_or(0);
            match *op {
                "Read" => read = read.saturating_add(n),
                "Write" => written = written.saturating_add(n),
                _ => {}
            }
        }
    }
    (read, written)
}

/// Why a figure of the run is unknown (the receipt's `…_why`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unknown {
    #[error("{path} is not readable ({why}): the kernel does not keep this figure here")]
    Unreadable { path: String, why: String },
    #[error("{path} holds {text:?}, not a number")]
    NotANumber { path: String, text: String },
    #[error("{file} has no oom_kill line{note}")]
    NoOomKillLine {
        file: &'static str,
        note: &'static str,
    },
    #[error("the run has no {0}")]
    NoGroup(&'static str),
}

const NO_MEMORY_GROUP: &str = "memory cgroup (no v1 `memory` hierarchy, no v2 memory controller)";

fn read(dir: &Path, file: &str) -> Result<String, Unknown> {
    let path = dir.join(file);
    fs::read_to_string(&path).map_err(|e| Unknown::Unreadable {
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

fn read_u64(dir: &Path, file: &str) -> Result<u64, Unknown> {
    let t = read(dir, file)?;
    t.trim().parse().map_err(|_| Unknown::NotANumber {
        path: dir.join(file).display().to_string(),
        text: t.trim().to_string(),
    })
}

/// A figure, or why it is unknown.
type Figure = Result<u64, Unknown>;

/// The run's figures as read from its groups.
pub struct Counters {
    pub mechanism: &'static str,
    pub cpu_user_ms: Option<u64>,
    pub cpu_system_ms: Option<u64>,
    pub peak_memory: Figure,
    pub io: Result<(u64, u64), Unknown>,
    pub peak_processes: Figure,
    pub oom_kills: Figure,
}

/// Read every counter of the run's groups (one pass, a handful of small
/// files). `None` when the run had no group at all.
pub fn read_counters(dirs: &CounterDirs<'_>) -> Option<Counters> {
    let v2 = dirs
        .v2
        .as_ref()
        .map(|(d, ctrls)| (*d, |c: &str| ctrls.iter().any(|x| x == c)));
    let v2_has = |c: &str| v2.as_ref().filter(|(_, has)| has(c)).map(|(d, _)| *d);
    if v2.is_none()
        && dirs.memory_v1.is_none()
        && dirs.cpuacct_v1.is_none()
        && dirs.blkio_v1.is_none()
        && dirs.pids_v1.is_none()
    {
        return None;
    }
    let mut used_v1 = false;
    // CPU: a v1 cpuacct group where the hierarchy has one (on a hybrid
    // machine the controller is bound there), else v2 `cpu.stat`, which
    // every v2 group keeps even without the cpu controller.
    let mut cpu = None;
    if let Some(d) = dirs.cpuacct_v1 {
        let ns = |f| read_u64(d, f).ok();
        if let (Some(u), Some(s)) = (ns("cpuacct.usage_user"), ns("cpuacct.usage_sys")) {
            cpu = Some((u / 1_000_000, s / 1_000_000));
            used_v1 = true;
        } else if let Ok(t) = read(d, "cpuacct.stat") {
            // USER_HZ ticks (100 per second on Linux).
            if let (Some(u), Some(s)) = (key_value(&t, "user"), key_value(&t, "system")) {
                cpu = Some((u * 10, s * 10));
                used_v1 = true;
            }
        }
    }
    if cpu.is_none() {
        if let Some((d, _)) = v2.as_ref() {
            cpu = read(d, "cpu.stat")
                .ok()
                .and_then(|t| parse_cpu_stat_v2(&t))
                .map(|(u, s)| (u / 1000, s / 1000));
        }
    }
    let peak_memory = if let Some(d) = v2_has("memory") {
        read_u64(d, "memory.peak")
    } else if let Some(d) = dirs.memory_v1 {
        used_v1 = true;
        read_u64(d, "memory.max_usage_in_bytes")
    } else {
        Err(Unknown::NoGroup(NO_MEMORY_GROUP))
    };
    let oom_kills = if let Some(d) = v2_has("memory") {
        read(d, "memory.events").and_then(|t| {
            key_value(&t, "oom_kill").ok_or(Unknown::NoOomKillLine {
                file: "memory.events",
                note: "",
            })
        })
    } else if let Some(d) = dirs.memory_v1 {
        read(d, "memory.oom_control").and_then(|t| {
            key_value(&t, "oom_kill").ok_or(Unknown::NoOomKillLine {
                file: "memory.oom_control",
                note: " (Linux before 4.13)",
            })
        })
    } else {
        Err(Unknown::NoGroup(NO_MEMORY_GROUP))
    };
    let io = if let Some(d) = v2_has("io") {
        read(d, "io.stat").map(|t| parse_io_stat_v2(&t))
    } else if let Some(d) = dirs.blkio_v1 {
        used_v1 = true;
        read(d, "blkio.throttle.io_service_bytes").map(|t| parse_blkio_v1(&t))
    } else {
        Err(Unknown::NoGroup(
            "io cgroup (no v1 `blkio` hierarchy, no v2 io controller)",
        ))
    };
    let peak_processes = if let Some(d) = v2_has("pids") {
        read_u64(d, "pids.peak")
    } else if let Some(d) = dirs.pids_v1 {
        used_v1 = true;
        read_u64(d, "pids.peak")
    } else {
        Err(Unknown::NoGroup(
            "pids cgroup (no v1 `pids` hierarchy, no v2 pids controller)",
        ))
    };
    Some(Counters {
        mechanism: if used_v1 { "cgroup_v1" } else { "cgroup_v2" },
        cpu_user_ms: cpu.map(|c| c.0),
        cpu_system_ms: cpu.map(|c| c.1),
        peak_memory,
        io,
        peak_processes,
        oom_kills,
    })
}

/// The children's `getrusage` (`RUSAGE_CHILDREN`): every process that was
/// waited for, by us or by its own parent.
pub struct Rusage {
    pub user_ms: u64,
    pub system_ms: u64,
    pub max_rss_kib: u64,
    /// `ru_inblock`/`ru_oublock`, 512-byte units of the per-task IO
    /// accounting.
    pub in_blocks: u64,
    pub out_blocks: u64,
}

/// Build the receipt's `resources`: the group's counters where there are
/// any, else the children's rusage, and the fit of each limit.
pub fn resources(
    counters: Option<Counters>,
    ru: &Rusage,
    limits: &Limits,
    wall_ms: u64,
    output_bytes: u64,
) -> Resources {
    let split = |f: Figure| match f {
        Ok(v) => (Some(v), None),
        Err(why) => (None, Some(why.to_string())),
    };
    let mut r = match counters {
        Some(c) => {
            let (peak_memory_bytes, peak_memory_bytes_why) = split(c.peak_memory);
            let (peak_processes, peak_processes_why) = split(c.peak_processes);
            let (oom_kills, oom_kills_why) = split(c.oom_kills);
            // v1 blkio charges only the IO a process issued itself: data
            // written to the page cache and written back later by the
            // kernel is missed (v2 charges writeback to the group). The
            // per-task IO accounting of the waited-for processes charges a
            // write when the page is dirtied: the larger of the two.
            let (io_r, io_w) = match c.io {
                Ok((r, w)) => (
                    (Some(r.max(ru.in_blocks.saturating_mul(512))), None),
                    (Some(w.max(ru.out_blocks.saturating_mul(512))), None),
                ),
                Err(why) => {
                    let why = why.to_string();
                    ((None, Some(why.clone())), (None, Some(why)))
                }
            };
            Resources {
                cpu_user_ms: c.cpu_user_ms.unwrap_or(ru.user_ms),
                cpu_system_ms: c.cpu_system_ms.unwrap_or(ru.system_ms),
                peak_rss_kib: ru.max_rss_kib,
                mechanism: c.mechanism.into(),
                peak_memory_bytes,
                peak_memory_bytes_why,
                io_read_bytes: io_r.0,
                io_read_bytes_why: io_r.1,
                io_write_bytes: io_w.0,
                io_write_bytes_why: io_w.1,
                peak_processes,
                peak_processes_why,
                oom_kills,
                oom_kills_why,
                fit: Fit::default(),
            }
        }
        None => {
            let no_group = "no cgroup could be made for this run (see `governed-exec doctor`)";
            Resources {
                cpu_user_ms: ru.user_ms,
                cpu_system_ms: ru.system_ms,
                peak_rss_kib: ru.max_rss_kib,
                mechanism: "rusage".into(),
                peak_memory_bytes: None,
                peak_memory_bytes_why: Some(format!(
                    "{no_group}; rusage gives only the largest single process's peak RSS (peak_rss_kib)"
                )),
                io_read_bytes: Some(ru.in_blocks.saturating_mul(512)),
                io_read_bytes_why: None,
                io_write_bytes: Some(ru.out_blocks.saturating_mul(512)),
                io_write_bytes_why: None,
                peak_processes: None,
                peak_processes_why: Some(format!("{no_group}; no pids.peak to read")),
                oom_kills: None,
                oom_kills_why: Some(format!("{no_group}; no memory cgroup counts OOM kills")),
                fit: Fit::default(),
            }
        }
    };
    r.fit = Fit {
        wall_time_ms: Some(FitEntry {
            used: Some(wall_ms),
            limit: Some(limits.wall_time_ms),
        }),
        cpu_time_ms: Some(FitEntry {
            used: Some(r.cpu_time_ms()),
            limit: Some(limits.cpu_time_s.saturating_mul(1000)),
        }),
        memory_bytes: Some(FitEntry {
            used: r.peak_memory_bytes,
            limit: Some(limits.memory_bytes),
        }),
        processes: Some(FitEntry {
            used: r.peak_processes,
            limit: limits.max_processes.limit(),
        }),
        output_bytes: Some(FitEntry {
            used: Some(output_bytes),
            limit: Some(limits.output_cap_bytes),
        }),
    };
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_v2_cpu_stat_fixture() {
        let t = "usage_usec 1523042\nuser_usec 1012000\nsystem_usec 511042\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(parse_cpu_stat_v2(t), Some((1_012_000, 511_042)));
        assert_eq!(parse_cpu_stat_v2("usage_usec 1\n"), None);
    }

    #[test]
    fn cgroup_v2_io_stat_fixture() {
        let t = "254:0 rbytes=4096 wbytes=67108864 rios=1 wios=512 dbytes=0 dios=0\n\
                 8:16 rbytes=1000 wbytes=24 rios=2 wios=1 dbytes=0 dios=0\n";
        assert_eq!(parse_io_stat_v2(t), (5096, 67_108_888));
        assert_eq!(parse_io_stat_v2(""), (0, 0));
    }

    #[test]
    fn cgroup_v2_memory_events_fixture() {
        let t = "low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(key_value(t, "oom_kill"), Some(1));
        assert_eq!(key_value(t, "oom"), Some(2));
        assert_eq!(key_value(t, "missing"), None);
    }

    #[test]
    fn cgroup_v1_fixtures() {
        let blkio = "254:0 Read 8192\n254:0 Write 67117056\n254:0 Sync 67117056\n254:0 Async 0\n254:0 Discard 0\n254:0 Total 67125248\nTotal 67125248\n";
        assert_eq!(parse_blkio_v1(blkio), (8192, 67_117_056));
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(key_value(oom, "oom_kill"), Some(3));
        assert_eq!(key_value("user 150\nsystem 20\n", "system"), Some(20));
    }

    /// A v2 group as the kernel lays it out (memory, io and pids enabled),
    /// for machines that have none: the whole read path, end to end.
    #[test]
    fn a_v2_group_on_fixture_files_reads_as_cgroup_v2() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for (f, text) in [
            (
                "cpu.stat",
                "usage_usec 1500000\nuser_usec 1200000\nsystem_usec 300000\n",
            ),
            ("memory.peak", "314572800\n"),
            (
                "memory.events",
                "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n",
            ),
            (
                "io.stat",
                "254:0 rbytes=0 wbytes=67108864 rios=0 wios=64 dbytes=0 dios=0\n",
            ),
            ("pids.peak", "21\n"),
        ] {
            std::fs::write(d.join(f), text).unwrap();
        }
        let ctrls = ["memory", "io", "pids"].map(String::from).to_vec();
        let dirs = CounterDirs {
            v2: Some((d, ctrls)),
            memory_v1: None,
            cpuacct_v1: None,
            blkio_v1: None,
            pids_v1: None,
        };
        let c = read_counters(&dirs).unwrap();
        assert_eq!(c.mechanism, "cgroup_v2");
        assert_eq!((c.cpu_user_ms, c.cpu_system_ms), (Some(1200), Some(300)));
        assert_eq!(c.peak_memory, Ok(300 << 20));
        assert_eq!(c.io, Ok((0, 64 << 20)));
        assert_eq!(c.peak_processes, Ok(21));
        assert_eq!(c.oom_kills, Ok(1));

        // The same group on a kernel before memory.peak (5.19) and without
        // the io controller: those figures are unknown, with the reason.
        std::fs::remove_file(d.join("memory.peak")).unwrap();
        let dirs = CounterDirs {
            v2: Some((d, vec!["memory".into(), "pids".into()])),
            memory_v1: None,
            cpuacct_v1: None,
            blkio_v1: None,
            pids_v1: None,
        };
        let c = read_counters(&dirs).unwrap();
        assert!(c
            .peak_memory
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("memory.peak"));
        assert!(c.io.as_ref().unwrap_err().to_string().contains("io"));
        let r = resources(Some(c), &ru(), &limits(), 5, 0);
        assert_eq!(r.peak_memory_bytes, None);
        assert!(r.peak_memory_bytes_why.unwrap().contains("memory.peak"));
    }

    #[test]
    fn no_group_at_all_is_none() {
        let dirs = CounterDirs {
            v2: None,
            memory_v1: None,
            cpuacct_v1: None,
            blkio_v1: None,
            pids_v1: None,
        };
        assert!(read_counters(&dirs).is_none());
    }

    fn limits() -> Limits {
        governed_model::limits::tier(governed_model::Profile::Short)
    }

    fn ru() -> Rusage {
        Rusage {
            user_ms: 7,
            system_ms: 3,
            max_rss_kib: 900,
            in_blocks: 2,
            out_blocks: 4,
        }
    }

    #[test]
    fn without_a_group_rusage_stands_in_and_says_why() {
        let r = resources(None, &ru(), &limits(), 1500, 10);
        assert_eq!(r.mechanism, "rusage");
        assert_eq!((r.cpu_user_ms, r.cpu_system_ms), (7, 3));
        assert_eq!(r.peak_memory_bytes, None);
        assert!(r.peak_memory_bytes_why.is_some());
        assert_eq!(r.peak_processes, None);
        assert!(r.peak_processes_why.is_some());
        assert_eq!(
            (r.io_read_bytes, r.io_write_bytes),
            (Some(1024), Some(2048))
        );
        let fit = r.fit.wall_time_ms.unwrap();
        assert_eq!((fit.used, fit.limit), (Some(1500), Some(60_000)));
        assert_eq!(r.fit.cpu_time_ms.unwrap().used, Some(10));
        assert_eq!(r.fit.memory_bytes.unwrap().used, None);
    }

    #[test]
    fn counters_win_over_rusage_and_unknown_figures_carry_their_why() {
        let c = Counters {
            mechanism: "cgroup_v2",
            cpu_user_ms: Some(1000),
            cpu_system_ms: Some(200),
            peak_memory: Ok(300 << 20),
            io: Err(Unknown::NoGroup("io cgroup")),
            peak_processes: Ok(21),
            oom_kills: Ok(0),
        };
        let r = resources(Some(c), &ru(), &limits(), 10, 0);
        assert_eq!(r.mechanism, "cgroup_v2");
        assert_eq!(r.cpu_time_ms(), 1200);
        assert_eq!(r.peak_memory_bytes, Some(300 << 20));
        assert_eq!(r.peak_memory_bytes_why, None);
        assert_eq!(r.io_write_bytes, None);
        assert_eq!(
            r.io_write_bytes_why.as_deref(),
            Some("the run has no io cgroup")
        );
        assert_eq!(r.fit.processes.unwrap().used, Some(21));
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["io_read_bytes"].is_null());
        assert!(json.get("peak_memory_bytes_why").is_none());
    }
}
