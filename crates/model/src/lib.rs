//! The file shapes of the contract: goal, request, lease, manifest, receipt.
//!
//! Every struct that is ever read from disk or stdin is a closed shape
//! (`deny_unknown_fields`): a misspelled key must fail closed and name itself,
//! never be ignored. Every format carries a schema string from day one.

#![forbid(unsafe_code)]

pub mod approvals;
pub mod digest;
pub mod exit_code;
pub mod goal;
pub mod limits;
pub mod pending;
pub mod record;
#[cfg(feature = "schema")]
pub mod schema;
pub mod units;

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
    NoLeftoverProcesses {},
    Outcome {
        #[serde(rename = "in")]
        allowed: Vec<OutcomeClass>,
    },
    /// (v1.2) Resource bounds, checked by `verify` against the receipt's
    /// `resources` and `duration_ms`; any subset, at least one. Sizes and
    /// durations are written as the approve flags take them (`2GiB`, `10m`).
    Resources {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peak_memory_at_most: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cpu_time_at_most: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wall_time_at_most: Option<String>,
    },
    /// (v1.2) At most `max_denied` connections denied, and every allowed
    /// connection to an entry of `only`; at least one of the two.
    Network {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_denied: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only: Option<Vec<String>>,
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
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    Short,
    Standard,
    Long,
}

impl Profile {
    /// Every profile, in tier order (the flags' and the tool schema's values).
    pub const ALL: [Profile; 3] = [Profile::Short, Profile::Standard, Profile::Long];

    /// The wire name, as in `request.json`.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Short => "short",
            Profile::Standard => "standard",
            Profile::Long => "long",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown profile {s:?} (short, standard or long)"))
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

/// The request as a receipt records it: the four fields of [`Request`],
/// but `profile` is `null` when `run -- CMD` was refused before any lease
/// chose the profile and the caller gave no `--profile` (a receipt shows
/// the request as given, never a defaulted tier).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReceiptRequest {
    pub executable: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub profile: Option<Profile>,
}

impl From<Request> for ReceiptRequest {
    fn from(r: Request) -> Self {
        ReceiptRequest {
            executable: r.executable,
            argv: r.argv,
            cwd: r.cwd,
            profile: Some(r.profile),
        }
    }
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
    pub max_processes: MaxProcesses,
    pub max_open_files: u64,
    pub max_file_size_bytes: u64,
    pub keep_output_bytes: u64,
    pub output_cap_bytes: u64,
    /// After governed-exec itself is asked to stop (SIGTERM/SIGINT/SIGHUP),
    /// how long the forwarded signal has before SIGKILL. Absent in format-1
    /// leases, which get the default of every tier (2s).
    #[serde(default = "default_cancel_grace_ms")]
    pub cancel_grace_ms: u64,
}

/// The cancel grace of every tier (docker stop waits 10s, CI runners less).
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 2_000;

fn default_cancel_grace_ms() -> u64 {
    DEFAULT_CANCEL_GRACE_MS
}

/// `max_processes` of a lease: a number, or `"unlimited"` — the approver's
/// explicit waiver (`approve --max-processes unlimited`), for machines where
/// no mechanism can enforce a number (CONTRACT §7). A number serialises as
/// a plain JSON number, so leases signed before the waiver existed keep
/// their bytes and their fingerprint.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum MaxProcesses {
    Limit(u64),
    Waived(Unlimited),
}

/// The one word that waives the process limit.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Unlimited {
    Unlimited,
}

impl MaxProcesses {
    pub const UNLIMITED: MaxProcesses = MaxProcesses::Waived(Unlimited::Unlimited);

    /// The number to enforce, `None` when waived.
    pub fn limit(self) -> Option<u64> {
        match self {
            MaxProcesses::Limit(n) => Some(n),
            MaxProcesses::Waived(_) => None,
        }
    }
}

impl fmt::Display for MaxProcesses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxProcesses::Limit(n) => write!(f, "{n}"),
            MaxProcesses::Waived(_) => f.write_str("unlimited"),
        }
    }
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

impl UserSpec {
    /// `(uid_t)-1` is no uid: `setresuid(-1, -1, -1)` changes nothing, so
    /// a child "switched" to 4294967295 would keep the runner's uid (0)
    /// while the summary and receipt named 4294967295.
    pub fn check(&self) -> Result<(), NoSuchId> {
        for (what, id) in [("uid", self.uid), ("gid", self.gid)] {
            if id == u32::MAX {
                return Err(NoSuchId {
                    flag: "--as-user",
                    user: *self,
                    what,
                });
            }
        }
        Ok(())
    }
}

/// A uid or gid of `(uid_t)-1`, which names no one; `flag` is the flag
/// that gave it.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {}:{}: {what} 4294967295 is (uid_t)-1, which the kernel reads as \"leave unchanged\"; name a real {what}", user.uid, user.gid)]
pub struct NoSuchId {
    pub flag: &'static str,
    pub user: UserSpec,
    pub what: &'static str,
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
    /// `--allow-net`: the only `host:port` entries (host lower-cased, port
    /// explicit) the child may reach, through governed-exec's proxy
    /// (CONTRACT §8). Empty: the lease does not ask for it (absent in
    /// leases from before v1.2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_net: Vec<String>,
    /// More sockets of daemons that act for whoever connects, beyond the
    /// built-in list (`gate::reach::DAEMON_SOCKETS`): each is a channel of
    /// the child's reach, covered or stated (CONTRACT §7). Absolute paths;
    /// absent in leases that name none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daemon_sockets: Vec<String>,
    /// (v1.3) The syscall policy of an isolated lease (`approve
    /// --syscalls`): `default` (the seccomp policy `docker-default-v1`) or
    /// `unconfined` (the approver's explicit waiver). Written by `approve`
    /// into every lease that asks for an isolation option, and only there.
    /// Absent in a lease with no isolation option (no policy applies) and
    /// in an isolated lease signed before v1.3, which gets the policy: the
    /// safe reading of a lease that never waived it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls: Option<Syscalls>,
}

/// What an isolated lease says of the syscall policy (CONTRACT §7, v1.3).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Syscalls {
    /// The seccomp filter modelled on Docker's default profile.
    Default,
    /// Waived by the approver (`--syscalls unconfined`).
    Unconfined,
}

impl Syscalls {
    pub fn as_str(self) -> &'static str {
        match self {
            Syscalls::Default => "default",
            Syscalls::Unconfined => "unconfined",
        }
    }
}

impl fmt::Display for Syscalls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Syscalls {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "default" => Ok(Syscalls::Default),
            "unconfined" => Ok(Syscalls::Unconfined),
            other => Err(format!(
                "unknown syscall policy {other:?}: expected default or unconfined"
            )),
        }
    }
}

// ---------------------------------------------------------------- lease, manifest

/// Everything a lease binds. The bytes the approver signed are the
/// serde_json encoding of this struct made at approval time (fixed field
/// order, sorted maps); they are stored verbatim in the lease and the
/// fingerprint is recomputed from those stored bytes, never from a
/// re-serialisation by the code that reads them. Fields added after format
/// 1 carry a serde default, so older leases still parse.
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
    /// `machine` (default; absent in leases from before portable binding)
    /// or `portable` (CONTRACT §4 "Binding").
    #[serde(default, skip_serializing_if = "Binding::is_machine")]
    pub binding: Binding,
    /// What a portable lease pins instead of inode, device and timestamps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub portable: Option<PortableIdentity>,
    /// The ledger that counts this lease's uses, revocations and unknown
    /// outcomes (a directory, or `postgres://HOST[:PORT]/DB`); absent: the
    /// runner's state dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<String>,
}

/// How a lease binds the executable and the workspace.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Binding {
    /// This machine: canonical paths, device, inode, timestamps.
    #[default]
    Machine,
    /// By content: the executable's path (workspace-relative when inside
    /// it), mode and SHA-256; the workspace is where `run` is pointed.
    Portable,
}

impl Binding {
    pub(crate) fn is_machine(&self) -> bool {
        *self == Binding::Machine
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Binding::Machine => "machine",
            Binding::Portable => "portable",
        })
    }
}

/// The executable as a portable lease pins it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PortableIdentity {
    /// Canonical path, relative to the workspace when the executable lies
    /// inside it, else absolute.
    pub executable_path: String,
    pub in_workspace: bool,
    pub mode: u32,
    pub sha256: String,
}

/// The lease format this binary writes.
pub const LEASE_FORMAT: u32 = 2;
/// Formats this binary reads. In both, the signed bytes are the stored
/// bytes of the `body` object with the insignificant whitespace (outside
/// strings) removed. Format 1 (no `format` field) was written indented by
/// the release that had no version field; format 2 is written compact and
/// adds `limits.cancel_grace_ms` (absent in format 1: the 2s default).
pub const LEASE_FORMATS_KNOWN: std::ops::RangeInclusive<u32> = 1..=LEASE_FORMAT;

/// A signed lease. On disk: `{"format": 2, "body": {…exact signed bytes…},
/// "fingerprint", "keyid", "signature"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "LeaseWire", into = "LeaseWire")]
pub struct Lease {
    /// The lease format version (1 for leases without a `format` field).
    pub format: u32,
    /// The body, parsed from `signed_body`.
    pub body: LeaseBody,
    /// The exact bytes the approver signed (a compact JSON object).
    pub signed_body: String,
    /// SHA-256 (hex) of `signed_body`.
    pub fingerprint: String,
    /// Key id (SHA-256 of the raw public key, hex) of the approver's key.
    pub keyid: String,
    /// ed25519 signature (standard base64) over the 32 fingerprint bytes.
    pub signature: String,
}

/// The stored shape of a lease.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<u32>,
    pub body: Box<serde_json::value::RawValue>,
    pub fingerprint: String,
    pub keyid: String,
    pub signature: String,
}

/// The published shape of a lease (for the JSON Schema).
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct LeaseDoc {
    /// Lease format version; absent means 1. An unknown version is refused
    /// (`lease_format_unsupported`: re-approve).
    format: Option<u32>,
    /// The signed bytes, stored verbatim: a compact JSON object.
    body: LeaseBody,
    /// SHA-256 (hex) of the stored bytes of `body`.
    fingerprint: String,
    /// Key id (SHA-256 of the raw public key, hex) of the approver's key.
    keyid: String,
    /// ed25519 signature (standard base64) over the 32 fingerprint bytes.
    signature: String,
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Lease {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Lease".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        LeaseDoc::json_schema(generator)
    }
}

/// JSON text without its insignificant whitespace (outside strings). The
/// result is byte-for-byte what serde_json's compact writer made before a
/// pretty writer indented it.
pub fn strip_json_whitespace(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let (mut in_str, mut esc) = (false, false);
    for c in s.chars() {
        if in_str {
            out.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

impl TryFrom<LeaseWire> for Lease {
    type Error = String;
    fn try_from(w: LeaseWire) -> Result<Lease, String> {
        let format = w.format.unwrap_or(1);
        // Both formats: the stored bytes without insignificant whitespace,
        // so pretty-printing a manifest (`jq .`) leaves leases valid.
        let signed_body = match format {
            1 | LEASE_FORMAT => strip_json_whitespace(w.body.get()),
            f => {
                return Err(format!(
                    "lease format version {f} is not one this governed-exec reads (it reads {}..={}): re-approve the request with this release",
                    LEASE_FORMATS_KNOWN.start(),
                    LEASE_FORMATS_KNOWN.end()
                ))
            }
        };
        let body: LeaseBody =
            serde_json::from_str(&signed_body).map_err(|e| format!("lease body: {e}"))?;
        Ok(Lease {
            format,
            body,
            signed_body,
            fingerprint: w.fingerprint,
            keyid: w.keyid,
            signature: w.signature,
        })
    }
}

impl From<Lease> for LeaseWire {
    fn from(l: Lease) -> LeaseWire {
        // Format 1 is written back as it was read: the whitespace-stripped
        // object is still the signed bytes when read as format 1.
        let raw = serde_json::value::RawValue::from_string(l.signed_body).unwrap_or_default();
        LeaseWire {
            format: (l.format != 1).then_some(l.format),
            body: raw,
            fingerprint: l.fingerprint,
            keyid: l.keyid,
            signature: l.signature,
        }
    }
}

/// A stored lease of a format this binary does not read: kept verbatim in
/// the manifest, and refused with `lease_format_unsupported` when a run
/// names it (by id or by an equal request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignLease {
    pub format: u32,
    /// `body.lease_id`, when readable.
    pub lease_id: Option<String>,
    /// `body.request`, when readable.
    pub request: Option<serde_json::Value>,
    /// The stored lease object, verbatim.
    pub raw: String,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Revocation {
    pub lease_id: String,
    pub by: String,
    pub at: String,
}

/// A lease replaced by a later approval of the same request.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Supersession {
    pub lease_id: String,
    pub by_lease: String,
    pub at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(try_from = "ManifestWire", into = "ManifestOut")]
pub struct Manifest {
    pub schema: String,
    pub leases: Vec<Lease>,
    /// Revocations only ever take authority away, so they need no signature.
    #[serde(default)]
    pub revocations: Vec<Revocation>,
    /// Leases replaced by a re-approval; like revocations, they only take
    /// authority away.
    pub superseded: Vec<Supersession>,
    /// Leases of a format this binary does not read, kept verbatim.
    pub foreign: Vec<ForeignLease>,
}

impl Manifest {
    /// A manifest with no lease: what a manifest that was never written
    /// approves.
    pub fn empty() -> Manifest {
        Manifest {
            schema: MANIFEST_SCHEMA.to_string(),
            leases: vec![],
            revocations: vec![],
            superseded: vec![],
            foreign: vec![],
        }
    }
}

/// The published shape of a manifest (for the JSON Schema).
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ManifestDoc {
    schema: String,
    leases: Vec<Lease>,
    /// Revocations only ever take authority away, so they need no signature.
    #[serde(default)]
    revocations: Vec<Revocation>,
    /// Leases replaced by a later approval of the same request.
    #[serde(default)]
    superseded: Vec<Supersession>,
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Manifest {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Manifest".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        ManifestDoc::json_schema(generator)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestWire {
    pub schema: String,
    pub leases: Vec<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    pub revocations: Vec<Revocation>,
    #[serde(default)]
    pub superseded: Vec<Supersession>,
}

impl TryFrom<ManifestWire> for Manifest {
    type Error = String;
    fn try_from(w: ManifestWire) -> Result<Manifest, String> {
        let mut m = Manifest {
            schema: w.schema,
            leases: vec![],
            revocations: w.revocations,
            superseded: w.superseded,
            foreign: vec![],
        };
        for (i, raw) in w.leases.into_iter().enumerate() {
            // One typed parse in the common case (a lease of a known
            // format); the format is peeked at only when that fails, to
            // tell a foreign lease (kept verbatim) from a broken one.
            let wire_err = match serde_json::from_str::<LeaseWire>(raw.get()) {
                Ok(wire) if LEASE_FORMATS_KNOWN.contains(&wire.format.unwrap_or(1)) => {
                    m.leases
                        .push(Lease::try_from(wire).map_err(|e| format!("leases[{i}]: {e}"))?);
                    continue;
                }
                Ok(_) => None,
                Err(e) => Some(e),
            };
            #[derive(Deserialize)]
            struct Peek {
                #[serde(default)]
                format: Option<u32>,
            }
            let format = serde_json::from_str::<Peek>(raw.get())
                .ok()
                .and_then(|p| p.format)
                .unwrap_or(1);
            if LEASE_FORMATS_KNOWN.contains(&format) {
                let e = wire_err.map_or_else(|| "unreadable lease".to_string(), |e| e.to_string());
                return Err(format!("leases[{i}]: {e}"));
            }
            let v: serde_json::Value = serde_json::from_str(raw.get()).unwrap_or_default();
            m.foreign.push(ForeignLease {
                format,
                lease_id: v["body"]["lease_id"].as_str().map(str::to_string),
                request: v["body"].get("request").cloned(),
                raw: raw.get().to_string(),
            });
        }
        Ok(m)
    }
}

/// What a manifest is written as: known leases in their stored shape,
/// foreign ones verbatim after them.
#[derive(Serialize)]
pub struct ManifestOut {
    pub schema: String,
    pub leases: Vec<LeaseOut>,
    pub revocations: Vec<Revocation>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub superseded: Vec<Supersession>,
}

#[derive(Serialize)]
#[serde(untagged)]
pub enum LeaseOut {
    Known(LeaseWire),
    Foreign(Box<serde_json::value::RawValue>),
}

impl From<Manifest> for ManifestOut {
    fn from(m: Manifest) -> ManifestOut {
        let mut leases: Vec<LeaseOut> = m
            .leases
            .into_iter()
            .map(|l| LeaseOut::Known(l.into()))
            .collect();
        for f in m.foreign {
            if let Ok(raw) = serde_json::value::RawValue::from_string(f.raw) {
                leases.push(LeaseOut::Foreign(raw));
            }
        }
        ManifestOut {
            schema: m.schema,
            leases,
            revocations: m.revocations,
            superseded: m.superseded,
        }
    }
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
    /// (v1.2) The kernel's OOM killer killed the main process for the run's
    /// memory cgroup limit; the rest was killed and observed gone.
    MemoryLimitReaped,
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
    /// The lease's ledger could not be reached or written: zero spawn.
    LedgerUnavailable,
    ExecFailed,
    /// A lease of a format version this binary does not read: re-approve.
    LeaseFormatUnsupported,
    /// governed-exec got SIGTERM/SIGINT/SIGHUP before the use was spent:
    /// nothing spawned, nothing spent.
    CancelledBeforeSpawn,
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
                | Reason::LeaseFormatUnsupported
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
    /// (v1.3) The pending approval a refusal was queued as (CONTRACT §12):
    /// `governed-exec pending show ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_id: Option<String>,
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

/// The wire name (`gone`, `not_confirmed`, `not_started`), for messages:
/// never the Rust variant name.
impl fmt::Display for CleanupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CleanupState::Gone => "gone",
            CleanupState::NotConfirmed => "not_confirmed",
            CleanupState::NotStarted => "not_started",
        })
    }
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
    /// The independent observations `state` rests on: `subreaper_tree`
    /// (the runner's `/proc/self/task/*/children` walk), `cgroup_v2`
    /// (`populated 0`), `pids_cgroup_v1` (its `cgroup.procs`),
    /// `pid_namespace` (the kernel kills the namespace with its PID 1).
    #[serde(default)]
    pub witness: Vec<String>,
    /// Whether a process of the run held what it takes to hide from every
    /// witness (e.g. a root child with CAP_SYS_ADMIN in the runner's mount
    /// namespace). A receipt without the field is treated as evadable.
    #[serde(default = "evadable_unknown")]
    pub evadable: bool,
    /// Why it was (or was not) evadable, in words.
    #[serde(default)]
    pub evadable_why: String,
}

fn evadable_unknown() -> bool {
    true
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// CPU time of every process of the run (the run's cgroup), or of the
    /// waited-for children (`rusage`).
    pub cpu_user_ms: u64,
    pub cpu_system_ms: u64,
    /// The largest single process's peak RSS (`getrusage` of the children).
    pub peak_rss_kib: u64,
    /// Where the figures below come from: `cgroup_v2`, `cgroup_v1` (the
    /// run's own groups) or `rusage` (no group could be made). Receipts
    /// written before v1.2 read as `rusage`.
    #[serde(default = "rusage_mechanism")]
    pub mechanism: String,
    /// Peak memory of the whole run's memory cgroup (v2 `memory.peak`, v1
    /// `memory.max_usage_in_bytes`; page cache charged to the run included).
    #[serde(default)]
    pub peak_memory_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes_why: Option<String>,
    /// Bytes the run read from and wrote to block devices (v2 `io.stat`,
    /// v1 `blkio.throttle.io_service_bytes`), or the kernel's per-task IO
    /// accounting of the waited-for children (`rusage`).
    #[serde(default)]
    pub io_read_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_read_bytes_why: Option<String>,
    #[serde(default)]
    pub io_write_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_write_bytes_why: Option<String>,
    /// Most processes of the run alive at once (`pids.peak`).
    #[serde(default)]
    pub peak_processes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_processes_why: Option<String>,
    /// Processes of the run the kernel's OOM killer killed (v2
    /// `memory.events` `oom_kill`, v1 `memory.oom_control` `oom_kill`).
    #[serde(default)]
    pub oom_kills: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kills_why: Option<String>,
    /// For each limit of the lease, what the run used against it.
    #[serde(default)]
    pub fit: Fit,
}

fn rusage_mechanism() -> String {
    "rusage".into()
}

impl Resources {
    /// A run that never started: nothing used, nothing measured.
    pub fn none() -> Resources {
        let why = || Some("nothing was spawned".to_string());
        Resources {
            cpu_user_ms: 0,
            cpu_system_ms: 0,
            peak_rss_kib: 0,
            mechanism: rusage_mechanism(),
            peak_memory_bytes: None,
            peak_memory_bytes_why: why(),
            io_read_bytes: None,
            io_read_bytes_why: why(),
            io_write_bytes: None,
            io_write_bytes_why: why(),
            peak_processes: None,
            peak_processes_why: why(),
            oom_kills: None,
            oom_kills_why: why(),
            fit: Fit::default(),
        }
    }

    /// CPU time of every process of the run, user + system.
    pub fn cpu_time_ms(&self) -> u64 {
        self.cpu_user_ms.saturating_add(self.cpu_system_ms)
    }
}

/// What the run used against one limit of its lease (`None`: not measured,
/// or the limit is waived).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FitEntry {
    pub used: Option<u64>,
    pub limit: Option<u64>,
}

/// For each limit of the lease, `{used, limit}` in the unit the key names,
/// so an approver sees whether the lease is too wide or about to be hit.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Fit {
    /// Wall time of the run against `wall_time_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time_ms: Option<FitEntry>,
    /// CPU time of the whole run against `cpu_time_s` (in ms; the kernel
    /// enforces that limit per process, as `RLIMIT_CPU`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<FitEntry>,
    /// Peak memory of the run against `memory_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<FitEntry>,
    /// Peak processes against `max_processes` (limit `None` when waived).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<FitEntry>,
    /// stdout + stderr bytes against `output_cap_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<FitEntry>,
}

/// One channel of the child's reach (see `IsolationReport::reach`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReachEntry {
    /// `daemon_socket`, `ledger_dir`, `ledger_credentials`, `runner_signals`.
    pub channel: String,
    /// The file, directory or socket (absent for `runner_signals`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Whether the child could use it.
    pub reachable: bool,
    /// The mechanism that kept it out of reach, or why it was not.
    pub how: String,
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
    /// How `--no-network` was enforced: `network_namespace`,
    /// `user_and_network_namespace` or `seccomp_socket_families` (absent
    /// when the lease does not ask for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_mechanism: Option<String>,
    /// How `--pid-namespace` was created: `pid_namespace` or
    /// `user_and_pid_namespace` (absent when the lease does not ask for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_namespace_mechanism: Option<String>,
    /// How `max_processes` was enforced (`pids_cgroup_v1`, `pids_cgroup_v2`,
    /// `rlimit_nproc`, `enclosing_pids_max`, `waived`); `process_limit` of
    /// the predicate has the detail.
    pub process_limit: String,
    /// Whether the child could have escaped that mechanism (a uid-0 child
    /// that can reach cgroupfs can move itself out of the pids cgroup).
    #[serde(default = "evadable_unknown")]
    pub process_limit_evadable: bool,
    /// (v1.2) How `memory_bytes` was enforced: `memory_cgroup_v2`,
    /// `memory_cgroup_v1` (resident memory of the whole run, swap included
    /// where the kernel accounts it) or `rlimit_as` (virtual address space,
    /// per process). Absent in receipts written before v1.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
    /// Whether the child could have escaped that mechanism: a uid-0 child
    /// that can reach cgroupfs can move itself out of the memory group, and
    /// one with `CAP_SYS_RESOURCE` can raise its hard `RLIMIT_AS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_evadable: Option<bool>,
    /// The capabilities a uid-0 child kept after the drop that isolation
    /// requires (CONTRACT §7); `None`: governed-exec did not change them.
    #[serde(default)]
    pub capabilities_kept: Option<Vec<String>>,
    /// The child had its own mount namespace (private propagation), in which
    /// the runner's state dir, key and cgroupfs were covered.
    #[serde(default)]
    pub mount_namespace: bool,
    /// A fresh `/proc` of the child's PID namespace was mounted over `/proc`.
    #[serde(default)]
    pub proc_remounted: bool,
    /// Read back from `/proc/<child>/status` right after exec, when the
    /// child was still there to read.
    pub kernel_view: Option<KernelView>,
    /// What the child could reach on this machine (CONTRACT §7, v1.2):
    /// one entry per channel the runner's decisions rest on (daemon
    /// sockets, a named ledger directory, ledger credential files, the
    /// runner's signals), each out of reach by a named mechanism or in
    /// reach with the reason. Absent in receipts of earlier releases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach: Vec<ReachEntry>,
    /// (v1.3) The syscall policy: enforced (its name and digest), waived
    /// by the approver, or not applicable (the lease asks for no isolation
    /// option). Absent in receipts written before v1.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall_policy: Option<SyscallPolicyReport>,
}

/// What the run did about the syscall policy (CONTRACT §7, v1.3).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SyscallPolicyReport {
    pub state: SyscallPolicyState,
    /// The policy's name (`docker-default-v1`) when enforced, else absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// SHA-256 (hex) of the installed classic-BPF program's bytes (each
    /// instruction as `struct sock_filter`, little-endian), when enforced:
    /// the same on every run of one architecture and release of the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `seccomp_bpf` when enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<String>,
    /// Plain words: what the child could not do, or why nothing applied.
    pub detail: String,
}

/// Whether the syscall policy held over the child.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SyscallPolicyState {
    /// Installed in the child right before exec.
    Enforced,
    /// The approver waived it (`--syscalls unconfined`).
    Waived,
    /// The lease asks for no isolation option: no policy applies.
    NotApplicable,
}

/// How the lease's `max_processes` was enforced on this run.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProcessLimitReport {
    /// `pids_cgroup_v1`, `pids_cgroup_v2` (a per-run group), `rlimit_nproc`
    /// (counts every process of the child's uid), `enclosing_pids_max` (the
    /// cgroup governed-exec runs in, e.g. `docker run --pids-limit`), or
    /// `waived` (the lease says `unlimited`).
    pub mechanism: String,
    /// The number the kernel enforces (`None` when waived); for
    /// `enclosing_pids_max` it bounds the enclosing group, governed-exec
    /// included, and is no larger than the lease's.
    pub enforced_limit: Option<u64>,
    /// Plain words: where the limit lives and why this mechanism was chosen.
    pub detail: String,
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
    /// True only when the child could not read the key by any route the
    /// runner knows of (see `why` for the mechanism).
    pub key_out_of_child_reach: bool,
    pub why: String,
}

/// A git checkout's HEAD as read from `.git` (no git subprocess).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GitCheckout {
    /// The commit HEAD names (hex).
    pub head: String,
    /// The branch ref HEAD points at, if not detached.
    pub head_ref: Option<String>,
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
    pub request: Option<ReceiptRequest>,
    pub workspace: Option<String>,
    /// Which binding the lease used (`machine` or `portable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
    /// A portable run's workspace: its git checkout's HEAD, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_git: Option<GitCheckout>,
    /// Where this run's use was counted (`state_dir:PATH`, `path:PATH`,
    /// `postgres://HOST:PORT/DB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<String>,
    pub command: Option<ExecutableIdentity>,
    pub cwd: Option<DirIdentity>,
    pub outcome: Outcome,
    pub cleanup: Cleanup,
    pub streams: Streams,
    pub products: Vec<Product>,
    /// The run's own span: from the spawn to the moment every process of
    /// it was confirmed gone (for a run refused before spawn, the refusal).
    pub started_at: String,
    pub ended_at: String,
    pub duration_ms: u64,
    /// When the runner itself finished: after the run's processes ended,
    /// the egress proxy was stopped and the receipt was signed. Absent in
    /// receipts written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    pub resources: Resources,
    pub limits: Option<Limits>,
    pub isolation: Option<IsolationReport>,
    /// How the child was created: `clone3`, `clone_pidfd` (clone3 missing or
    /// filtered, e.g. Docker's default seccomp profile) or `fork_pidfd_open`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_limit: Option<ProcessLimitReport>,
    pub signing: Option<SigningReport>,
    /// SHA-256 of the journal's `executing` record this receipt closes.
    pub journal_record_sha256: Option<String>,
    /// The caller's `run --nonce` (CONTRACT §11): `verify --nonce` binds
    /// the receipt to that one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    pub runner_version: String,
    /// (v1.3) Who asked for this run: `mcp --principal`, or `run
    /// --principal` (CONTRACT §12).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// (v1.2) The egress allowlist's proxy and every connection attempt
    /// through it (CONTRACT §8); absent when the lease has no `allow_net`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkReport>,
}

/// `predicate.network` (CONTRACT §8).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NetworkReport {
    /// How the child's network namespace was made (`network_namespace`),
    /// with the proxy in it.
    pub mechanism: String,
    /// The lease's `allow_net`, as signed.
    pub allowed: Vec<String>,
    /// The first connection attempts, in the order they were accepted.
    pub connections: Vec<Connection>,
    /// Attempts past that bound: counted, not listed.
    pub omitted: u64,
    /// Allowed entries no connection was allowed to.
    pub unused: Vec<String>,
}

/// One connection attempt through the proxy.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// As the child asked for it (lower-cased); empty when the request named none.
    pub host: String,
    pub port: u16,
    /// The IP address dialled; null when none was.
    pub address: Option<String>,
    pub decision: NetDecision,
    /// Null for an allowed connection that was relayed; otherwise one of
    /// `not_in_allowlist`, `bad_request`, `too_many_connections`,
    /// `resolution_failed`, `loopback_address`, `link_local_address`,
    /// `private_address`, `not_unicast_address`, `runner_address`,
    /// `connect_failed`.
    pub reason: Option<String>,
    /// Bytes sent to the host for the child: a CONNECT tunnel's payload,
    /// or a plain request's head (as forwarded) and body.
    pub bytes_sent: u64,
    /// From the host to the child.
    pub bytes_received: u64,
    pub started_at: String,
    pub duration_ms: u64,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NetDecision {
    Allowed,
    Denied,
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
pub fn parse_json<T: serde::de::DeserializeOwned>(
    what: &str,
    bytes: &[u8],
) -> Result<T, ParseError> {
    serde_json::from_slice(bytes).map_err(|source| ParseError {
        what: what.to_string(),
        source,
    })
}

/// A file that is not the closed JSON shape it should be; `what` names it.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ParseError {
    pub what: String,
    #[source]
    pub source: serde_json::Error,
}

/// For the callers that still report a plain message (the operator
/// commands, which print it and exit with the usage code).
impl From<ParseError> for String {
    fn from(e: ParseError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cleanup_states_read_as_their_wire_names() {
        for st in [
            CleanupState::Gone,
            CleanupState::NotConfirmed,
            CleanupState::NotStarted,
        ] {
            assert_eq!(serde_json::to_value(&st).unwrap(), st.to_string());
        }
    }
}
