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
//! One event loop on the main thread (`epoll`) waits for everything a run
//! can end by: the child's stdout and stderr pipes (drained, counted and
//! hashed as they become readable, so the output cap is seen at the byte
//! that crosses it), the signalfd (TERM/INT/HUP and SIGCHLD are blocked in
//! every thread from the start of `main`) and the main process's pidfd.
//! No reader thread: nothing to start per run, nothing to hand captures
//! back through, and nothing a fork storm that fills an enclosing
//! `pids.max` could keep from starting.

use std::cell::Cell;
use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use nix::poll::PollTimeout;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::signal::{killpg, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::process::accounting;
use crate::process::capture::StreamCapture;
use crate::process::cgroup::RunCgroups;
use governed_model::{Cleanup, CleanupState, KernelView, Limits, Resources, StreamRecord};
use governed_sys as sys;
use governed_sys::{ChildStep, InitReport, InitStatus, SpawnPath, SpawnSpec, Spawned};

/// How long cleanup may take to observe every process gone before the
/// outcome becomes `unknown`.
pub(crate) const CONFIRM_BOUND: Duration = Duration::from_secs(5);
/// How long the output pipes may stay open after the whole tree is gone
/// (only something outside the run, holding a passed fd, can do that).
pub const DRAIN_BOUND: Duration = Duration::from_secs(2);
pub(crate) const CLEANUP_MECHANISM: &str = "subreaper+proc_children+pidfd";

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
    /// Under a new PID namespace: its init ended before it reported the
    /// program's end, so the kernel tore the namespace down unobserved.
    pub init_lost: bool,
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
    pub(crate) fn for_stderr(enabled: bool) -> Mirror {
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
        if getrandom::fill(&mut r).is_err() {
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
/// is over (before the `--stream` fence is lifted), so nothing queued past
/// that point reaches the log. Held while writing.
type MirrorGate = Arc<std::sync::Mutex<bool>>;

/// Closes the mirror when supervision returns, whichever way it returns:
/// nothing more is written to the log before the caller lifts the
/// `--stream` fence.
struct GateCloser(MirrorGate);

impl Drop for GateCloser {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = false;
    }
}

/// Chunks of output waiting for the mirror thread, at most.
const MIRROR_QUEUE: usize = 4;

/// `--stream`: a thread writes the child's output to our stderr, so that a
/// slow or blocked log never stops the event loop (the deadline, the
/// output cap and cancellation stay on time). It exists only with
/// `--stream`, and before the child does.
struct MirrorThread {
    tx: Option<mpsc::SyncSender<Vec<u8>>>,
    /// A chunk the queue had no room for: the pipes are not read until it
    /// is queued (the child waits on its full pipe, as it would on a slow
    /// log).
    pending: Option<Vec<u8>>,
    /// Says when the thread has written everything queued.
    done: mpsc::Receiver<()>,
    _closer: GateCloser,
}

impl MirrorThread {
    fn start(mirror: Mirror) -> std::io::Result<Option<MirrorThread>> {
        if mirror == Mirror::Off {
            return Ok(None);
        }
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(MIRROR_QUEUE);
        let (done_tx, done) = mpsc::channel();
        let gate: MirrorGate = Arc::new(std::sync::Mutex::new(true));
        let thread_gate = gate.clone();
        std::thread::Builder::new()
            .name("mirror".into())
            .spawn(move || {
                for chunk in rx {
                    let open = thread_gate.lock().unwrap_or_else(|p| p.into_inner());
                    if !*open {
                        break;
                    }
                    let mut err = std::io::stderr().lock();
                    let _ = match mirror {
                        Mirror::Terminal => {
                            err.write_all(crate::process::capture::project_text(&chunk).as_bytes())
                        }
                        _ => err.write_all(&chunk),
                    };
                }
                let _ = done_tx.send(());
            })?;
        Ok(Some(MirrorThread {
            tx: Some(tx),
            pending: None,
            done,
            _closer: GateCloser(gate),
        }))
    }

    /// Queue a copy of `data`; false when the queue is full (kept pending).
    fn offer(&mut self, data: &[u8]) -> bool {
        debug_assert!(self.pending.is_none());
        self.pending = Some(data.to_vec());
        self.flush_pending()
    }

    /// Queue the pending chunk if there is room now; true once none is left.
    fn flush_pending(&mut self) -> bool {
        let (Some(chunk), Some(tx)) = (self.pending.take(), self.tx.as_ref()) else {
            return true;
        };
        match tx.try_send(chunk) {
            Ok(()) | Err(mpsc::TrySendError::Disconnected(_)) => true,
            Err(mpsc::TrySendError::Full(chunk)) => {
                self.pending = Some(chunk);
                false
            }
        }
    }

    /// Everything drained: let the thread write what is queued, for at
    /// most `left`, before the gate closes.
    fn finish(mut self, deadline: Instant) {
        while !self.flush_pending() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.tx = None;
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = self.done.recv_timeout(left);
    }
}

/// The stack buffer of the first reads (see `EventLoop::read`).
const SMALL_READ: usize = 4096;

/// The event loop's tokens.
const TOKEN_STDOUT: u64 = 0;
const TOKEN_STDERR: u64 = 1;
const TOKEN_MAIN: u64 = 2;
const TOKEN_SIGNALS: u64 = 3;

/// What one turn of the event loop saw besides output.
#[derive(Default)]
struct Ready {
    main: bool,
    signals: bool,
}

/// The run's one event loop: the two output pipes (read non-blocking,
/// every byte counted and hashed, head and tail kept), the main process's
/// pidfd and the signalfd, in one `epoll` on the main thread.
struct EventLoop {
    epoll: Epoll,
    /// The read ends, until EOF (or a read error, as a reader thread
    /// used to stop at one).
    pipes: [Option<File>; 2],
    captures: [StreamCapture; 2],
    total: u64,
    cap: u64,
    buf: Vec<u8>,
    mirror: Option<MirrorThread>,
    /// The pipes are out of the epoll set while the mirror's queue is full.
    paused: bool,
}

impl EventLoop {
    fn new(
        pipes: [OwnedFd; 2],
        keep: u64,
        cap: u64,
        mirror: Option<MirrorThread>,
    ) -> std::io::Result<EventLoop> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let [out, err] = pipes;
        for (token, fd) in [(TOKEN_STDOUT, &out), (TOKEN_STDERR, &err)] {
            nix::fcntl::fcntl(
                fd.as_raw_fd(),
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            )?;
            epoll.add(fd, EpollEvent::new(EpollFlags::EPOLLIN, token))?;
        }
        Ok(EventLoop {
            epoll,
            pipes: [Some(File::from(out)), Some(File::from(err))],
            captures: [StreamCapture::new(keep), StreamCapture::new(keep)],
            total: 0,
            cap,
            // Made when a read fills the small buffer (see `read`).
            buf: Vec::new(),
            mirror,
            paused: false,
        })
    }

    /// Watch the main process and the signals too (after the spawn); under
    /// a PID namespace the main process is the init, and its status pipe
    /// says when the program ends.
    fn watch(&self, main: &Main, pidfd: &OwnedFd, signals: &SignalFd) -> std::io::Result<()> {
        self.epoll
            .add(pidfd, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_MAIN))?;
        if let Some(init) = &main.init {
            self.epoll.add(
                &init.status.fd,
                EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_MAIN),
            )?;
        }
        self.epoll
            .add(signals, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_SIGNALS))?;
        Ok(())
    }

    /// Stop watching them: after cleanup only the pipes are drained (an
    /// exited main keeps its pidfd readable, and a late signal stays
    /// pending in the signalfd, as it did while reader threads drained).
    fn unwatch(&self, main: &Main, pidfd: &OwnedFd, signals: &SignalFd) {
        let _ = self.epoll.delete(pidfd);
        if let Some(init) = &main.init {
            let _ = self.epoll.delete(&init.status.fd);
        }
        let _ = self.epoll.delete(signals);
    }

    fn capped(&self) -> bool {
        self.total > self.cap
    }

    fn pipes_open(&self) -> bool {
        self.pipes.iter().any(Option::is_some)
    }

    /// One wait of at most `left`, reading whatever output is ready.
    fn turn(&mut self, left: Duration) -> std::io::Result<Ready> {
        let mut left = left;
        if self.paused {
            if self.mirror.as_mut().is_none_or(MirrorThread::flush_pending) {
                self.set_paused(false);
            } else {
                left = left.min(Duration::from_millis(2));
            }
        }
        let timeout = PollTimeout::try_from(left.as_millis().min(60_000) as i32 + 1)
            .unwrap_or(PollTimeout::MAX);
        let mut events = [EpollEvent::empty(); 4];
        let n = match self.epoll.wait(&mut events, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e.into()),
        };
        let mut ready = Ready::default();
        for ev in &events[..n] {
            match ev.data() {
                TOKEN_MAIN => ready.main = true,
                TOKEN_SIGNALS => ready.signals = true,
                t => self.read(t as usize),
            }
        }
        Ok(ready)
    }

    fn set_paused(&mut self, paused: bool) {
        if self.paused == paused {
            return;
        }
        self.paused = paused;
        for (token, pipe) in self.pipes.iter().enumerate() {
            if let Some(p) = pipe {
                let _ = if paused {
                    self.epoll.delete(p)
                } else {
                    self.epoll
                        .add(p, EpollEvent::new(EpollFlags::EPOLLIN, token as u64))
                };
            }
        }
    }

    /// Read what pipe `idx` holds (up to 1 MiB). The first reads go to a
    /// small buffer on the stack: a run that prints little (or nothing: the
    /// one read is the EOF) never allocates, zeroes and faults in the 1 MiB
    /// one, which is made once a read fills the small one.
    fn read(&mut self, idx: usize) {
        if self.paused {
            return;
        }
        let Some(pipe) = self.pipes[idx].as_ref() else {
            return;
        };
        let mut small = [0u8; SMALL_READ];
        let buf: &mut [u8] = if self.buf.is_empty() {
            &mut small
        } else {
            &mut self.buf
        };
        let mut pause = false;
        let mut grow = false;
        let mut eof = false;
        match (&*pipe).read(buf) {
            Ok(0) => eof = true,
            Ok(n) => {
                self.captures[idx].push(&buf[..n]);
                self.total = self.total.saturating_add(n as u64);
                if let Some(m) = self.mirror.as_mut() {
                    pause = !m.offer(&buf[..n]);
                }
                grow = n == SMALL_READ && buf.len() == SMALL_READ;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => eof = true,
        }
        if eof {
            self.close(idx);
        }
        if grow {
            self.buf = vec![0u8; OUTPUT_PIPE_BYTES as usize];
        }
        if pause {
            self.set_paused(true);
        }
    }

    fn close(&mut self, idx: usize) {
        if let Some(p) = self.pipes[idx].take() {
            let _ = self.epoll.delete(&p);
        }
    }

    /// The tree is gone: read the pipes to EOF, for at most the drain
    /// bound (only something outside the run, holding a passed fd, can keep
    /// a write end open). Returns the two streams, each complete or not.
    fn drain_rest(mut self, deadline: Instant) -> [StreamRecord; 2] {
        while self.pipes_open() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.turn(left).is_err() {
                break;
            }
        }
        if let Some(m) = self.mirror.take() {
            m.finish(deadline);
        }
        let [so, se] = self.captures;
        let [po, pe] = &self.pipes;
        [so.finish(po.is_none()), se.finish(pe.is_none())]
    }
}

/// Everything needed to run one governed child.
pub struct Plan<'a> {
    pub spec: SpawnSpec<'a>,
    pub limits: Limits,
    pub mirror: Mirror,
    pub signals: &'a mut SignalFd,
    pub cgroups: &'a RunCgroups,
    /// The durable `executing` record of this attempt: no spawn without it.
    pub committed: &'a governed_ledger::journal::Committed,
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
            if self.main.init.is_some() {
                let _ = end_init(self.main);
            } else {
                let _ = waitpid(self.main.pid, Some(WaitPidFlag::WNOHANG));
            }
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
    let [(out_r, out_w), (err_r, err_w)] = output_pipes()?;
    spec.stdout_fd = out_w.as_raw_fd();
    spec.stderr_fd = err_w.as_raw_fd();

    // The loop (and, with `--stream`, the mirror thread) exists before the
    // child does: once a fork storm fills an enclosing pids.max the runner
    // could no longer create a thread. If the spawn fails, returning drops
    // everything.
    let mut events = start_loop(mirror, [out_r, err_r], &limits)?;
    // Before the child exists: the kernel log's end, to find an OOM kill of
    // the main process among what it logs during the run.
    let kernel_log = cgroups
        .memory_limit()
        .is_some()
        .then(crate::process::oom::KernelLog::at_end);
    let started = SystemTime::now();
    let t0 = Instant::now();
    let (pid, pidfd, spawn_path, init) = match spawn_child(&spec)? {
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
            init,
        } => (pid, pidfd, path, init),
    };
    drop(out_w);
    drop(err_w);
    let main = &Main {
        pid: Pid::from_raw(pid),
        init: init.map(|status| Init {
            status,
            report: Cell::new(InitReport::Running),
            reaped: Cell::new(false),
        }),
    };
    let owner = TreeOwner {
        main,
        cgroups,
        confirmed: false,
    };
    // The exec has happened (the error pipe closed): read the credentials
    // back from the kernel while the process is most likely still there.
    // Under a PID namespace the program is the init's child, pid 2 there.
    let program = if main.init.is_some() {
        program_under_init(pid)
    } else {
        Some(pid)
    };
    let kernel_view = program.and_then(kernel_view_of);

    let deadline = t0 + Duration::from_millis(limits.wall_time_ms);
    events.watch(main, &pidfd, signals)?;
    let ending = wait_for_ending(&mut events, main, signals, deadline)?;
    if governed_fault::fail("supervision_error") {
        // An early return after the spawn: the tree's owner must clean up.
        return Err(SuperviseError::AfterStart(std::io::Error::other(
            "injected supervision failure",
        )));
    }
    stop_tree(ending, &mut events, main, signals, &limits);
    let main_exited_first = ending == Ending::MainExited;
    #[allow(unused_mut)]
    let mut cleanup = owner.cleanup(main_exited_first);
    if governed_fault::fail("cleanup_unconfirmed") {
        // As if a process had stayed past the confirm bound.
        cleanup.state = CleanupState::NotConfirmed;
    }
    let (exit_code, signal) = exit_status(main);

    // The tree is gone, so the pipes' write ends are closed unless something
    // outside the run holds one: never wait for it past the bound.
    events.unwatch(main, &pidfd, signals);
    let [stdout, stderr] = events.drain_rest(Instant::now() + DRAIN_BOUND);
    let ended = SystemTime::now();
    let output_bytes = stdout.bytes.saturating_add(stderr.bytes);
    let resources = run_resources(cgroups, &limits, (started, ended), output_bytes)?;
    let main_oom_killed =
        program.and_then(|p| oom_killed(kernel_log, signal, p, cgroups.memory_group_name()));
    Ok(RunResult::Ran(Box::new(Supervised {
        init_lost: main.init_lost(),
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

/// Whether the OOM killer killed the main process. Only a SIGKILL of the
/// main process asks who the OOM killer killed (`run` reads this for
/// nothing else): the log is not read otherwise.
fn oom_killed(
    kernel_log: Option<crate::process::oom::KernelLog>,
    signal: Option<i32>,
    pid: i32,
    group: Option<&str>,
) -> Option<bool> {
    kernel_log
        .filter(|_| signal == Some(libc::SIGKILL))
        .and_then(|k| k.oom_killed(pid, group))
}

/// The loop over the output pipes, and the mirror thread with `--stream`.
fn start_loop(
    mirror: Mirror,
    pipes: [OwnedFd; 2],
    limits: &Limits,
) -> Result<EventLoop, SuperviseError> {
    let mirror = MirrorThread::start(mirror).map_err(SuperviseError::NotStarted)?;
    EventLoop::new(
        pipes,
        limits.keep_output_bytes,
        limits.output_cap_bytes,
        mirror,
    )
    .map_err(SuperviseError::NotStarted)
}

/// The spawn (`sys::spawn`).
fn spawn_child(spec: &SpawnSpec<'_>) -> Result<Spawned, SuperviseError> {
    if governed_fault::fail("spawn_enosys") {
        // What clone3 answers under Docker's default seccomp profile.
        return Err(SuperviseError::NotStarted(
            std::io::Error::from_raw_os_error(libc::ENOSYS),
        ));
    }
    sys::spawn(spec).map_err(SuperviseError::NotStarted)
}

/// The credentials of `pid` as the kernel reports them (`/proc/PID/status`).
fn kernel_view_of(pid: i32) -> Option<KernelView> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| KernelView::from_status(&s))
}

/// The child's stdout and stderr pipes, (read end, write end) each, close
/// on exec.
fn output_pipes() -> Result<[(OwnedFd, OwnedFd); 2], SuperviseError> {
    let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
    let not_started = |e: nix::errno::Errno| SuperviseError::NotStarted(e.into());
    let (out_r, out_w) = nix::unistd::pipe2(cloexec).map_err(not_started)?;
    let (err_r, err_w) = nix::unistd::pipe2(cloexec).map_err(not_started)?;
    // Bigger pipes than the default 64 KiB: a child that prints a lot waits
    // on the loop less often (fewer wake-ups per byte drained). Best
    // effort: the pipe-size limits may refuse it.
    for w in [&out_w, &err_w] {
        let _ = nix::fcntl::fcntl(
            w.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(OUTPUT_PIPE_BYTES),
        );
    }
    Ok([(out_r, out_w), (err_r, err_w)])
}

/// The one place a stop request reaches the tree: a timeout sends
/// SIGTERM and waits the kill grace; a cancellation forwards the very
/// signal governed-exec received and waits the lease's cancel grace.
/// SIGKILL follows in `kill_all_and_confirm`.
fn stop_tree(
    ending: Ending,
    events: &mut EventLoop,
    main: &Main,
    signals: &mut SignalFd,
    limits: &Limits,
) {
    match ending {
        Ending::TimedOut => {
            terminate_tree(main.pid, Signal::SIGTERM);
            let grace = Duration::from_millis(limits.kill_grace_ms);
            wait_main_exit(events, main, signals, grace);
        }
        Ending::Cancelled(sig) => {
            let sig = Signal::try_from(sig).unwrap_or(Signal::SIGTERM);
            terminate_tree(main.pid, sig);
            let grace = Duration::from_millis(limits.cancel_grace_ms);
            wait_main_exit(events, main, signals, grace);
        }
        Ending::OutputCapped | Ending::MainExited => {}
    }
}

/// The main process's exit code or signal, reaped. Never blocks on a main
/// process that could not be confirmed gone. Under a PID namespace: the
/// program's, as its init reported it (the init is ended and reaped here);
/// not known if the init ended first, taking the program with it.
fn exit_status(main: &Main) -> (Option<i32>, Option<i32>) {
    let status = if let Some(init) = &main.init {
        main_has_exited(main);
        let _ = end_init(main);
        match init.report.get() {
            InitReport::Exited(raw) => decode_wait_status(main.pid, raw),
            // An init that ended first told nothing of how the program
            // ended: the kernel may have killed it with the namespace.
            _ => None,
        }
    } else if main_has_exited(main) {
        waitpid(main.pid, None).ok()
    } else {
        None
    };
    match status {
        Some(WaitStatus::Exited(_, code)) => (Some(code), None),
        Some(WaitStatus::Signaled(_, sig, _)) => (None, Some(sig as i32)),
        _ => (None, None),
    }
}

/// The run's resources. One read of the run's counters: every process is
/// gone (or given up on), and the groups are removed only when `cgroups`
/// is dropped.
fn run_resources(
    cgroups: &RunCgroups,
    limits: &Limits,
    (started, ended): (SystemTime, SystemTime),
    output_bytes: u64,
) -> nix::Result<Resources> {
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
    let wall_ms = ended
        .duration_since(started)
        .unwrap_or_default()
        .as_millis() as u64;
    Ok(accounting::resources(
        counters,
        &ru,
        limits,
        wall_ms,
        output_bytes,
    ))
}

/// Wait for the first of: main exit, deadline, output cap, a cancelling
/// signal; the output is drained meanwhile.
fn wait_for_ending(
    events: &mut EventLoop,
    main: &Main,
    signals: &mut SignalFd,
    deadline: Instant,
) -> std::io::Result<Ending> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Ending::TimedOut);
        }
        let ready = events.turn(left)?;
        if events.capped() {
            return Ok(Ending::OutputCapped);
        }
        if ready.signals {
            if let Some(sig) = read_signals(signals, main) {
                return Ok(Ending::Cancelled(sig));
            }
        }
        // A traced main process's stops arrive as SIGCHLD, not on its pidfd.
        if (ready.main || ready.signals) && main_has_exited(main) {
            return Ok(Ending::MainExited);
        }
    }
}

/// Drain the signalfd: reap stray zombies on SIGCHLD, return a cancelling
/// signal if one arrived.
fn read_signals(signals: &mut SignalFd, main: &Main) -> Option<i32> {
    let mut cancel = None;
    while let Ok(Some(info)) = signals.read_signal() {
        let sig = info.ssi_signo as i32;
        if sig == libc::SIGCHLD {
            // Once the main process has exited, cleanup reaps everything
            // next; a walk of /proc here would only repeat it.
            if !main_has_exited(main) {
                reap_strays(main.pid);
            }
        } else if cancel.is_none() {
            cancel = Some(sig);
        }
    }
    cancel
}

fn main_has_exited(main: &Main) -> bool {
    if let Some(init) = &main.init {
        if init.report.get() == InitReport::Running {
            // A pipe that cannot be read is an init that cannot report.
            init.report
                .set(init.status.poll().unwrap_or(InitReport::InitGone));
        }
        if init.report.get() != InitReport::Running {
            return true;
        }
    }
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    matches!(
        waitid(Id::Pid(main.pid), flags),
        Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
    )
}

/// The main process of the run: the program, or under a PID namespace
/// the namespace's init, whose child the program is.
struct Main {
    pid: Pid,
    init: Option<Init>,
}

/// governed-exec's init, PID 1 of the program's PID namespace
/// (`sys::init`): alive, and keeping every leftover alive and in the
/// runner's tree under it, until the runner ends it after cleanup.
struct Init {
    status: InitStatus,
    /// The first report other than `Running`, kept.
    report: Cell<InitReport>,
    /// Whether `end_init` has reaped it.
    reaped: Cell<bool>,
}

impl Main {
    /// The leftovers: every process other than the main process (and the
    /// init) seen alive during cleanup, which under a PID namespace begins
    /// while the init still holds the namespace open.
    fn leftovers(&self, seen_in_cleanup: &HashSet<i32>) -> u64 {
        seen_in_cleanup.len() as u64
    }

    /// Whether the init ended before it reported the program's end.
    fn init_lost(&self) -> bool {
        self.init
            .as_ref()
            .is_some_and(|i| i.report.get() == InitReport::InitGone)
    }

    /// Whether the run's cgroups may be killed as a whole now: not while an
    /// init waits to report a program that still runs (`cgroup.kill` would
    /// end the init first, and the kernel the namespace with it, unseen).
    fn group_kill_allowed(&self) -> bool {
        self.init.is_none() || main_has_exited(self)
    }
}

/// End the init (SIGKILL: it ignores nothing from the parent namespace)
/// and reap it, waiting a short bound for the kernel to empty its
/// namespace. Its own wait status, if it was reaped.
fn end_init(main: &Main) -> Option<WaitStatus> {
    // Reaped already (a second call): its pid may name another process.
    if main.init.as_ref().is_some_and(|i| i.reaped.get()) {
        return None;
    }
    let _ = nix::sys::signal::kill(main.pid, Signal::SIGKILL);
    let end = Instant::now() + CONFIRM_BOUND;
    loop {
        match waitpid(main.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) if Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return None,
            Ok(st) => {
                if let Some(i) = &main.init {
                    i.reaped.set(true);
                }
                return Some(st);
            }
        }
    }
}

/// A wait status as `wait4` gives it, for `pid`.
fn decode_wait_status(pid: Pid, raw: libc::c_int) -> Option<WaitStatus> {
    if libc::WIFEXITED(raw) {
        Some(WaitStatus::Exited(pid, libc::WEXITSTATUS(raw)))
    } else if libc::WIFSIGNALED(raw) {
        let sig = Signal::try_from(libc::WTERMSIG(raw)).ok()?;
        Some(WaitStatus::Signaled(pid, sig, libc::WCOREDUMP(raw)))
    } else {
        None
    }
}

/// The program under the init `init`: its child that is pid 2 of the
/// namespace (`NSpid` ends in 2). `None` once it has exited and been reaped.
fn program_under_init(init: i32) -> Option<i32> {
    children_of(init).ok()?.into_iter().find(|&c| {
        std::fs::read_to_string(format!("/proc/{c}/status")).is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|v| v.split_whitespace().last())
                .is_some_and(|p| p == sys::PROGRAM_NS_PID.to_string())
        })
    })
}

impl Supervised {
    /// Why the processes left behind could not all be counted: under a
    /// PID namespace whose teardown was not observed (CONTRACT §7: the
    /// kernel kills them as part of PID 1's exit, before any wait).
    pub(crate) fn leftovers_uncounted(&self) -> Option<String> {
        self.init_lost.then(|| {
            "under --pid-namespace governed-exec's init ended before the program did, and the kernel killed every process of the namespace with it: processes left behind could not be counted".to_string()
        })
    }
}

/// During the grace period: wait for the main process, or a second
/// cancelling signal, which cuts the grace short. The output is drained
/// meanwhile, so a child that prints on its way out is not stuck on a full
/// pipe.
fn wait_main_exit(events: &mut EventLoop, main: &Main, signals: &mut SignalFd, grace: Duration) {
    let end = Instant::now() + grace;
    while !main_has_exited(main) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let Ok(ready) = events.turn(left) else {
            continue;
        };
        if ready.signals && read_signals(signals, main).is_some() {
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
        let children = children_of(parent)?;
        if governed_fault::fail("slow_tree_walk") {
            // A tree that changes between two reads of the walk, made
            // certain: whatever dies now hands its children to a parent
            // whose list may already have been read (ours, first).
            std::thread::sleep(Duration::from_millis(100));
        }
        for pid in children {
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
        // An init is not killed before it has reported the program's end:
        // the walk below kills the program, and the init reaps it.
        if main.init.is_none() && !main_has_exited(main) {
            let _ = killpg(pid, Signal::SIGKILL);
        }
        // Fast path: while the v2 group itself says it is populated, the run
        // is not gone; kill through it and reap without walking /proc (the
        // first pass has already counted everything alive).
        if !first
            && main.group_kill_allowed()
            && matches!(cgroups.populated(), Some(Ok(true)))
            && Instant::now() < end
        {
            cgroups.kill();
            reap_strays(pid);
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
            continue;
        }
        first = false;
        // Whether main had exited before the walk began. A process that
        // dies during the walk hands its children to us after our own list
        // was read, so a walk that finds nothing proves the tree empty only
        // if main was already a zombie when it started (then its children
        // were ours before we read our list, and nothing else was alive to
        // fork or die). Read after the walk, a main process dying in the
        // middle of it would hide its daemon.
        let main_done = main_has_exited(main);
        // Whether some witness could not be read in this pass: then nothing
        // is observed gone, whatever the others say.
        let (mut present, mut blind) = kill_and_walk(main, cgroups, &mut seen_alive);
        let (members, mut populated, cgroups_blind) = cgroup_witness(pid, cgroups);
        if main.init.is_some() {
            // The init is a member of the run's groups until it is ended,
            // after this confirmation: it is not what keeps them populated.
            populated &= !members.is_empty();
        }
        blind |= cgroups_blind;
        let known: HashSet<i32> = present.iter().copied().collect();
        present.extend(members.into_iter().filter(|m| !known.contains(m)));
        let leftovers = || {
            if count_as_leftovers {
                main.leftovers(&seen_alive)
            } else {
                0
            }
        };
        if present.is_empty() && main_done && !populated && !blind {
            return cleanup_record(CleanupState::Gone, &mechanism, leftovers(), vec![]);
        }
        if Instant::now() >= end {
            if !main_done {
                present.push(pid.as_raw());
            }
            return cleanup_record(CleanupState::NotConfirmed, &mechanism, leftovers(), present);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// One pass of the kill: the run's cgroup members and the process tree
/// (main aside) are killed, the ones alive go into `seen_alive`, the direct
/// children found are reaped. Returns what the tree walk found present (not
/// main), and whether a witness could not be read.
fn kill_and_walk(
    main: &Main,
    cgroups: &RunCgroups,
    seen_alive: &mut HashSet<i32>,
) -> (Vec<i32>, bool) {
    let pid = main.pid;
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
    if main.group_kill_allowed() {
        cgroups.kill();
        if !cgroups.has_kill() {
            cgroups.kill_members();
        }
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
    // Reap the direct children just found (not main): the walk above
    // is the list a second walk would read.
    let me = std::process::id() as i32;
    for node in tree
        .iter()
        .filter(|n| n.ppid == me && n.pid != pid.as_raw())
    {
        let _ = waitpid(Pid::from_raw(node.pid), Some(WaitPidFlag::WNOHANG));
    }
    (present, blind)
}

/// The cgroups are a second, independent witness: a process that is not in
/// our tree but still in the run's cgroup is not gone. Returns the members
/// (not main), whether the v2 group is populated, and whether a witness could
/// not be read.
fn cgroup_witness(pid: Pid, cgroups: &RunCgroups) -> (Vec<i32>, bool, bool) {
    let mut blind = false;
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
    (members, populated, blind)
}

/// The cleanup's record: no witness named here, evadable until `run` says
/// otherwise.
fn cleanup_record(
    state: CleanupState,
    mechanism: &str,
    leftover_processes_killed: u64,
    unconfirmed_pids: Vec<i32>,
) -> Cleanup {
    Cleanup {
        state,
        mechanism: mechanism.to_string(),
        leftover_processes_killed,
        unconfirmed_pids,
        witness: vec![],
        evadable: true,
        evadable_why: String::new(),
    }
}
