//! Bounded process lifecycle: exit mapping, timeouts, leftovers.

use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn exit_code_is_passed_through() {
    let e = Env::new();
    e.approve(&[], &["sh", "-c", "exit 7"]);
    let r = e.run(&[], &["sh", "-c", "exit 7"]);
    assert_eq!(r.code, 7);
    assert_eq!(r.class(), "exited");
    assert_eq!(r.outcome()["exit_code"], 7);
}

#[test]
fn a_signal_we_did_not_send_is_signaled_128_plus() {
    let e = Env::new();
    let probe = ["sh", "-c", "kill -USR1 $$"];
    e.approve(&[], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.code, 128 + 10);
    assert_eq!(r.class(), "signaled");
    assert_eq!(r.outcome()["signal"], 10);
    assert!(r.outcome()["exit_code"].is_null());
}

#[test]
fn timeout_kills_a_term_ignoring_setsid_grandchild_and_confirms_it() {
    let e = Env::new();
    let main_pid = e.path("main.pid");
    let gc_pid = e.path("gc.pid");
    let script = format!(
        "trap '' TERM; setsid sh -c 'trap \"\" TERM; echo $$ > {gc}; exec sleep 1000' & echo $$ > {main}; while :; do sleep 1; done",
        gc = gc_pid.display(),
        main = main_pid.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--wall-time", "1500ms", "--kill-grace", "300ms"], &probe);
    let start = Instant::now();
    let r = e.run(&[], &probe);
    let took = start.elapsed();
    assert_eq!(r.code, 124, "{}", r.stderr);
    assert_eq!(r.class(), "timed_out_reaped");
    assert_eq!(r.predicate()["cleanup"]["state"], "gone");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    for p in [&main_pid, &gc_pid] {
        let pid = read_pid(p);
        assert!(!pid_alive(pid), "pid {pid} survived the timeout");
    }
}

#[test]
fn background_leftover_does_not_hold_the_run_and_is_killed() {
    let e = Env::new();
    e.set_goal(
        r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
      "criteria": [ { "kind": "exit_code", "equals": 0 }, { "kind": "no_leftover_processes" } ] }"#,
    );
    let pidf = e.path("bg.pid");
    let script = format!("sleep 1000 & echo $! > {}; exit 0", pidf.display());
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&[], &probe);
    let start = Instant::now();
    let (r, receipt) = e.run_to_file("r.json", &probe);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "waited for the background child"
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.predicate()["cleanup"]["leftover_processes_killed"], 1);
    assert!(!pid_alive(read_pid(&pidf)), "the leftover sleep survived");
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1);
    assert!(out.contains("no_leftover_processes"), "{out}");
}

#[test]
fn grandchild_holding_stdout_after_double_fork_does_not_hang_the_run() {
    let e = Env::new();
    let pidf = e.path("d.pid");
    // Double fork + setsid, the daemon keeps stdout open and never exits.
    let script = format!(
        "(setsid sh -c 'echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 1000' &) ; while [ ! -s {p} ]; do sleep 0.01; done; echo parent-done",
        p = pidf.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&[], &probe);
    let start = Instant::now();
    let r = e.run(&[], &probe);
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!pid_alive(read_pid(&pidf)), "the daemon survived");
    assert!(
        r.predicate()["cleanup"]["leftover_processes_killed"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    );
    assert_eq!(r.predicate()["streams"]["stdout"]["complete"], true);
}
