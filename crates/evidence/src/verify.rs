//! `verify`: does this receipt prove the Goal done? Only reads.
//!
//! VERIFIED_DONE needs all of: the runner's signature over the DSSE PAE, a
//! closed-shape statement of this project's predicate type, the same Goal
//! id, revision and digest, an outcome the criteria allow (only `exited`
//! unless an `outcome` criterion says otherwise), and every criterion met —
//! `file` criteria both in the receipt's products and read back from disk
//! now. A human `resolve` classification is never evidence.

use std::path::Path;

use serde::Serialize;

use crate::products;
use crate::sign;
use governed_model::goal::{self, LoadedGoal, ResourceBounds};
use governed_model::record::Event;
use governed_model::{
    parse_json, units, CleanupState, Criterion, IsolationReport, NetDecision, OutcomeClass,
    ParseError, ReachEntry, ReceiptBody, Statement, DSSE_PAYLOAD_TYPE, PREDICATE_TYPE,
    RECEIPT_SCHEMA, STATEMENT_TYPE,
};

#[derive(Debug, Serialize)]
pub struct Verdict {
    pub verdict: &'static str,
    pub unmet: Vec<String>,
    pub receipt_id: Option<String>,
    pub attempt_id: Option<String>,
    pub outcome: Option<OutcomeClass>,
    /// What the receipt says of the runner key (`None`: it says nothing).
    pub key_out_of_child_reach: Option<bool>,
    /// `--allow-key-in-reach` was given.
    pub key_in_reach_allowed: bool,
}

impl Verdict {
    pub fn done(&self) -> bool {
        self.verdict == "VERIFIED_DONE"
    }
}

fn not_verified(reason: String) -> Verdict {
    Verdict {
        verdict: "NOT_VERIFIED",
        unmet: vec![reason],
        receipt_id: None,
        attempt_id: None,
        outcome: None,
        key_out_of_child_reach: None,
        key_in_reach_allowed: false,
    }
}

/// The fix for a runner key in the child's reach, named first in the
/// verdict line: the flags that put the key out of reach next time.
pub(crate) const KEY_FIX: &str = "re-approve the lease with --fs-write-scope (Landlock keeps the key from a child of the runner's uid) or, as root, --as-user UID (the child runs as another uid)";

/// The fix for a cleanup witness the child could evade.
pub(crate) const CLEANUP_FIX: &str = "re-approve the lease with --as-user UID or --fs-write-scope, so the child holds no capability to hide from cleanup";

/// Why `verify` could not judge at all (a usage error, exit 2): the goal,
/// the ledger flags, the trusted key, or a file that is no receipt.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Goal(#[from] governed_model::goal::GoalError),
    #[error(transparent)]
    Ledger(#[from] governed_ledger::LedgerSpecError),
    #[error(transparent)]
    Trust(#[from] sign::KeyError),
    #[error("receipt {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    NotAReceipt(ParseError),
}

/// Usage errors (unreadable goal, trust key or receipt file) are `Err`;
/// everything about the receipt's content is a verdict.
pub fn verify(
    goal_path: &Path,
    receipt_path: &Path,
    trust_path: &Path,
    state_dir: Option<&Path>,
    allow_key_in_reach: bool,
    ledger: Option<&str>,
    nonce: Option<&str>,
) -> Result<Verdict, VerifyError> {
    let goal = crate::goal_file::load(goal_path)?;
    let cross_check = match (state_dir, ledger) {
        (None, None) => None,
        (s, l) => Some(governed_ledger::from_flags(l, s)?),
    };
    let trust = sign::load_verifying_key(trust_path)?;
    let bytes =
        governed_sys::safe_io::read_bounded(receipt_path, crate::receipt::MAX_RECEIPT_BYTES)
            .map_err(|source| VerifyError::Read {
                path: receipt_path.display().to_string(),
                source,
            })?;
    // A file that is not a receipt at all (not JSON, not an envelope of the
    // closed shape, or a statement the trusted key signed that this version
    // cannot read) is bad input, exit 2, naming what is wrong; a receipt
    // that is one but does not hold (a signature that fails, another goal,
    // an outcome the criteria refuse) is a NOT_VERIFIED verdict.
    let shown = receipt_path.display();
    let labels = (
        format!("receipt {shown}"),
        format!("receipt {shown}: statement"),
    );
    let mut v = match authenticate(&bytes, &trust, (&labels.0, &labels.1)) {
        Ok((stmt, payload)) => {
            let mut v = judge_authentic(&goal, &stmt, &payload, cross_check.as_deref());
            if let Some(unmet) = nonce_unmet(nonce, stmt.predicate.nonce.as_deref()) {
                v.unmet.push(unmet);
                v.verdict = "NOT_VERIFIED";
            }
            v
        }
        Err(Unauthentic::NotAnEnvelope(e) | Unauthentic::UnreadableStatement(e)) => {
            return Err(VerifyError::NotAReceipt(e))
        }
        Err(Unauthentic::Fails(why)) => not_verified(why),
    };
    if allow_key_in_reach {
        waive_key_in_reach(&mut v);
    }
    Ok(v)
}

/// `verify --allow-key-in-reach`: the key-in-reach finding alone is waived;
/// every other unmet criterion stands, and only a receipt that was judged
/// (it has an id: it authenticated) can become VERIFIED_DONE by it.
fn waive_key_in_reach(v: &mut Verdict) {
    v.key_in_reach_allowed = true;
    v.unmet
        .retain(|u| !u.starts_with("signing_key_in_child_reach:"));
    if v.unmet.is_empty() && v.receipt_id.is_some() {
        v.verdict = "VERIFIED_DONE";
    }
}

/// `verify --nonce`: the receipt must carry exactly the caller's nonce, so a
/// stale genuine receipt left at the receipt path cannot stand in for this
/// run's (CONTRACT §11).
fn nonce_unmet(wanted: Option<&str>, carried: Option<&str>) -> Option<String> {
    let wanted = wanted?;
    match carried {
        Some(c) if c == wanted => None,
        Some(c) => Some(format!(
            "nonce_mismatch: the receipt was made for nonce {c:?}, not {wanted:?} (a receipt of another run)"
        )),
        None => Some(format!(
            "nonce_mismatch: the receipt carries no nonce, {wanted:?} was asked for (run it with --nonce)"
        )),
    }
}

/// `verify` without files: goal bytes, receipt bytes, key (what an
/// embedder holding them in memory, or a fuzz target, calls).
/// An unreadable goal is a `NOT_VERIFIED` here.
pub fn judge_bytes(goal: &[u8], receipt: &[u8], trust: &ed25519_dalek::VerifyingKey) -> Verdict {
    judge_bytes_with(goal, receipt, trust, None)
}

/// [`judge_bytes`] with a ledger to cross-check the receipt against, as
/// `verify --state-dir|--ledger` does.
pub fn judge_bytes_with(
    goal: &[u8],
    receipt: &[u8],
    trust: &ed25519_dalek::VerifyingKey,
    ledger: Option<&dyn governed_ledger::Ledger>,
) -> Verdict {
    match goal::from_bytes("goal", goal) {
        Ok(g) => judge(&g, receipt, trust, ledger),
        Err(e) => not_verified(format!("goal: {e}")),
    }
}

/// Why receipt bytes did not authenticate.
enum Unauthentic {
    /// Not a DSSE envelope of the closed shape at all.
    NotAnEnvelope(ParseError),
    /// Signed by the trusted key, but not a statement this version reads.
    UnreadableStatement(ParseError),
    /// An envelope that does not hold: another payload type, or no valid
    /// signature by the trusted key (the whole `authentic:` line).
    Fails(String),
}

/// Parse the envelope, check its signature once, and read the statement it
/// signs. `labels` name the envelope and the statement in parse errors.
fn authenticate(
    bytes: &[u8],
    trust: &ed25519_dalek::VerifyingKey,
    labels: (&str, &str),
) -> Result<(Statement, Vec<u8>), Unauthentic> {
    let env: governed_model::Envelope =
        parse_json(labels.0, bytes).map_err(Unauthentic::NotAnEnvelope)?;
    let signed = match sign::verify_envelope(&env, trust) {
        Ok(payload) => {
            let stmt: Statement =
                parse_json(labels.1, &payload).map_err(Unauthentic::UnreadableStatement)?;
            Ok((stmt, payload))
        }
        Err(e) => Err(Unauthentic::Fails(format!(
            "authentic: {e}; {}",
            signer_hint(&env, trust)
        ))),
    };
    if env.payload_type != DSSE_PAYLOAD_TYPE {
        return Err(Unauthentic::Fails(format!(
            "authentic: payloadType is {:?}, expected {DSSE_PAYLOAD_TYPE:?}",
            env.payload_type
        )));
    }
    signed
}

/// Which key signed an envelope (its key ids) and which one `--trust`
/// gave, and where the runner key usually is: `verify --trust` takes the
/// runner's public key, not the approver's that `run --trust` takes.
fn signer_hint(env: &governed_model::Envelope, trust: &ed25519_dalek::VerifyingKey) -> String {
    let given = sign::keyid(trust);
    let signers: Vec<&str> = env
        .signatures
        .iter()
        .map(|s| s.keyid.as_str())
        .filter(|k| !k.is_empty())
        .collect();
    let signed = if signers.is_empty() {
        "the envelope names no key id".to_string()
    } else {
        format!("signed by key id {}", signers.join(", "))
    };
    format!(
        "{signed}; --trust gave key id {given}; verify --trust takes the RUNNER's public key: STATE_DIR/runner.pub of the machine that ran (by default {}), or the .pub beside `run --key`, not the approver's key that `run --trust` takes",
        governed_ledger::journal::default_state_dir()
            .join("runner.pub")
            .display()
    )
}

fn judge(
    goal: &LoadedGoal,
    bytes: &[u8],
    trust: &ed25519_dalek::VerifyingKey,
    ledger: Option<&dyn governed_ledger::Ledger>,
) -> Verdict {
    match authenticate(bytes, trust, ("receipt", "receipt statement")) {
        Ok((stmt, payload)) => judge_authentic(goal, &stmt, &payload, ledger),
        Err(Unauthentic::NotAnEnvelope(e)) => not_verified(format!(
            "authentic: not a DSSE envelope of the expected shape: {e}"
        )),
        Err(Unauthentic::UnreadableStatement(e)) => not_verified(format!("authentic: {e}")),
        Err(Unauthentic::Fails(why)) => not_verified(why),
    }
}

/// The verdict on a receipt whose signature and shape already held: the
/// checks in the order their lines appear in `unmet`.
fn judge_authentic(
    goal: &LoadedGoal,
    stmt: &Statement,
    payload: &[u8],
    ledger: Option<&dyn governed_ledger::Ledger>,
) -> Verdict {
    let p = &stmt.predicate;
    let mut unmet = Vec::new();
    unmet.extend(check_signing(p));
    unmet.extend(check_format(stmt));
    unmet.extend(check_goal(goal, p));
    let class = p.outcome.class;
    unmet.extend(check_outcome(goal, class));
    unmet.extend(check_subjects(stmt));
    unmet.extend(check_criteria(goal, p));
    if let Some(l) = ledger {
        unmet.extend(check_journal(l, stmt, payload));
    }
    Verdict {
        verdict: if unmet.is_empty() {
            "VERIFIED_DONE"
        } else {
            "NOT_VERIFIED"
        },
        unmet,
        receipt_id: Some(p.receipt_id.clone()),
        attempt_id: p.attempt_id.clone(),
        outcome: Some(class),
        key_out_of_child_reach: p.signing.as_ref().map(|s| s.key_out_of_child_reach),
        key_in_reach_allowed: false,
    }
}

/// A key the child could read lets the child forge this very receipt:
/// it proves nothing against the child it describes (CONTRACT §2).
fn check_signing(p: &ReceiptBody) -> Option<String> {
    match &p.signing {
        Some(s) if !s.key_out_of_child_reach => Some(format!(
            "signing_key_in_child_reach: {}; this run's runner key was within the child's reach ({}); --allow-key-in-reach accepts the receipt anyway, proving nothing against the child",
            key_fix(p, &s.why),
            s.why
        )),
        None if p.attempt_id.is_some() => Some(format!(
            "signing_key_in_child_reach: {KEY_FIX}; the receipt does not say whether the runner key was out of the child's reach; --allow-key-in-reach accepts it anyway"
        )),
        _ => None,
    }
}

/// The channels that put the runner key in the child's reach whatever
/// the lease's isolation did for the key file itself.
const KEY_CHANNELS: &[&str] = &["daemon_socket", "ledger_dir", "ledger_credentials"];

/// Whether the lease asked for any isolation option, as the receipt shows it.
fn isolated(iso: &IsolationReport) -> bool {
    iso.landlock_abi.is_some()
        || iso.network_namespace
        || iso.pid_namespace
        || iso.mount_namespace
        || iso.network_mechanism.is_some()
        || iso.pid_namespace_mechanism.is_some()
        || (iso.capabilities_dropped && iso.uid != 0)
}

/// The first fix for a key in reach, from what the receipt says held and
/// what did not: an open channel first (no flag on the key file closes
/// it), then the key file's own cause, and the generic flags only when the
/// lease had no isolation option at all.
fn key_fix(p: &ReceiptBody, why: &str) -> String {
    let iso = p.isolation.as_ref();
    if let Some((iso, r)) = iso.and_then(|i| open_channel(i, KEY_CHANNELS).map(|r| (i, r))) {
        if !unisolated_root(iso) {
            return channel_fix(iso, r);
        }
    }
    let Some(iso) = iso.filter(|i| isolated(i)) else {
        return KEY_FIX.to_string();
    };
    if why.contains("hard link") {
        "remove the runner key's other hard links (only the paths of one mount can be covered), then run again".to_string()
    } else if why.contains("readable by group or others") {
        "chmod 600 the runner key (its mode lets the child read it), then run again".to_string()
    } else if iso.uid == 0 && why.contains("CAP_SYS_ADMIN") {
        "re-approve with --as-user UID (a non-root uid): governed-exec has no CAP_SYS_ADMIN here to give a uid-0 child a mount namespace that covers the key".to_string()
    } else if iso.uid == 0 {
        "re-approve with --as-user UID (a non-root uid): the uid-0 child could not be kept from the key on this machine".to_string()
    } else {
        format!("give the runner key to another uid than the child's (uid {}), e.g. run governed-exec as root with --as-user: the lease's isolation could not deny this child the key", iso.uid)
    }
}

/// A uid-0 child of a lease without isolation: a root runner, where any
/// isolation option also covers the daemon sockets and ledger files in the
/// child's mount namespace, so the flags are the fix that changes the
/// outcome.
fn unisolated_root(iso: &IsolationReport) -> bool {
    iso.uid == 0 && !isolated(iso)
}

/// The first reachable entry of `channels` in the receipt's reach.
fn open_channel<'a>(iso: &'a IsolationReport, channels: &[&str]) -> Option<&'a ReachEntry> {
    iso.reach
        .iter()
        .find(|r| r.reachable && channels.contains(&r.channel.as_str()))
}

/// What would close one reachable channel on this machine, naming it.
fn channel_fix(iso: &IsolationReport, r: &ReachEntry) -> String {
    let path = r.path.as_deref().unwrap_or("");
    // The mode and owner the reach entry read, e.g. `mode 660, owner 0:105`.
    let modes = r
        .how
        .rfind('(')
        .and_then(|i| r.how[i + 1..].split(')').next())
        .filter(|m| m.starts_with("mode"))
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    let uid = iso.uid;
    match r.channel.as_str() {
        "daemon_socket" if iso.mount_namespace => format!(
            "close daemon socket {path}{modes}: the child's mount namespace covered it with nothing that holds: re-approve with --pid-namespace (a fresh /proc makes the cover hold)"
        ),
        "daemon_socket" if uid == 0 => format!(
            "close daemon socket {path}{modes}: re-approve with --as-user UID (a uid without groups or capabilities, which the socket's modes deny): governed-exec could not cover it here"
        ),
        "daemon_socket" => format!(
            "close daemon socket {path}{modes} to the child's uid {uid}: no lease flag of a non-root runner covers a socket: take uid {uid} out of the socket's group (or change its modes), or run governed-exec as root, where any isolation option covers it in the child's mount namespace"
        ),
        "ledger_dir" if !isolated(iso) => format!(
            "keep the child from ledger directory {path}{modes}: re-approve with --fs-write-scope (the Landlock guard denies it)"
        ),
        "ledger_dir" => format!(
            "make ledger directory {path}{modes} unwritable to the child's uid {uid} (chown or chmod it)"
        ),
        "ledger_credentials" if !isolated(iso) => format!(
            "keep the child from ledger credentials {path}{modes}: re-approve with --fs-write-scope (the Landlock guard denies it)"
        ),
        "ledger_credentials" => format!(
            "make ledger credentials {path}{modes} unreadable to the child's uid {uid} (chmod 600, owned by another uid)"
        ),
        other => format!(
            "close {} {path}{modes} to the child's uid {uid}",
            other.replace('_', " ")
        ),
    }
}

/// The first fix for an evadable cleanup witness: a reachable daemon
/// socket (which starts processes outside every witness) before the flags.
fn cleanup_fix(p: &ReceiptBody) -> String {
    match p
        .isolation
        .as_ref()
        .and_then(|i| open_channel(i, &["daemon_socket"]).map(|r| (i, r)))
    {
        Some((iso, r)) if !unisolated_root(iso) => channel_fix(iso, r),
        _ => CLEANUP_FIX.to_string(),
    }
}

/// The statement and predicate types and the schema are this version's.
fn check_format(stmt: &Statement) -> Option<String> {
    let p = &stmt.predicate;
    if stmt.type_ != STATEMENT_TYPE
        || stmt.predicate_type != PREDICATE_TYPE
        || p.schema != RECEIPT_SCHEMA
    {
        return Some(format!(
            "format: statement type {:?}, predicate type {:?}, schema {:?} are not this version's",
            stmt.type_, stmt.predicate_type, p.schema
        ));
    }
    None
}

/// The receipt names this goal: its id, revision and digest.
fn check_goal(goal: &LoadedGoal, p: &ReceiptBody) -> Vec<String> {
    let want = goal.reference();
    let mut unmet = Vec::new();
    match &p.goal {
        None => unmet.push("goal: the receipt names no goal".into()),
        Some(g) => {
            if g.id != want.id {
                unmet.push(format!(
                    "goal: receipt is for goal {:?}, not {:?}",
                    g.id, want.id
                ));
            }
            if g.revision != want.revision {
                unmet.push(format!(
                    "goal: receipt is for revision {}, not {}",
                    g.revision, want.revision
                ));
            }
            if g.sha256 != want.sha256 {
                unmet.push(format!(
                    "goal: receipt's goal digest {} differs from this goal file's {}",
                    g.sha256, want.sha256
                ));
            }
        }
    }
    unmet
}

/// The outcome class is one every `outcome` criterion allows (`exited`
/// when the goal has none).
fn check_outcome(goal: &LoadedGoal, class: OutcomeClass) -> Option<String> {
    let allowed: Vec<Vec<OutcomeClass>> = goal
        .goal
        .criteria
        .iter()
        .filter_map(|c| match c {
            Criterion::Outcome { allowed } => Some(allowed.clone()),
            _ => None,
        })
        .collect();
    let outcome_ok = if allowed.is_empty() {
        class == OutcomeClass::Exited
    } else {
        allowed.iter().all(|set| set.contains(&class))
    };
    if !outcome_ok {
        return Some(format!(
            "outcome: {class} is not an outcome this goal accepts"
        ));
    }
    None
}

/// The statement's subjects must agree with the predicate they summarise.
fn check_subjects(stmt: &Statement) -> Vec<String> {
    let mut unmet = Vec::new();
    for prod in &stmt.predicate.products {
        if let Some(h) = &prod.sha256 {
            let listed = stmt
                .subject
                .iter()
                .any(|s| s.name == prod.path && s.digest.get("sha256") == Some(h));
            if !listed {
                unmet.push(format!(
                    "format: product {:?} is not among the statement's subjects",
                    prod.path
                ));
            }
        }
    }
    unmet
}

/// The goal's criteria, each in turn (`outcome` is `check_outcome`'s).
fn check_criteria(goal: &LoadedGoal, p: &ReceiptBody) -> Vec<String> {
    let mut unmet = Vec::new();
    let workspace = p.workspace.as_deref().map(Path::new);
    for c in &goal.goal.criteria {
        match c {
            Criterion::ExitCode { equals } => {
                if p.outcome.exit_code != Some(*equals) {
                    unmet.push(format!(
                        "exit_code: expected {equals}, receipt says {}",
                        p.outcome.exit_code.map_or("none".into(), |c| c.to_string())
                    ));
                }
            }
            Criterion::NoLeftoverProcesses {} => unmet.extend(check_leftovers(p)),
            Criterion::Outcome { .. } => {}
            Criterion::Resources {
                peak_memory_at_most,
                cpu_time_at_most,
                wall_time_at_most,
            } => unmet.extend(check_resources(
                p,
                peak_memory_at_most.as_deref(),
                cpu_time_at_most.as_deref(),
                wall_time_at_most.as_deref(),
            )),
            Criterion::Network { max_denied, only } => {
                unmet.extend(check_network(p, *max_denied, only.as_deref()));
            }
            Criterion::File {
                path,
                exists,
                contains,
                sha256,
            } => {
                if let Some(why) = check_file(
                    p,
                    workspace,
                    path,
                    *exists,
                    contains.as_deref(),
                    sha256.as_deref(),
                ) {
                    unmet.push(format!("file {path:?}: {why}"));
                }
            }
        }
    }
    unmet
}

/// A `no_leftover_processes` criterion: one line per cause: processes that
/// outlived the main process, a cleanup not observed complete, an evadable
/// witness.
fn check_leftovers(p: &ReceiptBody) -> Vec<String> {
    let mut unmet = Vec::new();
    let mut failed = false;
    if p.cleanup.leftover_processes_killed > 0 {
        failed = true;
        unmet.push(format!(
            "no_leftover_processes: {} process(es) outlived the main process (governed-exec killed them)",
            p.cleanup.leftover_processes_killed
        ));
    }
    if p.cleanup.state != CleanupState::Gone {
        failed = true;
        unmet.push(format!(
            "no_leftover_processes: cleanup is {}, not gone: not every process of the run was observed gone",
            p.cleanup.state
        ));
    }
    if !failed && p.cleanup.evadable {
        unmet.push(format!(
            "no_leftover_processes: {}; this run's cleanup witness ({}) was evadable by the child, so `gone` is not proof: {}",
            cleanup_fix(p),
            if p.cleanup.witness.is_empty() {
                "unrecorded".to_string()
            } else {
                p.cleanup.witness.join("+")
            },
            if p.cleanup.evadable_why.is_empty() {
                "the receipt does not say what the child could do"
            } else {
                p.cleanup.evadable_why.as_str()
            }
        ));
    }
    unmet
}

/// The receipt's use is in the given ledger's journal as the receipt says.
fn check_journal(
    l: &dyn governed_ledger::Ledger,
    stmt: &Statement,
    payload: &[u8],
) -> Option<String> {
    let why = cross_check_journal(l, stmt, payload)?;
    // The receipt says where its use was counted; when that is not
    // the ledger given, say so (a lease may name its own ledger).
    let hint = match &stmt.predicate.ledger {
        Some(counted) if *counted != l.name() => format!(
            " (the receipt says its use was counted in {counted}: cross-check with --ledger naming that one)"
        ),
        _ => String::new(),
    };
    Some(format!("journal: {why}{hint}"))
}

/// A `resources` criterion against the signed receipt: one line per bound
/// not met, naming the bound as written and the receipt's figure. A figure
/// the receipt does not have (`null`) does not meet a bound.
fn check_resources(
    p: &ReceiptBody,
    memory: Option<&str>,
    cpu: Option<&str>,
    wall: Option<&str>,
) -> Vec<String> {
    let bounds = match ResourceBounds::parse(memory, cpu, wall) {
        Ok(b) => b,
        Err(e) => return vec![format!("resources: {e}")],
    };
    let r = &p.resources;
    let mut out = Vec::new();
    // A figure read from the run's cgroups proves an upper bound only if no
    // process of the run could have left them (CONTRACT §7): one that left
    // is no longer counted.
    let unproven = (p.cleanup.evadable && r.mechanism.starts_with("cgroup")).then(|| {
        format!(
            "is not proof: a process of the run could have left the run's cgroups ({})",
            if p.cleanup.evadable_why.is_empty() {
                "cleanup.evadable"
            } else {
                p.cleanup.evadable_why.as_str()
            }
        )
    });
    if let (Some(max), Some(text)) = (bounds.peak_memory_bytes, memory) {
        match r.peak_memory_bytes {
            Some(used) if used <= max => {
                if let Some(why) = &unproven {
                    out.push(format!(
                        "resources: peak_memory_at_most {text}: the run's peak memory of {used} bytes {why}"
                    ));
                }
            }
            Some(used) => out.push(format!(
                "resources: peak_memory_at_most {text}: the run's peak memory was {} ({used} bytes, {})",
                units::format_size_approx(used),
                r.mechanism
            )),
            None => out.push(format!(
                "resources: peak_memory_at_most {text}: the receipt has no peak memory ({})",
                r.peak_memory_bytes_why.as_deref().unwrap_or("not measured")
            )),
        }
    }
    if let (Some(max), Some(text)) = (bounds.cpu_time_ms, cpu) {
        let used = r.cpu_time_ms();
        if let (true, Some(why)) = (used <= max, &unproven) {
            out.push(format!(
                "resources: cpu_time_at_most {text}: the run's CPU time of {used} ms {why}"
            ));
        }
        if used > max {
            out.push(format!(
                "resources: cpu_time_at_most {text}: the run used {} of CPU ({} ms user + {} ms system, {})",
                units::format_ms(used),
                r.cpu_user_ms,
                r.cpu_system_ms,
                r.mechanism
            ));
        }
    }
    if let (Some(max), Some(text)) = (bounds.wall_time_ms, wall) {
        if p.duration_ms > max {
            out.push(format!(
                "resources: wall_time_at_most {text}: the run took {} ({} ms)",
                units::format_ms(p.duration_ms),
                p.duration_ms
            ));
        }
    }
    out
}

fn check_file(
    p: &governed_model::ReceiptBody,
    workspace: Option<&Path>,
    path: &str,
    exists: Option<bool>,
    contains: Option<&str>,
    sha256: Option<&str>,
) -> Option<String> {
    let Some(prod) = p.products.iter().find(|x| x.path == path) else {
        return Some("not among the receipt's products".into());
    };
    let Some(ws) = workspace else {
        return Some("the receipt names no workspace to read back from".into());
    };
    let must_exist = exists != Some(false);
    // One streaming pass hashes the file and searches it: memory stays
    // bounded whatever its size, and the search covers exactly the bytes
    // whose digest is compared with the receipt.
    let disk = products::read_workspace_file(ws, path, contains.map(str::as_bytes));
    if !must_exist {
        // "Must not exist" means nothing at all at that path: a directory,
        // a FIFO or a symlink (dangling or leading out of the workspace)
        // is not a regular file to hash, yet it exists.
        let something = std::fs::symlink_metadata(ws.join(path)).is_ok();
        return match (prod.exists, &disk) {
            (false, None) if something => Some(
                "must not exist, but something exists there on disk now (not a regular file inside the workspace)"
                    .into(),
            ),
            (false, None) => None,
            (true, _) => Some("must not exist, but the receipt recorded it".into()),
            (false, Some(_)) => Some("must not exist, but it exists on disk now".into()),
        };
    }
    if !prod.exists {
        return Some("missing in the receipt's products".into());
    }
    let Some(disk) = disk else {
        return Some("missing on disk now (read-back)".into());
    };
    if prod.sha256.as_deref() != Some(disk.sha256.as_str()) {
        return Some(
            "changed on disk since the run (read-back digest differs from the receipt)".into(),
        );
    }
    if let Some(want) = sha256 {
        if !want.eq_ignore_ascii_case(&disk.sha256) {
            return Some(format!("sha256 is {}, expected {want}", disk.sha256));
        }
    }
    if let Some(needle) = contains {
        if !disk.contains {
            return Some(format!("does not contain {needle:?}"));
        }
    }
    None
}

fn cross_check_journal(
    l: &dyn governed_ledger::Ledger,
    stmt: &Statement,
    payload: &[u8],
) -> Option<String> {
    let p = &stmt.predicate;
    // Only the receipt's Goal's records: the cost of a verify does not
    // grow with the other Goals of the ledger.
    let Some(goal) = &p.goal else {
        return Some("the receipt names no goal".into());
    };
    let entries = match l.chain_of(&goal.id) {
        Ok(e) => e,
        Err(e) => return Some(e.to_string()),
    };
    let Some(attempt) = &p.attempt_id else {
        return Some("the receipt names no attempt (nothing was executed)".into());
    };
    let executing = entries.iter().find(
        |e| matches!(&e.record.event, Event::Executing { attempt_id, .. } if attempt_id == attempt),
    );
    let Some(executing) = executing else {
        return Some(format!("attempt {attempt} is not in the journal"));
    };
    if p.journal_record_sha256.as_deref() != Some(executing.digest.as_str()) {
        return Some(format!(
            "the receipt does not close attempt {attempt}'s executing record"
        ));
    }
    let digest = sign::sha256_hex(payload);
    let result = entries.iter().find_map(|e| match &e.record.event {
        Event::Result {
            attempt_id,
            receipt_sha256,
            ..
        } if attempt_id == attempt => Some(receipt_sha256.clone()),
        _ => None,
    });
    match result {
        Some(d) if d == digest => None,
        Some(_) => Some(format!(
            "the journal's result for attempt {attempt} names a different receipt"
        )),
        None => Some(format!("attempt {attempt} has no result record")),
    }
}

/// `host:port` as an allowlist entry spells it: lower-cased, port 443
/// when none is given (CONTRACT §8).
fn entry_key(e: &str) -> String {
    let e = e.to_ascii_lowercase();
    let has_port = match e.rfind(']') {
        Some(end) => e[end..].contains(':'),
        None => e.matches(':').count() == 1,
    };
    if has_port {
        e
    } else if e.contains(':') && !e.starts_with('[') {
        format!("[{e}]:443")
    } else {
        format!("{e}:443")
    }
}

/// The `network` criterion (CONTRACT §8): at most `max_denied` attempts
/// denied, every allowed one to an entry of `only`. Attempts the receipt
/// only counts (`omitted`) are assumed to break both: unseen is unproven.
fn check_network(p: &ReceiptBody, max_denied: Option<u64>, only: Option<&[String]>) -> Vec<String> {
    let mut unmet = Vec::new();
    let Some(net) = &p.network else {
        let closed = p
            .isolation
            .as_ref()
            .is_some_and(|i| i.network_mechanism.is_some());
        if !closed {
            unmet.push("network: the run had the uid's whole network (its lease has neither --allow-net nor --no-network), so its connections were not observed".to_string());
        }
        // --no-network: nothing could leave, nothing was denied by a proxy.
        return unmet;
    };
    let name = |c: &governed_model::Connection| format!("{}:{}", c.host, c.port);
    if let Some(max) = max_denied {
        let denied: Vec<&governed_model::Connection> = net
            .connections
            .iter()
            .filter(|c| c.decision == NetDecision::Denied)
            .collect();
        if denied.len() as u64 > max {
            let first = denied
                .get(max as usize)
                .map(|c| format!("{} ({})", name(c), c.reason.as_deref().unwrap_or("denied")))
                .unwrap_or_default();
            unmet.push(format!(
                "network: {} connection(s) denied, at most {max} allowed; the first past the bound: {first}",
                denied.len()
            ));
        } else if net.omitted > 0 && denied.len() as u64 + net.omitted > max {
            unmet.push(format!(
                "network: {} connection attempt(s) are only counted in the receipt (omitted), so at most {max} denied cannot be shown",
                net.omitted
            ));
        }
    }
    if let Some(only) = only {
        let keys: Vec<String> = only.iter().map(|e| entry_key(e)).collect();
        for c in net
            .connections
            .iter()
            .filter(|c| c.decision == NetDecision::Allowed)
        {
            if !keys.contains(&entry_key(&name(c))) {
                unmet.push(format!(
                    "network: connection to {} ({}) is not in the goal's `only` list",
                    name(c),
                    c.address.as_deref().unwrap_or("not dialled")
                ));
            }
        }
        if net.omitted > 0 {
            unmet.push(format!(
                "network: {} connection attempt(s) are only counted in the receipt (omitted), so `only` cannot be shown for them",
                net.omitted
            ));
        }
    }
    unmet
}

#[cfg(test)]
mod tests {
    use super::*;
    use governed_ledger::journal::Journal;
    use governed_testkit::fuzzing::{FUZZ_GOAL, FUZZ_KEY};

    /// `--nonce`: exactly the carried nonce meets it; another, or none, is
    /// `nonce_mismatch` saying which; without `--nonce` nothing is asked.
    #[test]
    fn a_nonce_is_met_only_by_the_same_nonce() {
        assert_eq!(nonce_unmet(None, Some("n1")), None);
        assert_eq!(nonce_unmet(None, None), None);
        assert_eq!(nonce_unmet(Some("n1"), Some("n1")), None);
        let other = nonce_unmet(Some("n1"), Some("n0")).expect("another nonce");
        assert!(
            other.starts_with("nonce_mismatch:") && other.contains("\"n0\""),
            "{other}"
        );
        let none = nonce_unmet(Some("n1"), None).expect("no nonce");
        assert!(
            none.starts_with("nonce_mismatch:") && none.contains("--nonce"),
            "{none}"
        );
    }

    fn goal_with(criteria: &str) -> LoadedGoal {
        let text = format!(
            r#"{{"schema":"governed-exec/goal/v1","id":"g","revision":1,"criteria":[{criteria}]}}"#
        );
        governed_model::goal::from_bytes("goal", text.as_bytes()).expect("goal")
    }

    /// Without an `outcome` criterion only `exited` is accepted; with one,
    /// the class must be in its set; with several, in every one of them.
    #[test]
    fn the_outcome_must_be_one_every_outcome_criterion_accepts() {
        use OutcomeClass::*;
        let plain = goal_with(r#"{"kind":"exit_code","equals":0}"#);
        assert_eq!(check_outcome(&plain, Exited), None);
        let unmet = check_outcome(&plain, TimedOutReaped).expect("timed out");
        assert_eq!(
            unmet,
            "outcome: timed_out_reaped is not an outcome this goal accepts"
        );
        let one = goal_with(r#"{"kind":"outcome","in":["exited","timed_out_reaped"]}"#);
        assert_eq!(check_outcome(&one, TimedOutReaped), None);
        assert_eq!(check_outcome(&one, Exited), None);
        assert!(check_outcome(&one, Signaled).is_some());
        let two = goal_with(
            r#"{"kind":"outcome","in":["exited","timed_out_reaped"]},{"kind":"outcome","in":["timed_out_reaped"]}"#,
        );
        assert_eq!(check_outcome(&two, TimedOutReaped), None);
        assert!(check_outcome(&two, Exited).is_some(), "in one set only");
    }

    /// A signature that fails names the key id that signed (or that none
    /// is named) beside the one `--trust` gave, and which key `verify
    /// --trust` takes.
    #[test]
    fn a_failed_signature_names_both_key_ids() {
        let trust = SigningKey::from_bytes(&[9u8; 32]).verifying_key();
        let env = |keyids: &[&str]| Envelope {
            payload: String::new(),
            payload_type: DSSE_PAYLOAD_TYPE.into(),
            signatures: keyids
                .iter()
                .map(|k| governed_model::DsseSignature {
                    keyid: k.to_string(),
                    sig: String::new(),
                })
                .collect(),
        };
        let given = format!("--trust gave key id {}", sign::keyid(&trust));
        let hint = signer_hint(&env(&["abc", "", "def"]), &trust);
        assert!(hint.starts_with("signed by key id abc, def; "), "{hint}");
        assert!(hint.contains(&given), "{hint}");
        assert!(hint.contains("RUNNER's public key"), "{hint}");
        let hint = signer_hint(&env(&[""]), &trust);
        assert!(hint.starts_with("the envelope names no key id; "), "{hint}");
        assert!(hint.contains(&given), "{hint}");
    }

    /// An `only` entry without a port means 443; an IPv6 literal is
    /// bracketed; case does not matter; a port given is kept.
    #[test]
    fn network_entries_compare_by_host_and_port() {
        assert_eq!(entry_key("Example.COM"), "example.com:443");
        assert_eq!(entry_key("example.com:8080"), "example.com:8080");
        assert_eq!(entry_key("2001:db8::1"), "[2001:db8::1]:443");
        assert_eq!(entry_key("[2001:db8::1]"), "[2001:db8::1]:443");
        assert_eq!(entry_key("[2001:db8::1]:80"), "[2001:db8::1]:80");
    }

    fn connection(host: &str, port: u16, allowed: bool) -> governed_model::Connection {
        governed_model::Connection {
            host: host.into(),
            port,
            address: allowed.then(|| "192.0.2.1".to_string()),
            decision: if allowed {
                NetDecision::Allowed
            } else {
                NetDecision::Denied
            },
            reason: (!allowed).then(|| "not_in_allowlist".to_string()),
            bytes_sent: 0,
            bytes_received: 0,
            started_at: String::new(),
            duration_ms: 0,
        }
    }

    fn with_network(connections: Vec<governed_model::Connection>, omitted: u64) -> ReceiptBody {
        let mut p = template().predicate;
        p.network = Some(governed_model::NetworkReport {
            mechanism: "network_namespace".into(),
            allowed: vec!["example.com".into()],
            connections,
            omitted,
            unused: vec![],
        });
        p
    }

    /// `max_denied`: more denied than the bound is unmet, naming the first
    /// past it; exactly the bound is met; attempts only counted (omitted)
    /// that could push past the bound are unmet, since unseen is unproven.
    #[test]
    fn the_network_criterion_bounds_denied_attempts() {
        let two_denied = with_network(
            vec![
                connection("a.test", 443, false),
                connection("example.com", 443, true),
                connection("b.test", 443, false),
            ],
            0,
        );
        assert!(check_network(&two_denied, Some(2), None).is_empty());
        let unmet = check_network(&two_denied, Some(1), None);
        assert_eq!(unmet.len(), 1, "{unmet:?}");
        assert!(
            unmet[0].starts_with("network: 2 connection(s) denied, at most 1 allowed")
                && unmet[0].contains("b.test:443 (not_in_allowlist)"),
            "{unmet:?}"
        );
        let omitted = with_network(vec![connection("a.test", 443, false)], 3);
        assert!(check_network(&omitted, Some(5), None).is_empty(), "4 <= 5");
        assert!(
            check_network(&omitted, Some(4), None).is_empty(),
            "1 + 3 <= 4"
        );
        assert_eq!(check_network(&omitted, Some(3), None).len(), 1, "1 + 3 > 3");
        let unmet = check_network(&omitted, Some(2), None);
        assert!(
            unmet.len() == 1 && unmet[0].contains("3 connection attempt(s) are only counted"),
            "{unmet:?}"
        );
        let none_omitted = with_network(vec![connection("a.test", 443, false)], 0);
        assert!(check_network(&none_omitted, Some(1), None).is_empty());
    }

    /// `only`: every allowed connection must be to a listed entry (443 when
    /// the entry names no port); a denied one is not held against it; an
    /// omitted attempt cannot be shown to be listed. A run with the uid's
    /// whole network observed nothing and meets no network criterion; a
    /// `--no-network` run meets it.
    #[test]
    fn the_network_criterion_holds_allowed_connections_to_the_list() {
        let only = ["Example.com".to_string(), "api.test:8443".to_string()];
        let ok = with_network(
            vec![
                connection("example.com", 443, true),
                connection("api.test", 8443, true),
                connection("evil.test", 443, false),
            ],
            0,
        );
        assert!(check_network(&ok, None, Some(&only)).is_empty());
        let off_list = with_network(vec![connection("api.test", 443, true)], 0);
        let unmet = check_network(&off_list, None, Some(&only));
        assert!(
            unmet.len() == 1 && unmet[0].contains("connection to api.test:443 (192.0.2.1)"),
            "{unmet:?}"
        );
        let omitted = with_network(vec![], 1);
        assert_eq!(check_network(&omitted, None, Some(&only)).len(), 1);
        let mut open = template().predicate;
        open.network = None;
        open.isolation = None;
        let unmet = check_network(&open, Some(0), None);
        assert!(
            unmet.len() == 1 && unmet[0].contains("were not observed"),
            "{unmet:?}"
        );
        let mut closed = template().predicate;
        closed.network = None;
        closed
            .isolation
            .as_mut()
            .expect("the seed receipt has an isolation report")
            .network_mechanism = Some("network_namespace".into());
        assert!(check_network(&closed, Some(0), Some(&only)).is_empty());
    }

    /// `--allow-key-in-reach` waives that one finding: a receipt whose only
    /// finding it was becomes VERIFIED_DONE; any other finding stands; a
    /// file that never authenticated (no receipt id) stays NOT_VERIFIED.
    #[test]
    fn allowing_the_key_in_reach_waives_that_finding_only() {
        let judged = |unmet: &[&str], id: Option<&str>| {
            let mut v = not_verified(String::new());
            v.unmet = unmet.iter().map(|u| u.to_string()).collect();
            v.receipt_id = id.map(str::to_string);
            waive_key_in_reach(&mut v);
            assert!(v.key_in_reach_allowed);
            v
        };
        let key = "signing_key_in_child_reach: the key was in reach";
        let v = judged(&[key], Some("r1"));
        assert_eq!((v.verdict, v.unmet.len()), ("VERIFIED_DONE", 0));
        let v = judged(&[key, "exit_code: 1, not 0"], Some("r1"));
        assert_eq!(v.verdict, "NOT_VERIFIED");
        assert_eq!(v.unmet, ["exit_code: 1, not 0"]);
        let v = judged(&[key], None);
        assert_eq!(v.verdict, "NOT_VERIFIED");
    }
    use ed25519_dalek::SigningKey;
    use governed_model::{Envelope, GoalRef};

    fn seed_dir() -> std::path::PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("fuzz/seeds/verify_envelope")
    }

    /// A real receipt's statement (from the fuzz seeds), re-aimed at
    /// `FUZZ_GOAL`.
    fn template() -> Statement {
        let env: Envelope =
            serde_json::from_slice(&std::fs::read(seed_dir().join("receipt.json")).unwrap())
                .unwrap();
        let mut stmt = receipt::decode_statement(&env).unwrap();
        stmt.predicate.goal = Some(GoalRef {
            id: "g".into(),
            revision: 1,
            sha256: sign::sha256_hex(FUZZ_GOAL),
        });
        stmt.predicate.products.clear();
        stmt.subject.retain(|s| !s.name.contains('/'));
        if let Some(sg) = stmt.predicate.signing.as_mut() {
            sg.key_out_of_child_reach = true;
        }
        stmt
    }

    fn signed(stmt: &Statement) -> (Vec<u8>, Vec<u8>) {
        let key = SigningKey::from_bytes(&FUZZ_KEY);
        let payload = serde_json::to_vec(stmt).unwrap();
        let env = sign::sign_envelope(Some(&key), DSSE_PAYLOAD_TYPE, &payload);
        (serde_json::to_vec_pretty(&env).unwrap(), payload)
    }

    fn judge_stmt(stmt: &Statement, state_dir: Option<&Path>) -> Verdict {
        let goal = goal::from_bytes("goal", FUZZ_GOAL).unwrap();
        let key = SigningKey::from_bytes(&FUZZ_KEY).verifying_key();
        let ledger = state_dir.map(governed_ledger::LocalLedger::state_dir);
        judge(
            &goal,
            &signed(stmt).0,
            &key,
            ledger.as_ref().map(|l| l as &dyn governed_ledger::Ledger),
        )
    }

    use crate::receipt;

    /// The fuzz seeds are signed with the key the target trusts, so the
    /// target's mutations reach everything after the signature check.
    /// `UPDATE_FUZZ_SEEDS=1` rewrites them.
    #[test]
    fn fuzz_seeds_are_signed_with_the_target_key() {
        let done = template();
        let mut failed = template();
        failed.predicate.outcome.exit_code = Some(1);
        for (name, stmt, want_done) in [
            ("signed-exited-0.json", &done, true),
            ("signed-exited-1.json", &failed, false),
        ] {
            let path = seed_dir().join(name);
            if std::env::var_os("UPDATE_FUZZ_SEEDS").is_some() {
                std::fs::write(&path, signed(stmt).0).unwrap();
            }
            let bytes = std::fs::read(&path).unwrap();
            let key = SigningKey::from_bytes(&FUZZ_KEY).verifying_key();
            let v = judge_bytes(FUZZ_GOAL, &bytes, &key);
            assert_eq!(v.done(), want_done, "{name}: {:?}", v.unmet);
            governed_testkit::fuzzing::verify_envelope_judged(&bytes);
        }
    }

    #[test]
    fn the_template_verifies() {
        let v = judge_stmt(&template(), None);
        assert!(v.done(), "{:?}", v.unmet);
    }

    /// Each of the three format checks fails the verdict on its own.
    #[test]
    fn any_one_wrong_format_field_is_unmet() {
        for i in 0..3 {
            let mut s = template();
            match i {
                0 => s.type_ = "https://in-toto.io/Statement/v0.1".into(),
                1 => s.predicate_type = "https://example.com/other".into(),
                _ => s.predicate.schema = "governed-exec/receipt/v0".into(),
            }
            let v = judge_stmt(&s, None);
            assert!(!v.done(), "field {i} alone passed");
            assert!(
                v.unmet.iter().any(|u| u.starts_with("format:")),
                "{:?}",
                v.unmet
            );
        }
    }

    /// A receipt proves nothing against its child when the child could
    /// read the key that signed it, and a journaled run's receipt that does
    /// not say (no `signing` block) is treated the same: not accepted
    /// without `--allow-key-in-reach`.
    #[test]
    fn a_receipt_must_say_the_key_was_out_of_the_childs_reach() {
        let in_reach = |v: &Verdict| {
            v.unmet
                .iter()
                .any(|u| u.starts_with("signing_key_in_child_reach:"))
        };
        let mut s = template();
        s.predicate.attempt_id = Some("att-1".into());
        let v = judge_stmt(&s, None);
        assert!(v.done() && !in_reach(&v), "{:?}", v.unmet);
        s.predicate.signing.as_mut().unwrap().key_out_of_child_reach = false;
        let v = judge_stmt(&s, None);
        assert!(!v.done() && in_reach(&v), "key in reach: {:?}", v.unmet);
        s.predicate.signing = None;
        let v = judge_stmt(&s, None);
        assert!(
            !v.done() && in_reach(&v),
            "silent on the key: {:?}",
            v.unmet
        );
        // A record of no attempt (nothing ran) has no child to fear.
        s.predicate.attempt_id = None;
        assert!(!in_reach(&judge_stmt(&s, None)));
    }

    /// The statement's subjects are what a third-party verifier attests:
    /// each product with a digest must be a subject of the same name and
    /// the same digest, or the receipt would attest other bytes.
    #[test]
    fn statement_subjects_must_match_the_product_digests() {
        let h = "cd".repeat(32);
        let with = |name: &str, digest: &str| {
            let mut s = template();
            s.predicate.products.push(governed_model::Product {
                path: "out.txt".into(),
                exists: true,
                size: Some(1),
                sha256: Some(h.clone()),
            });
            s.subject.push(governed_model::Subject {
                name: name.into(),
                digest: [("sha256".to_string(), digest.to_string())].into(),
            });
            judge_stmt(&s, None)
                .unmet
                .iter()
                .any(|u| u.contains("is not among the statement's subjects"))
        };
        assert!(!with("out.txt", &h), "the matching subject");
        assert!(with("out.txt", &"00".repeat(32)), "another digest");
        assert!(with("other.txt", &h), "another name");
    }

    /// Each goal field mismatch fails on its own.
    #[test]
    fn any_one_wrong_goal_field_is_unmet() {
        for i in 0..3 {
            let mut s = template();
            let g = s.predicate.goal.as_mut().unwrap();
            match i {
                0 => g.id = "other".into(),
                1 => g.revision = 2,
                _ => g.sha256 = "00".repeat(32),
            }
            assert!(!judge_stmt(&s, None).done(), "goal field {i} alone passed");
        }
    }

    #[test]
    fn leftover_processes_fail_even_when_cleanup_is_gone() {
        let goal = goal::from_bytes(
            "goal",
            br#"{"schema":"governed-exec/goal/v1","id":"g","revision":1,"criteria":[{"kind":"no_leftover_processes"}]}"#,
        )
        .unwrap();
        let key = SigningKey::from_bytes(&FUZZ_KEY).verifying_key();
        let mut s = template();
        s.predicate.goal = Some(goal.reference());
        s.predicate.cleanup.state = CleanupState::Gone;
        s.predicate.cleanup.leftover_processes_killed = 0;
        s.predicate.cleanup.evadable = false;
        let v = judge(&goal, &signed(&s).0, &key, None);
        assert!(v.done(), "{:?}", v.unmet);
        s.predicate.cleanup.leftover_processes_killed = 1;
        assert!(!judge(&goal, &signed(&s).0, &key, None).done());
        s.predicate.cleanup.leftover_processes_killed = 0;
        s.predicate.cleanup.state = CleanupState::NotConfirmed;
        assert!(!judge(&goal, &signed(&s).0, &key, None).done());
    }

    fn executing(attempt: &str) -> Event {
        Event::Executing {
            attempt_id: attempt.into(),
            lease_id: "lease-1".into(),
            lease_fingerprint: "ff".into(),
            goal: GoalRef {
                id: "g".into(),
                revision: 1,
                sha256: sign::sha256_hex(FUZZ_GOAL),
            },
            use_number: 1,
            max_uses: 9,
            runner_pid: 1,
            executable: Box::new(template().predicate.command.unwrap()),
            cwd: Box::new(template().predicate.cwd.unwrap()),
        }
    }

    fn result(attempt: &str, receipt_sha256: String) -> Event {
        Event::Result {
            attempt_id: attempt.into(),
            outcome: OutcomeClass::Exited,
            reason: None,
            exit_code: Some(0),
            signal: None,
            cleanup: CleanupState::Gone,
            receipt_sha256,
        }
    }

    /// Two attempts in one journal: the receipt of the second is matched
    /// with the second's records only, and a result naming another receipt
    /// is caught.
    #[test]
    fn the_journal_cross_check_matches_the_right_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), "g").unwrap();
        let mut first = template();
        first.predicate.attempt_id = Some("att-1".into());
        let d1 = j.append(executing("att-1")).unwrap();
        first.predicate.journal_record_sha256 = Some(d1);
        let (_, p1) = signed(&first);
        j.append(result("att-1", sign::sha256_hex(&p1))).unwrap();

        let mut second = template();
        second.predicate.attempt_id = Some("att-2".into());
        let d2 = j.append(executing("att-2")).unwrap();
        second.predicate.journal_record_sha256 = Some(d2);
        let (_, p2) = signed(&second);
        // A result for att-2 that names the first receipt.
        j.append(result("att-2", sign::sha256_hex(&p1))).unwrap();
        drop(j);

        assert_eq!(
            cross_check_journal(
                &governed_ledger::LocalLedger::state_dir(dir.path()),
                &first,
                &p1
            ),
            None
        );
        let why = cross_check_journal(
            &governed_ledger::LocalLedger::state_dir(dir.path()),
            &second,
            &p2,
        )
        .unwrap();
        assert!(why.contains("names a different receipt"), "{why}");
        // The first receipt presented as the second attempt's.
        let mut swapped = first.clone();
        swapped.predicate.attempt_id = Some("att-2".into());
        let why = cross_check_journal(
            &governed_ledger::LocalLedger::state_dir(dir.path()),
            &swapped,
            &p1,
        )
        .unwrap();
        assert!(why.contains("does not close"), "{why}");
        let mut missing = first.clone();
        missing.predicate.attempt_id = Some("att-9".into());
        assert!(cross_check_journal(
            &governed_ledger::LocalLedger::state_dir(dir.path()),
            &missing,
            &p1
        )
        .unwrap()
        .contains("not in the journal"));
        // An attempt with no result of its own is not closed by another's.
        let mut third = template();
        third.predicate.attempt_id = Some("att-3".into());
        let mut j = Journal::open(dir.path(), "g").unwrap();
        third.predicate.journal_record_sha256 = Some(j.append(executing("att-3")).unwrap());
        drop(j);
        let (_, p3) = signed(&third);
        let why = cross_check_journal(
            &governed_ledger::LocalLedger::state_dir(dir.path()),
            &third,
            &p3,
        )
        .unwrap();
        assert!(why.contains("has no result record"), "{why}");
    }

    /// A `file` criterion reads the product back: it must be among the
    /// receipt's products, unchanged on disk since the run, and then meet
    /// its `sha256` (any case) and `contains`; "must not exist" means
    /// nothing at all at that path, in the receipt and on disk.
    #[test]
    fn a_file_criterion_reads_the_product_back() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("out.txt"), b"hello world").unwrap();
        let digest = sign::sha256_hex(b"hello world");
        let mut p = template().predicate;
        let product = |path: &str, exists: bool, sha: Option<&str>| governed_model::Product {
            path: path.into(),
            exists,
            size: None,
            sha256: sha.map(str::to_string),
        };
        p.products = vec![
            product("out.txt", true, Some(&digest)),
            product("gone.txt", false, None),
            product("dir", false, None),
            product("stale.txt", true, Some(&sign::sha256_hex(b"before"))),
        ];
        std::fs::create_dir(ws.path().join("dir")).unwrap();
        std::fs::write(ws.path().join("stale.txt"), b"after").unwrap();
        let w = Some(ws.path());
        let check =
            |path: &str, exists, contains, sha| check_file(&p, w, path, exists, contains, sha);
        assert_eq!(check("out.txt", None, None, None), None);
        let upper = digest.to_uppercase();
        assert_eq!(check("out.txt", None, Some("world"), Some(&upper)), None);
        assert_eq!(
            check("out.txt", None, Some("nope"), None).as_deref(),
            Some("does not contain \"nope\"")
        );
        let wrong = "0".repeat(64);
        assert_eq!(
            check("out.txt", None, None, Some(&wrong)),
            Some(format!("sha256 is {digest}, expected {wrong}"))
        );
        assert!(check("stale.txt", None, None, None)
            .unwrap()
            .starts_with("changed on disk since the run"));
        assert_eq!(check("gone.txt", Some(false), None, None), None);
        assert!(check("dir", Some(false), None, None)
            .unwrap()
            .contains("something exists there on disk now"));
        assert_eq!(
            check("out.txt", Some(false), None, None).as_deref(),
            Some("must not exist, but the receipt recorded it")
        );
        assert_eq!(
            check("gone.txt", None, None, None).as_deref(),
            Some("missing in the receipt's products")
        );
        assert_eq!(
            check("other.txt", None, None, None).as_deref(),
            Some("not among the receipt's products")
        );
        assert_eq!(
            check_file(&p, None, "out.txt", None, None, None).as_deref(),
            Some("the receipt names no workspace to read back from")
        );
        std::fs::remove_file(ws.path().join("out.txt")).unwrap();
        assert_eq!(
            check("out.txt", None, None, None).as_deref(),
            Some("missing on disk now (read-back)")
        );
    }

    /// `resources`: each bound compares the receipt's figure (at the bound
    /// is met, one over is not); a missing figure does not meet a bound;
    /// a cgroup figure met under an evadable cleanup is not proof.
    #[test]
    fn resource_bounds_compare_the_receipts_figures() {
        let mut p = template().predicate;
        p.cleanup.evadable = false;
        p.resources.mechanism = "cgroup_v2".into();
        p.resources.peak_memory_bytes = Some(1024 * 1024);
        p.resources.cpu_user_ms = 600;
        p.resources.cpu_system_ms = 400;
        p.duration_ms = 2000;
        let at = |p: &ReceiptBody, m, c, w| check_resources(p, m, c, w);
        assert!(
            at(&p, Some("1MiB"), Some("1s"), Some("2s")).is_empty(),
            "exactly at every bound"
        );
        let over = at(&p, Some("1023KiB"), Some("999ms"), Some("1999ms"));
        assert_eq!(over.len(), 3, "{over:?}");
        assert!(
            over[0]
                .starts_with("resources: peak_memory_at_most 1023KiB: the run's peak memory was"),
            "{over:?}"
        );
        assert!(
            over[1].starts_with("resources: cpu_time_at_most 999ms: the run used"),
            "{over:?}"
        );
        assert!(
            over[2].starts_with("resources: wall_time_at_most 1999ms: the run took"),
            "{over:?}"
        );
        let mut unknown = p.clone();
        unknown.resources.peak_memory_bytes = None;
        let missing = at(&unknown, Some("1GiB"), None, None);
        assert!(
            missing.len() == 1 && missing[0].contains("the receipt has no peak memory"),
            "{missing:?}"
        );
        let mut evadable = p.clone();
        evadable.cleanup.evadable = true;
        evadable.cleanup.evadable_why = "a root child".into();
        let unproven = at(&evadable, Some("1GiB"), Some("1h"), None);
        assert_eq!(unproven.len(), 2, "{unproven:?}");
        assert!(
            unproven
                .iter()
                .all(|u| u.contains("is not proof") && u.contains("a root child")),
            "{unproven:?}"
        );
        evadable.resources.mechanism = "rusage".into();
        assert!(
            at(&evadable, Some("1GiB"), Some("1h"), None).is_empty(),
            "not a cgroup figure"
        );
        assert!(
            at(&p, None, None, Some("soon"))[0].starts_with("resources: "),
            "a bad bound"
        );
    }

    /// `no_leftover_processes`: a killed leftover or a cleanup not `gone`
    /// fails it; an evadable cleanup fails it only when nothing else did
    /// (one finding, saying what the child could do).
    #[test]
    fn leftovers_and_evadable_cleanups_fail_no_leftover_processes() {
        let mut p = template().predicate;
        p.cleanup.state = CleanupState::Gone;
        p.cleanup.leftover_processes_killed = 0;
        p.cleanup.evadable = false;
        assert!(check_leftovers(&p).is_empty());
        p.cleanup.evadable = true;
        p.cleanup.evadable_why = "the child could reach docker".into();
        let unmet = check_leftovers(&p);
        assert!(
            unmet.len() == 1 && unmet[0].contains("the child could reach docker"),
            "{unmet:?}"
        );
        p.cleanup.leftover_processes_killed = 2;
        let unmet = check_leftovers(&p);
        assert_eq!(
            unmet.len(),
            1,
            "the evadable line only when nothing else failed: {unmet:?}"
        );
        assert!(unmet[0].contains("2 process(es) outlived"), "{unmet:?}");
    }

    /// A failed journal cross-check names the ledger the receipt says it
    /// was counted in when that is not the one given.
    #[test]
    fn a_journal_mismatch_names_the_ledger_the_receipt_was_counted_in() {
        let dir = tempfile::tempdir().unwrap();
        drop(Journal::open(dir.path(), "g").unwrap());
        let ledger = governed_ledger::LocalLedger::state_dir(dir.path());
        let mut stmt = template();
        stmt.predicate.attempt_id = Some("att-1".into());
        stmt.predicate.ledger = Some(governed_ledger::Ledger::name(&ledger));
        let (_, payload) = signed(&stmt);
        let why = check_journal(&ledger, &stmt, &payload).unwrap();
        assert!(
            why.starts_with("journal: attempt att-1 is not in the journal"),
            "{why}"
        );
        assert!(!why.contains("cross-check with --ledger"), "{why}");
        stmt.predicate.ledger = Some("postgresql://elsewhere/db".into());
        let (_, payload) = signed(&stmt);
        let why = check_journal(&ledger, &stmt, &payload).unwrap();
        assert!(
            why.contains("the receipt says its use was counted in postgresql://elsewhere/db"),
            "{why}"
        );
    }
}
