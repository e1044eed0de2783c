//! Stage 2, `admit`: open and hash what the lease names (before any lock),
//! pick the ledger the matching lease names, lock the Goal's session in it,
//! and ask `gate::admission` for an exact, signed, live lease with a use
//! left. The leases the admitted one superseded are revoked in the same
//! session, before its executing record.

use std::time::SystemTime;

use crate::gate::admission::{self, Admitted, Refusal};
use crate::run::error::RunError;
use governed_ledger as ledger;
use governed_ledger::journal::Event;
use governed_ledger::{GoalSession, Ledger, LedgerError};
use governed_model::Reason;

use super::draft::{record_refusal, Draft, Stop};
use super::prepare::Inputs;

/// An admitted run: its inputs, the lease with its opened files, and the
/// ledger that counts its uses, with the Goal's session still open.
pub(super) struct Admission<'a> {
    pub(super) inputs: &'a Inputs,
    pub(super) admitted: Admitted,
    pub(super) ledger: Box<dyn Ledger>,
    pub(super) session: Box<dyn GoalSession>,
}

/// Stage 2: `Inputs` → `Admission`, or a refusal recorded where it belongs.
pub(super) fn admit<'a>(inputs: &'a Inputs, draft: &mut Draft) -> Result<Admission<'a>, Stop> {
    let early = |r: Refusal| Stop::Journaled {
        goal_id: inputs.goal.goal.id.clone(),
        refusal: r,
    };
    let manifest = &inputs.manifest;
    let now = SystemTime::now();
    let place = admission::RunPlace {
        workspace: inputs.workspace.as_deref(),
        here: &inputs.here,
    };
    let prepared = admission::prepare(
        manifest,
        &inputs.goal,
        &inputs.trust,
        now,
        &inputs.selection,
        place,
    )
    .map_err(early)?;
    // The ledger is the one the matching lease names (else the state dir);
    // a revoked or expired match does not make it ambiguous.
    let named: Vec<Option<String>> = {
        let all = admission::candidates(manifest, &inputs.selection);
        let live: Vec<_> = all
            .iter()
            .filter(|l| admission::may_still_run(manifest, l, now))
            .collect();
        let pick = if live.is_empty() {
            all.iter().collect()
        } else {
            live
        };
        let mut v: Vec<Option<String>> = pick.iter().map(|l| l.body.ledger.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    if named.len() > 1 {
        return Err(early(RunError::AmbiguousLedger.into()));
    }
    let led = ledger::for_lease(
        named.first().cloned().flatten().as_deref(),
        &inputs.state_dir,
    )
    .map_err(|e| early(RunError::LedgerName(e).into()))?;
    let mut session = led
        .open_goal(&inputs.goal.goal.id)
        .map_err(|e| Stop::Refused(ledger_refusal(&*led, e)))?;
    let ctx = admission::Context {
        manifest,
        goal: &inputs.goal,
        trust: &inputs.trust,
        ledger: &*session,
        now,
    };
    let admitted = match admission::admit(&ctx, prepared) {
        Ok(a) => a,
        Err(r) => {
            record_refusal(session, &r);
            return Err(Stop::Refused(r));
        }
    };
    // The leases this one superseded are revoked where its uses are
    // counted, in the same transaction as its executing record: an old copy
    // of the manifest (which does not know of the supersession) cannot
    // bring one of them back in this ledger.
    let unrecorded: Vec<_> = manifest
        .superseded
        .iter()
        .filter(|s| s.by_lease == admitted.lease.body.lease_id)
        .filter(|s| !session.summary().revoked.contains(&s.lease_id))
        .collect();
    for s in unrecorded {
        let event = Event::Revocation {
            lease_id: s.lease_id.clone(),
            by: format!("superseded by lease {}", s.by_lease),
        };
        if let Err(e) = session.append(event) {
            return Err(Stop::Refused(ledger_refusal(&*led, e)));
        }
    }
    draft.request = Some(admitted.lease.body.request.clone().into());
    Ok(Admission {
        inputs,
        admitted,
        ledger: led,
        session,
    })
}

/// A ledger that cannot be used: the state dir's journal keeps its old
/// reasons; a ledger the lease names is `ledger_unavailable`.
pub(super) fn ledger_refusal(l: &dyn Ledger, e: LedgerError) -> Refusal {
    match e {
        LedgerError::Corrupt(m) => Refusal::new(Reason::JournalCorrupt, m),
        LedgerError::Cancelled(sig) => RunError::CancelledBeforeSpawn(sig).into(),
        LedgerError::Unavailable(m) if l.is_named() => Refusal::new(Reason::LedgerUnavailable, m),
        LedgerError::Unavailable(m) => Refusal::new(Reason::JournalUnavailable, m),
    }
}
