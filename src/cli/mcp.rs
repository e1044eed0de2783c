//! `governed-exec mcp`: the `local_process` tool over the Model Context
//! Protocol (stdio: newline-delimited JSON-RPC 2.0), CONTRACT §12.
//!
//! Why each call is a `governed-exec run --request -` process of its own:
//! a run is the unit the pipeline was built around — its own signalfd,
//! subreaper, non-dumpable key holder and exit code — so a call gets exactly
//! `run`'s guarantees (the use spent before the fork, the bounded
//! lifecycle, the signed receipt), concurrent calls overspend nothing for
//! the same reason concurrent `run`s do, and cancelling a call is sending
//! that process the SIGTERM a CI runner would.
//!
//! Why the protocol is served by hand, not by an SDK: the server's whole
//! surface is five methods and one notification, and what it must promise
//! about hostile input is about framing — a bounded line, `-32700` for a
//! line that is not JSON, and the next line served — which is this
//! module's own loop to keep. The official Python SDK's client is run
//! against it in the test suite, so the protocol is checked by a second,
//! independent reading.
//!
//! What the channel cannot do: the configuration is the command line of
//! whoever started the server; a call carries the four fields of a request
//! and nothing else. Nothing here approves, denies, resolves or revokes.
//! A request no lease answers is queued for a person by the run itself
//! (`run::queue`), with this server's `--principal`.

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::cli::args::McpCmd;
use governed_evidence::{escape, receipt, view};
use governed_model::pending::ToolResult;
use governed_model::{OutcomeClass, Profile};

/// The protocol revisions served, newest first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The longest message read; a longer line is answered `-32600` and dropped.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Calls admitted at once beyond the running ones (waiting for a slot);
/// past that a call is answered at once as a tool error.
const MAX_WAITING: usize = 256;
/// How often a running call is looked at without a pidfd (exit,
/// cancellation).
const POLL: Duration = Duration::from_millis(10);
/// How often a running call's cancellation is looked at while its exit is
/// waited for on a pidfd.
const CANCEL_CHECK_MS: u8 = 20;
/// The most progress notifications per second per call.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// The most bytes kept of a run process's stdout (a receipt that could not
/// be written to its file) and stderr (its diagnostics).
const MAX_CHILD_STDOUT: u64 = 64 << 20;
const MAX_CHILD_STDERR: u64 = 64 << 10;

const TOOL_NAME: &str = "local_process";

const TOOL_DESCRIPTION: &str = "Run one pre-approved local process and report how it ended. \
This is not a shell: `executable` is a program name or path, and each `argv` element is passed \
to it literally (no pipes, redirections, globs, `;`, `$()` or quoting). Only a request a person \
approved beforehand runs — exactly this executable, argv, cwd and profile. Anything else is \
refused with needs_human true and queued for a person's approval (pending_id): wait and ask \
again later, or ask for a different, approved command. `cwd` is relative to the workspace; \
`profile` names the tier of limits (short, standard, long). An exit code of 0 is not proof of \
success: the signed receipt (receipt_path) is the record.";

const INSTRUCTIONS: &str = "This server runs only commands a person approved beforehand, one \
`local_process` call each, and returns the outcome with a signed receipt. It is not a shell. \
A refused request is queued for a person; do not retry it in a loop.";

/// What the server was started with: the whole policy.
struct Config {
    exe: PathBuf,
    goal: PathBuf,
    manifest: PathBuf,
    trust: PathBuf,
    workspace: PathBuf,
    receipts: PathBuf,
    /// The receipts directory, opened once: every receipt is written in
    /// it, whatever its path names later.
    receipts_dir: std::fs::File,
    principal: String,
    state_dir: Option<PathBuf>,
    key: Option<PathBuf>,
    max_running: usize,
}

/// A call in flight: cancelled by the client or by the server's end.
struct Call {
    cancel: Arc<AtomicBool>,
    /// The client cancelled it: no response is sent (the protocol's rule).
    by_client: Arc<AtomicBool>,
}

struct Server {
    cfg: Config,
    out: Mutex<std::io::Stdout>,
    /// The client's stdout is gone: nothing more can be said.
    out_gone: AtomicBool,
    calls: Mutex<HashMap<String, Call>>,
    running: (Mutex<usize>, Condvar),
    in_flight: AtomicUsize,
    ending: AtomicBool,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// Why the server could not start: a usage error naming the flag.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("{flag} {path}: {why}")]
    Flag {
        flag: &'static str,
        path: String,
        why: String,
    },
    #[error("cannot find governed-exec's own executable to run calls with: {0}")]
    OwnExe(std::io::Error),
    #[error("cannot read signals: {0}")]
    Signals(nix::Error),
}

fn flag_err(flag: &'static str, path: &Path, why: impl std::fmt::Display) -> McpError {
    McpError::Flag {
        flag,
        path: escape::visible(&path.display().to_string()),
        why: why.to_string(),
    }
}

impl Config {
    /// Check every path the calls will use before serving anything: a
    /// server that would refuse every call says so at once, exit 2.
    fn from_cmd(c: McpCmd) -> Result<Config, McpError> {
        governed_evidence::goal_file::load(&c.goal).map_err(|e| flag_err("--goal", &c.goal, e))?;
        governed_evidence::sign::load_verifying_key(&c.trust)
            .map_err(|e| flag_err("--trust", &c.trust, e))?;
        let workspace = std::fs::canonicalize(&c.workspace)
            .map_err(|e| flag_err("--workspace", &c.workspace, e))?;
        if !workspace.is_dir() {
            return Err(flag_err("--workspace", &c.workspace, "not a directory"));
        }
        let parent = match c.manifest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let manifest = std::fs::canonicalize(&parent)
            .map_err(|e| flag_err("--manifest", &c.manifest, format!("its directory: {e}")))?
            .join(c.manifest.file_name().unwrap_or_default());
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&c.receipts)
                .map_err(|e| flag_err("--receipts", &c.receipts, e))?;
        }
        let receipts = std::fs::canonicalize(&c.receipts)
            .map_err(|e| flag_err("--receipts", &c.receipts, e))?;
        // The agent's commands write in the workspace: a receipts directory
        // there could be swapped, emptied or filled by them.
        if receipts.starts_with(&workspace) {
            return Err(flag_err(
                "--receipts",
                &c.receipts,
                format!(
                    "inside the workspace {}, where the agent's commands write; give a directory outside it",
                    workspace.display()
                ),
            ));
        }
        let receipts_dir = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&receipts)
                .map_err(|e| flag_err("--receipts", &c.receipts, e))?
        };
        let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
        Ok(Config {
            exe: std::env::current_exe().map_err(McpError::OwnExe)?,
            goal: absolute(c.goal),
            manifest,
            trust: absolute(c.trust),
            workspace,
            receipts,
            receipts_dir,
            principal: c.principal,
            state_dir: c.state_dir.map(absolute),
            key: c.key.map(absolute),
            max_running: usize::from(c.max_concurrent),
        })
    }
}

/// Serve until stdin closes (or a TERM/INT/HUP arrives): then cancel every
/// running call, wait for their receipts, exit 0.
pub fn main(cmd: McpCmd, handled: &SigSet) -> Result<i32, McpError> {
    let cfg = Config::from_cmd(cmd)?;
    let signals =
        SignalFd::with_flags(handled, SfdFlags::SFD_CLOEXEC).map_err(McpError::Signals)?;
    let server = Arc::new(Server {
        cfg,
        out: Mutex::new(std::io::stdout()),
        out_gone: AtomicBool::new(false),
        calls: Mutex::new(HashMap::new()),
        running: (Mutex::new(0), Condvar::new()),
        in_flight: AtomicUsize::new(0),
        ending: AtomicBool::new(false),
        workers: Mutex::new(Vec::new()),
    });
    eprintln!(
        "governed-exec mcp: serving {TOOL_NAME} for principal {} (goal {}, workspace {})",
        escape::quoted(&server.cfg.principal),
        escape::visible(&server.cfg.goal.display().to_string()),
        escape::visible(&server.cfg.workspace.display().to_string())
    );
    {
        let server = Arc::clone(&server);
        std::thread::spawn(move || loop {
            // SIGCHLD is in the handled set too (the runs' ends): read and
            // let go; only a cancelling signal ends the server.
            match signals.read_signal() {
                Ok(Some(info))
                    if [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP]
                        .iter()
                        .any(|s| *s as u32 == info.ssi_signo) =>
                {
                    eprintln!(
                        "governed-exec mcp: signal {}: cancelling every running call",
                        info.ssi_signo
                    );
                    server.end();
                    std::process::exit(0);
                }
                Ok(_) => {}
                Err(_) => return,
            }
        });
    }
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    loop {
        match read_message(&mut input) {
            Ok(Some(Line::Message(bytes))) => server.handle(&bytes),
            Ok(Some(Line::TooLong(n))) => server.send(&error_response(
                Value::Null,
                -32600,
                &format!(
                    "message of {n}+ bytes is over the {MAX_MESSAGE_BYTES}-byte bound; dropped"
                ),
            )),
            Ok(None) => break,
            Err(e) => {
                eprintln!("governed-exec mcp: reading stdin: {e}");
                break;
            }
        }
    }
    server.end();
    Ok(0)
}

enum Line {
    Message(Vec<u8>),
    /// A line past the bound (its length so far), read to its end and
    /// dropped.
    TooLong(usize),
}

/// One newline-terminated message, at most [`MAX_MESSAGE_BYTES`]; `None`
/// at the end of input.
fn read_message(r: &mut impl BufRead) -> std::io::Result<Option<Line>> {
    let mut buf = Vec::new();
    let mut over = 0usize;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            if over > 0 {
                return Ok(Some(Line::TooLong(over)));
            }
            return Ok((!buf.is_empty()).then_some(Line::Message(buf)));
        }
        let (part, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if over > 0 || buf.len() + part.len() > MAX_MESSAGE_BYTES {
            over = over.max(buf.len()) + part.len();
            buf = Vec::new();
        } else {
            buf.extend_from_slice(part);
        }
        let used = done.unwrap_or(chunk.len());
        r.consume(used);
        if done.is_some() {
            if over > 0 {
                return Ok(Some(Line::TooLong(over)));
            }
            return Ok(Some(Line::Message(buf)));
        }
    }
}

fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn id_key(id: &Value) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

impl Server {
    /// Write one protocol message; stdout carries nothing else.
    fn send(&self, msg: &Value) {
        if self.out_gone.load(Ordering::SeqCst) {
            return;
        }
        let mut line = serde_json::to_vec(msg).unwrap_or_default();
        line.push(b'\n');
        let mut out = match self.out.lock() {
            Ok(o) => o,
            Err(p) => p.into_inner(),
        };
        if out.write_all(&line).and_then(|()| out.flush()).is_err() {
            self.out_gone.store(true, Ordering::SeqCst);
        }
    }

    fn handle(self: &Arc<Self>, bytes: &[u8]) {
        let msg: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                // A blank line between messages is not a message.
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    return;
                }
                return self.send(&error_response(
                    Value::Null,
                    -32700,
                    &format!("parse error: {e}"),
                ));
            }
        };
        if msg.is_array() {
            return self.send(&error_response(
                Value::Null,
                -32600,
                "batches are not served: send one request per line",
            ));
        }
        let id = msg.get("id").cloned();
        let valid_id = id
            .as_ref()
            .is_none_or(|i| i.is_string() || i.is_i64() || i.is_u64());
        let method = msg.get("method").and_then(Value::as_str);
        if msg.get("jsonrpc") != Some(&json!("2.0")) || !valid_id {
            return self.send(&error_response(
                id.filter(|_| valid_id).unwrap_or(Value::Null),
                -32600,
                "invalid request: a JSON-RPC 2.0 object with \"jsonrpc\": \"2.0\" and a string or integer id",
            ));
        }
        let Some(method) = method else {
            // A response to a request of ours (there are none) or junk with
            // an id: an answer only where an answer is asked for.
            if msg.get("result").is_none() && msg.get("error").is_none() {
                if let Some(id) = id {
                    self.send(&error_response(id, -32600, "invalid request: no method"));
                }
            }
            return;
        };
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = id else {
            return self.notification(method, &params);
        };
        match method {
            "initialize" => {
                let asked = params.get("protocolVersion").and_then(Value::as_str);
                let version = asked
                    .filter(|v| PROTOCOL_VERSIONS.contains(v))
                    .unwrap_or(PROTOCOL_VERSIONS[0]);
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": {"name": "governed-exec", "version": env!("CARGO_PKG_VERSION")},
                    "instructions": INSTRUCTIONS,
                }}));
            }
            "ping" => self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {}})),
            "tools/list" => {
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [tool()]}}))
            }
            "tools/call" => self.tools_call(id, &params),
            _ => self.send(&error_response(
                id,
                -32601,
                &format!("method not found: {}", escape::quoted(method)),
            )),
        }
    }

    fn notification(&self, method: &str, params: &Value) {
        if method == "notifications/cancelled" {
            let Some(rid) = params.get("requestId") else {
                return;
            };
            if let Ok(calls) = self.calls.lock() {
                if let Some(c) = calls.get(&id_key(rid)) {
                    c.by_client.store(true, Ordering::SeqCst);
                    c.cancel.store(true, Ordering::SeqCst);
                }
            }
        }
        // Every other notification (initialized, roots, …) asks nothing.
    }

    fn tools_call(self: &Arc<Self>, id: Value, params: &Value) {
        let name = params.get("name").and_then(Value::as_str);
        if name != Some(TOOL_NAME) {
            return self.send(&error_response(
                id,
                -32602,
                &format!(
                    "unknown tool {}: the only tool is {TOOL_NAME}",
                    escape::quoted(name.unwrap_or("(none)"))
                ),
            ));
        }
        let request = match request_of(params.get("arguments")) {
            Ok(r) => r,
            Err(why) => {
                return self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {
                    "content": [{"type": "text", "text": format!("refused before anything ran: {why}")}],
                    "isError": true,
                }}))
            }
        };
        if self.ending.load(Ordering::SeqCst) {
            return;
        }
        if self.in_flight.load(Ordering::SeqCst) >= self.cfg.max_running + MAX_WAITING {
            return self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": "refused before anything ran: too many calls in flight; wait for one to end"}],
                "isError": true,
            }}));
        }
        let key = id_key(&id);
        let call = Call {
            cancel: Arc::new(AtomicBool::new(false)),
            by_client: Arc::new(AtomicBool::new(false)),
        };
        let (cancel, by_client) = (Arc::clone(&call.cancel), Arc::clone(&call.by_client));
        {
            let Ok(mut calls) = self.calls.lock() else {
                return;
            };
            if calls.contains_key(&key) {
                drop(calls);
                return self.send(&error_response(
                    id,
                    -32600,
                    "invalid request: this id is already in use by a running call",
                ));
            }
            calls.insert(key.clone(), call);
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let progress = params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let server = Arc::clone(self);
        let worker = std::thread::spawn(move || {
            let result = server.call(&request, &cancel, progress);
            if let Ok(mut calls) = server.calls.lock() {
                calls.remove(&key);
            }
            server.in_flight.fetch_sub(1, Ordering::SeqCst);
            if !by_client.load(Ordering::SeqCst) {
                server.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
            }
        });
        if let Ok(mut w) = self.workers.lock() {
            w.retain(|h| !h.is_finished());
            w.push(worker);
        }
    }

    /// One call, start to end: wait for a slot, run, read the receipt.
    fn call(&self, request: &Value, cancel: &AtomicBool, progress: Option<Value>) -> Value {
        {
            let (lock, cv) = &self.running;
            let mut n = match lock.lock() {
                Ok(n) => n,
                Err(p) => p.into_inner(),
            };
            while *n >= self.cfg.max_running {
                if cancel.load(Ordering::SeqCst) {
                    return tool_refusal("cancelled before it started: nothing ran");
                }
                n = match cv.wait_timeout(n, Duration::from_millis(50)) {
                    Ok((n, _)) => n,
                    Err(p) => p.into_inner().0,
                };
            }
            *n += 1;
        }
        let result = self.run_one(request, cancel, progress);
        let (lock, cv) = &self.running;
        if let Ok(mut n) = lock.lock() {
            *n -= 1;
        }
        cv.notify_one();
        result
    }

    fn run_one(&self, request: &Value, cancel: &AtomicBool, progress: Option<Value>) -> Value {
        let c = &self.cfg;
        let call_id = governed_runner::run::new_id("call");
        let mut cmd = self.run_command();
        let mut child = match cmd.spawn() {
            Ok(ch) => ch,
            Err(e) => {
                return tool_refusal(&format!(
                    "could not start governed-exec run: {e}; nothing ran"
                ))
            }
        };
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let out = std::thread::spawn(move || drain(out, MAX_CHILD_STDOUT));
        let err = std::thread::spawn(move || drain(err, MAX_CHILD_STDERR));
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&serde_json::to_vec(request).unwrap_or_default());
        }
        let status = self.watch(&mut child, cancel, progress);
        let printed = out.join().unwrap_or_default();
        let diagnostics = err.join().unwrap_or_default();
        for line in String::from_utf8_lossy(&diagnostics).lines() {
            eprintln!("governed-exec mcp: {call_id}: {}", escape::visible(line));
        }
        let stmt = serde_json::from_slice::<governed_model::Envelope>(&printed)
            .ok()
            .and_then(|env| receipt::decode_statement(&env).ok());
        let Some(stmt) = stmt else {
            return no_receipt(status);
        };
        let p = &stmt.predicate;
        let name = if safe_id(&p.receipt_id) {
            p.receipt_id.clone()
        } else {
            call_id
        };
        let file = format!("{name}.json");
        let shown = c.receipts.join(&file);
        let written = governed_sys::safe_io::WriteTarget::in_dir(
            &c.receipts_dir,
            std::ffi::OsStr::new(&file),
            shown.clone(),
        )
        .and_then(|t| t.create_new(&printed, 0o644));
        let receipt_path = match written {
            Ok(()) => Some(shown.display().to_string()),
            Err(e) => {
                eprintln!(
                    "governed-exec mcp: cannot write receipt {}: {e}",
                    escape::visible(&shown.display().to_string())
                );
                None
            }
        };
        let o = &p.outcome;
        let r = ToolResult {
            outcome: o.class,
            exit_code: o.exit_code,
            signal: o.signal,
            needs_human: o.needs_human,
            reason: o.reason,
            message: o.message.as_deref().map(escape::visible),
            pending_id: o.pending_id.clone(),
            receipt_id: Some(p.receipt_id.clone()),
            receipt_path,
            stdout: p.streams.stdout.text.clone(),
            stderr: p.streams.stderr.text.clone(),
        };
        let text = serde_json::to_value(&stmt)
            .map(|v| view::receipt_text(&v))
            .unwrap_or_default();
        tool_result(r, text)
    }

    /// `governed-exec run --request -` as every call runs it: the server's
    /// configuration, the call's principal, the receipt on stdout (it is
    /// written here, in the directory opened at start, under its own id).
    fn run_command(&self) -> Command {
        let c = &self.cfg;
        let mut cmd = Command::new(&c.exe);
        cmd.arg("run")
            .arg("--goal")
            .arg(&c.goal)
            .arg("--manifest")
            .arg(&c.manifest)
            .arg("--trust")
            .arg(&c.trust)
            .arg("--workspace")
            .arg(&c.workspace)
            .arg("--principal")
            .arg(&c.principal)
            .arg("--quiet")
            .arg("--request")
            .arg("-")
            .current_dir(&c.workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(s) = &c.state_dir {
            cmd.arg("--state-dir").arg(s);
        }
        if let Some(k) = &c.key {
            cmd.arg("--key").arg(k);
        }
        cmd
    }

    /// Wait for the run process, forwarding a cancellation as SIGTERM (the
    /// run forwards it, waits the lease's cancel grace, kills, confirms
    /// every process gone and writes its receipt) and sending progress.
    fn watch(
        &self,
        child: &mut Child,
        cancel: &AtomicBool,
        progress: Option<Value>,
    ) -> std::process::ExitStatus {
        let started = Instant::now();
        let mut told = started;
        let mut termed = false;
        // A pidfd turns readable when the run process exits, so its end is
        // seen at once; it also signals that process and no other, whatever
        // happens to its pid. Without one (an old kernel), the pid is
        // polled; it stays the run's until this thread reaps it.
        let pidfd = i32::try_from(child.id())
            .ok()
            .and_then(|pid| governed_sys::pidfd_open(pid).ok());
        loop {
            match child.try_wait() {
                Ok(Some(s)) => return s,
                Ok(None) => {}
                Err(_) => {
                    if let Ok(s) = child.wait() {
                        return s;
                    }
                }
            }
            if !termed && cancel.load(Ordering::SeqCst) {
                match &pidfd {
                    Some(fd) => {
                        let _ = governed_sys::pidfd_send_signal(fd, libc::SIGTERM);
                    }
                    None => {
                        if let Ok(pid) = i32::try_from(child.id()) {
                            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
                        }
                    }
                }
                termed = true;
            }
            if let Some(token) = &progress {
                if told.elapsed() >= PROGRESS_EVERY && !termed {
                    told = Instant::now();
                    let secs = started.elapsed().as_secs_f64();
                    self.send(
                        &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": secs,
                                   "message": format!("running for {secs:.0} s")}}),
                    );
                }
            }
            match &pidfd {
                Some(fd) => {
                    use std::os::fd::AsFd;
                    let mut ready = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut ready, PollTimeout::from(CANCEL_CHECK_MS));
                }
                None => std::thread::sleep(POLL),
            }
        }
    }

    /// Cancel every call and wait for each to end with its receipt.
    fn end(&self) {
        self.ending.store(true, Ordering::SeqCst);
        if let Ok(calls) = self.calls.lock() {
            for c in calls.values() {
                c.cancel.store(true, Ordering::SeqCst);
            }
        }
        loop {
            let next = self.workers.lock().ok().and_then(|mut w| w.pop());
            match next {
                Some(h) => {
                    let _ = h.join();
                }
                None => break,
            }
        }
    }
}

/// The result of a run process that ended without a readable receipt.
fn no_receipt(status: std::process::ExitStatus) -> Value {
    tool_result(
        ToolResult {
            outcome: OutcomeClass::Unknown,
            exit_code: None,
            signal: None,
            needs_human: true,
            reason: None,
            message: Some(format!(
                "governed-exec run ended ({status}) without a readable receipt; `governed-exec journal list` shows the attempt"
            )),
            pending_id: None,
            receipt_id: None,
            receipt_path: None,
            stdout: String::new(),
            stderr: String::new(),
        },
        "the run ended without a receipt".into(),
    )
}

/// A receipt id fit to be a file name.
fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn drain(from: Option<impl Read>, max: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(r) = from {
        let mut r = r;
        let _ = (&mut r).take(max).read_to_end(&mut buf);
        // Past the bound: read on so the writer never blocks on a full pipe.
        let _ = std::io::copy(&mut r, &mut std::io::sink());
    }
    buf
}

/// The request of a call: exactly the four fields, each of its type.
/// The error names the field.
fn request_of(args: Option<&Value>) -> Result<Value, String> {
    let Some(Value::Object(m)) = args else {
        return Err("`arguments` must be an object with executable, argv, cwd and profile".into());
    };
    const FIELDS: [&str; 4] = ["executable", "argv", "cwd", "profile"];
    if let Some(k) = m.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "unknown field {}: a request has exactly executable, argv, cwd and profile",
            escape::quoted(k)
        ));
    }
    for f in FIELDS {
        if !m.contains_key(f) {
            return Err(format!("missing field `{f}`"));
        }
    }
    for f in ["executable", "cwd"] {
        if !m[f].is_string() {
            return Err(format!("field `{f}` must be a string"));
        }
    }
    match &m["argv"] {
        Value::Array(a) => {
            if let Some(i) = a.iter().position(|v| !v.is_string()) {
                return Err(format!(
                    "field `argv` must be an array of strings; element {i} is not a string"
                ));
            }
        }
        _ => return Err("field `argv` must be an array of strings".into()),
    }
    let names: Vec<&str> = Profile::ALL.iter().map(|p| p.name()).collect();
    if !m["profile"].as_str().is_some_and(|p| names.contains(&p)) {
        return Err(format!(
            "field `profile` must be one of {}",
            names.join(", ")
        ));
    }
    Ok(Value::Object(m.clone()))
}

fn tool_refusal(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// A call's result: the structured outcome, the human view, and `isError`
/// unless the run exited by itself with 0.
fn tool_result(r: ToolResult, text: String) -> Value {
    let ok = r.outcome == OutcomeClass::Exited && r.exit_code == Some(0);
    let mut shown = text;
    if let Some(id) = &r.pending_id {
        shown.push_str(&format!("pending approval: {id}\n"));
    }
    json!({
        "content": [{"type": "text", "text": shown}],
        "structuredContent": r,
        "isError": !ok,
    })
}

/// The one tool: its input schema is the Request, closed.
fn tool() -> Value {
    let profiles: Vec<&str> = Profile::ALL.iter().map(|p| p.name()).collect();
    let nullable = |t: &str| json!({"type": [t, "null"]});
    json!({
        "name": TOOL_NAME,
        "title": "Run one pre-approved local process",
        "description": TOOL_DESCRIPTION,
        "inputSchema": {
            "type": "object",
            "properties": {
                "executable": {"type": "string", "description": "A program name (looked up in a fixed system PATH) or a path; never a shell command line."},
                "argv": {"type": "array", "items": {"type": "string"}, "description": "The arguments after the program name, each passed literally."},
                "cwd": {"type": "string", "description": "The working directory, relative to the workspace (\".\" for the workspace itself)."},
                "profile": {"type": "string", "enum": profiles, "description": "The tier of limits the run was approved under."},
            },
            "required": ["executable", "argv", "cwd", "profile"],
            "additionalProperties": false,
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "outcome": {"type": "string"},
                "exit_code": nullable("integer"),
                "signal": nullable("integer"),
                "needs_human": {"type": "boolean"},
                "reason": nullable("string"),
                "message": nullable("string"),
                "pending_id": nullable("string"),
                "receipt_id": nullable("string"),
                "receipt_path": nullable("string"),
                "stdout": {"type": "string"},
                "stderr": {"type": "string"},
            },
            "required": ["outcome", "exit_code", "signal", "needs_human", "reason", "message",
                         "pending_id", "receipt_id", "receipt_path", "stdout", "stderr"],
            "additionalProperties": false,
        },
        "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": false},
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn lines(input: &[u8]) -> Vec<Result<Vec<u8>, usize>> {
        let mut r = std::io::BufReader::with_capacity(7, input);
        let mut out = Vec::new();
        while let Some(l) = read_message(&mut r).unwrap() {
            out.push(match l {
                Line::Message(m) => Ok(m),
                Line::TooLong(n) => Err(n),
            });
        }
        out
    }

    #[test]
    fn messages_are_lines_and_a_line_past_the_bound_is_dropped_whole() {
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_BYTES + 1));
        input.extend(b"\n{\"b\":2}\nlast");
        let got = lines(&input);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], Ok(b"{\"a\":1}".to_vec()));
        assert!(matches!(got[1], Err(n) if n > MAX_MESSAGE_BYTES));
        assert_eq!(got[2], Ok(b"{\"b\":2}".to_vec()));
        assert_eq!(got[3], Ok(b"last".to_vec()));
    }

    #[test]
    fn a_line_of_exactly_the_bound_is_read() {
        let mut input = vec![b'y'; MAX_MESSAGE_BYTES];
        input.push(b'\n');
        assert_eq!(lines(&input), vec![Ok(vec![b'y'; MAX_MESSAGE_BYTES])]);
    }

    #[test]
    fn the_request_is_closed_and_each_error_names_its_field() {
        let ok = json!({"executable": "true", "argv": [], "cwd": ".", "profile": "short"});
        assert!(request_of(Some(&ok)).is_ok());
        let cases = [
            (
                json!({"executable": "true", "argv": [], "cwd": ".", "profile": "short", "env": {}}),
                "\"env\"",
            ),
            (
                json!({"executable": "true", "argv": [], "cwd": "."}),
                "`profile`",
            ),
            (
                json!({"executable": 1, "argv": [], "cwd": ".", "profile": "short"}),
                "`executable`",
            ),
            (
                json!({"executable": "t", "argv": "a b", "cwd": ".", "profile": "short"}),
                "`argv`",
            ),
            (
                json!({"executable": "t", "argv": ["a", 2], "cwd": ".", "profile": "short"}),
                "element 1",
            ),
            (
                json!({"executable": "t", "argv": [], "cwd": null, "profile": "short"}),
                "`cwd`",
            ),
            (
                json!({"executable": "t", "argv": [], "cwd": ".", "profile": "huge"}),
                "`profile`",
            ),
            (json!(["t"]), "`arguments`"),
        ];
        for (args, names) in cases {
            let e = request_of(Some(&args)).unwrap_err();
            assert!(e.contains(names), "{args}: {e}");
        }
        assert!(request_of(None).unwrap_err().contains("`arguments`"));
    }

    #[test]
    fn only_an_exit_of_zero_is_not_an_error() {
        let r = |class, code| ToolResult {
            outcome: class,
            exit_code: code,
            signal: None,
            needs_human: false,
            reason: None,
            message: None,
            pending_id: None,
            receipt_id: None,
            receipt_path: None,
            stdout: String::new(),
            stderr: String::new(),
        };
        assert_eq!(
            tool_result(r(OutcomeClass::Exited, Some(0)), String::new())["isError"],
            false
        );
        assert_eq!(
            tool_result(r(OutcomeClass::Exited, Some(1)), String::new())["isError"],
            true
        );
        assert_eq!(
            tool_result(r(OutcomeClass::TimedOutReaped, None), String::new())["isError"],
            true
        );
        assert_eq!(
            tool_result(r(OutcomeClass::KnownNotExecuted, None), String::new())["isError"],
            true
        );
    }
}
