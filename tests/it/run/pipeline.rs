//! The main path end to end, and what the child gets.

use crate::support::*;

#[test]
fn approve_run_verify_end_to_end() {
    let e = Env::new();
    e.set_goal(
        r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
      "criteria": [ { "kind": "exit_code", "equals": 0 },
                    { "kind": "file", "path": "out/report.txt", "contains": "0 failed" },
                    { "kind": "no_leftover_processes" } ] }"#,
    );
    let cmdline = [
        "sh",
        "-c",
        "mkdir -p out && echo '3 passed, 0 failed' > out/report.txt",
    ];
    // A full-root child could hide from cleanup (CONTRACT §7), so as root
    // `no_leftover_processes` needs isolation, which drops what undoes it.
    let iso: &[&str] = if is_root() { &["--pid-namespace"] } else { &[] };
    e.approve(iso, &cmdline);
    let (r, receipt) = e.run_to_file("r.json", &cmdline);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.class(), "exited");
    assert_eq!(r.outcome()["exit_code"], 0);
    assert_eq!(r.outcome()["needs_human"], false);
    assert_eq!(r.statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(r.predicate()["cleanup"]["state"], "gone");
    assert_eq!(r.predicate()["products"][0]["exists"], true);
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().next(), Some("VERIFIED_DONE"));
    // A finished attempt leaves no lock file behind (only crashed ones do).
    let locks = std::fs::read_dir(e.state.join("attempts")).map_or(0, |d| d.count());
    assert_eq!(locks, 0);
    // receipt show prints the decoded statement
    let o = output(cmd().arg("receipt").arg("show").arg(&receipt));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("statement");
    assert_eq!(v["predicate"]["outcome"]["class"], "exited");
}

#[test]
fn shell_metacharacters_stay_literal() {
    let e = Env::new();
    let args = [
        "printf",
        "%s|",
        "a;b",
        "$(touch pwned)",
        "`touch pwned2`",
        "*",
        "x|y",
        "l1\nl2",
        "&& touch pwned3",
    ];
    e.approve(&[], &args);
    let r = e.run(&[], &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout_text(),
        "a;b|$(touch pwned)|`touch pwned2`|*|x|y|l1\nl2|&& touch pwned3|"
    );
    for f in ["pwned", "pwned2", "pwned3"] {
        assert!(!e.ws.join(f).exists(), "{f} was created: a shell ran");
    }
}

#[test]
fn caller_secrets_never_reach_the_child() {
    let e = Env::new();
    e.approve(&[], &["env"]);
    let o = output(
        e.run_cmd(&[], &["env"])
            .env("GITHUB_TOKEN", "ghp_secret")
            .env("AWS_SECRET_ACCESS_KEY", "aws_secret")
            .env("AWS_ACCESS_KEY_ID", "AKIA")
            .env("SSH_AUTH_SOCK", "/tmp/agent.sock")
            .env("HTTPS_PROXY", "http://proxy:3128")
            .env("http_proxy", "http://proxy:3128")
            .env("LD_PRELOAD", "/tmp/evil.so"),
    );
    let r = finish_run(o);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = r.stdout_text();
    for needle in [
        "ghp_secret",
        "aws_secret",
        "AKIA",
        "SSH_AUTH_SOCK",
        "proxy",
        "LD_PRELOAD",
    ] {
        assert!(
            !text.contains(needle),
            "{needle} leaked into the child: {text}"
        );
    }
    let vars: Vec<&str> = text
        .lines()
        .map(|l| l.split('=').next().unwrap_or(""))
        .collect();
    for v in &vars {
        assert!(
            ["HOME", "TMPDIR", "PATH", "LANG", "LC_ALL", "TZ"].contains(v),
            "unexpected variable {v}"
        );
    }
    assert!(text.contains("TZ=UTC") && text.contains("LC_ALL=C.UTF-8"));
}

#[test]
fn approver_env_values_are_fixed_in_the_lease() {
    let e = Env::new();
    e.approve(&["--env", "MODE=ci"], &["env"]);
    let r = e.run(&[], &["env"]);
    assert!(r.stdout_text().contains("MODE=ci"), "{}", r.stdout_text());
}

#[test]
fn an_evil_binary_earlier_on_the_callers_path_is_not_what_runs() {
    let e = Env::new();
    let evil = e.path("evil-bin");
    std::fs::create_dir(&evil).expect("dir");
    let marker = e.path("evil-ran");
    let script = evil.join("env");
    std::fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).expect("evil");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!("{}:/usr/bin:/bin", evil.display());
    let o = output(e.approve_cmd(&[], &["env"]).env("PATH", &path));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = finish_run(output(e.run_cmd(&[], &["env"]).env("PATH", &path)));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!marker.exists(), "the caller's PATH decided what ran");
    let ran = r.predicate()["command"]["canonical_path"]
        .as_str()
        .unwrap_or("");
    assert!(
        ran.starts_with("/usr/") || ran.starts_with("/bin/"),
        "ran {ran}"
    );
}

#[test]
fn stdin_is_dev_null_even_when_the_caller_holds_it_open() {
    let e = Env::new();
    e.approve(&[], &["cat"]);
    let mut c = e.run_cmd(&[], &["cat"]);
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let child = c.spawn().expect("spawn");
    // Keep the pipe open (not writing, not closing): cat must still see EOF.
    let start = std::time::Instant::now();
    let o = child.wait_with_output().expect("wait");
    let r = finish_run(o);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(r.predicate()["streams"]["stdout"]["bytes"], 0);
}

#[test]
fn fds_leaked_by_the_caller_are_not_the_childs() {
    require_tool!("fds_leaked_by_the_caller_are_not_the_childs", "bash");
    let e = Env::new();
    let probe = ["sh", "-c", "for n in 3 4 5 6 7 8 9 10 11 12 20 100; do [ -e /proc/self/fd/$n ] && echo leak:$n; done; ls /proc/self/fd | wc -l"];
    e.approve(&[], &probe);
    // The caller leaks fd 7 and 100 into governed-exec.
    let mut c = std::process::Command::new("bash");
    c.arg("-c")
        .arg(r#"exec 7</etc/hostname 100</etc/hostname; exec "$@""#)
        .arg("bash");
    let inner = e.run_cmd(&[], &probe);
    c.arg(inner.get_program());
    c.args(inner.get_args());
    c.stdin(std::process::Stdio::null());
    let r = finish_run(output(&mut c));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = r.stdout_text();
    assert!(!text.contains("leak:"), "child saw inherited fds: {text}");
}

#[test]
fn rlimits_from_the_lease_are_visible_in_the_child() {
    let e = Env::new();
    let probe = [
        "sh",
        "-c",
        "ulimit -n; ulimit -t; ulimit -f; cat /proc/self/status | grep NoNewPrivs",
    ];
    e.approve(
        &[
            "--max-open-files",
            "77",
            "--cpu-time",
            "9s",
            "--max-file-size",
            "1MiB",
        ],
        &probe,
    );
    let r = e.run(&[], &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout_text().lines().collect();
    assert_eq!(lines[0], "77");
    assert_eq!(lines[1], "9");
    assert_eq!(lines[2], "2048", "ulimit -f counts 512-byte blocks");
    assert!(
        lines[3].ends_with("1"),
        "no_new_privs not set: {}",
        lines[3]
    );
}

#[test]
fn the_child_has_its_own_session_and_no_terminal() {
    let e = Env::new();
    // From the kernel's own /proc/PID/stat (session, process group,
    // tty_nr), not `ps`, whose flags busybox lacks.
    let probe = [
        "sh",
        "-c",
        "set -- $(cat /proc/$$/stat); echo \"$6 $5 $7\"; echo pid=$$",
    ];
    e.approve(&[], &probe);
    let r = e.run(&[], &probe);
    let text = r.stdout_text();
    let pid_line = text
        .lines()
        .find(|l| l.starts_with("pid="))
        .expect("pid line");
    let pid = &pid_line[4..];
    let fields: Vec<&str> = text
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        fields.first().copied(),
        Some(pid),
        "sid is not the child's own: {text}"
    );
    assert_eq!(
        fields.get(1).copied(),
        Some(pid),
        "pgid is not the child's own: {text}"
    );
    assert_eq!(fields.get(2).copied(), Some("0"), "child has a tty: {text}");
}

#[test]
fn a_shebang_script_runs_through_the_verified_fd() {
    let e = Env::new();
    e.write_script("build.sh", "#!/bin/sh\necho built \"$@\"\n");
    e.approve(&[], &["./build.sh", "x y"]);
    let r = e.run(&[], &["./build.sh", "x y"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout_text(), "built x y\n");
}

#[test]
fn exec_failure_is_known_not_executed() {
    let e = Env::new();
    e.write_script("broken.sh", "#!/nonexistent/interpreter\necho hi\n");
    e.approve(&[], &["./broken.sh"]);
    let r = e.run(&[], &["./broken.sh"]);
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert_eq!(r.class(), "known_not_executed");
    assert_eq!(r.reason(), "exec_failed");
}

#[test]
fn openssl_generated_keys_work() {
    if std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_err()
    {
        skip!("openssl_generated_keys_work: openssl is not installed");
        return;
    }
    let e = Env::new();
    // Replace the approver key pair with one made by openssl.
    std::fs::remove_file(&e.key).expect("rm");
    let ok = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519", "-out"])
        .arg(&e.key)
        .status()
        .expect("openssl")
        .success()
        && std::process::Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&e.key)
            .arg("-out")
            .arg(&e.trust)
            .status()
            .expect("openssl")
            .success();
    assert!(ok);
    e.approve(&[], &["true"]);
    // The runner key is an openssl key too.
    let r = e.run(&["--key", e.key.to_str().unwrap_or_default()], &["true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let receipt = e.path("r.json");
    std::fs::write(&receipt, &r.stdout).expect("write");
    let o = output(e.verify_cmd(&receipt, &e.trust));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn request_file_and_stdin_forms_match_the_same_lease() {
    let e = Env::new();
    let req = e.path("req.json");
    std::fs::write(
        &req,
        r#"{ "executable": "echo", "argv": ["hi"], "cwd": ".", "profile": "short" }"#,
    )
    .expect("req");
    let o = output(e.approve_cmd(
        &["--request", req.to_str().unwrap_or_default(), "--uses", "3"],
        &[],
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = e.run(&["--request", req.to_str().unwrap_or_default()], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut c = e.run_cmd(&["--request", "-"], &[]);
    c.stdin(std::fs::File::open(&req).expect("open"));
    let r = finish_run(output(&mut c));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = e.run(&["--profile", "short"], &["echo", "hi"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn run_by_lease_id_and_receipt_to_a_file() {
    let e = Env::new();
    let id = e.approve(&[], &["echo", "by-id"]);
    let receipt = e.path("out/receipt.json");
    std::fs::create_dir(e.path("out")).expect("dir");
    let o = output(e.run_cmd(
        &[
            "--lease",
            &id,
            "--receipt",
            receipt.to_str().unwrap_or_default(),
        ],
        &[],
    ));
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty(), "receipt went to stdout too");
    let stmt = decode_envelope(&std::fs::read(&receipt).expect("receipt file"));
    assert_eq!(stmt["predicate"]["streams"]["stdout"]["text"], "by-id\n");
    assert_eq!(stmt["predicate"]["lease"]["id"], id.as_str());
}

#[test]
fn home_and_tmpdir_are_fresh_private_and_removed_after_the_run() {
    let e = Env::new();
    let probe = [
        "sh",
        "-c",
        "echo $HOME; echo $TMPDIR; ls -A $HOME | wc -l; stat -c %a $HOME $TMPDIR",
    ];
    e.approve(&["--uses", "2"], &probe);
    let r1 = e.run(&[], &probe);
    let r2 = e.run(&[], &probe);
    let l1: Vec<String> = r1.stdout_text().lines().map(String::from).collect();
    let l2: Vec<String> = r2.stdout_text().lines().map(String::from).collect();
    assert_ne!(l1[0], l2[0], "HOME reused across attempts");
    assert_eq!(l1[2], "0", "HOME was not empty");
    assert_eq!(&l1[3..5], ["700", "700"]);
    assert!(!std::path::Path::new(&l1[0]).exists(), "HOME left behind");
    assert!(!std::path::Path::new(&l1[1]).exists(), "TMPDIR left behind");
}

#[test]
fn keygen_never_overwrites_a_key() {
    let e = Env::new();
    let before = std::fs::read(&e.key).expect("key");
    let o = output(cmd().arg("keygen").arg("--out").arg(e.path("approver")));
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read(&e.key).expect("key"), before);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&e.key)
        .expect("meta")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn the_approval_summary_says_exactly_what_is_approved() {
    let e = Env::new();
    let o = output(e.approve_cmd(
        &["--wall-time", "90s", "--env", "MODE=ci"],
        &["printf", "%s", "a b;c"],
    ));
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stderr);
    for want in [
        "\"printf\", \"%s\", \"a b;c\"",
        "sha256",
        "wall time 1m 30s",
        "MODE=\"ci\"",
        "TZ=\"UTC\"",
        "is not an OS sandbox",
        "runs as uid",
    ] {
        assert!(s.contains(want), "summary lacks {want:?}:\n{s}");
    }
}
