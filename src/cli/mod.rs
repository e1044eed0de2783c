//! The commands a person or a CI job types: argument parsing (clap), the
//! approver's `approve`, the operator's `journal`/`resolve`/`revoke`/
//! `receipt`/`keygen`, `doctor`, and the stdout writer. The top floor: it
//! calls into `run`, `gate`, `ledger`, `evidence`; nothing below calls it.

pub mod approvals;
pub mod approve;
pub mod args;
pub mod doctor;
pub mod operator;
pub mod out;
pub mod toolchain;
