//! The journal: no lost use, no replay, an audit trail that proves itself.

use std::time::Duration;

use crate::support::*;

fn journal_file(e: &Env) -> std::path::PathBuf {
    let mut files: Vec<_> = std::fs::read_dir(e.state.join("journal"))
        .expect("journal dir")
        .flatten()
        .map(|f| f.path())
        .collect();
    assert_eq!(files.len(), 1);
    files.remove(0)
}

fn journal_verify(e: &Env) -> (i32, String) {
    let o = output(
        cmd()
            .arg("journal")
            .arg("verify")
            .arg("--state-dir")
            .arg(&e.state),
    );
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string(),
    )
}

fn attempts(e: &Env) -> serde_json::Value {
    let o = output(
        cmd()
            .arg("journal")
            .arg("list")
            .arg("--json")
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("json")
}

fn resolve(e: &Env, attempt: &str, as_: &str) -> i32 {
    output(
        cmd()
            .args([
                "resolve",
                "--attempt",
                attempt,
                "--as",
                as_,
                "--by",
                "ops",
                "--note",
                "checked by hand",
            ])
            .arg("--state-dir")
            .arg(&e.state),
    )
    .status
    .code()
    .unwrap_or(-1)
}

#[test]
fn sigkill_of_the_runner_mid_run_kills_the_child_and_blocks_the_goal() {
    let e = Env::new();
    let pidf = e.path("child.pid");
    let script = format!("echo $$ > {}; exec sleep 1000", pidf.display());
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--uses", "3"], &probe);
    let mut child = RunnerGuard::spawn_quiet(e.run_cmd(&[], &probe));
    let pid = wait_for_pid(&pidf, Duration::from_secs(20));
    // A run in progress is not mistaken for a crash.
    let a = attempts(&e);
    assert_eq!(a[0]["state"], "running");
    child.kill_runner();
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while pid_alive(pid) && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!pid_alive(pid), "the child outlived its runner");
    let a = attempts(&e);
    assert_eq!(a[0]["state"], "unknown");
    std::fs::remove_file(&pidf).expect("rm");
    let r = e.run(&[], &probe);
    r.assert_refused("unresolved_unknown_outcome");
    assert_eq!(r.outcome()["needs_human"], true);
    assert!(!pidf.exists(), "a refused run spawned");
    assert_eq!(e.journal_executing_count(), 1);
}

#[test]
fn resolve_failed_unblocks_and_keeps_the_spent_use() {
    let e = Env::new();
    let probe = ["sh", "-c", "exec sleep 1000"];
    e.approve(&["--uses", "2"], &probe);
    let mut child = start_and_wait_for_executing(&e, &probe, 1);
    child.kill_runner();
    wait_until_unknown(&e);
    let a = attempts(&e);
    let id = a[0]["attempt_id"].as_str().expect("id").to_string();
    assert_eq!(
        resolve(&e, "att-nope", "failed"),
        2,
        "a typo looked like success"
    );
    assert_eq!(resolve(&e, &id, "failed"), 0);
    assert_eq!(resolve(&e, &id, "failed"), 2, "resolving twice");
    // The classification created no receipt and is not evidence.
    assert_eq!(attempts(&e)[0]["state"], "resolved");
    // One use left: the next run goes ahead (quick command), then exhaustion.
    let quick = ["sh", "-c", "exec sleep 1000"];
    let second = start_and_wait_for_executing(&e, &quick, 2);
    second.signal("TERM");
    let r = second.finish();
    assert_eq!(r.class(), "cancelled_reaped");
    let r = e.run(&[], &probe);
    assert_eq!(r.reason(), "lease_exhausted");
}

/// Start a run in the background and wait (bounded) until the journal
/// holds `records` executing records.
fn start_and_wait_for_executing(e: &Env, probe: &[&str], records: usize) -> RunnerGuard {
    let child = RunnerGuard::spawn(e.run_cmd(&[], probe));
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while e.journal_executing_count() < records && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        e.journal_executing_count(),
        records,
        "the run never started"
    );
    child
}

/// After the runner was killed, its child dies of the parent-death signal a
/// moment later; until then it may still share the attempt lock (it held a
/// copy between clone and exec), so the attempt reads `running`. Wait for
/// the journal to call it `unknown` before acting on it.
fn wait_until_unknown(e: &Env) {
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while attempts(e)[0]["state"] != "unknown" && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        attempts(e)[0]["state"],
        "unknown",
        "the killed run never read unknown"
    );
}

#[test]
fn resolve_stop_revokes_the_lease() {
    let e = Env::new();
    let probe = ["sh", "-c", "exec sleep 1000"];
    e.approve(&["--uses", "5"], &probe);
    let mut child = start_and_wait_for_executing(&e, &probe, 1);
    child.kill_runner();
    wait_until_unknown(&e);
    let id = attempts(&e)[0]["attempt_id"]
        .as_str()
        .expect("id")
        .to_string();
    assert_eq!(resolve(&e, &id, "stop"), 0);
    let r = e.run(&[], &probe);
    assert_eq!(r.reason(), "lease_revoked");
}

#[test]
fn parallel_runs_never_overspend_a_lease() {
    let e = Env::new();
    let log = e.path("spawns.log");
    let probe = ["sh", "-c", &format!("echo x >> {}", log.display())];
    e.approve(&["--uses", "3"], &probe);
    let children: Vec<_> = (0..12)
        .map(|_| RunnerGuard::spawn(e.run_cmd(&[], &probe)))
        .collect();
    let mut ok = 0;
    let mut exhausted = 0;
    for c in children {
        let r = c.finish();
        match r.code {
            0 => ok += 1,
            125 if r.reason() == "lease_exhausted" => exhausted += 1,
            other => panic!("unexpected exit {other}: {}", r.stderr),
        }
    }
    assert_eq!((ok, exhausted), (3, 9));
    assert_eq!(line_count(&log), 3);
    assert_eq!(journal_verify(&e).0, 0);
}

#[test]
fn torn_tail_fails_closed_and_is_reported() {
    let e = Env::new();
    e.approve(&["--uses", "3"], &["true"]);
    assert_eq!(e.run(&[], &["true"]).code, 0);
    let f = journal_file(&e);
    let mut bytes = std::fs::read(&f).expect("read");
    bytes.extend_from_slice(b"{\"v\":1,\"seq\":2,\"pre");
    std::fs::write(&f, &bytes).expect("write");
    let r = e.run(&[], &["true"]);
    r.assert_refused("journal_corrupt");
    assert_eq!(
        std::fs::read(&f).expect("read"),
        bytes,
        "the torn tail was silently rewritten"
    );
    let (code, out) = journal_verify(&e);
    assert_eq!(code, 1);
    assert!(out.contains("torn"), "{out}");
}

#[test]
fn edited_or_removed_records_break_the_chain() {
    let e = Env::new();
    e.approve(&["--uses", "3"], &["true"]);
    assert_eq!(e.run(&[], &["true"]).code, 0);
    assert_eq!(e.run(&[], &["true"]).code, 0);
    let f = journal_file(&e);
    let orig = std::fs::read_to_string(&f).expect("read");
    assert_eq!(journal_verify(&e).0, 0);
    // Edit the first record.
    std::fs::write(&f, orig.replacen("\"use_number\":1", "\"use_number\":0", 1)).expect("write");
    let (code, out) = journal_verify(&e);
    assert_eq!(code, 1);
    assert!(out.contains("line 2"), "{out}");
    // Remove a record.
    let lines: Vec<&str> = orig.lines().collect();
    let mut removed = lines.clone();
    removed.remove(1);
    std::fs::write(&f, removed.join("\n") + "\n").expect("write");
    assert_eq!(journal_verify(&e).0, 1);
    // Reorder two records.
    let mut swapped = lines.clone();
    swapped.swap(0, 1);
    std::fs::write(&f, swapped.join("\n") + "\n").expect("write");
    assert_eq!(journal_verify(&e).0, 1);
    let r = e.run(&[], &["true"]);
    assert_eq!(r.reason(), "journal_corrupt");
}

#[test]
fn a_state_dir_that_is_a_file_is_journal_unavailable() {
    let e = Env::new();
    let marker = e.path("ran");
    let probe = ["sh", "-c", &format!("touch {}", marker.display())];
    e.approve(&[], &probe);
    std::fs::write(&e.state, "not a dir").expect("write");
    let r = e.run(&[], &probe);
    r.assert_refused("journal_unavailable");
    assert!(!marker.exists());
}

#[test]
fn journal_show_and_verify_cross_check_the_receipt() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (r, receipt) = e.run_to_file("r.json", &["true"]);
    let attempt = r.predicate()["attempt_id"]
        .as_str()
        .expect("attempt")
        .to_string();
    let v = e.journal_show(&attempt);
    assert_eq!(v["records"][0]["event"]["kind"], "executing");
    assert_eq!(v["records"][1]["event"]["kind"], "result");
    let o = output(
        cmd()
            .args(["journal", "show", "att-nope"])
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert_eq!(o.status.code(), Some(2));
    let verify_with = |dir: &std::path::Path| {
        output(
            e.verify_cmd(&receipt, &e.runner_pub())
                .arg("--state-dir")
                .arg(dir),
        )
        .status
        .code()
    };
    assert_eq!(verify_with(&e.state), Some(0));
    let other = e.path("other-state");
    std::fs::create_dir(&other).expect("dir");
    assert_eq!(
        verify_with(&other),
        Some(1),
        "a receipt unknown to the journal verified"
    );
}

#[cfg(feature = "fault-injection")]
mod crash_injection {
    use super::*;

    fn crash_at(point: &str) -> (Env, std::path::PathBuf) {
        let e = Env::new();
        let log = e.path("spawns.log");
        let probe = ["sh", "-c", &format!("echo x >> {}", log.display())];
        e.approve(&["--uses", "5"], &probe);
        let o = output(e.run_cmd(&[], &probe).env("GOVERNED_EXEC_FAULT", point));
        assert_eq!(o.status.code(), None, "{point}: the runner did not crash");
        (e, log)
    }

    fn next_run(e: &Env, log: &std::path::Path) -> Run {
        e.run(&[], &["sh", "-c", &format!("echo x >> {}", log.display())])
    }

    #[test]
    fn crash_after_the_executing_record_is_unknown_not_replayed() {
        let (e, log) = crash_at("after_executing");
        assert_eq!(line_count(&log), 0);
        let r = next_run(&e, &log);
        assert_eq!(r.reason(), "unresolved_unknown_outcome");
        assert_eq!(line_count(&log), 0);
        assert_eq!(
            e.journal_executing_count(),
            1,
            "the crashed attempt spent its use"
        );
    }

    #[test]
    fn crash_between_fork_and_exec_is_unknown_not_replayed() {
        let (e, log) = crash_at("after_fork");
        // The child may or may not have run before the parent-death signal.
        let before = line_count(&log);
        assert!(before <= 1);
        let r = next_run(&e, &log);
        assert_eq!(r.reason(), "unresolved_unknown_outcome");
        assert_eq!(line_count(&log), before);
    }

    #[test]
    fn crash_after_reaping_is_unknown_not_replayed() {
        let (e, log) = crash_at("after_reap");
        assert_eq!(line_count(&log), 1);
        let r = next_run(&e, &log);
        assert_eq!(r.reason(), "unresolved_unknown_outcome");
        assert_eq!(line_count(&log), 1);
    }

    #[test]
    fn crash_before_the_result_record_is_unknown_not_replayed() {
        let (e, log) = crash_at("before_result");
        assert_eq!(line_count(&log), 1);
        let r = next_run(&e, &log);
        assert_eq!(r.reason(), "unresolved_unknown_outcome");
        assert_eq!(line_count(&log), 1);
    }

    #[test]
    fn crash_after_the_result_before_printing_is_done() {
        let (e, log) = crash_at("before_print");
        assert_eq!(line_count(&log), 1);
        // The result is durable: the next run is a fresh use, not a replay.
        let r = next_run(&e, &log);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(line_count(&log), 2);
        assert_eq!(e.journal_executing_count(), 2);
        // The receipt of the crashed attempt survives in the state dir.
        let kept = std::fs::read_dir(e.state.join("receipts"))
            .expect("receipts")
            .count();
        assert_eq!(kept, 2);
    }
}

#[test]
fn journal_commands_on_a_state_dir_or_ledger_that_is_not_there_are_bad_input() {
    // A typo or an unmounted file system must not read as a sound, empty
    // journal.
    let e = Env::new();
    let journal = |flag: &str, dir: &std::path::Path, action: &str| {
        output(cmd().arg("journal").arg(flag).arg(dir).arg(action))
            .status
            .code()
    };
    let missing = e.path("no-such-dir");
    for action in ["verify", "list"] {
        assert_eq!(
            journal("--state-dir", &missing, action),
            Some(2),
            "state dir, {action}"
        );
        assert_eq!(
            journal("--ledger", &missing, action),
            Some(2),
            "ledger, {action}"
        );
    }
    let o = output(
        cmd()
            .arg("journal")
            .arg("--state-dir")
            .arg(&missing)
            .arg("verify"),
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-dir"));
    // A directory that is not a ledger (no journal/ in it).
    let empty = e.path("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(journal("--ledger", &empty, "verify"), Some(2));
    // A state dir that exists but has seen no run yet is fine and empty.
    let fresh = e.path("fresh-state");
    std::fs::create_dir(&fresh).unwrap();
    assert_eq!(journal("--state-dir", &fresh, "verify"), Some(0));
}

/// Hold the Goal's journal lock as a stalled runner would.
fn hold_goal_lock(e: &Env) -> nix::fcntl::Flock<std::fs::File> {
    use sha2::Digest;
    let name = format!("{}.jsonl", &hex::encode(sha2::Sha256::digest(b"t"))[..32]);
    let path = e.state.join("journal").join(name);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(&path)
        .expect("the Goal's journal exists after a first run");
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).expect("flock")
}

/// A runner stalled inside the Goal's lock window blocked every other run
/// of the Goal, and the waiting runs ignored SIGTERM.
/// The wait is bounded (journal_unavailable, zero spawn) and cancellable
/// (cancelled_before_spawn, nothing spent).
#[test]
fn a_stalled_lock_holder_neither_hangs_nor_deafens_the_next_run() {
    let e = Env::new();
    e.approve(&["--uses", "5"], &["sh", "-c", "echo ran >> ran.txt"]);
    let first = e.run(&[], &["sh", "-c", "echo ran >> ran.txt"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let held = hold_goal_lock(&e);

    let mut c = e.run_cmd(&[], &["sh", "-c", "echo ran >> ran.txt"]);
    c.env("GOVERNED_EXEC_LOCK_WAIT", "300ms");
    let r = finish_run(output(c));
    r.assert_refused("journal_unavailable");
    assert!(r.stderr.contains("locked"), "{}", r.stderr);

    let mut c = e.run_cmd(&[], &["sh", "-c", "echo ran >> ran.txt"]);
    c.env("GOVERNED_EXEC_LOCK_WAIT", "10m");
    let g = RunnerGuard::spawn(c);
    std::thread::sleep(std::time::Duration::from_millis(500));
    g.signal("TERM");
    let r = g.finish();
    r.assert_refused("cancelled_before_spawn");

    drop(held);
    assert_eq!(
        std::fs::read_to_string(e.ws.join("ran.txt"))
            .unwrap_or_default()
            .lines()
            .count(),
        1,
        "only the first run spawned"
    );
    assert_eq!(e.journal_executing_count(), 1, "nothing else was spent");
}
