//! Why `run` refused before the use was spent, typed by stage, with the one
//! mapping to the receipt's `Reason` and to the exit code. Call sites say
//! what failed; they never pick a reason by hand.

use crate::gate::admission::Refusal;
use crate::gate::lease::ManifestError;
use crate::run::prepare::RequestError;
use governed_evidence::sign::KeyError;
use governed_ledger::journal::JournalError;
use governed_ledger::LedgerSpecError;
use governed_model::goal::GoalError;
use governed_model::Reason;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The goal file: unreadable, too large, not a closed shape, no criteria.
    #[error(transparent)]
    Goal(#[from] GoalError),
    /// The request: `--request` file or stdin, or the command line.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The manifest file.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The approver's public key (`--trust`).
    #[error(transparent)]
    Trust(KeyError),
    /// `--key` given but unreadable.
    #[error(transparent)]
    RunnerKey(KeyError),
    /// The runner key in the state dir could not be read or created.
    #[error(transparent)]
    StateKey(KeyError),
    /// The state dir could not be made.
    #[error(transparent)]
    StateDir(JournalError),
    /// `--workspace` or the current directory.
    #[error("{what} {path}: {source}")]
    Place {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The leases matching the request name more than one ledger.
    #[error("the leases matching this request name different ledgers: give --lease ID")]
    AmbiguousLedger,
    /// The ledger a lease names is not one this binary can use.
    #[error(transparent)]
    LedgerName(#[from] LedgerSpecError),
    /// SIGTERM, SIGINT or SIGHUP arrived before the use was spent.
    #[error("governed-exec received {} before the use was spent: nothing was spawned and no use was spent", signal_name(*.0))]
    CancelledBeforeSpawn(i32),
}

fn signal_name(sig: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str())
        .unwrap_or("a cancelling signal")
}

impl RunError {
    /// The one mapping from a pre-spawn failure to the receipt's reason.
    pub fn reason(&self) -> Reason {
        match self {
            RunError::Goal(_)
            | RunError::Request(_)
            | RunError::Manifest(_)
            | RunError::Trust(_)
            | RunError::RunnerKey(_)
            | RunError::Place { .. }
            | RunError::LedgerName(_) => Reason::InvalidInput,
            RunError::StateKey(_) | RunError::StateDir(_) => Reason::JournalUnavailable,
            RunError::AmbiguousLedger => Reason::NoMatchingLease,
            RunError::CancelledBeforeSpawn(_) => Reason::CancelledBeforeSpawn,
        }
    }

    /// Every pre-spawn refusal is `known_not_executed`.
    pub fn exit_code(&self) -> i32 {
        governed_model::exit_code::NOT_EXECUTED
    }
}

impl From<RunError> for Refusal {
    fn from(e: RunError) -> Refusal {
        Refusal::new(e.reason(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_maps_to_its_reason() {
        let io = || std::io::Error::from_raw_os_error(libc::ENOENT);
        let goal = GoalError::EmptyId { what: "g".into() };
        let manifest = ManifestError::Schema {
            path: "m".into(),
            found: "x".into(),
        };
        let cases = [
            (RunError::Goal(goal), Reason::InvalidInput),
            (
                RunError::Request(RequestError::NonceEmpty),
                Reason::InvalidInput,
            ),
            (RunError::Manifest(manifest), Reason::InvalidInput),
            (
                RunError::StateKey(KeyError::Read {
                    path: "k".into(),
                    source: io(),
                    hint: String::new(),
                }),
                Reason::JournalUnavailable,
            ),
            (
                RunError::Place {
                    what: "--workspace",
                    path: "/x".into(),
                    source: io(),
                },
                Reason::InvalidInput,
            ),
            (RunError::AmbiguousLedger, Reason::NoMatchingLease),
            (
                RunError::LedgerName(LedgerSpecError::Unknown("l".into())),
                Reason::InvalidInput,
            ),
            (
                RunError::CancelledBeforeSpawn(libc::SIGINT),
                Reason::CancelledBeforeSpawn,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.reason(), want, "{e}");
            assert_eq!(e.exit_code(), 125);
            let r = Refusal::from(e);
            assert_eq!(r.reason, want);
        }
        assert!(RunError::CancelledBeforeSpawn(libc::SIGINT)
            .to_string()
            .contains("SIGINT"));
    }
}
