//! A container's usual conditions, simulated without Docker so the
//! logic is covered wherever the tests run: a seccomp filter that answers
//! clone3 with ENOSYS and unshare with EPERM (Docker's default profile,
//! tests/sim/seccomp-exec.py), a read-only cgroupfs in a private mount
//! namespace inside a pids group with a limit (`docker run --pids-limit`),
//! and an unprivileged caller (setpriv). tests/it/process/docker.rs runs the same
//! checks against a real engine.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::*;

fn seccomp_exec() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sim/seccomp-exec.py")
}

/// `cmd` (governed-exec and its args) under the Docker-like filter.
fn under_filter(rules: &str, inner: &Command) -> Command {
    let mut c = Command::new("python3");
    c.arg(seccomp_exec())
        .arg(rules)
        .arg("--")
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(std::process::Stdio::null());
    c
}

#[test]
fn clone3_enosys_falls_back_to_clone_pidfd_and_doctor_says_so() {
    require_tool!(
        "clone3_enosys_falls_back_to_clone_pidfd_and_doctor_says_so",
        "python3"
    );
    let e = Env::new();
    let probe = ["sh", "-c", "echo ran; cat /proc/self/cgroup"];
    e.approve(&["--max-processes", "unlimited"], &probe);
    let r = finish_run(output_settled(under_filter(
        "clone3=ENOSYS",
        &e.run_cmd(&[], &probe),
    )));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.class(), "exited");
    assert_eq!(r.predicate()["spawn_path"], "clone_pidfd");
    assert!(r.stdout_text().contains("ran"));
    // Cgroup placement without CLONE_INTO_CGROUP: the child joined the
    // run's v2 group itself, before exec (where one could be made).
    if r.predicate()["cleanup"]["mechanism"]
        .as_str()
        .unwrap_or("")
        .contains("cgroup.kill")
    {
        let v2 = r
            .stdout_text()
            .lines()
            .find(|l| l.starts_with("0::"))
            .unwrap_or("");
        assert!(v2.contains("governed-exec-att-"), "{}", r.stdout_text());
    }
    let dc = doctor_cmd();
    let d = doctor_report(output(under_filter("clone3=ENOSYS", &dc)));
    assert_eq!(doctor_check(&d, "spawn")["mechanism"], "clone_pidfd");
    // Without the filter both say clone3.
    let d = doctor_report(output(doctor_cmd()));
    assert_eq!(doctor_check(&d, "spawn")["mechanism"], "clone3");
    e.approve(&[], &["true"]);
    let r = e.run(&[], &["true"]);
    assert_eq!(r.predicate()["spawn_path"], "clone3", "{}", r.stderr);
}

#[test]
fn clone3_fallback_keeps_the_pid_namespace_and_exec_failure_is_exec_failed() {
    if !is_root() {
        skip!(
            "clone3_fallback_keeps_the_pid_namespace_and_exec_failure_is_exec_failed: needs root"
        );
        return;
    }
    let e = Env::new();
    let probe = ["sh", "-c", "echo ns_pid=$$"];
    e.approve(&["--pid-namespace"], &probe);
    let r = finish_run(output_settled(under_filter(
        "clone3=ENOSYS",
        &e.run_cmd(&[], &probe),
    )));
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The program is pid 2, under governed-exec's init.
    assert!(r.stdout_text().contains("ns_pid=2"), "{}", r.stdout_text());
    assert_eq!(r.predicate()["spawn_path"], "clone_pidfd");
}

/// Run `inner` as root inside a private mount namespace whose cgroup
/// mounts are all read-only, from inside a fresh pids group limited to
/// `limit` (what `docker run --pids-limit` gives a container).
fn in_readonly_cgroupfs(group: &Path, inner: &Command) -> Command {
    let script = format!(
        "echo $$ > {g}/cgroup.procs || exit 90; \
         for m in $(awk '$9 ~ /^cgroup/ {{print $5}}' /proc/self/mountinfo); do mount -o remount,bind,ro \"$m\" || exit 91; done; \
         exec \"$@\"",
        g = group.display()
    );
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(std::process::Stdio::null());
    c
}

struct PidsGroup(PathBuf);

impl PidsGroup {
    fn new(limit: u64) -> Option<PidsGroup> {
        let base = Path::new("/sys/fs/cgroup/pids");
        if !base.join("cgroup.procs").exists() {
            return None;
        }
        let dir = base.join(format!(
            "ge-test-{}-{}",
            std::process::id(),
            tempfile::tempdir()
                .ok()?
                .path()
                .file_name()?
                .to_string_lossy()
        ));
        std::fs::create_dir(&dir).ok()?;
        std::fs::write(dir.join("pids.max"), limit.to_string()).ok()?;
        Some(PidsGroup(dir))
    }
}

impl Drop for PidsGroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

#[test]
fn readonly_cgroupfs_uses_the_enclosing_pids_max_or_refuses_or_honours_the_waiver() {
    if !is_root() {
        skip!("readonly_cgroupfs_uses_the_enclosing_pids_max_or_refuses_or_honours_the_waiver: needs root (mount namespace, cgroup v1 pids)");
        return;
    }
    let Some(group) = PidsGroup::new(64) else {
        skip!("readonly_cgroupfs_uses_the_enclosing_pids_max_or_refuses_or_honours_the_waiver: no writable cgroup v1 pids hierarchy at /sys/fs/cgroup/pids");
        return;
    };
    let e = Env::new();
    let storm = "i=0; while [ $i -lt 150 ]; do sleep 30 & i=$((i+1)); done; echo forked; wait; echo storm-over";
    let probe = ["sh", "-c", storm];
    // max_processes 1024 >= 64: the enclosing limit is the mechanism.
    e.approve(&[], &probe);
    let r = finish_run(output(in_readonly_cgroupfs(
        &group.0,
        &e.run_cmd(&[], &probe),
    )));
    // The shell gives up when a fork is refused: its exit code is its own.
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["cleanup"]["state"], "gone");
    let pl = &r.predicate()["process_limit"];
    assert_eq!(pl["mechanism"], "enclosing_pids_max", "{pl}");
    assert_eq!(pl["enforced_limit"], 64);
    assert!(
        r.predicate()["streams"]["stderr"]["text"]
            .as_str()
            .unwrap_or("")
            .contains("fork"),
        "the storm was not bounded: {}",
        r.predicate()["streams"]["stderr"]["text"]
    );
    // doctor, in the same place, says the same.
    let dc = doctor_cmd();
    let d = doctor_report(output(in_readonly_cgroupfs(&group.0, &dc)));
    assert_eq!(doctor_check(&d, "pids_cgroup")["available"], false);
    assert_eq!(doctor_check(&d, "enclosing_pids_max")["available"], true);
    let standard = d["process_limit_by_profile"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["profile"] == "standard"))
        .expect("standard");
    assert_eq!(standard["mechanism"], "enclosing_pids_max");

    // max_processes 32 < 64: nothing can enforce it; zero spawn, no use.
    let marker = e.path("ran");
    let touch = format!("touch {}", marker.display());
    let small = ["sh", "-c", touch.as_str()];
    e.approve(&["--max-processes", "32"], &small);
    let before = e.journal_executing_count();
    let r = finish_run(output(in_readonly_cgroupfs(
        &group.0,
        &e.run_cmd(&[], &small),
    )));
    r.assert_refused("isolation_unavailable");
    assert!(r.stderr.contains("--pids-limit"), "{}", r.stderr);
    assert!(!marker.exists(), "spawned despite the refusal");
    assert_eq!(e.journal_executing_count(), before, "a refusal spent a use");

    // The approver's waiver (a request of its own): runs, and the receipt says so.
    let touch2 = format!("touch {} && echo waived", marker.display());
    let waived = ["sh", "-c", touch2.as_str()];
    e.approve(&["--max-processes", "unlimited"], &waived);
    let r = finish_run(output(in_readonly_cgroupfs(
        &group.0,
        &e.run_cmd(&[], &waived),
    )));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.predicate()["process_limit"]["mechanism"], "waived");
    assert!(marker.exists());
}

#[test]
fn unprivileged_no_network_uses_seccomp_where_namespaces_are_forbidden() {
    if !is_root() {
        skip!("unprivileged_no_network_uses_seccomp_where_namespaces_are_forbidden: needs root to switch to uid 65534");
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let (e, bin) = unprivileged_env();
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED; exec 4<>/dev/udp/127.0.0.1/{port} && echo UDP; echo done");
    let probe = ["bash", "-c", script.as_str()];
    let docker_like = "clone3=ENOSYS,unshare=EPERM";
    let approve = as_nobody(&bin, &e.approve_cmd(&["--no-network"], &probe));
    let o = output_settled(under_filter(docker_like, &approve));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = finish_run(output_settled(under_filter(
        docker_like,
        &as_nobody(&bin, &e.run_cmd(&[], &probe)),
    )));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let iso = &r.predicate()["isolation"];
    assert_eq!(iso["network_mechanism"], "seccomp_socket_families", "{iso}");
    assert_eq!(iso["network_namespace"], false);
    assert!(iso["boundary"].as_str().unwrap_or("").contains("AF_UNIX"));
    let t = r.stdout_text();
    assert!(
        t.contains("done") && !t.contains("CONNECTED") && !t.contains("UDP"),
        "{t}"
    );
    assert!(
        listener.accept().is_err(),
        "the host listener saw a connection"
    );
    assert_eq!(r.predicate()["spawn_path"], "clone_pidfd");
    assert_eq!(r.predicate()["process_limit"]["mechanism"], "rlimit_nproc");

    // doctor under the same conditions names the same mechanisms.
    let dc = doctor_cmd();
    let d = doctor_report(output_settled(under_filter(
        docker_like,
        &as_nobody(&bin, &dc),
    )));
    assert_eq!(
        doctor_check(&d, "no_network")["mechanism"],
        "seccomp_socket_families"
    );
    assert_eq!(doctor_check(&d, "pid_namespace")["available"], false);
    assert_eq!(doctor_check(&d, "user_namespace")["available"], false);

    // --pid-namespace cannot be had: refused, zero spawn, no use spent.
    let marker = e.path("ws/ran");
    let touch = ["sh", "-c", "touch ran"];
    let o = output_settled(under_filter(
        docker_like,
        &as_nobody(&bin, &e.approve_cmd(&["--pid-namespace"], &touch)),
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = e.journal_executing_count();
    let r = finish_run(output_settled(under_filter(
        docker_like,
        &as_nobody(&bin, &e.run_cmd(&[], &touch)),
    )));
    r.assert_refused("isolation_unavailable");
    assert!(r.stderr.contains("--pid-namespace"), "{}", r.stderr);
    assert!(!marker.exists());
    assert_eq!(e.journal_executing_count(), before);
}

#[test]
fn unprivileged_namespaces_go_through_a_user_namespace_where_the_kernel_allows() {
    if !is_root() {
        skip!("unprivileged_namespaces_go_through_a_user_namespace_where_the_kernel_allows: needs root to switch to uid 65534");
        return;
    }
    let (e, bin) = unprivileged_env();
    let dc = doctor_cmd();
    let d = doctor_report(output_settled(as_nobody(&bin, &dc)));
    if doctor_check(&d, "user_namespace")["available"] != true {
        skip!(
            "unprivileged_namespaces_go_through_a_user_namespace_where_the_kernel_allows: {}",
            doctor_check(&d, "user_namespace")["detail"]
        );
        return;
    }
    assert_eq!(
        doctor_check(&d, "no_network")["mechanism"],
        "user_and_network_namespace"
    );
    assert_eq!(
        doctor_check(&d, "pid_namespace")["mechanism"],
        "user_and_pid_namespace"
    );
    let probe = ["sh", "-c", "echo ns_pid=$$ uid=$(id -u); cat /sys/class/net/*/operstate 2>/dev/null | tr '\\n' ' '; ls /sys/class/net"];
    let o = output_settled(as_nobody(
        &bin,
        &e.approve_cmd(&["--no-network", "--pid-namespace"], &probe),
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = run_as_nobody(&bin, &e.run_cmd(&[], &probe));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let iso = &r.predicate()["isolation"];
    assert_eq!(
        iso["network_mechanism"], "user_and_network_namespace",
        "{iso}"
    );
    assert_eq!(iso["pid_namespace_mechanism"], "user_and_pid_namespace");
    assert_eq!(iso["network_namespace"], true);
    let t = r.stdout_text();
    assert!(t.contains("ns_pid=2 uid=65534"), "{t}");
}

#[test]
fn doctor_reports_every_limit_of_a_lease_and_why_one_cannot_be_set() {
    let e = Env::new();
    let d = doctor_report(output(doctor_cmd()));
    // CONTRACT §9: a memory cgroup where one can be made, else RLIMIT_AS
    // (tests/it/process/resources.rs checks which one against `run`).
    let mem = doctor_check(&d, "memory");
    assert!(
        ["memory_cgroup_v2", "memory_cgroup_v1", "rlimit_as"]
            .iter()
            .any(|m| mem["mechanism"] == *m),
        "{mem}"
    );
    for (name, mechanism) in [
        ("cpu_time", "rlimit_cpu"),
        ("open_files", "rlimit_nofile"),
        ("file_size", "rlimit_fsize"),
        ("wall_time", "deadline"),
        ("output_cap", "drain_count"),
    ] {
        let c = doctor_check(&d, name);
        assert_eq!(c["mechanism"], mechanism, "{c}");
    }
    if !is_root() {
        skip!("the hard-limit half: needs root to lower a hard limit and drop to uid 65534");
        return;
    }
    // A runner whose hard RLIMIT_NOFILE is below the long tier's 4096 and
    // that cannot raise it: doctor says so, with the number.
    let bin = nobody_copy_of_binary(&e);
    let o = output_settled({
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"ulimit -Sn 64 && ulimit -Hn 64 && exec setpriv --reuid 65534 --regid 65534 --clear-groups -- "$0" doctor --json"#)
            .arg(&bin);
        c
    });
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d: Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
    let c = doctor_check(&d, "open_files");
    assert_eq!(c["available"], false, "{c}");
    assert!(c["detail"].as_str().unwrap_or("").contains("64"), "{c}");
}
