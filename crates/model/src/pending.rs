//! The human approval queue's file shapes (CONTRACT §12): a pending
//! approval, kept in the ledger a refused run would have used, and the
//! structured result the `local_process` tool returns to an agent.
//!
//! A pending approval is what admission saw of a request no live lease
//! answered — the request's four fields, the executable as it resolved, the
//! Goal and the workspace — so that a person can approve exactly that, and
//! nothing an agent says afterwards can change what was approved.

use serde::{Deserialize, Serialize};

use crate::{DirIdentity, GoalRef, OutcomeClass, Reason, Request};

pub const PENDING_SCHEMA: &str = "governed-exec/pending/v1";

/// Where a pending approval stands.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PendingState {
    /// Waiting for a person.
    Pending,
    /// A person signed a lease for exactly this request (`lease_id`).
    Approved,
    /// A person said no (`decided_by`, `note`).
    Denied,
}

impl std::fmt::Display for PendingState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PendingState::Pending => "pending",
            PendingState::Approved => "approved",
            PendingState::Denied => "denied",
        })
    }
}

/// The executable as the refused run resolved it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PendingExecutable {
    /// The canonical path the request's `executable` resolved to.
    pub canonical_path: String,
    /// SHA-256 of its whole content when the request was queued.
    pub sha256: String,
}

/// `STATE_DIR/pending/ID.json`: one request waiting for a person.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PendingApproval {
    /// `governed-exec/pending/v1`.
    pub schema: String,
    /// `pend-` and 16 hex digits, derived from everything below that names
    /// the request: the same request always has the same id; a request
    /// that differs in any element has another.
    pub id: String,
    /// The Goal the request was made under (id, revision, file digest).
    pub goal: GoalRef,
    /// The workspace's canonical path.
    pub workspace: String,
    /// The request exactly as it was made.
    pub request: Request,
    pub executable: PendingExecutable,
    /// The cwd as it resolved when the request was queued: `approve
    /// --pending` refuses a cwd that resolves elsewhere now.
    pub cwd: DirIdentity,
    /// Why the request was refused the last time it was made.
    pub reason: Reason,
    /// Who asked (`mcp --principal`, or `uid N` for a plain `run`), at most
    /// 16 names, first askers first.
    pub principals: Vec<String>,
    /// RFC 3339.
    pub first_seen: String,
    /// RFC 3339.
    pub last_seen: String,
    /// How often the request was made while this entry lived.
    pub count: u64,
    /// RFC 3339: the entry is dropped after this (a day after it was last
    /// asked for or decided).
    pub expires_at: String,
    pub state: PendingState,
    /// The person who approved or denied it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The key id of the approver key that decided it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_keyid: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
    /// The lease signed for it (`approved`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// The person's note (`denied`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The `structuredContent` of one `local_process` call: what an agent (or
/// its harness) needs to act on, with the receipt for the rest.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    /// The outcome class (CONTRACT §5).
    pub outcome: OutcomeClass,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Only a person can unblock this (approve, resolve, re-approve).
    pub needs_human: bool,
    /// The refusal's or the unknown outcome's reason.
    pub reason: Option<Reason>,
    /// One line of detail, terminal-safe.
    pub message: Option<String>,
    /// The pending approval this refusal was queued as.
    pub pending_id: Option<String>,
    pub receipt_id: Option<String>,
    /// Where the signed receipt was written.
    pub receipt_path: Option<String>,
    /// The receipt's safe text projection of the kept head and tail of
    /// stdout (bounded by the lease's keep-output).
    pub stdout: String,
    /// The same for stderr.
    pub stderr: String,
}
