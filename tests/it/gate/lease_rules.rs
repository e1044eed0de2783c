//! Finite, exact authority: what a lease does and does not allow.

use crate::support::*;

#[test]
fn no_prefix_or_wildcard_match() {
    let e = Env::new();
    e.approve(&[], &["echo", "a"]);
    for cmdline in [
        &["echo", "a", "b"][..],
        &["echo"][..],
        &["echo", "a*"][..],
        &["/bin/echo", "a"][..],
    ] {
        let r = e.run(&[], cmdline);
        assert_eq!(r.code, 125, "{cmdline:?}");
        assert_eq!(r.reason(), "no_matching_lease", "{cmdline:?}");
    }
    let r = e.run(&["--profile", "long"], &["echo", "a"]);
    assert_eq!(r.reason(), "no_matching_lease", "another profile matched");
    let r = e.run(&["--cwd", "./"], &["echo", "a"]);
    assert_eq!(
        r.reason(),
        "no_matching_lease",
        "another cwd spelling matched"
    );
    assert_eq!(e.journal_executing_count(), 0);
    // The lease is intact after all those refusals.
    assert_eq!(e.run(&[], &["echo", "a"]).code, 0);
}

#[test]
fn unknown_request_field_is_refused_and_named() {
    let e = Env::new();
    let req = e.path("req.json");
    std::fs::write(
        &req,
        r#"{ "executable": "true", "argv": [], "cwd": ".", "profile": "standard", "shell": true }"#,
    )
    .expect("req");
    let o = output(&mut e.approve_cmd(&["--request", req.to_str().unwrap_or_default()], &[]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("shell"));
    let r = e.run(&["--request", req.to_str().unwrap_or_default()], &[]);
    r.assert_refused("invalid_input");
    assert!(r.stderr.contains("shell"), "{}", r.stderr);
    assert_eq!(
        r.stderr.lines().count(),
        1,
        "not a one-line error: {}",
        r.stderr
    );
}

#[test]
fn goal_with_unknown_kind_is_rejected_everywhere() {
    let e = Env::new();
    e.set_goal(r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1, "criteria": [ { "kind": "tests_pass" } ] }"#);
    let o = output(&mut e.approve_cmd(&[], &["true"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("tests_pass"));
    let r = e.run(&[], &["true"]);
    assert_eq!(r.code, 125);
    assert!(r.stderr.contains("tests_pass"));
}

#[test]
fn an_unknown_field_in_any_criterion_kind_is_named_and_rejected() {
    // Every kind is a closed shape, the one without fields included.
    for criterion in [
        r#"{ "kind": "no_leftover_processes", "timeout": 5 }"#,
        r#"{ "kind": "exit_code", "equals": 0, "timeout": 5 }"#,
        r#"{ "kind": "outcome", "in": ["exited"], "timeout": 5 }"#,
        r#"{ "kind": "file", "path": "a", "timeout": 5 }"#,
    ] {
        let e = Env::new();
        e.set_goal(&format!(
            r#"{{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1, "criteria": [ {criterion} ] }}"#
        ));
        let o = output(&mut e.approve_cmd(&[], &["true"]));
        assert_eq!(o.status.code(), Some(2), "{criterion}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("timeout"),
            "{criterion}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let r = e.run(&[], &["true"]);
        assert_eq!(r.code, 125, "{criterion}");
        assert!(r.stderr.contains("timeout"), "{criterion}: {}", r.stderr);
    }
}

#[test]
fn goal_revision_bump_invalidates_the_lease() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    e.set_goal(&DEFAULT_GOAL.replace("\"revision\": 1", "\"revision\": 2"));
    let r = e.run(&[], &["true"]);
    r.assert_refused("goal_mismatch");
}

#[test]
fn expired_lease_is_refused() {
    let e = Env::new();
    e.approve(&["--ttl", "1s"], &["true"]);
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let r = e.run(&[], &["true"]);
    r.assert_refused("lease_expired");
    assert_eq!(r.outcome()["needs_human"], true);
}

#[test]
fn uses_are_finite_and_counted_by_actual_spawns() {
    let e = Env::new();
    let log = e.path("spawns.log");
    let probe = ["sh", "-c", &format!("echo x >> {}", log.display())];
    e.approve(&["--uses", "2"], &probe);
    for n in 1..=2 {
        let r = e.run(&[], &probe);
        assert_eq!(r.code, 0);
        // The executing record numbers the use it spends.
        let attempt = r.predicate()["attempt_id"]
            .as_str()
            .expect("attempt")
            .to_string();
        let v = e.journal_show(&attempt);
        assert_eq!(v["records"][0]["event"]["use_number"], n);
        assert_eq!(v["records"][0]["event"]["max_uses"], 2);
    }
    let r = e.run(&[], &probe);
    r.assert_refused("lease_exhausted");
    assert_eq!(line_count(&log), 2);
}

#[test]
fn edited_lease_in_the_manifest_is_refused() {
    let e = Env::new();
    let marker = e.path("ran");
    let probe = ["sh", "-c", &format!("touch {}", marker.display())];
    e.approve(&["--wall-time", "5s"], &probe);
    // Raise the wall time in place; fingerprint and signature left untouched.
    let m = std::fs::read_to_string(&e.manifest).expect("manifest");
    // (The signed body is stored compact.)
    let edited = m.replace("\"wall_time_ms\":5000", "\"wall_time_ms\":500000");
    assert_ne!(m, edited);
    std::fs::write(&e.manifest, edited).expect("write");
    let r = e.run(&[], &probe);
    r.assert_refused("lease_signature_invalid");
    assert!(!marker.exists());
}

#[test]
fn lease_signed_by_another_key_is_refused() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let o = output(cmd().arg("keygen").arg("--out").arg(e.path("other")));
    assert!(o.status.success());
    let r = finish_run(output(e.run_cmd_trusting(
        &e.path("other.pub"),
        &[],
        &["true"],
    )));
    r.assert_refused("lease_signature_invalid");
}

#[test]
fn revoked_lease_is_refused_and_unknown_ids_are_rejected() {
    let e = Env::new();
    let id = e.approve(&["--uses", "3"], &["true"]);
    let o = output(
        cmd()
            .arg("revoke")
            .arg("--manifest")
            .arg(&e.manifest)
            .arg("--lease")
            .arg("lease-nope")
            .arg("--by")
            .arg("ops")
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert_eq!(o.status.code(), Some(2), "a typo looked like success");
    let o = output(
        cmd()
            .arg("revoke")
            .arg("--manifest")
            .arg(&e.manifest)
            .arg("--lease")
            .arg(&id)
            .arg("--by")
            .arg("ops")
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = e.run(&[], &["true"]);
    r.assert_refused("lease_revoked");
}

#[test]
fn bad_run_usage_exits_125() {
    let e = Env::new();
    let o = output(cmd().arg("run").arg("--goal").arg(&e.goal));
    assert_eq!(o.status.code(), Some(125));
    // Even unparseable usage yields one receipt-shaped document naming the flag.
    let r = finish_run(o);
    assert_eq!(r.reason(), "invalid_input");
    assert!(r.stderr.contains("--manifest"), "{}", r.stderr);
    let missing = e.path("missing.json");
    let files = RunFiles {
        goal: &missing,
        ..e.files()
    };
    let o = output(run_cmd_with(files, &[], &["true"]));
    assert_eq!(o.status.code(), Some(125));
    let r = finish_run(o);
    assert_eq!(r.reason(), "invalid_input");
    assert!(r.stderr.contains("missing.json"));
    // The refusal is signed, so the runner key may now exist (created as a
    // successful run would); nothing else is written: no Goal, no journal.
    let mut made: Vec<String> = std::fs::read_dir(&e.state)
        .map(|rd| {
            rd.flatten()
                .map(|f| f.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    made.sort();
    assert_eq!(made, ["runner.key", "runner.pub"], "bad input wrote state");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&r.stdout).unwrap()["signatures"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn a_missing_subcommand_is_bad_usage_and_help_is_success() {
    for args in [&[][..], &["journal"][..], &["receipt"][..]] {
        let o = output(cmd().args(args));
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}: help goes to stderr");
        assert!(
            !o.stderr.is_empty(),
            "{args:?}: the help names what is missing"
        );
    }
    for args in [
        &["--help"][..],
        &["journal", "--help"][..],
        &["--version"][..],
    ] {
        assert_eq!(output(cmd().args(args)).status.code(), Some(0), "{args:?}");
    }
    // `run` with nothing: still a refusal receipt (exit 125), never help.
    let o = output(cmd().arg("run"));
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stdout).contains("payload"));
}
