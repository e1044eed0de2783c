//! A small builder so each test reads as a sentence.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use base64::Engine;
use serde_json::Value;

/// Say SKIP and why, loudly: written straight to fd 2, past the test
/// harness's output capture, so it shows even when the test passes.
///
/// `GOVERNED_EXEC_REQUIRE` turns a skip into a failure, so a green run
/// means those tests ran: `all` fails every skip; a comma list of words
/// (`root,docker,postgres,python,git`) fails each skip whose reason names
/// one of them. `.ci/run` sets `all` for the host suite, which runs as root
/// with every dependency installed.
macro_rules! skip {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let why = format!($($arg)*);
        if crate::support::skip_is_required(&why) {
            panic!("GOVERNED_EXEC_REQUIRE forbids this skip: {why}");
        }
        let _ = writeln!(std::io::stderr(), "\n*** SKIP {why} ***");
    }};
}

/// Whether `GOVERNED_EXEC_REQUIRE` forbids a skip for this reason.
pub fn skip_is_required(why: &str) -> bool {
    let Ok(required) = std::env::var("GOVERNED_EXEC_REQUIRE") else {
        return false;
    };
    let why = why.to_lowercase();
    required
        .split(',')
        .map(|w| w.trim().to_lowercase())
        .filter(|w| !w.is_empty())
        .any(|w| w == "all" || why.contains(&w))
}

pub const BIN: &str = env!("CARGO_BIN_EXE_governed-exec");

pub struct Env {
    pub dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub goal: PathBuf,
    pub manifest: PathBuf,
    pub key: PathBuf,
    pub trust: PathBuf,
    pub state: PathBuf,
}

pub struct Run {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub statement: Value,
}

impl Run {
    pub fn outcome(&self) -> &Value {
        &self.statement["predicate"]["outcome"]
    }
    pub fn class(&self) -> &str {
        self.outcome()["class"].as_str().unwrap_or("")
    }
    pub fn reason(&self) -> &str {
        self.outcome()["reason"].as_str().unwrap_or("")
    }
    pub fn stdout_text(&self) -> &str {
        self.statement["predicate"]["streams"]["stdout"]["text"]
            .as_str()
            .unwrap_or("")
    }
    pub fn predicate(&self) -> &Value {
        &self.statement["predicate"]
    }
    /// Refused before spawn (exit 125) with exactly this reason.
    pub fn assert_refused(&self, reason: &str) {
        assert_eq!(
            (self.code, self.class(), self.reason()),
            (125, "known_not_executed", reason),
            "stderr: {}",
            self.stderr
        );
    }
}

pub fn cmd() -> Command {
    let mut c = Command::new(BIN);
    c.stdin(Stdio::null());
    c
}

pub fn output(mut c: impl std::borrow::BorrowMut<Command>) -> Output {
    c.borrow_mut().output().expect("spawn governed-exec")
}

pub fn decode_envelope(bytes: &[u8]) -> Value {
    let env: Value = serde_json::from_slice(bytes).unwrap_or_else(|e| {
        panic!(
            "receipt is not JSON: {e}: {}",
            String::from_utf8_lossy(bytes)
        )
    });
    let payload = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().expect("payload"))
        .expect("base64 payload");
    serde_json::from_slice(&payload).expect("statement JSON")
}

pub const DEFAULT_GOAL: &str = r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 } ] }"#;

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).expect("ws");
        let e = Env {
            ws,
            goal: dir.path().join("goal.json"),
            manifest: dir.path().join("manifest.json"),
            key: dir.path().join("approver.key"),
            trust: dir.path().join("approver.pub"),
            state: dir.path().join("state"),
            dir,
        };
        e.set_goal(DEFAULT_GOAL);
        let o = output(
            cmd()
                .arg("keygen")
                .arg("--out")
                .arg(e.dir.path().join("approver")),
        );
        assert!(
            o.status.success(),
            "keygen: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        e
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn set_goal(&self, json: &str) {
        std::fs::write(&self.goal, json).expect("goal");
    }

    pub fn write_script(&self, rel: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.ws.join(rel);
        std::fs::write(&p, body).expect("script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    pub fn approve_cmd(&self, flags: &[&str], command: &[&str]) -> Command {
        approve_cmd_with(self.approve_files(), flags, command)
    }

    /// This environment's approve files, for [`approve_cmd_with`] with one
    /// changed (another goal, manifest or key).
    pub fn approve_files(&self) -> ApproveFiles<'_> {
        ApproveFiles {
            goal: &self.goal,
            workspace: &self.ws,
            manifest: &self.manifest,
            key: &self.key,
        }
    }

    /// Approve and return the lease id; panics on failure.
    pub fn approve(&self, flags: &[&str], command: &[&str]) -> String {
        let o = output(&mut self.approve_cmd(flags, command));
        assert!(
            o.status.success(),
            "approve failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    pub fn run_cmd(&self, flags: &[&str], command: &[&str]) -> Command {
        self.run_cmd_trusting(&self.trust, flags, command)
    }

    /// [`Env::run_cmd`] with another `--trust` key file.
    pub fn run_cmd_trusting(&self, trust: &Path, flags: &[&str], command: &[&str]) -> Command {
        run_cmd_with(
            RunFiles {
                goal: &self.goal,
                manifest: &self.manifest,
                trust,
                state: &self.state,
            },
            flags,
            command,
        )
    }

    /// This environment's run files, for [`run_cmd_with`] with one changed.
    pub fn files(&self) -> RunFiles<'_> {
        RunFiles {
            goal: &self.goal,
            manifest: &self.manifest,
            trust: &self.trust,
            state: &self.state,
        }
    }

    pub fn run(&self, flags: &[&str], command: &[&str]) -> Run {
        finish_run(output(&mut self.run_cmd(flags, command)))
    }

    pub fn runner_pub(&self) -> PathBuf {
        self.state.join("runner.pub")
    }

    /// `journal show ATTEMPT --json` of this state dir, parsed.
    pub fn journal_show(&self, attempt: &str) -> serde_json::Value {
        let o = output(
            cmd()
                .args(["journal", "show", attempt, "--json"])
                .arg("--state-dir")
                .arg(&self.state),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("journal show --json")
    }

    /// Run, save the receipt to `name`, and return its path.
    pub fn run_to_file(&self, name: &str, command: &[&str]) -> (Run, PathBuf) {
        let r = self.run(&[], command);
        let p = self.path(name);
        std::fs::write(&p, &r.stdout).expect("save receipt");
        (r, p)
    }

    /// `verify --goal G --receipt R --trust T --allow-key-in-reach` (more
    /// flags may be added). Most tests run children in the default mode,
    /// where the runner key is within the child's reach and `verify` would
    /// refuse every receipt for that alone; tests/it/attack/rootchild.rs tests that
    /// rule with [`Env::verify_strict_cmd`].
    pub fn verify_cmd(&self, receipt: &Path, trust: &Path) -> Command {
        let mut c = self.verify_strict_cmd(receipt, trust);
        c.arg("--allow-key-in-reach");
        c
    }

    /// `verify --goal G --receipt R --trust T`, nothing allowed.
    pub fn verify_strict_cmd(&self, receipt: &Path, trust: &Path) -> Command {
        let mut c = cmd();
        c.arg("verify")
            .arg("--goal")
            .arg(&self.goal)
            .arg("--receipt")
            .arg(receipt)
            .arg("--trust")
            .arg(trust);
        c
    }

    pub fn verify(&self, receipt: &Path) -> (i32, String) {
        let o = output(self.verify_cmd(receipt, &self.runner_pub()));
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).to_string(),
        )
    }

    pub fn journal_executing_count(&self) -> usize {
        let mut n = 0;
        if let Ok(rd) = std::fs::read_dir(self.state.join("journal")) {
            for f in rd.flatten() {
                let s = std::fs::read_to_string(f.path()).unwrap_or_default();
                n += s
                    .lines()
                    .filter(|l| l.contains("\"kind\":\"executing\""))
                    .count();
            }
        }
        n
    }
}

/// The files an `approve` is pointed at.
#[derive(Clone, Copy)]
pub struct ApproveFiles<'a> {
    pub goal: &'a Path,
    pub workspace: &'a Path,
    pub manifest: &'a Path,
    pub key: &'a Path,
}

/// `approve --goal --workspace --manifest --key FLAGS [-- COMMAND]`.
pub fn approve_cmd_with(files: ApproveFiles<'_>, flags: &[&str], command: &[&str]) -> Command {
    let mut c = cmd();
    c.arg("approve")
        .arg("--goal")
        .arg(files.goal)
        .arg("--workspace")
        .arg(files.workspace)
        .arg("--manifest")
        .arg(files.manifest)
        .arg("--key")
        .arg(files.key)
        .args(flags);
    if !command.is_empty() {
        c.arg("--").args(command);
    }
    c
}

/// The files a `run` is pointed at.
#[derive(Clone, Copy)]
pub struct RunFiles<'a> {
    pub goal: &'a Path,
    pub manifest: &'a Path,
    pub trust: &'a Path,
    pub state: &'a Path,
}

/// `run --goal --manifest --trust --state-dir FLAGS [-- COMMAND]`.
pub fn run_cmd_with(files: RunFiles<'_>, flags: &[&str], command: &[&str]) -> Command {
    let mut c = run_cmd_stateless(files);
    c.arg("--state-dir").arg(files.state).args(flags);
    if !command.is_empty() {
        c.arg("--").args(command);
    }
    c
}

/// `run` as [`run_cmd_with`], but without `--state-dir` and with neither
/// `GOVERNED_EXEC_STATE_DIR` nor `XDG_STATE_HOME`: the state dir is the
/// default one, under `home` (`HOME/.local/state/governed-exec`) unless the
/// caller sets one of the two again. `files.state` is not used. Never the
/// real state dir: HOME is always `home`.
pub fn run_cmd_default_state(
    files: RunFiles<'_>,
    home: &Path,
    flags: &[&str],
    command: &[&str],
) -> Command {
    let mut c = run_cmd_stateless(files);
    c.env_remove("GOVERNED_EXEC_STATE_DIR")
        .env_remove("XDG_STATE_HOME")
        .env("HOME", home)
        .args(flags);
    if !command.is_empty() {
        c.arg("--").args(command);
    }
    c
}

fn run_cmd_stateless(files: RunFiles<'_>) -> Command {
    let mut c = cmd();
    c.arg("run")
        .arg("--goal")
        .arg(files.goal)
        .arg("--manifest")
        .arg(files.manifest)
        .arg("--trust")
        .arg(files.trust);
    c
}

pub fn finish_run(o: Output) -> Run {
    let code = o.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    let statement = if o.stdout.is_empty() {
        Value::Null
    } else {
        decode_envelope(&o.stdout)
    };
    Run {
        code,
        stdout: o.stdout,
        stderr,
        statement,
    }
}

/// Lines in a file the children append to (0 if it does not exist).
pub fn line_count(p: &Path) -> usize {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .count()
}

pub fn pid_alive(pid: i32) -> bool {
    // A zombie is dead for our purposes; anything else in /proc is alive.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next()
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// The pid a running child writes to `p`, once it is all there: a shell's
/// `echo $$ > p` creates the file before it writes the number, so a
/// reader that only waits for the file can see it empty.
pub fn wait_for_pid(p: &Path, within: std::time::Duration) -> i32 {
    let end = std::time::Instant::now() + within;
    loop {
        let read = std::fs::read_to_string(p).ok();
        if let Some(pid) = read.as_deref().and_then(|s| s.trim().parse().ok()) {
            return pid;
        }
        assert!(
            std::time::Instant::now() < end,
            "{}: no pid within {within:?}",
            p.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub fn read_pid(p: &Path) -> i32 {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .parse()
        .expect("pid")
}

/// A fresh database `PREFIX_<pid>` in the PostgreSQL test cluster
/// (scripts/pg-test-cluster.sh), as a ledger address; `None` without one.
#[allow(dead_code)]
pub fn test_cluster_ledger(prefix: &str) -> Option<String> {
    let port = std::env::var("GOVERNED_EXEC_TEST_PG_PORT").ok()?;
    let bin = PathBuf::from(std::env::var("GOVERNED_EXEC_TEST_PG_BIN").ok()?);
    let name = format!("{prefix}_{}", std::process::id());
    let o = Command::new(bin.join("createdb"))
        .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres", &name])
        .output()
        .expect("createdb");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(format!("postgres://127.0.0.1:{port}/{name}"))
}

/// Whether `name` is a program on PATH (a FROM-scratch container has a
/// busybox shell and little else).
#[allow(dead_code)]
pub fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// SKIP (loudly, with the reason) a test that needs a program this
/// machine lacks.
macro_rules! require_tool {
    ($test:expr, $tool:expr) => {
        if !on_path($tool) {
            skip!(
                "{}: needs {} on PATH, which this machine lacks",
                $test,
                $tool
            );
            return;
        }
    };
}

#[allow(dead_code)]
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A started runner owned by the test: dropping it (a failed assertion, a
/// panic, a hang cut short) stops the runner and SIGKILLs its whole tree,
/// so no `governed-exec run … sleep 1000` outlives the test.
pub struct RunnerGuard {
    child: Option<std::process::Child>,
    /// The runner's tree as it was when the test killed only the runner
    /// (`kill_runner`): (pid, start time), killed on drop if still there.
    orphans: Vec<(i32, String)>,
}

/// Field 22 of /proc/PID/stat: tells a process apart from a later one that
/// reuses its pid.
fn start_time(pid: i32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(19)
        .map(String::from)
}

impl RunnerGuard {
    pub fn spawn(mut c: Command) -> RunnerGuard {
        let child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn governed-exec");
        RunnerGuard {
            child: Some(child),
            orphans: vec![],
        }
    }

    /// Like `spawn`, with the runner's stdout and stderr discarded.
    pub fn spawn_quiet(mut c: Command) -> RunnerGuard {
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let child = c.spawn().expect("spawn governed-exec");
        RunnerGuard {
            child: Some(child),
            orphans: vec![],
        }
    }

    /// SIGKILL the runner alone (a crash), and reap it. What it left
    /// behind is the product's to clean up; the guard only remembers it, to
    /// kill on drop whatever the product failed to.
    pub fn kill_runner(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let pid = child.id() as i32;
            self.orphans = descendants_of(pid)
                .into_iter()
                .filter_map(|p| start_time(p).map(|t| (p, t)))
                .collect();
            let _ = child.kill();
            let _ = child.wait();
        }
        self.child = None;
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Send a signal by name (`TERM`, `INT`, …) to the runner.
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.id().to_string())
            .status();
    }

    /// Wait for the runner and return its run (the guard is then empty).
    pub fn finish(mut self) -> Run {
        let child = self.child.take().expect("runner");
        finish_run(child.wait_with_output().expect("wait"))
    }
}

/// Every descendant of `pid`, found through /proc/PID/task/*/children.
pub fn descendants_of(pid: i32) -> Vec<i32> {
    let mut out = vec![];
    let mut queue = vec![pid];
    while let Some(p) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let s = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for c in s.split_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
                if !out.contains(&c) {
                    out.push(c);
                    queue.push(c);
                }
            }
        }
    }
    out
}

impl Drop for RunnerGuard {
    fn drop(&mut self) {
        for (pid, t) in std::mem::take(&mut self.orphans) {
            if start_time(pid).as_deref() == Some(t.as_str()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        // Freeze the runner so it cannot start more, then kill the tree
        // bottom-up; the runner last (it is the subreaper of the rest).
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP);
        for _ in 0..3 {
            for p in descendants_of(pid.as_raw()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A fresh Env and a copy of the binary that uid 65534 can use.
pub fn unprivileged_env() -> (Env, PathBuf) {
    let e = Env::new();
    let bin = nobody_copy_of_binary(&e);
    (e, bin)
}

/// Copy the binary into `e`'s directory and hand the whole directory to
/// uid 65534, so a runner of that uid can use it. Run the copy through
/// `output_settled`: another test thread's fork may briefly hold its write fd.
pub fn nobody_copy_of_binary(e: &Env) -> PathBuf {
    let bin = e.path("governed-exec");
    std::fs::copy(BIN, &bin).expect("copy");
    let _ = Command::new("chown")
        .arg("-R")
        .arg("65534:65534")
        .arg(e.dir.path())
        .status();
    std::fs::set_permissions(
        e.dir.path(),
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .expect("chmod");
    bin
}

/// `output`, retried while exec of the freshly copied binary meets ETXTBSY
/// (another test thread's fork may still hold the copy's write fd).
pub fn output_settled(mut c: Command) -> std::process::Output {
    for _ in 0..20 {
        let o = output(&mut c);
        if !String::from_utf8_lossy(&o.stderr).contains("Text file busy") {
            return o;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    output(&mut c)
}

pub fn as_nobody(bin: &Path, inner: &Command) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "--",
    ])
    .arg(bin)
    .args(inner.get_args())
    .stdin(std::process::Stdio::null());
    c
}

/// `git ARGS` in `dir` with a fixed identity and default branch; whether it
/// succeeded.
pub fn git(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A `doctor --json` that ran (exit 0 asserted), parsed.
pub fn doctor_report(o: Output) -> Value {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("doctor --json")
}

/// `governed-exec doctor --json`, as a command to wrap or run.
pub fn doctor_cmd() -> Command {
    let mut c = cmd();
    c.args(["doctor", "--json"]);
    c
}

/// The check `name` of a `doctor --json` report; panics if it has none.
pub fn doctor_check<'a>(doctor: &'a Value, name: &str) -> &'a Value {
    doctor["checks"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("doctor has no {name} check: {doctor}"))
}

/// Whether this machine's `doctor` says the check `name` is available.
pub fn doctor_available(name: &str) -> bool {
    doctor_check(&doctor_report(output(doctor_cmd())), name)["available"] == true
}

/// A run (or any command) as uid 65534 through [`as_nobody`], settled.
pub fn run_as_nobody(bin: &Path, c: &Command) -> Run {
    finish_run(output_settled(as_nobody(bin, c)))
}

/// Re-sign the manifest's first lease after `edit` changed its body, with
/// the approver key (the signature covers the stored bytes, so any key
/// order is fine).
pub fn resign_first_lease(e: &Env, edit: impl FnOnce(&mut Value)) {
    use base64::Engine;
    use ed25519_dalek::pkcs8::DecodePrivateKey;
    use ed25519_dalek::Signer;
    use sha2::Digest;
    let mut m: Value = serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap();
    let mut body = m["leases"][0]["body"].clone();
    edit(&mut body);
    let signed = serde_json::to_string(&body).unwrap();
    let fp = sha2::Sha256::digest(signed.as_bytes());
    let pem = std::fs::read_to_string(&e.key).unwrap();
    let key = ed25519_dalek::SigningKey::from_pkcs8_pem(&pem).unwrap();
    let sig = base64::engine::general_purpose::STANDARD.encode(key.sign(&fp).to_bytes());
    m["leases"][0] = serde_json::json!({
        "format": 2,
        "body": body,
        "fingerprint": hex::encode(fp),
        "keyid": m["leases"][0]["keyid"],
        "signature": sig,
    });
    std::fs::write(&e.manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}
