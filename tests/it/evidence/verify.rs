//! Exit 0 is not completion: only an authentic receipt that meets every
//! criterion, read back from disk, is VERIFIED_DONE.

use base64::Engine;

use crate::support::*;

const FILE_GOAL: &str = r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 }, { "kind": "file", "path": "out.txt", "exists": true } ] }"#;

#[test]
fn exit_zero_without_the_goals_file_is_not_verified() {
    let e = Env::new();
    e.set_goal(FILE_GOAL);
    e.approve(&[], &["true"]);
    let (r, receipt) = e.run_to_file("r.json", &["true"]);
    assert_eq!(r.code, 0);
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1);
    assert_eq!(out.lines().next(), Some("NOT_VERIFIED"));
    assert!(out.contains("out.txt"), "{out}");
}

fn verified_receipt(e: &Env) -> std::path::PathBuf {
    e.set_goal(FILE_GOAL);
    let probe = ["sh", "-c", "echo data > out.txt"];
    e.approve(&[], &probe);
    let (r, receipt) = e.run_to_file("r.json", &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(e.verify(&receipt).0, 0);
    receipt
}

#[test]
fn a_product_changed_after_the_run_is_not_verified() {
    let e = Env::new();
    let receipt = verified_receipt(&e);
    std::fs::write(e.ws.join("out.txt"), "tampered\n").expect("write");
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1);
    assert!(out.contains("changed on disk"), "{out}");
}

#[test]
fn an_edited_receipt_is_not_verified() {
    let e = Env::new();
    let receipt = verified_receipt(&e);
    let mut env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&receipt).expect("read")).expect("json");
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = b64
        .decode(env["payload"].as_str().expect("payload"))
        .expect("b64");
    let edited = String::from_utf8(payload).expect("utf8").replace(
        "\"leftover_processes_killed\":0",
        "\"leftover_processes_killed\":00",
    );
    env["payload"] = serde_json::Value::String(b64.encode(edited));
    std::fs::write(&receipt, serde_json::to_vec(&env).expect("json")).expect("write");
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.lines().next(), Some("NOT_VERIFIED"));
}

#[test]
fn a_receipt_with_an_unknown_field_is_bad_input_and_a_wrong_payload_type_is_not_verified() {
    let e = Env::new();
    let receipt = verified_receipt(&e);
    let env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&receipt).expect("read")).expect("json");
    let mut extra = env.clone();
    extra["note"] = "hi".into();
    std::fs::write(&receipt, serde_json::to_vec(&extra).expect("json")).expect("write");
    // CONTRACT §5: an unknown field is bad input (2), named.
    let o = output(e.verify_cmd(&receipt, &e.runner_pub()));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("note"));
    let mut wrong = env.clone();
    wrong["payloadType"] = "application/json".into();
    std::fs::write(&receipt, serde_json::to_vec(&wrong).expect("json")).expect("write");
    assert_eq!(e.verify(&receipt).0, 1);
    // URL-safe base64 is accepted, as DSSE allows.
    let b64 = base64::engine::general_purpose::STANDARD;
    let url = base64::engine::general_purpose::URL_SAFE;
    let mut u = env.clone();
    let payload = b64
        .decode(env["payload"].as_str().expect("p"))
        .expect("b64");
    u["payload"] = url.encode(payload).into();
    let sig = b64
        .decode(env["signatures"][0]["sig"].as_str().expect("sig"))
        .expect("b64");
    u["signatures"][0]["sig"] = url.encode(sig).into();
    std::fs::write(&receipt, serde_json::to_vec(&u).expect("json")).expect("write");
    assert_eq!(e.verify(&receipt).0, 0);
}

#[test]
fn a_receipt_signed_by_another_key_is_not_verified() {
    let e = Env::new();
    let receipt = verified_receipt(&e);
    let o = output(cmd().arg("keygen").arg("--out").arg(e.path("other")));
    assert!(o.status.success());
    let o = output(e.verify_cmd(&receipt, &e.path("other.pub")));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("NOT_VERIFIED"));
}

#[test]
fn a_receipt_of_another_goal_or_an_older_revision_is_not_verified() {
    let e = Env::new();
    let receipt = verified_receipt(&e);
    e.set_goal(&FILE_GOAL.replace("\"revision\": 1", "\"revision\": 2"));
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1);
    assert!(out.contains("revision"), "{out}");
    e.set_goal(&FILE_GOAL.replace("\"id\": \"t\"", "\"id\": \"other\""));
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1);
    assert!(out.contains("goal"), "{out}");
}

#[test]
fn a_refusal_receipt_is_never_verified_done() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (r, receipt) = e.run_to_file("r.json", &["false"]);
    assert_eq!(r.code, 125);
    assert_eq!(e.verify(&receipt).0, 1);
}

#[test]
fn outcome_criterion_can_accept_a_timeout() {
    let e = Env::new();
    e.set_goal(
        r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
      "criteria": [ { "kind": "outcome", "in": ["timed_out_reaped"] } ] }"#,
    );
    e.approve(&["--wall-time", "200ms"], &["sleep", "30"]);
    let (r, receipt) = e.run_to_file("r.json", &["sleep", "30"]);
    assert_eq!(r.code, 124);
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn verify_json_is_one_object() {
    let e = Env::new();
    let receipt = verified_receipt(&e);
    let o = output(
        e.verify_cmd(&receipt, &e.runner_pub())
            .arg("--json")
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["verdict"], "VERIFIED_DONE");
}

#[test]
fn sha256_contains_and_absence_criteria_are_checked() {
    let e = Env::new();
    let want = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"; // "hello\n"
    e.set_goal(&format!(
        r#"{{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
          "criteria": [ {{ "kind": "file", "path": "a.txt", "sha256": "{want}" }},
                        {{ "kind": "file", "path": "a.txt", "contains": "hell" }},
                        {{ "kind": "file", "path": "tmp.lock", "exists": false }} ] }}"#
    ));
    let good = ["sh", "-c", "echo hello > a.txt"];
    e.approve(&["--uses", "2"], &good);
    let (r, receipt) = e.run_to_file("good.json", &good);
    assert_eq!(r.code, 0);
    assert_eq!(e.verify(&receipt).0, 0);
    // The same receipt fails once a file that must not exist appears.
    std::fs::write(e.ws.join("tmp.lock"), "x").expect("write");
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1);
    assert!(out.contains("tmp.lock"), "{out}");
    std::fs::remove_file(e.ws.join("tmp.lock")).expect("rm");
    // Different content: both sha256 and contains are unmet, each on its own line.
    let bad = ["sh", "-c", "echo goodbye > a.txt"];
    e.approve(&[], &bad);
    let (_, receipt) = e.run_to_file("bad.json", &bad);
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "NOT_VERIFIED");
    assert!(lines.iter().any(|l| l.contains("sha256")), "{out}");
    assert!(
        lines.iter().any(|l| l.contains("does not contain")),
        "{out}"
    );
}

#[test]
fn a_file_that_is_not_a_receipt_is_bad_input_but_a_receipt_that_fails_is_not_verified() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (_, good) = e.run_to_file("r.json", &["true"]);
    assert_eq!(e.verify(&good).0, 0);
    let env: serde_json::Value = serde_json::from_slice(&std::fs::read(&good).unwrap()).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = e.path(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    // Not a receipt: exit 2, one line naming the file (and the field).
    let mut extra = env.clone();
    extra["extra"] = serde_json::json!(1);
    for (p, names) in [
        (write("garbage.json", b"garbage"), "garbage.json"),
        (write("empty-object.json", b"{}"), "payload"),
        (
            write("extra.json", &serde_json::to_vec(&extra).unwrap()),
            "extra",
        ),
    ] {
        let o = output(e.verify_cmd(&p, &e.runner_pub()));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", p.display());
        assert!(err.contains(names), "{}: {err}", p.display());
        assert!(
            o.stdout.is_empty(),
            "no verdict for a file that is no receipt"
        );
    }
    // A receipt whose payload was altered: its signature fails, NOT_VERIFIED.
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut stmt: serde_json::Value =
        serde_json::from_slice(&b64.decode(env["payload"].as_str().unwrap()).unwrap()).unwrap();
    stmt["predicate"]["outcome"]["exit_code"] = serde_json::json!(0);
    stmt["predicate"]["attempt_id"] = serde_json::json!("att-forged");
    let mut forged = env.clone();
    forged["payload"] = serde_json::json!(b64.encode(serde_json::to_vec(&stmt).unwrap()));
    let p = write("forged.json", &serde_json::to_vec(&forged).unwrap());
    let o = output(e.verify_cmd(&p, &e.runner_pub()));
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("NOT_VERIFIED\n"));
    // Signed by another key than the trusted one: NOT_VERIFIED too.
    let other = e.path("approver.pub");
    let o = output(e.verify_cmd(&good, &other));
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn a_cross_check_against_another_ledger_than_the_receipts_says_which_one_counted_it() {
    let e = Env::new();
    let ledger = e.path("ledger");
    e.approve(&["--ledger", ledger.to_str().unwrap()], &["true"]);
    let (r, receipt) = e.run_to_file("r.json", &["true"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let o = output(
        e.verify_cmd(&receipt, &e.runner_pub())
            .arg("--state-dir")
            .arg(&e.state),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains(ledger.to_str().unwrap()), "{out}");
    let o = output(
        e.verify_cmd(&receipt, &e.runner_pub())
            .arg("--ledger")
            .arg(&ledger),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// SIGTERM/SIGINT were blocked in every subcommand (only `run` reads them,
/// from a signalfd), so a long `verify` could not be interrupted.
#[test]
fn a_verify_waiting_on_its_input_ends_at_sigterm() {
    require_tool!("a_verify_waiting_on_its_input_ends_at_sigterm", "bash");
    let e = Env::new();
    let receipt = e.path("r.json");
    std::fs::write(&receipt, "{}").expect("receipt");
    // --trust is this process's own pipe, which stays open for 30 s.
    let script = format!(
        "exec 3< <(sleep 30); exec {} verify --goal {} --receipt {} --trust /dev/fd/3",
        BIN,
        e.goal.display(),
        receipt.display()
    );
    let mut child = std::process::Command::new("bash")
        .args(["-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("kill");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("verify ignored SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
}
