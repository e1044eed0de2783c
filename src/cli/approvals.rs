//! `approve --file APPROVALS.toml` (CONTRACT §10): approvals as code.
//!
//! Each entry of the reviewed file becomes the `ApproveArgs` that `approve
//! -- CMD` would get from the same flags and goes through the same
//! `approve::lease_body`, so a file's lease is byte for byte the command
//! line's (only the id and the times differ). Every entry is resolved
//! before anything is written; then one combined summary, then every lease
//! is signed and written in one manifest update under the manifest lock
//! (all or nothing: a failing entry is named and nothing is written).
//!
//! An entry is recognised in the manifest by its request identity (Goal
//! id, request and workspace binding), the test supersession already uses,
//! not by its name: the name is a label of the file, and putting it into
//! the signed lease would make the file's lease differ from the command
//! line's for the same approval. So a lease approved by hand for the same
//! request is the entry's lease, `--check` can say `unchanged` of it, and
//! re-approving either one supersedes the other. Renaming an entry changes
//! nothing; changing its `run`, `cwd` or `profile` makes it a new request
//! (`new`, and the old lease `only in manifest` until `--prune`).
//!
//! `--check` and `--prune` look at the live leases of the Goals the file
//! names: a manifest may hold other Goals' leases, which the file does not
//! own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::cli::approve::{self, ApproveArgs, LimitOverrides};
use crate::cli::args::{ApproveCmd, CheckFormat};
use governed_evidence::{escape, sign};
use governed_model::approvals::{self as file_shape, Entry, NumberOrText};
use governed_model::limits::{parse_duration, parse_max_processes, parse_size};
use governed_model::{goal, LeaseBody, Manifest, Revocation, Syscalls};
use governed_runner::gate::lease;
use governed_runner::process::isolation::any_isolation;

/// Bound on an approvals file's size.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The fault-injection point after the third entry's lease was added to the
/// manifest in memory (a crash there must leave the manifest unchanged).
pub const FAULT_AFTER_THIRD: &str = "approvals_after_third_entry";

#[derive(Debug, thiserror::Error)]
pub enum ApprovalsError {
    #[error("approvals file {file}: {message}")]
    File { file: String, message: String },
    #[error("approvals file {file}: entry {entry} (line {line}): {message}")]
    Entry {
        file: String,
        entry: String,
        line: usize,
        message: String,
    },
    #[error(transparent)]
    Approve(#[from] approve::ApproveError),
    #[error(transparent)]
    Manifest(#[from] lease::ManifestError),
    #[error(transparent)]
    Ledger(#[from] governed_ledger::LedgerSpecError),
    #[error("lease {id} is revoked in {manifest} but not yet in its ledger {ledger}: {source}; run `revoke --lease {id}` once the ledger is reachable")]
    NotYetRevoked {
        id: String,
        manifest: String,
        ledger: String,
        #[source]
        source: governed_ledger::LedgerError,
    },
    #[error(transparent)]
    Out(#[from] crate::cli::out::OutError),
}

/// An entry's `key` whose value does not parse (a duration, size or
/// process limit), with the parser's words.
fn value<E: std::fmt::Display>(key: &'static str) -> impl Fn(E) -> FieldError {
    move |e| FieldError::Value {
        key,
        message: e.to_string(),
    }
}

/// One entry, resolved on this machine.
struct Resolved {
    label: String,
    line: usize,
    ttl: Duration,
    body: LeaseBody,
}

/// `approve --file`: approve (or with `--check` compare) every entry.
/// `Ok(false)` only from `--check`: file and manifest differ.
pub fn main(a: &ApproveCmd) -> Result<bool, ApprovalsError> {
    let Some(path) = a.file.as_deref() else {
        return Err(approve::ApproveError::Missing("--file").into());
    };
    let shown = escape::visible(&path.display().to_string());
    let file_err = |message: String| ApprovalsError::File {
        file: shown.clone(),
        message,
    };
    let bytes = governed_sys::safe_io::read_bounded(path, MAX_FILE_BYTES)
        .map_err(|e| file_err(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| file_err("not UTF-8 text".into()))?;
    let parsed =
        file_shape::parse(&text).map_err(|e| match file_shape::entry_at(&text, e.line) {
            Some((i, _, name)) => ApprovalsError::Entry {
                file: shown.clone(),
                entry: name.map_or_else(|| format!("#{}", i + 1), |n| escape::quoted(&n)),
                line: e.line,
                message: e.message,
            },
            None => file_err(e.to_string()),
        })?;
    if parsed.file.command.is_empty() {
        return Err(file_err(
            "no [[command]] entries: nothing to approve".into(),
        ));
    }
    let base = path
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let resolved = resolve_all(a, &parsed, &text, &base, &shown)?;
    if a.check {
        return check(a, &resolved, &shown);
    }
    approve_all(a, &resolved, &shown).map(|()| true)
}

/// `e`'s label: its name, else its position.
fn label(e: &Entry, i: usize) -> String {
    e.name
        .as_deref()
        .map_or_else(|| format!("#{}", i + 1), escape::quoted)
}

/// Resolve every entry; the first failure names its entry and line.
fn resolve_all(
    a: &ApproveCmd,
    parsed: &file_shape::Parsed,
    text: &str,
    base: &Path,
    shown: &str,
) -> Result<Vec<Resolved>, ApprovalsError> {
    // Names first: a duplicate is a fault of the file, whatever resolves.
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, e) in parsed.file.command.iter().enumerate() {
        let line = parsed.lines.get(i).copied().unwrap_or(1);
        let Some(n) = e.name.as_deref() else { continue };
        if let Some(first) = names.insert(n, line) {
            return Err(ApprovalsError::Entry {
                file: shown.to_string(),
                entry: label(e, i),
                line,
                message: format!("duplicate name: the entry at line {first} has the same name"),
            });
        }
    }
    let mut goals: BTreeMap<PathBuf, goal::LoadedGoal> = BTreeMap::new();
    let mut out: Vec<Resolved> = Vec::new();
    let now = SystemTime::now();
    for (i, e) in parsed.file.command.iter().enumerate() {
        let line = parsed.lines.get(i).copied().unwrap_or(1);
        let err = |line: usize, message: String| ApprovalsError::Entry {
            file: shown.to_string(),
            entry: label(e, i),
            line,
            message,
        };
        let args = entry_args(a, &parsed.file, e, base).map_err(|f| {
            let at = f
                .key()
                .map_or(line, |k| file_shape::key_line(text, line, k));
            err(at, f.to_string())
        })?;
        if !goals.contains_key(&args.goal) {
            let g = governed_evidence::goal_file::load(&args.goal)
                .map_err(|m| err(line, m.to_string()))?;
            goals.insert(args.goal.clone(), g);
        }
        let Some(g) = goals.get(&args.goal) else {
            return Err(err(line, "goal not loaded".into()));
        };
        let request = approve::request_of(&args).map_err(|m| err(line, m.to_string()))?;
        let body =
            approve::lease_body(&args, g, request, now).map_err(|m| err(line, m.to_string()))?;
        if let Some(twin) = out.iter().find(|r| approve::same_approval(&r.body, &body)) {
            return Err(err(
                line,
                format!(
                    "approves the same request as entry {} (line {}): one lease answers a request",
                    twin.label, twin.line
                ),
            ));
        }
        out.push(Resolved {
            label: label(e, i),
            line,
            ttl: args.ttl,
            body,
        });
    }
    Ok(out)
}

/// A path named in the file: absolute, or relative to the file's directory.
fn from_file(base: &Path, p: &str) -> PathBuf {
    base.join(p)
}

/// Why one entry's values cannot be `approve` flags.
#[derive(Debug, thiserror::Error)]
pub enum FieldError {
    #[error("`{key}`: {message}")]
    Value { key: &'static str, message: String },
    #[error("`{key}` is {in_file} in the file but --{key} names {flag}; keep one")]
    Twice {
        key: &'static str,
        in_file: String,
        flag: String,
    },
    #[error("no `{key}`: name it in the file or with --{key}")]
    Missing { key: &'static str },
    #[error("`run` is empty: it needs at least the executable")]
    EmptyRun,
}

impl FieldError {
    /// The key whose line the error points at, when one key is at fault.
    fn key(&self) -> Option<&'static str> {
        match self {
            FieldError::Value { key, .. } => Some(key),
            FieldError::EmptyRun => Some("run"),
            _ => None,
        }
    }
}

/// The `approve` flags one entry stands for, defaults applied.
fn entry_args(
    a: &ApproveCmd,
    f: &file_shape::ApprovalsFile,
    e: &Entry,
    base: &Path,
) -> Result<ApproveArgs, FieldError> {
    let pick = |entry: &Option<String>,
                top: &Option<String>,
                flag: &Option<PathBuf>,
                key: &'static str| {
        match (entry.as_ref().or(top.as_ref()), flag) {
            // Both may name it only when they name the same thing.
            (Some(p), Some(flag)) => {
                let in_file = from_file(base, p);
                match (in_file.canonicalize(), flag.canonicalize()) {
                    (Ok(x), Ok(y)) if x == y => Ok(in_file),
                    _ => Err(FieldError::Twice {
                        key,
                        in_file: in_file.display().to_string(),
                        flag: flag.display().to_string(),
                    }),
                }
            }
            (Some(p), None) => Ok(from_file(base, p)),
            (None, Some(p)) => Ok(p.clone()),
            (None, None) => Err(FieldError::Missing { key }),
        }
    };
    let goal = pick(&e.goal, &f.goal, &a.goal, "goal")?;
    let workspace = pick(&e.workspace, &f.workspace, &a.workspace, "workspace")?;
    let duration = |key: &'static str, v: &Option<String>| {
        v.as_deref()
            .map(|s| parse_duration(s).map_err(value(key)))
            .transpose()
    };
    let size = |key: &'static str, v: &Option<NumberOrText>| {
        v.as_ref()
            .map(|s| parse_size(&s.text()).map_err(value(key)))
            .transpose()
    };
    let ttl_text = e.ttl.clone().or_else(|| f.ttl.clone());
    let ttl = duration("ttl", &ttl_text)?.unwrap_or(Duration::from_secs(15 * 60));
    if e.run.is_empty() {
        return Err(FieldError::EmptyRun);
    }
    let ledger = e.ledger.clone().or_else(|| f.ledger.clone()).map(|l| {
        if l.starts_with("postgres://") || l.starts_with("postgresql://") {
            l
        } else {
            from_file(base, &l).display().to_string()
        }
    });
    Ok(ApproveArgs {
        goal,
        workspace,
        manifest: a.manifest.clone(),
        key: a.key.clone().unwrap_or_default(),
        ttl,
        uses: e.uses.or(f.uses).unwrap_or(1),
        approver: a.approver.clone(),
        profile: e.profile.or(f.profile),
        cwd: e.cwd.clone(),
        limits: LimitOverrides {
            wall_time: duration("wall_time", &e.wall_time)?,
            kill_grace: duration("kill_grace", &e.kill_grace)?,
            cancel_grace: duration("cancel_grace", &e.cancel_grace)?,
            cpu_time: duration("cpu_time", &e.cpu_time)?,
            memory: size("memory", &e.memory)?,
            max_processes: e
                .max_processes
                .as_ref()
                .map(|m| parse_max_processes(&m.text()).map_err(value("max_processes")))
                .transpose()?,
            max_open_files: e.max_open_files,
            max_file_size: size("max_file_size", &e.max_file_size)?,
            keep_output: size("keep_output", &e.keep_output)?,
            output_cap: size("output_cap", &e.output_cap)?,
        },
        env: e.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        as_user: e.as_user.as_ref().map(NumberOrText::text),
        fs_write: e.fs_write.iter().map(|p| from_file(base, p)).collect(),
        fs_write_scope: e.fs_write_scope,
        fs_read: e.fs_read.iter().map(|p| from_file(base, p)).collect(),
        no_network: e.no_network,
        allow_net: e.allow_net.clone().unwrap_or_default(),
        daemon_sockets: e.daemon_socket.clone().unwrap_or_default(),
        pid_namespace: e.pid_namespace,
        syscalls: e.syscalls,
        max_executable_size: a.max_executable_size,
        request: None,
        command: e.run.clone(),
        portable: e.portable.or(f.portable).unwrap_or(false),
        ledger,
        resolve_only: a.check,
        ledger_owner: None,
        pending: None,
    })
}

/// The manifest as it is now; absent is empty.
fn current_manifest(path: &Path) -> Result<Option<Manifest>, ApprovalsError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => Ok(Some(lease::load_manifest(path)?)),
    }
}

/// The live lease of `m` that answers `body`'s request.
fn lease_for<'m>(m: &'m Manifest, body: &LeaseBody) -> Option<&'m LeaseBody> {
    approve::live_leases(m).find(|old| approve::same_approval(old, body))
}

/// Live leases of the file's Goals that no entry answers.
fn only_in_manifest<'m>(m: &'m Manifest, entries: &[&LeaseBody]) -> Vec<&'m LeaseBody> {
    let goals: BTreeSet<&str> = entries.iter().map(|b| b.goal.id.as_str()).collect();
    approve::live_leases(m)
        .filter(|old| goals.contains(old.goal.id.as_str()))
        .filter(|old| !entries.iter().any(|b| approve::same_approval(old, b)))
        .collect()
}

fn argv_text(b: &LeaseBody) -> String {
    std::iter::once(&b.request.executable)
        .chain(&b.request.argv)
        .map(|s| escape::quoted(s))
        .collect::<Vec<_>>()
        .join(" ")
}

fn approve_all(a: &ApproveCmd, resolved: &[Resolved], shown: &str) -> Result<(), ApprovalsError> {
    let key_path = a
        .key
        .as_deref()
        .ok_or(approve::ApproveError::Missing("--key"))?;
    let key = sign::load_signing_key(key_path).map_err(approve::ApproveError::Key)?;
    let before = current_manifest(&a.manifest)?;
    let text = combined_summary(resolved, before.as_ref(), shown);
    eprint!("{text}");

    let sealed: Vec<_> = resolved
        .iter()
        .map(|r| lease::seal(r.body.clone(), &key))
        .collect();
    let prune_by = format!(
        "{} (approve --file {shown} --prune: no entry approves it any more)",
        resolved
            .first()
            .map_or_else(String::new, |r| r.body.approver.clone())
    );
    let bodies: Vec<&LeaseBody> = resolved.iter().map(|r| &r.body).collect();
    let (replaced, pruned) = lease::update_manifest(&a.manifest, true, |m| {
        // Under the lock: what the manifest holds now decides what is
        // pruned, listed before anything is written.
        let pruned = prunable(m, &bodies, a.prune);
        let mut replaced = Vec::new();
        for (i, s) in sealed.iter().enumerate() {
            replaced.push(approve::supersede(m, &s.body));
            m.leases.push(s.clone());
            if i == 2 {
                governed_fault::point(FAULT_AFTER_THIRD);
            }
        }
        let at = governed_ledger::journal::now_rfc3339();
        for (id, _, _) in &pruned {
            m.revocations.push(Revocation {
                lease_id: id.clone(),
                by: prune_by.clone(),
                at: at.clone(),
            });
        }
        (replaced, pruned)
    })?;
    for (s, old) in sealed.iter().zip(&replaced) {
        approve::report_superseded(&a.manifest, &s.body.lease_id, &s.body.goal.id, old)?;
    }
    revoke_pruned(a, &pruned, &prune_by)?;
    eprintln!(
        "approved: {} lease(s) added to {} in one write{}",
        sealed.len(),
        escape::visible(&a.manifest.display().to_string()),
        if pruned.is_empty() {
            String::new()
        } else {
            format!(", {} pruned", pruned.len())
        }
    );
    let mut out = String::new();
    for (s, r) in sealed.iter().zip(resolved) {
        out.push_str(&format!(
            "{} {}\n",
            s.body.lease_id,
            escape::visible(&r.label)
        ));
    }
    Ok(crate::out!("{out}")?)
}

/// The summary of every entry (with its toolchain updates against the lease
/// it replaces) and the table closing it.
fn combined_summary(resolved: &[Resolved], before: Option<&Manifest>, shown: &str) -> String {
    let mut text = format!(
        "governed-exec: approvals file {shown}: {} entr{}\n",
        resolved.len(),
        if resolved.len() == 1 { "y" } else { "ies" }
    );
    for r in resolved {
        text.push_str(&format!("\nentry {} (line {})\n", r.label, r.line));
        text.push_str(&approve::summary(&r.body, r.ttl));
        if let Some(old) = before.and_then(|m| lease_for(m, &r.body)) {
            for l in crate::cli::toolchain::update_lines(old, &r.body) {
                text.push_str(&format!("  {:<13} {}\n", "toolchain", escape::visible(&l)));
            }
        }
    }
    text.push_str(&table(resolved, before));
    text
}

/// A lease `--prune` revokes: its id, its Goal id, and the ledger it names.
type Pruned = (String, String, Option<String>);

/// The live leases of the manifest no entry approves any more (none
/// without `--prune`), each listed as it is pruned.
fn prunable(m: &Manifest, bodies: &[&LeaseBody], prune: bool) -> Vec<Pruned> {
    let pruned: Vec<Pruned> = if prune {
        only_in_manifest(m, bodies)
            .into_iter()
            .map(|b| (b.lease_id.clone(), b.goal.id.clone(), b.ledger.clone()))
            .collect()
    } else {
        vec![]
    };
    for (id, _, _) in &pruned {
        let argv = m
            .leases
            .iter()
            .find(|l| &l.body.lease_id == id)
            .map(|l| argv_text(&l.body))
            .unwrap_or_default();
        eprintln!(
            "  {:<13} lease {id} [{}]: no entry of the file approves it",
            "prune",
            escape::visible(&argv)
        );
    }
    pruned
}

/// A pruned lease that names a ledger is revoked there too (as `revoke`
/// does), so an old manifest copy cannot bring it back.
fn revoke_pruned(a: &ApproveCmd, pruned: &[Pruned], prune_by: &str) -> Result<(), ApprovalsError> {
    for (id, goal_id, named) in pruned {
        let Some(named) = named else { continue };
        let l = governed_ledger::LedgerSpec::parse(named)?.open();
        governed_ledger::revoke(&*l, goal_id, id, prune_by).map_err(|source| {
            ApprovalsError::NotYetRevoked {
                id: id.clone(),
                manifest: escape::visible(&a.manifest.display().to_string()),
                ledger: escape::visible(&l.name()),
                source,
            }
        })?;
    }
    Ok(())
}

/// The short table closing the combined summary.
fn table(resolved: &[Resolved], before: Option<&Manifest>) -> String {
    let mut t = format!(
        "\n  {:<16} {:<9} {:<8} {:<6} {:<14} {:<10} {}\n",
        "ENTRY", "PROFILE", "TTL", "USES", "SHA256", "STATE", "COMMAND"
    );
    for r in resolved {
        let b = &r.body;
        let state = match before.and_then(|m| lease_for(m, b)) {
            None => "new",
            Some(old) if old.executable.sha256 != b.executable.sha256 => "replaces*",
            Some(_) => "replaces",
        };
        t.push_str(&format!(
            "  {:<16} {:<9} {:<8} {:<6} {:<14} {:<10} {}\n",
            r.label,
            b.request.profile.to_string(),
            humantime::format_duration(r.ttl).to_string(),
            b.max_uses,
            b.executable.sha256.get(..12).unwrap_or_default(),
            state,
            argv_text(b)
        ));
    }
    if t.contains("replaces*") {
        t.push_str("  (* the executable's bytes changed since the lease it replaces: see `toolchain` above)\n");
    }
    escape::visible_lines(&t)
}

/// What `--check` says of one entry or lease.
enum Status<'a> {
    Unchanged(&'a LeaseBody),
    New,
    Changed(&'a LeaseBody, Vec<Change>),
}

/// One difference as `--check` shows it: `(field, old, new, widening)`.
type Change = (String, String, String, bool);

/// How a widening change is marked, in text and markdown alike.
const WIDENING: &str = " (widening)";

fn flat(b: &LeaseBody) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    flatten("", &comparable(b), &mut out);
    out
}

/// The lease's TTL as its issue and expiry times say.
fn lease_ttl(b: &LeaseBody) -> Option<Duration> {
    let issued = humantime::parse_rfc3339(&b.issued_at).ok()?;
    let expires = humantime::parse_rfc3339(&b.expires_at).ok()?;
    expires.duration_since(issued).ok()
}

/// Whether the difference in `key` between the lease `old` and the entry
/// resolved now (`new`, approved for `ttl`) grants the child more: an
/// isolation option dropped, a larger limit, a new network host, the root
/// uid, more uses or a longer life.
pub fn widens(key: &str, old: &LeaseBody, new: &LeaseBody, ttl: Duration) -> bool {
    use serde_json::Value;
    let (fo, fnew) = (flat(old), flat(new));
    let null = Value::Null;
    let o = fo.get(key).unwrap_or(&null);
    let n = fnew.get(key).unwrap_or(&null);
    // `b` holds an item `a` does not.
    let more = |a: &Value, b: &Value| match (a.as_array(), b.as_array()) {
        (Some(a), Some(b)) => b.iter().any(|x| !a.contains(x)),
        (None, Some(b)) => !b.is_empty(),
        _ => false,
    };
    let larger = |o: &Value, n: &Value| match (o.as_u64(), n.as_u64()) {
        (Some(o), Some(n)) => n > o,
        (Some(_), None) => n.as_str() == Some("unlimited"),
        _ => false,
    };
    let (oi, ni) = (&old.isolation, &new.isolation);
    match key {
        "isolation.no_network" | "isolation.pid_namespace" => {
            *o == Value::Bool(true) && *n != Value::Bool(true)
        }
        k if k.starts_with("isolation.as_user") => match (oi.as_user, ni.as_user) {
            (Some(o), None) => o.uid != 0,
            (Some(o), Some(n)) => o.uid != 0 && n.uid == 0,
            _ => false,
        },
        "isolation.fs_write" | "isolation.fs_read" => !o.is_null() && (n.is_null() || more(o, n)),
        "isolation.syscalls" => {
            n.as_str() == Some("unconfined") || (o.as_str() == Some("default") && n.is_null())
        }
        "isolation.allow_net" => {
            let limited = oi.no_network || !oi.allow_net.is_empty();
            (limited && more(o, n))
                || (!oi.allow_net.is_empty() && ni.allow_net.is_empty() && !ni.no_network)
        }
        "isolation.daemon_sockets" => more(n, o),
        k if k.starts_with("limits.") => larger(o, n),
        "max_uses" => larger(o, n),
        "ttl" => lease_ttl(old).is_some_and(|d| ttl > d),
        "binding" => o.is_null() && n.as_str() == Some("portable"),
        _ => false,
    }
}

/// A new entry's whole grant, as `(field, value)`: the child's uid and
/// every isolation option, the limits that differ from the profile's tier,
/// the uses, the TTL, the environment and where its uses are counted.
fn grant(b: &LeaseBody, ttl: Duration) -> Vec<(String, String)> {
    let f = flat(b);
    let profile = b.request.profile;
    let mut tier = BTreeMap::new();
    flatten(
        "limits",
        &serde_json::to_value(governed_model::limits::tier(profile)).unwrap_or_default(),
        &mut tier,
    );
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in f.iter().filter(|(k, _)| k.starts_with("isolation.")) {
        let shown = match (k.as_str(), v.is_null()) {
            ("isolation.as_user", true) => "none (the runner's uid)".to_string(),
            ("isolation.fs_write", true) => "none (writes not scoped)".to_string(),
            ("isolation.fs_read", true) => "none (reads everywhere)".to_string(),
            ("isolation.fs_write", false) => format!(
                "{} (writes only in the workspace, its private HOME and TMPDIR, and these)",
                shown_value(k, v)
            ),
            _ => shown_value(k, v),
        };
        out.push((k.clone(), shown));
    }
    for (k, v) in f.iter().filter(|(k, _)| k.starts_with("limits.")) {
        if tier.get(k) != Some(v) {
            let of_tier = tier
                .get(k)
                .map_or_else(|| "(absent)".to_string(), |t| shown_value(k, t));
            out.push((
                k.clone(),
                format!("{} (tier {profile}: {of_tier})", shown_value(k, v)),
            ));
        }
    }
    for k in ["max_uses", "binding", "ledger"] {
        if let Some(v) = f.get(k) {
            out.push((k.to_string(), shown_value(k, v)));
        }
    }
    out.push((
        "ttl".to_string(),
        humantime::format_duration(ttl).to_string(),
    ));
    for (k, v) in f.iter().filter(|(k, _)| k.starts_with("env.")) {
        let shown = if v.as_object().is_some_and(|o| o.is_empty()) {
            "none".to_string()
        } else {
            shown_value(k, v)
        };
        out.push((k.clone(), shown));
    }
    out
}

/// The fields in which the lease `old` grants something else than the
/// entry resolved now: `(field, old, new)`. Ids, times and the approver's
/// name are the act of approving, not what is approved; a portable lease
/// is compared on what a portable run checks (the executable's path in
/// `portable`, mode, size and digest; not this machine's absolute paths,
/// inodes or timestamps), so a CI job on another runner can check it.
pub fn differences(
    old: &LeaseBody,
    new: &LeaseBody,
    ttl: Duration,
    now: SystemTime,
) -> Vec<(String, String, String)> {
    let mut flat_old = BTreeMap::new();
    let mut flat_new = BTreeMap::new();
    flatten("", &comparable(old), &mut flat_old);
    flatten("", &comparable(new), &mut flat_new);
    let keys: BTreeSet<&String> = flat_old.keys().chain(flat_new.keys()).collect();
    let absent = || "(absent)".to_string();
    let mut out: Vec<(String, String, String)> = keys
        .into_iter()
        .filter(|k| flat_old.get(*k) != flat_new.get(*k))
        .map(|k| {
            let show = |m: &BTreeMap<String, serde_json::Value>| {
                m.get(k).map_or_else(absent, |v| shown_value(k, v))
            };
            (k.clone(), show(&flat_old), show(&flat_new))
        })
        .collect();
    let issued = humantime::parse_rfc3339(&old.issued_at).ok();
    let expires = humantime::parse_rfc3339(&old.expires_at).ok();
    let old_ttl = issued
        .zip(expires)
        .and_then(|(i, e)| e.duration_since(i).ok());
    if old_ttl != Some(ttl) {
        out.push((
            "ttl".into(),
            old_ttl.map_or_else(absent, |d| humantime::format_duration(d).to_string()),
            humantime::format_duration(ttl).to_string(),
        ));
    }
    if expires.is_some_and(|e| e <= now) {
        out.push((
            "valid".into(),
            format!("expired at {}", old.expires_at),
            format!("{} from approval", humantime::format_duration(ttl)),
        ));
    }
    out
}

/// A lease body as JSON without what the act of approving sets.
fn comparable(b: &LeaseBody) -> serde_json::Value {
    let mut v = serde_json::to_value(b).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        for k in ["lease_id", "issued_at", "expires_at", "approver"] {
            o.remove(k);
        }
        if b.portable.is_some() {
            for (part, keys) in [
                (
                    "executable",
                    &[
                        "canonical_path",
                        "symlink_chain",
                        "device",
                        "inode",
                        "mtime_ns",
                        "ctime_ns",
                    ][..],
                ),
                ("workspace", &["device", "inode", "creation", "path"][..]),
                ("cwd", &["device", "inode", "creation", "path"][..]),
            ] {
                if let Some(p) = o.get_mut(part).and_then(|p| p.as_object_mut()) {
                    for k in keys {
                        p.remove(*k);
                    }
                }
            }
        }
        // An isolated lease signed before `syscalls` existed means the
        // policy, as `run` reads it: the same lease as one that says so.
        if let Some(iso) = o.get_mut("isolation").and_then(|i| i.as_object_mut()) {
            if b.isolation.syscalls.is_none() && any_isolation(&b.isolation) {
                iso.insert("syscalls".into(), Syscalls::Default.as_str().into());
            }
        }
    }
    v
}

fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, serde_json::Value>) {
    match v {
        serde_json::Value::Object(o) if !o.is_empty() => {
            for (k, v) in o {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        _ => {
            out.insert(prefix.to_string(), v.clone());
        }
    }
}

/// A value as a reviewer reads it: timestamps in RFC 3339, text quoted and
/// in printable ASCII.
fn shown_value(key: &str, v: &serde_json::Value) -> String {
    if key.ends_with("time_ns") {
        if let Some(ns) = v.as_u64() {
            return humantime::format_rfc3339_nanos(
                std::time::UNIX_EPOCH + Duration::from_nanos(ns),
            )
            .to_string();
        }
    }
    if let Some(n) = v.as_u64() {
        let size = governed_model::limits::format_size(n);
        if (key.ends_with("_bytes") || key == "executable.size") && !size.ends_with("bytes") {
            return format!("{n} ({size})");
        }
        if key.ends_with("_ms") {
            return format!("{n} ({})", governed_model::limits::format_ms(n));
        }
    }
    // Every character outside printable ASCII is escaped (the backslashes of
    // the value already are, by `quoted` or JSON): a homoglyph swapped in
    // for a letter is a visible change, never one that reads as none.
    escape::ascii(&match v {
        serde_json::Value::String(s) => escape::quoted(s),
        other => other.to_string(),
    })
}

fn check(a: &ApproveCmd, resolved: &[Resolved], shown: &str) -> Result<bool, ApprovalsError> {
    let manifest = current_manifest(&a.manifest)?.unwrap_or_else(|| Manifest {
        schema: governed_model::MANIFEST_SCHEMA.to_string(),
        leases: vec![],
        revocations: vec![],
        superseded: vec![],
        foreign: vec![],
    });
    let now = SystemTime::now();
    let statuses: Vec<Status> = resolved
        .iter()
        .map(|r| match lease_for(&manifest, &r.body) {
            None => Status::New,
            Some(old) => {
                let d: Vec<Change> = differences(old, &r.body, r.ttl, now)
                    .into_iter()
                    .map(|(k, o, n)| {
                        let w = widens(&k, old, &r.body, r.ttl);
                        (k, o, n, w)
                    })
                    .collect();
                if d.is_empty() {
                    Status::Unchanged(old)
                } else {
                    Status::Changed(old, d)
                }
            }
        })
        .collect();
    let bodies: Vec<&LeaseBody> = resolved.iter().map(|r| &r.body).collect();
    let only = only_in_manifest(&manifest, &bodies);
    let agree = only.is_empty() && statuses.iter().all(|s| matches!(s, Status::Unchanged(_)));
    let manifest_shown = escape::visible(&a.manifest.display().to_string());
    let text = match a.format.unwrap_or(CheckFormat::Text) {
        CheckFormat::Text => check_text(resolved, &statuses, &only, shown, &manifest_shown, agree),
        CheckFormat::Markdown => {
            check_markdown(resolved, &statuses, &only, shown, &manifest_shown, agree)
        }
    };
    crate::out!("{text}")?;
    Ok(agree)
}

fn check_text(
    resolved: &[Resolved],
    statuses: &[Status],
    only: &[&LeaseBody],
    file: &str,
    manifest: &str,
    agree: bool,
) -> String {
    let mut t = String::new();
    for (r, s) in resolved.iter().zip(statuses) {
        let cmd = argv_text(&r.body);
        match s {
            Status::Unchanged(old) => t.push_str(&format!(
                "unchanged         {}  [{cmd}]  lease {}\n",
                r.label, old.lease_id
            )),
            Status::New => {
                t.push_str(&format!("new               {}  [{cmd}]\n", r.label));
                for (k, v) in grant(&r.body, r.ttl) {
                    t.push_str(&format!("    {k}: {v}\n"));
                }
            }
            Status::Changed(old, diffs) => {
                t.push_str(&format!(
                    "changed           {}  [{cmd}]  lease {}\n",
                    r.label, old.lease_id
                ));
                for (k, o, n, w) in diffs {
                    let mark = if *w { WIDENING } else { "" };
                    t.push_str(&format!("    {k}: {o} → {n}{mark}\n"));
                }
                for l in crate::cli::toolchain::update_lines(old, &r.body) {
                    t.push_str(&format!("    toolchain: {l}\n"));
                }
            }
        }
    }
    for b in only {
        t.push_str(&format!(
            "only in manifest  lease {}  [{}]  goal {}\n",
            b.lease_id,
            argv_text(b),
            escape::quoted(&b.goal.id)
        ));
    }
    t.push_str(&if agree {
        format!("agree: {file} and {manifest}\n")
    } else {
        format!(
            "differ: {file} and {manifest} (approve --file to sign the file's state{})\n",
            if only.is_empty() {
                ""
            } else {
                "; --prune to revoke what only the manifest holds"
            }
        )
    });
    escape::visible_lines(&t)
}

/// One piece of text in the markdown view: the receipt view's escaping, so
/// no value of the reviewed file (a `|`, a backtick, `<details>`, a newline,
/// a leading `#`) can change how the table renders.
fn md(s: &str) -> String {
    escape::markdown_cell(s)
}

fn check_markdown(
    resolved: &[Resolved],
    statuses: &[Status],
    only: &[&LeaseBody],
    file: &str,
    manifest: &str,
    agree: bool,
) -> String {
    let mut t = format!(
        "### Approvals: {} {} and {}\n\n| status | entry | command | lease | what changes |\n|---|---|---|---|---|\n",
        if agree { "agree" } else { "differ" },
        md(file),
        md(manifest)
    );
    for (r, s) in resolved.iter().zip(statuses) {
        let cmd = md(&argv_text(&r.body));
        let (status, lease, what) = match s {
            Status::Unchanged(old) => ("unchanged", md(&old.lease_id), String::new()),
            Status::New => {
                let parts: Vec<String> = grant(&r.body, r.ttl)
                    .iter()
                    .map(|(k, v)| format!("{}: {}", md(&escape::ascii(k)), md(v)))
                    .collect();
                ("new", String::new(), parts.join("<br>"))
            }
            Status::Changed(old, diffs) => {
                // `<br>` is the view's own markup, between escaped pieces.
                let mut parts: Vec<String> = diffs
                    .iter()
                    .map(|(k, o, n, w)| {
                        format!(
                            "{}: {} → {}{}",
                            md(&escape::ascii(k)),
                            md(o),
                            md(n),
                            if *w { WIDENING } else { "" }
                        )
                    })
                    .collect();
                let tc = crate::cli::toolchain::update_lines(old, &r.body);
                if !tc.is_empty() {
                    parts.push(format!("toolchain: {}", md(&tc.join("; "))));
                }
                ("changed", md(&old.lease_id), parts.join("<br>"))
            }
        };
        t.push_str(&format!(
            "| {status} | {} | {cmd} | {lease} | {what} |\n",
            md(&r.label)
        ));
    }
    for b in only {
        t.push_str(&format!(
            "| only in manifest | | {} | {} | revoked by --prune |\n",
            md(&argv_text(b)),
            md(&b.lease_id)
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use governed_model::{Binding, PortableIdentity};

    fn at(rfc3339: &str) -> SystemTime {
        humantime::parse_rfc3339(rfc3339).unwrap()
    }

    #[test]
    fn the_same_grant_approved_again_has_no_differences() {
        let body = governed_testkit::fixtures::lease_body();
        let mut again = body.clone();
        again.lease_id = "lease-2".into();
        again.issued_at = "2026-01-01T00:10:00Z".into();
        again.expires_at = "2026-01-01T00:25:00Z".into();
        again.approver = "bob".into();
        let ttl = Duration::from_secs(900);
        assert!(differences(&body, &again, ttl, at("2026-01-01T00:05:00Z")).is_empty());
    }

    #[test]
    fn limits_ttl_and_expiry_are_differences_shown_for_a_reader() {
        let body = governed_testkit::fixtures::lease_body();
        let mut new = body.clone();
        new.limits.memory_bytes = 512 * 1024 * 1024;
        new.limits.wall_time_ms = 90_000;
        let d = differences(
            &body,
            &new,
            Duration::from_secs(3600),
            at("2026-01-02T00:00:00Z"),
        );
        let keys: Vec<&str> = d.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["limits.memory_bytes", "limits.wall_time_ms", "ttl", "valid"]
        );
        assert_eq!(d[0].2, "536870912 (512 MiB)");
        assert_eq!(d[1].2, "90000 (1m 30s)");
        assert_eq!((d[2].1.as_str(), d[2].2.as_str()), ("15m", "1h"));
        assert_eq!(d[3].1, "expired at 2026-01-01T00:15:00Z");
    }

    #[test]
    fn a_portable_lease_is_compared_on_what_a_portable_run_checks() {
        let body = governed_testkit::fixtures::lease_body();
        let mut old = body.clone();
        old.binding = Binding::Portable;
        old.portable = Some(PortableIdentity {
            executable_path: "/usr/bin/dash".into(),
            in_workspace: false,
            mode: old.executable.mode,
            sha256: old.executable.sha256.clone(),
        });
        let mut other_runner = old.clone();
        other_runner.executable.inode = 99;
        other_runner.executable.mtime_ns = 1;
        other_runner.workspace.path = "/elsewhere".into();
        other_runner.cwd.path = "/elsewhere".into();
        let now = at("2026-01-01T00:05:00Z");
        let ttl = Duration::from_secs(900);
        assert!(differences(&old, &other_runner, ttl, now).is_empty());
        other_runner.executable.sha256 = "ef".repeat(32);
        let keys: Vec<String> = differences(&old, &other_runner, ttl, now)
            .into_iter()
            .map(|(k, _, _)| k)
            .collect();
        assert_eq!(keys, ["executable.sha256"]);
    }
}
