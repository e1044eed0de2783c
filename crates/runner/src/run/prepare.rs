//! Stage 1, `prepare`: the run's inputs, read and checked before anything
//! is locked — the nonce, the runner key (created on first use), the goal,
//! the request (a file, stdin, `--lease ID` or `-- CMD`), the manifest, the
//! approver's key, the places; and the due sweep of killed runners'
//! scratch trees, so no other run of the Goal waits for it.

use std::path::{Path, PathBuf};

use ed25519_dalek::{SigningKey, VerifyingKey};

use crate::gate::admission::{Refusal, Selection};
use crate::gate::manifest_index::{self, PendingIndex};
use crate::process::scratch;
use crate::run::error::RunError;
use governed_evidence::sign;
use governed_ledger::journal;
use governed_model::goal::LoadedGoal;
use governed_model::{Manifest, ParseError, Profile, ReceiptRequest, Request};

use super::draft::{Draft, Stop};
use super::RunArgs;

/// What `prepare` read and checked: everything admission needs.
pub(super) struct Inputs {
    pub(super) goal: LoadedGoal,
    pub(super) selection: Selection,
    pub(super) manifest: Manifest,
    /// The manifest index to write once a run was admitted.
    pub(super) pending_index: Option<PendingIndex>,
    pub(super) trust: VerifyingKey,
    pub(super) key: SigningKey,
    pub(super) key_path: PathBuf,
    pub(super) state_dir: PathBuf,
    pub(super) workspace: Option<PathBuf>,
    pub(super) here: PathBuf,
    /// Whether this run swept the scratch trees (and so may sweep cgroups).
    pub(super) sweep: bool,
}

/// Stage 1: read and check the inputs; the draft receipt learns the nonce,
/// the key, the goal and the request as given.
pub(super) fn prepare(args: &RunArgs, state_dir: &Path, draft: &mut Draft) -> Result<Inputs, Stop> {
    // The nonce goes into every receipt of this run, refusals included; one
    // that could not be printed safely is bad input, refused without it.
    match args.nonce.as_deref().map(check_nonce).transpose() {
        Ok(n) => draft.nonce = n,
        Err(e) => return Err(Stop::Refused(RunError::Request(e).into())),
    }
    // The runner key's location is known from here on: every refusal is
    // signed, with the key created if needed (as a successful run would),
    // so a harness always gets a receipt `verify` can judge.
    let key_pair = runner_key(args.key.as_deref(), state_dir);
    if let Ok((k, _)) = &key_pair {
        draft.key = Some(k.clone());
    }
    let goal = governed_evidence::goal_file::load(&args.goal)
        .map_err(|e| Stop::Refused(RunError::Goal(e).into()))?;
    draft.goal = Some(goal.reference());
    let early = |r: Refusal| Stop::Journaled {
        goal_id: goal.goal.id.clone(),
        refusal: r,
    };
    let selection = selection(args).map_err(|e| early(RunError::Request(e).into()))?;
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
    let loaded = manifest_index::load_for(&args.manifest, state_dir, &selection)
        .map_err(|e| early(RunError::Manifest(e).into()))?;
    let trust =
        sign::load_verifying_key(&args.trust).map_err(|e| early(RunError::Trust(e).into()))?;
    let (key, key_path) = key_pair.map_err(|e| early(e.into()))?;
    let canonical = |p: &Path, what: &'static str| {
        std::fs::canonicalize(p).map_err(|source| {
            early(
                RunError::Place {
                    what,
                    path: p.display().to_string(),
                    source,
                }
                .into(),
            )
        })
    };
    let workspace = args
        .workspace
        .as_deref()
        .map(|w| canonical(w, "--workspace"))
        .transpose()?;
    let here = canonical(Path::new("."), "current directory")?;
    // Everything slow happens before the Goal's ledger lock, so other runs
    // of the Goal never wait for this run's I/O: removing the scratch trees
    // of killed runners (when due), and (in `admit`) opening and hashing the
    // executable into its sealed snapshot.
    let sweep = scratch::sweep_due(state_dir);
    if sweep {
        for base in scratch::bases(true) {
            scratch::sweep(&base);
        }
    }
    Ok(Inputs {
        goal,
        selection,
        manifest: loaded.manifest,
        pending_index: loaded.index,
        trust,
        key,
        key_path,
        state_dir: state_dir.to_path_buf(),
        workspace,
        here,
        sweep,
    })
}

/// The longest `--nonce` a receipt carries.
pub(crate) const MAX_NONCE_BYTES: usize = 256;

/// Why `run`'s request (or its nonce) was refused: always
/// `invalid_input` (`RunError::Request`).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("--nonce: empty; give the CI job's run id or another per-run value")]
    NonceEmpty,
    #[error("--nonce: {0} bytes, at most {MAX_NONCE_BYTES}")]
    NonceTooLong(usize),
    #[error("--nonce: contains a control character")]
    NonceControl,
    #[error("give exactly one of --request FILE, --lease ID, or -- EXECUTABLE [ARG...]")]
    NotExactlyOne,
    #[error("--cwd and --profile go with -- EXECUTABLE [ARG...] only")]
    CwdWithoutCommand,
    #[error("argument {0:?} is not valid UTF-8; requests are JSON strings")]
    NotUtf8(std::ffi::OsString),
    #[error("request (stdin): {0}")]
    Stdin(#[source] std::io::Error),
    #[error("request (stdin): larger than the {MAX_REQUEST_BYTES}-byte bound")]
    StdinTooLarge,
    #[error("request {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A field execve cannot take; `what` names the request file, if any.
    #[error("{}{field}", what.as_ref().map(|w| format!("{w}: ")).unwrap_or_default())]
    Field {
        what: Option<String>,
        field: FieldError,
    },
}

/// A request field that cannot be executed as given.
#[derive(Debug, thiserror::Error)]
pub enum FieldError {
    #[error("field `executable` is empty")]
    EmptyExecutable,
    #[error("field `executable` contains a NUL byte")]
    NulInExecutable,
    #[error("field `argv[{0}]` contains a NUL byte, which execve cannot pass")]
    NulInArgv(usize),
    #[error("field `cwd` contains a NUL byte")]
    NulInCwd,
}

/// A nonce is an opaque token a caller compares byte for byte: non-empty,
/// bounded, and free of control characters (it is printed in views).
fn check_nonce(n: &str) -> Result<String, RequestError> {
    if n.is_empty() {
        return Err(RequestError::NonceEmpty);
    }
    if n.len() > MAX_NONCE_BYTES {
        return Err(RequestError::NonceTooLong(n.len()));
    }
    if n.chars().any(char::is_control) {
        return Err(RequestError::NonceControl);
    }
    Ok(n.to_string())
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
    let path = state_dir.join("runner.key");
    if path.exists() {
        return sign::load_signing_key(&path)
            .map(|k| (k, path.clone()))
            .map_err(RunError::StateKey);
    }
    journal::ensure_dir(state_dir).map_err(RunError::StateDir)?;
    let key = sign::generate().map_err(RunError::StateKey)?;
    match sign::write_keypair(&key, &path, &state_dir.join("runner.pub")) {
        Ok(()) => Ok((key, path)),
        // Another runner created it first: use theirs.
        Err(_) if path.exists() => sign::load_signing_key(&path)
            .map(|k| (k, path.clone()))
            .map_err(RunError::StateKey),
        Err(e) => Err(RunError::StateKey(e)),
    }
}

fn selection(args: &RunArgs) -> Result<Selection, RequestError> {
    let given = [
        args.request.is_some(),
        args.lease.is_some(),
        !args.command.is_empty(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if given != 1 {
        return Err(RequestError::NotExactlyOne);
    }
    if (args.cwd.is_some() || args.profile.is_some()) && args.command.is_empty() {
        return Err(RequestError::CwdWithoutCommand);
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
                        .ok_or_else(|| RequestError::NotUtf8(w.clone()))?
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
    check_request(&request).map_err(|field| RequestError::Field { what: None, field })?;
    Ok(Selection::Request {
        request,
        profile_given,
    })
}

/// Size bound of a request (a file or stdin).
pub(crate) const MAX_REQUEST_BYTES: u64 = 1024 * 1024;

pub fn read_request(src: &str) -> Result<Request, RequestError> {
    let (what, bytes) = if src == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(std::io::stdin(), MAX_REQUEST_BYTES + 1),
            &mut b,
        )
        .map_err(RequestError::Stdin)?;
        if b.len() as u64 > MAX_REQUEST_BYTES {
            return Err(RequestError::StdinTooLarge);
        }
        ("request (stdin)".to_string(), b)
    } else {
        let b = governed_sys::safe_io::read_bounded(Path::new(src), MAX_REQUEST_BYTES).map_err(
            |source| RequestError::Read {
                path: src.to_string(),
                source,
            },
        )?;
        (format!("request {src}"), b)
    };
    let r: Request = governed_model::parse_json(&what, &bytes)?;
    check_request(&r).map_err(|field| RequestError::Field {
        what: Some(what),
        field,
    })?;
    Ok(r)
}

fn check_request(r: &Request) -> Result<(), FieldError> {
    if r.executable.is_empty() {
        return Err(FieldError::EmptyExecutable);
    }
    if r.executable.contains('\0') {
        return Err(FieldError::NulInExecutable);
    }
    if let Some(i) = r.argv.iter().position(|a| a.contains('\0')) {
        return Err(FieldError::NulInArgv(i));
    }
    if r.cwd.contains('\0') {
        return Err(FieldError::NulInCwd);
    }
    Ok(())
}
