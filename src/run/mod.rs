//! `run`: the whole governed pipeline for one request.
//!
//! ```text
//! inputs ─parse─▶ journal lock ─admit─▶ Admitted ─isolation─▶ executing record (fsync)
//!        ─spawn─▶ supervise ─▶ products ─▶ signed receipt ─▶ result record ─▶ stdout
//! ```
//!
//! Every path out of this function yields a receipt-shaped document, refusals
//! included, and an exit code from `exit_code::for_outcome`.

pub mod error;

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ed25519_dalek::SigningKey;
use nix::sys::signalfd::SignalFd;

use crate::gate::admission::{self, Admitted, Refusal, Selection};
use crate::ledger::journal::{self, Event, Journal};
use crate::ledger::{self, GoalSession, Ledger, LedgerError};
use crate::model::goal::{self, LoadedGoal};
use crate::model::{
    Cleanup, CleanupState, GoalRef, LeaseRef, Outcome, OutcomeClass, Profile, Reason, ReceiptBody,
    ReceiptRequest, Request, Resources, SigningReport, Streams, RECEIPT_SCHEMA,
};
use crate::os::safe_io::WriteTarget;
use crate::os::sys::{ChildStep, SpawnSpec};
use crate::process::cgroup::RunCgroups;
use crate::process::network;
use crate::process::scratch::{self, Scratch};
use crate::process::supervise::{self, Ending, RunResult, SuperviseError};
use crate::run::error::RunError;
use crate::{
    evidence::escape, evidence::receipt, evidence::sign, gate::manifest_index, gate::reach,
    model::exit_code, process::env, process::isolation, process::process_limit, testing::fault,
};

pub struct RunArgs {
    pub goal: PathBuf,
    pub manifest: PathBuf,
    pub trust: PathBuf,
    pub key: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    pub receipt: Option<PathBuf>,
    pub stream: bool,
    /// No closing line on stderr.
    pub quiet: bool,
    pub request: Option<String>,
    pub lease: Option<String>,
    pub cwd: Option<String>,
    pub profile: Option<Profile>,
    /// The caller's nonce, recorded in the receipt (CONTRACT §11).
    pub nonce: Option<String>,
    pub command: Vec<OsString>,
}

/// A random id with a readable prefix.
pub fn new_id(prefix: &str) -> String {
    let mut b = [0u8; 10];
    if getrandom::getrandom(&mut b).is_err() {
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        b.copy_from_slice(&t.to_le_bytes()[..10]);
    }
    format!("{prefix}-{}", hex::encode(b))
}

/// The longest `--nonce` a receipt carries.
pub const MAX_NONCE_BYTES: usize = 256;

/// A nonce is an opaque token a caller compares byte for byte: non-empty,
/// bounded, and free of control characters (it is printed in views).
fn check_nonce(n: &str) -> Result<String, String> {
    if n.is_empty() {
        return Err("--nonce: empty; give the CI job's run id or another per-run value".into());
    }
    if n.len() > MAX_NONCE_BYTES {
        return Err(format!(
            "--nonce: {} bytes, at most {MAX_NONCE_BYTES}",
            n.len()
        ));
    }
    if n.chars().any(char::is_control) {
        return Err("--nonce: contains a control character".into());
    }
    Ok(n.to_string())
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// What is known so far, to build a receipt at any point.
struct Draft {
    receipt_id: String,
    attempt_id: Option<String>,
    goal: Option<GoalRef>,
    request: Option<ReceiptRequest>,
    started: SystemTime,
    key: Option<SigningKey>,
    /// `run --nonce`, once checked.
    nonce: Option<String>,
    /// `--receipt PATH`, its directory pinned before any child runs (or why
    /// it could not be).
    receipt_target: Option<(PathBuf, std::io::Result<WriteTarget>)>,
}

impl Draft {
    /// Nothing known yet but when the run started and where the receipt goes.
    fn new(receipt_path: Option<PathBuf>) -> Draft {
        Draft {
            receipt_id: new_id("rcpt"),
            attempt_id: None,
            goal: None,
            request: None,
            started: SystemTime::now(),
            key: None,
            nonce: None,
            receipt_target: receipt_path.map(|p| {
                let t = WriteTarget::new(&p);
                (p, t)
            }),
        }
    }

    fn base(&self, outcome: Outcome) -> ReceiptBody {
        let now = SystemTime::now();
        ReceiptBody {
            schema: RECEIPT_SCHEMA.into(),
            receipt_id: self.receipt_id.clone(),
            attempt_id: self.attempt_id.clone(),
            goal: self.goal.clone(),
            lease: None,
            request: self.request.clone(),
            workspace: None,
            binding: None,
            workspace_git: None,
            ledger: None,
            command: None,
            cwd: None,
            outcome,
            cleanup: Cleanup {
                state: CleanupState::NotStarted,
                mechanism: "none".into(),
                leftover_processes_killed: 0,
                unconfirmed_pids: vec![],
                witness: vec![],
                evadable: false,
                evadable_why: "nothing was spawned".into(),
            },
            streams: Streams {
                stdout: receipt::empty_stream(),
                stderr: receipt::empty_stream(),
            },
            products: vec![],
            started_at: rfc3339(self.started),
            ended_at: rfc3339(now),
            duration_ms: now
                .duration_since(self.started)
                .unwrap_or_default()
                .as_millis() as u64,
            resources: Resources::none(),
            limits: None,
            isolation: None,
            spawn_path: None,
            process_limit: None,
            signing: None,
            journal_record_sha256: None,
            nonce: self.nonce.clone(),
            runner_version: env!("CARGO_PKG_VERSION").into(),
            network: None,
        }
    }

    /// Seal (sign) a receipt body: the envelope's bytes as printed, and the
    /// SHA-256 of its payload.
    fn seal(&self, body: ReceiptBody) -> (Vec<u8>, String) {
        let stmt = receipt::statement(body);
        let (envelope, digest) = receipt::seal(&stmt, self.key.as_ref());
        let mut text = serde_json::to_vec_pretty(&envelope).unwrap_or_default();
        text.push(b'\n');
        (text, digest)
    }

    /// Seal and print (or write) the receipt.
    fn emit(&self, body: ReceiptBody) {
        let (text, _) = self.seal(body);
        self.output(&text);
    }

    /// Print (or write) a sealed receipt; says where it went.
    fn output(&self, text: &[u8]) -> String {
        match &self.receipt_target {
            Some((p, target)) => {
                // Replaced through a fresh temporary and a rename in the
                // pinned directory: a symlink, FIFO or hard link planted at
                // the path is replaced, never followed or written through.
                let written = match target {
                    Ok(t) => t.replace(text, 0o644),
                    Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                };
                if let Err(e) = written {
                    eprintln!(
                        "governed-exec: cannot write receipt {}: {e}; printing it to stdout",
                        escape::visible(&p.display().to_string())
                    );
                    let _ = std::io::stdout().write_all(text);
                    return "stdout".into();
                }
                escape::visible(&p.display().to_string())
            }
            None => {
                let _ = std::io::stdout().write_all(text);
                "stdout".into()
            }
        }
    }

    /// A refusal before spawn: one line on stderr, a receipt, exit 125.
    fn refuse(&self, r: Refusal) -> i32 {
        eprintln!(
            "governed-exec: refused ({}): {}",
            r.reason,
            escape::visible(&r.message)
        );
        let body = self.refusal_body(r);
        self.emit(body);
        exit_code::NOT_EXECUTED
    }

    /// The refusal receipt body of `r`.
    fn refusal_body(&self, r: Refusal) -> ReceiptBody {
        let mut body = self.base(not_executed(r.reason, r.message));
        if let Some(l) = &r.lease {
            body.lease = Some(LeaseRef {
                id: l.body.lease_id.clone(),
                fingerprint: l.fingerprint.clone(),
            });
        }
        body
    }
}

/// The one line `run` ends with on stderr (unless `--quiet`): the outcome,
/// the exit code governed-exec returns, the duration, and where the receipt
/// went, so a person at a terminal or in a CI log needs no `jq` to know.
pub fn closing_line(
    outcome: &Outcome,
    duration_ms: u64,
    receipt: &str,
    copy: Option<&Path>,
) -> String {
    let mut what = outcome.class.to_string();
    if let Some(r) = outcome.reason {
        what.push_str(&format!(" ({r})"));
    } else if let Some(sig) = outcome.signal {
        what.push_str(&format!(" (signal {sig})"));
    }
    let copy = copy
        .map(|c| format!(" (copy: {})", escape::visible(&c.display().to_string())))
        .unwrap_or_default();
    format!(
        "governed-exec: {what}, exit code {}, {}; receipt: {receipt}{copy}",
        outcome.runner_exit_code,
        humantime::format_duration(Duration::from_millis(duration_ms))
    )
}

fn not_executed(reason: Reason, message: String) -> Outcome {
    Outcome {
        class: OutcomeClass::KnownNotExecuted,
        reason: Some(reason),
        needs_human: reason.needs_human(),
        exit_code: None,
        signal: None,
        runner_exit_code: exit_code::NOT_EXECUTED,
        message: Some(message),
    }
}

/// A ledger that cannot be used: the state dir's journal keeps its old
/// reasons; a ledger the lease names is `ledger_unavailable`.
fn ledger_refusal(l: &dyn Ledger, e: LedgerError) -> Refusal {
    match e {
        LedgerError::Corrupt(m) => Refusal::new(Reason::JournalCorrupt, m),
        LedgerError::Cancelled(sig) => RunError::CancelledBeforeSpawn(sig).into(),
        LedgerError::Unavailable(m) if l.is_named() => Refusal::new(Reason::LedgerUnavailable, m),
        LedgerError::Unavailable(m) => Refusal::new(Reason::JournalUnavailable, m),
    }
}

/// Load `--key`, or the state dir's runner key, creating it on first use.
fn runner_key(
    explicit: Option<&Path>,
    state_dir: &Path,
) -> Result<(SigningKey, PathBuf), RunError> {
    if let Some(p) = explicit {
        return sign::load_signing_key(p)
            .map(|k| (k, p.to_path_buf()))
            .map_err(RunError::RunnerKey);
    }
    let state = |e: &dyn std::fmt::Display| RunError::StateDir(e.to_string());
    let path = state_dir.join("runner.key");
    if path.exists() {
        return sign::load_signing_key(&path)
            .map(|k| (k, path.clone()))
            .map_err(|e| state(&e));
    }
    journal::ensure_dir(state_dir).map_err(|e| state(&e))?;
    let key = sign::generate().map_err(|e| state(&e))?;
    match sign::write_keypair(&key, &path, &state_dir.join("runner.pub")) {
        Ok(()) => Ok((key, path)),
        // Another runner created it first: use theirs.
        Err(_) if path.exists() => sign::load_signing_key(&path)
            .map(|k| (k, path.clone()))
            .map_err(|e| state(&e)),
        Err(e) => Err(state(&e)),
    }
}

fn selection(args: &RunArgs) -> Result<Selection, String> {
    let given = [
        args.request.is_some(),
        args.lease.is_some(),
        !args.command.is_empty(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if given != 1 {
        return Err(
            "give exactly one of --request FILE, --lease ID, or -- EXECUTABLE [ARG...]".into(),
        );
    }
    if (args.cwd.is_some() || args.profile.is_some()) && args.command.is_empty() {
        return Err("--cwd and --profile go with -- EXECUTABLE [ARG...] only".into());
    }
    if let Some(id) = &args.lease {
        return Ok(Selection::LeaseId(id.clone()));
    }
    // A request file always names its profile; `-- CMD` only with --profile.
    let profile_given = args.request.is_some() || args.profile.is_some();
    let request = match &args.request {
        Some(src) => read_request(src)?,
        None => {
            let mut words = Vec::new();
            for w in &args.command {
                words.push(
                    w.to_str()
                        .ok_or_else(|| {
                            format!("argument {w:?} is not valid UTF-8; requests are JSON strings")
                        })?
                        .to_string(),
                );
            }
            Request {
                executable: words.remove(0),
                argv: words,
                cwd: args.cwd.clone().unwrap_or_else(|| ".".into()),
                profile: args.profile.unwrap_or(Profile::Standard),
            }
        }
    };
    check_request(&request)?;
    Ok(Selection::Request {
        request,
        profile_given,
    })
}

/// Size bound of a request (a file or stdin).
pub const MAX_REQUEST_BYTES: u64 = 1024 * 1024;

pub fn read_request(src: &str) -> Result<Request, String> {
    let (what, bytes) = if src == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(std::io::stdin(), MAX_REQUEST_BYTES + 1),
            &mut b,
        )
        .map_err(|e| format!("request (stdin): {e}"))?;
        if b.len() as u64 > MAX_REQUEST_BYTES {
            return Err(format!(
                "request (stdin): larger than the {MAX_REQUEST_BYTES}-byte bound"
            ));
        }
        ("request (stdin)".to_string(), b)
    } else {
        let b = crate::os::safe_io::read_bounded(Path::new(src), MAX_REQUEST_BYTES)
            .map_err(|e| format!("request {src}: {e}"))?;
        (format!("request {src}"), b)
    };
    let r: Request = crate::model::parse_json(&what, &bytes)?;
    check_request(&r).map_err(|e| format!("{what}: {e}"))?;
    Ok(r)
}

fn check_request(r: &Request) -> Result<(), String> {
    if r.executable.is_empty() {
        return Err("field `executable` is empty".into());
    }
    if r.executable.contains('\0') {
        return Err("field `executable` contains a NUL byte".into());
    }
    if let Some(i) = r.argv.iter().position(|a| a.contains('\0')) {
        return Err(format!(
            "field `argv[{i}]` contains a NUL byte, which execve cannot pass"
        ));
    }
    if r.cwd.contains('\0') {
        return Err("field `cwd` contains a NUL byte".into());
    }
    Ok(())
}

fn signing_report(
    key: &SigningKey,
    key_path: &Path,
    prepared: &isolation::Prepared,
) -> SigningReport {
    let keyid = sign::keyid(&key.verifying_key());
    let child_uid = prepared.report.uid;
    let meta = std::fs::metadata(key_path).ok();
    let (owner, mode) = meta.map_or((u32::MAX, 0o777), |m| (m.uid(), m.mode()));
    let (out_of_reach, why) = if child_uid == 0 {
        let kept = if prepared.creds.is_some() {
            Some("no capability".to_string())
        } else {
            prepared
                .root_caps_keep
                .map(|_| format!("only {}", reach::root_keep_names().join(", ")))
        };
        let guard = match (&prepared.key_landlocked, prepared.creds.is_some()) {
            (_, true) => Ok(String::new()),
            (Some(Ok(how)), false) => Ok(format!("; {how}, and it may not mount")),
            (Some(Err(why)), false) => Err(why.clone()),
            (None, false) => Err("no Landlock guard was made".to_string()),
        };
        match (&prepared.key_covered, kept, guard) {
            (Some(Ok(how)), Some(kept), Ok(guarded)) => (
                true,
                format!(
                    "the child ran as uid 0 with {kept} (no CAP_SYS_ADMIN to unmount, no CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_MKNOD, CAP_SYS_RAWIO, CAP_SETUID), in its own mount namespace: {how}, the state dir, cgroupfs and host device nodes covered{guarded}; the runner is non-dumpable"
                ),
            ),
            (Some(Err(why)), _, _) => (false, format!("the child runs as root: {why}")),
            (Some(Ok(_)), Some(_), Err(why)) => (
                false,
                format!("the child runs as root, and without a Landlock guard it could rename a directory above the covered key or state dir and plant its own: {why}"),
            ),
            _ => (
                false,
                "the child runs as root with full capabilities, which can read any file".to_string(),
            ),
        }
    } else if let Some(Ok(how)) = &prepared.key_landlocked {
        (
            true,
            format!("the child runs as uid {child_uid}, the runner's: {how}; Landlock also forbids it to ptrace the runner or read its /proc files, and the runner is non-dumpable"),
        )
    } else if child_uid == owner {
        (
            false,
            match &prepared.key_landlocked {
                Some(Err(why)) => format!("the child runs as uid {child_uid}, which owns the key file, and it could not be denied the key: {why}"),
                _ => format!("the child runs as uid {child_uid}, which owns the key file"),
            },
        )
    } else if mode & 0o044 != 0 {
        (
            false,
            format!(
                "the key file is readable by group or others (mode {:o})",
                mode & 0o777
            ),
        )
    } else {
        (true, format!("the child runs as uid {child_uid} without capabilities; the key file is owned by uid {owner} with mode {:o}", mode & 0o777))
    };
    // The key is only as far out of reach as every channel to it: a daemon
    // socket (the daemon reads the key for the child), a ledger the child
    // can rewrite or whose credentials it can read.
    let (out_of_reach, why) = match reachable(
        prepared,
        &["daemon_socket", "ledger_dir", "ledger_credentials"],
    ) {
        Some(channel) if out_of_reach => (false, format!("{why}; but {channel}")),
        _ => (out_of_reach, why),
    };
    SigningReport {
        keyid,
        key_out_of_child_reach: out_of_reach,
        why,
    }
}

/// Whether uid `uid` (group `gid`, no supplementary groups, no
/// capabilities: what `--as-user` leaves) could execute the file the sealed
/// copy was made from, as the kernel checks it: search on every directory
/// above it, execute on the file, and read too for a `#!` script (its
/// interpreter reads it).
fn child_may_execute(
    exe: &crate::gate::identity::OpenedExecutable,
    uid: u32,
    gid: u32,
) -> Result<(), String> {
    let ids = reach::ChildIds::switched(uid, gid);
    let path = Path::new(&exe.identity.canonical_path);
    for dir in path.ancestors().skip(1) {
        let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !ids.may(&meta, 1) {
            return Err(format!(
                "--as-user {uid}:{gid} cannot reach {}: no search permission on {} ({}); the child may run only what its uid could run itself",
                path.display(),
                dir.display(),
                reach::mode_text(&meta)
            ));
        }
    }
    let meta = exe
        .file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let want = if exe.identity.interpreter.is_some() {
        5
    } else {
        1
    };
    if ids.may(&meta, want) {
        Ok(())
    } else {
        Err(format!(
            "--as-user {uid}:{gid} may not {} {} ({}); the child may run only what its uid could run itself",
            if want == 5 { "read and execute" } else { "execute" },
            path.display(),
            reach::mode_text(&meta)
        ))
    }
}

/// The first channel of `channels` the child could reach, in words.
fn reachable(prepared: &isolation::Prepared, channels: &[&str]) -> Option<String> {
    prepared
        .report
        .reach
        .iter()
        .find(|r| r.reachable && channels.contains(&r.channel.as_str()))
        .map(|r| {
            format!(
                "the child could reach {} {}: {}",
                r.channel.replace('_', " "),
                r.path.as_deref().unwrap_or(""),
                r.how
            )
        })
}

/// A uid-0 child under isolation with its Landlock guard in place (no
/// mount, not even in a user namespace of its own); `true` for a child that
/// dropped to `--as-user`, which cannot map uid 0 in a user namespace.
fn root_child_guarded(prepared: &isolation::Prepared) -> bool {
    prepared.creds.is_some() || matches!(prepared.key_landlocked, Some(Ok(_)))
}

/// Which witnesses `gone` rests on, and whether the child could hide from
/// all of them (CONTRACT §7). Each witness alone finds every process it
/// sees, so the child evades only if it can evade every one.
fn cleanup_witness(
    prepared: &isolation::Prepared,
    cgroups: &RunCgroups,
) -> (Vec<String>, bool, String) {
    let mut witness = vec!["subreaper_tree".to_string()];
    witness.extend(cgroups.witnesses().iter().map(|w| w.to_string()));
    if prepared.report.pid_namespace {
        witness.push("pid_namespace".into());
    }
    let full_root = prepared.report.uid == 0 && prepared.report.capabilities_kept.is_none();
    if let Some(socket) = reachable(prepared, &["daemon_socket"]) {
        // A daemon starts processes that are not the child's descendants,
        // outside the run's cgroups and namespaces: no witness sees them.
        (witness, true, socket)
    } else if full_root {
        (
            witness,
            true,
            "the child ran as uid 0 with every capability in the runner's mount namespace: it could mount over /proc/<runner>/task/*/children, ptrace the runner, and move itself out of the run's cgroups".into(),
        )
    } else if prepared.report.uid == 0 && !root_child_guarded(prepared) {
        (
            witness,
            true,
            "the child ran as uid 0 without a Landlock guard: it could make a user namespace of its own, mount cgroupfs there and move itself out of the run's groups".into(),
        )
    } else if prepared.report.uid == 0 {
        (
            witness,
            false,
            format!(
                "the child ran as uid 0 without CAP_SYS_ADMIN or CAP_SYS_PTRACE{}: it cannot mount over the runner's /proc or ptrace the non-dumpable runner, and every descendant stays under the runner, a child subreaper",
                if prepared.report.mount_namespace { ", in its own mount namespace" } else { "" }
            ),
        )
    } else {
        (
            witness,
            false,
            format!("the child ran as uid {} without capabilities: it cannot mount over the runner's /proc or ptrace the non-dumpable runner, and every descendant stays under the runner, a child subreaper (processes another daemon starts on its request are not its descendants)", prepared.report.uid),
        )
    }
}

/// `run` whose command line could not even be parsed: still one refusal
/// receipt on stdout (unsigned: no state dir or key is known), exit 125.
/// stderr carries the one-line refusal, then clap's usage text (`usage`:
/// clap's whole message, from its `Usage:` line on). A person at a
/// terminal gets no JSON dumped on it: when stdout is a terminal the
/// document is not printed (nothing is written anywhere else either: the
/// state dir is not known yet), and stderr says so; a harness, whose stdout
/// is a pipe or file, always gets the document.
pub fn refuse_unparsed(message: String, usage: &str) -> i32 {
    use std::io::IsTerminal;
    let draft = Draft::new(None);
    let r = Refusal::new(Reason::InvalidInput, message);
    eprintln!(
        "governed-exec: refused ({}): {}",
        r.reason,
        escape::visible(&r.message)
    );
    for l in usage.lines().skip_while(|l| !l.starts_with("Usage:")) {
        eprintln!("{}", escape::visible(l));
    }
    if std::io::stdout().is_terminal() {
        eprintln!("governed-exec: the refusal document (outcome known_not_executed, reason invalid_input, exit code 125) is not printed to a terminal; redirect stdout to a file or pipe to keep it");
        return exit_code::NOT_EXECUTED;
    }
    let body = draft.refusal_body(r);
    draft.emit(body);
    exit_code::NOT_EXECUTED
}

/// Journal a refusal decided before the Goal's journal was opened (bad
/// input once the Goal is known): best effort, the receipt is what counts.
fn journal_refusal_record(state_dir: &Path, goal_id: &str, r: &Refusal) {
    if let Ok(mut j) = Journal::open(state_dir, goal_id) {
        append_refusal(&mut j, r);
    }
}

fn append_refusal(journal: &mut Journal, r: &Refusal) {
    let _ = journal.append(refusal_event(r));
}

fn refusal_event(r: &Refusal) -> Event {
    Event::Refusal {
        lease_id: r.lease.as_ref().map(|l| l.body.lease_id.clone()),
        reason: r.reason,
        message: r.message.clone(),
    }
}

/// Record a refusal in the ledger session that admitted (best effort: the
/// receipt is what counts) and end the session.
fn record_refusal(mut session: Box<dyn GoalSession>, r: &Refusal) {
    if session.append(refusal_event(r)).is_ok() {
        let _ = session.commit();
    }
}

/// Drain the signalfd without blocking: the cancelling signal (SIGTERM,
/// SIGINT or SIGHUP) that arrived so far, if any. No child exists yet, so
/// a SIGCHLD here has nothing to reap.
fn pending_cancel(signals: &mut SignalFd) -> Option<i32> {
    let mut cancel = None;
    while let Ok(Some(info)) = signals.read_signal() {
        let sig = info.ssi_signo as i32;
        if sig != libc::SIGCHLD && cancel.is_none() {
            cancel = Some(sig);
        }
    }
    cancel
}

pub fn run(args: RunArgs, signals: &mut SignalFd) -> i32 {
    // The runner holds the signing key in memory and its fds: no process of
    // the same uid without CAP_SYS_PTRACE may read /proc/<runner>/{mem,fd,
    // root,environ} or ptrace it.
    if let Err(e) = crate::os::sys::set_non_dumpable() {
        eprintln!("governed-exec: cannot make the runner non-dumpable: {e}");
    }
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(journal::default_state_dir);
    let mut draft = Draft::new(args.receipt.clone());
    // The nonce goes into every receipt of this run, refusals included; one
    // that could not be printed safely is bad input, refused without it.
    match args.nonce.as_deref().map(check_nonce).transpose() {
        Ok(n) => draft.nonce = n,
        Err(e) => return draft.refuse(RunError::Request(e).into()),
    }
    // The runner key's location is known from here on: every refusal is
    // signed, with the key created if needed (as a successful run would),
    // so a harness always gets a receipt `verify` can judge.
    let key_pair = runner_key(args.key.as_deref(), &state_dir);
    if let Ok((k, _)) = &key_pair {
        draft.key = Some(k.clone());
    }
    let goal = match goal::load(&args.goal) {
        Ok(g) => g,
        Err(e) => return draft.refuse(RunError::Goal(e).into()),
    };
    draft.goal = Some(goal.reference());
    let goal_id = goal.goal.id.clone();
    let refuse_early = |draft: &Draft, r: Refusal| {
        journal_refusal_record(&state_dir, &goal_id, &r);
        draft.refuse(r)
    };
    let selection = match selection(&args) {
        Ok(s) => s,
        Err(e) => return refuse_early(&draft, RunError::Request(e).into()),
    };
    // The request as given: without --profile, `run -- CMD` names no
    // profile until a lease chooses it, and a refusal before that says so.
    if let Selection::Request {
        request,
        profile_given,
    } = &selection
    {
        let mut given = ReceiptRequest::from(request.clone());
        if !profile_given {
            given.profile = None;
        }
        draft.request = Some(given);
    }
    let (manifest, pending_index) =
        match manifest_index::load_for(&args.manifest, &state_dir, &selection) {
            Ok(loaded) => (loaded.manifest, loaded.index),
            Err(e) => return refuse_early(&draft, RunError::Manifest(e).into()),
        };
    let trust = match sign::load_verifying_key(&args.trust) {
        Ok(k) => k,
        Err(e) => return refuse_early(&draft, RunError::Trust(e).into()),
    };
    let (key, key_path) = match key_pair {
        Ok(k) => k,
        Err(e) => return refuse_early(&draft, e.into()),
    };
    let canonical = |p: &Path, what: &'static str| {
        std::fs::canonicalize(p).map_err(|source| {
            Refusal::from(RunError::Place {
                what,
                path: p.display().to_string(),
                source,
            })
        })
    };
    let workspace = match args
        .workspace
        .as_deref()
        .map(|w| canonical(w, "--workspace"))
        .transpose()
    {
        Ok(w) => w,
        Err(r) => return refuse_early(&draft, r),
    };
    let here = match canonical(Path::new("."), "current directory") {
        Ok(h) => h,
        Err(r) => return refuse_early(&draft, r),
    };
    // Everything slow happens before the Goal's ledger lock, so other runs
    // of the Goal never wait for this run's I/O: removing the scratch trees
    // of killed runners (when due), and opening and hashing the executable
    // into its sealed snapshot.
    let sweep = scratch::sweep_due(&state_dir);
    if sweep {
        for base in scratch::bases(true) {
            scratch::sweep(&base);
        }
    }
    let now = SystemTime::now();
    let place = admission::RunPlace {
        workspace: workspace.as_deref(),
        here: &here,
    };
    let prepared = match admission::prepare(&manifest, &goal, &trust, now, &selection, place) {
        Ok(p) => p,
        Err(r) => return refuse_early(&draft, r),
    };
    // The ledger is the one the matching lease names (else the state dir);
    // a revoked or expired match does not make it ambiguous.
    let named: Vec<Option<String>> = {
        let all = admission::candidates(&manifest, &selection);
        let live: Vec<_> = all
            .iter()
            .filter(|l| admission::may_still_run(&manifest, l, now))
            .collect();
        let pick = if live.is_empty() {
            all.iter().collect()
        } else {
            live
        };
        let mut v: Vec<Option<String>> = pick.iter().map(|l| l.body.ledger.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    if named.len() > 1 {
        return refuse_early(&draft, RunError::AmbiguousLedger.into());
    }
    let led = match ledger::for_lease(named.first().cloned().flatten().as_deref(), &state_dir) {
        Ok(l) => l,
        Err(e) => return refuse_early(&draft, RunError::LedgerName(e).into()),
    };
    let mut session = match led.open_goal(&goal.goal.id) {
        Ok(s) => s,
        Err(e) => return draft.refuse(ledger_refusal(&*led, e)),
    };
    let ctx = admission::Context {
        manifest: &manifest,
        goal: &goal,
        trust: &trust,
        ledger: &*session,
        now,
    };
    let admitted = match admission::admit(&ctx, prepared) {
        Ok(a) => a,
        Err(r) => {
            record_refusal(session, &r);
            return draft.refuse(r);
        }
    };
    // The leases this one superseded are revoked where its uses are
    // counted, in the same transaction as its executing record: an old copy
    // of the manifest (which does not know of the supersession) cannot
    // bring one of them back in this ledger.
    let unrecorded: Vec<_> = manifest
        .superseded
        .iter()
        .filter(|s| s.by_lease == admitted.lease.body.lease_id)
        .filter(|s| !session.summary().revoked.contains(&s.lease_id))
        .collect();
    for s in unrecorded {
        let event = Event::Revocation {
            lease_id: s.lease_id.clone(),
            by: format!("superseded by lease {}", s.by_lease),
        };
        if let Err(e) = session.append(event) {
            return draft.refuse(ledger_refusal(&*led, e));
        }
    }
    draft.request = Some(admitted.lease.body.request.clone().into());
    let ended = execute(
        draft,
        admitted,
        (session, &*led),
        &goal,
        &state_dir,
        (key, key_path),
        (args.stream, args.quiet),
        sweep,
        signals,
    );
    // After the run, outside the Goal's lock: only an admitted run writes
    // the manifest index, and its write never delays the child.
    if let Some(index) = pending_index {
        index.write();
    }
    ended
}

#[allow(clippy::too_many_arguments)]
fn execute(
    mut draft: Draft,
    admitted: Admitted,
    (session, led): (Box<dyn GoalSession>, &dyn Ledger),
    goal: &LoadedGoal,
    state_dir: &Path,
    (key, key_path): (SigningKey, PathBuf),
    (mirror, quiet): (bool, bool),
    sweep: bool,
    signals: &mut SignalFd,
) -> i32 {
    let body = &admitted.lease.body;
    let lease_ref = LeaseRef {
        id: body.lease_id.clone(),
        fingerprint: admitted.lease.fingerprint.clone(),
    };
    // Refusals decided after admission are journaled like admission's, so
    // the audit trail is complete (the journal is still held here).
    let refuse_with_lease =
        |draft: &Draft, session: Box<dyn GoalSession>, reason: Reason, msg: String| {
            let r = Refusal {
                reason,
                message: msg,
                lease: Some(Box::new(admitted.lease.clone())),
            };
            record_refusal(session, &r);
            draft.refuse(r)
        };
    let attempt_id = new_id("att");
    let owner = body.isolation.as_user.map(|u| (u.uid, u.gid));
    let tmpfs_ok = !isolation::any_isolation(&body.isolation);
    let scratch = match Scratch::create(&attempt_id, owner, tmpfs_ok) {
        Ok(s) => s,
        Err(e) => {
            return refuse_with_lease(
                &draft,
                session,
                Reason::IsolationUnavailable,
                format!(
                    "cannot create the private HOME/TMPDIR under {}: {e}",
                    scratch::bases(tmpfs_ok)
                        .iter()
                        .map(|b| b.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            )
        }
    };
    // The workspace this run is in: the lease's (machine binding) or the
    // one `run` was pointed at (portable).
    let workspace_path = PathBuf::from(&admitted.workspace.identity.path);
    // A portable receipt's git HEAD is read now, before the child exists:
    // the child cannot choose the commit its receipt attests.
    let workspace_git = body
        .portable
        .is_some()
        .then(|| crate::gate::git::head(&workspace_path))
        .flatten();
    let writable = vec![
        workspace_path.clone(),
        scratch.home.clone(),
        scratch.tmp.clone(),
    ];
    let (ledger_dir, credentials) = led.protected_paths();
    let protect = isolation::Protect {
        key: &key_path,
        state_dir,
        ledger_dir: ledger_dir.as_deref(),
        credentials: &credentials,
    };
    let mut prepared = match isolation::prepare(&body.isolation, &writable, &protect) {
        Ok(p) => p,
        Err(e) => return refuse_with_lease(&draft, session, Reason::IsolationUnavailable, e),
    };
    // The sealed copy is executable by anyone; the file it copies may not
    // be. A child switched to another uid runs only what that uid could
    // run itself (issue 18, finding 11).
    if let Some(c) = prepared.creds {
        if let Err(why) = child_may_execute(&admitted.exe, c.uid, c.gid) {
            return refuse_with_lease(&draft, session, Reason::ExecFailed, why);
        }
    }
    let cgroups = RunCgroups::create(
        &attempt_id,
        body.limits.max_processes.limit(),
        Some(body.limits.memory_bytes),
        sweep,
    );
    let process_limit =
        match process_limit::choose(body.limits.max_processes, prepared.report.uid, &cgroups) {
            Ok(p) => p,
            Err(e) => return refuse_with_lease(&draft, session, Reason::IsolationUnavailable, e),
        };
    prepared.report.process_limit = process_limit.report.mechanism.clone();
    prepared.report.process_limit_evadable = process_limit::evadable(
        &process_limit.report.mechanism,
        prepared.report.uid,
        prepared.mounts.is_some() && root_child_guarded(&prepared),
        &cgroups,
    );

    // The egress proxy (CONTRACT §8), started by `isolation::prepare`
    // before the use is spent: listening in the child's namespace, dialling
    // from the runner's.
    let proxy = prepared.proxy.take();

    // Everything the child needs, built before the use is spent.
    let mut child_env = env::child_env(&body.env, &scratch.home, &scratch.tmp);
    if proxy.is_some() {
        child_env.extend(network::proxy_env());
    }
    let envp: Vec<CString> = child_env
        .iter()
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect();
    let mut argv: Vec<CString> = Vec::with_capacity(body.request.argv.len() + 1);
    for a in std::iter::once(&body.request.executable).chain(&body.request.argv) {
        match CString::new(a.as_bytes()) {
            Ok(c) => argv.push(c),
            Err(_) => {
                return refuse_with_lease(
                    &draft,
                    session,
                    Reason::InvalidInput,
                    "argv contains a NUL byte".into(),
                )
            }
        }
    }
    let l = &body.limits;
    let mut rlimits = vec![
        (libc::RLIMIT_CPU, l.cpu_time_s),
        (libc::RLIMIT_NOFILE, l.max_open_files),
        (libc::RLIMIT_FSIZE, l.max_file_size_bytes),
        (libc::RLIMIT_CORE, 0),
    ];
    // CONTRACT §9: the memory cgroup limits resident memory of the whole
    // run; only without one does the v1.1 limit on each process's virtual
    // address space apply (it would break programs that reserve large
    // ranges they never touch: JVMs, V8, ASan).
    let covered = prepared.mounts.is_some() && root_child_guarded(&prepared);
    let uid = prepared.report.uid;
    let evadable = match cgroups.memory_limit() {
        Some(kind) => {
            prepared.report.memory_limit = Some(kind.into());
            cgroups.leavable_by(uid, covered)
        }
        None => {
            rlimits.push((libc::RLIMIT_AS, l.memory_bytes));
            prepared.report.memory_limit = Some("rlimit_as".into());
            // Only CAP_SYS_RESOURCE raises a hard limit: a uid-0 child
            // keeps it unless isolation dropped its capabilities.
            uid == 0
                && prepared.report.capabilities_kept.is_none()
                && crate::os::sys::has_effective_capability(crate::os::sys::CAP_SYS_RESOURCE)
        }
    };
    prepared.report.memory_limit_evadable = Some(evadable);
    if let Some(n) = process_limit.rlimit_nproc {
        rlimits.push((libc::RLIMIT_NPROC, n));
    }
    // The sealed copy that was hashed is what runs; it must not become a way
    // to execute a file the kernel would refuse (a `noexec` mount).
    if admitted.exe.on_noexec_mount {
        return refuse_with_lease(
            &draft,
            session,
            Reason::ExecFailed,
            format!(
                "executable {} lies on a noexec mount: the kernel does not execute files there",
                admitted.exe.identity.canonical_path
            ),
        );
    }
    let Some(exe_snapshot) = admitted.exe.snapshot.as_ref() else {
        return refuse_with_lease(
            &draft,
            session,
            Reason::ExecFailed,
            "internal: the executable was admitted without its sealed snapshot".into(),
        );
    };
    let devnull = match std::fs::File::open("/dev/null") {
        Ok(f) => f,
        Err(e) => {
            return refuse_with_lease(
                &draft,
                session,
                Reason::ExecFailed,
                format!("/dev/null: {e}"),
            )
        }
    };

    // A cancelling signal that arrived before the use is spent: refuse,
    // spend nothing. (One arriving after the executing record is written
    // stays pending in the signalfd and is forwarded to the child.)
    if let Some(sig) = pending_cancel(signals) {
        let r = Refusal::from(RunError::CancelledBeforeSpawn(sig));
        record_refusal(session, &r);
        return draft.refuse(Refusal {
            lease: Some(Box::new(admitted.lease.clone())),
            ..r
        });
    }
    // Write-ahead: the liveness witness, then the executing record, durable
    // in the lease's ledger before anything is spawned.
    let executing = Event::Executing {
        attempt_id: attempt_id.clone(),
        lease_id: body.lease_id.clone(),
        lease_fingerprint: admitted.lease.fingerprint.clone(),
        goal: body.goal.clone(),
        use_number: admitted.use_number,
        max_uses: body.max_uses,
        runner_pid: std::process::id(),
        executable: Box::new(admitted.exe.identity.clone()),
        cwd: Box::new(admitted.cwd.identity.clone()),
    };
    let (committed, mut hold) = match session.spend(&attempt_id, executing) {
        Ok(s) => s,
        Err(e) => {
            // Nothing was spent: the session's transaction is gone with it.
            let r = ledger_refusal(led, e);
            return draft.refuse(Refusal {
                lease: Some(Box::new(admitted.lease.clone())),
                ..r
            });
        }
    };
    draft.attempt_id = Some(attempt_id.clone());
    fault::point("after_executing");

    use std::os::fd::AsRawFd;
    let cgroup_v1_tasks = cgroups.v1_tasks_fds();
    let spec = SpawnSpec {
        exe_fd: exe_snapshot.as_raw_fd(),
        exe_is_script: admitted.exe.identity.interpreter.is_some(),
        cwd_fd: admitted.cwd.file.as_raw_fd(),
        stdin_fd: devnull.as_raw_fd(),
        stdout_fd: -1,
        stderr_fd: -1,
        argv: &argv,
        envp: &envp,
        rlimits: &rlimits,
        creds: prepared.creds,
        landlock_ruleset_fd: prepared.landlock_fd.as_ref().map(|f| f.as_raw_fd()),
        landlock_guard_fd: prepared.landlock_guard_fd.as_ref().map(|f| f.as_raw_fd()),
        landlock_guard_access: prepared.landlock_guard_access,
        cgroup_v1_tasks_fds: &cgroup_v1_tasks,
        cgroup_v2_dir_fd: cgroups.v2_dir_fd(),
        cgroup_v2_procs_fd: cgroups.v2_procs_fd(),
        seccomp: prepared.seccomp.as_ref(),
        new_pid_namespace: body.isolation.pid_namespace,
        mounts: prepared.mounts.as_ref(),
        root_caps_keep: prepared.root_caps_keep,
    };
    let mirror = supervise::Mirror::for_stderr(mirror);
    let fence = supervise::CommandFence::open(mirror);
    let result = supervise::run(supervise::Plan {
        spec,
        limits: *l,
        mirror,
        signals,
        cgroups: &cgroups,
        committed: &committed,
    });
    // Every reader of the child's pipes has ended: workflow commands resume.
    drop(fence);
    let executing_digest = committed.digest().to_string();
    // Every process of the run is gone (or the outcome says it is not
    // known): what is still open through the proxy is cut and counted.
    let network_report = proxy.map(network::Proxy::finish);

    let mut receipt_body = draft.base(not_executed(Reason::ExecFailed, String::new()));
    receipt_body.lease = Some(lease_ref);
    receipt_body.workspace = Some(workspace_path.display().to_string());
    receipt_body.binding = Some(body.binding);
    receipt_body.ledger = Some(led.name());
    receipt_body.workspace_git = workspace_git;
    receipt_body.command = Some(admitted.exe.identity.clone());
    receipt_body.cwd = Some(admitted.cwd.identity.clone());
    receipt_body.limits = Some(*l);
    receipt_body.isolation = Some(prepared.report.clone());
    receipt_body.process_limit = Some(process_limit.report.clone());
    receipt_body.signing = Some(signing_report(&key, &key_path, &prepared));
    receipt_body.journal_record_sha256 = Some(executing_digest);
    receipt_body.network = network_report;
    match result {
        // governed-exec's own failure before the program existed: nothing
        // ran, whatever the use cost. Never `unknown`.
        Err(SuperviseError::NotStarted(e)) => {
            let msg = format!("could not start the child: {e}");
            eprintln!("governed-exec: {msg}");
            receipt_body.outcome = not_executed(Reason::ExecFailed, msg);
        }
        Err(e @ SuperviseError::AfterStart(_)) => {
            receipt_body.outcome = unknown(Reason::CleanupUnconfirmed, e.to_string());
        }
        Ok(RunResult::NotExecuted {
            step,
            errno,
            spawn_path,
        }) => {
            receipt_body.spawn_path = Some(spawn_path.as_str().into());
            let err = std::io::Error::from_raw_os_error(errno);
            let msg = if step == ChildStep::Exec {
                format!(
                    "exec of {} failed: {err}",
                    admitted.exe.identity.canonical_path
                )
            } else {
                format!("child setup failed to {step}: {err}")
            };
            eprintln!("governed-exec: {}", escape::visible(&msg));
            receipt_body.outcome = not_executed(Reason::ExecFailed, msg);
            receipt_body.cleanup.state = CleanupState::Gone;
        }
        Ok(RunResult::Ran(s)) => {
            fault::point("after_reap");
            receipt_body.outcome = classify(&s);
            receipt_body.spawn_path = Some(s.spawn_path.as_str().into());
            receipt_body.cleanup = s.cleanup.clone();
            let (witness, evadable, why) = cleanup_witness(&prepared, &cgroups);
            receipt_body.cleanup.witness = witness;
            receipt_body.cleanup.evadable = evadable;
            receipt_body.cleanup.evadable_why = why;
            if let Some(why) = s.leftovers_uncounted() {
                receipt_body.cleanup.evadable = true;
                receipt_body.cleanup.evadable_why = why;
            }
            receipt_body.streams = Streams {
                stdout: s.stdout.clone(),
                stderr: s.stderr.clone(),
            };
            receipt_body.resources = s.resources.clone();
            receipt_body.started_at = rfc3339(s.started);
            receipt_body.ended_at = rfc3339(s.ended);
            receipt_body.duration_ms = s
                .ended
                .duration_since(s.started)
                .unwrap_or_default()
                .as_millis() as u64;
            receipt_body.products = receipt::products(&workspace_path, &goal.product_paths());
            if let Some(iso) = receipt_body.isolation.as_mut() {
                iso.kernel_view = s.kernel_view.clone();
            }
        }
    }
    let outcome = receipt_body.outcome.clone();
    let cleanup_state = receipt_body.cleanup.state.clone();
    let duration_ms = receipt_body.duration_ms;

    // Keep a copy of the receipt in the state dir before the result record
    // names it. It survives a crash of this process (page cache); it is not
    // fsync'd, so a power loss may take it — the result record, which is,
    // still holds the outcome and the receipt's digest.
    // Signed once: the same bytes go to the state dir, the result record's
    // digest and stdout / --receipt.
    let (receipt_text, receipt_digest) = draft.seal(receipt_body);
    let receipts_dir = state_dir.join("receipts");
    let copy = receipts_dir.join(format!("{attempt_id}.json"));
    let copied =
        journal::ensure_dir(&receipts_dir).is_ok() && write_private(&copy, &receipt_text).is_ok();
    fault::point("before_result");
    let result_written = hold.record_result(Event::Result {
        attempt_id: attempt_id.clone(),
        outcome: outcome.class,
        reason: outcome.reason,
        exit_code: outcome.exit_code,
        signal: outcome.signal,
        cleanup: cleanup_state,
        receipt_sha256: receipt_digest,
    });
    if let Err(e) = result_written {
        eprintln!("governed-exec: warning: the result record could not be written ({e}); this attempt will read as `unknown` until resolved");
    }
    fault::point("before_print");
    let went = draft.output(&receipt_text);
    hold.release();
    drop(scratch);
    if outcome.class != OutcomeClass::KnownNotExecuted {
        if let Some(m) = &outcome.message {
            eprintln!("governed-exec: {}: {}", outcome.class, escape::visible(m));
        }
    }
    if !quiet {
        eprintln!(
            "{}",
            closing_line(
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

fn unknown(reason: Reason, message: String) -> Outcome {
    Outcome {
        class: OutcomeClass::Unknown,
        reason: Some(reason),
        needs_human: true,
        exit_code: None,
        signal: None,
        runner_exit_code: exit_code::UNKNOWN,
        message: Some(message),
    }
}

/// The outcome class of a supervised run. Anything not observed gone is
/// `unknown`, whatever else happened.
/// Whether the main process, dead of a SIGKILL while the run's memory cgroup
/// counted an OOM kill, was that kill's victim: a process of the run could
/// have sent the SIGKILL right after a sibling was OOM-killed.
fn main_was_the_oom_victim(s: &supervise::Supervised) -> bool {
    match s.main_oom_killed {
        Some(named) => named,
        None => s.resources.peak_processes == Some(1),
    }
}

fn classify(s: &supervise::Supervised) -> Outcome {
    if s.cleanup.state != CleanupState::Gone {
        return unknown(
            Reason::CleanupUnconfirmed,
            format!(
                "processes {:?} could not be confirmed gone within {:?}",
                s.cleanup.unconfirmed_pids,
                supervise::CONFIRM_BOUND
            ),
        );
    }
    let (class, signal, message) = match s.ending {
        Ending::MainExited => match (s.exit_code, s.signal) {
            (Some(_), _) => (OutcomeClass::Exited, None, None),
            // SIGKILL that governed-exec did not send, while the run's
            // memory cgroup counted an OOM kill, and the main process was
            // its victim: named so in the kernel's log, or (where the log
            // cannot be read) the only task the run ever had.
            (None, Some(sig))
                if sig == libc::SIGKILL
                    && s.resources.oom_kills.is_some_and(|n| n > 0)
                    && main_was_the_oom_victim(s) =>
            {
                (
                    OutcomeClass::MemoryLimitReaped,
                    Some(sig),
                    Some(format!(
                        "the kernel's OOM killer killed the main process at the run's memory limit ({} OOM kill(s) in the run's memory cgroup); the rest was killed and observed gone",
                        s.resources.oom_kills.unwrap_or(0)
                    )),
                )
            }
            (None, Some(sig)) => (
                OutcomeClass::Signaled,
                Some(sig),
                Some(match s.resources.oom_kills {
                    Some(n) if n > 0 => format!(
                        "killed by signal {sig}; the run's memory cgroup counted {n} OOM kill(s), of another process of the run as far as the kernel's log tells"
                    ),
                    _ => format!("killed by signal {sig}"),
                }),
            ),
            (None, None) => {
                return unknown(
                    Reason::CleanupUnconfirmed,
                    "exit status could not be read".into(),
                )
            }
        },
        Ending::TimedOut => (
            OutcomeClass::TimedOutReaped,
            s.signal,
            Some("wall time passed; every process was killed and observed gone".into()),
        ),
        Ending::OutputCapped => (
            OutcomeClass::OutputLimitReaped,
            s.signal,
            Some("total output passed the cap; every process was killed and observed gone".into()),
        ),
        Ending::Cancelled(sig) => (
            OutcomeClass::CancelledReaped,
            Some(sig),
            Some(format!(
                "governed-exec received signal {sig}; the run was stopped and observed gone"
            )),
        ),
    };
    let exit = if class == OutcomeClass::Exited {
        s.exit_code
    } else {
        None
    };
    Outcome {
        class,
        reason: None,
        needs_human: false,
        exit_code: exit,
        signal,
        runner_exit_code: exit_code::for_outcome(class, exit, signal),
        message,
    }
}
