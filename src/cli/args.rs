//! The command line (CONTRACT §2), clap derive. Parsing only.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::ledger::journal::Classification;
use crate::model::{MaxProcesses, Profile};
use crate::process::limits::{parse_duration, parse_max_processes, parse_size};

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write PREFIX.key (0600, PKCS#8 PEM) and PREFIX.pub, ed25519.
    Keygen {
        #[arg(long, value_name = "PREFIX")]
        out: PathBuf,
    },
    /// A human approves exactly one request identity (or every entry of an
    /// approvals file): sign leases into the manifest.
    Approve(Box<ApproveCmd>),
    /// Run one request under a matching lease; print the signed receipt.
    Run(Box<RunCmd>),
    /// Check a receipt against a Goal's mandatory criteria.
    Verify {
        #[arg(long)]
        goal: PathBuf,
        #[arg(long)]
        receipt: PathBuf,
        #[arg(long, value_name = "RUNNER.pub")]
        trust: PathBuf,
        #[arg(long, conflicts_with = "ledger")]
        state_dir: Option<PathBuf>,
        /// Cross-check the receipt against this ledger (PATH or postgres://HOST[:PORT]/DB).
        #[arg(long, value_name = "PATH|postgres://HOST[:PORT]/DB")]
        ledger: Option<String>,
        /// Same as `--format json`.
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// text (default): the verdict, then one line per unmet criterion;
        /// json: one object; markdown: one table row per check, for a CI
        /// job summary. The first line is always the verdict.
        #[arg(long, value_enum)]
        format: Option<VerifyFormat>,
        /// Accept a receipt whose runner key was within the child's reach
        /// (such a receipt proves nothing against the child it describes).
        #[arg(long)]
        allow_key_in_reach: bool,
        /// NOT_VERIFIED unless the receipt carries exactly this nonce (the
        /// value given to `run --nonce`, e.g. the CI job's run id).
        #[arg(long, value_name = "VALUE")]
        nonce: Option<String>,
    },
    /// Inspect the journal of attempts.
    Journal {
        #[arg(long, global = true, conflicts_with = "ledger")]
        state_dir: Option<PathBuf>,
        /// Read this ledger instead of the state dir.
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
        #[arg(long)]
        json: bool,
    },
    /// A person classifies an attempt whose outcome is unknown.
    Resolve {
        #[arg(long)]
        attempt: String,
        #[arg(long = "as", value_enum)]
        as_: Classification,
        #[arg(long)]
        by: String,
        #[arg(long)]
        note: Option<String>,
        #[arg(long, conflicts_with = "ledger")]
        state_dir: Option<PathBuf>,
        /// The ledger holding the attempt (PATH or postgres://HOST[:PORT]/DB).
        #[arg(long, value_name = "PATH|postgres://HOST[:PORT]/DB")]
        ledger: Option<String>,
    },
    /// Revoke a lease: later runs of it are refused.
    Revoke {
        #[arg(long)]
        manifest: PathBuf,
        #[arg(long)]
        lease: String,
        #[arg(long)]
        by: String,
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum JournalAction {
    /// Every attempt with its state.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Every record of one attempt.
    Show {
        attempt: String,
        #[arg(long)]
        json: bool,
    },
    /// Re-walk every hash chain; exit 1 on any break.
    Verify,
}

#[derive(Debug, Subcommand)]
pub enum ReceiptAction {
    /// Print the decoded in-toto statement, or a human view of it.
    Show {
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
pub struct ApproveCmd {
    /// With `--file`: used when the file names no `goal`.
    #[arg(long, required_unless_present = "file")]
    pub goal: Option<PathBuf>,
    /// With `--file`: used when the file names no `workspace`.
    #[arg(long, required_unless_present = "file")]
    pub workspace: Option<PathBuf>,
    #[arg(long)]
    pub manifest: PathBuf,
    #[arg(long, value_name = "APPROVER.key", required_unless_present = "check")]
    pub key: Option<PathBuf>,
    /// Approve every entry of a reviewed approvals file (TOML, CONTRACT
    /// §10) in one manifest write. Per-lease flags belong in the file.
    #[arg(long, value_name = "APPROVALS.toml", conflicts_with_all = [
        "profile", "cwd", "wall_time", "kill_grace", "cancel_grace", "cpu_time", "memory",
        "max_processes", "max_open_files", "max_file_size", "keep_output", "output_cap",
        "env", "as_user", "fs_write", "fs_write_scope", "fs_read", "no_network",
        "pid_namespace", "portable", "ledger", "request", "command", "ttl", "uses",
    ])]
    pub file: Option<PathBuf>,
    /// With `--file`: compare the file, resolved here, with the manifest;
    /// no key needed, nothing written. Exit 0 agree, 1 differ, 2 bad input.
    #[arg(long, requires = "file", conflicts_with_all = ["key", "approver"])]
    pub check: bool,
    /// With `--file`: also revoke the live leases of the file's Goals that
    /// no entry approves any more (listed first).
    #[arg(long, requires = "file", conflicts_with = "check")]
    pub prune: bool,
    /// The `--check` report: text (default) or markdown for a CI job summary.
    #[arg(long, value_enum, requires = "check")]
    pub format: Option<CheckFormat>,
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub ttl: Duration,
    #[arg(long, default_value_t = 1)]
    pub uses: u64,
    #[arg(long)]
    pub approver: Option<String>,
    #[arg(long, value_enum)]
    pub profile: Option<Profile>,
    #[arg(long, value_name = "REL")]
    pub cwd: Option<String>,
    #[arg(long, value_parser = parse_duration)]
    pub wall_time: Option<Duration>,
    #[arg(long, value_parser = parse_duration)]
    pub kill_grace: Option<Duration>,
    /// After governed-exec is sent SIGTERM/SIGINT/SIGHUP: how long the
    /// forwarded signal has before SIGKILL (default 2s in every tier).
    #[arg(long, value_parser = parse_duration)]
    pub cancel_grace: Option<Duration>,
    #[arg(long, value_parser = parse_duration)]
    pub cpu_time: Option<Duration>,
    #[arg(long, value_parser = parse_size)]
    pub memory: Option<u64>,
    /// A number, or `unlimited` to waive the process limit explicitly
    /// (shown in the summary and the receipt).
    #[arg(long, value_parser = parse_max_processes, value_name = "N|unlimited")]
    pub max_processes: Option<MaxProcesses>,
    #[arg(long)]
    pub max_open_files: Option<u64>,
    #[arg(long, value_parser = parse_size)]
    pub max_file_size: Option<u64>,
    /// Kept bytes per stream, head and tail together (half each).
    #[arg(long, value_parser = parse_size)]
    pub keep_output: Option<u64>,
    /// Hard cap on total output; passing it kills the run.
    #[arg(long, value_parser = parse_size)]
    pub output_cap: Option<u64>,
    /// A fixed child environment value (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    #[arg(long, value_name = "UID[:GID]")]
    pub as_user: Option<String>,
    /// Turn the Landlock write scope on; also writable (repeatable).
    #[arg(long, value_name = "PATH")]
    pub fs_write: Vec<PathBuf>,
    /// Turn the Landlock write scope on with only the workspace, HOME and TMPDIR writable.
    #[arg(long)]
    pub fs_write_scope: bool,
    /// Narrow reads and execution to these paths (repeatable) plus the
    /// writable ones; turns the Landlock scope on. List system directories
    /// (e.g. /usr, /lib, /etc) the program needs.
    #[arg(long, value_name = "PATH")]
    pub fs_read: Vec<PathBuf>,
    #[arg(long)]
    pub no_network: bool,
    /// Let the child reach exactly this HOST[:PORT] (port 443 by default)
    /// through governed-exec's HTTP proxy, and nothing else (repeatable;
    /// exact names or IP literals, no wildcards).
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with = "no_network")]
    pub allow_net: Vec<String>,
    #[arg(long)]
    pub pid_namespace: bool,
    /// Refuse executables larger than this (they are hashed whole).
    #[arg(long, default_value = "512MiB", value_parser = parse_size)]
    pub max_executable_size: u64,
    /// Bind by content (executable path, mode, SHA-256), not this machine's inodes.
    #[arg(long)]
    pub portable: bool,
    /// Where the lease's uses are counted: a directory or postgres://HOST[:PORT]/DB.
    #[arg(long, value_name = "PATH|postgres://HOST[:PORT]/DB")]
    pub ledger: Option<String>,
    #[arg(long, value_name = "REQUEST.json")]
    pub request: Option<String>,
    #[arg(last = true, value_name = "EXECUTABLE [ARG...]")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunCmd {
    #[arg(long)]
    pub goal: PathBuf,
    #[arg(long)]
    pub manifest: PathBuf,
    #[arg(long, value_name = "APPROVER.pub")]
    pub trust: PathBuf,
    #[arg(long, value_name = "RUNNER.key")]
    pub key: Option<PathBuf>,
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Where a portable lease runs (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[arg(long)]
    pub receipt: Option<PathBuf>,
    /// Mirror the child's stdout and stderr live to stderr.
    #[arg(long)]
    pub stream: bool,
    #[arg(long, value_name = "REQUEST.json|-")]
    pub request: Option<String>,
    #[arg(long, value_name = "ID")]
    pub lease: Option<String>,
    #[arg(long, value_name = "REL")]
    pub cwd: Option<String>,
    #[arg(long, value_enum)]
    pub profile: Option<Profile>,
    /// Bind the receipt to this run: recorded as `predicate.nonce` (in a
    /// refusal too); `verify --nonce` checks it. At most 256 bytes, no
    /// control characters.
    #[arg(long, value_name = "VALUE")]
    pub nonce: Option<String>,
    #[arg(last = true, value_name = "EXECUTABLE [ARG...]")]
    pub command: Vec<OsString>,
}
