//! Stage 7, `classify`: from how the run ended (`Ended`, which exists only
//! once cleanup was confirmed or said unconfirmed) to the receipt body —
//! the outcome class, the cleanup witnesses and whether the child could
//! evade them, the signing report (is the key out of the child's reach),
//! streams, resources, products.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use ed25519_dalek::SigningKey;

use crate::gate::reach;
use crate::process::cgroup::RunCgroups;
use crate::process::isolation::{self, Cover};
use crate::process::supervise::{self, Ending, RunResult, SuperviseError};
use governed_evidence::{escape, receipt, sign};
use governed_fault as fault;
use governed_model::{
    exit_code, CleanupState, LeaseRef, Outcome, OutcomeClass, Reason, ReceiptBody, SigningReport,
    Streams,
};
use governed_sys::ChildStep;

use super::commit::Spent;
use super::draft::{not_executed, rfc3339, unknown, Draft};
use super::setup::root_child_guarded;
use super::spawn::Ended;

/// The receipt body of a run that ended. Made only by `classify`.
pub(super) struct Classified {
    pub(super) body: ReceiptBody,
    _sealed: (),
}

/// Stage 7: `Ended` → `Classified`.
pub(super) fn classify(draft: &Draft, spent: &Spent<'_>, ended: Ended) -> Classified {
    let (run, child) = (&spent.run, &spent.child);
    let (admitted, inputs) = (&run.admitted, run.inputs);
    let lease = &admitted.lease;
    let prepared = &child.prepared;
    let mut receipt_body = draft.base(not_executed(Reason::ExecFailed, String::new()));
    receipt_body.lease = Some(LeaseRef {
        id: lease.body.lease_id.clone(),
        fingerprint: lease.fingerprint.clone(),
    });
    receipt_body.workspace = Some(child.workspace_path.display().to_string());
    receipt_body.binding = Some(lease.body.binding);
    receipt_body.ledger = Some(run.ledger.name());
    receipt_body.workspace_git = child.workspace_git.clone();
    receipt_body.command = Some(admitted.exe.identity.clone());
    receipt_body.cwd = Some(admitted.cwd.identity.clone());
    receipt_body.limits = Some(lease.body.limits);
    receipt_body.isolation = Some(prepared.report.clone());
    receipt_body.process_limit = Some(child.launch.process_limit.report.clone());
    receipt_body.signing = Some(signing_report(&inputs.key, &inputs.key_path, prepared));
    receipt_body.journal_record_sha256 = Some(spent.committed().digest().to_string());
    receipt_body.network = ended.network;
    match ended.result {
        // governed-exec's own failure before the program existed: nothing
        // ran, whatever the use cost. Never `unknown`.
        Err(SuperviseError::NotStarted(e)) => {
            let msg = format!("could not start the child: {e}");
            eprintln!("governed-exec: {msg}");
            receipt_body.outcome = not_executed(Reason::ExecFailed, msg);
        }
        Err(e @ SuperviseError::AfterStart(_)) => {
            receipt_body.outcome = unknown(Reason::CleanupUnconfirmed, e.to_string());
        }
        Ok(RunResult::NotExecuted {
            step,
            errno,
            spawn_path,
        }) => {
            receipt_body.spawn_path = Some(spawn_path.as_str().into());
            let err = std::io::Error::from_raw_os_error(errno);
            let msg = if step == ChildStep::Exec {
                format!(
                    "exec of {} failed: {err}",
                    admitted.exe.identity.canonical_path
                )
            } else {
                format!("child setup failed to {step}: {err}")
            };
            eprintln!("governed-exec: {}", escape::visible(&msg));
            receipt_body.outcome = not_executed(Reason::ExecFailed, msg);
            receipt_body.cleanup.state = CleanupState::Gone;
        }
        Ok(RunResult::Ran(s)) => {
            fault::point("after_reap");
            receipt_body.outcome = outcome(&s);
            receipt_body.spawn_path = Some(s.spawn_path.as_str().into());
            receipt_body.cleanup = s.cleanup.clone();
            let (witness, evadable, why) = cleanup_witness(prepared, &child.launch.cgroups);
            receipt_body.cleanup.witness = witness;
            receipt_body.cleanup.evadable = evadable;
            receipt_body.cleanup.evadable_why = why;
            if let Some(why) = s.leftovers_uncounted() {
                receipt_body.cleanup.evadable = true;
                receipt_body.cleanup.evadable_why = why;
            }
            receipt_body.streams = Streams {
                stdout: s.stdout.clone(),
                stderr: s.stderr.clone(),
            };
            receipt_body.resources = s.resources.clone();
            receipt_body.started_at = rfc3339(s.started);
            receipt_body.ended_at = rfc3339(s.ended);
            receipt_body.duration_ms = s
                .ended
                .duration_since(s.started)
                .unwrap_or_default()
                .as_millis() as u64;
            receipt_body.products =
                receipt::products(&child.workspace_path, &inputs.goal.product_paths());
            if let Some(iso) = receipt_body.isolation.as_mut() {
                iso.kernel_view = s.kernel_view.clone();
            }
        }
    }
    Classified {
        body: receipt_body,
        _sealed: (),
    }
}

fn signing_report(
    key: &SigningKey,
    key_path: &Path,
    prepared: &isolation::Prepared,
) -> SigningReport {
    let keyid = sign::keyid(&key.verifying_key());
    let child_uid = prepared.report.uid;
    let meta = std::fs::metadata(key_path).ok();
    let (owner, mode) = meta.map_or((u32::MAX, 0o777), |m| (m.uid(), m.mode()));
    let (out_of_reach, why) = if child_uid == 0 {
        let kept = if prepared.creds.is_some() {
            Some("no capability".to_string())
        } else {
            prepared
                .root_caps_keep
                .map(|_| format!("only {}", reach::root_keep_names().join(", ")))
        };
        let guard = match (&prepared.key_landlocked, prepared.creds.is_some()) {
            (_, true) => Ok(String::new()),
            (Some(Cover::Holds(how)), false) => Ok(format!("; {how}, and it may not mount")),
            (Some(Cover::Fails(why)), false) => Err(why.clone()),
            (None, false) => Err("no Landlock guard was made".to_string()),
        };
        match (&prepared.key_covered, kept, guard) {
            (Some(Cover::Holds(how)), Some(kept), Ok(guarded)) => (
                true,
                format!(
                    "the child ran as uid 0 with {kept} (no CAP_SYS_ADMIN to unmount, no CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_MKNOD, CAP_SYS_RAWIO, CAP_SETUID), in its own mount namespace: {how}, the state dir, cgroupfs and host device nodes covered{guarded}; the runner is non-dumpable"
                ),
            ),
            (Some(Cover::Fails(why)), _, _) => (false, format!("the child runs as root: {why}")),
            (Some(Cover::Holds(_)), Some(_), Err(why)) => (
                false,
                format!("the child runs as root, and without a Landlock guard it could rename a directory above the covered key or state dir and plant its own: {why}"),
            ),
            _ => (
                false,
                "the child runs as root with full capabilities, which can read any file".to_string(),
            ),
        }
    } else if let Some(Cover::Holds(how)) = &prepared.key_landlocked {
        (
            true,
            format!("the child runs as uid {child_uid}, the runner's: {how}; Landlock also forbids it to ptrace the runner or read its /proc files, and the runner is non-dumpable"),
        )
    } else if child_uid == owner {
        (
            false,
            match &prepared.key_landlocked {
                Some(Cover::Fails(why)) => format!("the child runs as uid {child_uid}, which owns the key file, and it could not be denied the key: {why}"),
                _ => format!("the child runs as uid {child_uid}, which owns the key file"),
            },
        )
    } else if mode & 0o044 != 0 {
        (
            false,
            format!(
                "the key file is readable by group or others (mode {:o})",
                mode & 0o777
            ),
        )
    } else {
        (true, format!("the child runs as uid {child_uid} without capabilities; the key file is owned by uid {owner} with mode {:o}", mode & 0o777))
    };
    // The key is only as far out of reach as every channel to it: a daemon
    // socket (the daemon reads the key for the child), a ledger the child
    // can rewrite or whose credentials it can read.
    let (out_of_reach, why) = match reachable(
        prepared,
        &["daemon_socket", "ledger_dir", "ledger_credentials"],
    ) {
        Some(channel) if out_of_reach => (false, format!("{why}; but {channel}")),
        _ => (out_of_reach, why),
    };
    SigningReport {
        keyid,
        key_out_of_child_reach: out_of_reach,
        why,
    }
}

/// The first channel of `channels` the child could reach, in words.
fn reachable(prepared: &isolation::Prepared, channels: &[&str]) -> Option<String> {
    prepared
        .report
        .reach
        .iter()
        .find(|r| r.reachable && channels.contains(&r.channel.as_str()))
        .map(|r| {
            format!(
                "the child could reach {} {}: {}",
                r.channel.replace('_', " "),
                r.path.as_deref().unwrap_or(""),
                r.how
            )
        })
}

/// Which witnesses `gone` rests on, and whether the child could hide from
/// all of them (CONTRACT §7). Each witness alone finds every process it
/// sees, so the child evades only if it can evade every one.
fn cleanup_witness(
    prepared: &isolation::Prepared,
    cgroups: &RunCgroups,
) -> (Vec<String>, bool, String) {
    let mut witness = vec!["subreaper_tree".to_string()];
    witness.extend(cgroups.witnesses().iter().map(|w| w.to_string()));
    if prepared.report.pid_namespace {
        witness.push("pid_namespace".into());
    }
    let full_root = prepared.report.uid == 0 && prepared.report.capabilities_kept.is_none();
    if let Some(socket) = reachable(prepared, &["daemon_socket"]) {
        // A daemon starts processes that are not the child's descendants,
        // outside the run's cgroups and namespaces: no witness sees them.
        (witness, true, socket)
    } else if full_root {
        (
            witness,
            true,
            "the child ran as uid 0 with every capability in the runner's mount namespace: it could mount over /proc/<runner>/task/*/children, ptrace the runner, and move itself out of the run's cgroups".into(),
        )
    } else if prepared.report.uid == 0 && !root_child_guarded(prepared) {
        (
            witness,
            true,
            "the child ran as uid 0 without a Landlock guard: it could make a user namespace of its own, mount cgroupfs there and move itself out of the run's groups".into(),
        )
    } else if prepared.report.uid == 0 {
        (
            witness,
            false,
            format!(
                "the child ran as uid 0 without CAP_SYS_ADMIN or CAP_SYS_PTRACE{}: it cannot mount over the runner's /proc or ptrace the non-dumpable runner, and every descendant stays under the runner, a child subreaper",
                if prepared.report.mount_namespace { ", in its own mount namespace" } else { "" }
            ),
        )
    } else {
        (
            witness,
            false,
            format!("the child ran as uid {} without capabilities: it cannot mount over the runner's /proc or ptrace the non-dumpable runner, and every descendant stays under the runner, a child subreaper (processes another daemon starts on its request are not its descendants)", prepared.report.uid),
        )
    }
}

/// Whether the main process, dead of a SIGKILL while the run's memory cgroup
/// counted an OOM kill, was that kill's victim: a process of the run could
/// have sent the SIGKILL right after a sibling was OOM-killed.
fn main_was_the_oom_victim(s: &supervise::Supervised) -> bool {
    match s.main_oom_killed {
        Some(named) => named,
        None => s.resources.peak_processes == Some(1),
    }
}

/// The outcome class of a supervised run. Anything not observed gone is
/// `unknown`, whatever else happened.
fn outcome(s: &supervise::Supervised) -> Outcome {
    if s.cleanup.state != CleanupState::Gone {
        return unknown(
            Reason::CleanupUnconfirmed,
            format!(
                "processes {:?} could not be confirmed gone within {:?}",
                s.cleanup.unconfirmed_pids,
                supervise::CONFIRM_BOUND
            ),
        );
    }
    let (class, signal, message) = match s.ending {
        Ending::MainExited => match (s.exit_code, s.signal) {
            (Some(_), _) => (OutcomeClass::Exited, None, None),
            // SIGKILL that governed-exec did not send, while the run's
            // memory cgroup counted an OOM kill, and the main process was
            // its victim: named so in the kernel's log, or (where the log
            // cannot be read) the only task the run ever had.
            (None, Some(sig))
                if sig == libc::SIGKILL
                    && s.resources.oom_kills.is_some_and(|n| n > 0)
                    && main_was_the_oom_victim(s) =>
            {
                (
                    OutcomeClass::MemoryLimitReaped,
                    Some(sig),
                    Some(format!(
                        "the kernel's OOM killer killed the main process at the run's memory limit ({} OOM kill(s) in the run's memory cgroup); the rest was killed and observed gone",
                        s.resources.oom_kills.unwrap_or(0)
                    )),
                )
            }
            (None, Some(sig)) => (
                OutcomeClass::Signaled,
                Some(sig),
                Some(match s.resources.oom_kills {
                    Some(n) if n > 0 => format!(
                        "killed by signal {sig}; the run's memory cgroup counted {n} OOM kill(s), of another process of the run as far as the kernel's log tells"
                    ),
                    _ => format!("killed by signal {sig}"),
                }),
            ),
            (None, None) => {
                return unknown(
                    Reason::CleanupUnconfirmed,
                    "exit status could not be read".into(),
                )
            }
        },
        Ending::TimedOut => (
            OutcomeClass::TimedOutReaped,
            s.signal,
            Some("wall time passed; every process was killed and observed gone".into()),
        ),
        Ending::OutputCapped => (
            OutcomeClass::OutputLimitReaped,
            s.signal,
            Some("total output passed the cap; every process was killed and observed gone".into()),
        ),
        Ending::Cancelled(sig) => (
            OutcomeClass::CancelledReaped,
            Some(sig),
            Some(format!(
                "governed-exec received signal {sig}; the run was stopped and observed gone"
            )),
        ),
    };
    let exit = if class == OutcomeClass::Exited {
        s.exit_code
    } else {
        None
    };
    Outcome {
        class,
        reason: None,
        needs_human: false,
        exit_code: exit,
        signal,
        runner_exit_code: exit_code::for_outcome(class, exit, signal),
        message,
        pending_id: None,
    }
}
