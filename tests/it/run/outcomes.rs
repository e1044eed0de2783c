//! Leases that survive releases, honest outcome classes, a journal
//! that proves itself, signals forwarded as received, clear bad-input errors.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::*;

const FIXTURE_LEASE_ID: &str = "lease-f8608f9f9d6a0d1cf066";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lease-v1")
}

/// Copy the committed format-1 fixture (approved by the release before the
/// lease format carried a version) into a temp dir.
fn copy_fixture(to: &Path) {
    for f in ["goal.json", "manifest.json", "approver.pub", "approver.key"] {
        std::fs::copy(fixture_dir().join(f), to.join(f)).unwrap();
    }
}

fn run_fixture(dir: &Path, lease: &str) -> Run {
    let (goal, manifest) = (dir.join("goal.json"), dir.join("manifest.json"));
    let (trust, state) = (dir.join("approver.pub"), dir.join("state"));
    let files = RunFiles {
        goal: &goal,
        manifest: &manifest,
        trust: &trust,
        state: &state,
    };
    finish_run(output(run_cmd_with(files, &["--lease", lease], &[])))
}

/// The fixture lease binds this repository's path at approval time and
/// that directory's inode, so on any other checkout it stops at the
/// workspace identity check: after the signature, revocation, goal,
/// validity-window and use checks all passed.
fn assert_fixture_lease_accepted(r: &Run) {
    let ok = (r.code == 0 && r.class() == "exited")
        || (r.code == 125 && r.reason() == "workspace_drift");
    assert!(
        ok,
        "the old lease must pass every check before the workspace identity: {} {} {}",
        r.code,
        r.reason(),
        r.stderr
    );
}

#[test]
fn a_lease_from_an_earlier_release_still_verifies() {
    let t = tempfile::tempdir().unwrap();
    copy_fixture(t.path());
    assert_fixture_lease_accepted(&run_fixture(t.path(), FIXTURE_LEASE_ID));

    // Rewriting the manifest (approving another lease into it) keeps the
    // old lease's signed bytes intact.
    let ws = t.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let (goal, manifest, key) = (
        t.path().join("goal.json"),
        t.path().join("manifest.json"),
        t.path().join("approver.key"),
    );
    let files = ApproveFiles {
        goal: &goal,
        workspace: &ws,
        manifest: &manifest,
        key: &key,
    };
    let o = output(approve_cmd_with(files, &[], &["true"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m: Value =
        serde_json::from_slice(&std::fs::read(t.path().join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["leases"][0].get("format"), None, "format 1 kept as is");
    assert_eq!(m["leases"][1]["format"], 2);
    assert_fixture_lease_accepted(&run_fixture(t.path(), FIXTURE_LEASE_ID));
    // The new lease runs too.
    let new_id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let r = run_fixture(t.path(), &new_id);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
}

#[test]
fn an_unknown_lease_format_is_refused_with_re_approve() {
    let e = Env::new();
    let id = e.approve(&[], &["true"]);
    let id2 = e.approve(&[], &["echo", "ok"]);
    // Edit the text only: the other lease's stored bytes stay as signed.
    let text = std::fs::read_to_string(&e.manifest).unwrap();
    assert!(text.contains("\"format\": 2"), "{text}");
    std::fs::write(
        &e.manifest,
        text.replacen("\"format\": 2", "\"format\": 99", 1),
    )
    .unwrap();
    for r in [e.run(&[], &["true"]), e.run(&["--lease", &id], &[])] {
        r.assert_refused("lease_format_unsupported");
        assert!(
            r.outcome()["message"]
                .as_str()
                .unwrap_or("")
                .contains("re-approve"),
            "{}",
            r.statement
        );
        assert!(r.stderr.contains("re-approve"), "{}", r.stderr);
        assert_eq!(r.outcome()["needs_human"], true);
    }
    // The other lease of the manifest is unaffected, and approving into
    // the manifest keeps the foreign lease verbatim.
    let r = e.run(&["--lease", &id2], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    e.approve(&[], &["echo", "again"]);
    let m2: Value = serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap();
    assert!(m2["leases"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["format"] == 99 && l["body"]["lease_id"] == id.as_str()));
}

#[test]
fn cancel_grace_is_a_lease_field_with_a_2s_default_in_every_tier() {
    let e = Env::new();
    for p in ["short", "standard", "long"] {
        e.approve(&["--profile", p], &["true"]);
    }
    e.approve(&["--cancel-grace", "750ms"], &["echo", "x"]);
    let m: Value = serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap();
    let graces: Vec<u64> = m["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["body"]["limits"]["cancel_grace_ms"].as_u64().unwrap())
        .collect();
    assert_eq!(graces, [2000, 2000, 2000, 750]);
    let o = output(&mut e.approve_cmd(&["--cancel-grace", "1s"], &["echo", "y"]));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cancel grace 1s"));
}

fn wait_file(p: &Path) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !p.exists() && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(p.exists(), "{} never appeared", p.display());
}

/// The child records which signal reached it: the one governed-exec got.
fn forwarded_as_received(sig: &str, num: i32) {
    let e = Env::new();
    let got = e.path("got");
    let ready = e.path("ready");
    let script = format!(
        "for s in INT HUP TERM; do trap \"echo $s > {got}; exit 0\" $s; done; echo > {ready}; while :; do sleep 0.05; done",
        got = got.display(),
        ready = ready.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&[], &probe);
    let g = RunnerGuard::spawn(e.run_cmd(&[], &probe));
    wait_file(&ready);
    g.signal(sig);
    let r = g.finish();
    assert_eq!(
        std::fs::read_to_string(&got).unwrap_or_default().trim(),
        sig,
        "the child must get the signal governed-exec received"
    );
    assert_eq!((r.code, r.class()), (128 + num, "cancelled_reaped"));
    assert_eq!(r.outcome()["signal"], num);
}

#[test]
fn sigint_reaches_the_child_as_sigint() {
    forwarded_as_received("INT", 2);
}

#[test]
fn sighup_reaches_the_child_as_sighup() {
    forwarded_as_received("HUP", 1);
}

#[test]
fn sigterm_reaches_the_child_as_sigterm() {
    forwarded_as_received("TERM", 15);
}

#[test]
fn cancel_escalates_after_the_cancel_grace_not_the_kill_grace() {
    let e = Env::new();
    let ready = e.path("ready");
    let script = format!(
        "trap '' TERM; echo > {}; while :; do sleep 0.05; done",
        ready.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--kill-grace", "60s", "--cancel-grace", "300ms"], &probe);
    let g = RunnerGuard::spawn(e.run_cmd(&[], &probe));
    wait_file(&ready);
    let t = std::time::Instant::now();
    g.signal("TERM");
    let r = g.finish();
    let took = t.elapsed();
    assert_eq!(
        (r.code, r.class()),
        (143, "cancelled_reaped"),
        "{}",
        r.stderr
    );
    assert_eq!(r.predicate()["cleanup"]["state"], "gone");
    assert!(
        took < std::time::Duration::from_secs(8),
        "escalation waited {took:?}: the 60s kill grace instead of the 300ms cancel grace"
    );
}

#[cfg(feature = "fault-injection")]
fn journal_list(e: &Env) -> Value {
    let o = output(
        cmd()
            .args(["journal", "list", "--json"])
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[cfg(feature = "fault-injection")]
fn resolve(e: &Env, attempt: &str) -> std::process::Output {
    output(
        cmd()
            .args([
                "resolve",
                "--attempt",
                attempt,
                "--as",
                "failed",
                "--by",
                "ops",
            ])
            .arg("--state-dir")
            .arg(&e.state),
    )
}

fn journal_refusals(e: &Env) -> Vec<Value> {
    let mut out = vec![];
    for f in std::fs::read_dir(e.state.join("journal"))
        .unwrap()
        .flatten()
    {
        for l in std::fs::read_to_string(f.path()).unwrap().lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            if v["event"]["kind"] == "refusal" {
                out.push(v["event"].clone());
            }
        }
    }
    out
}

/// A result record of class `unknown` blocks the Goal until resolved.
#[cfg(feature = "fault-injection")]
#[test]
fn an_unknown_result_blocks_the_goal_until_resolved() {
    let e = Env::new();
    e.approve(&["--uses", "3"], &["true"]);
    let r = finish_run(output(
        e.run_cmd(&[], &["true"])
            .env("GOVERNED_EXEC_FAULT", "cleanup_unconfirmed"),
    ));
    assert_eq!((r.code, r.class()), (122, "unknown"), "{}", r.stderr);
    assert_eq!(r.reason(), "cleanup_unconfirmed");
    let attempt = r.predicate()["attempt_id"].as_str().unwrap().to_string();
    let l = journal_list(&e);
    assert_eq!(l[0]["state"], "unknown");
    assert_eq!(l[0]["outcome"], "unknown");
    e.run(&[], &["true"])
        .assert_refused("unresolved_unknown_outcome");
    let o = resolve(&e, &attempt);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(journal_list(&e)[0]["state"], "resolved");
    let r = e.run(&[], &["true"]);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    // A second resolve has nothing left to resolve.
    assert_eq!(resolve(&e, &attempt).status.code(), Some(2));
}

/// governed-exec's own failure before the program existed is
/// `known_not_executed`/`exec_failed`, and does not block the Goal.
#[cfg(feature = "fault-injection")]
#[test]
fn a_spawn_failure_is_exec_failed_never_unknown() {
    let e = Env::new();
    e.approve(&["--uses", "2"], &["true"]);
    let r = finish_run(output(
        e.run_cmd(&[], &["true"])
            .env("GOVERNED_EXEC_FAULT", "spawn_enosys"),
    ));
    r.assert_refused("exec_failed");
    assert_eq!(r.predicate()["cleanup"]["state"], "not_started");
    assert!(r.stderr.contains("os error 38"), "{}", r.stderr);
    assert_eq!(journal_list(&e)[0]["outcome"], "known_not_executed");
    let r = e.run(&[], &["true"]);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
}

#[test]
fn a_cancel_before_the_use_is_spent_spends_nothing() {
    use sha2::Digest;
    let e = Env::new();
    let marker = e.path("ran");
    let probe = ["sh", "-c", &format!("touch {}", marker.display())];
    e.approve(&["--uses", "1"], &probe);
    // Hold the Goal's journal lock so the runner waits before admission.
    let jdir = e.state.join("journal");
    std::fs::create_dir_all(&jdir).unwrap();
    let name = format!("{}.jsonl", &hex_of(&sha2::Sha256::digest(b"t"))[..32]);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(jdir.join(name))
        .unwrap();
    let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let g = RunnerGuard::spawn(e.run_cmd(&[], &probe));
    std::thread::sleep(std::time::Duration::from_millis(600));
    g.signal("INT");
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(lock);
    let r = g.finish();
    r.assert_refused("cancelled_before_spawn");
    assert!(!marker.exists());
    assert_eq!(e.journal_executing_count(), 0);
    // The cancel ended the wait for the Goal's lock, which another process
    // held: the refusal could not be journaled under it, and is not (a
    // stalled holder would otherwise keep the cancelled run waiting).
    assert!(!journal_refusals(&e)
        .iter()
        .any(|v| v["reason"] == "cancelled_before_spawn"));
    // The single use is still there.
    let r = e.run(&[], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    assert!(marker.exists());
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn refusals_after_admission_are_journaled() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let r = finish_run(output(
        e.run_cmd(&[], &["true"])
            .env("TMPDIR", e.path("no-such-dir")),
    ));
    r.assert_refused("isolation_unavailable");
    let refusals = journal_refusals(&e);
    assert!(
        refusals
            .iter()
            .any(|v| v["reason"] == "isolation_unavailable" && v["lease_id"].is_string()),
        "{refusals:?}"
    );
    assert_eq!(e.journal_executing_count(), 0);
}

#[test]
fn a_bad_input_refusal_on_a_fresh_state_dir_is_signed() {
    let e = Env::new();
    let req = e.path("req.json");
    std::fs::write(
        &req,
        r#"{ "executable": "true", "argv": [], "cwd": ".", "profile": "standard", "shell": true }"#,
    )
    .unwrap();
    let r = e.run(&["--request", req.to_str().unwrap()], &[]);
    r.assert_refused("invalid_input");
    let env: Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(
        env["signatures"].as_array().map(Vec::len),
        Some(1),
        "unsigned"
    );
    assert!(e.runner_pub().exists(), "no runner.pub beside the key");
    let p = e.path("refusal.json");
    std::fs::write(&p, &r.stdout).unwrap();
    let (code, out) = e.verify(&p);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("NOT_VERIFIED"), "{out}");
    // The refusal is journaled too.
    assert!(journal_refusals(&e)
        .iter()
        .any(|v| v["reason"] == "invalid_input"));
}

fn journal_verify(e: &Env) -> (i32, String) {
    let o = output(
        cmd()
            .args(["journal", "verify", "--state-dir"])
            .arg(&e.state),
    );
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string(),
    )
}

fn checkpoint_file(e: &Env) -> PathBuf {
    let dir = e.state.join("checkpoints");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap_or_else(|| panic!("no checkpoint in {}", dir.display()))
}

/// 18 records (a 1-use lease spent once, then 8 runs of another lease):
/// the next open of the journal saves a checkpoint; a forged one that sets
/// the spent use back to zero is not trusted, and `journal verify` says so.
#[test]
fn a_forged_checkpoint_does_not_give_back_a_spent_use() {
    let e = Env::new();
    let once = e.approve(&["--uses", "1"], &["true"]);
    e.approve(&["--uses", "20"], &["echo", "x"]);
    assert_eq!(e.run(&[], &["true"]).code, 0);
    for _ in 0..8 {
        let r = e.run(&[], &["echo", "x"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    // This open parses 18 records and saves the checkpoint.
    e.run(&[], &["true"]).assert_refused("lease_exhausted");
    let cp_path = checkpoint_file(&e);
    let (code, out) = journal_verify(&e);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("9 use(s) spent"), "{out}");
    let mut cp: Value = serde_json::from_slice(&std::fs::read(&cp_path).unwrap()).unwrap();
    assert_eq!(cp["summary"]["uses"][&once], 1);
    cp["summary"]["uses"][&once] = 0.into();
    std::fs::write(&cp_path, serde_json::to_vec(&cp).unwrap()).unwrap();

    let (code, out) = journal_verify(&e);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("BROKEN"), "{out}");
    assert!(
        out.contains(&format!("lease {once}: 1 uses spent, checkpoint says 0")),
        "{out}"
    );
    e.run(&[], &["true"]).assert_refused("lease_exhausted");
    // That open did not trust it, parsed the records and re-checkpointed.
    assert_eq!(journal_verify(&e).0, 0);
}

/// A checkpoint edited to drop an unknown attempt does not unblock the Goal.
#[cfg(feature = "fault-injection")]
#[test]
fn a_forged_checkpoint_does_not_hide_an_unknown_attempt() {
    let e = Env::new();
    e.approve(&["--uses", "5"], &["true"]);
    let r = finish_run(output(
        e.run_cmd(&[], &["true"])
            .env("GOVERNED_EXEC_FAULT", "cleanup_unconfirmed"),
    ));
    assert_eq!(r.code, 122, "{}", r.stderr);
    // 2 records, then 16 journaled refusals; the 18th open checkpoints.
    for _ in 0..17 {
        e.run(&[], &["true"])
            .assert_refused("unresolved_unknown_outcome");
    }
    let cp_path = checkpoint_file(&e);
    let mut cp: Value = serde_json::from_slice(&std::fs::read(&cp_path).unwrap()).unwrap();
    assert_eq!(cp["summary"]["open"].as_object().map(|o| o.len()), Some(1));
    cp["summary"]["open"] = serde_json::json!({});
    std::fs::write(&cp_path, serde_json::to_vec(&cp).unwrap()).unwrap();
    let (code, out) = journal_verify(&e);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the checkpoint hides it"), "{out}");
    e.run(&[], &["true"])
        .assert_refused("unresolved_unknown_outcome");
}

#[test]
fn journal_verify_on_an_unreadable_journal_directory_fails() {
    let e = Env::new();
    std::fs::create_dir_all(&e.state).unwrap();
    // A file where the directory should be: unreadable as a directory even
    // for root.
    std::fs::write(e.state.join("journal"), b"not a directory").unwrap();
    let (code, out) = journal_verify(&e);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("BROKEN"), "{out}");
    assert!(out.contains("journal"), "{out}");
}

fn approve_fails(e: &Env, flags: &[&str]) -> String {
    let o = output(&mut e.approve_cmd(flags, &["true"]));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{flags:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!e.manifest.exists(), "{flags:?} wrote a lease");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    err
}

#[test]
fn a_huge_ttl_is_a_clear_usage_error() {
    let e = Env::new();
    for ttl in ["10000years", "100000years", "500000000years"] {
        let err = approve_fails(&e, &["--ttl", ttl]);
        assert!(err.contains("--ttl"), "{err}");
    }
    let err = approve_fails(&e, &["--wall-time", "600000000years"]);
    assert!(err.contains("--wall-time"), "{err}");
}

#[test]
fn impossible_limits_are_refused_at_approve_with_the_minimum() {
    let e = Env::new();
    for (flags, min) in [
        (&["--max-open-files", "1"][..], "5"),
        (&["--memory", "1"][..], "16MiB"),
        (&["--ttl", "0s"][..], "1s"),
        (&["--uses", "0"][..], "1"),
    ] {
        let err = approve_fails(&e, flags);
        assert!(err.contains(flags[0]), "{err}");
        assert!(
            err.contains(&format!("minimum that works is {min}")),
            "{err}"
        );
    }
    // The minimums themselves run.
    let probe = ["sh", "-c", "echo ok"];
    e.approve(
        &["--max-open-files", "5", "--memory", "16MiB", "--ttl", "1m"],
        &probe,
    );
    let r = e.run(&[], &probe);
    assert_eq!((r.code, r.stdout_text()), (0, "ok\n"), "{}", r.stderr);
}

#[test]
fn a_goal_with_no_criteria_is_rejected_everywhere() {
    let e = Env::new();
    e.approve(&[], &["false"]);
    let (r, receipt) = e.run_to_file("r.json", &["false"]);
    assert_eq!(r.code, 1);
    e.set_goal(
        r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1, "criteria": [] }"#,
    );
    let o = output(&mut e.approve_cmd(&[], &["false"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("criteria"));
    let r = e.run(&[], &["false"]);
    r.assert_refused("invalid_input");
    assert!(r.stderr.contains("criteria"), "{}", r.stderr);
    let o = output(e.verify_cmd(&receipt, &e.runner_pub()));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("criteria"));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("VERIFIED_DONE"));
}

#[test]
fn verify_to_a_closed_stdout_is_an_ordinary_error() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (_, receipt) = e.run_to_file("r.json", &["true"]);
    let (rd, wr) = nix::unistd::pipe().unwrap();
    drop(rd);
    let o = output(
        e.verify_cmd(&receipt, &e.runner_pub())
            .stdout(std::process::Stdio::from(wr)),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("stdout"), "{err}");
}

#[test]
fn inputs_read_whole_have_a_size_bound() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let big = e.path("big.json");
    // Valid-looking JSON start, then 65 MiB of spaces: past every bound.
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(65 * 1024 * 1024).unwrap();
    drop(f);
    let bigs = big.to_str().unwrap();
    let r = e.run(&["--request", bigs], &[]);
    r.assert_refused("invalid_input");
    assert!(r.stderr.contains("bound"), "{}", r.stderr);
    let files = RunFiles {
        manifest: &big,
        ..e.files()
    };
    let r = finish_run(output(run_cmd_with(files, &[], &["true"])));
    r.assert_refused("invalid_input");
    assert!(
        r.stderr.contains("manifest") && r.stderr.contains("bound"),
        "{}",
        r.stderr
    );
    let files = RunFiles {
        goal: &big,
        ..e.files()
    };
    let r = finish_run(output(run_cmd_with(files, &[], &["true"])));
    r.assert_refused("invalid_input");
    assert!(
        r.stderr.contains("goal") && r.stderr.contains("bound"),
        "{}",
        r.stderr
    );
    for (what, c) in [
        ("receipt", e.verify_cmd(&big, &e.trust)),
        ("trust", e.verify_cmd(&e.goal, &big)),
    ] {
        let mut c = c;
        let o = output(&mut c);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains("bound"), "{what}: {err}");
    }
    // A request on stdin.
    let mut c = e.run_cmd(&["--request", "-"], &[]);
    c.stdin(std::fs::File::open(&big).unwrap());
    let r = finish_run(output(c));
    r.assert_refused("invalid_input");
    assert!(
        r.stderr.contains("stdin") && r.stderr.contains("bound"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_lease_not_yet_valid_is_refused_until_its_time() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let later = humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() + std::time::Duration::from_secs(3600),
    )
    .to_string();
    resign_first_lease(&e, |b| b["issued_at"] = later.clone().into());
    e.run(&[], &["true"]).assert_refused("lease_not_yet_valid");
    // The same re-signing with a past issue time runs: only the time mattered.
    let earlier = humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() - std::time::Duration::from_secs(60),
    )
    .to_string();
    resign_first_lease(&e, |b| b["issued_at"] = earlier.clone().into());
    assert_eq!(e.run(&[], &["true"]).code, 0);
}

#[test]
fn a_revocation_only_in_the_manifest_is_honoured() {
    let e = Env::new();
    let id = e.approve(&["--uses", "3"], &["true"]);
    assert_eq!(e.run(&[], &["true"]).code, 0);
    // Edit the text: the lease's stored signed bytes stay as they are.
    let text = std::fs::read_to_string(&e.manifest).unwrap();
    let entry = format!(
        r#""revocations": [{{ "lease_id": "{id}", "by": "ops", "at": "2026-01-01T00:00:00Z" }}]"#
    );
    assert!(text.contains("\"revocations\": []"), "{text}");
    std::fs::write(&e.manifest, text.replace("\"revocations\": []", &entry)).unwrap();
    e.run(&[], &["true"]).assert_refused("lease_revoked");
    // The journal holds no revocation: the manifest alone decided.
    let text = std::fs::read_dir(e.state.join("journal"))
        .unwrap()
        .flatten()
        .map(|f| std::fs::read_to_string(f.path()).unwrap())
        .collect::<String>();
    assert!(!text.contains("\"kind\":\"revocation\""));
}

#[test]
fn verify_with_the_state_dir_matches_each_receipt_to_its_own_attempt() {
    let e = Env::new();
    e.approve(&["--uses", "2"], &["true"]);
    let (_, r1) = e.run_to_file("r1.json", &["true"]);
    let (_, r2) = e.run_to_file("r2.json", &["true"]);
    for r in [&r1, &r2] {
        let o = output(
            e.verify_cmd(r, &e.runner_pub())
                .arg("--state-dir")
                .arg(&e.state),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{}: {out}", r.display());
    }
    // Another state dir's journal does not know these attempts.
    let other = e.path("other-state");
    std::fs::create_dir_all(other.join("journal")).unwrap();
    let o = output(
        e.verify_cmd(&r2, &e.runner_pub())
            .arg("--state-dir")
            .arg(&other),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("not in the journal"), "{out}");
}

#[test]
fn the_default_state_dir_falls_back_in_order() {
    let e = Env::new();
    e.approve(&["--uses", "3"], &["true"]);
    let (a, b, home) = (e.path("a"), e.path("b"), e.path("home"));
    let run = |envs: &[(&str, &Path)]| {
        let mut c = run_cmd_default_state(e.files(), &home, &[], &["true"]);
        for (k, v) in envs {
            c.env(k, v);
        }
        let r = finish_run(output(c));
        assert_eq!(r.code, 0, "{}", r.stderr);
    };
    run(&[("GOVERNED_EXEC_STATE_DIR", &a), ("XDG_STATE_HOME", &b)]);
    assert!(a.join("runner.key").exists() && a.join("journal").exists());
    run(&[("XDG_STATE_HOME", &b)]);
    assert!(b.join("governed-exec/runner.key").exists());
    run(&[]);
    assert!(home.join(".local/state/governed-exec/runner.key").exists());
    // Each counted one use in its own journal.
    for d in [
        a,
        b.join("governed-exec"),
        home.join(".local/state/governed-exec"),
    ] {
        let o = output(
            cmd()
                .args(["journal", "list", "--json", "--state-dir"])
                .arg(&d),
        );
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v.as_array().map(Vec::len), Some(1), "{}", d.display());
    }
}

#[cfg(feature = "fault-injection")]
#[test]
fn several_goals_share_a_state_dir_without_sharing_state() {
    let e = Env::new();
    e.approve(&["--uses", "2"], &["true"]);
    let g2 = e.path("goal2.json");
    std::fs::write(
        &g2,
        r#"{ "schema": "governed-exec/goal/v1", "id": "other", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 } ] }"#,
    )
    .unwrap();
    // The second goal's lease, in the same manifest.
    let other = ApproveFiles {
        goal: &g2,
        ..e.approve_files()
    };
    assert!(output(approve_cmd_with(other, &["--uses", "2"], &["true"]))
        .status
        .success());
    // Goal t gets an unknown outcome; goal "other" is not blocked by it.
    let r = finish_run(output(
        e.run_cmd(&[], &["true"])
            .env("GOVERNED_EXEC_FAULT", "cleanup_unconfirmed"),
    ));
    assert_eq!(r.code, 122);
    e.run(&[], &["true"])
        .assert_refused("unresolved_unknown_outcome");
    let run_other = || {
        let files = RunFiles {
            goal: &g2,
            ..e.files()
        };
        finish_run(output(run_cmd_with(files, &[], &["true"])))
    };
    assert_eq!(run_other().code, 0);
    assert_eq!(run_other().code, 0);
    run_other().assert_refused("lease_exhausted");
    let (code, out) = journal_verify(&e);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok")).count(),
        2,
        "{out}"
    );
    assert!(out.contains("1 unknown attempt(s) blocking"), "{out}");
    assert!(out.contains("2 use(s) spent"), "{out}");
}

/// An early return after the spawn drops the tree's owner, which kills and
/// confirms every process of the run, even one that left the session.
#[cfg(feature = "fault-injection")]
#[test]
fn an_early_return_after_spawn_still_kills_the_tree() {
    let e = Env::new();
    let gc = e.path("gc.pid");
    let script = format!("setsid sleep 1000 & echo $! > {}; sleep 0.2", gc.display());
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&[], &probe);
    let r = finish_run(output(
        e.run_cmd(&[], &probe)
            .env("GOVERNED_EXEC_FAULT", "supervision_error"),
    ));
    assert_eq!((r.code, r.class()), (122, "unknown"), "{}", r.stderr);
    let pid = read_pid(&gc);
    let gone = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        !pid_alive(pid)
    });
    if !gone {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(gone, "a process of the run outlived an early return");
}
