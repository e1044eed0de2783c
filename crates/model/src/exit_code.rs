//! The documented exit codes (CONTRACT §5), and the one mapping from an
//! outcome to the code `run` exits with.

use crate::OutcomeClass;

/// `verify` said NOT_VERIFIED; `journal verify` found a broken chain.
pub const NEGATIVE: i32 = 1;
/// Bad usage or bad input to a command other than `run`.
pub const USAGE: i32 = 2;
pub(crate) const MEMORY_LIMIT: i32 = 121;
pub const UNKNOWN: i32 = 122;
pub(crate) const OUTPUT_LIMIT: i32 = 123;
pub(crate) const TIMED_OUT: i32 = 124;
pub const NOT_EXECUTED: i32 = 125;

/// `signal` is the child's terminating signal for `signaled`, or the signal
/// governed-exec received for `cancelled_reaped`.
pub fn for_outcome(class: OutcomeClass, exit_code: Option<i32>, signal: Option<i32>) -> i32 {
    match class {
        OutcomeClass::Exited => exit_code.unwrap_or(UNKNOWN),
        OutcomeClass::Signaled | OutcomeClass::CancelledReaped => 128 + signal.unwrap_or(0),
        OutcomeClass::TimedOutReaped => TIMED_OUT,
        OutcomeClass::OutputLimitReaped => OUTPUT_LIMIT,
        OutcomeClass::MemoryLimitReaped => MEMORY_LIMIT,
        OutcomeClass::Unknown => UNKNOWN,
        OutcomeClass::KnownNotExecuted => NOT_EXECUTED,
    }
}
