//! A request refused because no live lease answers it goes to the human
//! approval queue (CONTRACT §12), as admission saw it: the request, the
//! executable it resolves to here and that file's digest, the Goal and the
//! workspace. A person approves exactly that (`approve --pending ID`); an
//! agent that asks for anything else makes a new entry.
//!
//! Queueing never changes the refusal: the run is refused as before, and
//! the receipt carries the entry's id (`outcome.pending_id`) and says in
//! its message what a person does next.

use std::path::PathBuf;
use std::time::SystemTime;

use crate::gate::admission::{Refusal, Selection};
use crate::gate::identity::{self, Snapshot, CLEAN_PATH};
use governed_ledger::pending::{Asked, Queue, Queued};
use governed_model::pending::PendingExecutable;
use governed_model::{Binding, Reason};

use super::draft::{Draft, Stop};
use super::prepare::Inputs;

/// The largest executable hashed for the queue (`approve`'s default).
const MAX_EXECUTABLE_BYTES: u64 = 512 * 1024 * 1024;

/// The refusals a person can answer with a new lease.
pub fn queues(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::NoMatchingLease
            | Reason::LeaseExpired
            | Reason::LeaseExhausted
            | Reason::LeaseRevoked
    )
}

fn refusal_mut(stop: &mut Stop) -> &mut Refusal {
    match stop {
        Stop::Refused(r) => r,
        Stop::Journaled { refusal, .. } => refusal,
    }
}

/// Queue the request of a refused run when a person could answer it; the
/// refusal's message then says what happened to it. `principal`: who
/// asked.
pub(super) fn queue_refused(
    inputs: &Inputs,
    principal: &str,
    mut stop: Stop,
    draft: &mut Draft,
) -> Stop {
    let Selection::Request { request, .. } = &inputs.selection else {
        return stop;
    };
    let r = refusal_mut(&mut stop);
    if !queues(r.reason) {
        return stop;
    }
    // The workspace of a machine-bound lease is its own; else where the
    // run was pointed.
    let workspace: PathBuf = match r.lease.as_deref() {
        Some(l) if l.body.binding == Binding::Machine => PathBuf::from(&l.body.workspace.path),
        _ => inputs
            .workspace
            .clone()
            .unwrap_or_else(|| inputs.here.clone()),
    };
    let resolved = identity::resolve_cwd(&workspace, &request.cwd).and_then(|cwd| {
        let dir = identity::open_dir(&cwd)?;
        identity::open_executable(
            &request.executable,
            CLEAN_PATH,
            &cwd,
            MAX_EXECUTABLE_BYTES,
            Snapshot::HashOnly,
        )
        .map(|exe| (exe, dir))
    });
    let (exe, cwd) = match resolved {
        Ok((e, d)) => (e.identity, d.identity),
        Err(e) => {
            r.message
                .push_str(&format!("; not queued for approval: {e}"));
            return stop;
        }
    };
    let workspace = workspace.display().to_string();
    let asked = Asked {
        goal: inputs.goal.reference(),
        workspace: &workspace,
        request,
        executable: PendingExecutable {
            canonical_path: exe.canonical_path,
            sha256: exe.sha256,
        },
        cwd,
        reason: r.reason,
        principal,
    };
    let note = match Queue::of(&inputs.state_dir).queue(&asked, SystemTime::now()) {
        Ok(Queued::Pending(e)) => {
            draft.pending_id = Some(e.id.clone());
            format!(
                "; queued for a person's approval as {id} (asked {n} time{s}): an operator reviews it with `governed-exec pending show {id}` and answers with `governed-exec approve --pending {id} …` or `governed-exec pending deny {id} …`; until then, ask again later or ask for a different command",
                id = e.id,
                n = e.count,
                s = if e.count == 1 { "" } else { "s" }
            )
        }
        Ok(Queued::Denied(e)) => {
            draft.pending_id = Some(e.id.clone());
            format!(
                "; a person denied this request ({} by {}{}): ask for a different command",
                e.id,
                e.decided_by.as_deref().unwrap_or("an operator"),
                e.note.map(|n| format!(": {n}")).unwrap_or_default()
            )
        }
        Ok(Queued::TooLarge { size }) => format!(
            "; not queued for approval: its entry would be {size} bytes, past the queue's bound of {} bytes",
            governed_ledger::pending::MAX_ENTRY_BYTES
        ),
        Ok(Queued::Full { limit }) => format!(
            "; not queued for approval: the queue already holds {limit} pending requests (`governed-exec pending list`)"
        ),
        Err(e) => format!("; not queued for approval: {e}"),
    };
    r.message.push_str(&note);
    stop
}
