//! The bounded process lifecycle: spawn, drain, deadline, TERM → grace →
//! KILL, reap, and *observe* that every process of the run is gone.
//!
//! governed-exec is a child subreaper, so every descendant — including those
//! that `setsid` or double-fork away from the process group — is re-parented
//! to it when its parent dies and stays findable through
//! `/proc/self/task/*/children`. Cleanup walks that tree, signals each process
//! through a pidfd opened after checking its parent (so a reused pid is never
//! hit), reaps what it can, and repeats until nothing is left or the confirm
//! bound passes; only "nothing left" is reported as `gone`.
//!
//! The main process is observed with `waitid(WNOWAIT)` and reaped last, so
//! its pid — which is also the process group id — stays pinned while we
//! signal the group.
//!
//! Signals to governed-exec (TERM/INT/HUP) and SIGCHLD are blocked in every
//! thread from the start of `main` and read through a signalfd in the same
//! `poll` as the main process's pidfd and the output-cap notification.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::signal::{killpg, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::model::{Cleanup, CleanupState, KernelView, Limits, Resources, StreamRecord};
use crate::os::sys::{self, ChildStep, ExitTrace, SpawnPath, SpawnSpec, Spawned, TraceStop};
use crate::process::accounting;
use crate::process::capture::StreamCapture;
use crate::process::cgroup::RunCgroups;

/// How long cleanup may take to observe every process gone before the
/// outcome becomes `unknown`.
pub const CONFIRM_BOUND: Duration = Duration::from_secs(5);
/// How long the output pipes may stay open after the whole tree is gone
/// (only something outside the run, holding a passed fd, can do that).
pub const DRAIN_BOUND: Duration = Duration::from_secs(2);
pub const CLEANUP_MECHANISM: &str = "subreaper+proc_children+pidfd";

/// The signals governed-exec handles itself; blocked in every thread.
pub fn handled_signals() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGCHLD,
    ] {
        set.add(s);
    }
    set
}

/// Why the run ended, before the exit status is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    MainExited,
    TimedOut,
    OutputCapped,
    Cancelled(i32),
}

pub struct Supervised {
    /// Under a new PID namespace: whether its teardown was observed.
    pub exit_trace: ExitTrace,
    pub ending: Ending,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub cleanup: Cleanup,
    pub stdout: StreamRecord,
    pub stderr: StreamRecord,
    pub resources: Resources,
    pub started: SystemTime,
    pub ended: SystemTime,
    pub kernel_view: Option<KernelView>,
    pub spawn_path: SpawnPath,
    /// Whether the kernel's log names the main process as an OOM victim
    /// during this run (`None`: the log could not be read, or the run had
    /// no memory cgroup).
    pub main_oom_killed: Option<bool>,
}

pub enum RunResult {
    NotExecuted {
        step: ChildStep,
        errno: i32,
        spawn_path: SpawnPath,
    },
    Ran(Box<Supervised>),
}

/// Shared by both drain threads: total output and the hard cap.
struct OutputBudget {
    total: AtomicU64,
    cap: u64,
    tripped: AtomicBool,
    notify: File,
}

impl OutputBudget {
    fn add(&self, n: u64) {
        let total = self.total.fetch_add(n, Ordering::Relaxed) + n;
        if total > self.cap && !self.tripped.swap(true, Ordering::Relaxed) {
            let _ = (&self.notify).write_all(&[1]);
        }
    }
}

/// How `--stream` mirrors the child's output to our stderr: raw bytes into
/// a log file or pipe (CI logs keep their colours), the terminal-safe
/// projection when stderr is a terminal (escape sequences cannot reach it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mirror {
    Off,
    Raw,
    Terminal,
}

impl Mirror {
    pub fn for_stderr(enabled: bool) -> Mirror {
        use std::io::IsTerminal;
        match (enabled, std::io::stderr().is_terminal()) {
            (false, _) => Mirror::Off,
            (true, false) => Mirror::Raw,
            (true, true) => Mirror::Terminal,
        }
    }
}

/// While `--stream` mirrors raw child bytes into a GitHub Actions log, the
/// runner stops processing workflow commands: a child that prints
/// `::add-mask::`, `::error::` or `::stop-commands::` would otherwise act on
/// the job. GitHub's own fence: `::stop-commands::TOKEN` before, `::TOKEN::`
/// after, with a random token the child never sees (it is in no
/// environment the child gets). Dropping the fence resumes commands.
pub struct CommandFence(Option<String>);

impl CommandFence {
    /// A fence when `mirror` writes raw bytes and governed-exec itself runs
    /// in GitHub Actions (`GITHUB_ACTIONS=true` in the runner's environment).
    pub fn open(mirror: Mirror) -> CommandFence {
        let in_actions = std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true");
        if mirror != Mirror::Raw || !in_actions {
            return CommandFence(None);
        }
        let mut r = [0u8; 16];
        if getrandom::getrandom(&mut r).is_err() {
            // No unpredictable token: mirror the projection instead of raw
            // bytes would be safer, but the caller already chose; say so.
            let _ = writeln!(std::io::stderr(), "governed-exec: warning: no random token for ::stop-commands::; the child's output may issue workflow commands");
            return CommandFence(None);
        }
        let token = format!("governed-exec-{}", hex::encode(r));
        let _ = writeln!(std::io::stderr(), "::stop-commands::{token}");
        CommandFence(Some(token))
    }
}

impl Drop for CommandFence {
    fn drop(&mut self) {
        if let Some(token) = &self.0 {
            let _ = write!(std::io::stderr(), "\n::{token}::\n");
        }
    }
}

/// The size asked for the child's stdout and stderr pipes, and the read
/// buffer that drains each.
const OUTPUT_PIPE_BYTES: libc::c_int = 1 << 20;

/// Whether the mirror may still write to the log: closed once supervision
/// is over (before the `--stream` fence is lifted), so a process outside the
/// run that still holds a pipe cannot write past it. Held while writing.
type MirrorGate = Arc<std::sync::Mutex<bool>>;

/// Closes the mirror when supervision returns, whichever way it returns:
/// whatever still holds a pipe writes no more to the log before the caller
/// lifts the `--stream` fence.
struct GateCloser(MirrorGate);

impl Drop for GateCloser {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = false;
    }
}

fn drain(
    mut pipe: File,
    keep: u64,
    budget: Arc<OutputBudget>,
    mirror: Mirror,
    gate: MirrorGate,
) -> StreamCapture {
    let mut cap = StreamCapture::new(keep);
    let mut buf = vec![0u8; OUTPUT_PIPE_BYTES as usize];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                cap.push(&buf[..n]);
                budget.add(n as u64);
                let open = gate.lock().unwrap_or_else(|p| p.into_inner());
                match mirror {
                    _ if !*open => {}
                    Mirror::Off => {}
                    Mirror::Raw => {
                        let _ = std::io::stderr().lock().write_all(&buf[..n]);
                    }
                    Mirror::Terminal => {
                        let text = crate::process::capture::project_text(&buf[..n]);
                        let _ = std::io::stderr().lock().write_all(text.as_bytes());
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    cap
}

/// Everything needed to run one governed child.
pub struct Plan<'a> {
    pub spec: SpawnSpec<'a>,
    pub limits: Limits,
    pub mirror: Mirror,
    pub signals: &'a mut SignalFd,
    pub cgroups: &'a RunCgroups,
    /// The durable `executing` record of this attempt: no spawn without it.
    pub committed: &'a crate::ledger::journal::Committed,
}

/// Owns the running tree from the spawn until its cleanup is confirmed. An
/// early return (a `?` after the spawn) drops it, and dropping it runs the
/// kill-and-confirm loop, so no path out of `run` leaves the tree behind.
struct TreeOwner<'a> {
    main: &'a Main,
    cgroups: &'a RunCgroups,
    confirmed: bool,
}

impl TreeOwner<'_> {
    /// The normal end: kill what is left and confirm it gone.
    fn cleanup(mut self, count_as_leftovers: bool) -> Cleanup {
        self.confirmed = true;
        kill_all_and_confirm(self.main, count_as_leftovers, self.cgroups)
    }
}

impl Drop for TreeOwner<'_> {
    fn drop(&mut self) {
        if !self.confirmed {
            let _ = kill_all_and_confirm(self.main, false, self.cgroups);
            // Reap the main process too: nothing else will now.
            let _ = waitpid(self.main.pid, Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// Why supervision failed: before any child existed (nothing ran: the
/// outcome is `known_not_executed`/`exec_failed`), or after (whether the
/// tree finished or is gone is not known: `unknown`).
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("could not start the child: {0}")]
    NotStarted(#[source] std::io::Error),
    #[error("supervision failed after the child started: {0}")]
    AfterStart(#[source] std::io::Error),
}

impl From<std::io::Error> for SuperviseError {
    /// Every `?` after the spawn: the child exists.
    fn from(e: std::io::Error) -> SuperviseError {
        SuperviseError::AfterStart(e)
    }
}

impl From<nix::errno::Errno> for SuperviseError {
    fn from(e: nix::errno::Errno) -> SuperviseError {
        SuperviseError::AfterStart(e.into())
    }
}

pub fn run(plan: Plan<'_>) -> Result<RunResult, SuperviseError> {
    let Plan {
        mut spec,
        limits,
        mirror,
        signals,
        cgroups,
        committed: _,
    } = plan;
    let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
    let not_started = |e: nix::errno::Errno| SuperviseError::NotStarted(e.into());
    let (out_r, out_w) = nix::unistd::pipe2(cloexec).map_err(not_started)?;
    let (err_r, err_w) = nix::unistd::pipe2(cloexec).map_err(not_started)?;
    let (note_r, note_w) = nix::unistd::pipe2(cloexec).map_err(not_started)?;
    // Bigger pipes than the default 64 KiB: a child that prints a lot waits
    // on its reader less often (fewer context switches per byte drained).
    // Best effort: the pipe-size limits may refuse it.
    for w in [&out_w, &err_w] {
        let _ = nix::fcntl::fcntl(
            w.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(OUTPUT_PIPE_BYTES),
        );
    }
    spec.stdout_fd = out_w.as_raw_fd();
    spec.stderr_fd = err_w.as_raw_fd();

    // The readers exist before the child does: once a fork storm fills an
    // enclosing pids.max the runner could no longer create a thread, and a
    // run whose output is not drained cannot be confirmed (it was `unknown`
    // with EAGAIN). If the spawn fails, returning drops the write ends and
    // the readers see EOF at once.
    let budget = Arc::new(OutputBudget {
        total: AtomicU64::new(0),
        cap: limits.output_cap_bytes,
        tripped: AtomicBool::new(false),
        notify: File::from(note_w),
    });
    let (tx, rx) = mpsc::channel::<(usize, StreamCapture)>();
    let gate: MirrorGate = Arc::new(std::sync::Mutex::new(true));
    let _closer = GateCloser(gate.clone());
    for (idx, pipe) in [out_r, err_r].into_iter().enumerate() {
        let tx = tx.clone();
        let budget = budget.clone();
        let gate = gate.clone();
        let keep = limits.keep_output_bytes;
        std::thread::Builder::new()
            .name(format!("drain-{idx}"))
            .spawn(move || {
                let cap = drain(File::from(pipe), keep, budget, mirror, gate);
                let _ = tx.send((idx, cap));
            })?;
    }
    drop(tx);
    // Before the child exists: the kernel log's end, to find an OOM kill of
    // the main process among what it logs during the run.
    let kernel_log = cgroups
        .memory_limit()
        .is_some()
        .then(crate::process::oom::KernelLog::at_end);
    let started = SystemTime::now();
    let t0 = Instant::now();
    if crate::testing::fault::fail("spawn_enosys") {
        // What clone3 answers under Docker's default seccomp profile.
        return Err(SuperviseError::NotStarted(
            std::io::Error::from_raw_os_error(libc::ENOSYS),
        ));
    }
    let (pid, pidfd, spawn_path, exit_trace) =
        match sys::spawn(&spec).map_err(SuperviseError::NotStarted)? {
            Spawned::Failed { step, errno, path } => {
                return Ok(RunResult::NotExecuted {
                    step,
                    errno,
                    spawn_path: path,
                })
            }
            Spawned::Running {
                pid,
                pidfd,
                path,
                exit_trace,
            } => (pid, pidfd, path, exit_trace),
        };
    drop(out_w);
    drop(err_w);
    let main = &Main {
        pid: Pid::from_raw(pid),
        trace: exit_trace,
        alive_at_exit: RefCell::new(Ok(HashSet::new())),
    };
    let owner = TreeOwner {
        main,
        cgroups,
        confirmed: false,
    };
    // The exec has happened (the error pipe closed): read the credentials
    // back from the kernel while the process is most likely still there.
    let kernel_view = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| KernelView::from_status(&s));

    let deadline = t0 + Duration::from_millis(limits.wall_time_ms);
    let ending = wait_for_ending(main, &pidfd, signals, &note_r, deadline)?;
    if crate::testing::fault::fail("supervision_error") {
        // An early return after the spawn: the tree's owner must clean up.
        return Err(SuperviseError::AfterStart(std::io::Error::other(
            "injected supervision failure",
        )));
    }
    // The one place a stop request reaches the tree: a timeout sends
    // SIGTERM and waits the kill grace; a cancellation forwards the very
    // signal governed-exec received and waits the lease's cancel grace.
    // SIGKILL follows in `kill_all_and_confirm`.
    match ending {
        Ending::TimedOut => {
            terminate_tree(main.pid, Signal::SIGTERM);
            let grace = Duration::from_millis(limits.kill_grace_ms);
            wait_main_exit(main, &pidfd, signals, grace);
        }
        Ending::Cancelled(sig) => {
            let sig = Signal::try_from(sig).unwrap_or(Signal::SIGTERM);
            terminate_tree(main.pid, sig);
            let grace = Duration::from_millis(limits.cancel_grace_ms);
            wait_main_exit(main, &pidfd, signals, grace);
        }
        Ending::OutputCapped | Ending::MainExited => {}
    }
    let main_exited_first = ending == Ending::MainExited;
    #[allow(unused_mut)]
    let mut cleanup = owner.cleanup(main_exited_first);
    if crate::testing::fault::fail("cleanup_unconfirmed") {
        // As if a process had stayed past the confirm bound.
        cleanup.state = CleanupState::NotConfirmed;
    }
    // Never block on a main process that could not be confirmed gone.
    let status = if main_has_exited(main) {
        waitpid(main.pid, None).ok()
    } else {
        None
    };
    let (exit_code, signal) = match status {
        Some(WaitStatus::Exited(_, code)) => (Some(code), None),
        Some(WaitStatus::Signaled(_, sig, _)) => (None, Some(sig as i32)),
        _ => (None, None),
    };

    // The tree is gone, so the pipes' write ends are closed unless something
    // outside the run holds one: never wait for it past the bound.
    let mut streams: [Option<StreamCapture>; 2] = [None, None];
    let drain_deadline = Instant::now() + DRAIN_BOUND;
    while streams.iter().any(Option::is_none) {
        let left = drain_deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((idx, cap)) => streams[idx] = Some(cap),
            Err(_) => break,
        }
    }
    let [so, se] = streams;
    let finish = |c: Option<StreamCapture>| match c {
        Some(c) => c.finish(true),
        None => StreamCapture::new(0).finish(false),
    };
    let ended = SystemTime::now();
    // One read of the run's counters: every process is gone (or given up
    // on), and the groups are removed only when `cgroups` is dropped.
    let counters = accounting::read_counters(&cgroups.counter_dirs());
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN)?;
    let ms =
        |tv: nix::sys::time::TimeVal| (tv.tv_sec() as u64) * 1000 + (tv.tv_usec() as u64) / 1000;
    let ru = accounting::Rusage {
        user_ms: ms(usage.user_time()),
        system_ms: ms(usage.system_time()),
        max_rss_kib: usage.max_rss() as u64,
        in_blocks: usage.block_reads() as u64,
        out_blocks: usage.block_writes() as u64,
    };
    let (stdout, stderr) = (finish(so), finish(se));
    let wall_ms = ended
        .duration_since(started)
        .unwrap_or_default()
        .as_millis() as u64;
    let resources = accounting::resources(
        counters,
        &ru,
        &limits,
        wall_ms,
        stdout.bytes.saturating_add(stderr.bytes),
    );
    let main_oom_killed = kernel_log.and_then(|k| k.oom_killed(pid));
    Ok(RunResult::Ran(Box::new(Supervised {
        exit_trace: main.trace,
        ending,
        exit_code,
        signal,
        cleanup,
        stdout,
        stderr,
        resources,
        started,
        ended,
        kernel_view,
        spawn_path,
        main_oom_killed,
    })))
}

/// Wait for the first of: main exit, deadline, output cap, a cancelling signal.
fn wait_for_ending(
    main: &Main,
    pidfd: &OwnedFd,
    signals: &mut SignalFd,
    note: &OwnedFd,
    deadline: Instant,
) -> std::io::Result<Ending> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Ending::TimedOut);
        }
        let timeout = PollTimeout::try_from(left.as_millis().min(60_000) as i32 + 1)
            .unwrap_or(PollTimeout::MAX);
        let mut fds = [
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(note.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let ready = |i: usize| fds[i].revents().is_some_and(|r| !r.is_empty());
        let (main_ready, sig_ready, note_ready) = (ready(0), ready(1), ready(2));
        if note_ready {
            return Ok(Ending::OutputCapped);
        }
        if sig_ready {
            if let Some(sig) = read_signals(signals, main.pid) {
                return Ok(Ending::Cancelled(sig));
            }
        }
        // A traced main process's stops arrive as SIGCHLD, not on its pidfd.
        if (main_ready || sig_ready) && main_has_exited(main) {
            return Ok(Ending::MainExited);
        }
    }
}

/// Drain the signalfd: reap stray zombies on SIGCHLD, return a cancelling
/// signal if one arrived.
fn read_signals(signals: &mut SignalFd, main: Pid) -> Option<i32> {
    let mut cancel = None;
    while let Ok(Some(info)) = signals.read_signal() {
        let sig = info.ssi_signo as i32;
        if sig == libc::SIGCHLD {
            reap_strays(main);
        } else if cancel.is_none() {
            cancel = Some(sig);
        }
    }
    cancel
}

fn main_has_exited(main: &Main) -> bool {
    if main.trace == ExitTrace::Seized {
        main.serve_stops();
    }
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    matches!(
        waitid(Id::Pid(main.pid), flags),
        Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
    )
}

/// The main process of the run.
struct Main {
    pid: Pid,
    trace: ExitTrace,
    /// Under a traced PID namespace: every other process of the run alive
    /// when the main process began to exit, which the kernel's teardown of
    /// the namespace then kills (an error if the tree could not be read at
    /// that moment).
    alive_at_exit: RefCell<std::io::Result<HashSet<i32>>>,
}

impl Main {
    /// Resume every pending ptrace-stop as the kernel would have run it
    /// untraced; at the exit stop, first count the rest of the namespace.
    fn serve_stops(&self) {
        let pid = self.pid.as_raw();
        while let Ok(Some(stop)) = sys::trace_take_stop(pid) {
            if stop == TraceStop::Exit {
                let alive = descendants().map(|tree| {
                    tree.iter()
                        .map(|n| n.pid)
                        .filter(|&p| p != pid && proc_state(p).is_some_and(|(st, _)| st != 'Z'))
                        .collect()
                });
                *self.alive_at_exit.borrow_mut() = alive;
            }
            let _ = sys::trace_resume(pid, stop);
        }
    }

    /// The leftovers: those seen alive during cleanup and, under a traced
    /// PID namespace, those alive when the main process began to exit.
    fn leftovers(&self, seen_in_cleanup: &HashSet<i32>) -> u64 {
        match &*self.alive_at_exit.borrow() {
            Ok(at_exit) => seen_in_cleanup.union(at_exit).count() as u64,
            Err(_) => seen_in_cleanup.len() as u64,
        }
    }
}

impl Supervised {
    /// Why the processes left behind could not all be counted: under a
    /// PID namespace whose teardown was not observed (CONTRACT §7: the
    /// kernel kills them as part of PID 1's exit, before any wait).
    pub fn leftovers_uncounted(&self) -> Option<String> {
        match self.exit_trace {
            ExitTrace::Refused(errno) => Some(format!(
                "under --pid-namespace the kernel kills every other process of the run when the main process ends, and ptrace, by which governed-exec counts them first, was refused ({}): processes left behind could not be counted",
                nix::errno::Errno::from_raw(errno).desc()
            )),
            _ => None,
        }
    }
}

/// During the grace period: wait for the main process, or a second
/// cancelling signal, which cuts the grace short.
fn wait_main_exit(main: &Main, pidfd: &OwnedFd, signals: &mut SignalFd, grace: Duration) {
    let end = Instant::now() + grace;
    while !main_has_exited(main) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let timeout = PollTimeout::try_from(left.as_millis().min(60_000) as i32 + 1)
            .unwrap_or(PollTimeout::MAX);
        let mut fds = [
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        if poll(&mut fds, timeout).is_err() {
            continue;
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty())
            && read_signals(signals, main.pid).is_some()
        {
            return;
        }
    }
}

/// One process found in our tree.
#[derive(Debug, Clone, Copy)]
struct Node {
    pid: i32,
    ppid: i32,
}

/// The children of every thread of `pid`. A process that is gone reads as
/// having none; any other failure (this runner's own `/proc` entry, a file
/// table a child emptied by lowering the runner's RLIMIT_NOFILE) is an
/// error, so that the tree is never "observed empty" because it could not
/// be read.
fn children_of(pid: i32) -> std::io::Result<Vec<i32>> {
    let me = std::process::id() as i32;
    let vanished = |e: &std::io::Error| {
        pid != me && matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH))
    };
    let mut out = Vec::new();
    let tasks = match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(t) => t,
        Err(e) if vanished(&e) => return Ok(out),
        Err(e) => return Err(e),
    };
    for t in tasks {
        let t = t?;
        match std::fs::read_to_string(t.path().join("children")) {
            Ok(s) => out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok())),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Every descendant of this process, breadth first.
fn descendants() -> std::io::Result<Vec<Node>> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let mut queue = vec![me];
    let mut seen = HashSet::new();
    while let Some(parent) = queue.pop() {
        for pid in children_of(parent)? {
            if seen.insert(pid) {
                out.push(Node { pid, ppid: parent });
                queue.push(pid);
            }
        }
    }
    Ok(out)
}

/// `(state, ppid)` from `/proc/PID/stat`.
fn proc_state(pid: i32) -> Option<(char, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    let mut it = after.split_whitespace();
    let state = it.next()?.chars().next()?;
    let ppid = it.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Signal `node` through a pidfd, after checking that the pid still belongs
/// to the process we found under `node.ppid`. Returns whether it was alive
/// (not a zombie) and signalled.
fn signal_node(node: Node, sig: Signal) -> bool {
    let Ok(fd) = sys::pidfd_open(node.pid) else {
        return false;
    };
    match proc_state(node.pid) {
        Some((state, ppid)) if ppid == node.ppid && state != 'Z' && state != 'X' => {
            sys::pidfd_send_signal(&fd, sig as i32).is_ok()
        }
        _ => false,
    }
}

/// Send `sig` to the main process's group (its pid is pinned until we reap
/// it) and every descendant found in the tree, with SIGCONT to the stopped
/// ones so that they can act on it. One walk of the tree.
fn terminate_tree(main: Pid, sig: Signal) {
    let _ = killpg(main, sig);
    let _ = killpg(main, Signal::SIGCONT);
    for node in descendants().unwrap_or_default() {
        let Ok(fd) = sys::pidfd_open(node.pid) else {
            continue;
        };
        if let Some((state, ppid)) = proc_state(node.pid) {
            if ppid == node.ppid && state != 'Z' && state != 'X' {
                let _ = sys::pidfd_send_signal(&fd, sig as i32);
                if state == 'T' || state == 't' {
                    let _ = sys::pidfd_send_signal(&fd, libc::SIGCONT);
                }
            }
        }
    }
}

/// Reap zombies among our direct children other than the main process.
fn reap_strays(main: Pid) {
    let me = std::process::id() as i32;
    for pid in children_of(me).unwrap_or_default() {
        if pid != main.as_raw() {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// SIGKILL everything until the tree is observed empty (the main process
/// only as an unreaped zombie), or the confirm bound passes.
fn kill_all_and_confirm(main: &Main, count_as_leftovers: bool, cgroups: &RunCgroups) -> Cleanup {
    let pid = main.pid;
    let end = Instant::now() + CONFIRM_BOUND;
    let mechanism = if cgroups.has_kill() {
        format!("{CLEANUP_MECHANISM}+cgroup.kill")
    } else {
        CLEANUP_MECHANISM.to_string()
    };
    // Every process other than main seen alive during cleanup: the leftovers.
    let mut seen_alive: HashSet<i32> = HashSet::new();
    let mut pause = Duration::from_micros(200);
    let mut first = true;
    loop {
        if !main_has_exited(main) {
            let _ = killpg(pid, Signal::SIGKILL);
        }
        // Fast path: while the v2 group itself says it is populated, the run
        // is not gone; kill through it and reap without walking /proc (the
        // first pass has already counted everything alive).
        if !first && matches!(cgroups.populated(), Some(Ok(true))) && Instant::now() < end {
            cgroups.kill();
            reap_strays(pid);
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
            continue;
        }
        first = false;
        // Whether some witness could not be read in this pass: then nothing
        // is observed gone, whatever the others say.
        let mut blind = false;
        match cgroups.members() {
            Ok(ms) => {
                for m in ms {
                    if m != pid.as_raw() && proc_state(m).is_some_and(|(st, _)| st != 'Z') {
                        seen_alive.insert(m);
                    }
                }
            }
            Err(_) => blind = true,
        }
        cgroups.kill();
        if !cgroups.has_kill() {
            cgroups.kill_members();
        }
        let tree = descendants().unwrap_or_else(|_| {
            blind = true;
            Vec::new()
        });
        let mut present = Vec::new();
        for node in &tree {
            if node.pid == pid.as_raw() {
                continue;
            }
            present.push(node.pid);
            if signal_node(*node, Signal::SIGKILL) {
                seen_alive.insert(node.pid);
            }
        }
        reap_strays(pid);
        let main_done = main_has_exited(main);
        // The cgroups are a second, independent witness: a process that is
        // not in our tree but still in the run's cgroup is not gone.
        let members: Vec<i32> = match cgroups.members() {
            Ok(ms) => ms.into_iter().filter(|p| *p != pid.as_raw()).collect(),
            Err(_) => {
                blind = true;
                Vec::new()
            }
        };
        let populated = match cgroups.populated() {
            None => false,
            Some(Ok(p)) => p,
            Some(Err(_)) => {
                blind = true;
                true
            }
        };
        let known: HashSet<i32> = present.iter().copied().collect();
        present.extend(members.into_iter().filter(|m| !known.contains(m)));
        if present.is_empty() && main_done && !populated && !blind {
            return Cleanup {
                state: CleanupState::Gone,
                mechanism: mechanism.clone(),
                leftover_processes_killed: if count_as_leftovers {
                    main.leftovers(&seen_alive)
                } else {
                    0
                },
                unconfirmed_pids: vec![],
                witness: vec![],
                evadable: true,
                evadable_why: String::new(),
            };
        }
        if Instant::now() >= end {
            if !main_done {
                present.push(pid.as_raw());
            }
            return Cleanup {
                state: CleanupState::NotConfirmed,
                mechanism: mechanism.clone(),
                leftover_processes_killed: if count_as_leftovers {
                    main.leftovers(&seen_alive)
                } else {
                    0
                },
                unconfirmed_pids: present,
                witness: vec![],
                evadable: true,
                evadable_why: String::new(),
            };
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
