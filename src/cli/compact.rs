//! `compact`: move the leases of a manifest that can never run again out
//! of it, into an archive beside it, so a manifest shared by many tasks (an
//! eval harness's, a long-lived CI's) stays the size of what is live and a
//! run's cost does not grow with every lease ever approved.
//!
//! What can never run again, decided from the manifest and the ledger each
//! lease counts its uses in: revoked (in either), superseded, expired, or
//! every use spent with no attempt of it still open. A lease whose ledger
//! cannot be read is kept (nothing is decided on what could not be seen).
//!
//! Nothing is lost: each lease leaves the manifest only after its line —
//! the lease exactly as stored (its signed bytes), why it left, and its
//! revocation or supersession — is durable in `MANIFEST.spent.jsonl`
//! (append-only), and the ledger keeps every use, result and revocation.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use governed_evidence::escape;
use governed_ledger as ledger;
use governed_ledger::journal::{self, Summary};
use governed_model::{Lease, LeaseWire, Manifest};
use governed_runner::gate::lease;

use crate::cli::operator::OperatorError;

/// Why a lease can never run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Spent {
    Revoked,
    Superseded,
    Expired,
    UsedUp,
}

impl Spent {
    fn name(self) -> &'static str {
        match self {
            Spent::Revoked => "revoked",
            Spent::Superseded => "superseded",
            Spent::Expired => "expired",
            Spent::UsedUp => "used_up",
        }
    }
}

/// `MANIFEST.spent.jsonl`, beside the manifest.
pub fn archive_path(manifest: &Path) -> PathBuf {
    let mut name = manifest.file_name().unwrap_or_default().to_os_string();
    name.push(".spent.jsonl");
    manifest.with_file_name(name)
}

/// Why `l` can never run again, if it cannot; `None` also where its ledger
/// could not be read.
fn spent(
    m: &Manifest,
    l: &Lease,
    ledgers: &mut BTreeMap<(Option<String>, String), Option<Summary>>,
    state_dir: &Path,
    now: SystemTime,
) -> Option<Spent> {
    let id = &l.body.lease_id;
    if m.revocations.iter().any(|r| &r.lease_id == id) {
        return Some(Spent::Revoked);
    }
    if m.superseded.iter().any(|s| &s.lease_id == id) {
        return Some(Spent::Superseded);
    }
    let key = (l.body.ledger.clone(), l.body.goal.id.clone());
    let summary = ledgers.entry(key).or_insert_with(|| {
        let store = ledger::for_lease(l.body.ledger.as_deref(), state_dir).ok()?;
        store
            .chain_of(&l.body.goal.id)
            .ok()
            .map(|e| Summary::of(&e))
    });
    let summary = summary.as_ref()?;
    if summary.revoked.contains(id) {
        return Some(Spent::Revoked);
    }
    let open = summary.open.values().any(|a| &a.lease_id == id);
    if open {
        return None;
    }
    if humantime::parse_rfc3339_weak(&l.body.expires_at).is_ok_and(|t| t <= now) {
        return Some(Spent::Expired);
    }
    (summary.uses.get(id).copied().unwrap_or(0) >= l.body.max_uses).then_some(Spent::UsedUp)
}

/// Compact `manifest`: every lease that can never run again moves to its
/// archive. Prints what moved on stderr.
pub fn compact(manifest: &Path, state_dir: &Path) -> Result<(), OperatorError> {
    let failed = |e: String| OperatorError::Failed(e);
    let now = SystemTime::now();
    let archive = archive_path(manifest);
    let at = journal::now_rfc3339();
    let mut ledgers = BTreeMap::new();
    let moved = lease::update_manifest(manifest, false, |m| -> Result<_, String> {
        let verdicts: Vec<Option<Spent>> = m
            .leases
            .iter()
            .map(|l| spent(m, l, &mut ledgers, state_dir, now))
            .collect();
        let gone: BTreeSet<String> = m
            .leases
            .iter()
            .zip(&verdicts)
            .filter(|(_, v)| v.is_some())
            .map(|(l, _)| l.body.lease_id.clone())
            .collect();
        if gone.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut lines = Vec::new();
        let mut counts: BTreeMap<Spent, usize> = BTreeMap::new();
        for (l, v) in m.leases.iter().zip(&verdicts) {
            let Some(why) = v else { continue };
            *counts.entry(*why).or_default() += 1;
            let id = &l.body.lease_id;
            // Written member by member: the lease goes out exactly as it
            // is stored (a JSON value would re-encode its signed bytes).
            lines.push(format!(
                r#"{{"archived_at":{},"why":{},"lease":{},"revocation":{},"superseded":{}}}"#,
                json(&at)?,
                json(&why.name())?,
                json(&LeaseWire::from(l.clone()))?,
                json(&m.revocations.iter().find(|r| &r.lease_id == id))?,
                json(&m.superseded.iter().find(|s| &s.lease_id == id))?,
            ));
        }
        append_durably(&archive, &lines).map_err(|e| {
            format!(
                "archive {}: {e}; the manifest is unchanged",
                archive.display()
            )
        })?;
        m.leases.retain(|l| !gone.contains(&l.body.lease_id));
        m.revocations.retain(|r| !gone.contains(&r.lease_id));
        m.superseded.retain(|s| !gone.contains(&s.lease_id));
        Ok(counts)
    })
    .map_err(|e| failed(e.to_string()))?
    .map_err(failed)?;
    let total: usize = moved.values().sum();
    let kinds: Vec<String> = moved
        .iter()
        .map(|(k, n)| format!("{n} {}", k.name()))
        .collect();
    eprintln!(
        "compacted {}: {total} lease(s) that can never run again moved to {}{}",
        escape::visible(&manifest.display().to_string()),
        escape::visible(&archive.display().to_string()),
        if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        }
    );
    Ok(())
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, String> {
    serde_json::to_string(v).map_err(|e| e.to_string())
}

/// Append `lines` to `path` (created 0644, never through a symlink) and
/// flush them to disk before returning.
fn append_durably(path: &Path, lines: &[String]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    governed_sys::safe_io::require_regular(&f)?;
    let mut text = lines.join("\n");
    text.push('\n');
    f.write_all(text.as_bytes())?;
    f.sync_all()
}
