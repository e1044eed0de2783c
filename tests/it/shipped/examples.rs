//! examples/ is a working cookbook: each example runs here, as a user would
//! run it, against the real binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::evidence::interop::interop_python;
use crate::support::*;

fn example(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(rel)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let dst = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dst);
        } else {
            std::fs::copy(entry.path(), &dst).unwrap();
        }
    }
}

/// Run a cookbook script with `GE` naming the binary under test.
fn script(c: &mut Command) -> (i32, String, String) {
    let o = c.env("GE", BIN).output().expect("spawn");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

#[test]
fn cargo_test_as_a_governed_ci_step_with_the_rustup_recipe() {
    let Ok(cargo) = which("cargo") else {
        skip!("cargo_test_as_a_governed_ci_step_with_the_rustup_recipe: no cargo on PATH");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("crate");
    copy_dir(&example("cargo-test/crate"), &ws);
    let (code, out, err) = script(
        Command::new("bash")
            .arg(example("cargo-test/ci-step.sh"))
            .arg(&ws)
            .arg(dir.path().join("out")),
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("VERIFIED_DONE"), "{out}");
    assert!(out.contains("outcome      exited"), "{out}");
    assert!(out.contains("test tests::adds ... ok"), "{out}");
    // Approved from an approvals file, which then agrees with the manifest.
    assert!(out.contains("unchanged         \"cargo-test\""), "{out}");
    assert!(out.contains("agree: "), "{out}");
    let proxy = std::fs::canonicalize(&cargo)
        .map(|p| p.file_name().is_some_and(|n| n == "rustup"))
        .unwrap_or(false);
    if proxy {
        // Under rustup the lease names the toolchain's own cargo, and the
        // whole toolchain is pinned: nothing is left to warn about.
        assert!(
            err.contains("/toolchains/") && !err.contains("own binary, pinned; but"),
            "{err}"
        );
        assert!(!err.contains("is a rustup proxy"), "{err}");
    }
}

fn which(name: &str) -> Result<PathBuf, ()> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

#[test]
fn pytest_in_a_venv() {
    let Some(py) = interop_python("pytest_in_a_venv") else {
        return;
    };
    let has_pytest = Command::new(&py)
        .args(["-c", "import pytest"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_pytest {
        skip!("pytest_in_a_venv: {} has no pytest", py.display());
        return;
    }
    let venv = py.parent().and_then(Path::parent).unwrap().to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("project");
    copy_dir(&example("pytest-venv/project"), &ws);
    let (code, out, err) = script(
        Command::new("bash")
            .arg(example("pytest-venv/run.sh"))
            .arg(&ws)
            .arg(dir.path().join("out"))
            .env("VENV", &venv),
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("VERIFIED_DONE"), "{out}");
    assert!(out.contains("2 passed"), "{out}");
    assert!(out.contains("products     report.xml"), "{out}");
    assert!(err.contains("runs in the Python venv"), "{err}");
}

/// Run an eval-harness example against this build: its JSON lines (three:
/// one per request of its tasks), or `None` after a SKIP without python3.
fn eval_harness(script: &str) -> Option<Vec<serde_json::Value>> {
    let Ok(python) = which("python3") else {
        skip!("{script}: no python3 on PATH");
        return None;
    };
    let o = Command::new(python)
        .arg(example(script))
        .args(["--governed-exec", BIN])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    Some(lines)
}

#[test]
fn eval_harness_mints_a_lease_per_task_and_reads_one_document_per_request() {
    let Some(lines) = eval_harness("eval-harness/harness.py") else {
        return;
    };
    let (done, refused, failed) = (&lines[0], &lines[1], &lines[2]);
    assert_eq!(
        (done["class"].as_str(), done["verdict"].as_str()),
        (Some("exited"), Some("VERIFIED_DONE"))
    );
    assert_eq!(refused["class"], "known_not_executed");
    assert_eq!(refused["reason"], "no_matching_lease");
    assert_eq!(refused["needs_human"], true);
    assert_eq!(refused["exit"], 125);
    assert_eq!(failed["exit_code"], 3);
    assert_eq!(failed["verdict"], "NOT_VERIFIED");
    assert_eq!(failed["stdout"], "checking\n");
    // The throwaway temp dirs are gone.
    for l in &lines {
        assert!(!Path::new(l["tmp"].as_str().unwrap()).exists());
    }
}

#[test]
fn the_eval_harness_over_mcp_reads_each_call_as_the_model_would() {
    let Some(lines) = eval_harness("eval-harness/mcp_harness.py") else {
        return;
    };
    let (done, refused, failed) = (&lines[0], &lines[1], &lines[2]);
    assert_eq!(
        (done["is_error"].as_bool(), done["verdict"].as_str()),
        (Some(false), Some("VERIFIED_DONE"))
    );
    assert_eq!(refused["is_error"], true);
    assert_eq!(refused["reason"], "no_matching_lease");
    assert!(refused["pending_id"].as_str().unwrap().starts_with("pend-"));
    assert_eq!(
        (failed["is_error"].as_bool(), failed["exit_code"].as_i64()),
        (Some(true), Some(3))
    );
    assert_eq!(failed["verdict"], "NOT_VERIFIED");
    for l in &lines {
        assert!(!Path::new(l["tmp"].as_str().unwrap()).exists());
    }
}

#[test]
fn container_entrypoint_makes_governed_exec_pid_of_the_step() {
    let e = Env::new();
    let quick = ["sh", "-c", "echo hi"];
    let slow = ["sh", "-c", "echo $$ > started; sleep 30"];
    e.approve(&[], &quick);
    e.approve(&[], &slow);
    let entry = |args: &[&str]| {
        let mut c = Command::new(example("container/entrypoint.sh"));
        c.env("GE_BIN", BIN)
            .env("GE_GOAL", &e.goal)
            .env("GE_MANIFEST", &e.manifest)
            .env("GE_TRUST", &e.trust)
            .env("GE_RECEIPT", e.path("receipt.json"))
            .env("GOVERNED_EXEC_STATE_DIR", &e.state)
            .arg("--")
            .args(args)
            .stdin(std::process::Stdio::null());
        c
    };
    let o = entry(&quick).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    // --stream mirrors the child's output into the container log.
    assert!(String::from_utf8_lossy(&o.stderr).contains("hi"));
    let stmt = decode_envelope(&std::fs::read(e.path("receipt.json")).unwrap());
    assert_eq!(stmt["predicate"]["outcome"]["class"], "exited");

    // SIGTERM to the entrypoint's pid (what `docker stop` sends to PID 1)
    // reaches governed-exec itself: the script exec'd it.
    let runner = RunnerGuard::spawn(entry(&slow));
    let started = e.ws.join("started");
    let t0 = Instant::now();
    while !started.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(started.exists(), "the step never started");
    match std::fs::read_link(format!("/proc/{}/exe", runner.id())) {
        Ok(exe) => assert_eq!(
            std::fs::canonicalize(&exe).unwrap(),
            std::fs::canonicalize(BIN).unwrap()
        ),
        // The runner makes itself non-dumpable: without CAP_SYS_PTRACE
        // (a non-root suite) its exe link is closed; its name still shows.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => assert_eq!(
            std::fs::read_to_string(format!("/proc/{}/comm", runner.id()))
                .unwrap()
                .trim(),
            "governed-exec"
        ),
        Err(e) => panic!("/proc/{}/exe: {e}", runner.id()),
    }
    runner.signal("TERM");
    let r = runner.finish();
    assert_eq!(r.code, 143, "{}", r.stderr);
    let stmt = decode_envelope(&std::fs::read(e.path("receipt.json")).unwrap());
    assert_eq!(stmt["predicate"]["outcome"]["class"], "cancelled_reaped");

    // The example Dockerfile copies only files that exist beside it.
    let dockerfile = std::fs::read_to_string(example("container/Dockerfile")).unwrap();
    for line in dockerfile.lines().filter(|l| l.starts_with("COPY ")) {
        if line.contains("--from=") {
            continue;
        }
        let src = line.split_whitespace().nth(1).unwrap();
        assert!(example("container").join(src).exists(), "{line}");
    }
}
