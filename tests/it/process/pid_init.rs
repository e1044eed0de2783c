//! `--pid-namespace` under governed-exec's own init (CONTRACT §7, v1.3):
//! the program runs as pid 2 of its namespace under an init that forwards
//! signals to it, reaps everything and keeps the namespace alive until the
//! runner has killed and counted every leftover — with or without a cgroup
//! witnessing the run. The program's exit status and signal are reported as
//! they would be without the namespace.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

const EXIT_0_NO_LEFTOVERS: &str = r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
      "criteria": [ { "kind": "exit_code", "equals": 0 }, { "kind": "no_leftover_processes" } ] }"#;

/// Whether `r` is the refusal of a machine that cannot make a PID
/// namespace (then SKIP, loudly, with its words).
fn no_pid_namespace_here(test: &str, r: &Run) -> bool {
    let refused = r.code == 125 && r.stderr.contains("pid");
    if refused {
        skip!("{test}: no PID namespace here: {}", r.stderr);
    }
    refused
}

/// A `sleep` duration unique to this test process and `salt`: inside the
/// namespace `$!` is a namespace pid, so the host finds the process by it.
fn marker(salt: u64) -> u64 {
    4_000_000 + u64::from(std::process::id()) * 8 + salt
}

/// Host pids of the live `sleep MARKER` processes.
fn sleeps_alive(marker: u64) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|d| {
            std::fs::read(d.path().join("cmdline"))
                .is_ok_and(|c| c == format!("sleep\0{marker}\0").as_bytes())
        })
        .filter_map(|d| d.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|p| pid_alive(*p))
        .collect()
}

/// A program that leaves a `setsid` daemon behind and exits 0 at once: the
/// daemon is re-parented to the namespace's init, and is alive when the
/// program ends.
fn daemon_script(marker: u64) -> String {
    format!("setsid sleep {marker} & exit 0")
}

/// The cleanup of a run that left one daemon behind: killed, counted, gone,
/// and `no_leftover_processes` unmet.
fn assert_daemon_killed_and_counted(e: &Env, r: &Run, marker: u64) {
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.class(), "exited");
    let c = &r.predicate()["cleanup"];
    assert_eq!(c["state"], "gone", "{c}");
    assert!(
        c["leftover_processes_killed"].as_u64().unwrap_or(0) >= 1,
        "the setsid daemon alive at the program's end was not counted: {c}"
    );
    assert!(
        sleeps_alive(marker).is_empty(),
        "the setsid daemon survived"
    );
    let receipt = e.path("r.json");
    std::fs::write(&receipt, &r.stdout).expect("save receipt");
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no_leftover_processes"), "{out}");
}

#[test]
fn pid_namespace_init_kills_and_counts_a_setsid_daemon_as_root() {
    if !is_root() {
        skip!("pid_namespace_init_kills_and_counts_a_setsid_daemon_as_root: needs root");
        return;
    }
    let e = Env::new();
    e.set_goal(EXIT_0_NO_LEFTOVERS);
    let m = marker(0);
    let script = daemon_script(m);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--pid-namespace"], &probe);
    let r = e.run(&[], &probe);
    if no_pid_namespace_here(
        "pid_namespace_init_kills_and_counts_a_setsid_daemon_as_root",
        &r,
    ) {
        return;
    }
    assert_daemon_killed_and_counted(&e, &r, m);
    let c = &r.predicate()["cleanup"];
    assert_eq!(c["leftover_processes_killed"], 1, "{c}");
}

/// A runner of uid 65534 has no cgroup it may write here (and so no
/// `cgroup.kill`, no `cgroup.procs` to read): the init, alive until the
/// runner has killed the leftovers, is what keeps them countable.
#[test]
fn pid_namespace_init_kills_and_counts_a_setsid_daemon_without_a_cgroup_witness() {
    const TEST: &str =
        "pid_namespace_init_kills_and_counts_a_setsid_daemon_without_a_cgroup_witness";
    if !is_root() {
        skip!("{TEST}: needs root to switch to uid 65534");
        return;
    }
    let (e, bin) = unprivileged_env();
    let d = doctor_report(output_settled(as_nobody(&bin, &doctor_cmd())));
    if doctor_check(&d, "pid_namespace")["available"] != true {
        skip!("{TEST}: {}", doctor_check(&d, "pid_namespace")["detail"]);
        return;
    }
    e.set_goal(EXIT_0_NO_LEFTOVERS);
    let m = marker(1);
    let script = daemon_script(m);
    let probe = ["sh", "-c", script.as_str()];
    let o = output_settled(as_nobody(
        &bin,
        &e.approve_cmd(&["--pid-namespace"], &probe),
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = run_as_nobody(&bin, &e.run_cmd(&[], &probe));
    if no_pid_namespace_here(TEST, &r) {
        return;
    }
    let c = &r.predicate()["cleanup"];
    let witnesses = c["witness"].to_string();
    assert!(
        !witnesses.contains("cgroup"),
        "this run was meant to have no cgroup witness: {c}"
    );
    assert_daemon_killed_and_counted(&e, &r, m);
    assert_eq!(c["leftover_processes_killed"], 1, "{c}");
}

/// The program is pid 2 of its namespace, under the init (pid 1); its exit
/// code and the signal that killed it are reported as without the
/// namespace. As pid 1 the program could not even kill itself with a
/// signal it does not handle.
#[test]
fn pid_namespace_program_is_pid_2_and_its_exit_code_and_signal_are_reported_unchanged() {
    const TEST: &str =
        "pid_namespace_program_is_pid_2_and_its_exit_code_and_signal_are_reported_unchanged";
    let e = Env::new();
    let exit3 = ["sh", "-c", "echo ns_pid=$$ parent=$PPID; exit 3"];
    e.approve(&["--pid-namespace"], &exit3);
    let r = e.run(&[], &exit3);
    if no_pid_namespace_here(TEST, &r) {
        return;
    }
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(r.class(), "exited");
    assert_eq!(r.outcome()["exit_code"], 3);
    assert!(r.outcome()["signal"].is_null());
    assert!(
        r.stdout_text().contains("ns_pid=2 parent=1"),
        "{}",
        r.stdout_text()
    );

    let segv = ["sh", "-c", "kill -SEGV $$; sleep 5; exit 9"];
    e.approve(&["--pid-namespace"], &segv);
    let r = e.run(&[], &segv);
    assert_eq!(r.code, 128 + 11, "{}", r.stderr);
    assert_eq!(r.class(), "signaled");
    assert_eq!(r.outcome()["signal"], 11);
    assert!(r.outcome()["exit_code"].is_null());
    assert_eq!(r.predicate()["cleanup"]["state"], "gone");
}

fn wait_file(p: &Path) {
    let end = Instant::now() + Duration::from_secs(20);
    while !std::fs::metadata(p).is_ok_and(|m| m.len() > 0) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(p.exists(), "{} never appeared", p.display());
}

/// SIGTERM to the runner under a PID namespace: forwarded to the program
/// (its trap runs), escalated, and every process of the namespace — the
/// program, a child, a `setsid` daemon — confirmed gone.
#[test]
fn pid_namespace_cancel_reaches_the_program_and_ends_cancelled_reaped() {
    const TEST: &str = "pid_namespace_cancel_reaches_the_program_and_ends_cancelled_reaped";
    let e = Env::new();
    let (m_child, m_daemon) = (marker(2), marker(3));
    // In the workspace: writable to an isolated child.
    let ready = e.ws.join("ready");
    let got = e.ws.join("got-term");
    let script = format!(
        "trap 'echo term > {got}; exit 0' TERM; sleep {m_child} & setsid sleep {m_daemon} & \
         echo up > {ready}; while :; do sleep 0.1; done",
        got = got.display(),
        ready = ready.display(),
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--pid-namespace", "--cancel-grace", "1s"], &probe);
    let child = RunnerGuard::spawn(e.run_cmd(&[], &probe));
    let end = Instant::now() + Duration::from_secs(20);
    while !ready.exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !ready.exists() {
        let r = child.finish();
        if no_pid_namespace_here(TEST, &r) {
            return;
        }
        panic!("the program never started: {}", r.stderr);
    }
    wait_file(&ready);
    child.signal("TERM");
    let r = child.finish();
    assert_eq!(r.code, 143, "{}", r.stderr);
    assert_eq!(r.class(), "cancelled_reaped");
    assert_eq!(r.predicate()["cleanup"]["state"], "gone");
    assert!(got.exists(), "the program never saw the forwarded SIGTERM");
    for m in [m_child, m_daemon] {
        assert!(sleeps_alive(m).is_empty(), "sleep {m} survived the cancel");
    }
}

/// The init is a process of the run's pids group, but not one of the
/// program's: a lease of one process still runs its one process.
#[test]
fn pid_namespace_init_is_not_counted_against_max_processes() {
    const TEST: &str = "pid_namespace_init_is_not_counted_against_max_processes";
    if !is_root() {
        skip!("{TEST}: needs root (a pids cgroup per run)");
        return;
    }
    let e = Env::new();
    let probe = ["sh", "-c", "echo one-process"];
    e.approve(&["--pid-namespace", "--max-processes", "1"], &probe);
    let r = e.run(&[], &probe);
    if no_pid_namespace_here(TEST, &r) {
        return;
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout_text().contains("one-process"),
        "{}",
        r.stdout_text()
    );
}
