//! Every descendant, every signal, container PID 1.

use std::time::{Duration, Instant};

use crate::support::*;

fn wait_file(p: &std::path::Path) {
    let end = Instant::now() + Duration::from_secs(20);
    // `echo $$ > f` creates the file before it writes the pid: wait for both.
    let ready = |p: &std::path::Path| std::fs::metadata(p).is_ok_and(|m| m.len() > 0);
    while !ready(p) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(p.exists(), "{} never appeared", p.display());
}

fn cancel_with(sig: &str, code: i32) {
    let e = Env::new();
    let pidf = e.path("child.pid");
    let gcf = e.path("gc.pid");
    let script = format!(
        "setsid sh -c 'echo $$ > {gc}; exec sleep 1000' & echo $$ > {p}; while :; do sleep 1; done",
        gc = gcf.display(),
        p = pidf.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--kill-grace", "500ms"], &probe);
    let child = RunnerGuard::spawn(e.run_cmd(&[], &probe));
    wait_file(&pidf);
    wait_file(&gcf);
    child.signal(sig);
    let r = child.finish();
    assert_eq!(r.code, code, "{}", r.stderr);
    assert_eq!(r.class(), "cancelled_reaped");
    assert_eq!(r.predicate()["cleanup"]["state"], "gone");
    for f in [&pidf, &gcf] {
        assert!(
            !pid_alive(read_pid(f)),
            "{} survived cancellation",
            f.display()
        );
    }
    let o = output(
        cmd()
            .args(["journal", "list", "--json"])
            .arg("--state-dir")
            .arg(&e.state),
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v[0]["state"], "done");
    assert_eq!(v[0]["outcome"], "cancelled_reaped");
}

#[test]
fn sigterm_is_forwarded_escalated_and_confirmed() {
    cancel_with("TERM", 143);
}

#[test]
fn sigint_is_forwarded_escalated_and_confirmed() {
    cancel_with("INT", 130);
}

#[test]
fn sighup_is_forwarded_escalated_and_confirmed() {
    cancel_with("HUP", 129);
}

#[test]
fn a_stopped_child_at_the_deadline_is_still_reaped() {
    let e = Env::new();
    let probe = ["sh", "-c", "kill -STOP $$; echo never"];
    e.approve(&["--wall-time", "500ms", "--kill-grace", "200ms"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.code, 124, "{}", r.stderr);
    assert_eq!(r.class(), "timed_out_reaped");
}

#[test]
fn as_pid_1_it_reaps_orphaned_zombies_during_the_run() {
    if !is_root() {
        skip!("as_pid_1_it_reaps_orphaned_zombies_during_the_run: needs root for unshare --pid (CI runs as root)");
        return;
    }
    let e = Env::new();
    // Twenty orphans that exit at once, then count zombies in the namespace.
    let script = "for i in $(seq 1 20); do (sh -c 'exit 0' &); done; sleep 1; ps -eo stat= | grep -c '^Z' || true";
    let probe = ["sh", "-c", script];
    e.approve(&[], &probe);
    let inner = e.run_cmd(&[], &probe);
    let mut c = std::process::Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(std::process::Stdio::null());
    let r = finish_run(output(&mut c));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout_text().trim(),
        "0",
        "zombies were left unreaped under PID 1"
    );
}

#[test]
fn max_processes_bounds_a_fork_storm() {
    let e = Env::new();
    let log = e.path("forks.log");
    let script = format!(
        "for i in $(seq 1 60); do (echo x >> {}; sleep 5) & done; wait",
        log.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(
        &[
            "--max-processes",
            "20",
            "--wall-time",
            "3s",
            "--kill-grace",
            "100ms",
        ],
        &probe,
    );
    let r = e.run(&[], &probe);
    let started = line_count(&log);
    assert!(
        started <= 20,
        "{started} processes started under a limit of 20 ({})",
        r.predicate()["isolation"]["process_limit"]
    );
    assert_eq!(r.predicate()["cleanup"]["state"], "gone");
}
