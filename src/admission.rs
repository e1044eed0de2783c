//! Admission: from a request to an `Admitted` lease use, or a `Refusal`.
//!
//! Checked in this order, each with its closed reason: an exact lease match
//! (no wildcard, prefix or directory match, ever), the lease signature over
//! a fingerprint recomputed from the lease's content, revocation, Goal id /
//! revision / digest, validity window, remaining uses (from the journal),
//! then identity — workspace, cwd and executable re-resolved and re-hashed
//! on the very fds that `spawn` will `fchdir` into and `execveat`.

use std::path::Path;
use std::time::SystemTime;

use ed25519_dalek::VerifyingKey;

use crate::goal::LoadedGoal;
use crate::identity::{self, OpenedDir, OpenedExecutable};
use crate::journal::{AttemptState, Journal};
use crate::lease;
use crate::model::{Lease, Manifest, Reason, Request};

#[derive(Debug, Clone)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
    pub lease: Option<Box<Lease>>,
}

impl Refusal {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Refusal {
            reason,
            message: message.into(),
            lease: None,
        }
    }

    fn for_lease(reason: Reason, message: impl Into<String>, lease: &Lease) -> Self {
        Refusal {
            reason,
            message: message.into(),
            lease: Some(Box::new(lease.clone())),
        }
    }
}

/// What `run` asked for.
pub enum Selection {
    Request(Request),
    LeaseId(String),
}

/// A lease use that passed every check, holding the fds that were checked.
pub struct Admitted {
    pub lease: Lease,
    pub workspace: OpenedDir,
    pub cwd: OpenedDir,
    pub exe: OpenedExecutable,
    /// 1-based number of this use.
    pub use_number: u64,
}

pub struct Context<'a> {
    pub manifest: &'a Manifest,
    pub goal: &'a LoadedGoal,
    pub trust: &'a VerifyingKey,
    pub journal: &'a Journal,
    pub state_dir: &'a Path,
    pub now: SystemTime,
}

pub fn admit(ctx: &Context<'_>, selection: &Selection) -> Result<Admitted, Refusal> {
    let candidates: Vec<&Lease> = match selection {
        Selection::Request(req) => ctx
            .manifest
            .leases
            .iter()
            .filter(|l| &l.body.request == req)
            .collect(),
        Selection::LeaseId(id) => ctx
            .manifest
            .leases
            .iter()
            .filter(|l| &l.body.lease_id == id)
            .collect(),
    };
    if candidates.is_empty() {
        if let Some(f) = ctx.manifest.foreign.iter().find(|f| match selection {
            Selection::Request(req) => {
                f.request.is_some() && f.request == serde_json::to_value(req).ok()
            }
            Selection::LeaseId(id) => f.lease_id.as_ref() == Some(id),
        }) {
            return Err(Refusal::new(
                Reason::LeaseFormatUnsupported,
                format!(
                    "lease {} has format version {}, which this governed-exec does not read (it reads {}..={}): re-approve the request with this release",
                    f.lease_id.as_deref().unwrap_or("(unreadable id)"),
                    f.format,
                    crate::model::LEASE_FORMATS_KNOWN.start(),
                    crate::model::LEASE_FORMATS_KNOWN.end()
                ),
            ));
        }
        let what = match selection {
            Selection::Request(r) => format!(
                "no lease in the manifest approves exactly this request (executable {:?}, {} argv elements, cwd {:?}, profile {})",
                r.executable,
                r.argv.len(),
                r.cwd,
                r.profile
            ),
            Selection::LeaseId(id) => format!("no lease with id {id:?} in the manifest"),
        };
        return Err(Refusal::new(Reason::NoMatchingLease, what));
    }
    if let Some(a) = ctx
        .journal
        .open_attempts(ctx.state_dir)
        .into_iter()
        .find(|a| a.state == AttemptState::Unknown)
    {
        return Err(Refusal::new(
            Reason::UnresolvedUnknownOutcome,
            format!(
                "attempt {} of goal {:?} (lease {}) has an unknown outcome; a person must `governed-exec resolve --attempt {}` first",
                a.attempt_id, a.goal_id, a.lease_id, a.attempt_id
            ),
        ));
    }
    // Try every exact match; report the refusal that got furthest.
    let mut best: Option<(usize, Refusal)> = None;
    for lease in candidates {
        match check(ctx, lease) {
            Ok(admitted) => return Ok(admitted),
            Err((stage, refusal)) => {
                if best.as_ref().is_none_or(|(s, _)| stage > *s) {
                    best = Some((stage, refusal));
                }
            }
        }
    }
    Err(best
        .map(|(_, r)| r)
        .unwrap_or_else(|| Refusal::new(Reason::NoMatchingLease, "no lease matched")))
}

fn check(ctx: &Context<'_>, lease: &Lease) -> Result<Admitted, (usize, Refusal)> {
    let body = &lease.body;
    let id = &body.lease_id;
    let refuse = |stage: usize, reason: Reason, msg: String| {
        Err((stage, Refusal::for_lease(reason, msg, lease)))
    };

    if !lease::signature_valid(lease, ctx.trust) {
        return refuse(0, Reason::LeaseSignatureInvalid, format!(
            "lease {id}: its content does not match its fingerprint, or the fingerprint is not signed by the trusted approver key"
        ));
    }
    if ctx.manifest.revocations.iter().any(|r| &r.lease_id == id) || ctx.journal.is_revoked(id) {
        return refuse(1, Reason::LeaseRevoked, format!("lease {id} was revoked"));
    }
    let want = ctx.goal.reference();
    if body.goal != want {
        return refuse(2, Reason::GoalMismatch, format!(
            "lease {id} binds goal {:?} revision {} (sha256 {}), but the goal given is {:?} revision {} (sha256 {})",
            body.goal.id, body.goal.revision, body.goal.sha256, want.id, want.revision, want.sha256
        ));
    }
    let parse_time = |s: &str| humantime::parse_rfc3339_weak(s).ok();
    let (Some(issued), Some(expires)) = (parse_time(&body.issued_at), parse_time(&body.expires_at))
    else {
        return refuse(
            0,
            Reason::LeaseSignatureInvalid,
            format!("lease {id}: unreadable validity times"),
        );
    };
    if ctx.now < issued {
        return refuse(
            3,
            Reason::LeaseNotYetValid,
            format!("lease {id} is valid only from {}", body.issued_at),
        );
    }
    if ctx.now >= expires {
        return refuse(
            3,
            Reason::LeaseExpired,
            format!("lease {id} expired at {}", body.expires_at),
        );
    }
    let spent = ctx.journal.uses_spent(id);
    if spent >= body.max_uses {
        return refuse(
            4,
            Reason::LeaseExhausted,
            format!("lease {id} has spent all {} of its uses", body.max_uses),
        );
    }

    // Identity, on the fds that will be used.
    let workspace = identity::open_dir(Path::new(&body.workspace.path)).map_err(|e| {
        (
            5,
            Refusal::for_lease(Reason::WorkspaceDrift, format!("workspace: {e}"), lease),
        )
    })?;
    if let Some(d) = identity::dir_difference("workspace", &body.workspace, &workspace.identity) {
        return refuse(5, Reason::WorkspaceDrift, d);
    }
    let cwd = identity::open_dir(Path::new(&body.cwd.path)).map_err(|e| {
        (
            6,
            Refusal::for_lease(Reason::CwdDrift, format!("cwd: {e}"), lease),
        )
    })?;
    if let Some(d) = identity::dir_difference("cwd", &body.cwd, &cwd.identity) {
        return refuse(6, Reason::CwdDrift, d);
    }
    let exe = identity::open_executable(
        &body.request.executable,
        &body.env.path,
        Path::new(&body.cwd.path),
        body.executable
            .size
            .max(identity::DEFAULT_MAX_EXECUTABLE_BYTES),
    )
    .map_err(|e| {
        (
            7,
            Refusal::for_lease(Reason::ExecutableDrift, e.to_string(), lease),
        )
    })?;
    if let Some(d) = identity::executable_difference(&body.executable, &exe.identity) {
        return refuse(7, Reason::ExecutableDrift, d);
    }
    Ok(Admitted {
        lease: lease.clone(),
        workspace,
        cwd,
        exe,
        use_number: spent + 1,
    })
}
