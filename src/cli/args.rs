//! The command line (CONTRACT §2), clap derive. Parsing only.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use governed_ledger::journal::Classification;
use governed_model::limits::{parse_duration, parse_max_processes, parse_size};
use governed_model::{MaxProcesses, Profile, Syscalls};

#[derive(Debug, Parser)]
#[command(
    name = "governed-exec",
    version,
    about = "Run one pre-approved command headless, bounded, and prove what happened"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `run` alone: the same command line, help and errors as `run` under
/// [`Cli`], parsed without building every other subcommand's arguments
/// (clap builds the whole tree before it parses, ≈ 0.2 ms of a run of
/// `/bin/true`). [`parse_run`] uses it when `run` is the first argument;
/// a test holds the two trees' `run` to the same help and errors.
/// `run`'s one line in `--help`, shared by both trees.
const RUN_ABOUT: &str = "Run one request under a matching lease; print the signed receipt";

#[derive(Debug, Parser)]
#[command(name = "governed-exec", version)]
struct RunOnly {
    #[command(subcommand)]
    command: RunOnlyCommand,
}

#[derive(Debug, Subcommand)]
enum RunOnlyCommand {
    #[command(about = RUN_ABOUT)]
    Run(Box<RunCmd>),
}

/// `--profile`: one of the tiers, listed in `--help` as clap lists a value enum.
fn profile_parser() -> impl clap::builder::TypedValueParser<Value = Profile> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Profile::ALL.map(Profile::name))
        .try_map(|s| s.parse::<Profile>())
}

/// `approve --syscalls`: the syscall policy, or its waiver.
fn syscalls_parser() -> impl clap::builder::TypedValueParser<Value = Syscalls> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["default", "unconfined"])
        .try_map(|s| s.parse::<Syscalls>())
}

/// `resolve --as`: one of the classifications a person can record.
fn classification_parser() -> impl clap::builder::TypedValueParser<Value = Classification> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Classification::ALL.map(Classification::name))
        .try_map(|s| s.parse::<Classification>())
}

/// Parse a command line whose first argument is `run` (the caller checked):
/// the result is what `Cli::try_parse_from` gives for it.
pub fn parse_run<I, T>(argv: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let RunOnly {
        command: RunOnlyCommand::Run(r),
    } = RunOnly::try_parse_from(argv)?;
    Ok(Cli {
        command: Command::Run(r),
    })
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write PREFIX.key (0600, PKCS#8 PEM) and PREFIX.pub, ed25519.
    Keygen {
        /// Write PREFIX.key (private, 0600) and PREFIX.pub (public); no default.
        #[arg(long, value_name = "PREFIX")]
        out: PathBuf,
    },
    /// A human approves exactly one request identity (or every entry of an
    /// approvals file): sign leases into the manifest.
    Approve(Box<ApproveCmd>),
    #[command(about = RUN_ABOUT)]
    Run(Box<RunCmd>),
    /// Check a receipt against a Goal's mandatory criteria.
    #[command(after_help = VERIFY_EXAMPLES)]
    Verify {
        /// The goal file whose criteria the receipt must meet.
        #[arg(long)]
        goal: PathBuf,
        /// The receipt `run` wrote (a DSSE envelope).
        #[arg(long)]
        receipt: PathBuf,
        /// The RUNNER's public key, the one that signed receipts (not the
        /// approver's); usually STATE_DIR/runner.pub of the machine that ran.
        #[arg(long, value_name = "RUNNER.pub")]
        trust: PathBuf,
        /// Cross-check the receipt against this state dir's journal [default: no cross-check].
        #[arg(long, conflicts_with = "ledger")]
        state_dir: Option<PathBuf>,
        /// Cross-check the receipt against this ledger (PATH or postgres://HOST[:PORT]/DB) [default: no cross-check].
        #[arg(long, value_name = "PATH|postgres://HOST[:PORT]/DB")]
        ledger: Option<String>,
        /// Same as `--format json` [default: off].
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// text (default): the verdict, then one line per unmet criterion;
        /// json: one object; markdown: one table row per check, for a CI
        /// job summary. The first line is always the verdict [default: text].
        #[arg(long, value_enum)]
        format: Option<VerifyFormat>,
        /// Accept a receipt whose runner key was within the child's reach
        /// (such a receipt proves nothing against the child it describes) [default: off].
        #[arg(long)]
        allow_key_in_reach: bool,
        /// NOT_VERIFIED unless the receipt carries exactly this nonce (the
        /// value given to `run --nonce`, e.g. the CI job's run id) [default: not checked].
        #[arg(long, value_name = "VALUE")]
        nonce: Option<String>,
    },
    /// Inspect the journal of attempts.
    Journal {
        /// Where the journal, runner key and receipts live [default: $GOVERNED_EXEC_STATE_DIR, else $XDG_STATE_HOME/governed-exec, else ~/.local/state/governed-exec].
        #[arg(long, global = true, conflicts_with = "ledger")]
        state_dir: Option<PathBuf>,
        /// Read this ledger instead of the state dir [default: the state dir].
        #[arg(long, global = true, value_name = "PATH|postgres://HOST[:PORT]/DB")]
        ledger: Option<String>,
        #[command(subcommand)]
        action: JournalAction,
    },
    /// Inspect a receipt.
    Receipt {
        #[command(subcommand)]
        action: ReceiptAction,
    },
    /// What run can enforce here, as this uid, and by which mechanism (or why not).
    Doctor {
        /// One JSON object instead of text [default: off].
        #[arg(long)]
        json: bool,
        /// Also check that this uid can use this ledger (PATH or
        /// postgres://HOST[:PORT]/DB) as a run would [default: no ledger check].
        #[arg(long, value_name = "PATH|postgres://HOST[:PORT]/DB")]
        ledger: Option<String>,
    },
    /// A person classifies an attempt whose outcome is unknown.
    Resolve {
        /// The attempt id (`journal list` shows them).
        #[arg(long)]
        attempt: String,
        /// What the person found: the run succeeded, failed, or must stop.
        #[arg(long = "as", value_parser = classification_parser())]
        as_: Classification,
        /// Who classifies (recorded in the ledger).
        #[arg(long)]
        by: String,
        /// Free text kept with the classification [default: none].
        #[arg(long)]
        note: Option<String>,
        /// Where the journal, runner key and receipts live [default: $GOVERNED_EXEC_STATE_DIR, else $XDG_STATE_HOME/governed-exec, else ~/.local/state/governed-exec].
        #[arg(long, conflicts_with = "ledger")]
        state_dir: Option<PathBuf>,
        /// The ledger holding the attempt (PATH or postgres://HOST[:PORT]/DB) [default: the state dir].
        #[arg(long, value_name = "PATH|postgres://HOST[:PORT]/DB")]
        ledger: Option<String>,
    },
    /// The human approval queue: requests refused for want of a lease,
    /// waiting for a person (approve them with `approve --pending ID`).
    Pending {
        /// The state dir whose queue to read [default: $GOVERNED_EXEC_STATE_DIR, else $XDG_STATE_HOME/governed-exec, else ~/.local/state/governed-exec].
        #[arg(long, global = true)]
        state_dir: Option<PathBuf>,
        #[command(subcommand)]
        action: PendingAction,
    },
    /// Serve the `local_process` tool to an agent over the Model Context
    /// Protocol (stdio): each call one governed run.
    #[command(after_help = MCP_EXAMPLES)]
    Mcp(Box<McpCmd>),
    /// Move the leases that can never run again (revoked, superseded,
    /// expired, every use spent) out of a manifest into MANIFEST.spent.jsonl
    /// beside it, so a long-lived manifest stays the size of what is live.
    Compact {
        /// The manifest to compact.
        #[arg(long)]
        manifest: PathBuf,
        /// The state dir whose ledger counts the uses of leases that name
        /// none [default: $GOVERNED_EXEC_STATE_DIR, else $XDG_STATE_HOME/governed-exec, else ~/.local/state/governed-exec].
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Revoke a lease: later runs of it are refused.
    Revoke {
        /// The manifest holding the lease.
        #[arg(long)]
        manifest: PathBuf,
        /// The lease id to revoke.
        #[arg(long)]
        lease: String,
        /// Who revokes (recorded in the manifest and the ledger).
        #[arg(long)]
        by: String,
        /// Where the journal, runner key and receipts live [default: $GOVERNED_EXEC_STATE_DIR, else $XDG_STATE_HOME/governed-exec, else ~/.local/state/governed-exec] (a lease naming its own ledger is revoked there).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
}

const APPROVE_EXAMPLES: &str = "\
EXAMPLES:
  # once: an approver key (keep .key private; run --trust takes the .pub)
  governed-exec keygen --out approver
  # approve `cargo test -q` in this checkout, 3 uses within 1 hour; the write
  # scope keeps the runner key out of the child's reach, so receipts verify.
  # This is the system's cargo (/usr/bin, the child's clean PATH); a rustup
  # cargo needs its toolchain's path: docs/GUIDE.md, Toolchains
  governed-exec approve --goal goal.json --workspace . --manifest manifest.json \\
      --key approver.key --ttl 1h --uses 3 --fs-write-scope -- cargo test -q
  # as root, for a CI runner uid: the child runs as uid 1000
  governed-exec approve --goal goal.json --workspace . --manifest manifest.json \\
      --key approver.key --as-user 1000:1000 --request request.json";

const RUN_EXAMPLES: &str = "\
EXAMPLES:
  # run the approved command; the signed receipt goes to receipt.json
  governed-exec run --goal goal.json --manifest manifest.json --trust approver.pub \\
      --receipt receipt.json -- cargo test -q
  # a harness: the request as JSON on stdin, the receipt on stdout
  echo '{\"executable\":\"python3\",\"argv\":[\"-m\",\"pytest\",\"-q\"],\"cwd\":\".\",\"profile\":\"standard\"}' \\
    | governed-exec run --goal goal.json --manifest manifest.json --trust approver.pub --request - \\
    | jq -r .payload | base64 -d | jq .predicate.outcome
  # --trust is the APPROVER's .pub here; verify --trust takes the RUNNER's .pub";

const VERIFY_EXAMPLES: &str = "\
EXAMPLES:
  # --trust is the RUNNER's public key: STATE_DIR/runner.pub of the machine
  # that ran (~/.local/state/governed-exec/runner.pub by default), or the
  # key given to run --key; not the approver's
  governed-exec verify --goal goal.json --receipt receipt.json \\
      --trust ~/.local/state/governed-exec/runner.pub
  # for a CI job summary
  governed-exec verify --goal goal.json --receipt receipt.json --trust runner.pub \\
      --format markdown >> \"$GITHUB_STEP_SUMMARY\"";

#[derive(Debug, Subcommand)]
pub enum JournalAction {
    /// Every attempt with its state (and, with --refusals, every refused run).
    List {
        /// One JSON document instead of a table [default: off].
        #[arg(long)]
        json: bool,
        /// Also list runs refused before anything was spent (reason and
        /// message) [default: off: attempts only].
        #[arg(long)]
        refusals: bool,
    },
    /// Every record of one attempt.
    Show {
        /// The attempt id (`journal list` shows them).
        attempt: String,
        /// The records as JSON instead of text [default: off].
        #[arg(long)]
        json: bool,
    },
    /// Re-walk every hash chain; exit 1 on any break.
    Verify,
}

#[derive(Debug, Subcommand)]
pub enum PendingAction {
    /// Every live entry: id, state, Goal, how often asked, the request.
    List {
        /// One JSON document instead of a table [default: off].
        #[arg(long)]
        json: bool,
    },
    /// One entry in full: the request as it resolved, who asked, when.
    Show {
        /// The pending id (`pending list` shows them).
        id: String,
        /// The entry as JSON instead of text [default: off].
        #[arg(long)]
        json: bool,
    },
    /// Say no to a pending request: the agent asking again is told so.
    Deny {
        /// The pending id (`pending list` shows them).
        id: String,
        /// Who denies (recorded in the entry).
        #[arg(long)]
        by: String,
        /// The approver's private key: only its holder answers the queue
        /// (its key id is recorded in the entry).
        #[arg(long, value_name = "APPROVER.key")]
        key: PathBuf,
        /// Why, shown to the agent that asks again [default: none].
        #[arg(long)]
        note: Option<String>,
    },
}

const MCP_EXAMPLES: &str = "\
EXAMPLES:
  # an agent client's configuration starts the server with its whole policy:
  governed-exec mcp --goal goal.json --manifest manifest.json --trust approver.pub \\
      --workspace . --receipts receipts/ --principal agent-7
  # an operator answers the requests it could not run:
  governed-exec pending list
  governed-exec approve --pending pend-0123456789abcdef --goal goal.json \\
      --workspace . --manifest manifest.json --key approver.key --uses 3";

/// `mcp`: the server's whole configuration; nothing of it comes from the
/// agent.
#[derive(Debug, Args)]
pub struct McpCmd {
    /// The goal file every call runs under.
    #[arg(long)]
    pub goal: PathBuf,
    /// The manifest holding the approved leases.
    #[arg(long)]
    pub manifest: PathBuf,
    /// The APPROVER's public key, the .pub of `approve --key`.
    #[arg(long, value_name = "APPROVER.pub")]
    pub trust: PathBuf,
    /// The workspace the agent's requests run in (their `cwd` is relative to it).
    #[arg(long)]
    pub workspace: PathBuf,
    /// Where each call's signed receipt is written, as RECEIPT_ID.json (created if absent).
    #[arg(long, value_name = "DIR")]
    pub receipts: PathBuf,
    /// Who this agent is: recorded in every receipt and pending request it causes.
    #[arg(long, value_parser = parse_principal)]
    pub principal: String,
    /// Where the journal, runner key and approval queue live [default: $GOVERNED_EXEC_STATE_DIR, else $XDG_STATE_HOME/governed-exec, else ~/.local/state/governed-exec].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// The runner's signing key [default: STATE_DIR/runner.key, created on first use].
    #[arg(long, value_name = "RUNNER.key")]
    pub key: Option<PathBuf>,
    /// Calls that run at once; more wait their turn [default: 4].
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub max_concurrent: u16,
}

/// A principal's name: 1 to 128 bytes, no control characters.
pub fn parse_principal(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 128 {
        return Err(format!("{} bytes: a principal is 1 to 128 bytes", s.len()));
    }
    if s.chars().any(char::is_control) {
        return Err("a principal may not hold control characters".into());
    }
    Ok(s.to_string())
}

#[derive(Debug, Subcommand)]
pub enum ReceiptAction {
    /// Print the decoded in-toto statement, or a human view of it.
    Show {
        /// The receipt file (a DSSE envelope as `run` wrote it).
        receipt: PathBuf,
        /// json: the decoded statement; text: a short terminal view;
        /// markdown: a table block for a CI job summary.
        #[arg(long, value_enum, default_value = "json")]
        format: ReceiptFormat,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReceiptFormat {
    Json,
    Text,
    Markdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckFormat {
    Text,
    Markdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VerifyFormat {
    Text,
    Json,
    Markdown,
}

#[derive(Debug, Args)]
#[command(after_help = APPROVE_EXAMPLES)]
pub struct ApproveCmd {
    /// The goal file the lease is bound to (id, revision and digest);
    /// required [default: with `--file`, the file's `goal`].
    #[arg(long, required_unless_present = "file")]
    pub goal: Option<PathBuf>,
    /// The workspace directory the command runs in; required [default:
    /// with `--file`, the file's `workspace`].
    #[arg(long, required_unless_present = "file")]
    pub workspace: Option<PathBuf>,
    /// The manifest to add the lease to (created if absent).
    #[arg(long)]
    pub manifest: PathBuf,
    /// The approver's private key (`keygen` makes one); `run --trust` takes
    /// its .pub; required [default: none needed with `--file --check`].
    #[arg(long, value_name = "APPROVER.key", required_unless_present = "check")]
    pub key: Option<PathBuf>,
    /// Approve every entry of a reviewed approvals file (TOML, CONTRACT
    /// §10) in one manifest write. Per-lease flags belong in the file
    /// [default: one lease from these flags].
    #[arg(long, value_name = "APPROVALS.toml", conflicts_with_all = [
        "profile", "cwd", "wall_time", "kill_grace", "cancel_grace", "cpu_time", "memory",
        "max_processes", "max_open_files", "max_file_size", "keep_output", "output_cap",
        "env", "as_user", "fs_write", "fs_write_scope", "fs_read", "no_network", "allow_net", "daemon_socket",
        "pid_namespace", "syscalls", "portable", "ledger", "ledger_owner", "request", "command", "ttl", "uses",
        "pending",
    ])]
    pub file: Option<PathBuf>,
    /// With `--file`: compare the file, resolved here, with the manifest;
    /// no key needed, nothing written. Exit 0 agree, 1 differ, 2 bad input
    /// [default: off].
    #[arg(long, requires = "file", conflicts_with_all = ["key", "approver"])]
    pub check: bool,
    /// With `--file`: also revoke the live leases of the file's Goals that
    /// no entry approves any more (listed first) [default: off].
    #[arg(long, requires = "file", conflicts_with = "check")]
    pub prune: bool,
    /// The `--check` report: text or markdown for a CI job summary
    /// [default: text].
    #[arg(long, value_enum, requires = "check")]
    pub format: Option<CheckFormat>,
    /// How long the lease stays valid.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub ttl: Duration,
    /// How many runs the lease allows.
    #[arg(long, default_value_t = 1)]
    pub uses: u64,
    /// The approver's name in the lease [default: $USER, else "uid N"].
    #[arg(long)]
    pub approver: Option<String>,
    /// The tier of limits; the limit flags list each tier's default as short, standard, long [default: standard, or the request file's].
    #[arg(long, value_parser = profile_parser())]
    pub profile: Option<Profile>,
    /// The working directory, relative to the workspace [default: .].
    #[arg(long, value_name = "REL")]
    pub cwd: Option<String>,
    /// Wall time before TERM, grace, KILL [default: the profile's: 1m, 10m, 2h].
    #[arg(long, value_parser = parse_duration)]
    pub wall_time: Option<Duration>,
    /// Time between TERM and KILL at the wall time [default: the profile's: 2s, 5s, 10s].
    #[arg(long, value_parser = parse_duration)]
    pub kill_grace: Option<Duration>,
    /// After governed-exec is sent SIGTERM/SIGINT/SIGHUP: how long the
    /// forwarded signal has before SIGKILL [default: 2s in every tier].
    #[arg(long, value_parser = parse_duration)]
    pub cancel_grace: Option<Duration>,
    /// CPU time limit (RLIMIT_CPU) [default: the profile's: 1m, 20m, 4h].
    #[arg(long, value_parser = parse_duration)]
    pub cpu_time: Option<Duration>,
    /// Memory limit [default: the profile's: 2GiB, 8GiB, 16GiB].
    #[arg(long, value_parser = parse_size)]
    pub memory: Option<u64>,
    /// A number, or `unlimited` to waive the process limit explicitly
    /// (shown in the summary and the receipt) [default: the profile's: 256, 1024, 4096].
    #[arg(long, value_parser = parse_max_processes, value_name = "N|unlimited")]
    pub max_processes: Option<MaxProcesses>,
    /// Open file limit (RLIMIT_NOFILE) [default: the profile's: 1024, 4096, 16384].
    #[arg(long)]
    pub max_open_files: Option<u64>,
    /// Largest file the child may write (RLIMIT_FSIZE) [default: the profile's: 256MiB, 4GiB, 16GiB].
    #[arg(long, value_parser = parse_size)]
    pub max_file_size: Option<u64>,
    /// Kept bytes per stream, head and tail together (half each) [default: the profile's: 16KiB, 64KiB, 256KiB].
    #[arg(long, value_parser = parse_size)]
    pub keep_output: Option<u64>,
    /// Hard cap on total output; passing it kills the run [default: the profile's: 16MiB, 256MiB, 1GiB].
    #[arg(long, value_parser = parse_size)]
    pub output_cap: Option<u64>,
    /// A fixed child environment value (repeatable) [default: only the clean environment].
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Run the child as this uid (and gid), capabilities dropped; needs root.
    /// Puts the runner key out of the child's reach [default: the caller's uid].
    #[arg(long, value_name = "UID[:GID]")]
    pub as_user: Option<String>,
    /// Turn the Landlock write scope on; also writable (repeatable) [default: no write scope].
    #[arg(long, value_name = "PATH")]
    pub fs_write: Vec<PathBuf>,
    /// Turn the Landlock write scope on with only the workspace, HOME and
    /// TMPDIR writable; puts the runner key and state dir out of the child's
    /// reach [default: off: the child writes whatever its uid can].
    #[arg(long)]
    pub fs_write_scope: bool,
    /// Narrow reads and execution to these paths (repeatable) plus the
    /// writable ones; turns the Landlock scope on. List system directories
    /// (e.g. /usr, /lib, /etc) the program needs [default: reads everywhere].
    #[arg(long, value_name = "PATH")]
    pub fs_read: Vec<PathBuf>,
    /// A fresh network namespace holding only loopback [default: off].
    #[arg(long)]
    pub no_network: bool,
    /// Let the child reach exactly this HOST[:PORT] (port 443 by default)
    /// through governed-exec's HTTP proxy, and nothing else (repeatable;
    /// exact names or IP literals, no wildcards) [default: none].
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with = "no_network")]
    pub allow_net: Vec<String>,
    /// The socket of another daemon that acts for whoever connects (beyond
    /// docker, containerd, podman, cri-o, buildkit, systemd, the system
    /// D-Bus and libvirt): covered in the child's mount namespace where one
    /// is made, else stated in the receipt's reach (repeatable) [default:
    /// the built-in list only].
    #[arg(long, value_name = "PATH")]
    pub daemon_socket: Vec<String>,
    /// The program runs in its own PID namespace under governed-exec's
    /// init (PID 1; the program is pid 2) [default: off].
    #[arg(long)]
    pub pid_namespace: bool,
    /// The syscall policy of an isolated lease: `default` (a seccomp
    /// filter modelled on Docker's default profile) or `unconfined` (the
    /// approver's explicit waiver); refused without an isolation option
    /// [default: default with any isolation option, else none].
    #[arg(long, value_name = "default|unconfined", value_parser = syscalls_parser())]
    pub syscalls: Option<Syscalls>,
    /// Refuse executables larger than this (they are hashed whole).
    #[arg(long, default_value = "512MiB", value_parser = parse_size)]
    pub max_executable_size: u64,
    /// Bind by content (executable path, mode, SHA-256), not this machine's
    /// inodes, for CI runners and images [default: off: bound to this machine].
    #[arg(long)]
    pub portable: bool,
    /// Where the lease's uses are counted: a directory or postgres://HOST[:PORT]/DB
    /// [default: the runner's state dir, counted per state dir].
    #[arg(long, value_name = "PATH|postgres://HOST[:PORT]/DB")]
    pub ledger: Option<String>,
    /// Give a --ledger DIR (and its journal/) to the uid (and gid) that will
    /// run the lease, e.g. a CI runner's; needs root [default: the ledger
    /// stays the approver's, 0700, usable by that uid and root only].
    #[arg(long, value_name = "UID[:GID]", requires = "ledger")]
    pub ledger_owner: Option<String>,
    /// The request as a JSON file (executable, argv, cwd, profile) [default: the `-- CMD` after the flags].
    #[arg(long, value_name = "REQUEST.json", conflicts_with = "pending")]
    pub request: Option<String>,
    /// Approve exactly the request of this pending approval (`pending
    /// list`), re-resolved here; refused if its executable changed since it
    /// was asked for [default: the request from the flags].
    #[arg(long, value_name = "ID", conflicts_with_all = ["command", "cwd", "profile"])]
    pub pending: Option<String>,
    /// With `--pending`: the state dir whose approval queue holds it [default: $GOVERNED_EXEC_STATE_DIR, else $XDG_STATE_HOME/governed-exec, else ~/.local/state/governed-exec].
    #[arg(long, requires = "pending")]
    pub state_dir: Option<PathBuf>,
    /// The command to approve, after `--`: no shell, every element literal.
    #[arg(last = true, value_name = "EXECUTABLE [ARG...]")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
#[command(after_help = RUN_EXAMPLES)]
pub struct RunCmd {
    /// The goal file the lease was approved for.
    #[arg(long)]
    pub goal: PathBuf,
    /// The manifest holding the approved leases.
    #[arg(long)]
    pub manifest: PathBuf,
    /// The APPROVER's public key, the .pub of `approve --key` (not the runner key).
    #[arg(long, value_name = "APPROVER.pub")]
    pub trust: PathBuf,
    /// The runner's signing key [default: STATE_DIR/runner.key, created on first use].
    #[arg(long, value_name = "RUNNER.key")]
    pub key: Option<PathBuf>,
    /// Where the journal, runner key and receipts live [default: $GOVERNED_EXEC_STATE_DIR, else $XDG_STATE_HOME/governed-exec, else ~/.local/state/governed-exec].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Where a portable lease runs [default: the current directory].
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Write the receipt to this file instead of stdout [default: stdout].
    #[arg(long)]
    pub receipt: Option<PathBuf>,
    /// Mirror the child's stdout and stderr live to stderr [default: off].
    #[arg(long)]
    pub stream: bool,
    /// No closing line on stderr (outcome, exit code, duration, receipt) [default: off].
    #[arg(long)]
    pub quiet: bool,
    /// The request as a JSON file, or `-` for stdin [default: the `-- CMD` after the flags].
    #[arg(long, value_name = "REQUEST.json|-")]
    pub request: Option<String>,
    /// Run the request of this lease id.
    #[arg(long, value_name = "ID")]
    pub lease: Option<String>,
    /// The working directory of `-- CMD`, relative to the workspace [default: .].
    #[arg(long, value_name = "REL")]
    pub cwd: Option<String>,
    /// The profile of `-- CMD` [default: the matching lease's].
    #[arg(long, value_parser = profile_parser())]
    pub profile: Option<Profile>,
    /// Bind the receipt to this run: recorded as `predicate.nonce` (in a
    /// refusal too); `verify --nonce` checks it. At most 256 bytes, no
    /// control characters [default: none].
    #[arg(long, value_name = "VALUE")]
    pub nonce: Option<String>,
    /// Who asks for this run (an agent's name): recorded in the receipt
    /// and in the approval queue when no lease answers [default: none; the
    /// queue records "uid N"].
    #[arg(long, value_name = "NAME", value_parser = parse_principal)]
    pub principal: Option<String>,
    /// The command to run, after `--`: it must equal an approved request element by element.
    #[arg(last = true, value_name = "EXECUTABLE [ARG...]")]
    pub command: Vec<OsString>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::CommandFactory;

    /// Every argument of every subcommand, as `path --flag`, that `--help`
    /// would show without a description.
    fn undocumented(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            let blank = a
                .get_help()
                .map(|h| h.to_string().trim().is_empty())
                .unwrap_or(true);
            if blank {
                out.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_about().is_none() && sub.get_name() != "help" {
                out.push(format!("{path} {} (no about)", sub.get_name()));
            }
            undocumented(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_argument_of_every_subcommand_has_a_description() {
        let mut missing = Vec::new();
        undocumented(&Cli::command(), "governed-exec", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    }

    #[test]
    fn every_optional_flag_states_its_default_or_has_none() {
        // An optional flag's help names its default (`[default: …]`, from
        // clap or written out), or it is a required value / positional.
        let mut silent = Vec::new();
        fn walk(cmd: &clap::Command, path: &str, silent: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" || a.is_required_set() || a.is_positional() {
                    continue;
                }
                let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                let long = a.get_long_help().map(|h| h.to_string()).unwrap_or_default();
                let has_default = !a.get_default_values().is_empty()
                    || help.contains("default")
                    || long.contains("default");
                // Conflict-only selectors (run --lease) have no default to state.
                if !has_default && !matches!(id, "lease") {
                    silent.push(format!("{path} --{id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), silent);
            }
        }
        walk(&Cli::command(), "governed-exec", &mut silent);
        assert!(
            silent.is_empty(),
            "optional flags that do not state their default: {silent:#?}"
        );
    }

    #[test]
    fn approve_run_and_verify_carry_examples() {
        let cli = Cli::command();
        for name in ["approve", "run", "verify"] {
            let sub = cli.find_subcommand(name).unwrap();
            let after = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                after.starts_with("EXAMPLES:") && after.contains(&format!("governed-exec {name}")),
                "{name} has no EXAMPLES block naming itself: {after:?}"
            );
        }
    }

    /// The command reference: every subcommand's `--help`, as the binary
    /// prints it, in one page.
    fn cli_reference() -> String {
        fn walk(cmd: &mut clap::Command, path: &str, out: &mut String) {
            out.push_str(&format!("## `{path}`\n\n```text\n"));
            let help = cmd.render_long_help().to_string();
            for line in help.lines() {
                out.push_str(line.trim_end());
                out.push('\n');
            }
            out.push_str("```\n\n");
            let names: Vec<String> = cmd
                .get_subcommands()
                .map(|s| s.get_name().to_string())
                .filter(|n| n != "help")
                .collect();
            for name in names {
                if let Some(sub) = cmd.find_subcommand_mut(&name) {
                    walk(sub, &format!("{path} {name}"), out);
                }
            }
        }
        let mut out = String::from(
            "# Command reference\n\nEvery command's `--help`, generated from the binary's own argument definitions (a test keeps this page equal to them: `UPDATE_DOCS=1 cargo test --bin governed-exec cli_reference` rewrites it). The external surface in words is [SPEC.md](SPEC.md).\n\n",
        );
        let mut cli = Cli::command().term_width(100).max_term_width(100);
        cli.build();
        walk(&mut cli, "governed-exec", &mut out);
        out
    }

    #[test]
    fn the_committed_cli_reference_matches_the_binary() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
        let text = cli_reference();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == text,
            "docs/cli.md is stale: run UPDATE_DOCS=1 cargo test --bin governed-exec cli_reference"
        );
    }

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The `run`-only parser is the full tree's `run`: the same parse, the
    /// same errors (kind and text) and the same help, for good and bad
    /// command lines alike.
    #[test]
    fn the_run_only_parser_is_the_full_trees_run() {
        RunOnly::command().debug_assert();
        let lines: &[&[&str]] = &[
            &[
                "run",
                "--goal",
                "g.json",
                "--trust",
                "a.pub",
                "--",
                "/bin/true",
                "-x",
            ],
            &["run", "--goal", "g.json", "--", "/bin/true"],
            &[
                "run", "--goal", "g.json", "--trust", "a.pub", "--wall", "1s", "--", "x",
            ],
            &[
                "run",
                "--goal",
                "g.json",
                "--trust",
                "a.pub",
                "--profile",
                "nope",
                "--",
                "x",
            ],
            &["run", "--help"],
            &["run", "-h"],
            &["run", "--version"],
            &["run"],
            &["run", "--goal"],
            &[
                "run",
                "--goal",
                "g",
                "--trust",
                "t",
                "--stream",
                "--quiet",
                "--nonce",
                "n",
                "--receipt",
                "r",
                "--",
                "x",
            ],
        ];
        for line in lines {
            let argv: Vec<&str> = std::iter::once("governed-exec")
                .chain(line.iter().copied())
                .collect();
            let full = Cli::try_parse_from(&argv);
            let fast = parse_run(&argv);
            match (full, fast) {
                (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{line:?}"),
                (Err(a), Err(b)) => {
                    assert_eq!(a.kind(), b.kind(), "{line:?}");
                    assert_eq!(a.render().to_string(), b.render().to_string(), "{line:?}");
                }
                (a, b) => panic!("{line:?}: full {a:?}, run-only {b:?}"),
            }
        }
    }
}
