//! `pending list|show|deny`: the operator's side of the human approval
//! queue (CONTRACT §12). Approving is `approve --pending ID`, which signs a
//! lease like any approval. None of this is reachable from `mcp`: the
//! agent's channel can only add to the queue, by being refused.

use std::path::Path;
use std::time::SystemTime;

use crate::cli::args::PendingAction;
use governed_evidence::escape;
use governed_ledger::pending::{Decision, PendingError, Queue};
use governed_model::limits::{format_ms, format_size, tier};
use governed_model::pending::PendingApproval;

/// `pending …` on the queue of `state_dir`. `Ok(false)`: an unknown id.
pub fn main(state_dir: &Path, action: PendingAction) -> Result<(), PendingError> {
    let queue = Queue::of(state_dir);
    let now = SystemTime::now();
    match action {
        PendingAction::List { json } => {
            let governed_ledger::pending::Listing {
                live: entries,
                unreadable,
                ..
            } = queue.list(now)?;
            if json {
                let doc = serde_json::json!({
                    "queue": queue.dir().display().to_string(),
                    "entries": entries,
                    "unreadable": unreadable.iter()
                        .map(|(f, why)| serde_json::json!({"file": f, "why": why}))
                        .collect::<Vec<_>>(),
                });
                println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
                return Ok(());
            }
            if entries.is_empty() {
                println!(
                    "no pending approvals in {}",
                    escape::visible(&queue.dir().display().to_string())
                );
            } else {
                println!(
                    "{:<21}  {:<8}  {:>5}  {:<20}  {:<24}  request",
                    "ID", "STATE", "ASKED", "LAST ASKED", "GOAL"
                );
            }
            for e in &entries {
                println!(
                    "{:<21}  {:<8}  {:>5}  {:<20}  {:<24}  {}",
                    e.id,
                    e.state.to_string(),
                    e.count,
                    e.last_seen,
                    escape::visible(&format!("{} r{}", e.goal.id, e.goal.revision)),
                    request_line(e)
                );
            }
            for (file, why) in &unreadable {
                println!(
                    "unreadable: {} ({})",
                    escape::visible(file),
                    escape::visible(why)
                );
            }
            Ok(())
        }
        PendingAction::Show { id, json } => {
            let e = queue.get(&id, now)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&e).unwrap_or_default());
            } else {
                print!("{}", show(&e));
            }
            Ok(())
        }
        PendingAction::Deny { id, by, note, key } => {
            let key = governed_evidence::sign::load_signing_key(&key)
                .map_err(|e| PendingError::Key(e.to_string()))?;
            let keyid = governed_evidence::sign::keyid(&key.verifying_key());
            let e = queue.decide(&id, Decision::Denied { note }, (&by, &keyid), now)?;
            eprintln!(
                "denied: pending {} ({}); an agent asking for it again is told so until {}",
                e.id,
                request_line(&e),
                e.expires_at
            );
            Ok(())
        }
    }
}

/// The request on one line, every element quoted and made visible.
fn request_line(e: &PendingApproval) -> String {
    let mut words = vec![escape::quoted(&e.request.executable)];
    words.extend(e.request.argv.iter().map(|a| escape::quoted(a)));
    format!(
        "{} (cwd {}, profile {})",
        words.join(" "),
        escape::quoted(&e.request.cwd),
        e.request.profile
    )
}

/// What a person reads before `approve --pending`: the request as it
/// resolved, the tier's limits it would get by default, who asked.
fn show(e: &PendingApproval) -> String {
    let t = tier(e.request.profile);
    let mut rows: Vec<(&str, String)> = vec![
        ("pending", format!("{} ({})", e.id, e.state)),
        (
            "goal",
            format!(
                "{} revision {} (sha256 {})",
                escape::quoted(&e.goal.id),
                e.goal.revision,
                e.goal.sha256
            ),
        ),
        ("workspace", escape::visible(&e.workspace)),
        ("executable", escape::quoted(&e.request.executable)),
        ("resolves to", escape::visible(&e.executable.canonical_path)),
        ("sha256", e.executable.sha256.clone()),
    ];
    for (i, a) in e.request.argv.iter().enumerate() {
        rows.push(("argv", format!("[{}] {}", i + 1, escape::quoted(a))));
    }
    rows.push((
        "cwd",
        format!(
            "{} resolves to {}",
            escape::quoted(&e.request.cwd),
            escape::visible(&e.cwd.path)
        ),
    ));
    rows.push((
        "profile",
        format!(
            "{} (by default: wall time {}, memory {}, {} processes)",
            e.request.profile,
            format_ms(t.wall_time_ms),
            format_size(t.memory_bytes),
            t.max_processes
        ),
    ));
    rows.push(("refused", e.reason.to_string()));
    rows.push((
        "asked by",
        e.principals
            .iter()
            .map(|p| escape::quoted(p))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    rows.push((
        "asked",
        format!(
            "{} time{}, first {}, last {}",
            e.count,
            if e.count == 1 { "" } else { "s" },
            e.first_seen,
            e.last_seen
        ),
    ));
    if let Some(by) = &e.decided_by {
        let key = e
            .decided_keyid
            .as_deref()
            .map(|k| format!(" (approver key id {k})"))
            .unwrap_or_default();
        rows.push(("decided by", format!("{}{key}", escape::visible(by))));
    }
    if let Some(l) = &e.lease_id {
        rows.push(("lease", l.clone()));
    }
    if let Some(n) = &e.note {
        rows.push(("note", escape::visible(n)));
    }
    rows.push(("expires", e.expires_at.clone()));
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("  {k:<12} {v}\n"));
    }
    if e.state != governed_model::pending::PendingState::Pending {
        return out;
    }
    out.push_str(&format!(
        "approve exactly this request (with the limits, isolation, uses and ttl you choose):\n  governed-exec approve --pending {} --goal GOAL --workspace {} --manifest MANIFEST --key APPROVER.key [flags]\n",
        e.id,
        escape::visible(&e.workspace)
    ));
    out
}
