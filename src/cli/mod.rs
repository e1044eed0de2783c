//! The commands a person or a CI job types: argument parsing (clap), the
//! approver's `approve`, the operator's `journal`/`resolve`/`revoke`/
//! `receipt`/`keygen`, `doctor`, and the stdout writer. The top floor: it
//! calls into `run`, `gate`, `ledger`, `evidence`; nothing below calls it.

pub mod approvals;
pub mod approve;
pub mod args;
pub mod compact;
pub mod doctor;
pub mod mcp;
pub mod operator;
pub mod out;
pub mod pending;
pub mod toolchain;

use clap::Parser;
use nix::sys::signalfd::{SfdFlags, SignalFd};

use args::{Cli, Command, JournalAction, ReceiptAction, VerifyFormat};
use governed_evidence::{escape, verify, view};
use governed_ledger as ledger;
use governed_ledger::journal;
use governed_model::exit_code;
use governed_runner::process::supervise;
use governed_runner::run;
use governed_sys as sys;
use operator::OperatorError;

/// Make sure fds 0, 1, 2 exist, so no file we open later lands on them.
fn ensure_std_fds() {
    for fd in 0..3 {
        if nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_err() {
            let _ = nix::fcntl::open(
                "/dev/null",
                nix::fcntl::OFlag::O_RDWR,
                nix::sys::stat::Mode::empty(),
            );
        }
    }
}

/// clap's multi-line message as one line that still names the argument.
fn one_line_error(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:"))
        .filter(|l| !l.is_empty())
        .map(|l| l.trim_start_matches("error: "))
        .collect::<Vec<_>>()
        .join(" ")
}

fn usage_error(msg: impl std::fmt::Display) -> i32 {
    eprintln!(
        "governed-exec: error: {}",
        escape::visible(&msg.to_string())
    );
    exit_code::USAGE
}

/// Parse the command line, run one command, return the process exit code.
pub fn main() -> i32 {
    // Block the signals we handle before any thread exists, so every thread
    // inherits the mask and they arrive only through the signalfd.
    let handled = supervise::handled_signals();
    if let Err(e) = handled.thread_block() {
        return usage_error(format!("cannot block signals: {e}"));
    }
    ensure_std_fds();
    let cli = match parse() {
        Ok(c) => c,
        Err(code) => return code,
    };
    // Only `run` reads the handled signals from a signalfd (it forwards them
    // to its child and writes a receipt). Every other command is a plain
    // reader or a single atomic write: a SIGTERM or Ctrl-C ends a long
    // `verify` or `journal verify` at once, as the user expects.
    // `mcp` reads them too: a TERM cancels every running call, each with
    // its receipt, before the server exits.
    if !matches!(cli.command, Command::Run(_) | Command::Mcp(_)) {
        if let Err(e) = handled.thread_unblock() {
            return usage_error(format!("cannot unblock signals: {e}"));
        }
    }
    match cli.command {
        Command::Keygen { out } => match operator::keygen(&out) {
            Ok(()) => 0,
            Err(e) => usage_error(e),
        },
        Command::Approve(a) => approve_main(*a),
        Command::Run(r) => run_main(*r, &handled),
        Command::Verify {
            goal,
            receipt,
            trust,
            state_dir,
            ledger,
            json,
            format,
            allow_key_in_reach,
            nonce,
        } => verify_main(
            &goal,
            &receipt,
            &trust,
            (state_dir.as_deref(), ledger.as_deref()),
            (json, format),
            allow_key_in_reach,
            nonce.as_deref(),
        ),
        Command::Journal {
            state_dir,
            ledger,
            action,
        } => journal_main(ledger.as_deref(), state_dir.as_deref(), action),
        Command::Doctor { json, ledger } => {
            let mut r = doctor::report();
            if let Some(l) = &ledger {
                r.checks.push(doctor::ledger_check(l));
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            } else {
                print!("{}", doctor::render_text(&r));
            }
            0
        }
        Command::Receipt {
            action: ReceiptAction::Show { receipt, format },
        } => operator::receipt_show(&receipt, format).map_or_else(usage_error, |_| 0),
        Command::Resolve {
            attempt,
            as_,
            by,
            note,
            state_dir,
            ledger,
        } => match ledger::from_flags(ledger.as_deref(), state_dir.as_deref()) {
            Ok(l) => operator_result(operator::resolve(&*l, &attempt, as_, &by, note)),
            Err(e) => usage_error(e),
        },
        Command::Pending { state_dir, action } => {
            let dir = state_dir.unwrap_or_else(journal::default_state_dir);
            pending::main(&dir, action).map_or_else(usage_error, |()| 0)
        }
        Command::Compact {
            manifest,
            state_dir,
        } => {
            let dir = state_dir.unwrap_or_else(journal::default_state_dir);
            operator_result(compact::compact(&manifest, &dir))
        }
        Command::Mcp(m) => mcp::main(*m, &handled).unwrap_or_else(usage_error),
        Command::Revoke {
            manifest,
            lease,
            by,
            state_dir,
        } => {
            let dir = state_dir.unwrap_or_else(journal::default_state_dir);
            operator_result(operator::revoke(&manifest, &lease, &by, &dir))
        }
    }
}

/// The command line, or the exit code of a line clap could not parse (a
/// `run` line is still a refusal document).
fn parse() -> Result<Cli, i32> {
    let is_run = std::env::args_os().nth(1).is_some_and(|a| a == "run");
    let parsed = if is_run {
        args::parse_run(std::env::args_os())
    } else {
        Cli::try_parse()
    };
    match parsed {
        Ok(c) => Ok(c),
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return Err(0);
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand && !is_run {
                // `governed-exec`, `governed-exec journal`: the help, on
                // stderr, and bad usage (a CI line missing its subcommand
                // must not pass).
                let _ = e.print();
                return Err(exit_code::USAGE);
            }
            let one_line = one_line_error(&e.to_string());
            if is_run {
                return Err(run::refuse_unparsed(one_line, &e.to_string()));
            }
            Err(usage_error(one_line))
        }
    }
}

/// `run`: the signalfd and the subreaper, then the pipeline.
fn run_main(r: args::RunCmd, handled: &nix::sys::signal::SigSet) -> i32 {
    let mut signals =
        match SignalFd::with_flags(handled, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("governed-exec: error: cannot create a signalfd: {e}");
                return exit_code::NOT_EXECUTED;
            }
        };
    if let Err(e) = sys::set_child_subreaper() {
        eprintln!("governed-exec: error: cannot become a child subreaper: {e}");
        return exit_code::NOT_EXECUTED;
    }
    run::run(
        run::RunArgs {
            goal: r.goal,
            manifest: r.manifest,
            trust: r.trust,
            key: r.key,
            state_dir: r.state_dir,
            workspace: r.workspace,
            receipt: r.receipt,
            stream: r.stream,
            quiet: r.quiet,
            request: r.request,
            lease: r.lease,
            cwd: r.cwd,
            profile: r.profile,
            nonce: r.nonce,
            principal: r.principal,
            command: r.command,
        },
        &mut signals,
    )
}

/// `verify`: the verdict in the asked format; 0 only for VERIFIED_DONE.
fn verify_main(
    goal: &std::path::Path,
    receipt: &std::path::Path,
    trust: &std::path::Path,
    (state_dir, ledger): (Option<&std::path::Path>, Option<&str>),
    (json, format): (bool, Option<VerifyFormat>),
    allow_key_in_reach: bool,
    nonce: Option<&str>,
) -> i32 {
    match verify::verify(
        goal,
        receipt,
        trust,
        state_dir,
        allow_key_in_reach,
        ledger,
        nonce,
    ) {
        Err(e) => usage_error(e),
        Ok(v) => {
            let format = if json {
                VerifyFormat::Json
            } else {
                format.unwrap_or(VerifyFormat::Text)
            };
            let text = match format {
                VerifyFormat::Json => {
                    format!("{}\n", serde_json::to_string(&v).unwrap_or_default())
                }
                VerifyFormat::Text => {
                    let mut t = format!("{}\n", v.verdict);
                    for u in &v.unmet {
                        t.push_str(&format!("{}\n", escape::visible(u)));
                    }
                    t
                }
                VerifyFormat::Markdown => {
                    // The goal loaded a moment ago by verify: its criteria
                    // name the rows.
                    let loaded = match governed_evidence::goal_file::load(goal) {
                        Ok(g) => g,
                        Err(e) => return usage_error(e),
                    };
                    let g = &loaded.goal;
                    let rows = view::verify_rows(
                        &g.criteria,
                        &v.unmet,
                        state_dir.is_some() || ledger.is_some(),
                    );
                    let label = format!("goal {:?} revision {}", g.id, g.revision);
                    view::verify_markdown(v.verdict, &label, &rows)
                }
            };
            // A closed stdout is an ordinary error: the verdict was not
            // delivered, so neither 0 nor 1.
            if let Err(e) = out::write(&text) {
                return usage_error(e);
            }
            if v.done() {
                0
            } else {
                exit_code::NEGATIVE
            }
        }
    }
}

/// `journal list|show|verify` on the ledger the flags name.
fn journal_main(
    ledger: Option<&str>,
    state_dir: Option<&std::path::Path>,
    action: JournalAction,
) -> i32 {
    let l = match ledger::from_flags(ledger, state_dir) {
        Ok(l) => l,
        Err(e) => return usage_error(e),
    };
    if let Err(e) = l.reachable() {
        return usage_error(e.to_string());
    }
    match action {
        JournalAction::List { json, refusals } => {
            operator::journal_list(&*l, json, refusals).map_or_else(usage_error, |_| 0)
        }
        JournalAction::Show { attempt, json } => {
            match operator::journal_show(&*l, &attempt, json) {
                Ok(true) => 0,
                Ok(false) => usage_error(format!(
                    "attempt {attempt:?} is not in the ledger {}",
                    l.name()
                )),
                Err(e) => usage_error(e),
            }
        }
        JournalAction::Verify => match operator::journal_verify(&*l) {
            Ok(true) => 0,
            Ok(false) => exit_code::NEGATIVE,
            Err(e) => usage_error(e),
        },
    }
}

fn approve_main(a: args::ApproveCmd) -> i32 {
    if a.file.is_some() {
        return match approvals::main(&a) {
            Ok(true) => 0,
            Ok(false) => exit_code::NEGATIVE,
            Err(e) => usage_error(e),
        };
    }
    let approved = approve::ApproveArgs::from_cmd(a).and_then(approve::approve);
    match approved {
        Ok(id) => match crate::outln!("{id}") {
            Ok(()) => 0,
            Err(e) => usage_error(e),
        },
        Err(e) => usage_error(e),
    }
}

fn operator_result(r: Result<(), OperatorError>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(OperatorError::UnknownId(m)) => usage_error(m),
        Err(OperatorError::Failed(m)) => usage_error(m),
    }
}
