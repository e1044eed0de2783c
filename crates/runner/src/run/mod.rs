//! `run`: the whole governed pipeline for one request, as named stages.
//! Each takes the previous stage's value and returns the next, so the order
//! is in the types, not in statement order:
//!
//! ```text
//! RunArgs ─prepare─▶ Inputs ─admit─▶ Admission ─setup─▶ Ready ─commit─▶ Spent
//!         ─spawn─▶ Plan ─supervise─▶ Ended ─classify─▶ Classified ─seal─▶ exit code
//! ```
//!
//! - `prepare` (`prepare.rs`): the nonce, the runner key, the goal, the
//!   request, the manifest, the trusted key, the places; the due scratch
//!   sweep. Nothing locked yet.
//! - `admit` (`admit.rs`): open and hash the executable and directories, pick
//!   the lease's ledger, lock the Goal's session, `gate::admission::admit`,
//!   record the supersessions.
//! - `setup` (`setup.rs`): everything the child needs, before the use is
//!   spent: scratch HOME/TMPDIR, isolation, cgroups, the process and memory
//!   limits, argv, envp, rlimits.
//! - `commit` (`commit.rs`): a cancelling signal that came first refuses;
//!   else the use is spent and the `executing` record made durable. Only
//!   `commit` makes a `Spent`, which holds the ledger's `Committed`.
//! - `spawn` and `supervise` (`spawn.rs`): the child is started only from a
//!   `Spent` (its `Committed` is part of the plan `process::supervise`
//!   requires); `Ended` exists only once the run's tree was observed gone, or
//!   said not to be.
//! - `classify` (`classify.rs`): `Ended` → the receipt body (outcome,
//!   cleanup witnesses, signing report, products).
//! - `seal` (`seal.rs`): sign once, keep a copy, write the result record,
//!   print, release the attempt.
//!
//! `draft.rs` builds a receipt at any point; every path out of `run`
//! yields a receipt-shaped document, refusals included, and an exit code
//! from `exit_code::for_outcome`. `error.rs` maps each pre-spawn failure to
//! its reason and exit code, once.

mod admit;
mod classify;
mod commit;
mod draft;
pub mod error;
mod prepare;
pub mod queue;
mod seal;
mod setup;
mod spawn;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::sys::signalfd::SignalFd;

use crate::gate::admission::Refusal;
use draft::Draft;
use governed_evidence::escape;
use governed_ledger::journal;
use governed_model::exit_code;
use governed_model::{Outcome, Profile, Reason};

pub use prepare::{read_request, RequestError};

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
    /// Who asked (`run --principal`, `mcp --principal`): recorded in the
    /// receipt and in the approval queue (CONTRACT §12).
    pub principal: Option<String>,
    pub command: Vec<OsString>,
}

/// Run `side` on a second thread while `main` runs on this one; both
/// values once both are done. `side` runs exactly once: on the helper, or
/// here after `main` when the helper did not take it first (or could not be
/// started at all). Used where a stage waits on the kernel (a flush, a
/// cgroupfs `mkdir`) while other work of the same stage is independent of
/// it; never while this process must be single-threaded (entering a user
/// namespace, a probe that checks it).
fn beside<S: Send, T>(side: impl FnOnce() -> S + Send, main: impl FnOnce() -> T) -> (S, T) {
    let job = std::sync::Mutex::new(Some(side));
    let take = || job.lock().ok().and_then(|mut f| f.take());
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new().spawn_scoped(s, || take().map(|f| f()));
        let out = main();
        let here = take().map(|f| f());
        let there = helper
            .ok()
            .and_then(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        match here.or(there) {
            Some(side) => (side, out),
            None => unreachable!("the side job is taken by exactly one thread"),
        }
    })
}

/// A random id with a readable prefix.
pub fn new_id(prefix: &str) -> String {
    let mut b = [0u8; 10];
    if getrandom::fill(&mut b).is_err() {
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        b.copy_from_slice(&t.to_le_bytes()[..10]);
    }
    format!("{prefix}-{}", hex::encode(b))
}

/// The one line `run` ends with on stderr (unless `--quiet`): the outcome,
/// the exit code governed-exec returns, the duration, and where the receipt
/// went, so a person at a terminal or in a CI log needs no `jq` to know.
pub(crate) fn closing_line(
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

/// The pipeline, stage by stage; a stage's refusal ends it with a receipt
/// (see `draft::Stop`).
pub fn run(args: RunArgs, signals: &mut SignalFd) -> i32 {
    // The runner holds the signing key in memory and its fds: no process of
    // the same uid without CAP_SYS_PTRACE may read /proc/<runner>/{mem,fd,
    // root,environ} or ptrace it.
    if let Err(e) = governed_sys::set_non_dumpable() {
        eprintln!("governed-exec: cannot make the runner non-dumpable: {e}");
    }
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(journal::default_state_dir);
    let mut draft = Draft::new(args.receipt.clone());
    draft.principal = args.principal.clone();
    let mut inputs = match prepare::prepare(&args, &state_dir, &mut draft) {
        Ok(i) => i,
        Err(stop) => return draft.stop(stop, &state_dir),
    };
    let pending_index = inputs.pending_index.take();
    let admission = match admit::admit(&inputs, &mut draft) {
        Ok(a) => a,
        Err(stop) => {
            let asker = args
                .principal
                .clone()
                .unwrap_or_else(|| format!("uid {}", nix::unistd::getuid()));
            let stop = queue::queue_refused(&inputs, &asker, stop, &mut draft);
            return draft.stop(stop, &state_dir);
        }
    };
    let ended = match execute(admission, &mut draft, signals, (args.stream, args.quiet)) {
        Ok(code) => code,
        Err(stop) => draft.stop(stop, &state_dir),
    };
    // After the run, outside the Goal's lock: only an admitted run writes
    // the manifest index, and its write never delays the child.
    if let Some(index) = pending_index {
        index.write();
    }
    ended
}

/// The stages after admission; `Err` is a refusal before the use was
/// spent, already recorded in the Goal's ledger session.
fn execute(
    admission: admit::Admission<'_>,
    draft: &mut Draft,
    signals: &mut SignalFd,
    (mirror, quiet): (bool, bool),
) -> Result<i32, draft::Stop> {
    let ready = setup::setup(admission)?;
    let mut spent = commit::commit(ready, draft, signals)?;
    let proxy = spent.child.launch.proxy.take();
    let ended = spawn::supervise(spawn::spawn(&spent, signals, mirror), proxy);
    let classified = classify::classify(draft, &spent, ended);
    Ok(seal::seal(draft, spent, classified, quiet))
}

#[cfg(test)]
mod tests {
    use super::beside;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn beside_runs_the_side_job_exactly_once_and_returns_both_values() {
        for _ in 0..200 {
            let runs = AtomicUsize::new(0);
            let out = beside(
                || {
                    runs.fetch_add(1, Ordering::SeqCst);
                    "side"
                },
                || 7,
            );
            assert_eq!((out, runs.load(Ordering::SeqCst)), (("side", 7), 1));
        }
    }
}
