//! Admission: from a request to an `Admitted` lease use, or a `Refusal`.
//!
//! Checked in this order, each with its closed reason: an exact lease match
//! (no wildcard, prefix or directory match, ever), the lease signature over
//! a fingerprint recomputed from the lease's content, revocation, Goal id /
//! revision / digest, validity window, remaining uses (from the journal),
//! then identity — workspace, cwd and executable re-resolved and re-hashed
//! on the very fds that `spawn` will `fchdir` into and `execveat` (the
//! executable as a sealed in-memory copy of the bytes hashed).
//!
//! The costly part — opening and hashing — is [`prepare`]d *before* the
//! Goal's journal lock is taken, so a slow or huge executable never holds up
//! other runs of the Goal; [`admit`] then decides under the lock, in the
//! order above, with the identities already in hand.

use std::path::Path;
use std::time::SystemTime;

use ed25519_dalek::VerifyingKey;

use crate::gate::identity::{self, OpenedDir, OpenedExecutable, Snapshot};
use crate::gate::lease;
use governed_ledger as ledger;
use governed_ledger::journal::AttemptState;
use governed_ledger::GoalSession;
use governed_model::goal::LoadedGoal;
use governed_model::{Binding, Lease, Manifest, PortableIdentity, Reason, Request};

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
    /// A request; without `profile_given` (`run -- CMD` with no
    /// `--profile`) the profile is the matching lease's.
    Request {
        request: Request,
        profile_given: bool,
    },
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

/// The fds and identities of one candidate lease, opened before the lock.
struct Opened {
    workspace: OpenedDir,
    cwd: OpenedDir,
    exe: OpenedExecutable,
}

/// How far a candidate lease got through admission's checks, in their
/// order: of several exact matches, the refusal that got furthest is the
/// one reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Signature,
    Revocation,
    Goal,
    Window,
    Uses,
    Workspace,
    Cwd,
    Executable,
}

type Staged<T> = Result<T, (Stage, Refusal)>;

/// The exact-match candidates of a request, each with its identity opened
/// and hashed (when its signature, goal and validity window allow it to be
/// admitted at all).
pub struct Prepared<'m> {
    candidates: Vec<(&'m Lease, Option<Staged<Opened>>)>,
}

pub struct Context<'a> {
    pub manifest: &'a Manifest,
    pub goal: &'a LoadedGoal,
    pub trust: &'a VerifyingKey,
    /// The Goal's records in the lease's ledger, locked.
    pub ledger: &'a dyn GoalSession,
    pub now: SystemTime,
}

/// Where `run` was pointed: `--workspace` (canonical) if given, and the
/// current directory (canonical), a portable lease's workspace otherwise.
#[derive(Clone, Copy)]
pub struct RunPlace<'a> {
    pub workspace: Option<&'a Path>,
    pub here: &'a Path,
}

/// The manifest's leases that answer `selection`: exact matches, leaving
/// out superseded ones unless nothing else matches (then admission says
/// which lease replaced them).
pub fn candidates<'m>(manifest: &'m Manifest, selection: &Selection) -> Vec<&'m Lease> {
    let all: Vec<&Lease> = match selection {
        Selection::Request {
            request,
            profile_given,
        } => manifest
            .leases
            .iter()
            .filter(|l| {
                let r = &l.body.request;
                r.executable == request.executable
                    && r.argv == request.argv
                    && r.cwd == request.cwd
                    && (!profile_given || r.profile == request.profile)
            })
            .collect(),
        Selection::LeaseId(id) => manifest
            .leases
            .iter()
            .filter(|l| &l.body.lease_id == id)
            .collect(),
    };
    let live: Vec<&Lease> = all
        .iter()
        .copied()
        .filter(|l| superseded_by(manifest, &l.body.lease_id).is_none())
        .collect();
    if live.is_empty() {
        all
    } else {
        live
    }
}

fn superseded_by<'m>(manifest: &'m Manifest, lease_id: &str) -> Option<&'m str> {
    manifest
        .superseded
        .iter()
        .find(|s| s.lease_id == lease_id)
        .map(|s| s.by_lease.as_str())
}

/// Find the leases that match exactly and open their identities. Takes no
/// lock; may take as long as hashing the executable takes.
pub(crate) fn prepare<'m>(
    manifest: &'m Manifest,
    goal: &LoadedGoal,
    trust: &VerifyingKey,
    now: SystemTime,
    selection: &Selection,
    place: RunPlace<'_>,
) -> Result<Prepared<'m>, Refusal> {
    let candidates = candidates(manifest, selection);
    if let Selection::Request {
        profile_given: false,
        ..
    } = selection
    {
        // Only leases that could still run choose the profile: a revoked
        // or expired one approves nothing any more.
        let mut profiles: Vec<String> = candidates
            .iter()
            .filter(|l| may_still_run(manifest, l, now))
            .map(|l| l.body.request.profile.to_string())
            .collect();
        profiles.sort();
        profiles.dedup();
        if profiles.len() > 1 {
            return Err(Refusal::new(
                Reason::NoMatchingLease,
                format!(
                    "leases with different profiles ({}) approve this command: give --profile",
                    profiles.join(", ")
                ),
            ));
        }
    }
    if candidates.is_empty() {
        if let Some(f) = manifest.foreign.iter().find(|f| match selection {
            Selection::Request { request, .. } => {
                f.request.is_some() && f.request == serde_json::to_value(request).ok()
            }
            Selection::LeaseId(id) => f.lease_id.as_ref() == Some(id),
        }) {
            return Err(Refusal::new(
                Reason::LeaseFormatUnsupported,
                format!(
                    "lease {} has format version {}, which this governed-exec does not read (it reads {}..={}): re-approve the request with this release",
                    f.lease_id.as_deref().unwrap_or("(unreadable id)"),
                    f.format,
                    governed_model::LEASE_FORMATS_KNOWN.start(),
                    governed_model::LEASE_FORMATS_KNOWN.end()
                ),
            ));
        }
        let what = match selection {
            Selection::Request {
                request: r,
                profile_given,
            } => {
                let mut m = format!(
                    "no lease in the manifest approves exactly this request (executable {:?}, {} argv elements, cwd {:?}, profile {})",
                    r.executable,
                    r.argv.len(),
                    r.cwd,
                    r.profile
                );
                match closest(manifest, &goal.goal.id, r, *profile_given) {
                    Some((lease, diff)) => m.push_str(&format!(
                        "; the closest is lease {} (goal {:?}), which differs at {diff}",
                        lease.body.lease_id, lease.body.goal.id
                    )),
                    None => m.push_str("; the manifest holds no lease"),
                }
                m
            }
            Selection::LeaseId(id) => format!("no lease with id {id:?} in the manifest"),
        };
        return Err(Refusal::new(Reason::NoMatchingLease, what));
    }
    let want = goal.reference();
    let candidates = candidates
        .into_iter()
        .map(|lease| {
            let could_pass = lease::signature_valid(lease, trust)
                && lease.body.goal == want
                && within_window(&lease.body, now);
            (lease, could_pass.then(|| open_identity(lease, place)))
        })
        .collect();
    Ok(Prepared { candidates })
}

/// Why a lease's signature does not hold, naming the key that signed it
/// and the key `--trust` gave: the two keys of governed-exec are easy to
/// swap (`run --trust` takes the approver's public key, `verify --trust`
/// the runner's).
pub(crate) fn signature_failure(lease: &Lease, trust: &VerifyingKey) -> String {
    let given = governed_evidence::sign::keyid(trust);
    let id = &lease.body.lease_id;
    if lease.keyid != given {
        format!(
            "lease {id} was signed by approver key id {}, but --trust gave key id {given}: run --trust takes the approver's public key (the .pub beside the key `approve --key` used), not the runner key (STATE_DIR/runner.pub, which verify --trust takes)",
            lease.keyid
        )
    } else {
        format!(
            "lease {id}: its content does not match its fingerprint, or its signature does not verify under the trusted approver key id {given} (the lease was changed after approval: re-approve it)"
        )
    }
}

/// The first element in which an approved request differs from the one
/// asked for, as `argv[2]: approved "-q", requested "--verbose"`; `None`
/// when they are equal (the profile counts only when it was asked for).
pub(crate) fn first_difference(
    approved: &Request,
    requested: &Request,
    profile_given: bool,
) -> Option<String> {
    if approved.executable != requested.executable {
        return Some(format!(
            "executable: approved {:?}, requested {:?}",
            approved.executable, requested.executable
        ));
    }
    let n = approved.argv.len().max(requested.argv.len());
    for i in 0..n {
        match (approved.argv.get(i), requested.argv.get(i)) {
            (Some(a), Some(r)) if a == r => {}
            (Some(a), Some(r)) => {
                return Some(format!("argv[{i}]: approved {a:?}, requested {r:?}"))
            }
            (Some(a), None) => {
                return Some(format!(
                    "argv[{i}]: approved {a:?}, requested nothing ({} argv elements approved, {} requested)",
                    approved.argv.len(),
                    requested.argv.len()
                ))
            }
            (None, Some(r)) => {
                return Some(format!(
                    "argv[{i}]: approved nothing, requested {r:?} ({} argv elements approved, {} requested)",
                    approved.argv.len(),
                    requested.argv.len()
                ))
            }
            (None, None) => {}
        }
    }
    if approved.cwd != requested.cwd {
        return Some(format!(
            "cwd: approved {:?}, requested {:?}",
            approved.cwd, requested.cwd
        ));
    }
    if profile_given && approved.profile != requested.profile {
        return Some(format!(
            "profile: approved {}, requested {}",
            approved.profile, requested.profile
        ));
    }
    None
}

/// The lease of the manifest nearest to a request no lease matches, and
/// where it first differs. Nearest: of this Goal rather than another, the
/// same executable, the longest equal argv prefix, the same argv length,
/// the same cwd, not superseded; a tie goes to the lease approved last.
fn closest<'m>(
    manifest: &'m Manifest,
    goal_id: &str,
    request: &Request,
    profile_given: bool,
) -> Option<(&'m Lease, String)> {
    let score = |l: &Lease| {
        let a = &l.body.request;
        let prefix = a
            .argv
            .iter()
            .zip(&request.argv)
            .take_while(|(x, y)| x == y)
            .count();
        (
            l.body.goal.id == goal_id,
            a.executable == request.executable,
            prefix,
            a.argv.len() == request.argv.len(),
            a.cwd == request.cwd,
            superseded_by(manifest, &l.body.lease_id).is_none(),
        )
    };
    let mut best: Option<(&Lease, _)> = None;
    for l in &manifest.leases {
        let s = score(l);
        if best.as_ref().is_none_or(|(_, b)| s >= *b) {
            best = Some((l, s));
        }
    }
    let (lease, _) = best?;
    let diff = first_difference(&lease.body.request, request, profile_given)
        .unwrap_or_else(|| "nothing in the request (another check refused it)".into());
    Some((lease, diff))
}

/// Neither revoked in the manifest nor outside its validity window: a
/// lease that may still run, so it counts when a request is ambiguous.
pub(crate) fn may_still_run(manifest: &Manifest, lease: &Lease, now: SystemTime) -> bool {
    !manifest
        .revocations
        .iter()
        .any(|r| r.lease_id == lease.body.lease_id)
        && within_window(&lease.body, now)
}

fn within_window(body: &governed_model::LeaseBody, now: SystemTime) -> bool {
    let parse_time = |s: &str| humantime::parse_rfc3339_weak(s).ok();
    match (parse_time(&body.issued_at), parse_time(&body.expires_at)) {
        (Some(issued), Some(expires)) => now >= issued && now < expires,
        _ => false,
    }
}

/// Decide, under the Goal's journal lock, which prepared candidate is
/// admitted (or why none is).
pub fn admit(ctx: &Context<'_>, prepared: Prepared<'_>) -> Result<Admitted, Refusal> {
    if let Some(a) = ledger::open_attempts(ctx.ledger)
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
    let mut best: Option<(Stage, Refusal)> = None;
    for (lease, opened) in prepared.candidates {
        match check(ctx, lease, opened) {
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

fn check(ctx: &Context<'_>, lease: &Lease, opened: Option<Staged<Opened>>) -> Staged<Admitted> {
    let body = &lease.body;
    let id = &body.lease_id;
    let refuse = |stage: Stage, reason: Reason, msg: String| {
        Err((stage, Refusal::for_lease(reason, msg, lease)))
    };

    if !lease::signature_valid(lease, ctx.trust) {
        return refuse(
            Stage::Signature,
            Reason::LeaseSignatureInvalid,
            signature_failure(lease, ctx.trust),
        );
    }
    // A supersession the manifest knows is named as such; the ledger also
    // holds it (as a revocation) once the replacement has run there, for
    // an older copy of the manifest that does not know it.
    if let Some(by) = superseded_by(ctx.manifest, id) {
        return refuse(
            Stage::Revocation,
            Reason::LeaseRevoked,
            format!("lease {id} was superseded by lease {by}, approved later for the same request"),
        );
    }
    if ctx.manifest.revocations.iter().any(|r| &r.lease_id == id)
        || ctx.ledger.summary().revoked.contains(id)
    {
        return refuse(
            Stage::Revocation,
            Reason::LeaseRevoked,
            format!("lease {id} was revoked, or superseded by a lease that has run in this ledger"),
        );
    }
    let want = ctx.goal.reference();
    if body.goal != want {
        return refuse(Stage::Goal, Reason::GoalMismatch, format!(
            "lease {id} binds goal {:?} revision {} (sha256 {}), but the goal given is {:?} revision {} (sha256 {})",
            body.goal.id, body.goal.revision, body.goal.sha256, want.id, want.revision, want.sha256
        ));
    }
    let parse_time = |s: &str| humantime::parse_rfc3339_weak(s).ok();
    let (Some(issued), Some(expires)) = (parse_time(&body.issued_at), parse_time(&body.expires_at))
    else {
        return refuse(
            Stage::Signature,
            Reason::LeaseSignatureInvalid,
            format!("lease {id}: unreadable validity times"),
        );
    };
    if ctx.now < issued {
        return refuse(
            Stage::Window,
            Reason::LeaseNotYetValid,
            format!("lease {id} is valid only from {}", body.issued_at),
        );
    }
    if ctx.now >= expires {
        return refuse(
            Stage::Window,
            Reason::LeaseExpired,
            format!("lease {id} expired at {}", body.expires_at),
        );
    }
    let spent = ctx.ledger.summary().uses.get(id).copied().unwrap_or(0);
    if spent >= body.max_uses {
        return refuse(
            Stage::Uses,
            Reason::LeaseExhausted,
            format!("lease {id} has spent all {} of its uses", body.max_uses),
        );
    }

    // Identity, opened and hashed before the lock, on the fds that will be used.
    let Some(opened) = opened else {
        // `prepare` skips only leases that an earlier check refuses.
        return refuse(
            Stage::Signature,
            Reason::LeaseSignatureInvalid,
            format!("lease {id}: not admissible"),
        );
    };
    let Opened {
        workspace,
        cwd,
        exe,
    } = opened?;
    Ok(Admitted {
        lease: lease.clone(),
        workspace,
        cwd,
        exe,
        use_number: spent + 1,
    })
}

/// Workspace, cwd and executable of a lease, opened and compared with what
/// the lease binds; the executable copied into its sealed snapshot.
fn open_identity(lease: &Lease, place: RunPlace<'_>) -> Staged<Opened> {
    let body = &lease.body;
    let refuse = |stage: Stage, reason: Reason, msg: String| {
        Err((stage, Refusal::for_lease(reason, msg, lease)))
    };
    if (body.binding == Binding::Portable) != body.portable.is_some() {
        return refuse(
            Stage::Signature,
            Reason::LeaseSignatureInvalid,
            format!(
                "lease {}: binding {} does not match its portable identity",
                body.lease_id, body.binding
            ),
        );
    }
    if let Some(p) = &body.portable {
        return portable_identity(lease, p, place);
    }
    if let Some(ws) = place
        .workspace
        .filter(|w| *w != Path::new(&body.workspace.path))
    {
        return refuse(
            Stage::Workspace,
            Reason::WorkspaceDrift,
            format!(
                "lease {} is bound to workspace {} on this machine, but run was given {}",
                body.lease_id,
                body.workspace.path,
                ws.display()
            ),
        );
    }
    let workspace = identity::open_dir(Path::new(&body.workspace.path)).map_err(|e| {
        (
            Stage::Workspace,
            Refusal::for_lease(Reason::WorkspaceDrift, format!("workspace: {e}"), lease),
        )
    })?;
    if let Some(d) = identity::dir_difference("workspace", &body.workspace, &workspace.identity) {
        return refuse(Stage::Workspace, Reason::WorkspaceDrift, d);
    }
    let cwd = identity::open_dir(Path::new(&body.cwd.path)).map_err(|e| {
        (
            Stage::Cwd,
            Refusal::for_lease(Reason::CwdDrift, format!("cwd: {e}"), lease),
        )
    })?;
    if let Some(d) = identity::dir_difference("cwd", &body.cwd, &cwd.identity) {
        return refuse(Stage::Cwd, Reason::CwdDrift, d);
    }
    let exe = open_exe(lease, Path::new(&body.cwd.path))?;
    if let Some(d) = identity::executable_difference(&body.executable, &exe.identity) {
        return refuse(Stage::Executable, Reason::ExecutableDrift, d);
    }
    Ok(Opened {
        workspace,
        cwd,
        exe,
    })
}

/// The executable opened and copied into its sealed snapshot; a snapshot
/// this machine cannot make is not drift.
fn open_exe(lease: &Lease, cwd: &Path) -> Staged<OpenedExecutable> {
    let body = &lease.body;
    identity::open_executable(
        &body.request.executable,
        &body.env.path,
        cwd,
        body.executable
            .size
            .max(identity::DEFAULT_MAX_EXECUTABLE_BYTES),
        Snapshot::Take,
    )
    .map_err(|e| {
        let reason = match e {
            // Not drift: this machine cannot make the copy that is executed.
            identity::IdentityError::Snapshot { .. } => Reason::ExecFailed,
            _ => Reason::ExecutableDrift,
        };
        (
            Stage::Executable,
            Refusal::for_lease(reason, e.to_string(), lease),
        )
    })
}

/// A portable lease: the workspace is where `run` is pointed; cwd must stay
/// inside it (checked on the opened fd); the executable must have the
/// lease's path (workspace-relative when inside it), mode and SHA-256.
fn portable_identity(
    lease: &Lease,
    want: &PortableIdentity,
    place: RunPlace<'_>,
) -> Staged<Opened> {
    let body = &lease.body;
    let fail =
        |stage: Stage, reason: Reason, msg: String| (stage, Refusal::for_lease(reason, msg, lease));
    let ws = place.workspace.unwrap_or(place.here);
    let workspace = identity::open_dir(ws).map_err(|e| {
        fail(
            Stage::Workspace,
            Reason::WorkspaceDrift,
            format!("workspace: {e}"),
        )
    })?;
    let cwd_path = identity::resolve_cwd(ws, &body.request.cwd)
        .map_err(|e| fail(Stage::Cwd, Reason::CwdDrift, e.to_string()))?;
    let cwd = identity::open_dir(&cwd_path)
        .map_err(|e| fail(Stage::Cwd, Reason::CwdDrift, format!("cwd: {e}")))?;
    let cwd_seen = identity::dir_fd_inside(&cwd.file, ws)
        .map_err(|e| fail(Stage::Cwd, Reason::CwdDrift, e.to_string()))?;
    // Only inode, device and timestamps leave a portable identity: the
    // cwd's canonical place in the workspace stays in it, so an in-workspace
    // symlink cannot move the command into another directory.
    let approved = Path::new(&body.cwd.path)
        .strip_prefix(&body.workspace.path)
        .ok();
    if cwd_seen.strip_prefix(ws).ok() != approved {
        return Err(fail(
            Stage::Cwd,
            Reason::CwdDrift,
            format!(
                "cwd {:?} resolves to {}, but the lease approved {} of its workspace",
                body.request.cwd,
                cwd_seen.display(),
                approved.map_or_else(|| body.cwd.path.clone(), |a| format!("./{}", a.display()))
            ),
        ));
    }
    let exe = open_exe(lease, &cwd_path)?;
    let got = identity::portable(&exe.identity, ws);
    let differs = [
        (
            "path",
            got.executable_path == want.executable_path && got.in_workspace == want.in_workspace,
        ),
        ("mode", got.mode == want.mode),
        ("sha256", got.sha256 == want.sha256),
    ]
    .into_iter()
    .find(|(_, same)| !same);
    if let Some((field, _)) = differs {
        return Err(fail(
            Stage::Executable,
            Reason::ExecutableDrift,
            format!(
                "executable {} (portable: {}) differs from the lease: {field} differs",
                exe.identity.canonical_path, want.executable_path
            ),
        ));
    }
    Ok(Opened {
        workspace,
        cwd,
        exe,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;
    use governed_model::*;
    use std::time::Duration;

    const T0: u64 = 1_800_000_000; // a whole second

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn goal() -> LoadedGoal {
        LoadedGoal {
            goal: Goal {
                schema: GOAL_SCHEMA.into(),
                id: "g".into(),
                revision: 1,
                criteria: vec![Criterion::ExitCode { equals: 0 }],
            },
            sha256: "ab".repeat(32),
        }
    }

    fn request() -> Request {
        Request {
            executable: "true".into(),
            argv: vec![],
            cwd: ".".into(),
            profile: Profile::Standard,
        }
    }

    /// A lease valid from T0 to T0+60s whose workspace does not exist: once
    /// every earlier check passes, it stops at the workspace (`Stage::Workspace`).
    fn lease(id: &str, key: &SigningKey, issued: u64, expires: u64) -> Lease {
        let dir = DirIdentity {
            path: "/nonexistent/governed-exec-admission-test".into(),
            device: 0,
            inode: 0,
            creation: None,
        };
        let body = LeaseBody {
            schema: LEASE_SCHEMA.into(),
            lease_id: id.into(),
            goal: goal().reference(),
            workspace: dir.clone(),
            request: request(),
            executable: ExecutableIdentity {
                requested: "true".into(),
                canonical_path: "/usr/bin/true".into(),
                symlink_chain: vec![],
                device: 0,
                inode: 0,
                size: 0,
                mode: 0,
                mtime_ns: 0,
                ctime_ns: 0,
                sha256: String::new(),
                interpreter: None,
            },
            cwd: dir,
            limits: governed_model::limits::tier(Profile::Standard),
            env: EnvPolicy {
                path: "/usr/bin".into(),
                fixed: Default::default(),
            },
            isolation: IsolationRequest::default(),
            approver: "t".into(),
            issued_at: humantime::format_rfc3339_seconds(at(issued)).to_string(),
            expires_at: humantime::format_rfc3339_seconds(at(expires)).to_string(),
            max_uses: 1,
            binding: Binding::Machine,
            portable: None,
            ledger: None,
        };
        lease::seal(body, key)
    }

    /// Only a lease within its validity window and not revoked may still
    /// run: the rule that keeps an expired, not-yet-valid or revoked lease
    /// from making a request ambiguous (or from choosing its ledger).
    #[test]
    fn may_still_run_is_the_window_and_no_revocation() {
        let key = SigningKey::from_bytes(&[1u8; 32]);
        let l = lease("l", &key, 1_000, 1_060);
        let mut m = Manifest {
            schema: MANIFEST_SCHEMA.into(),
            leases: vec![l.clone()],
            revocations: vec![],
            superseded: vec![],
            foreign: vec![],
        };
        assert!(!may_still_run(&m, &l, at(999)), "not yet valid");
        assert!(may_still_run(&m, &l, at(1_000)), "from issued_at");
        assert!(may_still_run(&m, &l, at(1_059)));
        assert!(!may_still_run(&m, &l, at(1_060)), "expired at expires_at");
        let revoke = |m: &mut Manifest, id: &str| {
            m.revocations.push(governed_model::Revocation {
                lease_id: id.into(),
                by: "t".into(),
                at: "t".into(),
            })
        };
        revoke(&mut m, "other");
        assert!(
            may_still_run(&m, &l, at(1_030)),
            "another lease's revocation"
        );
        revoke(&mut m, "l");
        assert!(!may_still_run(&m, &l, at(1_030)), "revoked");
    }

    fn decide(leases: Vec<Lease>, now: SystemTime) -> Refusal {
        decide_in(manifest_of(leases), now, |_| {})
    }

    fn manifest_of(leases: Vec<Lease>) -> Manifest {
        Manifest {
            schema: MANIFEST_SCHEMA.into(),
            leases,
            revocations: vec![],
            superseded: vec![],
            foreign: vec![],
        }
    }

    /// Admission of `request()` against `manifest`, with a state-dir ledger
    /// that `ledger` may fill (or whose attempts it may hold) first.
    fn decide_in(manifest: Manifest, now: SystemTime, ledger: impl FnOnce(&Path)) -> Refusal {
        let dir = tempfile::tempdir().unwrap();
        ledger(dir.path());
        let store = governed_ledger::LocalLedger::state_dir(dir.path());
        let session = governed_ledger::Ledger::open_goal(&store, "g").unwrap();
        let g = goal();
        let vk = trusted().verifying_key();
        let sel = Selection::Request {
            request: request(),
            profile_given: true,
        };
        let place = RunPlace {
            workspace: None,
            here: dir.path(),
        };
        let prepared = match prepare(&manifest, &g, &vk, now, &sel, place) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let ctx = Context {
            manifest: &manifest,
            goal: &g,
            trust: &vk,
            ledger: &*session,
            now,
        };
        match admit(&ctx, prepared) {
            Ok(_) => panic!("admitted a lease whose workspace does not exist"),
            Err(r) => r,
        }
    }

    fn trusted() -> SigningKey {
        SigningKey::from_bytes(&[1u8; 32])
    }

    #[test]
    fn the_validity_window_is_closed_at_issue_and_open_at_expiry() {
        let k = trusted();
        let one = |now| decide(vec![lease("a", &k, T0, T0 + 60)], at(now)).reason;
        assert_eq!(one(T0 - 1), Reason::LeaseNotYetValid);
        assert_eq!(one(T0), Reason::WorkspaceDrift, "valid from its issue time");
        assert_eq!(one(T0 + 59), Reason::WorkspaceDrift);
        assert_eq!(
            one(T0 + 60),
            Reason::LeaseExpired,
            "expired at its expiry time"
        );
    }

    /// The refusal reported is the one that got furthest; among equals, the
    /// first lease's.
    #[test]
    fn the_furthest_refusal_wins_and_ties_keep_the_first() {
        let k = trusted();
        let other = SigningKey::from_bytes(&[2u8; 32]);
        let now = at(T0 + 120);
        let r = decide(
            vec![
                lease("bad-sig", &other, T0, T0 + 60),
                lease("expired", &k, T0, T0 + 60),
            ],
            now,
        );
        assert_eq!(r.reason, Reason::LeaseExpired);
        let r = decide(
            vec![
                lease("expired", &k, T0, T0 + 60),
                lease("bad-sig", &other, T0, T0 + 60),
            ],
            now,
        );
        assert_eq!(r.reason, Reason::LeaseExpired);
        let r = decide(
            vec![
                lease("first", &k, T0, T0 + 60),
                lease("second", &k, T0, T0 + 60),
            ],
            now,
        );
        assert!(r.message.contains("lease first"), "{}", r.message);
        // Furthest of three: signature (0) < expired (3) < workspace (5).
        let r = decide(
            vec![
                lease("expired", &k, T0, T0 + 60),
                lease("live", &k, T0, T0 + 600),
                lease("bad-sig", &other, T0, T0 + 600),
            ],
            now,
        );
        assert_eq!(r.reason, Reason::WorkspaceDrift);
    }

    fn req(exe: &str, argv: &[&str], cwd: &str) -> Request {
        Request {
            executable: exe.into(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            cwd: cwd.into(),
            profile: Profile::Standard,
        }
    }

    #[test]
    fn the_first_difference_is_named_with_both_values() {
        let approved = req("python3", &["-m", "pytest", "-q"], ".");
        let cases = [
            (
                req("python3", &["-m", "pytest", "--verbose"], "."),
                r#"argv[2]: approved "-q", requested "--verbose""#,
            ),
            (
                req("python", &["-m", "pytest", "-q"], "."),
                r#"executable: approved "python3", requested "python""#,
            ),
            (
                req("python3", &["-m", "pytest"], "."),
                r#"argv[2]: approved "-q", requested nothing (3 argv elements approved, 2 requested)"#,
            ),
            (
                req("python3", &["-m", "pytest", "-q", "-x"], "."),
                r#"argv[3]: approved nothing, requested "-x" (3 argv elements approved, 4 requested)"#,
            ),
            (
                req("python3", &["-m", "pytest", "-q"], "sub"),
                r#"cwd: approved ".", requested "sub""#,
            ),
        ];
        for (requested, want) in cases {
            assert_eq!(
                first_difference(&approved, &requested, true).as_deref(),
                Some(want)
            );
        }
        let mut long = approved.clone();
        long.profile = Profile::Long;
        assert_eq!(
            first_difference(&approved, &long, true).as_deref(),
            Some("profile: approved standard, requested long")
        );
        assert_eq!(first_difference(&approved, &long, false), None);
        assert_eq!(first_difference(&approved, &approved, true), None);
    }

    /// `no_matching_lease` names the closest lease: of this Goal first,
    /// then the same executable, then the longest common argv prefix, then
    /// the same argv length, then the same cwd, then one not superseded;
    /// among equals, the last approved.
    #[test]
    fn the_closest_lease_is_ranked_goal_executable_argv_cwd() {
        let key = SigningKey::from_bytes(&[3u8; 32]);
        let with = |id: &str, goal_id: &str, r: Request| {
            let mut l = lease(id, &key, T0, T0 + 60);
            let mut body = l.body.clone();
            body.goal.id = goal_id.into();
            body.request = r;
            l = lease::seal(body, &key);
            l
        };
        let wanted = req("python3", &["-m", "pytest", "-q"], ".");
        let pick =
            |m: &Manifest| closest(m, "g", &wanted, true).map(|(l, _)| l.body.lease_id.clone());
        let cases: Vec<(Lease, Lease)> = vec![
            // (the closer, a farther one approved after it)
            (
                with("same-goal", "g", req("node", &[], "/")),
                with("other-goal", "h", wanted.clone()),
            ),
            (
                with("same-exe", "g", req("python3", &[], "/")),
                with(
                    "other-exe",
                    "g",
                    req("python", &["-m", "pytest", "-q"], "."),
                ),
            ),
            (
                with(
                    "longer-prefix",
                    "g",
                    req("python3", &["-m", "pytest", "-x"], "/"),
                ),
                with(
                    "shorter-prefix",
                    "g",
                    req("python3", &["-m", "tox", "-q"], "."),
                ),
            ),
            (
                with("same-length", "g", req("python3", &["-m", "x", "y"], "/")),
                with("other-length", "g", req("python3", &["-m", "x"], ".")),
            ),
            (
                with("same-cwd", "g", req("python3", &["-m", "x", "y"], ".")),
                with("other-cwd", "g", req("python3", &["-m", "x", "y"], "/")),
            ),
        ];
        for (near, far) in cases {
            let id = near.body.lease_id.clone();
            let m = manifest_of(vec![near.clone(), far.clone()]);
            assert_eq!(pick(&m).as_deref(), Some(id.as_str()), "near first");
            let m = manifest_of(vec![far, near]);
            assert_eq!(pick(&m).as_deref(), Some(id.as_str()), "near last");
        }
        // Equals: the last approved; and the difference it names.
        let a = with(
            "a",
            "g",
            req("python3", &["-m", "pytest", "--verbose"], "."),
        );
        let b = with(
            "b",
            "g",
            req("python3", &["-m", "pytest", "--verbose"], "."),
        );
        let m = manifest_of(vec![a, b]);
        let (l, diff) = closest(&m, "g", &wanted, true).expect("a lease");
        assert_eq!(l.body.lease_id, "b");
        assert_eq!(diff, r#"argv[2]: approved "--verbose", requested "-q""#);
        assert!(closest(&manifest_of(vec![]), "g", &wanted, true).is_none());
    }

    /// A lease that fails its signature check is explained by key ids: the
    /// approver key that signed it against the one `--trust` gave (the two
    /// `--trust`s are a known trap), or, with the right key, a changed lease.
    #[test]
    fn a_signature_failure_says_which_key_signed_and_which_was_given() {
        let approver = SigningKey::from_bytes(&[3u8; 32]);
        let runner = SigningKey::from_bytes(&[4u8; 32]);
        let l = lease("l1", &approver, T0, T0 + 60);
        let wrong = signature_failure(&l, &runner.verifying_key());
        assert!(
            wrong.starts_with(&format!(
                "lease l1 was signed by approver key id {}, but --trust gave key id {}",
                governed_evidence::sign::keyid(&approver.verifying_key()),
                governed_evidence::sign::keyid(&runner.verifying_key())
            )),
            "{wrong}"
        );
        let changed = signature_failure(&l, &approver.verifying_key());
        assert!(
            changed.starts_with("lease l1: its content does not match its fingerprint")
                && changed.contains("re-approve it"),
            "{changed}"
        );
    }

    /// Only this lease's own revocation refuses it; another lease's, in the
    /// manifest or in the ledger, does not.
    #[test]
    fn a_revocation_refuses_only_the_lease_it_names() {
        let k = trusted();
        let now = at(T0 + 1);
        let revoked = |ids: &[&str]| {
            let mut m = manifest_of(vec![lease("l", &k, T0, T0 + 60)]);
            m.revocations = ids
                .iter()
                .map(|id| governed_model::Revocation {
                    lease_id: id.to_string(),
                    by: "t".into(),
                    at: "t".into(),
                })
                .collect();
            decide_in(m, now, |_| {}).reason
        };
        assert_eq!(revoked(&[]), Reason::WorkspaceDrift);
        assert_eq!(revoked(&["other"]), Reason::WorkspaceDrift);
        assert_eq!(revoked(&["other", "l"]), Reason::LeaseRevoked);
        let in_ledger = |id: &str| {
            let m = manifest_of(vec![lease("l", &k, T0, T0 + 60)]);
            decide_in(m, now, |d| {
                let mut j = governed_ledger::journal::Journal::open(d, "g").unwrap();
                j.append(governed_model::record::Event::Revocation {
                    lease_id: id.into(),
                    by: "t".into(),
                })
                .unwrap();
            })
            .reason
        };
        assert_eq!(in_ledger("other"), Reason::WorkspaceDrift);
        assert_eq!(in_ledger("l"), Reason::LeaseRevoked);
    }

    /// An attempt whose outcome is unknown (its runner gone) blocks the
    /// Goal until a person resolves it; one a live runner still holds does
    /// not.
    #[test]
    fn an_unknown_attempt_blocks_the_goal_and_a_running_one_does_not() {
        let k = trusted();
        let now = at(T0 + 1);
        let m = || manifest_of(vec![lease("l", &k, T0, T0 + 60)]);
        let started = |d: &Path, attempt: &str| {
            let mut j = governed_ledger::journal::Journal::open(d, "g").unwrap();
            j.append(governed_testkit::fixtures::executing(
                "g", attempt, "other", 9,
            ))
            .unwrap();
        };
        let r = decide_in(m(), now, |d| started(d, "crashed"));
        assert_eq!(r.reason, Reason::UnresolvedUnknownOutcome);
        assert!(
            r.message
                .contains("governed-exec resolve --attempt crashed"),
            "{}",
            r.message
        );
        let mut held = None;
        let r = decide_in(m(), now, |d| {
            started(d, "running");
            held = Some(governed_ledger::journal::AttemptLock::acquire(d, "running").unwrap());
        });
        assert_eq!(r.reason, Reason::WorkspaceDrift);
        drop(held);
    }

    /// A lease in a format this release does not read is named as such,
    /// but only when it is the one the request or the id asks for.
    #[test]
    fn a_foreign_lease_is_named_only_when_it_is_the_one_asked_for() {
        let g = goal();
        let vk = trusted().verifying_key();
        let dir = tempfile::tempdir().unwrap();
        let place = RunPlace {
            workspace: None,
            here: dir.path(),
        };
        let mut other = request();
        other.argv = vec!["x".into()];
        let foreign = |id: Option<&str>, r: Option<&Request>| ForeignLease {
            format: 99,
            lease_id: id.map(str::to_string),
            request: r.map(|r| serde_json::to_value(r).unwrap()),
            raw: "{}".into(),
        };
        let reason = |f: ForeignLease, sel: Selection| {
            let mut m = manifest_of(vec![]);
            m.foreign.push(f);
            match prepare(&m, &g, &vk, at(T0), &sel, place) {
                Ok(_) => panic!("prepared with no lease"),
                Err(r) => r.reason,
            }
        };
        let by_request = |r: &Request| Selection::Request {
            request: r.clone(),
            profile_given: true,
        };
        let by_id = |id: &str| Selection::LeaseId(id.into());
        assert_eq!(
            reason(foreign(Some("f"), Some(&request())), by_request(&request())),
            Reason::LeaseFormatUnsupported
        );
        assert_eq!(
            reason(foreign(Some("f"), Some(&other)), by_request(&request())),
            Reason::NoMatchingLease
        );
        assert_eq!(
            reason(foreign(Some("f"), None), by_request(&request())),
            Reason::NoMatchingLease
        );
        assert_eq!(
            reason(foreign(Some("f"), None), by_id("f")),
            Reason::LeaseFormatUnsupported
        );
        assert_eq!(
            reason(foreign(Some("f"), None), by_id("g")),
            Reason::NoMatchingLease
        );
        assert_eq!(
            reason(foreign(None, None), by_id("f")),
            Reason::NoMatchingLease
        );
    }

    /// Nothing is opened or hashed for a lease that cannot pass: one signed
    /// by another key, bound to another Goal, or outside its window is
    /// refused without touching its executable (which may be large, or
    /// planted).
    #[test]
    fn prepare_opens_the_identity_only_of_a_lease_that_could_pass() {
        let k = trusted();
        let other_key = SigningKey::from_bytes(&[2u8; 32]);
        let mut other_goal = lease("other-goal", &k, T0, T0 + 60).body;
        other_goal.goal.id = "h".into();
        let leases = vec![
            lease("could-pass", &k, T0, T0 + 60),
            lease("other-key", &other_key, T0, T0 + 60),
            lease::seal(other_goal, &k),
            lease("expired", &k, T0 - 120, T0 - 60),
            lease("not-yet", &k, T0 + 60, T0 + 120),
        ];
        let m = manifest_of(leases);
        let dir = tempfile::tempdir().unwrap();
        let opened: Vec<(String, bool)> = m
            .leases
            .iter()
            .map(|l| {
                let sel = Selection::LeaseId(l.body.lease_id.clone());
                let place = RunPlace {
                    workspace: None,
                    here: dir.path(),
                };
                let p = prepare(&m, &goal(), &k.verifying_key(), at(T0), &sel, place)
                    .unwrap_or_else(|r| panic!("{}", r.message));
                assert_eq!(p.candidates.len(), 1);
                (l.body.lease_id.clone(), p.candidates[0].1.is_some())
            })
            .collect();
        assert_eq!(
            opened,
            [
                ("could-pass".to_string(), true),
                ("other-key".into(), false),
                ("other-goal".into(), false),
                ("expired".into(), false),
                ("not-yet".into(), false),
            ]
        );
    }
}
