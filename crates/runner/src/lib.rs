//! governed-exec: run one pre-approved command headless, bounded, and prove
//! what happened.
//!
//! The pipeline, one direction of data flow:
//!
//! ```text
//! request + manifest ──admission──▶ Admitted ──journal intent──▶ spawn ──supervise──▶ outcome ──▶ signed receipt
//! goal + receipt ──verify──▶ verdict
//! ```
//!
//! Invariants (see ARCHITECTURE.md for the reasoning):
//! - nothing is spawned unless a signed lease matches the request exactly and
//!   the identity re-checked on the very fds used for `fchdir`/`execveat`
//!   equals the lease's;
//! - a use is spent by a durable `executing` record written before `fork`;
//! - an outcome is `*_reaped`/`exited` only when every process of the run was
//!   observed gone; otherwise it is `unknown`, which blocks the Goal until a
//!   person resolves it (a crashed runner's attempt and a result record of
//!   class `unknown` alike); a failure of governed-exec's own before the
//!   program ran is `known_not_executed`/`exec_failed`, never `unknown`;
//! - every `run` prints a receipt-shaped document, refusals included;
//! - `verify` only reads, and a human classification is never evidence.

#![forbid(unsafe_code)]

pub mod gate;
pub mod process;
pub mod run;
