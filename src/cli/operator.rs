//! The operator's commands: `keygen`, `journal`, `receipt show`, `resolve`,
//! `revoke`. All take flags, never prompt, and reject ids they do not know.

use std::path::Path;

use crate::cli::args::ReceiptFormat;
use governed_evidence::{escape, receipt, sign, view};
use governed_ledger as ledger;
use governed_ledger::journal::{self, Classification, Event};
use governed_ledger::Ledger;
pub use governed_ledger::OperatorError;
use governed_runner::gate::lease;

/// Why `keygen`, `receipt show` or `journal` failed: a usage error (exit 2)
/// with the cause's own words.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Key(#[from] sign::KeyError),
    #[error(transparent)]
    Receipt(#[from] receipt::ReceiptError),
    #[error(transparent)]
    Parse(#[from] governed_model::ParseError),
    #[error("receipt {0}: the statement has no `predicate` object")]
    NoPredicate(String),
    #[error(transparent)]
    Ledger(#[from] governed_ledger::LedgerError),
    /// A chain of the ledger that does not read (its own words).
    #[error(transparent)]
    Chain(governed_ledger::BrokenChain),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Out(#[from] crate::cli::out::OutError),
}

pub fn keygen(prefix: &Path) -> Result<(), CommandError> {
    let key = sign::generate()?;
    let mut k = prefix.as_os_str().to_os_string();
    k.push(".key");
    let mut p = prefix.as_os_str().to_os_string();
    p.push(".pub");
    sign::write_keypair(&key, Path::new(&k), Path::new(&p))?;
    eprintln!(
        "wrote {} (0600) and {}; key id {}",
        Path::new(&k).display(),
        Path::new(&p).display(),
        sign::keyid(&key.verifying_key())
    );
    Ok(())
}

pub fn receipt_show(path: &Path, format: ReceiptFormat) -> Result<(), CommandError> {
    let env = receipt::read_envelope(path)?;
    if format == ReceiptFormat::Json {
        let stmt = receipt::decode_statement(&env)?;
        crate::outln!("{}", serde_json::to_string_pretty(&stmt)?)?;
        return Ok(());
    }
    // The human views read plain JSON, so a field added by another release
    // is shown instead of failing the view.
    let payload = sign::b64_decode(&env.payload).ok_or(receipt::ReceiptError::Base64)?;
    let stmt: serde_json::Value = governed_model::parse_json("receipt statement", &payload)?;
    if !stmt["predicate"].is_object() {
        return Err(CommandError::NoPredicate(path.display().to_string()));
    }
    let text = match format {
        ReceiptFormat::Markdown => view::receipt_markdown(&stmt),
        _ => view::receipt_text(&stmt),
    };
    crate::out!("{text}")?;
    Ok(())
}

/// One refused run, as `journal list --refusals` shows it.
#[derive(serde::Serialize)]
pub struct RefusalRow {
    /// The ledger's label of the Goal's chain (a journal file, or a goal id).
    pub chain: String,
    pub at: String,
    pub lease_id: Option<String>,
    pub reason: governed_model::Reason,
    pub message: String,
}

/// Every refusal record of every Goal, oldest first within a Goal.
fn refusals(l: &dyn Ledger) -> Result<Vec<RefusalRow>, CommandError> {
    let mut rows = Vec::new();
    for (label, chain) in l.chains()? {
        for e in chain.map_err(CommandError::Chain)? {
            if let Event::Refusal {
                lease_id,
                reason,
                message,
            } = e.record.event
            {
                rows.push(RefusalRow {
                    chain: label.clone(),
                    at: e.record.at,
                    lease_id,
                    reason,
                    message,
                });
            }
        }
    }
    Ok(rows)
}

/// The attempts as a table (or JSON); with `with_refusals`, the runs
/// refused before anything was spent as well: a second table, or a JSON
/// object `{ "attempts": [...], "refusals": [...] }` instead of the array.
pub fn journal_list(l: &dyn Ledger, json: bool, with_refusals: bool) -> Result<(), CommandError> {
    let entries = ledger::all_entries(l)?;
    let attempts = ledger::attempts(l, &entries);
    let refused = if with_refusals {
        refusals(l)?
    } else {
        Vec::new()
    };
    if json {
        let doc = if with_refusals {
            serde_json::json!({ "attempts": attempts, "refusals": refused })
        } else {
            serde_json::to_value(&attempts)?
        };
        crate::outln!("{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    crate::outln!(
        "{:<26} {:<28} {:<20} {:<9} {:<20} STARTED",
        "ATTEMPT",
        "LEASE",
        "GOAL",
        "STATE",
        "OUTCOME"
    )?;
    for a in attempts {
        let state = serde_json::to_value(a.state)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let outcome = match (a.outcome, a.classification) {
            (Some(o), _) => o.to_string(),
            (None, Some(c)) => format!(
                "resolved:{}",
                serde_json::to_value(c)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            ),
            _ => "-".into(),
        };
        // Ids come from goal files and manifests: shown with every hidden
        // character escaped, so no field can disguise another.
        let line = format!(
            "{:<26} {:<28} {:<20} {:<9} {:<20} {}",
            a.attempt_id,
            a.lease_id,
            format!("{}@{}", a.goal_id, a.goal_revision),
            state,
            outcome,
            a.started_at
        );
        crate::outln!("{}", escape::visible(&line))?;
    }
    if with_refusals {
        crate::outln!("")?;
        crate::outln!(
            "{:<26} {:<28} {:<28} MESSAGE",
            "REFUSED AT",
            "LEASE",
            "REASON"
        )?;
        for r in &refused {
            // The message is the whole refusal line `run` printed: kept
            // whole (no column cut), hidden characters escaped.
            let line = format!(
                "{:<26} {:<28} {:<28} {}",
                r.at,
                r.lease_id.as_deref().unwrap_or("-"),
                r.reason.to_string(),
                r.message
            );
            crate::outln!("{}", escape::visible(&line))?;
        }
    } else {
        let n = entries
            .iter()
            .filter(|e| matches!(e.record.event, Event::Refusal { .. }))
            .count();
        if n > 0 {
            // On stderr: the table on stdout stays the same for scripts.
            eprintln!(
                "governed-exec: {n} refused run(s) are not listed; `journal list --refusals` shows them"
            );
        }
    }
    Ok(())
}

/// Returns false when the attempt is unknown to the journal.
pub fn journal_show(l: &dyn Ledger, attempt: &str, json: bool) -> Result<bool, CommandError> {
    let entries = ledger::all_entries(l)?;
    let records: Vec<&journal::Record> = entries
        .iter()
        .map(|e| &e.record)
        .filter(|r| match &r.event {
            Event::Executing { attempt_id, .. }
            | Event::Result { attempt_id, .. }
            | Event::Resolution { attempt_id, .. } => attempt_id == attempt,
            _ => false,
        })
        .collect();
    if records.is_empty() {
        return Ok(false);
    }
    let summary = ledger::attempts(l, &entries)
        .into_iter()
        .find(|a| a.attempt_id == attempt);
    let doc = serde_json::json!({ "attempt": summary, "records": records });
    if json {
        crate::outln!("{}", serde_json::to_string(&doc)?)?;
    } else {
        crate::outln!("{}", serde_json::to_string_pretty(&doc)?)?;
    }
    Ok(true)
}

/// Re-walk every chain of the ledger, re-derive each Goal's state from its
/// records and check the invariants (for a local ledger also its
/// checkpoints). Returns whether all is sound; a ledger that cannot be read
/// is not sound.
pub fn journal_verify(l: &dyn Ledger) -> Result<bool, CommandError> {
    if let Some(dir) = l.local_dir() {
        return journal_verify_dir(dir);
    }
    let results = match l.chains() {
        Ok(r) => r,
        Err(e) => {
            println!("BROKEN  {e}");
            return Ok(false);
        }
    };
    let mut ok = true;
    for (label, r) in &results {
        let entries = match r {
            Ok(e) => e,
            Err(e) => {
                ok = false;
                println!("BROKEN  {e}");
                continue;
            }
        };
        let problems = journal::invariant_violations(entries);
        if !problems.is_empty() {
            ok = false;
            for p in &problems {
                println!("BROKEN  {label}: {p}");
            }
            continue;
        }
        let summary = journal::Summary::of(entries);
        let spent: u64 = summary.uses.values().sum();
        let blocking: Vec<&str> = summary
            .open
            .iter()
            .filter(|(id, a)| a.result_unknown || !l.attempt_is_live(id))
            .map(|(id, _)| id.as_str())
            .collect();
        println!(
            "ok      {label} ({} records; re-derived: {spent} use(s) spent, {} unknown attempt(s) blocking{})",
            entries.len(),
            blocking.len(),
            if blocking.is_empty() {
                String::new()
            } else {
                format!(": {}", blocking.join(", "))
            }
        );
    }
    if results.is_empty() {
        println!("ok      no journal in {}", l.name());
    }
    Ok(ok)
}

/// Re-walk every chain, re-derive each Goal's state from its records,
/// check the invariants and the checkpoint. Returns whether all is sound;
/// a journal directory that cannot be read is not sound.
fn journal_verify_dir(state_dir: &Path) -> Result<bool, CommandError> {
    let results = match journal::verify_all(state_dir) {
        Ok(r) => r,
        Err(e) => {
            crate::outln!("BROKEN  {e}")?;
            return Ok(false);
        }
    };
    let mut ok = true;
    for (path, r) in &results {
        let audit = r
            .as_ref()
            .map_err(|e| e.to_string())
            .and_then(|_| std::fs::read(path).map_err(|e| e.to_string()))
            .and_then(|bytes| journal::audit(path, &bytes).map_err(|e| e.to_string()));
        match audit {
            Err(e) => {
                ok = false;
                crate::outln!("BROKEN  {e}")?;
            }
            Ok(a) if !a.problems.is_empty() => {
                ok = false;
                for p in &a.problems {
                    crate::outln!("BROKEN  {}: {p}", path.display())?;
                }
            }
            Ok(a) => {
                let spent: u64 = a.summary.uses.values().sum();
                crate::outln!(
                    "ok      {} ({} records; re-derived: {} use(s) spent, {} unknown attempt(s) blocking{})",
                    path.display(),
                    a.records,
                    spent,
                    a.blocking.len(),
                    if a.blocking.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", a.blocking.join(", "))
                    }
                )?;
                for n in &a.notes {
                    crate::outln!("note    {}: {n}", path.display())?;
                }
            }
        }
    }
    if results.is_empty() {
        crate::outln!("ok      no journal in {}", state_dir.display())?;
    }
    Ok(ok)
}

pub fn resolve(
    l: &dyn Ledger,
    attempt: &str,
    as_: Classification,
    by: &str,
    note: Option<String>,
) -> Result<(), OperatorError> {
    let lease_id = ledger::resolve(l, attempt, as_, by, note)?;
    if as_ == Classification::Stop {
        eprintln!("resolved {attempt} as stop; lease {lease_id} is revoked");
    } else {
        eprintln!(
            "resolved {attempt}; this is a classification, not evidence: no receipt was created"
        );
    }
    Ok(())
}

pub fn revoke(
    manifest: &Path,
    lease_id: &str,
    by: &str,
    state_dir: &Path,
) -> Result<(), OperatorError> {
    let m = lease::load_manifest(manifest).map_err(|e| OperatorError::UnknownId(e.to_string()))?;
    let Some(l) = m.leases.iter().find(|l| l.body.lease_id == lease_id) else {
        return Err(OperatorError::UnknownId(format!(
            "lease {lease_id:?} is not in manifest {}",
            manifest.display()
        )));
    };
    let goal_id = l.body.goal.id.clone();
    let named = l.body.ledger.clone();
    lease::update_manifest(manifest, false, |m| {
        if !m.revocations.iter().any(|r| r.lease_id == lease_id) {
            m.revocations.push(governed_model::Revocation {
                lease_id: lease_id.to_string(),
                by: by.to_string(),
                at: journal::now_rfc3339(),
            });
        }
    })
    .map_err(|e| OperatorError::Failed(e.to_string()))?;
    // Also record it in the lease's ledger. A named ledger is where every
    // runner checks, so an old manifest copy cannot bring the lease back:
    // failing to write it there is an error. The state dir's journal is
    // only the local audit trail.
    let l = ledger::for_lease(named.as_deref(), state_dir)
        .map_err(|e| OperatorError::Failed(e.to_string()))?;
    match ledger::revoke(&*l, &goal_id, lease_id, by) {
        Ok(()) => {}
        Err(e) if l.is_named() => {
            return Err(OperatorError::Failed(format!(
                "lease {lease_id} is revoked in {} but not yet in its ledger: {e}; run revoke again once the ledger is reachable",
                manifest.display()
            )))
        }
        Err(_) => {}
    }
    eprintln!(
        "revoked lease {} (manifest and ledger {})",
        escape::visible(lease_id),
        escape::visible(&l.name())
    );
    Ok(())
}
