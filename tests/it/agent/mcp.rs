//! `governed-exec mcp` driven as an agent's client drives it: JSON-RPC over
//! the server's stdin and stdout, one line a message. The client here is
//! deliberately plain (it writes raw lines, so it can also write hostile
//! ones); `mcp_interop.py` drives the same server with the official Python
//! SDK.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

/// A running server and what it has said so far.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Messages read but not yet asked for.
    seen: Vec<Value>,
    next_id: i64,
    receipts: PathBuf,
}

fn mcp_cmd(e: &Env, receipts: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("mcp")
        .arg("--goal")
        .arg(&e.goal)
        .arg("--manifest")
        .arg(&e.manifest)
        .arg("--trust")
        .arg(&e.trust)
        .arg("--workspace")
        .arg(&e.ws)
        .arg("--receipts")
        .arg(receipts)
        .arg("--state-dir")
        .arg(&e.state)
        .args(["--principal", "agent-7"])
        .args(extra);
    c
}

impl Client {
    fn start(e: &Env, extra: &[&str]) -> Client {
        let receipts = e.path("receipts");
        let mut child = mcp_cmd(e, &receipts, extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn governed-exec mcp");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut c = Client {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            seen: vec![],
            next_id: 1,
            receipts,
        };
        let init = c.call(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "it", "version": "0"}}),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
        c.raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        c
    }

    fn raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).expect("write");
        stdin.write_all(b"\n").expect("write");
        stdin.flush().expect("flush");
    }

    fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.raw(&msg.to_string());
        id
    }

    /// The next message that matches, within `within`.
    fn wait_for(&mut self, within: Duration, what: impl Fn(&Value) -> bool) -> Option<Value> {
        if let Some(i) = self.seen.iter().position(&what) {
            return Some(self.seen.remove(i));
        }
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let v: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"));
                    if what(&v) {
                        return Some(v);
                    }
                    self.seen.push(v);
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    return None
                }
            }
        }
    }

    fn response(&mut self, id: i64) -> Value {
        self.wait_for(Duration::from_secs(60), |v| v["id"] == id)
            .unwrap_or_else(|| panic!("no response to request {id}"))
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.response(id)
    }

    fn tool_call(&mut self, args: Value) -> i64 {
        self.send(
            "tools/call",
            json!({"name": "local_process", "arguments": args}),
        )
    }

    /// One `local_process` call, to its result.
    fn local_process(&mut self, args: Value) -> Value {
        let id = self.tool_call(args);
        let r = self.response(id);
        assert!(r.get("error").is_none(), "protocol error: {r}");
        r["result"].clone()
    }

    fn close(&mut self) {
        self.stdin.take();
    }

    fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn receipt_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&self.receipts)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request(exe: &str, argv: &[&str]) -> Value {
    json!({"executable": exe, "argv": argv, "cwd": ".", "profile": "short"})
}

fn pending(e: &Env, args: &[&str]) -> std::process::Output {
    output(
        cmd()
            .arg("pending")
            .arg("--state-dir")
            .arg(&e.state)
            .args(args),
    )
}

fn pending_entries(e: &Env) -> Vec<Value> {
    let o = pending(e, &["list", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("pending list --json");
    v["entries"].as_array().cloned().unwrap_or_default()
}

fn approve_pending(e: &Env, id: &str, flags: &[&str]) -> std::process::Output {
    let mut c = cmd();
    c.args(["approve", "--pending", id])
        .arg("--state-dir")
        .arg(&e.state)
        .arg("--goal")
        .arg(&e.goal)
        .arg("--workspace")
        .arg(&e.ws)
        .arg("--manifest")
        .arg(&e.manifest)
        .arg("--key")
        .arg(&e.key)
        .args(flags);
    output(c)
}

#[test]
fn the_server_offers_one_tool_whose_schema_is_exactly_the_request() {
    let e = Env::new();
    let mut c = Client::start(&e, &[]);
    let tools = c.call("tools/list", json!({}));
    let list = tools["result"]["tools"].as_array().expect("tools");
    assert_eq!(list.len(), 1, "{tools}");
    let t = &list[0];
    assert_eq!(t["name"], "local_process");
    let s = &t["inputSchema"];
    assert_eq!(s["additionalProperties"], false);
    let mut required: Vec<&str> = s["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort();
    assert_eq!(required, ["argv", "cwd", "executable", "profile"]);
    assert_eq!(s["properties"].as_object().unwrap().len(), 4);
    assert_eq!(
        s["properties"]["profile"]["enum"],
        json!(["short", "standard", "long"])
    );
    assert!(t["description"].as_str().unwrap().contains("not a shell"));
    // A revision the server does not speak is answered with one it does.
    let other = c.call(
        "initialize",
        json!({"protocolVersion": "1999-01-01", "capabilities": {},
               "clientInfo": {"name": "old", "version": "0"}}),
    );
    assert_eq!(other["result"]["protocolVersion"], "2025-11-25", "{other}");
}

#[test]
fn a_call_with_any_other_field_or_type_is_refused_before_anything_happens() {
    let e = Env::new();
    e.approve(&["--profile", "short"], &["/bin/echo", "hi"]);
    let mut c = Client::start(&e, &[]);
    let cases = [
        (
            json!({"executable": "/bin/echo", "argv": ["hi"], "cwd": ".", "profile": "short", "env": {"X": "1"}}),
            "\"env\"",
        ),
        (
            json!({"executable": "/bin/echo", "argv": ["hi"], "cwd": "."}),
            "`profile`",
        ),
        (
            json!({"executable": "/bin/echo", "argv": "hi", "cwd": ".", "profile": "short"}),
            "`argv`",
        ),
        (
            json!({"executable": ["/bin/echo"], "argv": ["hi"], "cwd": ".", "profile": "short"}),
            "`executable`",
        ),
        (
            json!({"executable": "/bin/echo", "argv": ["hi"], "cwd": ".", "profile": "root"}),
            "`profile`",
        ),
    ];
    for (args, field) in cases {
        let r = c.local_process(args.clone());
        assert_eq!(r["isError"], true, "{args}: {r}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(field), "{args}: {text}");
        assert!(r.get("structuredContent").is_none(), "{r}");
    }
    assert!(
        c.receipt_files().is_empty(),
        "a refused call wrote a receipt"
    );
    assert_eq!(e.journal_executing_count(), 0);
    assert!(pending_entries(&e).is_empty());
    // The lease is still whole: the well-formed call runs.
    let ok = c.local_process(request("/bin/echo", &["hi"]));
    assert_eq!(ok["structuredContent"]["outcome"], "exited", "{ok}");
}

#[test]
fn an_unapproved_request_waits_for_a_person_and_then_runs_exactly_as_approved() {
    let e = Env::new();
    let mut c = Client::start(&e, &[]);
    let ask = request("/bin/echo", &["hello", "world"]);

    let first = c.local_process(ask.clone());
    let s = &first["structuredContent"];
    assert_eq!(first["isError"], true, "{first}");
    assert_eq!(
        (
            s["outcome"].as_str(),
            s["reason"].as_str(),
            s["needs_human"].as_bool()
        ),
        (
            Some("known_not_executed"),
            Some("no_matching_lease"),
            Some(true)
        ),
        "{first}"
    );
    let id = s["pending_id"].as_str().expect("pending id").to_string();
    let receipt = PathBuf::from(s["receipt_path"].as_str().unwrap());
    let stmt = decode_envelope(&std::fs::read(&receipt).unwrap());
    assert_eq!(stmt["predicate"]["outcome"]["pending_id"], id.as_str());
    assert_eq!(stmt["predicate"]["principal"], "agent-7");
    assert_eq!(e.journal_executing_count(), 0);

    // Asked again: the same entry, counted; asked differently: a new one.
    let again = c.local_process(ask.clone());
    assert_eq!(again["structuredContent"]["pending_id"], id.as_str());
    let other = c.local_process(request("/bin/echo", &["hello", "world!"]));
    let other_id = other["structuredContent"]["pending_id"].as_str().unwrap();
    assert_ne!(other_id, id);
    let entries = pending_entries(&e);
    let entry = entries.iter().find(|x| x["id"] == id.as_str()).unwrap();
    assert_eq!(entry["count"], 2);
    assert_eq!(entry["principals"], json!(["agent-7"]));
    let echo = std::fs::canonicalize("/bin/echo").unwrap();
    assert_eq!(
        entry["executable"]["canonical_path"],
        echo.to_str().unwrap()
    );
    assert_eq!(entries.len(), 2);

    let shown = pending(&e, &["show", &id]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success() && text.contains("\"world\""),
        "{text}"
    );

    let o = approve_pending(&e, &id, &["--uses", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The same call now runs; its receipt verifies.
    let ran = c.local_process(ask.clone());
    let s = &ran["structuredContent"];
    assert_eq!(ran["isError"], false, "{ran}");
    assert_eq!(
        (s["outcome"].as_str(), s["exit_code"].as_i64()),
        (Some("exited"), Some(0))
    );
    assert_eq!(s["stdout"], "hello world\n");
    let path = PathBuf::from(s["receipt_path"].as_str().unwrap());
    assert!(path.starts_with(&c.receipts));
    let v = output(e.verify_cmd(&path, &e.runner_pub()));
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).lines().next(),
        Some("VERIFIED_DONE"),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    assert_eq!(
        decode_envelope(&std::fs::read(&path).unwrap())["predicate"]["principal"],
        "agent-7"
    );
    // The entry says who approved it and with which lease; the other
    // request still waits.
    let entries = pending_entries(&e);
    let done = entries.iter().find(|x| x["id"] == id.as_str()).unwrap();
    assert_eq!(done["state"], "approved");
    assert!(done["lease_id"].as_str().unwrap().starts_with("lease-"));
    let waiting = entries.iter().find(|x| x["id"] == other_id).unwrap();
    assert_eq!(waiting["state"], "pending");
    // Its one use spent, the request waits for a person again.
    let spent = c.local_process(ask);
    assert_eq!(
        spent["structuredContent"]["reason"], "lease_exhausted",
        "{spent}"
    );
    assert_eq!(spent["structuredContent"]["pending_id"], id.as_str());
}

#[test]
fn approve_pending_refuses_an_executable_that_changed_since_it_was_asked_for() {
    let e = Env::new();
    let script = e.write_script("tool.sh", "#!/bin/sh\necho one\n");
    let mut c = Client::start(&e, &[]);
    let ask = request(script.to_str().unwrap(), &[]);
    let r = c.local_process(ask);
    let id = r["structuredContent"]["pending_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The agent (or anyone) rewrites the file after asking.
    e.write_script("tool.sh", "#!/bin/sh\necho two\n");
    let o = approve_pending(&e, &id, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("changed since it was asked for"), "{err}");
    assert!(
        !e.manifest.exists(),
        "a lease was written for a changed file"
    );
    assert_eq!(pending_entries(&e)[0]["state"], "pending");
}

#[test]
fn a_denied_request_is_told_so_and_the_channel_cannot_answer_the_queue() {
    let e = Env::new();
    let mut c = Client::start(&e, &[]);
    let ask = request("/bin/echo", &["rm", "-rf", "/"]);
    let r = c.local_process(ask.clone());
    let id = r["structuredContent"]["pending_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Without the approver's key, no decision.
    let o = pending(&e, &["deny", &id, "--by", "ops"]);
    assert_eq!(o.status.code(), Some(2));
    let o = output(
        cmd()
            .args([
                "pending",
                "deny",
                &id,
                "--by",
                "ops",
                "--note",
                "not this one",
            ])
            .arg("--key")
            .arg(&e.key)
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let again = c.local_process(ask);
    let msg = again["structuredContent"]["message"].as_str().unwrap();
    assert!(
        msg.contains("denied") && msg.contains("not this one"),
        "{msg}"
    );
    // The agent's channel has no method that decides anything.
    for method in ["pending/approve", "approve", "revoke", "resolve"] {
        let resp = c.call(method, json!({"id": id}));
        assert_eq!(resp["error"]["code"], -32601, "{method}: {resp}");
    }
    assert_eq!(pending_entries(&e)[0]["state"], "denied");
    // Unknown ids are usage errors.
    let o = pending(&e, &["show", "pend-0000000000000000"]);
    assert_eq!(o.status.code(), Some(2));
    let o = approve_pending(&e, "../../etc/passwd", &[]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn concurrent_calls_never_overspend_a_lease() {
    let e = Env::new();
    let log = e.path("spawns.log");
    let body = format!("#!/bin/sh\necho x >> {}\nsleep 0.3\n", log.display());
    let script = e.write_script("work.sh", &body);
    let exe = script.to_str().unwrap();
    e.approve(&["--uses", "3", "--profile", "short"], &[exe]);
    let mut c = Client::start(&e, &["--max-concurrent", "8"]);
    let ids: Vec<i64> = (0..8).map(|_| c.tool_call(request(exe, &[]))).collect();
    let mut ran = 0;
    let mut exhausted = 0;
    for id in ids {
        let r = c.response(id);
        match r["result"]["structuredContent"]["outcome"].as_str() {
            Some("exited") => ran += 1,
            Some("known_not_executed") => {
                assert_eq!(
                    r["result"]["structuredContent"]["reason"], "lease_exhausted",
                    "{r}"
                );
                exhausted += 1;
            }
            other => panic!("unexpected {other:?}: {r}"),
        }
    }
    assert_eq!((ran, exhausted), (3, 5));
    assert_eq!(line_count(&log), 3);
}

#[test]
fn a_cancelled_call_is_stopped_as_a_signal_would_with_its_receipt() {
    let e = Env::new();
    let pidfile = e.path("pid");
    let body = format!(
        "#!/bin/sh\necho $$ > {}\nexec sleep 60\n",
        pidfile.display()
    );
    let script = e.write_script("long.sh", &body);
    let exe = script.to_str().unwrap();
    e.approve(&["--profile", "short"], &[exe]);
    let mut c = Client::start(&e, &[]);
    let id = c.send(
        "tools/call",
        json!({"name": "local_process", "arguments": request(exe, &[]),
               "_meta": {"progressToken": "p1"}}),
    );
    let pid = wait_for_pid(&pidfile, Duration::from_secs(20));
    let progress = c.wait_for(Duration::from_secs(5), |v| {
        v["method"] == "notifications/progress" && v["params"]["progressToken"] == "p1"
    });
    assert!(
        progress.is_some(),
        "no progress notification for a running call"
    );
    c.raw(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": "user stopped it"}})
        .to_string(),
    );
    let end = Instant::now() + Duration::from_secs(15);
    while pid_alive(pid) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!pid_alive(pid), "the cancelled call's process is alive");
    // The receipt is written; no response is sent for a cancelled request.
    let end = Instant::now() + Duration::from_secs(15);
    while c.receipt_files().is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let files = c.receipt_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let stmt = decode_envelope(&std::fs::read(&files[0]).unwrap());
    assert_eq!(
        stmt["predicate"]["outcome"]["class"], "cancelled_reaped",
        "{stmt}"
    );
    assert_eq!(stmt["predicate"]["cleanup"]["state"], "gone");
    assert!(c
        .wait_for(Duration::from_millis(500), |v| v["id"] == id)
        .is_none());
    // The server goes on serving.
    assert!(c.call("ping", json!({}))["result"].is_object());
}

#[test]
fn the_client_going_away_cancels_every_running_call_and_the_server_exits_0() {
    let e = Env::new();
    let mut exes = vec![];
    for n in 0..2 {
        let pidfile = e.path(&format!("pid{n}"));
        let body = format!(
            "#!/bin/sh\necho $$ > {}\nexec sleep 60\n",
            pidfile.display()
        );
        let script = e.write_script(&format!("long{n}.sh"), &body);
        e.approve(&["--profile", "short"], &[script.to_str().unwrap()]);
        exes.push((script, pidfile));
    }
    let mut c = Client::start(&e, &[]);
    for (script, _) in &exes {
        c.tool_call(request(script.to_str().unwrap(), &[]));
    }
    let pids: Vec<i32> = exes
        .iter()
        .map(|(_, p)| wait_for_pid(p, Duration::from_secs(20)))
        .collect();
    c.close();
    assert_eq!(c.wait_exit(Duration::from_secs(30)), Some(0));
    for pid in pids {
        assert!(!pid_alive(pid), "pid {pid} outlived the server");
    }
    let files = c.receipt_files();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in files {
        let stmt = decode_envelope(&std::fs::read(&f).unwrap());
        assert_eq!(stmt["predicate"]["outcome"]["class"], "cancelled_reaped");
    }
}

#[test]
fn bad_input_on_the_channel_gets_the_named_error_and_the_server_keeps_serving() {
    let e = Env::new();
    let mut c = Client::start(&e, &[]);
    let error_for = |c: &mut Client, line: &str| -> Value {
        c.raw(line);
        c.wait_for(Duration::from_secs(10), |v| v.get("error").is_some())
            .unwrap_or_else(|| panic!("no error for {line:.60}"))
    };
    assert_eq!(error_for(&mut c, "{not json")["error"]["code"], -32700);
    assert_eq!(error_for(&mut c, "[]")["error"]["code"], -32600);
    assert_eq!(
        error_for(&mut c, r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#)["error"]["code"],
        -32600
    );
    let r = error_for(&mut c, r#"{"jsonrpc":"2.0","id":6,"method":"shell/exec"}"#);
    assert_eq!(
        (r["id"].as_i64(), r["error"]["code"].as_i64()),
        (Some(6), Some(-32601))
    );
    let r = error_for(
        &mut c,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bash","arguments":{}}}"#,
    );
    assert_eq!(
        (r["id"].as_i64(), r["error"]["code"].as_i64()),
        (Some(7), Some(-32602))
    );
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":8,"method":"ping","params":{{"x":"{}"}}}}"#,
        "a".repeat(2 << 20)
    );
    assert_eq!(error_for(&mut c, &huge)["error"]["code"], -32600);
    // A flood of requests is answered one by one.
    let ids: Vec<i64> = (0..200).map(|_| c.send("ping", json!({}))).collect();
    for id in ids {
        assert!(c.response(id)["result"].is_object());
    }
    assert!(c.call("tools/list", json!({}))["result"]["tools"].is_array());
}

#[test]
fn the_server_refuses_to_start_on_a_configuration_that_could_not_serve() {
    let e = Env::new();
    let receipts = e.path("receipts");
    let mut c = mcp_cmd(&e, &receipts, &[]);
    c.stdin(Stdio::null());
    let args: Vec<_> = c.get_args().map(|a| a.to_os_string()).collect();
    for (flag, bad) in [
        ("--goal", "missing-goal.json"),
        ("--trust", "missing.pub"),
        ("--workspace", "no-such-dir"),
    ] {
        let mut c = Command::new(BIN);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            c.arg(a);
            if a == flag {
                it.next();
                c.arg(e.path(bad));
            }
        }
        let o = output(c.stdin(Stdio::null()));
        assert_eq!(o.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(o.stdout.is_empty(), "{flag}: stdout {:?}", o.stdout);
    }
}

#[test]
fn a_plain_run_refused_for_want_of_a_lease_is_queued_under_its_principal() {
    let e = Env::new();
    let r = e.run(
        &["--principal", "ci-job-42", "--profile", "short"],
        &["/bin/echo", "x"],
    );
    r.assert_refused("no_matching_lease");
    let id = r.outcome()["pending_id"].as_str().expect("pending id");
    assert_eq!(r.predicate()["principal"], "ci-job-42");
    let entries = pending_entries(&e);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["id"], id);
    assert_eq!(entries[0]["principals"], json!(["ci-job-42"]));
    // A request whose executable does not resolve has nothing to approve.
    let r = e.run(&["--profile", "short"], &["/no/such/tool"]);
    r.assert_refused("no_matching_lease");
    assert!(r.outcome().get("pending_id").is_none());
    assert!(r.outcome()["message"]
        .as_str()
        .unwrap()
        .contains("not queued"));
    assert_eq!(pending_entries(&e).len(), 1);
}

/// The official MCP Python SDK's client completes the same journey: the
/// tool listed with its closed schema, an unapproved call queued, a call
/// with another field refused, and after `approve --pending` the same call
/// run, its structured result read as the SDK reads it.
#[test]
fn the_official_python_sdk_client_completes_the_journey() {
    let Some(py) = crate::evidence::interop::interop_python("python_sdk_mcp") else {
        return;
    };
    let has_sdk = Command::new(&py)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_sdk {
        skip!(
            "python_sdk_mcp: {} lacks the mcp package (scripts/pyenv.sh installs it)",
            py.display()
        );
        return;
    }
    let e = Env::new();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/mcp_client.py");
    let o = Command::new(&py)
        .arg(script)
        .arg(BIN)
        .arg(&e.goal)
        .arg(&e.manifest)
        .arg(&e.trust)
        .arg(&e.ws)
        .arg(e.path("receipts"))
        .arg(&e.state)
        .arg(&e.key)
        .args(["/bin/echo", "from the sdk"])
        .stdin(Stdio::null())
        .output()
        .expect("python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let seen: Value = serde_json::from_slice(&o.stdout).expect("the client's summary");
    assert_eq!(seen["tools"], json!(["local_process"]));
    assert_eq!(seen["input_schema"]["additionalProperties"], false);
    assert_eq!(seen["first"]["isError"], true);
    assert_eq!(seen["first"]["structured"]["reason"], "no_matching_lease");
    assert_eq!(seen["bad"]["isError"], true);
    assert!(
        seen["bad"]["text"].as_str().unwrap().contains("\"shell\""),
        "{seen}"
    );
    assert_eq!(seen["approve_exit"], 0);
    assert_eq!(seen["second"]["isError"], false, "{seen}");
    assert_eq!(seen["second"]["structured"]["outcome"], "exited");
    assert_eq!(seen["second"]["structured"]["stdout"], "from the sdk\n");
    let receipt = PathBuf::from(
        seen["second"]["structured"]["receipt_path"]
            .as_str()
            .unwrap(),
    );
    let v = output(e.verify_cmd(&receipt, &e.runner_pub()));
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
}

#[test]
fn approve_pending_refuses_a_cwd_that_resolves_elsewhere_since_it_was_asked_for() {
    let e = Env::new();
    std::fs::create_dir(e.ws.join("sub")).unwrap();
    std::fs::create_dir(e.ws.join("other")).unwrap();
    let mut c = Client::start(&e, &[]);
    let r = c.local_process(
        json!({"executable": "/bin/echo", "argv": ["x"], "cwd": "sub", "profile": "short"}),
    );
    let id = r["structuredContent"]["pending_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The agent re-points the directory it asked to run in.
    std::fs::rename(e.ws.join("sub"), e.ws.join("sub.orig")).unwrap();
    std::os::unix::fs::symlink("other", e.ws.join("sub")).unwrap();
    let o = approve_pending(&e, &id, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("its cwd resolved to"), "{err}");
    assert!(
        !e.manifest.exists(),
        "a lease was signed for another directory"
    );
}

#[test]
fn receipts_go_to_the_directory_opened_at_start_whatever_its_path_names_later() {
    let e = Env::new();
    e.approve(&["--uses", "2", "--profile", "short"], &["/bin/echo", "r"]);
    let mut c = Client::start(&e, &[]);
    let first = c.local_process(request("/bin/echo", &["r"]));
    assert!(
        first["structuredContent"]["receipt_path"].is_string(),
        "{first}"
    );
    let elsewhere = e.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::rename(e.path("receipts"), e.path("receipts.orig")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, e.path("receipts")).unwrap();
    let second = c.local_process(request("/bin/echo", &["r"]));
    assert_eq!(second["structuredContent"]["outcome"], "exited", "{second}");
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "a receipt followed the swap"
    );
    assert_eq!(
        std::fs::read_dir(e.path("receipts.orig")).unwrap().count(),
        2
    );
    // And a receipts directory inside the workspace is refused at start.
    let mut inside = mcp_cmd(&e, &e.ws.join("receipts"), &[]);
    let o = output(inside.stdin(Stdio::null()));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("inside the workspace"));
}

#[test]
fn a_request_too_large_to_queue_is_refused_without_filling_the_queue() {
    let e = Env::new();
    let mut c = Client::start(&e, &[]);
    let big = "a".repeat(100_000);
    for n in 0..3 {
        let tag = n.to_string();
        let r = c.local_process(request("/bin/echo", &[&tag, &big]));
        let s = &r["structuredContent"];
        assert_eq!(s["reason"], "no_matching_lease", "{r}");
        assert!(s["pending_id"].is_null(), "{r}");
        assert!(s["message"].as_str().unwrap().contains("not queued"), "{r}");
    }
    assert!(pending_entries(&e).is_empty());
    let files = std::fs::read_dir(e.state.join("pending")).unwrap().count();
    assert!(files <= 1, "{files} files in the queue"); // its lock file
}

#[test]
fn files_planted_in_the_queue_are_shown_never_taken_for_entries() {
    let e = Env::new();
    let r = e.run(&["--profile", "short"], &["/bin/echo", "q"]);
    let id = r.outcome()["pending_id"].as_str().unwrap().to_string();
    let dir = e.state.join("pending");
    std::fs::write(dir.join("pend-0000000000000000.json"), "{not an entry").unwrap();
    // A real entry's content under a name that is not an entry's name.
    std::fs::copy(dir.join(format!("{id}.json")), dir.join(&id)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("pend-1111111111111111.json")).unwrap();
    let o = pending(&e, &["list", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 1, "{v}");
    let mut files: Vec<&str> = v["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["file"].as_str().unwrap())
        .collect();
    files.sort();
    let mut want = vec![
        id.as_str(),
        "pend-0000000000000000.json",
        "pend-1111111111111111.json",
    ];
    want.sort();
    assert_eq!(files, want);
    assert_eq!(
        pending(&e, &["show", "pend-1111111111111111"])
            .status
            .code(),
        Some(2)
    );
}
