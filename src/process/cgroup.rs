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

struct Group {
    dir: PathBuf,
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
    fn create(dir: PathBuf, v2: bool, sweep: bool) -> std::io::Result<Group> {
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

    fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
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

/// Our own cgroup path in the hierarchy whose `/proc/self/cgroup` line
/// matches `pred` on its controller list.
fn own_path(pred: impl Fn(&str) -> bool) -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let _id = it.next()?;
        let ctrl = it.next()?;
        let path = it.next()?;
        pred(ctrl).then(|| path.to_string())
    })
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
    pub fn create(attempt_id: &str, limit: Option<u64>, sweep: bool) -> RunCgroups {
        let name = format!("governed-exec-{attempt_id}");
        let mut out = RunCgroups {
            name: name.clone(),
            ..RunCgroups::default()
        };
        let mounts = cgroup_mounts();
        if !mounts
            .iter()
            .any(|(_, t, o, _)| t == "cgroup2" || o.split(',').any(|x| x == "pids"))
        {
            out.notes
                .push("no pids cgroup hierarchy (v1 `pids` or v2) is mounted".into());
        }
        for (mount, fstype, opts, root) in mounts {
            if fstype == "cgroup2" && out.track.is_none() {
                let Some(own) = own_path(|c| c.is_empty()) else {
                    continue;
                };
                let base = join_cgroup(&mount, &root, &own);
                match Group::create(base.join(&name), true, sweep) {
                    Ok(g) => {
                        let has_pids = fs::read_to_string(g.dir.join("cgroup.controllers"))
                            .unwrap_or_default()
                            .split_whitespace()
                            .any(|c| c == "pids");
                        if has_pids && out.pids.is_none() {
                            match limit {
                                Some(n) if write_limit(&g.dir, n) => {
                                    out.pids_kind = Some("pids_cgroup_v2")
                                }
                                Some(_) => out
                                    .notes
                                    .push(format!("cannot write pids.max in {}", g.dir.display())),
                                None => {}
                            }
                        } else if !has_pids {
                            out.notes.push(format!(
                                "the v2 group {} has no pids controller (it is bound to a v1 hierarchy or not enabled in the parent)",
                                base.display()
                            ));
                        }
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
                let Some(own) = own_path(|c| c.split(',').any(|x| x == "pids")) else {
                    continue;
                };
                let base = join_cgroup(&mount, &root, &own);
                match Group::create(base.join(&name), false, sweep) {
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
        out
    }

    /// The witnesses these groups give cleanup.
    pub fn witnesses(&self) -> Vec<&'static str> {
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
    pub fn leavable_by(&self, uid: u32, covered: bool) -> bool {
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

    /// The v1 `tasks` file the child writes `0` into, if any.
    pub fn v1_tasks_fd(&self) -> Option<RawFd> {
        self.pids.as_ref().map(|g| g.join.as_raw_fd())
    }

    /// The v2 group's `cgroup.procs`, for a child joining by itself.
    pub fn v2_procs_fd(&self) -> Option<RawFd> {
        self.track
            .as_ref()
            .and_then(|g| g.procs.as_ref())
            .map(|f| f.as_raw_fd())
    }

    /// The v2 directory fd for `clone3(CLONE_INTO_CGROUP)`, if any.
    pub fn v2_dir_fd(&self) -> Option<RawFd> {
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

    /// Processes still in any of the run's cgroups.
    pub fn members(&self) -> Vec<i32> {
        let mut v: Vec<i32> = [&self.pids, &self.track]
            .into_iter()
            .flatten()
            .flat_map(Group::pids)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// SIGKILL every member through a pidfd, after checking (on the pidfd's
    /// process) that it is still in one of our groups. Covers the v1-only case.
    pub fn kill_members(&self) {
        for pid in self.members() {
            let Ok(fd) = crate::os::sys::pidfd_open(pid) else {
                continue;
            };
            let ours = fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|c| c.contains(&self.name));
            if ours {
                let _ = crate::os::sys::pidfd_send_signal(&fd, libc::SIGKILL);
            }
        }
    }

    /// `populated 0` in the v2 group's `cgroup.events` (None without one).
    pub fn populated(&self) -> Option<bool> {
        let g = self.track.as_ref()?;
        let events = fs::read_to_string(g.dir.join("cgroup.events")).ok()?;
        Some(events.lines().any(|l| l.trim() == "populated 1"))
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
pub fn enclosing_pids_max() -> Result<(u64, PathBuf), String> {
    let mut best: Option<(u64, PathBuf)> = None;
    let mut seen = Vec::new();
    for (mount, fstype, opts, root) in cgroup_mounts() {
        let own = if fstype == "cgroup2" {
            own_path(|c| c.is_empty())
        } else if opts.split(',').any(|o| o == "pids") {
            own_path(|c| c.split(',').any(|x| x == "pids"))
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
    best.ok_or_else(|| {
        if seen.is_empty() {
            "no pids.max is visible for this process's cgroup".to_string()
        } else {
            format!("no enclosing pids.max is a number ({})", seen.join(", "))
        }
    })
}

/// Whether a pids hierarchy (v1 `pids` or v2) is mounted read-write here: a
/// uid-0 child could then move itself out of the group whose limit binds
/// it. Under Docker's defaults every cgroup mount is read-only.
pub fn pids_mount_writable() -> bool {
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
