//! The journal's record: one line of a Goal's journal
//! (`STATE/journal/<goal>.jsonl`, or a PostgreSQL ledger's row), closed and
//! versioned like every other file shape. `ledger::journal` chains,
//! checks and writes these; `verify` reads them to cross-check a receipt,
//! and the published schema (`journal-record.schema.json`) is made from
//! them.

use serde::{Deserialize, Serialize};

use crate::{CleanupState, DirIdentity, ExecutableIdentity, GoalRef, OutcomeClass, Reason};

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Classification {
    Success,
    Failed,
    Stop,
}

impl Classification {
    /// Every classification `resolve --as` takes.
    pub const ALL: [Classification; 3] = [
        Classification::Success,
        Classification::Failed,
        Classification::Stop,
    ];

    /// The wire name, as in the journal's `resolution` record.
    pub fn name(self) -> &'static str {
        match self {
            Classification::Success => "success",
            Classification::Failed => "failed",
            Classification::Stop => "stop",
        }
    }
}

impl std::str::FromStr for Classification {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Classification::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown classification {s:?} (success, failed or stop)"))
    }
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// Written and fsync'd before fork; spends one use of the lease.
    Executing {
        attempt_id: String,
        lease_id: String,
        lease_fingerprint: String,
        goal: GoalRef,
        use_number: u64,
        max_uses: u64,
        runner_pid: u32,
        executable: Box<ExecutableIdentity>,
        cwd: Box<DirIdentity>,
    },
    /// Written after the process tree is reaped and the receipt is built.
    Result {
        attempt_id: String,
        outcome: OutcomeClass,
        reason: Option<Reason>,
        exit_code: Option<i32>,
        signal: Option<i32>,
        cleanup: CleanupState,
        receipt_sha256: String,
    },
    /// A person's classification of an `unknown` attempt. Never evidence.
    Resolution {
        attempt_id: String,
        classification: Classification,
        by: String,
        note: Option<String>,
    },
    Revocation {
        lease_id: String,
        by: String,
    },
    /// A run refused before anything was spent.
    Refusal {
        lease_id: Option<String>,
        reason: Reason,
        message: String,
    },
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub v: u32,
    pub seq: u64,
    pub prev: String,
    pub at: String,
    pub event: Event,
}
