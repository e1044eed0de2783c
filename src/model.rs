//! The file shapes of the contract: goal, request, lease, manifest, receipt.
//!
//! Every struct that is ever read from disk or stdin is a closed shape
//! (`deny_unknown_fields`): a misspelled key must fail closed and name itself,
//! never be ignored. Every format carries a schema string from day one.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub const GOAL_SCHEMA: &str = "governed-exec/goal/v1";
pub const LEASE_SCHEMA: &str = "governed-exec/lease/v1";
pub const MANIFEST_SCHEMA: &str = "governed-exec/manifest/v1";
pub const RECEIPT_SCHEMA: &str = "governed-exec/receipt/v1";
pub const PREDICATE_TYPE: &str = "https://governed-exec.dev/receipt/v1";
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const DSSE_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

// ---------------------------------------------------------------- goal

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    pub schema: String,
    pub id: String,
    pub revision: u64,
    pub criteria: Vec<Criterion>,
}

/// One mandatory criterion. The set of kinds is closed: an unknown kind is a
/// parse error that names it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Criterion {
    ExitCode {
        equals: i32,
    },
    File {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exists: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        contains: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
    },
    NoLeftoverProcesses,
    Outcome {
        #[serde(rename = "in")]
        allowed: Vec<OutcomeClass>,
    },
}

/// The goal as bound into a lease or receipt.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GoalRef {
    pub id: String,
    pub revision: u64,
    pub sha256: String,
}

// ---------------------------------------------------------------- request

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    Short,
    Standard,
    Long,
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Profile::Short => "short",
            Profile::Standard => "standard",
            Profile::Long => "long",
        })
    }
}

/// The structured request: exactly these four fields, nothing else.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub executable: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub profile: Profile,
}

// ---------------------------------------------------------------- identity

/// One hop of a symlink chain: `path` pointed at `target` (as read).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SymlinkHop {
    pub path: String,
    pub target: String,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ExecutableIdentity {
    pub requested: String,
    pub canonical_path: String,
    pub symlink_chain: Vec<SymlinkHop>,
    pub device: u64,
    pub inode: u64,
    pub size: u64,
    pub mode: u32,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub sha256: String,
    /// `#!` line's interpreter, when the file is a script.
    pub interpreter: Option<String>,
}

/// What tells a directory apart from one re-created at the same path.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CreationStamp {
    /// `statx_btime` (nanoseconds) or `inode_generation`.
    pub source: String,
    pub value: i64,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DirIdentity {
    pub path: String,
    pub device: u64,
    pub inode: u64,
    /// `None` where the filesystem offers no creation stamp: re-creation at
    /// the same inode cannot be detected there (the approval summary says so).
    pub creation: Option<CreationStamp>,
}

// ---------------------------------------------------------------- limits, env, isolation

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub wall_time_ms: u64,
    pub kill_grace_ms: u64,
    pub cpu_time_s: u64,
    pub memory_bytes: u64,
    pub max_processes: u64,
    pub max_open_files: u64,
    pub max_file_size_bytes: u64,
    pub keep_output_bytes: u64,
    pub output_cap_bytes: u64,
}

/// The child's environment, fully determined by the lease. `HOME` and
/// `TMPDIR` are the attempt's fresh private directories unless `fixed`
/// names them.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EnvPolicy {
    /// The clean PATH the executable was resolved in and the child gets.
    pub path: String,
    /// Fixed values written by the approver.
    pub fixed: BTreeMap<String, String>,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    pub uid: u32,
    pub gid: u32,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IsolationRequest {
    pub as_user: Option<UserSpec>,
    /// `Some` turns the Landlock write scope on: the workspace, the private
    /// HOME/TMPDIR and these absolute paths are writable, nothing else.
    pub fs_write: Option<Vec<String>>,
    /// `Some` narrows reads (and execution) to these absolute paths plus the
    /// writable ones; `None` leaves reads unrestricted. Implies the scope.
    #[serde(default)]
    pub fs_read: Option<Vec<String>>,
    pub no_network: bool,
    pub pid_namespace: bool,
}

// ---------------------------------------------------------------- lease, manifest

/// Everything a lease binds. Its canonical encoding (serde_json of this
/// struct: fixed field order, sorted maps) is what the fingerprint hashes.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LeaseBody {
    pub schema: String,
    pub lease_id: String,
    pub goal: GoalRef,
    pub workspace: DirIdentity,
    pub request: Request,
    pub executable: ExecutableIdentity,
    pub cwd: DirIdentity,
    pub limits: Limits,
    pub env: EnvPolicy,
    pub isolation: IsolationRequest,
    pub approver: String,
    pub issued_at: String,
    pub expires_at: String,
    pub max_uses: u64,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Lease {
    pub body: LeaseBody,
    /// SHA-256 (hex) of the canonical encoding of `body`.
    pub fingerprint: String,
    /// Key id (SHA-256 of the raw public key, hex) of the approver's key.
    pub keyid: String,
    /// ed25519 signature (standard base64) over the 32 fingerprint bytes.
    pub signature: String,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Revocation {
    pub lease_id: String,
    pub by: String,
    pub at: String,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: String,
    pub leases: Vec<Lease>,
    /// Revocations only ever take authority away, so they need no signature.
    #[serde(default)]
    pub revocations: Vec<Revocation>,
}

// ---------------------------------------------------------------- outcome

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeClass {
    Exited,
    Signaled,
    TimedOutReaped,
    OutputLimitReaped,
    CancelledReaped,
    Unknown,
    KnownNotExecuted,
}

impl fmt::Display for OutcomeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = serde_json::to_value(self).unwrap_or_default();
        f.write_str(v.as_str().unwrap_or("?"))
    }
}

/// The closed set of reasons for `known_not_executed` and `unknown`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    NoMatchingLease,
    LeaseExpired,
    LeaseNotYetValid,
    LeaseExhausted,
    LeaseRevoked,
    LeaseSignatureInvalid,
    GoalMismatch,
    ExecutableDrift,
    CwdDrift,
    WorkspaceDrift,
    UnresolvedUnknownOutcome,
    IsolationUnavailable,
    InvalidInput,
    JournalUnavailable,
    JournalCorrupt,
    ExecFailed,
    /// `unknown`: the processes could not be confirmed gone within the bound.
    CleanupUnconfirmed,
}

impl Reason {
    /// Refusals only a person can unblock.
    pub fn needs_human(self) -> bool {
        matches!(
            self,
            Reason::LeaseExpired
                | Reason::LeaseExhausted
                | Reason::LeaseRevoked
                | Reason::LeaseSignatureInvalid
                | Reason::NoMatchingLease
                | Reason::GoalMismatch
                | Reason::ExecutableDrift
                | Reason::CwdDrift
                | Reason::WorkspaceDrift
                | Reason::UnresolvedUnknownOutcome
                | Reason::JournalCorrupt
                | Reason::CleanupUnconfirmed
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = serde_json::to_value(self).unwrap_or_default();
        f.write_str(v.as_str().unwrap_or("?"))
    }
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    pub class: OutcomeClass,
    pub reason: Option<Reason>,
    pub needs_human: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The exit code governed-exec itself exits with for this outcome.
    pub runner_exit_code: i32,
    /// One line of human-readable detail.
    pub message: Option<String>,
}

// ---------------------------------------------------------------- receipt

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StreamRecord {
    pub bytes: u64,
    pub sha256: String,
    /// First bytes kept (standard base64), at most `keep_output_bytes`.
    pub head_b64: String,
    /// Last bytes kept (standard base64), not overlapping `head_b64`.
    pub tail_b64: String,
    /// Bytes neither in head nor tail.
    pub omitted_bytes: u64,
    /// Deterministic, terminal-safe text projection of head and tail.
    pub text: String,
    /// False when the stream did not reach EOF within the drain bound
    /// (something outside the run held the pipe open).
    pub complete: bool,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Streams {
    pub stdout: StreamRecord,
    pub stderr: StreamRecord,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Product {
    pub path: String,
    pub exists: bool,
    pub size: Option<u64>,
    pub sha256: Option<String>,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CleanupState {
    /// Every process of the run was observed gone.
    Gone,
    /// Could not be confirmed within the bound.
    NotConfirmed,
    /// Nothing was spawned.
    NotStarted,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Cleanup {
    pub state: CleanupState,
    /// How the tree was found and killed, e.g. `subreaper+proc_children`.
    pub mechanism: String,
    /// Processes still alive after the main process ended, killed by us.
    pub leftover_processes_killed: u64,
    /// Processes still present when the confirm bound ran out.
    pub unconfirmed_pids: Vec<i32>,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    pub cpu_user_ms: u64,
    pub cpu_system_ms: u64,
    pub peak_rss_kib: u64,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IsolationReport {
    /// Plain words: what the child could do.
    pub boundary: String,
    pub os_sandbox: bool,
    pub uid: u32,
    pub gid: u32,
    pub no_new_privs: bool,
    pub inherited_fds_closed: bool,
    pub parent_death_signal: bool,
    pub capabilities_dropped: bool,
    pub landlock_abi: Option<i64>,
    pub landlock_writable: Vec<String>,
    /// Empty: reads unrestricted (when Landlock is on at all).
    pub landlock_readable: Vec<String>,
    pub network_namespace: bool,
    pub pid_namespace: bool,
    /// How `max_processes` was enforced (`rlimit_nproc`, `pids_cgroup_v1`, …).
    pub process_limit: String,
    /// Read back from `/proc/<child>/status` right after exec, when the
    /// child was still there to read.
    pub kernel_view: Option<KernelView>,
}

/// The child's credentials as the kernel reports them (fields verbatim).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KernelView {
    pub uid: String,
    pub gid: String,
    pub groups: String,
    pub cap_inh: String,
    pub cap_prm: String,
    pub cap_eff: String,
    pub cap_bnd: String,
    pub cap_amb: String,
    pub no_new_privs: String,
}

impl KernelView {
    /// Parse a `/proc/PID/status` text.
    pub fn from_status(text: &str) -> Option<KernelView> {
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        };
        Some(KernelView {
            uid: get("Uid:")?,
            gid: get("Gid:")?,
            groups: get("Groups:").unwrap_or_default(),
            cap_inh: get("CapInh:")?,
            cap_prm: get("CapPrm:")?,
            cap_eff: get("CapEff:")?,
            cap_bnd: get("CapBnd:")?,
            cap_amb: get("CapAmb:").unwrap_or_default(),
            no_new_privs: get("NoNewPrivs:").unwrap_or_default(),
        })
    }
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SigningReport {
    pub keyid: String,
    /// True only when the child ran as a uid that could not read the key.
    pub key_out_of_child_reach: bool,
    pub why: String,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LeaseRef {
    pub id: String,
    pub fingerprint: String,
}

/// The receipt body: the in-toto predicate.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReceiptBody {
    pub schema: String,
    pub receipt_id: String,
    pub attempt_id: Option<String>,
    pub goal: Option<GoalRef>,
    pub lease: Option<LeaseRef>,
    pub request: Option<Request>,
    pub workspace: Option<String>,
    pub command: Option<ExecutableIdentity>,
    pub cwd: Option<DirIdentity>,
    pub outcome: Outcome,
    pub cleanup: Cleanup,
    pub streams: Streams,
    pub products: Vec<Product>,
    pub started_at: String,
    pub ended_at: String,
    pub duration_ms: u64,
    pub resources: Resources,
    pub limits: Option<Limits>,
    pub isolation: Option<IsolationReport>,
    pub signing: Option<SigningReport>,
    /// SHA-256 of the journal's `executing` record this receipt closes.
    pub journal_record_sha256: Option<String>,
    pub runner_version: String,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    pub name: String,
    pub digest: BTreeMap<String, String>,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub type_: String,
    pub subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: ReceiptBody,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DsseSignature {
    pub keyid: String,
    pub sig: String,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub payload: String,
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    pub signatures: Vec<DsseSignature>,
}

/// Parse a closed JSON shape, turning serde's message into one that names
/// the file and the offending field.
pub fn parse_json<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{what}: {e}"))
}
