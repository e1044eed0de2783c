//! Stage 8, `seal`: the receipt of a classified run is signed once; the
//! same bytes go to the state dir's copy, the result record's digest and
//! stdout or `--receipt`. The child's scratch tree and cgroups are removed
//! on a second thread while the result record is made durable and the
//! receipt printed (which never waits for that removal); then the
//! attempt's liveness witness is released and the closing line printed.

use std::io::Write;
use std::path::Path;

use governed_evidence::escape;
use governed_fault as fault;
use governed_ledger::journal::{self, Event};
use governed_model::OutcomeClass;

use super::beside;
use super::classify::Classified;
use super::commit::Spent;
use super::draft::Draft;

/// Stage 8: sign, keep, record, print; the exit code of the run.
pub(super) fn seal(
    draft: &Draft,
    mut spent: Spent<'_>,
    classified: Classified,
    quiet: bool,
) -> i32 {
    let receipt_body = classified.body;
    let outcome = receipt_body.outcome.clone();
    let cleanup_state = receipt_body.cleanup.state.clone();
    let duration_ms = receipt_body.duration_ms;
    let attempt_id = spent.child.attempt_id.clone();

    // Keep a copy of the receipt in the state dir before the result record
    // names it. It survives a crash of this process (page cache); it is not
    // fsync'd, so a power loss may take it — the result record, which is,
    // still holds the outcome and the receipt's digest.
    // Signed once: the same bytes go to the state dir, the result record's
    // digest and stdout / --receipt.
    let (receipt_text, receipt_digest) = draft.seal(receipt_body);
    let receipts_dir = spent.run.inputs.state_dir.join("receipts");
    let copy = receipts_dir.join(format!("{attempt_id}.json"));
    let copied =
        journal::ensure_dir(&receipts_dir).is_ok() && write_private(&copy, &receipt_text).is_ok();
    fault::point("before_result");
    // Every counter is read and every process of the run is gone (or the
    // outcome says it is not known): the child's scratch tree and cgroups
    // are removed while the result record is made durable, its flush the
    // longest wait left, and the receipt printed. The receipt never waits
    // for the removal: the child chose how big its scratch tree is.
    let (hold, child) = spent.hold_and_child();
    let ((), went) = beside(
        || {
            if fault::fail("cleanup_stalls") {
                std::thread::sleep(std::time::Duration::from_secs(30));
            }
            child.scratch.remove();
            child.launch.cgroups.remove();
        },
        || {
            let written = hold.record_result(Event::Result {
                attempt_id,
                outcome: outcome.class,
                reason: outcome.reason,
                exit_code: outcome.exit_code,
                signal: outcome.signal,
                cleanup: cleanup_state,
                receipt_sha256: receipt_digest,
            });
            if let Err(e) = written {
                eprintln!("governed-exec: warning: the result record could not be written ({e}); this attempt will read as `unknown` until resolved");
            }
            fault::point("before_print");
            draft.output(&receipt_text)
        },
    );
    let (_run, child) = spent.release();
    drop(child);
    if outcome.class != OutcomeClass::KnownNotExecuted {
        if let Some(m) = &outcome.message {
            eprintln!("governed-exec: {}: {}", outcome.class, escape::visible(m));
        }
    }
    if !quiet {
        eprintln!(
            "{}",
            super::closing_line(
                &outcome,
                duration_ms,
                &went,
                copied.then_some(copy.as_path())
            )
        );
    }
    outcome.runner_exit_code
}

/// Write a new 0600 file (no fsync); never follows or reuses what is there.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.write_all(bytes)
}
