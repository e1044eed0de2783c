//! Per-run cgroups, where the machine lets us create them.
//!
//! Two jobs, each optional and reported truthfully in the receipt:
//! - the **pids** controller (v1 or v2) enforces `max_processes` for the run
//!   alone — unlike `RLIMIT_NPROC`, which counts every process of the uid and
//!   does not bind root at all;
//! - a **cgroup v2** group gives `cgroup.kill` (kill the whole run without
//!   any pid in hand) and `cgroup.events` `populated 0` as an independent
//!   confirmation that the run is gone (as BenchExec does).
//!
//! - a **memory** group (v2 `memory.max` + `memory.swap.max` 0 in the same
//!   v2 group, else a v1 `memory` group with `memory.limit_in_bytes` and
//!   `memory.memsw.limit_in_bytes` where swap is accounted) enforces the
//!   lease's `memory_bytes` on the resident memory of the whole run
//!   (CONTRACT §9); without one, `run` falls back to `RLIMIT_AS`;
//! - on a v1 or hybrid machine, a `blkio` group (and a `cpuacct` group
//!   where there is no v2 group, whose `cpu.stat` serves) accounts the
//!   run's IO and CPU (read once at the end, see `process::accounting`).
//!
//! Joining is on the hot path, so it avoids migrating a thread group (which
//! waits for an RCU grace period, ~10-20 ms here): the child is born in the
//! v2 group by `clone3(CLONE_INTO_CGROUP)`, and moves its single thread into
//! a v1 group by writing `0` to that group's `tasks` file before it execs.
//! Every descendant is then born inside.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Why a group could not be limited or a limit read.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot write {file} in {}: {source}", dir.display())]
    Write {
        file: &'static str,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("/sys/block is not readable")]
    NoBlockDevices,
    /// `blkio.throttle.write_bps_device` could not be written for these
    /// disks (one `FILE DEV: error` each).
    #[error("{}", .0.join(", "))]
    BlkioRules(Vec<String>),
    #[error("no pids.max is visible for this process's cgroup")]
    NoPidsMax,
    /// Every `pids.max` found (`FILE = VALUE` each) says `max`.
    #[error("no enclosing pids.max is a number ({})", .0.join(", "))]
    PidsMaxNotANumber(Vec<String>),
}

struct Group {
    dir: PathBuf,
    /// The v1 hierarchy's controllers (its mount options), empty for v2.
    controllers: String,
    /// v1: the `tasks` file (write-only); v2: the directory itself.
    join: File,
    /// Sweep crashed runners' groups beside this one when it is removed.
    sweep: bool,
    /// v2: `cgroup.procs`, for a child that must join by itself (no
    /// `CLONE_INTO_CGROUP` when clone3 is filtered).
    procs: Option<File>,
}

/// An empty group older than this is a crashed runner's: a live run's group
/// is either populated or younger than that.
const STALE_AFTER: Duration = Duration::from_secs(60);

/// Groups of crashed runners are left behind (no Drop ran). Remove sibling
/// groups that are empty and older than [`STALE_AFTER`].
fn sweep_stale(parent: &Path) {
    let Ok(rd) = fs::read_dir(parent) else { return };
    let now = SystemTime::now();
    for entry in rd.flatten() {
        let stale_name = entry
            .file_name()
            .to_string_lossy()
            .starts_with("governed-exec-");
        if !stale_name {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_AFTER);
        if old {
            let empty = fs::read_to_string(entry.path().join("cgroup.procs"))
                .is_ok_and(|s| s.trim().is_empty());
            if empty {
                let _ = fs::remove_dir(entry.path());
            }
        }
    }
}

impl Group {
    fn create(dir: PathBuf, v2: bool, sweep: bool, controllers: &str) -> std::io::Result<Group> {
        fs::create_dir(&dir)?;
        let join = if v2 {
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_CLOEXEC | libc::O_DIRECTORY)
                .open(&dir)
        } else {
            OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(dir.join("tasks"))
        };
        let procs = if v2 {
            OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(dir.join("cgroup.procs"))
                .ok()
        } else {
            None
        };
        match join {
            Ok(join) => Ok(Group {
                dir,
                controllers: controllers.to_string(),
                join,
                sweep,
                procs,
            }),
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// The group's members; an unreadable `cgroup.procs` is an error, never
    /// "empty" (a child that lowered the runner's RLIMIT_NOFILE must not make
    /// a full group read as gone).
    fn pids(&self) -> std::io::Result<Vec<i32>> {
        Ok(fs::read_to_string(self.dir.join("cgroup.procs"))?
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect())
    }

    /// Whether this (v1) group's hierarchy carries `controller`.
    fn has(&self, controller: &str) -> bool {
        self.controllers.split(',').any(|c| c == controller)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // rmdir succeeds only once the group is empty, which cleanup ensured.
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // Off the spawn path: clear what crashed runners left beside us.
        if let Some(parent) = self.dir.parent().filter(|_| self.sweep) {
            sweep_stale(parent);
        }
    }
}

#[derive(Default)]
pub struct RunCgroups {
    name: String,
    pids: Option<Group>,
    track: Option<Group>,
    pids_kind: Option<&'static str>,
    /// Why a group could not be made or limited, one line per attempt
    /// (shown by `doctor` and in an `isolation_unavailable` refusal).
    notes: Vec<String>,
    /// v1 groups of the `memory`, `cpuacct` and `blkio` hierarchies (one
    /// per hierarchy) that the child joins like the pids group.
    extra_v1: Vec<Group>,
    memory_kind: Option<&'static str>,
    /// Why the memory limit is not a cgroup's, one line per attempt.
    memory_notes: Vec<String>,
    /// The v2 group's `cgroup.controllers`, read once when it is made.
    v2_controllers: Vec<String>,
}

/// Where the run's counters live, for `process::accounting`.
pub struct CounterDirs<'a> {
    /// The v2 group and its enabled controllers (`cgroup.controllers`).
    pub v2: Option<(&'a Path, Vec<String>)>,
    pub memory_v1: Option<&'a Path>,
    pub cpuacct_v1: Option<&'a Path>,
    pub blkio_v1: Option<&'a Path>,
    pub pids_v1: Option<&'a Path>,
}

/// The most groups the child joins by writing to a v1 `tasks` file: pids,
/// memory, cpuacct, blkio.
pub(crate) const MAX_V1_JOINS: usize = governed_sys::MAX_V1_TASKS;

/// A throttle rule no device reaches (1 PiB/s). Since Linux 6.x blk-throttle
/// counts a cgroup's bytes (`blkio.throttle.io_service_bytes`, reads and
/// writes) only on a disk where some group has a rule; `u64::MAX` means "no
/// rule", so a huge finite write bound turns accounting on without limiting
/// anything. One rule per disk is enough.
const BLKIO_ACCOUNTING_BPS: u64 = 1 << 50;

/// Give every non-empty disk a never-reached throttle rule in `dir`, so the
/// kernel accounts the group's IO on it. `Err` lists what failed.
///
/// The disks are `/sys/block`'s entries; their device numbers and sizes
/// come from one read of `/proc/partitions`, which lists every block
/// device with a non-zero size except removable ones that cannot be
/// partitioned (an optical drive). An entry it leaves out is read from
/// `/sys/block/NAME/{size,dev}` as before, unless it is of a kind that is
/// never removable (loop, ram, zram, nbd, md, dm): then it is empty, and an
/// empty disk gets no rule. Two reads a run instead of two per disk.
fn enable_blkio_accounting(dir: &Path) -> Result<(), CgroupError> {
    let mut failed = Vec::new();
    let Ok(rd) = fs::read_dir("/sys/block") else {
        return Err(CgroupError::NoBlockDevices);
    };
    let partitions = fs::read_to_string("/proc/partitions").unwrap_or_default();
    let listed = |name: &str| {
        partitions.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            let (maj, min, _blocks, n) = (f.next()?, f.next()?, f.next()?, f.next()?);
            (n == name && maj.parse::<u32>().is_ok()).then(|| format!("{maj}:{min}"))
        })
    };
    const NEVER_REMOVABLE: [&str; 6] = ["loop", "ram", "zram", "nbd", "md", "dm-"];
    for disk in rd.flatten() {
        let name = disk.file_name();
        let name = name.to_string_lossy();
        let dev = match listed(&name) {
            Some(dev) => dev,
            None if NEVER_REMOVABLE.iter().any(|k| name.starts_with(k)) => continue,
            None => {
                let p = disk.path();
                let empty = fs::read_to_string(p.join("size")).is_ok_and(|s| s.trim() == "0");
                let Ok(dev) = fs::read_to_string(p.join("dev")) else {
                    continue;
                };
                if empty {
                    continue;
                }
                dev.trim().to_string()
            }
        };
        let file = "blkio.throttle.write_bps_device";
        let rule = format!("{dev} {BLKIO_ACCOUNTING_BPS}");
        if let Err(e) = write_file(dir, file, &rule) {
            failed.push(format!("{file} {dev}: {e}"));
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CgroupError::BlkioRules(failed))
    }
}

/// Write `value` to `dir/file`.
fn write_file(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(dir.join(file))
        .and_then(|mut f| f.write_all(value.as_bytes()))
}

/// Write `value` to `dir/file`, naming both if it fails.
fn write_limit_file(dir: &Path, file: &'static str, value: &str) -> Result<(), CgroupError> {
    write_file(dir, file, value).map_err(|source| CgroupError::Write {
        file,
        dir: dir.to_path_buf(),
        source,
    })
}

/// v2: `memory.max` = `bytes` and no swap (`memory.swap.max` 0 where the
/// kernel accounts swap).
fn limit_memory_v2(dir: &Path, bytes: u64) -> Result<(), CgroupError> {
    write_limit_file(dir, "memory.max", &bytes.to_string())?;
    if dir.join("memory.swap.max").exists() {
        write_limit_file(dir, "memory.swap.max", "0")?;
    }
    Ok(())
}

/// v1: `memory.limit_in_bytes`, then `memory.memsw.limit_in_bytes` (memory
/// + swap, so the run cannot spill into swap) where swap is accounted.
fn limit_memory_v1(dir: &Path, bytes: u64) -> Result<(), CgroupError> {
    write_limit_file(dir, "memory.limit_in_bytes", &bytes.to_string())?;
    if dir.join("memory.memsw.limit_in_bytes").exists() {
        write_limit_file(dir, "memory.memsw.limit_in_bytes", &bytes.to_string())?;
    }
    Ok(())
}

/// (mount point, fs type, super options, mount root) of cgroup mounts.
fn cgroup_mounts() -> Vec<(PathBuf, String, String, String)> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            let fstype = post.first()?.to_string();
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some((
                PathBuf::from(pre.get(4)?),
                fstype,
                post.get(2).unwrap_or(&"").to_string(),
                pre.get(3)?.to_string(),
            ))
        })
        .collect()
}

/// The cgroup mounts, without reading `/proc/self/mountinfo`, where they
/// are where systemd, Docker and every distribution put them: each v1
/// hierarchy of `/proc/self/cgroup` at `/sys/fs/cgroup/CONTROLLERS`, the v2
/// one at `/sys/fs/cgroup/unified` (hybrid) or `/sys/fs/cgroup` (unified),
/// each a cgroup filesystem of the right version (`statfs`) whose root is
/// the hierarchy's, i.e. our own group is at its path under the mount (a
/// container's mount of a sub-tree is not: its own path is not there).
/// `None` as soon as one is not so: then mountinfo is read. Named v1
/// hierarchies (`name=systemd`) carry no controller and are left out, as
/// every use of the list ignores them.
fn usual_mounts(own: &OwnCgroups) -> Option<Vec<(PathBuf, String, String, String)>> {
    use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};
    let is = |dir: &Path, magic| statfs(dir).is_ok_and(|s| s.filesystem_type() == magic);
    let mut out = Vec::new();
    for line in own.0.lines() {
        let mut it = line.splitn(3, ':');
        let (_id, ctrls, path) = (it.next()?, it.next()?, it.next()?);
        let (mount, fstype, opts) = if ctrls.is_empty() {
            let mount = [
                Path::new("/sys/fs/cgroup/unified"),
                Path::new("/sys/fs/cgroup"),
            ]
            .into_iter()
            .find(|m| is(m, CGROUP2_SUPER_MAGIC))?;
            (mount.to_path_buf(), "cgroup2", "rw".to_string())
        } else if ctrls.starts_with("name=") {
            continue;
        } else {
            let mount = Path::new("/sys/fs/cgroup").join(ctrls);
            if !is(&mount, CGROUP_SUPER_MAGIC) {
                return None;
            }
            (mount, "cgroup", format!("rw,{ctrls}"))
        };
        if !mount.join(path.trim_start_matches('/')).is_dir() {
            return None;
        }
        out.push((mount, fstype.to_string(), opts, "/".to_string()));
    }
    (!out.is_empty()).then_some(out)
}

/// This process's `/proc/self/cgroup`, read once per run (every hierarchy
/// asks it for its own path).
struct OwnCgroups(String);

impl OwnCgroups {
    fn read() -> OwnCgroups {
        OwnCgroups(fs::read_to_string("/proc/self/cgroup").unwrap_or_default())
    }

    /// Our own cgroup path in the hierarchy whose line matches `pred` on
    /// its controller list.
    fn path(&self, pred: impl Fn(&str) -> bool) -> Option<String> {
        self.0.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let _id = it.next()?;
            let ctrl = it.next()?;
            let path = it.next()?;
            pred(ctrl).then(|| path.to_string())
        })
    }
}

fn join_cgroup(mount: &Path, root: &str, own: &str) -> PathBuf {
    let rel = own
        .strip_prefix(root)
        .unwrap_or(own)
        .trim_start_matches('/');
    mount.join(rel)
}

impl RunCgroups {
    /// Create what the machine allows; never fails (absence is reported in
    /// [`RunCgroups::notes`]). `limit` is written to the pids group's
    /// `pids.max` when there is one (`None`: the approver waived the limit;
    /// the groups still serve cleanup). `sweep`: remove crashed runners'
    /// groups when this run's are removed (see [`crate::process::scratch::sweep_due`]).
    /// `memory`: the lease's `memory_bytes`, written to a memory group
    /// (v2 first, else v1) when one can be made.
    pub fn create(
        attempt_id: &str,
        limit: Option<u64>,
        memory: Option<u64>,
        sweep: bool,
    ) -> RunCgroups {
        let name = format!("governed-exec-{attempt_id}");
        let mut out = RunCgroups {
            name: name.clone(),
            ..RunCgroups::default()
        };
        let own_cgroups = OwnCgroups::read();
        let mounts = usual_mounts(&own_cgroups).unwrap_or_else(cgroup_mounts);
        if !mounts
            .iter()
            .any(|(_, t, o, _)| t == "cgroup2" || o.split(',').any(|x| x == "pids"))
        {
            out.notes
                .push("no pids cgroup hierarchy (v1 `pids` or v2) is mounted".into());
        }
        for (mount, fstype, opts, root) in &mounts {
            if fstype == "cgroup2" && out.track.is_none() {
                let Some(own) = own_cgroups.path(|c| c.is_empty()) else {
                    continue;
                };
                let base = join_cgroup(mount, root, &own);
                match Group::create(base.join(&name), true, sweep, "") {
                    Ok(g) => {
                        out.limit_v2(&g, &base, limit, memory);
                        out.track = Some(g);
                    }
                    Err(e) => out.notes.push(format!(
                        "cannot create a cgroup v2 group under {}: {e}",
                        base.display()
                    )),
                }
            } else if fstype == "cgroup"
                && opts.split(',').any(|o| o == "pids")
                && out.pids.is_none()
            {
                let Some(own) = own_cgroups.path(|c| c.split(',').any(|x| x == "pids")) else {
                    continue;
                };
                let base = join_cgroup(mount, root, &own);
                match Group::create(base.join(&name), false, sweep, opts) {
                    Ok(g) => match limit {
                        Some(n) if write_limit(&g.dir, n) => {
                            out.pids_kind = Some("pids_cgroup_v1");
                            out.pids = Some(g);
                        }
                        Some(_) => out
                            .notes
                            .push(format!("cannot write pids.max in {}", g.dir.display())),
                        // Waived: the group still tracks the run's members.
                        None => out.pids = Some(g),
                    },
                    Err(e) => out.notes.push(format!(
                        "cannot create a pids cgroup (v1) under {}: {e}",
                        base.display()
                    )),
                }
            }
        }
        out.create_extra_v1(&mounts, &own_cgroups, memory, sweep);
        if memory.is_some() && out.memory_kind.is_none() && out.memory_notes.is_empty() {
            out.memory_notes
                .push("no memory cgroup hierarchy (v1 `memory` or v2 with the memory controller) is mounted".into());
        }
        out
    }

    /// Remove the run's groups now (each `rmdir`, which succeeds only on an
    /// empty group, and the sweep where due: see `Group`'s drop). Only once
    /// nothing will read or join them again: the counters are read.
    pub fn remove(&mut self) {
        self.pids = None;
        self.track = None;
        self.extra_v1.clear();
    }

    /// The run's new v2 group `g` under `base`: its controllers read, the
    /// pids limit (unless a v1 pids group has it) and the memory limit
    /// written where the controllers allow.
    fn limit_v2(&mut self, g: &Group, base: &Path, limit: Option<u64>, memory: Option<u64>) {
        // Read once: the controllers say what to limit here
        // and which counters to read at the end.
        self.v2_controllers = fs::read_to_string(g.dir.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let has_pids = self.v2_controllers.iter().any(|c| c == "pids");
        if has_pids && self.pids.is_none() {
            match limit {
                Some(n) if write_limit(&g.dir, n) => self.pids_kind = Some("pids_cgroup_v2"),
                Some(_) => self
                    .notes
                    .push(format!("cannot write pids.max in {}", g.dir.display())),
                None => {}
            }
        } else if !has_pids {
            self.notes.push(format!(
                "the v2 group {} has no pids controller (it is bound to a v1 hierarchy or not enabled in the parent)",
                base.display()
            ));
        }
        if let Some(bytes) = memory {
            let has_memory = self.v2_controllers.iter().any(|c| c == "memory");
            if !has_memory {
                self.memory_notes.push(format!(
                    "the v2 group {} has no memory controller (it is bound to a v1 hierarchy or not enabled in the parent's cgroup.subtree_control)",
                    base.display()
                ));
            } else {
                match limit_memory_v2(&g.dir, bytes) {
                    Ok(()) => self.memory_kind = Some("memory_cgroup_v2"),
                    Err(e) => self.memory_notes.push(e.to_string()),
                }
            }
        }
    }

    /// The v1 `memory`, `blkio` and (without a v2 group) `cpuacct` groups,
    /// one per hierarchy; a hierarchy the pids group already covers is not
    /// joined twice.
    fn create_extra_v1(
        &mut self,
        mounts: &[(PathBuf, String, String, String)],
        own_cgroups: &OwnCgroups,
        memory: Option<u64>,
        sweep: bool,
    ) {
        // CPU comes from the v2 group's `cpu.stat` when there is one (every
        // v2 group keeps it, with or without the cpu controller): a v1
        // cpuacct group would only add its mkdir/rmdir to every run.
        let wanted: &[&str] = if self.track.is_some() {
            &["memory", "blkio"]
        } else {
            &["memory", "cpuacct", "blkio"]
        };
        for (mount, fstype, opts, root) in mounts {
            let ctrls: Vec<&str> = opts.split(',').collect();
            if fstype != "cgroup"
                || ctrls.contains(&"pids")
                || !wanted.iter().any(|w| ctrls.contains(w))
                || self.extra_v1.iter().any(|g| g.controllers == *opts)
            {
                continue;
            }
            let Some(own) = own_cgroups.path(|c| {
                let cs: Vec<&str> = c.split(',').collect();
                wanted.iter().any(|w| cs.contains(w) && ctrls.contains(w))
            }) else {
                continue;
            };
            let base = join_cgroup(mount, root, &own);
            let g = match Group::create(base.join(&self.name), false, sweep, opts) {
                Ok(g) => g,
                Err(e) => {
                    let note = format!(
                        "cannot create a v1 {opts} cgroup under {}: {e}",
                        base.display()
                    );
                    if ctrls.contains(&"memory") && memory.is_some() && self.memory_kind.is_none() {
                        self.memory_notes.push(note);
                    } else {
                        self.notes.push(note);
                    }
                    continue;
                }
            };
            if g.has("memory") && self.memory_kind.is_none() {
                if let Some(bytes) = memory {
                    match limit_memory_v1(&g.dir, bytes) {
                        Ok(()) => self.memory_kind = Some("memory_cgroup_v1"),
                        Err(e) => {
                            // A memory group without its limit is no use to
                            // the limit and must not pretend to be one.
                            self.memory_notes.push(e.to_string());
                            continue;
                        }
                    }
                }
            }
            if g.has("blkio") {
                if let Err(e) = enable_blkio_accounting(&g.dir) {
                    self.notes
                        .push(format!("blkio accounting is incomplete: {e}"));
                }
            }
            self.extra_v1.push(g);
        }
    }

    /// How `memory_bytes` is enforced by a cgroup (`memory_cgroup_v2`,
    /// `memory_cgroup_v1`), if it is.
    pub fn memory_limit(&self) -> Option<&'static str> {
        self.memory_kind
    }

    /// The name (last path component, unique to the attempt) of the run's
    /// memory cgroup, where a cgroup enforces the memory limit: what the
    /// OOM killer's `oom_memcg=` names when it enforces the run's limit.
    pub fn memory_group_name(&self) -> Option<&str> {
        self.memory_kind.map(|_| self.name.as_str())
    }

    /// Why no memory cgroup limits this run, one line per attempt.
    pub fn memory_notes(&self) -> &[String] {
        &self.memory_notes
    }

    /// Where the run's counters are, for the one read at the end.
    pub fn counter_dirs(&self) -> CounterDirs<'_> {
        let v1 = |c: &str| {
            self.extra_v1
                .iter()
                .chain(self.pids.iter())
                .find(|g| g.has(c))
                .map(|g| g.dir.as_path())
        };
        CounterDirs {
            v2: self
                .track
                .as_ref()
                .map(|g| (g.dir.as_path(), self.v2_controllers.clone())),
            memory_v1: v1("memory"),
            cpuacct_v1: v1("cpuacct"),
            blkio_v1: v1("blkio"),
            pids_v1: v1("pids"),
        }
    }

    /// The witnesses these groups give cleanup.
    pub(crate) fn witnesses(&self) -> Vec<&'static str> {
        let mut w = Vec::new();
        if self.track.is_some() {
            w.push("cgroup_v2");
        }
        if self.pids.is_some() {
            w.push("pids_cgroup_v1");
        }
        w
    }

    /// Could a child of `uid` move itself out of the pids group? Moving
    /// needs write access to `cgroup.procs`/`tasks` above the group, which
    /// uid 0 has by owning them (no capability needed) unless cgroupfs is
    /// covered in its mount namespace (`covered`); another uid only where
    /// the hierarchy was delegated to it.
    pub(crate) fn leavable_by(&self, uid: u32, covered: bool) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Some(g) = self.pids.as_ref().or(self.track.as_ref()) else {
            return false;
        };
        if uid == 0 {
            return !covered;
        }
        let Some(parent) = g.dir.parent() else {
            return true;
        };
        ["cgroup.procs", "tasks"]
            .iter()
            .any(|f| fs::metadata(parent.join(f)).is_ok_and(|m| m.uid() == uid))
    }

    /// Why no per-run pids limit could be set, one line per attempt.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// How `max_processes` is enforced by a cgroup, if it is.
    pub fn process_limit(&self) -> Option<&'static str> {
        self.pids_kind
    }

    pub fn has_kill(&self) -> bool {
        self.track.is_some()
    }

    /// The v1 `tasks` files the child writes `0` into (pids first), at most
    /// [`MAX_V1_JOINS`].
    pub(crate) fn v1_tasks_fds(&self) -> Vec<RawFd> {
        self.pids
            .iter()
            .chain(&self.extra_v1)
            .map(|g| g.join.as_raw_fd())
            .take(MAX_V1_JOINS)
            .collect()
    }

    /// The v2 group's `cgroup.procs`, for a child joining by itself.
    pub(crate) fn v2_procs_fd(&self) -> Option<RawFd> {
        self.track
            .as_ref()
            .and_then(|g| g.procs.as_ref())
            .map(|f| f.as_raw_fd())
    }

    /// The v2 directory fd for `clone3(CLONE_INTO_CGROUP)`, if any.
    pub(crate) fn v2_dir_fd(&self) -> Option<RawFd> {
        self.track.as_ref().map(|g| g.join.as_raw_fd())
    }

    /// SIGKILL every process of the run through `cgroup.kill` (v2).
    pub fn kill(&self) {
        if let Some(g) = &self.track {
            let _ = OpenOptions::new()
                .write(true)
                .open(g.dir.join("cgroup.kill"))
                .and_then(|mut f| f.write_all(b"1"));
        }
    }

    /// Processes still in any of the run's cgroups, or the error that kept
    /// one group from being read.
    pub fn members(&self) -> std::io::Result<Vec<i32>> {
        let mut v = Vec::new();
        for g in [&self.pids, &self.track].into_iter().flatten() {
            v.extend(g.pids()?);
        }
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }

    /// SIGKILL every member through a pidfd, after checking (on the pidfd's
    /// process) that it is still in one of our groups. Covers the v1-only case.
    pub(crate) fn kill_members(&self) {
        for pid in self.members().unwrap_or_default() {
            let Ok(fd) = governed_sys::pidfd_open(pid) else {
                continue;
            };
            let ours = fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|c| c.contains(&self.name));
            if ours {
                let _ = governed_sys::pidfd_send_signal(&fd, libc::SIGKILL);
            }
        }
    }

    /// `populated 1` in the v2 group's `cgroup.events` (None without one;
    /// an unreadable file is an error, never "not populated").
    pub fn populated(&self) -> Option<std::io::Result<bool>> {
        let g = self.track.as_ref()?;
        Some(
            fs::read_to_string(g.dir.join("cgroup.events"))
                .map(|events| events.lines().any(|l| l.trim() == "populated 1")),
        )
    }
}

fn write_limit(dir: &Path, max: u64) -> bool {
    OpenOptions::new()
        .write(true)
        .open(dir.join("pids.max"))
        .and_then(|mut f| f.write_all(max.to_string().as_bytes()))
        .is_ok()
}

/// The tightest `pids.max` that already binds this process: its own pids
/// cgroup and every ancestor visible under the mount (v1 `pids` hierarchy
/// or v2), e.g. the container's group that `docker run --pids-limit N`
/// limits. `Ok((limit, file))`, or `Err` with what was found instead.
/// A limit on an enclosing group bounds the run *and* governed-exec itself,
/// so it is a valid bound for the run whenever it is no larger than the
/// lease's; nothing is written, so a read-only cgroupfs is no obstacle.
pub fn enclosing_pids_max() -> Result<(u64, PathBuf), CgroupError> {
    let mut best: Option<(u64, PathBuf)> = None;
    let mut seen = Vec::new();
    let own_cgroups = OwnCgroups::read();
    for (mount, fstype, opts, root) in cgroup_mounts() {
        let own = if fstype == "cgroup2" {
            own_cgroups.path(|c| c.is_empty())
        } else if opts.split(',').any(|o| o == "pids") {
            own_cgroups.path(|c| c.split(',').any(|x| x == "pids"))
        } else {
            None
        };
        let Some(own) = own else { continue };
        let mut dir = join_cgroup(&mount, &root, &own);
        loop {
            let file = dir.join("pids.max");
            if let Ok(text) = fs::read_to_string(&file) {
                let v = text.trim().to_string();
                if let Ok(n) = v.parse::<u64>() {
                    if best.as_ref().is_none_or(|(b, _)| n < *b) {
                        best = Some((n, file.clone()));
                    }
                }
                seen.push(format!("{} = {v}", file.display()));
            }
            if dir == mount || !dir.pop() || !dir.starts_with(&mount) {
                break;
            }
        }
    }
    match best {
        Some(b) => Ok(b),
        None if seen.is_empty() => Err(CgroupError::NoPidsMax),
        None => Err(CgroupError::PidsMaxNotANumber(seen)),
    }
}

/// Whether a pids hierarchy (v1 `pids` or v2) is mounted read-write here: a
/// uid-0 child could then move itself out of the group whose limit binds
/// it. Under Docker's defaults every cgroup mount is read-only.
pub(crate) fn pids_mount_writable() -> bool {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines().any(|l| {
        let Some((pre, post)) = l.split_once(" - ") else {
            return false;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        let pids = match post.first() {
            Some(&"cgroup2") => true,
            Some(&"cgroup") => post
                .get(2)
                .is_some_and(|o| o.split(',').any(|x| x == "pids")),
            _ => false,
        };
        pids && pre.get(5).is_some_and(|o| o.split(',').any(|x| x == "rw"))
    })
}

#[cfg(test)]
impl RunCgroups {
    /// A run whose per-run pids group (of `kind`) is the empty directory
    /// `dir`, for the rules that read only where the group is. Dropping it
    /// removes `dir`.
    pub(crate) fn with_pids_group_at(dir: &Path, kind: &'static str) -> RunCgroups {
        RunCgroups {
            pids: Some(Group {
                dir: dir.to_path_buf(),
                controllers: "pids".into(),
                join: File::open("/dev/null").expect("/dev/null"),
                sweep: false,
                procs: None,
            }),
            pids_kind: Some(kind),
            ..RunCgroups::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the fast path finds the mounts without mountinfo, mountinfo
    /// says the same: each one a cgroup mount there, of that version, with
    /// those controllers and the hierarchy's root as its root. (Where the
    /// mounts are elsewhere the fast path gives up, and there is nothing
    /// to compare.)
    #[test]
    fn usual_mounts_agree_with_mountinfo() {
        let own = OwnCgroups::read();
        let Some(usual) = usual_mounts(&own) else {
            return;
        };
        let table = cgroup_mounts();
        for (mount, fstype, opts, root) in &usual {
            let found = table.iter().find(|(m, t, _, _)| m == mount && t == fstype);
            let Some((_, _, real_opts, real_root)) = found else {
                panic!(
                    "{} ({fstype}) is not a cgroup mount in mountinfo",
                    mount.display()
                );
            };
            assert_eq!(root, real_root, "{}", mount.display());
            if fstype == "cgroup" {
                for c in opts.split(',').skip(1) {
                    assert!(
                        real_opts.split(',').any(|o| o == c),
                        "{}: {c} not in {real_opts}",
                        mount.display()
                    );
                }
            }
        }
    }

    /// The v2 limit on fixture files (this machine's memory controller is
    /// v1): `memory.max` gets the bytes and swap is shut off.
    #[test]
    fn memory_v2_limit_writes_max_and_no_swap() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Empty files: cgroupfs takes each write whole, a regular file
        // would keep the tail of a longer old value.
        std::fs::write(d.join("memory.max"), "").unwrap();
        std::fs::write(d.join("memory.swap.max"), "").unwrap();
        limit_memory_v2(d, 512 << 20).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("memory.max")).unwrap(),
            "536870912"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("memory.swap.max")).unwrap(),
            "0"
        );
        // No swap accounting (no memory.swap.max): the limit alone.
        std::fs::remove_file(d.join("memory.swap.max")).unwrap();
        limit_memory_v2(d, 1 << 30).unwrap();
        assert!(!d.join("memory.swap.max").exists());
        // A group without the file is no memory group: an error, not a pass.
        let empty = tempfile::tempdir().unwrap();
        assert!(limit_memory_v2(empty.path(), 1 << 30)
            .unwrap_err()
            .to_string()
            .contains("memory.max"));
    }

    #[test]
    fn memory_v1_limit_writes_memsw_where_swap_is_accounted() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("memory.limit_in_bytes"), "").unwrap();
        std::fs::write(d.join("memory.memsw.limit_in_bytes"), "").unwrap();
        limit_memory_v1(d, 256 << 20).unwrap();
        for f in ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"] {
            assert_eq!(
                std::fs::read_to_string(d.join(f)).unwrap(),
                "268435456",
                "{f}"
            );
        }
    }
}
