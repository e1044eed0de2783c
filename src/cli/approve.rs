//! `approve`: the human's act. Resolve the request to its identity, show in
//! plain words exactly what is being approved, sign the lease and add it to
//! the manifest. Never prompts: the decision was made by running the command.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::cli::args::ApproveCmd;
use governed_evidence::{escape, sign};
use governed_ledger::pending::{Decision, Queue};
use governed_ledger::{LedgerSpec, LedgerSpecError};
use governed_model::goal;
use governed_model::limits::{format_ms, format_size, tier};
use governed_model::pending::{PendingApproval, PendingState};
use governed_model::{
    Binding, EnvPolicy, IsolationRequest, LeaseBody, Limits, Manifest, MaxProcesses, NoSuchId,
    Profile, Request, Supersession, Syscalls, UserSpec, LEASE_SCHEMA,
};
use governed_runner::gate::identity::{self, IdentityError, CLEAN_PATH};
use governed_runner::gate::lease;
use governed_runner::process::env;
use governed_runner::process::isolation::{
    any_isolation, boundary_text, syscall_policy_applies, syscall_policy_sha256,
};
use governed_runner::process::network;
use governed_runner::run::{new_id, read_request, RequestError};

/// Why `approve` made no lease: a usage error (exit 2), naming the flag or
/// file and, where there is one, the value that works.
#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("missing {0}")]
    Missing(&'static str),
    #[error("{flag} {shown}: too large (at most {} ms)", u64::MAX)]
    TooLarge { flag: &'static str, shown: String },
    #[error("{flag} {value}: nothing can run under it; the minimum that works is {why}")]
    BelowMinimum {
        flag: &'static str,
        value: u64,
        why: &'static str,
    },
    #[error("--ttl {0}: the lease would expire before any run; the minimum that works is 1s")]
    TtlTooShort(String),
    #[error("--ttl {0}: the lease would expire after 9999-12-31T23:59:59Z, the latest time a lease can name; give a shorter --ttl")]
    TtlTooLong(String),
    #[error("{flag} {text:?}: expected UID[:GID] as numbers")]
    UserNotNumbers { flag: &'static str, text: String },
    #[error(transparent)]
    NoSuchId(#[from] NoSuchId),
    #[error("--ledger-owner: cannot give {path} to uid {} gid {}: {source} (only root, or that uid for its own files, can)", user.uid, user.gid)]
    GiveLedger {
        path: String,
        user: UserSpec,
        #[source]
        source: nix::errno::Errno,
    },
    #[error("--ledger-owner: {path}: {source}")]
    ReadLedger {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--ledger-owner goes with --ledger DIR (a PostgreSQL ledger's access is the database's roles)")]
    LedgerOwnerWithoutDir,
    #[error("give either --request FILE or -- EXECUTABLE [ARG...], not both")]
    RequestAndCommand,
    #[error("nothing to approve: give --request FILE or -- EXECUTABLE [ARG...]")]
    NothingToApprove,
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error("--profile/--cwd disagree with the request file; the request file decides")]
    RequestDisagrees,
    #[error("argv contains a NUL byte, which execve cannot pass")]
    NulInArgv,
    #[error("workspace {path}: {source}")]
    Workspace {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("workspace: {0}")]
    WorkspaceIdentity(#[source] IdentityError),
    #[error("cwd: {0}")]
    CwdIdentity(#[source] IdentityError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Env(#[from] env::EnvError),
    #[error("{flag} {path}: {source}")]
    Path {
        flag: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--allow-net and --no-network together: --no-network allows no host at all; give one or the other")]
    NetAndNoNetwork,
    #[error(transparent)]
    Allow(#[from] network::AllowError),
    #[error("--env {0} with --allow-net: governed-exec sets {0} to its own proxy; leave it out")]
    ProxyEnv(String),
    #[error("--daemon-socket {0:?}: give the socket's absolute path")]
    DaemonSocket(String),
    #[error("--syscalls {0} without an isolation option: the syscall policy applies only to an isolated lease (--as-user, --fs-write, --fs-write-scope, --fs-read, --no-network, --allow-net, --pid-namespace); without one there is no policy to choose or waive, so leave --syscalls out")]
    SyscallsWithoutIsolation(Syscalls),
    #[error("--uses 0: nothing could run; the minimum that works is 1")]
    ZeroUses,
    #[error(transparent)]
    Ledger(#[from] LedgerSpecError),
    #[error(transparent)]
    Goal(#[from] goal::GoalError),
    #[error(transparent)]
    Key(#[from] sign::KeyError),
    #[error(transparent)]
    Manifest(#[from] lease::ManifestError),
    #[error(transparent)]
    Pending(#[from] governed_ledger::pending::PendingError),
    #[error("pending approval {id} was asked for under {asked}; {given}: approve it with the goal and workspace it was asked under")]
    PendingElsewhere {
        id: String,
        asked: String,
        given: String,
    },
    #[error("pending approval {id}: its cwd resolved to {asked} when it was asked for and resolves to {now} now; nothing was approved: the agent must ask again so the directory it runs in is what a person approves")]
    PendingCwd {
        id: String,
        asked: String,
        now: String,
    },
    #[error("pending approval {id}: the executable changed since it was asked for ({asked_path} sha256 {asked_sha}, now {now_path} sha256 {now_sha}); nothing was approved: the agent must ask again so the new file is what a person approves")]
    PendingDrift {
        id: String,
        asked_path: String,
        asked_sha: String,
        now_path: String,
        now_sha: String,
    },
    #[error("lease {old} is marked superseded in {manifest} but not yet revoked in its ledger {ledger}: {source}; run `revoke --lease {old}` once the ledger is reachable")]
    NotYetRevoked {
        old: String,
        manifest: String,
        ledger: String,
        #[source]
        source: governed_ledger::LedgerError,
    },
}

pub struct LimitOverrides {
    pub wall_time: Option<Duration>,
    pub kill_grace: Option<Duration>,
    pub cancel_grace: Option<Duration>,
    pub cpu_time: Option<Duration>,
    pub memory: Option<u64>,
    pub max_processes: Option<MaxProcesses>,
    pub max_open_files: Option<u64>,
    pub max_file_size: Option<u64>,
    pub keep_output: Option<u64>,
    pub output_cap: Option<u64>,
}

pub struct ApproveArgs {
    pub goal: PathBuf,
    pub workspace: PathBuf,
    pub manifest: PathBuf,
    pub key: PathBuf,
    pub ttl: Duration,
    pub uses: u64,
    pub approver: Option<String>,
    pub profile: Option<Profile>,
    pub cwd: Option<String>,
    pub limits: LimitOverrides,
    pub env: Vec<String>,
    pub as_user: Option<String>,
    pub fs_write: Vec<PathBuf>,
    pub fs_write_scope: bool,
    pub fs_read: Vec<PathBuf>,
    pub no_network: bool,
    /// `--allow-net HOST[:PORT]` entries as given (CONTRACT §8).
    pub allow_net: Vec<String>,
    /// `--daemon-socket PATH` (repeatable).
    pub daemon_sockets: Vec<String>,
    pub pid_namespace: bool,
    /// `--syscalls default|unconfined` (only with an isolation option).
    pub syscalls: Option<Syscalls>,
    pub max_executable_size: u64,
    pub request: Option<String>,
    pub command: Vec<String>,
    /// Bind by content (CONTRACT §4 "Binding") instead of this machine.
    pub portable: bool,
    /// `--ledger PATH|postgres://HOST[:PORT]/DB`.
    pub ledger: Option<String>,
    /// Compute the lease without creating anything on disk (a missing
    /// ledger directory is not made): `approve --file --check`.
    pub resolve_only: bool,
    /// `--ledger-owner UID[:GID]`: the uid a `--ledger DIR` is given to.
    pub ledger_owner: Option<String>,
    /// `--pending ID` and the state dir whose queue holds it.
    pub pending: Option<(String, PathBuf)>,
}

impl ApproveArgs {
    /// `approve`'s flags for one lease (without `--file`).
    pub fn from_cmd(a: ApproveCmd) -> Result<ApproveArgs, ApproveError> {
        Ok(ApproveArgs {
            goal: a.goal.ok_or(ApproveError::Missing("--goal"))?,
            workspace: a.workspace.ok_or(ApproveError::Missing("--workspace"))?,
            manifest: a.manifest,
            key: a.key.ok_or(ApproveError::Missing("--key"))?,
            ttl: a.ttl,
            uses: a.uses,
            approver: a.approver,
            profile: a.profile,
            cwd: a.cwd,
            limits: LimitOverrides {
                wall_time: a.wall_time,
                kill_grace: a.kill_grace,
                cancel_grace: a.cancel_grace,
                cpu_time: a.cpu_time,
                memory: a.memory,
                max_processes: a.max_processes,
                max_open_files: a.max_open_files,
                max_file_size: a.max_file_size,
                keep_output: a.keep_output,
                output_cap: a.output_cap,
            },
            env: a.env,
            as_user: a.as_user,
            fs_write: a.fs_write,
            fs_write_scope: a.fs_write_scope,
            fs_read: a.fs_read,
            no_network: a.no_network,
            allow_net: a.allow_net,
            daemon_sockets: a.daemon_socket,
            pid_namespace: a.pid_namespace,
            syscalls: a.syscalls,
            max_executable_size: a.max_executable_size,
            request: a.request,
            command: a.command,
            portable: a.portable,
            ledger: a.ledger,
            resolve_only: false,
            ledger_owner: a.ledger_owner,
            pending: a.pending.map(|id| {
                let dir = a
                    .state_dir
                    .unwrap_or_else(governed_ledger::journal::default_state_dir);
                (id, dir)
            }),
        })
    }
}

/// The smallest values under which a program can start at all; below them
/// every run would spend a use and fail, so `approve` refuses them.
pub const MIN_MEMORY_BYTES: u64 = 16 * 1024 * 1024;
/// stdin, stdout, stderr, a `#!` script's fd 3, one for the dynamic loader.
pub const MIN_OPEN_FILES: u64 = 5;
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// The latest expiry a lease can name: 9999-12-31T23:59:59Z (RFC 3339).
const MAX_EXPIRY_SECS: u64 = 253_402_300_799;

fn millis(flag: &'static str, d: Duration) -> Result<u64, ApproveError> {
    u64::try_from(d.as_millis()).map_err(|_| ApproveError::TooLarge {
        flag,
        shown: humantime::format_duration(d).to_string(),
    })
}

fn apply_overrides(mut l: Limits, o: &LimitOverrides) -> Result<Limits, ApproveError> {
    if let Some(d) = o.wall_time {
        l.wall_time_ms = millis("--wall-time", d)?;
    }
    if let Some(d) = o.kill_grace {
        l.kill_grace_ms = millis("--kill-grace", d)?;
    }
    if let Some(d) = o.cancel_grace {
        l.cancel_grace_ms = millis("--cancel-grace", d)?;
    }
    if let Some(d) = o.cpu_time {
        l.cpu_time_s = d.as_secs().max(1);
    }
    let set = |dst: &mut u64, v: Option<u64>| {
        if let Some(v) = v {
            *dst = v;
        }
    };
    set(&mut l.memory_bytes, o.memory);
    if let Some(m) = o.max_processes {
        l.max_processes = m;
    }
    set(&mut l.max_open_files, o.max_open_files);
    set(&mut l.max_file_size_bytes, o.max_file_size);
    set(&mut l.keep_output_bytes, o.keep_output);
    set(&mut l.output_cap_bytes, o.output_cap);
    for (name, v, min, why) in [
        ("--wall-time", l.wall_time_ms, 1, "1ms"),
        (
            "--memory",
            l.memory_bytes,
            MIN_MEMORY_BYTES,
            "16MiB (the smallest address space in which a dynamically linked program reliably starts)",
        ),
        (
            "--max-open-files",
            l.max_open_files,
            MIN_OPEN_FILES,
            "5 (stdin, stdout, stderr, a script's fd and one for the dynamic loader)",
        ),
    ] {
        if v < min {
            return Err(ApproveError::BelowMinimum {
                flag: name,
                value: v,
                why,
            });
        }
    }
    Ok(l)
}

/// `issued + ttl`, refused when no program could use it (below 1s) or it
/// would pass the latest time a lease can name.
fn expiry(issued: SystemTime, ttl: Duration) -> Result<SystemTime, ApproveError> {
    let shown = humantime::format_duration(ttl).to_string();
    if ttl < MIN_TTL {
        return Err(ApproveError::TtlTooShort(shown));
    }
    let latest = SystemTime::UNIX_EPOCH + Duration::from_secs(MAX_EXPIRY_SECS);
    issued
        .checked_add(ttl)
        .filter(|t| *t <= latest)
        .ok_or(ApproveError::TtlTooLong(shown))
}

/// `UID[:GID]` as `flag` (`--as-user`, `--ledger-owner`) gives it.
fn parse_user(flag: &'static str, s: &str) -> Result<UserSpec, ApproveError> {
    let (u, g) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let not_numbers = || ApproveError::UserNotNumbers {
        flag,
        text: s.to_string(),
    };
    let uid: u32 = u.parse().map_err(|_| not_numbers())?;
    let gid: u32 = match g {
        Some(g) => g.parse().map_err(|_| not_numbers())?,
        None => uid,
    };
    let spec = UserSpec { uid, gid };
    spec.check().map_err(|e| NoSuchId { flag, ..e })?;
    Ok(spec)
}

/// Give a ledger directory, and everything in it, to the uid and gid that
/// will run the lease (`--ledger-owner`): a CI runner of another uid must
/// create and lock files there. Symlinks are changed themselves, never
/// followed.
fn give_ledger(dir: &Path, user: UserSpec) -> Result<(), ApproveError> {
    use nix::unistd::{fchownat, Gid, Uid};
    fn walk(p: &Path, user: UserSpec, depth: usize) -> Result<(), ApproveError> {
        fchownat(
            None,
            p,
            Some(Uid::from_raw(user.uid)),
            Some(Gid::from_raw(user.gid)),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|source| ApproveError::GiveLedger {
            path: p.display().to_string(),
            user,
            source,
        })?;
        let is_dir = std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
        if is_dir && depth < 8 {
            let entries = std::fs::read_dir(p).map_err(|source| ApproveError::ReadLedger {
                path: p.display().to_string(),
                source,
            })?;
            for entry in entries.flatten() {
                walk(&entry.path(), user, depth + 1)?;
            }
        }
        Ok(())
    }
    walk(dir, user, 0)
}

/// Who can spend a ledger directory's uses, from its owner and mode: the
/// line the approval summary prints, so a root approver sees that a CI
/// runner of another uid could not.
fn ledger_access(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    let mode = m.mode() & 0o7777;
    let group = if mode & 0o070 == 0o070 {
        format!(" and members of gid {}", m.gid())
    } else {
        String::new()
    };
    Some(format!(
        "{} is owned by uid {} gid {} with mode {mode:04o}: only uid {}{group} (and root) can spend uses there; for runners of another uid, approve with --ledger-owner UID[:GID] (or chown/chmod the directory and its journal/)",
        dir.display(),
        m.uid(),
        m.gid(),
        m.uid()
    ))
}

/// The request `approve` is asked to approve: `--request FILE` or the
/// words after `--`, with `--cwd` and `--profile`.
pub fn request_of(a: &ApproveArgs) -> Result<Request, ApproveError> {
    match (&a.request, a.command.is_empty()) {
        (Some(_), false) => Err(ApproveError::RequestAndCommand),
        (None, true) => Err(ApproveError::NothingToApprove),
        (Some(src), true) => {
            let r = read_request(src)?;
            if a.profile.is_some_and(|p| p != r.profile)
                || a.cwd.as_ref().is_some_and(|c| c != &r.cwd)
            {
                return Err(ApproveError::RequestDisagrees);
            }
            Ok(r)
        }
        (None, false) => {
            let mut words = a.command.clone();
            let executable = words.remove(0);
            Ok(Request {
                executable,
                argv: words,
                cwd: a.cwd.clone().unwrap_or_else(|| ".".into()),
                profile: a.profile.unwrap_or(Profile::Standard),
            })
        }
    }
}

/// Everything `approve` decides about one request, resolved on this
/// machine: the lease body before it is signed. `approve -- CMD` and every
/// entry of `approve --file` go through here, so an approvals file's lease
/// is the lease the command line would make.
pub fn lease_body(
    a: &ApproveArgs,
    goal: &goal::LoadedGoal,
    request: Request,
    now: SystemTime,
) -> Result<LeaseBody, ApproveError> {
    if request.argv.iter().any(|s| s.contains('\0')) {
        return Err(ApproveError::NulInArgv);
    }
    let ws_canon =
        std::fs::canonicalize(&a.workspace).map_err(|source| ApproveError::Workspace {
            path: a.workspace.display().to_string(),
            source,
        })?;
    let workspace = identity::open_dir(&ws_canon).map_err(ApproveError::WorkspaceIdentity)?;
    let cwd_path = identity::resolve_cwd(&ws_canon, &request.cwd)?;
    let cwd = identity::open_dir(&cwd_path).map_err(ApproveError::CwdIdentity)?;

    let env_policy = env_policy(a)?;
    let exe = identity::open_executable(
        &request.executable,
        &env_policy.path,
        &cwd_path,
        a.max_executable_size,
        identity::Snapshot::HashOnly,
    )?;

    let limits = apply_overrides(tier(request.profile), &a.limits)?;
    let isolation = isolation_request(a, &env_policy)?;
    if a.uses == 0 {
        return Err(ApproveError::ZeroUses);
    }
    let ledger = lease_ledger(a)?;
    let (binding, portable) = if a.portable {
        (
            Binding::Portable,
            Some(identity::portable(&exe.identity, &ws_canon)),
        )
    } else {
        (Binding::Machine, None)
    };
    let expires = expiry(now, a.ttl)?;
    let approver = approver_name(a);
    Ok(LeaseBody {
        schema: LEASE_SCHEMA.into(),
        lease_id: new_id("lease"),
        goal: goal.reference(),
        workspace: workspace.identity,
        request,
        executable: exe.identity,
        cwd: cwd.identity,
        limits,
        env: env_policy,
        isolation,
        approver,
        issued_at: humantime::format_rfc3339_seconds(now).to_string(),
        expires_at: humantime::format_rfc3339_seconds(expires).to_string(),
        max_uses: a.uses,
        binding,
        portable,
        ledger,
    })
}

/// The request's environment: `--env` assignments, `PATH` apart (the clean
/// one unless given).
fn env_policy(a: &ApproveArgs) -> Result<EnvPolicy, ApproveError> {
    let mut fixed = std::collections::BTreeMap::new();
    for s in &a.env {
        let (k, v) = env::parse_assignment(s)?;
        fixed.insert(k, v);
    }
    let path = fixed
        .remove("PATH")
        .unwrap_or_else(|| CLEAN_PATH.to_string());
    let env_policy = EnvPolicy { path, fixed };
    Ok(env_policy)
}

/// The isolation the lease asks of its run: the filesystem scopes made
/// canonical, the network allow-list (no proxy variable fixed beside it),
/// the daemon sockets (absolute paths).
fn isolation_request(
    a: &ApproveArgs,
    env_policy: &EnvPolicy,
) -> Result<IsolationRequest, ApproveError> {
    let canonical_all = |flag: &'static str, paths: &[PathBuf]| {
        paths
            .iter()
            .map(|p| {
                std::fs::canonicalize(p)
                    .map(|c| c.display().to_string())
                    .map_err(|source| ApproveError::Path {
                        flag,
                        path: p.display().to_string(),
                        source,
                    })
            })
            .collect::<Result<Vec<String>, ApproveError>>()
    };
    let fs_read = (!a.fs_read.is_empty())
        .then(|| canonical_all("--fs-read", &a.fs_read))
        .transpose()?;
    let fs_write = (!a.fs_write.is_empty() || a.fs_write_scope || fs_read.is_some())
        .then(|| canonical_all("--fs-write", &a.fs_write))
        .transpose()?;
    if a.no_network && !a.allow_net.is_empty() {
        return Err(ApproveError::NetAndNoNetwork);
    }
    let allow_net = network::canonical_list(&a.allow_net)?;
    if !allow_net.is_empty() {
        let proxy_vars = network::proxy_env();
        if let Some((k, _)) = env_policy
            .fixed
            .iter()
            .find(|(k, _)| proxy_vars.iter().any(|(p, _)| p == *k))
        {
            return Err(ApproveError::ProxyEnv(k.clone()));
        }
    }
    for s in &a.daemon_sockets {
        if !Path::new(s).is_absolute() || s.contains('\0') {
            return Err(ApproveError::DaemonSocket(s.clone()));
        }
    }
    let mut isolation = IsolationRequest {
        daemon_sockets: a.daemon_sockets.clone(),
        as_user: a
            .as_user
            .as_deref()
            .map(|s| parse_user("--as-user", s))
            .transpose()?,
        fs_write,
        fs_read,
        no_network: a.no_network,
        pid_namespace: a.pid_namespace,
        allow_net,
        syscalls: None,
    };
    // The policy is on for every isolated lease and written into it, so
    // the signed bytes say which; a lease without isolation has none.
    isolation.syscalls = match (any_isolation(&isolation), a.syscalls) {
        (true, chosen) => Some(chosen.unwrap_or(Syscalls::Default)),
        (false, None) => None,
        (false, Some(s)) => return Err(ApproveError::SyscallsWithoutIsolation(s)),
    };
    Ok(isolation)
}

/// The ledger the lease names, as the lease records it.
fn lease_ledger(a: &ApproveArgs) -> Result<Option<String>, ApproveError> {
    Ok(a.ledger
        .as_deref()
        .map(|l| {
            LedgerSpec::parse(l).and_then(|s| {
                if a.resolve_only {
                    s.lease_name()
                } else {
                    s.for_lease()
                }
            })
        })
        .transpose()?)
}

/// Who approves: `--approver`, else `$USER`, else the uid.
fn approver_name(a: &ApproveArgs) -> String {
    a.approver
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| format!("uid {}", nix::unistd::getuid()))
}

/// Resolve, sign and store the lease. Returns the lease id.
pub fn approve(a: ApproveArgs) -> Result<String, ApproveError> {
    let goal = governed_evidence::goal_file::load(&a.goal)?;
    let key = sign::load_signing_key(&a.key)?;
    let now = SystemTime::now();
    let pending = a
        .pending
        .as_ref()
        .map(|(id, dir)| pending_entry(&a, &goal, id, dir, now))
        .transpose()?;
    let request = match &pending {
        Some((_, e)) => e.request.clone(),
        None => request_of(&a)?,
    };
    let body = lease_body(&a, &goal, request, now)?;
    if let Some((_, e)) = &pending {
        same_executable(e, &body)?;
    }
    // The ledger directory is given to the runner's uid before the summary
    // (which says who can spend uses there), and again after approve's own
    // writes to it (a superseded lease's revocation).
    let owner = ledger_owner(&a, body.ledger.as_deref())?;
    if let Some((dir, user)) = &owner {
        give_ledger(dir, *user)?;
    }
    eprint!("{}", summary(&body, a.ttl));
    let sealed = lease::seal(body, &key);
    let id = sealed.body.lease_id.clone();
    let goal_id = sealed.body.goal.id.clone();
    let replaced = lease::update_manifest(&a.manifest, true, |m| {
        let replaced = supersede(m, &sealed.body);
        m.leases.push(sealed);
        replaced
    })?;
    report_superseded(&a.manifest, &id, &goal_id, &replaced)?;
    eprintln!(
        "approved: lease {id} added to {}",
        escape::visible(&a.manifest.display().to_string())
    );
    if let Some((dir, user)) = owner {
        give_ledger(&dir, user)?;
    }
    if let Some((queue, e)) = pending {
        let by = approver_name(&a);
        let keyid = sign::keyid(&key.verifying_key());
        queue.decide(
            &e.id,
            Decision::Approved {
                lease_id: id.clone(),
            },
            (&by, &keyid),
            SystemTime::now(),
        )?;
        eprintln!(
            "  {:<13} pending {} is approved by lease {id}",
            "answers", e.id
        );
    }
    Ok(id)
}

/// The pending entry `approve --pending ID` answers: still pending, asked
/// under this goal (id, revision, digest) and this workspace.
fn pending_entry(
    a: &ApproveArgs,
    goal: &goal::LoadedGoal,
    id: &str,
    state_dir: &Path,
    now: SystemTime,
) -> Result<(Queue, PendingApproval), ApproveError> {
    let queue = Queue::of(state_dir);
    let e = queue.get(id, now)?;
    if e.state != PendingState::Pending {
        return Err(governed_ledger::pending::PendingError::Decided {
            id: e.id,
            state: e.state,
        }
        .into());
    }
    let want = goal.reference();
    let ws = std::fs::canonicalize(&a.workspace)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| a.workspace.display().to_string());
    if e.goal != want || e.workspace != ws {
        return Err(ApproveError::PendingElsewhere {
            id: e.id,
            asked: format!(
                "goal {:?} revision {} (sha256 {}) in workspace {}",
                e.goal.id,
                e.goal.revision,
                e.goal.sha256,
                escape::visible(&e.workspace)
            ),
            given: format!(
                "--goal is {:?} revision {} (sha256 {}) and --workspace {}",
                want.id,
                want.revision,
                want.sha256,
                escape::visible(&ws)
            ),
        });
    }
    Ok((queue, e))
}

/// The executable and cwd resolved now are the ones the pending request
/// resolved to.
fn same_executable(e: &PendingApproval, body: &LeaseBody) -> Result<(), ApproveError> {
    let (cwd, asked) = (&body.cwd, &e.cwd);
    if (&cwd.path, cwd.device, cwd.inode) != (&asked.path, asked.device, asked.inode) {
        return Err(ApproveError::PendingCwd {
            id: e.id.clone(),
            asked: format!(
                "{} (device {}, inode {})",
                escape::visible(&asked.path),
                asked.device,
                asked.inode
            ),
            now: format!(
                "{} (device {}, inode {})",
                escape::visible(&cwd.path),
                cwd.device,
                cwd.inode
            ),
        });
    }
    let now = &body.executable;
    if now.canonical_path == e.executable.canonical_path && now.sha256 == e.executable.sha256 {
        return Ok(());
    }
    Err(ApproveError::PendingDrift {
        id: e.id.clone(),
        asked_path: escape::visible(&e.executable.canonical_path),
        asked_sha: e.executable.sha256.clone(),
        now_path: escape::visible(&now.canonical_path),
        now_sha: now.sha256.clone(),
    })
}

/// `--ledger-owner UID[:GID]`: only with a `--ledger DIR` (a PostgreSQL
/// ledger's access is the database's roles).
fn ledger_owner(
    a: &ApproveArgs,
    ledger: Option<&str>,
) -> Result<Option<(PathBuf, UserSpec)>, ApproveError> {
    let Some(o) = &a.ledger_owner else {
        return Ok(None);
    };
    let user = parse_user("--ledger-owner", o)?;
    match a.ledger.as_deref().map(LedgerSpec::parse).transpose()? {
        Some(LedgerSpec::Path(_)) => Ok(ledger.map(|dir| (PathBuf::from(dir), user))),
        _ => Err(ApproveError::LedgerOwnerWithoutDir),
    }
}

/// After the manifest was written: say which leases the new one replaced,
/// and revoke those that name a ledger there too, as `revoke` does: every
/// runner checks that ledger, so an old manifest copy cannot bring the
/// replaced lease back beside the new one.
pub fn report_superseded(
    manifest: &Path,
    id: &str,
    goal_id: &str,
    replaced: &[(String, Option<String>)],
) -> Result<(), ApproveError> {
    for (old, _) in replaced {
        eprintln!("  {:<13} lease {old} (same goal, request and binding): marked superseded; it no longer runs", "replaces");
    }
    for (old, named) in replaced {
        let Some(named) = named else { continue };
        let l = governed_ledger::LedgerSpec::parse(named)?.open();
        let by = format!("superseded by lease {id}");
        governed_ledger::revoke(&*l, goal_id, old, &by).map_err(|source| {
            ApproveError::NotYetRevoked {
                old: old.clone(),
                manifest: escape::visible(&manifest.display().to_string()),
                ledger: escape::visible(&l.name()),
                source,
            }
        })?;
    }
    Ok(())
}

/// Whether `old` answers the same request as `new`: same Goal id, request
/// and workspace binding (CONTRACT §2, supersession). This is how an
/// approvals file's entry is recognised in a manifest, too.
pub fn same_approval(old: &LeaseBody, new: &LeaseBody) -> bool {
    let same_binding = match (old.binding, new.binding) {
        (Binding::Machine, Binding::Machine) => old.workspace.path == new.workspace.path,
        (Binding::Portable, Binding::Portable) => true,
        _ => false,
    };
    old.goal.id == new.goal.id && old.request == new.request && same_binding
}

/// The leases of `m` neither revoked nor superseded.
pub fn live_leases(m: &Manifest) -> impl Iterator<Item = &LeaseBody> {
    let dead: std::collections::BTreeSet<&str> = m
        .revocations
        .iter()
        .map(|r| r.lease_id.as_str())
        .chain(m.superseded.iter().map(|s| s.lease_id.as_str()))
        .collect();
    m.leases
        .iter()
        .map(|l| &l.body)
        .filter(move |b| !dead.contains(b.lease_id.as_str()))
}

/// Mark every live lease that `new` covers (same Goal id, request and
/// workspace binding) superseded by it. Returns their ids and the ledgers
/// they name.
pub fn supersede(m: &mut Manifest, new: &LeaseBody) -> Vec<(String, Option<String>)> {
    let replaced: Vec<(String, Option<String>)> = live_leases(m)
        .filter(|b| same_approval(b, new))
        .map(|b| (b.lease_id.clone(), b.ledger.clone()))
        .collect();
    let at = governed_ledger::journal::now_rfc3339();
    for (old, _) in &replaced {
        m.superseded.push(Supersession {
            lease_id: old.clone(),
            by_lease: new.lease_id.clone(),
            at: at.clone(),
        });
    }
    replaced
}

/// The plain-language approval summary.
pub fn summary(b: &LeaseBody, ttl: Duration) -> String {
    // Every string in the summary may come from the request or the disk:
    // `quoted` shows hidden characters (bidi overrides, zero-width, controls)
    // as `\u{…}`; every value (paths, symlink targets, the interpreter line
    // come from file and directory names, which may hold a newline) is one
    // `visible` line, so no name can add a line of its own to what the
    // approver reads. The lease keeps the exact bytes.
    let mut rows = identity_rows(b);
    rows.extend(request_rows(b));
    rows.extend(limits_rows(b));
    rows.extend(network_rows(b));
    for w in crate::cli::toolchain::warnings(b) {
        rows.push(("warning", w));
    }
    rows.extend(validity_rows(b, ttl));
    rows.extend(boundary_rows(b));
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("  {k:<13} {}\n", escape::visible(&v)));
    }
    escape::visible_lines(&format!("governed-exec: approval summary\n{out}"))
}

/// One line of the approval summary: its key and its value, not yet made
/// `visible`.
type Row = (&'static str, String);

/// What the lease names: its id, the goal, the executable and its binding.
fn identity_rows(b: &LeaseBody) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut line = |k: &'static str, v: String| rows.push((k, v));
    let q = |s: &str| escape::quoted(s);
    let e = &b.executable;
    line("lease", b.lease_id.clone());
    line(
        "goal",
        format!(
            "{} revision {} (sha256 {})",
            q(&b.goal.id),
            b.goal.revision,
            b.goal.sha256
        ),
    );
    line(
        "executable",
        format!("{} resolves to {}", q(&e.requested), e.canonical_path),
    );
    for hop in &e.symlink_chain {
        line("  via symlink", format!("{} -> {}", hop.path, hop.target));
    }
    match &b.portable {
        None => line(
            "sha256",
            format!("{} ({} bytes, inode {})", e.sha256, e.size, e.inode),
        ),
        Some(_) => line("sha256", format!("{} ({} bytes)", e.sha256, e.size)),
    }
    match &b.portable {
        None => line(
            "binding",
            "machine: this workspace and executable on this machine (path, device, inode, creation stamp, timestamps)".into(),
        ),
        Some(p) => line(
            "binding",
            format!(
                "portable: executable {} ({}), mode {:o} and sha256; the workspace is the directory `run --workspace` names (default: the current directory); inode, device and timestamps are not checked",
                p.executable_path,
                if p.in_workspace { "relative to the workspace" } else { "absolute" },
                p.mode & 0o7777
            ),
        ),
    }
    if let Some(i) = &e.interpreter {
        line(
            "interpreter",
            format!("#!{i} (a script: its bytes are pinned, the interpreter reads the sealed copy; the interpreter itself is opened by path, not pinned by hash)"),
        );
    }
    rows
}

/// What the child is started as: argv, cwd, profile.
fn request_rows(b: &LeaseBody) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut line = |k: &'static str, v: String| rows.push((k, v));
    let q = |s: &str| escape::quoted(s);
    let argv: Vec<String> = std::iter::once(&b.request.executable)
        .chain(&b.request.argv)
        .map(|a| q(a))
        .collect();
    line("argv", format!("[{}] (literal: no shell)", argv.join(", ")));
    line(
        "cwd",
        format!("{} (workspace {})", b.cwd.path, b.workspace.path),
    );
    for (what, d) in [("workspace", &b.workspace), ("cwd", &b.cwd)] {
        if d.creation.is_none() {
            line("warning", format!("the filesystem of the {what} offers no creation stamp: re-creation at the same inode cannot be detected there"));
        }
    }
    line("profile", b.request.profile.to_string());
    rows
}

/// The limits of the run and the environment it gets.
fn limits_rows(b: &LeaseBody) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut line = |k: &'static str, v: String| rows.push((k, v));
    let l = &b.limits;
    line("limits", format!(
        "wall time {}, kill grace {}, cancel grace {}, cpu time {}s, memory {} (the run's memory cgroup where one can be made, else address space per process), processes {}, open files {}, file size {}, kept output {} per stream (half head, half tail), output cap {}",
        format_ms(l.wall_time_ms), format_ms(l.kill_grace_ms), format_ms(l.cancel_grace_ms), l.cpu_time_s, format_size(l.memory_bytes),
        l.max_processes, l.max_open_files, format_size(l.max_file_size_bytes), format_size(l.keep_output_bytes), format_size(l.output_cap_bytes)
    ));
    if l.max_processes == MaxProcesses::UNLIMITED {
        line(
            "processes",
            "UNLIMITED: the approver waived the process limit (--max-processes unlimited); nothing bounds how many processes the run may start".into(),
        );
    }
    line("environment", env::describe(&b.env));
    rows
}

/// The network allow-list and what the proxy does and does not cover.
fn network_rows(b: &LeaseBody) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut line = |k: &'static str, v: String| rows.push((k, v));
    if !b.isolation.allow_net.is_empty() {
        line(
            "network",
            format!(
                "only {} (a port is part of each entry), through governed-exec's HTTP proxy; every connection attempt is listed in the signed receipt",
                b.isolation.allow_net.join(", ")
            ),
        );
        line(
            "  proxy env",
            network::proxy_env()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
        line(
            "  covered",
            "CONNECT (TLS passed through, not inspected) and absolute-form http:// requests to a listed host:port; names resolved by the proxy, and a name that resolves to a loopback, link-local, private or runner address is refused unless that IP literal is listed".into(),
        );
        line(
            "  not covered",
            "what a listed host does with the data or forwards it to; plain http:// content is not encrypted; programs that ignore the proxy variables, DNS lookups and UDP get no network at all (fail closed); needs a network namespace at run (CAP_SYS_ADMIN or an unprivileged user namespace; else isolation_unavailable)".into(),
        );
    }
    rows
}

/// stdin, how long and how often the lease is valid, who approved it, where its uses count.
fn validity_rows(b: &LeaseBody, ttl: Duration) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut line = |k: &'static str, v: String| rows.push((k, v));
    line(
        "stdin",
        "/dev/null; no terminal; new session; no inherited fds".into(),
    );
    line(
        "valid",
        format!(
            "from {} until {} ({}), {} use(s)",
            b.issued_at,
            b.expires_at,
            humantime::format_duration(ttl),
            b.max_uses
        ),
    );
    line("approver", b.approver.clone());
    match &b.ledger {
        None => line(
            "ledger",
            "the runner's state dir: uses, revocations and unknown outcomes are counted per state dir, so runners with different state dirs each count their own uses".into(),
        ),
        Some(l) => {
            line(
                "ledger",
                format!("{l}: every run spends its uses there, whatever its state dir; unreachable means refused (ledger_unavailable)"),
            );
            if let Some(access) = ledger_access(Path::new(l)) {
                line("ledger", access);
            }
        }
    }
    rows
}

/// The boundary the child runs within, and what this machine cannot verify of it.
fn boundary_rows(b: &LeaseBody) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut line = |k: &'static str, v: String| rows.push((k, v));
    let uid = b
        .isolation
        .as_user
        .map_or_else(|| nix::unistd::geteuid().as_raw(), |u| u.uid);
    line(
        "boundary",
        boundary_text(&b.isolation, uid, None, None, None),
    );
    line("syscalls", syscalls_row(&b.isolation));
    if b.portable.is_some() && b.isolation.fs_write.is_some() {
        // The workspace of a portable lease is whatever `run --workspace`
        // names: the write scope goes with it.
        line(
            "note",
            "this lease is portable: its write scope is the directory `run --workspace` names (default: the runner's current directory), not this workspace; whoever invokes run chooses which directory the child may write".into(),
        );
    }
    let here = Machine {
        euid: nix::unistd::geteuid().as_raw(),
        admin: governed_sys::has_effective_capability(21),
        landlock: governed_sys::landlock_abi_version().is_some(),
    };
    let warnings = unverifiable_here(&b.isolation, here);
    let reach_warnings = if warnings.is_empty() {
        daemons_in_reach_here(&b.isolation, here)
    } else {
        Vec::new()
    };
    for w in warnings.into_iter().chain(reach_warnings) {
        line("WARNING", w);
    }
    rows
}

/// The syscall policy the lease gets (CONTRACT §7, v1.3): its name and
/// the digest of its program on this machine's architecture, its waiver,
/// or why none applies.
pub fn syscalls_row(iso: &IsolationRequest) -> String {
    if !any_isolation(iso) {
        return "none: the lease asks for no isolation option, and the syscall policy applies only to an isolated lease".into();
    }
    if !syscall_policy_applies(iso) {
        return "unconfined (waived by the approver, --syscalls unconfined): no seccomp syscall policy; the child may make every system call the kernel lets its uid make".into();
    }
    let name = governed_sys::SYSCALL_POLICY_NAME;
    match governed_sys::SyscallFilter::docker_default() {
        Some(f) => format!(
            "{name} (sha256 {} on {}; seccomp, installed right before exec; `run` refuses isolation_unavailable where it cannot be enforced; --syscalls unconfined waives it)",
            syscall_policy_sha256(&f),
            std::env::consts::ARCH
        ),
        None => format!(
            "{name}: no policy is written for {}, so `run` refuses this lease here (isolation_unavailable); --syscalls unconfined waives it",
            std::env::consts::ARCH
        ),
    }
}

/// Daemon sockets a child of this lease could connect to on this machine
/// (the reach `run` computes, CONTRACT §7): each makes receipts
/// NOT_VERIFIED (the daemon reads the key and starts processes for it), so
/// the approver hears it here, with the fix. A uid-0 child under isolation
/// on a runner that can cover them is not warned about.
pub fn daemons_in_reach_here(iso: &IsolationRequest, m: Machine) -> Vec<String> {
    use governed_runner::gate::reach::{self, ChildIds};
    let child_uid = iso.as_user.map_or(m.euid, |u| u.uid);
    let covers = m.euid == 0 && m.admin && governed_runner::process::isolation::any_isolation(iso);
    // Covers hold with the Landlock guard (a uid-0 child) or a fresh /proc.
    let covers_hold = covers && reach::covers_hold(child_uid == 0 && m.landlock, iso.pid_namespace);
    if covers_hold {
        return Vec::new();
    }
    let ids = match iso.as_user {
        Some(u) => ChildIds::switched(u.uid, u.gid),
        None => ChildIds::runners_own(),
    };
    reach::daemon_sockets(child_uid, m.euid, &iso.daemon_sockets)
        .into_iter()
        .filter_map(|(sock, daemon)| {
            let meta = std::fs::metadata(&sock).ok()?;
            let reachable = reach::socket_reach(&ids, covers_hold, &meta) == reach::SocketReach::Reachable;
            reachable.then(|| format!(
                "receipts of this lease will be NOT_VERIFIED on this machine (signing_key_in_child_reach, and no_leftover_processes if the goal asks): the child ({}) can connect to {daemon} at {} ({}), which reads files and starts processes for it; approve --as-user UID for a uid outside the socket's owner and group{}, or run governed-exec as such a uid",
                ids.describe(),
                sock.display(),
                reach::mode_text(&meta),
                if m.euid == 0 && m.admin && iso.as_user.is_some_and(|u| u.uid != 0) {
                    ", or add --pid-namespace (its covers then hold)"
                } else {
                    ""
                }
            ))
        })
        .collect()
}

/// What decides, on the machine where `approve` runs, whether the runner
/// key and the cleanup witness are out of the child's reach.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    /// The uid runs will have (the approver's, on this machine).
    pub euid: u32,
    /// CAP_SYS_ADMIN: a uid-0 child can be given its own mount namespace.
    pub admin: bool,
    /// The kernel offers Landlock.
    pub landlock: bool,
}

/// The reasons receipts of a lease with `iso` will be `NOT_VERIFIED` when
/// run on this machine by this uid (the same rules `run` applies in its
/// signing report and cleanup witness, CONTRACT §7), each naming the
/// flags that fix it; empty when nothing is predicted.
pub fn unverifiable_here(iso: &IsolationRequest, m: Machine) -> Vec<String> {
    let any = governed_runner::process::isolation::any_isolation(iso);
    let child_uid = iso.as_user.map_or(m.euid, |u| u.uid);
    let mut out = Vec::new();
    if child_uid == 0 && !any {
        out.push(format!(
            "receipts of this lease will be NOT_VERIFIED on this machine (signing_key_in_child_reach, and no_leftover_processes if the goal asks): the child runs as uid 0 with every capability, so it can read the runner key and evade the cleanup witness; re-approve with {} (or --allow-key-in-reach at verify, which proves nothing against the child)",
            if m.admin && m.landlock {
                "--fs-write-scope (the child keeps only harmless capabilities, in its own mount namespace) or --as-user UID (the child runs as that uid)"
            } else {
                "--as-user UID (the child runs as that uid; here a uid-0 child cannot be given a mount namespace and a Landlock guard)"
            }
        ));
    } else if child_uid == 0 && !(m.admin && m.landlock) {
        out.push(format!(
            "receipts of this lease will be NOT_VERIFIED on this machine (signing_key_in_child_reach): the child runs as uid 0 and {}; re-approve with --as-user UID (the child runs as that uid)",
            if m.admin {
                "the kernel offers no Landlock to guard the covered key"
            } else {
                "governed-exec lacks CAP_SYS_ADMIN here (a container's default), so the key cannot be hidden in a mount namespace"
            }
        ));
    } else if child_uid == m.euid && child_uid != 0 && !any {
        out.push(format!(
            "receipts of this lease will be NOT_VERIFIED on this machine (signing_key_in_child_reach): the child runs as uid {child_uid}, which owns the runner key; re-approve with {}",
            if m.landlock {
                "--fs-write-scope (Landlock denies the child the runner key and the state dir)"
            } else {
                "--as-user UID run by root (the kernel offers no Landlock to deny the child the key)"
            }
        ));
    } else if child_uid == m.euid && child_uid != 0 && !m.landlock {
        out.push(format!(
            "receipts of this lease will be NOT_VERIFIED on this machine (signing_key_in_child_reach): the child runs as uid {child_uid}, which owns the runner key, and the kernel offers no Landlock to deny it the key; a root runner with --as-user UID fixes it"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iso() -> IsolationRequest {
        IsolationRequest {
            as_user: None,
            fs_write: None,
            fs_read: None,
            no_network: false,
            pid_namespace: false,
            allow_net: vec![],
            daemon_sockets: vec![],
            syscalls: None,
        }
    }

    const ROOT: Machine = Machine {
        euid: 0,
        admin: true,
        landlock: true,
    };
    const USER: Machine = Machine {
        euid: 1000,
        admin: false,
        landlock: true,
    };

    #[test]
    fn a_lease_without_isolation_is_predicted_unverifiable_with_the_fix_named() {
        let w = unverifiable_here(&iso(), ROOT);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("--fs-write-scope") && w[0].contains("--as-user UID"),
            "{w:?}"
        );
        let w = unverifiable_here(&iso(), USER);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("uid 1000") && w[0].contains("--fs-write-scope"),
            "{w:?}"
        );
        // A container's root: no CAP_SYS_ADMIN, so only --as-user helps.
        let w = unverifiable_here(
            &iso(),
            Machine {
                admin: false,
                ..ROOT
            },
        );
        assert!(
            w[0].contains("--as-user UID") && !w[0].contains("--fs-write-scope"),
            "{w:?}"
        );
    }

    #[test]
    fn the_flags_it_names_clear_the_warning() {
        let scoped = IsolationRequest {
            fs_write: Some(vec![]),
            ..iso()
        };
        assert!(unverifiable_here(&scoped, ROOT).is_empty());
        assert!(unverifiable_here(&scoped, USER).is_empty());
        let other = IsolationRequest {
            as_user: Some(UserSpec {
                uid: 1000,
                gid: 1000,
            }),
            ..iso()
        };
        assert!(unverifiable_here(&other, ROOT).is_empty());
        // Isolation that cannot guard the key here still warns.
        assert_eq!(
            unverifiable_here(
                &scoped,
                Machine {
                    admin: false,
                    ..ROOT
                }
            )
            .len(),
            1
        );
        assert_eq!(
            unverifiable_here(
                &scoped,
                Machine {
                    landlock: false,
                    ..USER
                }
            )
            .len(),
            1
        );
    }
}
