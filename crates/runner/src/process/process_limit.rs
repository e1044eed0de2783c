//! Which mechanism enforces a lease's `max_processes` (CONTRACT §7), in the
//! contract's order: a per-run pids cgroup; `RLIMIT_NPROC` for a non-root
//! child; the enclosing cgroup's `pids.max` when it is no larger than the
//! lease's (what `docker run --pids-limit N` sets, readable on a read-only
//! cgroupfs); the approver's explicit waiver (`--max-processes unlimited`).
//! Anything else is `isolation_unavailable` before the use is spent. `run`
//! and `doctor` both ask [`choose`], so `doctor` says what `run` does.

use std::path::PathBuf;

use crate::process::cgroup::{self, RunCgroups};
use governed_model::{MaxProcesses, ProcessLimitReport};

/// The chosen mechanism, and the `RLIMIT_NPROC` to set in the child if any.
pub struct Plan {
    pub report: ProcessLimitReport,
    pub rlimit_nproc: Option<u64>,
}

/// No mechanism here enforces the lease's `max_processes` for this child:
/// `isolation_unavailable`. `why` lists each mechanism and why it fails.
#[derive(Debug, thiserror::Error)]
#[error("max_processes ({limit}) cannot be enforced here: {}. Give the container `--pids-limit {limit}` (or less), run the child as another uid (--as-user), or approve with --max-processes unlimited", why.join("; "))]
pub struct Unenforceable {
    pub limit: u64,
    pub why: Vec<String>,
}

pub fn choose(
    max: MaxProcesses,
    child_uid: u32,
    cgroups: &RunCgroups,
) -> Result<Plan, Unenforceable> {
    choose_given(max, child_uid, cgroups, cgroup::enclosing_pids_max)
}

/// [`choose`] with the machine's enclosing `pids.max` (and the file it was
/// read from) passed in (asked only when it decides).
fn choose_given(
    max: MaxProcesses,
    child_uid: u32,
    cgroups: &RunCgroups,
    enclosing_pids_max: impl FnOnce() -> Result<(u64, PathBuf), cgroup::CgroupError>,
) -> Result<Plan, Unenforceable> {
    let n = match max {
        MaxProcesses::Waived(_) => {
            return Ok(Plan {
                report: ProcessLimitReport {
                    mechanism: "waived".into(),
                    enforced_limit: None,
                    detail: "the lease says `unlimited`: the approver waived the process limit, and none is enforced".into(),
                },
                rlimit_nproc: None,
            })
        }
        MaxProcesses::Limit(n) => n,
    };
    if let Some(kind) = cgroups.process_limit() {
        return Ok(Plan {
            report: ProcessLimitReport {
                mechanism: kind.into(),
                enforced_limit: Some(n),
                detail: format!("a pids cgroup made for this run alone, pids.max = {n}"),
            },
            rlimit_nproc: None,
        });
    }
    if child_uid != 0 {
        return Ok(Plan {
            report: ProcessLimitReport {
                mechanism: "rlimit_nproc".into(),
                enforced_limit: Some(n),
                detail: format!("RLIMIT_NPROC = {n} for uid {child_uid}: it counts every process of that uid, so the run gets at most {n} (fewer if the uid runs others)"),
            },
            rlimit_nproc: Some(n),
        });
    }
    let enclosing = enclosing_pids_max();
    if let Ok((e, file)) = &enclosing {
        if *e <= n {
            return Ok(Plan {
                report: ProcessLimitReport {
                    mechanism: "enclosing_pids_max".into(),
                    enforced_limit: Some(*e),
                    detail: format!("{} = {e}, no larger than the lease's {n}: the enclosing cgroup (e.g. `docker run --pids-limit`) bounds the run and governed-exec together", file.display()),
                },
                rlimit_nproc: None,
            });
        }
    }
    let mut why: Vec<String> = cgroups.notes().to_vec();
    if why.is_empty() {
        why.push("no per-run pids cgroup could be made".into());
    }
    why.push("the child runs as root, which RLIMIT_NPROC does not bind".into());
    why.push(match enclosing {
        Ok((e, file)) => format!("the enclosing {} = {e} is larger than {n}", file.display()),
        Err(e) => e.to_string(),
    });
    Err(Unenforceable { limit: n, why })
}

/// Could a process of the run escape the limit `mechanism` names? A pids
/// group can be left by whoever may write an ancestor's `cgroup.procs`
/// (uid 0 where cgroupfs is not covered, or the delegatee); the enclosing
/// group likewise, by a uid-0 child on a writable cgroupfs. A non-root child
/// cannot raise its hard `RLIMIT_NPROC`, and a waiver has nothing to evade.
pub fn evadable(mechanism: &str, uid: u32, covered: bool, cgroups: &RunCgroups) -> bool {
    evadable_given(
        mechanism,
        uid,
        covered,
        cgroups,
        cgroup::pids_mount_writable,
    )
}

/// [`evadable`] with the machine's answer to "is a pids hierarchy mounted
/// writable?" passed in (asked only when it decides).
fn evadable_given(
    mechanism: &str,
    uid: u32,
    covered: bool,
    cgroups: &RunCgroups,
    pids_mount_writable: impl FnOnce() -> bool,
) -> bool {
    match mechanism {
        "pids_cgroup_v1" | "pids_cgroup_v2" => cgroups.leavable_by(uid, covered),
        "enclosing_pids_max" => uid == 0 && !covered && pids_mount_writable(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The enclosing `pids.max` binds the whole container, so only a child
    /// that can move itself out of it evades it: uid 0 (a non-root child
    /// cannot write `cgroup.procs` of the container's group), with cgroupfs
    /// not covered in its mount namespace, on a pids hierarchy mounted
    /// writable. Any one missing and the receipt must not say evadable; all
    /// three and it must (a root child could fork past the limit).
    #[test]
    fn the_enclosing_pids_max_is_evadable_only_by_root_on_a_writable_uncovered_cgroupfs() {
        let g = RunCgroups::default();
        let e = |uid, covered, writable| {
            evadable_given("enclosing_pids_max", uid, covered, &g, || writable)
        };
        assert!(e(0, false, true), "root, uncovered, writable");
        assert!(!e(1000, false, true), "not root");
        assert!(!e(0, true, true), "cgroupfs covered");
        assert!(!e(0, false, false), "read-only (Docker's default)");
        // The public entry asks the machine for the last condition.
        assert_eq!(
            evadable("enclosing_pids_max", 0, false, &g),
            cgroup::pids_mount_writable()
        );
        assert!(!evadable("enclosing_pids_max", 1000, false, &g));
    }

    /// `RLIMIT_NPROC` cannot be raised past its hard limit by a non-root
    /// child, and a waiver has nothing to evade.
    #[test]
    fn a_waiver_or_rlimit_nproc_is_never_evadable() {
        let g = RunCgroups::default();
        for m in ["rlimit_nproc", "waived"] {
            for (uid, covered) in [(0, false), (1000, false), (0, true)] {
                assert!(!evadable_given(m, uid, covered, &g, || true), "{m}");
            }
        }
    }

    /// Without a per-run group, a non-root child is bounded by
    /// `RLIMIT_NPROC` set to the lease's number, and a waiver is reported as
    /// such with nothing enforced.
    #[test]
    fn the_choice_without_a_cgroup() {
        let g = RunCgroups::default();
        let p = choose(MaxProcesses::Limit(7), 1000, &g).unwrap();
        assert_eq!(p.report.mechanism, "rlimit_nproc");
        assert_eq!(p.report.enforced_limit, Some(7));
        assert_eq!(p.rlimit_nproc, Some(7));
        let w = choose(MaxProcesses::UNLIMITED, 0, &g).unwrap();
        assert_eq!(w.report.mechanism, "waived");
        assert_eq!((w.report.enforced_limit, w.rlimit_nproc), (None, None));
    }

    /// A root child with no per-run group is bounded by the enclosing
    /// `pids.max` only when it is no larger than the lease's number (equal
    /// included); a larger one, or none readable, is `isolation_unavailable`
    /// naming it.
    #[test]
    fn the_enclosing_pids_max_binds_a_root_child_only_when_no_larger() {
        let g = RunCgroups::default();
        let file = PathBuf::from("/sys/fs/cgroup/pids.max");
        for e in [5, 7] {
            let p = choose_given(MaxProcesses::Limit(7), 0, &g, || Ok((e, file.clone()))).unwrap();
            assert_eq!(p.report.mechanism, "enclosing_pids_max", "enclosing {e}");
            assert_eq!(p.report.enforced_limit, Some(e));
            assert_eq!(p.rlimit_nproc, None);
        }
        let Err(u) = choose_given(MaxProcesses::Limit(7), 0, &g, || Ok((8, file.clone()))) else {
            panic!("an enclosing pids.max of 8 was taken for a limit of 7");
        };
        assert_eq!(u.limit, 7);
        assert!(
            u.why
                .iter()
                .any(|w| w == "the enclosing /sys/fs/cgroup/pids.max = 8 is larger than 7"),
            "{:?}",
            u.why
        );
        assert!(u
            .why
            .iter()
            .any(|w| w.contains("RLIMIT_NPROC does not bind")));
        // A non-root child never gets there: RLIMIT_NPROC binds it.
        let p = choose_given(MaxProcesses::Limit(7), 1000, &g, || Ok((5, file))).unwrap();
        assert_eq!(p.report.mechanism, "rlimit_nproc");
    }

    /// A per-run pids group (v1 or v2) is left by whoever may write its
    /// parent's `cgroup.procs`: a root child whose mount namespace does not
    /// cover cgroupfs, or the uid that owns that file; nobody else.
    #[test]
    fn a_per_run_pids_group_is_evadable_by_whoever_may_leave_it() {
        let d = tempfile::tempdir().expect("tempdir");
        let me = nix::unistd::geteuid().as_raw();
        let owner = if me == 0 { 1000 } else { me };
        let procs = d.path().join("cgroup.procs");
        std::fs::write(&procs, "").expect("procs");
        if me == 0 {
            nix::unistd::chown(&procs, Some(nix::unistd::Uid::from_raw(owner)), None)
                .expect("chown");
        }
        for kind in ["pids_cgroup_v1", "pids_cgroup_v2"] {
            let dir = d.path().join("run");
            std::fs::create_dir(&dir).expect("group dir");
            let g = RunCgroups::with_pids_group_at(&dir, kind);
            let e = |uid, covered| evadable_given(kind, uid, covered, &g, || false);
            assert!(e(0, false), "{kind}: root, cgroupfs not covered");
            assert!(!e(0, true), "{kind}: root, cgroupfs covered");
            assert!(
                e(owner, true),
                "{kind}: the owner of the parent's cgroup.procs"
            );
            assert!(!e(owner + 1, false), "{kind}: another uid");
        }
    }
}
