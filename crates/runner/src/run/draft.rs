//! The receipt as known so far (`Draft`), buildable at any point of `run`,
//! and the refusals before the use was spent: where each is recorded
//! (`Stop`) and the receipt it yields.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use ed25519_dalek::SigningKey;

use crate::gate::admission::Refusal;
use crate::process::capture;
use governed_evidence::{escape, receipt};
use governed_ledger::journal::{Event, Journal};
use governed_ledger::GoalSession;
use governed_model::{
    exit_code, Cleanup, CleanupState, GoalRef, LeaseRef, Outcome, OutcomeClass, Reason,
    ReceiptBody, ReceiptRequest, Resources, Streams, RECEIPT_SCHEMA,
};
use governed_sys::safe_io::WriteTarget;

use super::new_id;

/// A refusal before the use was spent, and where it is recorded besides
/// the receipt.
pub(super) enum Stop {
    /// Before the Goal is known, or already recorded in (or gone with) the
    /// Goal's ledger session: the receipt alone.
    Refused(Refusal),
    /// Bad input once the Goal is known, before its ledger was opened:
    /// journaled in the state dir's journal of the Goal too (best effort).
    Journaled { goal_id: String, refusal: Refusal },
}

impl Stop {
    /// A refusal that was decided with the lease: the receipt names it.
    pub(super) fn with_lease(r: Refusal, lease: &governed_model::Lease) -> Stop {
        Stop::Refused(Refusal {
            lease: Some(Box::new(lease.clone())),
            ..r
        })
    }
}

pub(super) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// What is known so far, to build a receipt at any point.
pub(super) struct Draft {
    pub(super) receipt_id: String,
    pub(super) attempt_id: Option<String>,
    pub(super) goal: Option<GoalRef>,
    pub(super) request: Option<ReceiptRequest>,
    pub(super) started: SystemTime,
    pub(super) key: Option<SigningKey>,
    /// `run --nonce`, once checked.
    pub(super) nonce: Option<String>,
    /// `run --principal` / `mcp --principal`: who asked.
    pub(super) principal: Option<String>,
    /// The pending approval a refusal was queued as.
    pub(super) pending_id: Option<String>,
    /// `--receipt PATH`, its directory pinned before any child runs (or why
    /// it could not be).
    pub(super) receipt_target: Option<(PathBuf, std::io::Result<WriteTarget>)>,
}

impl Draft {
    /// Nothing known yet but when the run started and where the receipt goes.
    pub(super) fn new(receipt_path: Option<PathBuf>) -> Draft {
        Draft {
            receipt_id: new_id("rcpt"),
            attempt_id: None,
            goal: None,
            request: None,
            started: SystemTime::now(),
            key: None,
            nonce: None,
            principal: None,
            pending_id: None,
            receipt_target: receipt_path.map(|p| {
                let t = WriteTarget::new(&p);
                (p, t)
            }),
        }
    }

    pub(super) fn base(&self, outcome: Outcome) -> ReceiptBody {
        let now = SystemTime::now();
        ReceiptBody {
            schema: RECEIPT_SCHEMA.into(),
            receipt_id: self.receipt_id.clone(),
            attempt_id: self.attempt_id.clone(),
            goal: self.goal.clone(),
            lease: None,
            request: self.request.clone(),
            workspace: None,
            binding: None,
            workspace_git: None,
            ledger: None,
            command: None,
            cwd: None,
            outcome,
            cleanup: Cleanup {
                state: CleanupState::NotStarted,
                mechanism: "none".into(),
                leftover_processes_killed: 0,
                unconfirmed_pids: vec![],
                witness: vec![],
                evadable: false,
                evadable_why: "nothing was spawned".into(),
            },
            streams: Streams {
                stdout: capture::empty_record(),
                stderr: capture::empty_record(),
            },
            products: vec![],
            started_at: rfc3339(self.started),
            ended_at: rfc3339(now),
            duration_ms: now
                .duration_since(self.started)
                .unwrap_or_default()
                .as_millis() as u64,
            finished_at: None,
            resources: Resources::none(),
            limits: None,
            isolation: None,
            spawn_path: None,
            process_limit: None,
            signing: None,
            journal_record_sha256: None,
            nonce: self.nonce.clone(),
            runner_version: env!("CARGO_PKG_VERSION").into(),
            principal: self.principal.clone(),
            network: None,
        }
    }

    /// Seal (sign) a receipt body: the envelope's bytes as printed, and the
    /// SHA-256 of its payload.
    /// `finished_at` is now: the runner's own end, after everything the run
    /// left to it (the egress proxy, the accounting) is done.
    pub(super) fn seal(&self, mut body: ReceiptBody) -> (Vec<u8>, String) {
        body.finished_at = Some(rfc3339(SystemTime::now()));
        let stmt = receipt::statement(body);
        let (envelope, digest) = receipt::seal(&stmt, self.key.as_ref());
        let mut text = serde_json::to_vec_pretty(&envelope).unwrap_or_default();
        text.push(b'\n');
        (text, digest)
    }

    /// Seal and print (or write) the receipt.
    pub(super) fn emit(&self, body: ReceiptBody) {
        let (text, _) = self.seal(body);
        self.output(&text);
    }

    /// Print (or write) a sealed receipt; says where it went.
    pub(super) fn output(&self, text: &[u8]) -> String {
        match &self.receipt_target {
            Some((p, target)) => {
                // Replaced through a fresh temporary and a rename in the
                // pinned directory: a symlink, FIFO or hard link planted at
                // the path is replaced, never followed or written through.
                let written = match target {
                    Ok(t) => t.replace(text, 0o644),
                    Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                };
                if let Err(e) = written {
                    eprintln!(
                        "governed-exec: cannot write receipt {}: {e}; printing it to stdout",
                        escape::visible(&p.display().to_string())
                    );
                    let _ = std::io::stdout().write_all(text);
                    return "stdout".into();
                }
                escape::visible(&p.display().to_string())
            }
            None => {
                let _ = std::io::stdout().write_all(text);
                "stdout".into()
            }
        }
    }

    /// A refusal before spawn: one line on stderr, a receipt, exit 125.
    pub(super) fn refuse(&self, r: Refusal) -> i32 {
        eprintln!(
            "governed-exec: refused ({}): {}",
            r.reason,
            escape::visible(&r.message)
        );
        let body = self.refusal_body(r);
        self.emit(body);
        exit_code::NOT_EXECUTED
    }

    /// The refusal receipt body of `r`.
    pub(super) fn refusal_body(&self, r: Refusal) -> ReceiptBody {
        let mut outcome = not_executed(r.reason, r.message);
        outcome.pending_id = self.pending_id.clone();
        let mut body = self.base(outcome);
        if let Some(l) = &r.lease {
            body.lease = Some(LeaseRef {
                id: l.body.lease_id.clone(),
                fingerprint: l.fingerprint.clone(),
            });
        }
        body
    }
}

pub(super) fn not_executed(reason: Reason, message: String) -> Outcome {
    Outcome {
        class: OutcomeClass::KnownNotExecuted,
        reason: Some(reason),
        needs_human: reason.needs_human(),
        exit_code: None,
        signal: None,
        runner_exit_code: exit_code::NOT_EXECUTED,
        message: Some(message),
        pending_id: None,
    }
}

pub(super) fn unknown(reason: Reason, message: String) -> Outcome {
    Outcome {
        class: OutcomeClass::Unknown,
        reason: Some(reason),
        needs_human: true,
        exit_code: None,
        signal: None,
        runner_exit_code: exit_code::UNKNOWN,
        message: Some(message),
        pending_id: None,
    }
}

/// Journal a refusal decided before the Goal's journal was opened (bad
/// input once the Goal is known): best effort, the receipt is what counts.
pub(super) fn journal_refusal_record(state_dir: &Path, goal_id: &str, r: &Refusal) {
    if let Ok(mut j) = Journal::open(state_dir, goal_id) {
        append_refusal(&mut j, r);
    }
}

fn append_refusal(journal: &mut Journal, r: &Refusal) {
    let _ = journal.append(refusal_event(r));
}

fn refusal_event(r: &Refusal) -> Event {
    Event::Refusal {
        lease_id: r.lease.as_ref().map(|l| l.body.lease_id.clone()),
        reason: r.reason,
        message: r.message.clone(),
    }
}

/// Record a refusal in the ledger session that admitted (best effort: the
/// receipt is what counts) and end the session.
pub(super) fn record_refusal(mut session: Box<dyn GoalSession>, r: &Refusal) {
    if session.append(refusal_event(r)).is_ok() {
        let _ = session.commit();
    }
}

impl Draft {
    /// End the run with the refusal `stop`: one line on stderr, a receipt,
    /// exit 125.
    pub(super) fn stop(&self, stop: Stop, state_dir: &Path) -> i32 {
        match stop {
            Stop::Refused(r) => self.refuse(r),
            Stop::Journaled { goal_id, refusal } => {
                journal_refusal_record(state_dir, &goal_id, &refusal);
                self.refuse(refusal)
            }
        }
    }
}
