//! The first hour: the CLI explains itself. Every message a new
//! user meets says what happened and what to do next: usage errors carry
//! the usage, a run ends with one line, a refused request names the lease
//! it nearly matched, a swapped key names both key ids, a lease that will
//! not verify says so at approval.

use std::io::Read;
use std::process::Stdio;

use crate::support::*;

fn stderr_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_run_usage_error_keeps_its_refusal_document_and_shows_the_usage() {
    let e = Env::new();
    let o = output(cmd().arg("run").arg("--goal").arg(&e.goal));
    assert_eq!(o.status.code(), Some(125));
    let err = stderr_of(&o);
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("governed-exec: refused (invalid_input): ") && first.contains("--trust"),
        "{err}"
    );
    assert!(
        err.contains("Usage: governed-exec run") && err.contains("--trust <APPROVER.pub>"),
        "clap's usage text is missing: {err}"
    );
    // Not a terminal: the harness still gets its one document.
    let r = finish_run(o);
    assert_eq!(r.reason(), "invalid_input");
}

#[test]
fn a_run_usage_error_prints_no_json_on_a_terminal() {
    let pty = match nix::pty::openpty(None, None) {
        Ok(p) => p,
        Err(e) => {
            // Under a write scope (the suite governed by governed-exec)
            // /dev/ptmx cannot be opened for writing.
            skip!("no pseudo-terminal can be opened here: {e}");
            return;
        }
    };
    let mut c = cmd();
    c.arg("run")
        .stdout(Stdio::from(pty.slave))
        .stderr(Stdio::piped());
    let child = c.spawn().expect("spawn");
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(125), "{}", stderr_of(&o));
    // Every writer of the terminal is gone: read what reached it.
    let mut master = std::fs::File::from(pty.master);
    nix::fcntl::fcntl(
        std::os::fd::AsRawFd::as_raw_fd(&master),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .expect("nonblock");
    let mut seen = Vec::new();
    let _ = master.read_to_end(&mut seen);
    let seen = String::from_utf8_lossy(&seen);
    assert!(
        !seen.contains("payload"),
        "the refusal JSON was dumped on the terminal: {seen}"
    );
    let err = stderr_of(&o);
    assert!(
        err.contains("not printed to a terminal") && err.contains("Usage:"),
        "{err}"
    );
}

#[test]
fn approve_run_and_verify_help_carry_examples_and_say_which_key() {
    for (sub, key) in [
        ("approve", "approver's private key"),
        ("run", "APPROVER's public key"),
        ("verify", "RUNNER's public key"),
    ] {
        let o = output(cmd().arg(sub).arg("--help"));
        assert_eq!(o.status.code(), Some(0), "{sub}");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("\nEXAMPLES:\n"), "{sub}: {text}");
        assert!(
            text.contains(&format!("governed-exec {sub} ")),
            "{sub}: {text}"
        );
        assert!(
            text.contains(key),
            "{sub} --help does not say {key:?}: {text}"
        );
        // Every option of the help has a description: after the flag on
        // its line, or (clap's layout for long flags) on the next line,
        // indented deeper.
        let options = text.split("\nEXAMPLES:").next().unwrap_or("");
        let lines: Vec<&str> = options.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if !(t.starts_with("--") || t.starts_with("-h,")) {
                continue;
            }
            let inline = line.split("  ").filter(|w| !w.trim().is_empty()).count() >= 2;
            let indent = line.len() - t.len();
            let below = lines.get(i + 1).is_some_and(|n| {
                let nt = n.trim_start();
                !nt.is_empty() && !nt.starts_with('-') && n.len() - nt.len() > indent
            });
            assert!(inline || below, "{sub}: an option without help: {line:?}");
        }
    }
}

#[test]
fn a_run_ends_with_one_closing_line_unless_quiet() {
    let e = Env::new();
    e.approve(&["--uses", "2"], &["sh", "-c", "exit 3"]);
    let receipt = e.path("r.json");
    let r = finish_run(output(e.run_cmd(
        &["--receipt", receipt.to_str().unwrap()],
        &["sh", "-c", "exit 3"],
    )));
    assert_eq!(r.code, 3, "{}", r.stderr);
    let last = r.stderr.lines().last().unwrap_or("");
    let attempt = decode_envelope(&std::fs::read(&receipt).unwrap())["predicate"]["attempt_id"]
        .as_str()
        .unwrap()
        .to_string();
    let copy = e.state.join("receipts").join(format!("{attempt}.json"));
    assert!(
        last.starts_with("governed-exec: exited, exit code 3, ")
            && last.ends_with(&format!(
                "; receipt: {} (copy: {})",
                receipt.display(),
                copy.display()
            )),
        "{}",
        r.stderr
    );
    assert!(copy.exists());
    let r = finish_run(output(e.run_cmd(&["--quiet"], &["sh", "-c", "exit 3"])));
    assert_eq!(r.code, 3);
    assert!(
        !r.stderr.contains("governed-exec: exited"),
        "--quiet still printed the closing line: {}",
        r.stderr
    );
    assert_eq!(r.class(), "exited");
}

#[test]
fn no_matching_lease_names_the_closest_lease_and_the_first_difference() {
    require_tool!(
        "no_matching_lease_names_the_closest_lease_and_the_first_difference",
        "python3"
    );
    let e = Env::new();
    e.approve(&[], &["sh", "-c", "true"]);
    let near = e.approve(&[], &["python3", "-m", "pytest", "-q"]);
    let r = e.run(&[], &["python3", "-m", "pytest", "--verbose"]);
    r.assert_refused("no_matching_lease");
    let want = format!(
        "the closest is lease {near} (goal \"t\"), which differs at argv[2]: approved \"-q\", requested \"--verbose\""
    );
    assert!(r.stderr.contains(&want), "{}", r.stderr);
    assert!(
        r.outcome()["message"]
            .as_str()
            .unwrap_or("")
            .contains(&want),
        "{}",
        r.outcome()
    );
    // A missing element is named as missing.
    let r = e.run(&[], &["python3", "-m", "pytest"]);
    assert!(
        r.stderr
            .contains("argv[2]: approved \"-q\", requested nothing"),
        "{}",
        r.stderr
    );
}

#[test]
fn executable_drift_names_the_approved_and_the_current_digest() {
    let e = Env::new();
    let script = e.write_script("probe.sh", "#!/bin/sh\necho one\n");
    let exe = script.to_str().unwrap();
    e.approve(&[], &[exe]);
    let before = sha256_file(&script);
    std::fs::write(&script, "#!/bin/sh\necho two\n").expect("rewrite");
    let r = e.run(&[], &[exe]);
    r.assert_refused("executable_drift");
    let after = sha256_file(&script);
    assert!(
        r.stderr.contains(&format!(
            "changed since approval: sha256 approved {before}, now {after}"
        )),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("re-approve"), "{}", r.stderr);
}

fn sha256_file(p: &std::path::Path) -> String {
    let o = output(std::process::Command::new("sha256sum").arg(p));
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

fn lease_keyid(e: &Env) -> String {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap();
    m["leases"][0]["keyid"].as_str().unwrap().to_string()
}

#[test]
fn run_with_the_runner_key_as_trust_names_both_key_ids() {
    let e = Env::new();
    e.approve(&["--uses", "2"], &["true"]);
    // The first run makes the runner key.
    assert_eq!(e.run(&[], &["true"]).code, 0);
    let r = finish_run(output(e.run_cmd_trusting(&e.runner_pub(), &[], &["true"])));
    r.assert_refused("lease_signature_invalid");
    let approver = lease_keyid(&e);
    assert!(
        r.stderr.contains(&format!(
            "was signed by approver key id {approver}, but --trust gave key id "
        )),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("not the runner key (STATE_DIR/runner.pub"),
        "{}",
        r.stderr
    );
}

#[test]
fn verify_with_the_approver_key_names_the_signer_and_where_the_runner_key_is() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (r, receipt) = e.run_to_file("r.json", &["true"]);
    assert_eq!(r.code, 0);
    let env: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let runner = env["signatures"][0]["keyid"].as_str().unwrap().to_string();
    let o = output(e.verify_cmd(&receipt, &e.trust));
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "NOT_VERIFIED");
    let approver = lease_keyid(&e);
    assert!(
        lines[1].starts_with("authentic: ")
            && lines[1].contains(&format!(
                "signed by key id {runner}; --trust gave key id {approver}"
            ))
            && lines[1].contains("runner.pub"),
        "{out}"
    );
}

#[test]
fn journal_list_shows_refusals_on_request() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let r = e.run(&[], &["false"]);
    r.assert_refused("no_matching_lease");
    assert_eq!(e.run(&[], &["true"]).code, 0);
    let list = |flags: &[&str]| {
        output(
            cmd()
                .arg("journal")
                .arg("--state-dir")
                .arg(&e.state)
                .arg("list")
                .args(flags),
        )
    };
    let o = list(&[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("no_matching_lease"));
    assert!(
        stderr_of(&o).contains("1 refused run(s) are not listed; `journal list --refusals`"),
        "{}",
        stderr_of(&o)
    );
    let o = list(&["--refusals"]);
    let out = String::from_utf8_lossy(&o.stdout);
    let row = out
        .lines()
        .find(|l| l.contains("no_matching_lease"))
        .unwrap_or_else(|| panic!("no refusal row: {out}"));
    // The whole message, never cut to a column.
    assert!(row.contains("the closest is lease"), "{row}");
    let o = list(&["--refusals", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["attempts"].as_array().map(Vec::len), Some(1));
    assert_eq!(doc["refusals"][0]["reason"], "no_matching_lease");
}

#[test]
fn approve_warns_when_receipts_will_not_verify_here_and_verify_names_the_fix_first() {
    let e = Env::new();
    let o = output(e.approve_cmd(&[], &["true"]));
    assert_eq!(o.status.code(), Some(0));
    let summary = stderr_of(&o);
    let warning = summary
        .lines()
        .find(|l| l.contains("will be NOT_VERIFIED on this machine"))
        .unwrap_or_else(|| panic!("no warning in the summary: {summary}"));
    assert!(
        warning.contains("signing_key_in_child_reach") && warning.contains("--fs-write-scope"),
        "{warning}"
    );
    if is_root() {
        assert!(warning.contains("--as-user UID"), "{warning}");
    }
    let (r, receipt) = e.run_to_file("r.json", &["true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines().any(|l| l
            .starts_with("signing_key_in_child_reach: re-approve the lease with --fs-write-scope")),
        "{out}"
    );
}

#[test]
fn a_scoped_lease_gets_no_warning_and_its_receipt_verifies() {
    if !doctor_available("landlock") {
        skip!("the kernel offers no Landlock: --fs-write-scope cannot be enforced here");
        return;
    }
    let e = Env::new();
    let o = output(e.approve_cmd(&["--fs-write-scope"], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let summary = stderr_of(&o);
    if summary.contains("will be NOT_VERIFIED") {
        // Root without CAP_SYS_ADMIN (a container): only --as-user helps,
        // and the warning must say exactly that.
        assert!(summary.contains("--as-user UID"), "{summary}");
        skip!("this uid cannot keep the key from a scoped child here: {summary}");
        return;
    }
    let (r, receipt) = e.run_to_file("r.json", &["true"]);
    if r.reason() == "isolation_unavailable" {
        skip!("isolation unavailable here: {}", r.stderr);
        return;
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "no warning, yet: {out}");
}

#[test]
fn a_long_stderr_line_is_wrapped_in_the_text_view_never_cut() {
    let e = Env::new();
    let tail = "END-OF-THE-MESSAGE";
    let line = format!("{}{tail}", "x".repeat(230));
    let probe = format!("echo {line} >&2; exit 1");
    e.approve(&[], &["sh", "-c", &probe]);
    let (r, receipt) = e.run_to_file("r.json", &["sh", "-c", &probe]);
    assert_eq!(r.code, 1);
    let o = output(
        cmd()
            .arg("receipt")
            .arg("show")
            .arg(&receipt)
            .arg("--format")
            .arg("text"),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains('…'), "a tail line was cut: {text}");
    let joined: String = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix("    | ")
                .or_else(|| l.strip_prefix("    + "))
        })
        .collect();
    assert!(joined.contains(&line), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
}

#[test]
fn a_refusal_before_matching_records_the_request_as_given() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let r = e.run(&[], &["false", "x"]);
    r.assert_refused("no_matching_lease");
    let req = &r.predicate()["request"];
    assert_eq!(req["executable"], "false");
    assert_eq!(req["argv"], serde_json::json!(["x"]));
    assert!(req["profile"].is_null(), "a defaulted profile: {req}");
    let r = e.run(&["--profile", "short"], &["false"]);
    assert_eq!(r.predicate()["request"]["profile"], "short");
    // Once a lease matched, the lease's request (its profile included).
    let r = e.run(&[], &["true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.predicate()["request"]["profile"], "standard");
}

fn ledger_check(bin: &std::path::Path, ledger: &std::path::Path) -> serde_json::Value {
    let mut dc = cmd();
    dc.arg("doctor").arg("--json").arg("--ledger").arg(ledger);
    let o = output_settled(as_nobody(bin, &dc));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("doctor: {e}: {}", String::from_utf8_lossy(&o.stderr)));
    d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ledger")
        .cloned()
        .unwrap()
}

#[test]
fn a_ledger_dir_a_runner_uid_cannot_use_is_reported_as_such_and_ledger_owner_fixes_it() {
    if !is_root() {
        skip!("needs root: the approver is root, the runner uid 65534");
        return;
    }
    let (e, bin) = unprivileged_env();
    let ledger = e.path("ledger");
    let l = ledger.to_str().unwrap();
    let o = output(e.approve_cmd(&["--ledger", l, "--uses", "2"], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let summary = stderr_of(&o);
    assert!(
        summary.contains(&format!(
            "{l} is owned by uid 0 gid 0 with mode 0700: only uid 0 (and root) can spend uses there"
        )) && summary.contains("--ledger-owner UID[:GID]"),
        "{summary}"
    );
    let denied = format!(
        "{l} is owned by uid 0 gid 0 with mode 0700, and uid 65534 (gid 65534) cannot enter it"
    );
    let r = run_as_nobody(&bin, &e.run_cmd(&[], &["true"]));
    r.assert_refused("ledger_unavailable");
    assert!(r.stderr.contains(&denied), "{}", r.stderr);
    assert!(!r.stderr.contains("mounted"), "{}", r.stderr);
    let c = ledger_check(&bin, &ledger);
    assert_eq!(c["available"], false, "{c}");
    assert!(c["detail"].as_str().unwrap().contains(&denied), "{c}");

    // Re-approved for the runner's uid: the ledger is its own.
    let o = output(e.approve_cmd(
        &[
            "--ledger",
            l,
            "--ledger-owner",
            "65534:65534",
            "--uses",
            "2",
        ],
        &["true"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    assert!(
        stderr_of(&o).contains("only uid 65534"),
        "{}",
        stderr_of(&o)
    );
    let c = ledger_check(&bin, &ledger);
    assert_eq!(c["available"], true, "{c}");
    let r = run_as_nobody(&bin, &e.run_cmd(&[], &["true"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.predicate()["ledger"], l);
}

#[test]
fn a_state_dir_the_runner_cannot_write_names_owner_mode_and_uid() {
    if !is_root() {
        skip!("needs root to make a directory another uid cannot write");
        return;
    }
    let (e, bin) = unprivileged_env();
    e.approve(&[], &["true"]);
    let locked = e.path("locked");
    std::fs::create_dir(&locked).unwrap();
    let state = locked.join("state");
    let files = RunFiles {
        state: &state,
        ..e.files()
    };
    let r = run_as_nobody(&bin, &run_cmd_with(files, &[], &["true"]));
    assert_eq!(r.code, 125, "{}", r.stderr);
    let want = format!(
        "{} is owned by uid 0 gid 0 with mode 0755, and uid 65534 (gid 65534) cannot write in it",
        locked.display()
    );
    assert!(r.stderr.contains(&want), "{}", r.stderr);
}

#[test]
fn the_key_guard_holds_when_the_state_dir_is_under_a_directory_the_runner_cannot_list() {
    // A nested governed-exec's state dir sits under the outer run's 0711
    // scratch root: it can enter it, not list it.
    if !is_root() {
        skip!("needs root to make a directory uid 65534 can enter but not list");
        return;
    }
    let (e, bin) = unprivileged_env();
    if !doctor_available("landlock") {
        skip!("no Landlock in this kernel: the key guard is Landlock's");
        return;
    }
    let outer = e.path("outer");
    std::fs::create_dir(&outer).unwrap();
    std::fs::set_permissions(
        &outer,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o711),
    )
    .unwrap();
    let state = outer.join("state");
    std::fs::create_dir(&state).unwrap();
    assert!(std::process::Command::new("chown")
        .args(["65534:65534"])
        .arg(&state)
        .status()
        .unwrap()
        .success());
    let o = output_settled(as_nobody(
        &bin,
        &e.approve_cmd(&["--fs-write-scope"], &["true"]),
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let files = RunFiles {
        state: &state,
        ..e.files()
    };
    let r = run_as_nobody(&bin, &run_cmd_with(files, &[], &["true"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let signing = &r.predicate()["signing"];
    assert_eq!(signing["key_out_of_child_reach"], true, "{signing}");
    assert!(
        signing["why"].as_str().unwrap().contains("cannot list"),
        "{signing}"
    );
}

#[test]
fn the_readme_has_one_install_command_and_one_story_about_nss() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        !readme.contains("cargo install"),
        "a second install command"
    );
    let installs: Vec<&str> = readme
        .lines()
        .filter(|l| l.contains("install -m 0755"))
        .collect();
    assert!(!installs.is_empty());
    for l in &installs {
        assert!(
            l.contains("scripts/build-static.sh") && l.ends_with("/usr/local/bin/governed-exec"),
            "{l}"
        );
    }
    // NSS: getaddrinfo for a PostgreSQL host name, and nothing else,
    // wherever the README speaks of it.
    for (i, _) in readme.match_indices("NSS function") {
        let around = &readme[i.saturating_sub(40)..(i + 120).min(readme.len())];
        assert!(around.contains("getaddrinfo"), "{around}");
    }
    for ci in ["ci/github-actions.yml", "ci/gitlab-ci.yml"] {
        let y = std::fs::read_to_string(format!("{}/{ci}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert!(
            y.lines().any(|l| l.contains("install -m 0755")
                && l.contains("scripts/build-static.sh")
                && l.ends_with("/usr/local/bin/governed-exec")),
            "{ci} installs another way"
        );
    }
}

#[test]
fn a_pid_namespace_lease_is_not_told_its_leftovers_go_uncounted() {
    // They are counted now (lifecycle::leftovers_count_the_same_with_and_without_a_pid_namespace):
    // the approver is not warned of a gap that is closed.
    let e = Env::new();
    let o = output(e.approve_cmd(&["--pid-namespace"], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    assert!(
        !stderr_of(&o).contains("leftover_processes_killed"),
        "{}",
        stderr_of(&o)
    );
}
