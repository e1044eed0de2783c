//! Which mechanism enforces a lease's `max_processes` (CONTRACT §7), in the
//! contract's order: a per-run pids cgroup; `RLIMIT_NPROC` for a non-root
//! child; the enclosing cgroup's `pids.max` when it is no larger than the
//! lease's (what `docker run --pids-limit N` sets, readable on a read-only
//! cgroupfs); the approver's explicit waiver (`--max-processes unlimited`).
//! Anything else is `isolation_unavailable` before the use is spent. `run`
//! and `doctor` both ask [`choose`], so `doctor` says what `run` does.

use crate::model::{MaxProcesses, ProcessLimitReport};
use crate::process::cgroup::{self, RunCgroups};

/// The chosen mechanism, and the `RLIMIT_NPROC` to set in the child if any.
pub struct Plan {
    pub report: ProcessLimitReport,
    pub rlimit_nproc: Option<u64>,
}

pub fn choose(max: MaxProcesses, child_uid: u32, cgroups: &RunCgroups) -> Result<Plan, String> {
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
    let enclosing = cgroup::enclosing_pids_max();
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
    Err(format!(
        "max_processes ({n}) cannot be enforced here: {}. Give the container `--pids-limit {n}` (or less), run the child as another uid (--as-user), or approve with --max-processes unlimited",
        why.join("; ")
    ))
}

/// Could a process of the run escape the limit `mechanism` names? A pids
/// group can be left by whoever may write an ancestor's `cgroup.procs`
/// (uid 0 where cgroupfs is not covered, or the delegatee); the enclosing
/// group likewise, by a uid-0 child on a writable cgroupfs. A non-root child
/// cannot raise its hard `RLIMIT_NPROC`, and a waiver has nothing to evade.
pub fn evadable(mechanism: &str, uid: u32, covered: bool, cgroups: &RunCgroups) -> bool {
    match mechanism {
        "pids_cgroup_v1" | "pids_cgroup_v2" => cgroups.leavable_by(uid, covered),
        "enclosing_pids_max" => uid == 0 && !covered && cgroup::pids_mount_writable(),
        _ => false,
    }
}
