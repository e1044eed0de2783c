//! Stage 4, `commit`: the use is spent. A cancelling signal that arrived
//! first refuses and spends nothing; otherwise the ledger takes the
//! attempt's liveness witness and makes the `executing` record durable
//! (`GoalSession::spend`), and only then is there a `Spent` — the one value
//! `spawn` starts a child from.

use nix::sys::signalfd::SignalFd;

use crate::gate::admission::Refusal;
use crate::run::error::RunError;
use governed_fault as fault;
use governed_ledger::journal::{Committed, Event};
use governed_ledger::AttemptHold;

use super::admit::ledger_refusal;
use super::draft::{record_refusal, Draft, Stop};
use super::setup::{Child, Ready, Run};

/// The use is spent and its `executing` record durable: the child may be
/// started. Made only by `commit`.
pub(super) struct Spent<'a> {
    pub(super) run: Run<'a>,
    pub(super) child: Child,
    committed: Committed,
    hold: Box<dyn AttemptHold>,
}

impl<'a> Spent<'a> {
    /// The durable `executing` record, which the spawn requires.
    pub(super) fn committed(&self) -> &Committed {
        &self.committed
    }

    /// The liveness witness and the child's setup at once: the result
    /// record is written while the child's scratch and cgroups are removed.
    pub(super) fn hold_and_child(&mut self) -> (&mut dyn AttemptHold, &mut Child) {
        (&mut *self.hold, &mut self.child)
    }

    /// End the attempt's liveness witness (after the result record).
    pub(super) fn release(self) -> (Run<'a>, Child) {
        self.hold.release();
        (self.run, self.child)
    }
}

/// Stage 4: `Ready` → `Spent`, or a refusal with nothing spent.
pub(super) fn commit<'a>(
    ready: Ready<'a>,
    draft: &mut Draft,
    signals: &mut SignalFd,
) -> Result<Spent<'a>, Stop> {
    let Ready {
        run,
        child,
        session,
    } = ready;
    let lease = &run.admitted.lease;
    // A cancelling signal that arrived before the use is spent: refuse,
    // spend nothing. (One arriving after the executing record is written
    // stays pending in the signalfd and is forwarded to the child.)
    if let Some(sig) = pending_cancel(signals) {
        let r = Refusal::from(RunError::CancelledBeforeSpawn(sig));
        record_refusal(session, &r);
        return Err(Stop::with_lease(r, lease));
    }
    // Write-ahead: the liveness witness, then the executing record, durable
    // in the lease's ledger before anything is spawned.
    let body = &lease.body;
    let executing = Event::Executing {
        attempt_id: child.attempt_id.clone(),
        lease_id: body.lease_id.clone(),
        lease_fingerprint: lease.fingerprint.clone(),
        goal: body.goal.clone(),
        use_number: run.admitted.use_number,
        max_uses: body.max_uses,
        runner_pid: std::process::id(),
        executable: Box::new(run.admitted.exe.identity.clone()),
        cwd: Box::new(run.admitted.cwd.identity.clone()),
    };
    let (committed, hold) = match session.spend(&child.attempt_id, executing) {
        Ok(s) => s,
        // Nothing was spent: the session's transaction is gone with it.
        Err(e) => return Err(Stop::with_lease(ledger_refusal(&*run.ledger, e), lease)),
    };
    draft.attempt_id = Some(child.attempt_id.clone());
    fault::point("after_executing");
    Ok(Spent {
        run,
        child,
        committed,
        hold,
    })
}

/// Drain the signalfd without blocking: the cancelling signal (SIGTERM,
/// SIGINT or SIGHUP) that arrived so far, if any. No child exists yet, so
/// a SIGCHLD here has nothing to reap.
fn pending_cancel(signals: &mut SignalFd) -> Option<i32> {
    let mut cancel = None;
    while let Ok(Some(info)) = signals.read_signal() {
        let sig = info.ssi_signo as i32;
        if sig != libc::SIGCHLD && cancel.is_none() {
            cancel = Some(sig);
        }
    }
    cancel
}
