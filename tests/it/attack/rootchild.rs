//! A uid-0 child cannot make a claim false (CONTRACT §7).
//! Each test is an attack a root child made on an earlier version; under
//! isolation it must fail, and without isolation the receipt and `verify`
//! must say honestly that the child could have done it.

use std::net::TcpListener;
use std::path::Path;

use crate::support::*;

macro_rules! require_root {
    ($name:expr) => {
        if !is_root() {
            skip!("{}: needs root (CI runs as root)", $name);
            return;
        }
    };
}

const LEFTOVER_GOAL: &str = r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 }, { "kind": "no_leftover_processes" } ] }"#;

fn kill_pid_file(p: &Path) {
    if let Ok(s) = std::fs::read_to_string(p) {
        for pid in s.split_whitespace().filter_map(|x| x.parse::<i32>().ok()) {
            if pid > 1 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

fn caps_kept(r: &Run) -> Vec<String> {
    r.predicate()["isolation"]["capabilities_kept"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_root_child_with_no_network_cannot_setns_into_the_hosts_network() {
    require_root!("a_root_child_with_no_network_cannot_setns_into_the_hosts_network");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let e = Env::new();
    let script = format!(
        "nsenter -t {me} -n bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED'; grep CapBnd /proc/self/status",
        me = std::process::id()
    );
    let probe = ["bash", "-c", script.as_str()];
    e.approve(&["--no-network"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert!(
        !r.stdout_text().contains("CONNECTED"),
        "the child entered the host's network namespace: {}",
        r.stdout_text()
    );
    assert!(
        listener.accept().is_err(),
        "the host listener saw a connection"
    );
    let kept = caps_kept(&r);
    assert!(!kept.is_empty(), "{}", r.predicate()["isolation"]);
    for cap in [
        "CAP_SYS_ADMIN",
        "CAP_NET_ADMIN",
        "CAP_SYS_PTRACE",
        "CAP_MKNOD",
    ] {
        assert!(!kept.iter().any(|k| k == cap), "{cap} kept");
    }
    assert!(
        r.stdout_text().contains("CapBnd:\t000000002004253b"),
        "{}",
        r.stdout_text()
    );
    // Without isolation the same root child does get in: the test can fail.
    e.approve(&[], &probe);
    let r = e.run(&[], &probe);
    assert!(
        r.stdout_text().contains("CONNECTED"),
        "control run did not connect: {} {}",
        r.stdout_text(),
        r.predicate()["streams"]["stderr"]["text"]
    );
}

#[test]
fn a_root_child_with_fs_write_cannot_make_or_reach_a_block_device() {
    require_root!("a_root_child_with_fs_write_cannot_make_or_reach_a_block_device");
    let e = Env::new();
    let probe = [
        "sh",
        "-c",
        "mknod ./blk b 7 0 && echo MADE-NODE; echo blockdevs=$(find /dev -type b 2>/dev/null | wc -l); echo x > /dev/null && echo devnull-ok",
    ];
    e.approve(&["--fs-write-scope"], &probe);
    let r = e.run(&[], &probe);
    if r.reason() == "isolation_unavailable" {
        skip!(
            "a_root_child_with_fs_write_cannot_make_or_reach_a_block_device: {}",
            r.stderr
        );
        return;
    }
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let t = r.stdout_text();
    assert!(!t.contains("MADE-NODE"), "made a block device: {t}");
    assert!(!e.ws.join("blk").exists());
    assert!(t.contains("blockdevs=0"), "host block devices visible: {t}");
    assert!(t.contains("devnull-ok"), "{t}");
}

/// The child moves a daemon out of both run cgroups and bind-mounts over the
/// runner's `/proc/<runner>/task/*/children`, then exits.
const HIDE_DAEMON: &str = r#"r=$PPID
setsid sleep 1000 & d=$!
echo $d > DAEMON
for f in /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/pids/tasks; do echo $d > $f 2>/dev/null; done
for t in /proc/$r/task/*/children; do mount --bind /dev/null $t 2>/dev/null && echo MOUNTED-OVER; done
exit 0"#;

#[test]
fn a_full_root_child_that_hides_a_daemon_gets_an_evadable_receipt_and_no_verdict() {
    require_root!("a_full_root_child_that_hides_a_daemon_gets_an_evadable_receipt_and_no_verdict");
    let e = Env::new();
    e.set_goal(LEFTOVER_GOAL);
    let daemon = e.path("daemon.pid");
    let script = HIDE_DAEMON.replace("DAEMON", &daemon.display().to_string());
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&[], &probe);
    let (r, receipt) = e.run_to_file("r.json", &probe);
    kill_pid_file(&daemon);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let c = &r.predicate()["cleanup"];
    assert_eq!(c["evadable"], true, "{c}");
    assert!(
        c["witness"]
            .as_array()
            .is_some_and(|w| w.iter().any(|x| x == "subreaper_tree")),
        "{c}"
    );
    assert_eq!(r.predicate()["isolation"]["process_limit_evadable"], true);
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no_leftover_processes"), "{out}");
    assert!(out.contains("evadable"), "{out}");
}

#[test]
fn an_isolated_root_child_cannot_hide_a_daemon_from_cleanup() {
    require_root!("an_isolated_root_child_cannot_hide_a_daemon_from_cleanup");
    let e = Env::new();
    e.set_goal(LEFTOVER_GOAL);
    // In the workspace: the directories above the state dir are read-only
    // to an isolated child (its Landlock guard).
    let daemon = e.ws.join("daemon.pid");
    let script = HIDE_DAEMON.replace("DAEMON", &daemon.display().to_string());
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--no-network"], &probe);
    let (r, receipt) = e.run_to_file("r.json", &probe);
    let pid = read_pid(&daemon);
    let survived = pid_alive(pid);
    kill_pid_file(&daemon);
    assert!(!survived, "the daemon survived the run");
    assert!(
        !r.stdout_text().contains("MOUNTED-OVER"),
        "{}",
        r.stdout_text()
    );
    let c = &r.predicate()["cleanup"];
    assert_eq!(c["state"], "gone", "{c}");
    assert_eq!(c["evadable"], false, "{c}");
    assert_eq!(c["leftover_processes_killed"], 1, "{c}");
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("outlived"), "{out}");
}

const FORK_20: &str = r#"for f in /sys/fs/cgroup/pids/tasks /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs; do echo $$ > $f 2>/dev/null && echo LEFT-CGROUP; done
exec python3 -c '
import os, time
n = 0
for i in range(20):
    try:
        if os.fork() == 0:
            time.sleep(3); os._exit(0)
        n += 1
    except OSError:
        break
print("forked", n)
'"#;

#[test]
fn the_process_limit_holds_for_an_isolated_root_child_and_is_reported_evadable_otherwise() {
    require_root!(
        "the_process_limit_holds_for_an_isolated_root_child_and_is_reported_evadable_otherwise"
    );
    let e = Env::new();
    let probe = ["sh", "-c", FORK_20];
    e.approve(&["--max-processes", "8", "--no-network"], &probe);
    let r = e.run(&[], &probe);
    let mech = r.predicate()["isolation"]["process_limit"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if !mech.starts_with("pids_cgroup") {
        skip!("the_process_limit_holds…: no pids cgroup here ({mech})");
        return;
    }
    let t = r.stdout_text();
    assert!(!t.contains("LEFT-CGROUP"), "{t}");
    let forked: u32 = t
        .split_whitespace()
        .skip_while(|w| *w != "forked")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count: {t} {}", r.stderr));
    assert!(forked < 8, "forked {forked} with --max-processes 8");
    assert_eq!(r.predicate()["isolation"]["process_limit_evadable"], false);
    // A full-root child leaves the pids cgroup; the receipt says it could.
    e.approve(&["--max-processes", "8"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.predicate()["isolation"]["process_limit_evadable"], true);
}

#[test]
fn a_pid_namespace_child_sees_only_its_own_proc() {
    require_root!("a_pid_namespace_child_sees_only_its_own_proc");
    let mut host = std::process::Command::new("sleep")
        .arg("30")
        .env("GE_HOST_SECRET", "hunter2-host-environ")
        .spawn()
        .expect("sleep");
    let e = Env::new();
    let script = format!(
        "cat /proc/{pid}/environ; echo; echo procs=$(ls /proc | grep -c '^[0-9]*$'); echo self=$(readlink /proc/self)",
        pid = host.id()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--pid-namespace"], &probe);
    let r = e.run(&[], &probe);
    let _ = host.kill();
    let _ = host.wait();
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let t = r.stdout_text();
    assert!(!t.contains("hunter2"), "read a host process's environ: {t}");
    let procs: u32 = t
        .lines()
        .find_map(|l| l.strip_prefix("procs="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(999);
    assert!(procs < 10, "/proc shows the host: {t}");
    assert_eq!(r.predicate()["isolation"]["proc_remounted"], true);
}

/// Every route to the key a root child under isolation might take.
fn key_probe(key: &Path, state: &Path) -> String {
    format!(
        r#"k={key}; r=$PPID
cat $k; cat /proc/$r/root$k; cat /proc/$r/cwd/$k
for f in /proc/$r/fd/* /proc/$r/task/*/fd/*; do cat $f; done
cat /proc/$r/environ; cat {state}/runner.key; ls {state}
python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); print("ptrace-attach", l.ptrace(16,int(sys.argv[1]),0,0))' $r
dd if=/proc/$r/mem bs=1 count=1 2>&1 | head -c 0
for d in $(find /dev -type b 2>/dev/null); do head -c 4096 $d | grep -a PRIVATE; done
exit 0"#,
        key = key.display(),
        state = state.display()
    )
}

/// An environment whose runner key already exists (made by one run), so a
/// probe can name it; and the key's path.
fn env_with_runner_key() -> (Env, std::path::PathBuf) {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let _ = e.run(&[], &["true"]);
    let key = e.state.join("runner.key");
    (e, key)
}

fn assert_key_not_read(r: &Run, key: &Path) {
    assert_key_not_read_plain(r, key);
    let out = format!(
        "{}{}",
        r.stdout_text(),
        r.predicate()["streams"]["stderr"]["text"]
    );
    assert!(
        out.contains("ptrace-attach -1"),
        "ptrace attach to the runner did not fail: {out}"
    );
}

#[test]
fn an_isolated_root_child_cannot_read_the_runner_key_by_any_route() {
    require_root!("an_isolated_root_child_cannot_read_the_runner_key_by_any_route");
    let (e, key) = env_with_runner_key();
    let script = key_probe(&key, &e.state);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--no-network"], &probe);
    let (r, receipt) = e.run_to_file("r.json", &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_key_not_read(&r, &key);
    assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], true);
    // No --allow-key-in-reach needed.
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().next(), Some("VERIFIED_DONE"), "{out}");
}

#[test]
fn a_key_elsewhere_and_its_bind_mount_alias_are_covered_too() {
    require_root!("a_key_elsewhere_and_its_bind_mount_alias_are_covered_too");
    let e = Env::new();
    let keys = e.path("keys");
    let alias = e.path("alias");
    std::fs::create_dir(&keys).expect("dir");
    std::fs::create_dir(&alias).expect("dir");
    let o = output(cmd().arg("keygen").arg("--out").arg(keys.join("runner")));
    assert!(o.status.success());
    let mounted = std::process::Command::new("mount")
        .arg("--bind")
        .arg(&keys)
        .arg(&alias)
        .status()
        .is_ok_and(|s| s.success());
    let key = keys.join("runner.key");
    let mut script = key_probe(&key, &e.state);
    script = script.replace(
        "exit 0",
        &format!("cat {}/runner.key; exit 0", alias.display()),
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--pid-namespace"], &probe);
    let r = e.run(&["--key", key.to_str().expect("utf8")], &probe);
    if mounted {
        let _ = std::process::Command::new("umount").arg(&alias).status();
    } else {
        skip!("a_key_elsewhere…: could not bind-mount an alias; the direct path is still tested");
    }
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let out = format!(
        "{}{}",
        r.stdout_text(),
        r.predicate()["streams"]["stderr"]["text"]
    );
    assert!(
        !out.contains("PRIVATE KEY"),
        "the child read the key: {out}"
    );
    assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], true);
}

#[test]
fn verify_refuses_a_receipt_whose_key_was_in_the_childs_reach_unless_allowed() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let _ = e.run(&[], &["true"]);
    let key = e.state.join("runner.key");
    // Default mode: the child has the runner's uid and reads the key.
    let script = format!("cat {} >/dev/null && echo READ-KEY", key.display());
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&[], &probe);
    let (r, receipt) = e.run_to_file("r.json", &probe);
    assert!(r.stdout_text().contains("READ-KEY"), "{}", r.stderr);
    assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], false);
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(out.lines().next(), Some("NOT_VERIFIED"));
    assert!(out.contains("signing_key_in_child_reach"), "{out}");
    let o = output(
        e.verify_strict_cmd(&receipt, &e.runner_pub())
            .arg("--allow-key-in-reach"),
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(out.lines().next(), Some("VERIFIED_DONE"), "{out}");
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()).arg("--json"));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["verdict"], "NOT_VERIFIED");
    assert_eq!(v["key_out_of_child_reach"], false);
    assert_eq!(v["key_in_reach_allowed"], false);
    assert!(v["unmet"][0]
        .as_str()
        .unwrap_or("")
        .starts_with("signing_key_in_child_reach"));
}

/// A lease that already has `--fs-write-scope`, whose child could still
/// connect to a daemon socket: each refusal's first fix names that socket
/// and what would close it, never the flag the lease already has.
#[test]
fn verify_names_the_open_daemon_socket_first_when_the_lease_already_has_isolation() {
    require_root!("verify_names_the_open_daemon_socket_first_when_the_lease_already_has_isolation");
    let e = Env::new();
    e.set_goal(LEFTOVER_GOAL);
    let first = run_unprivileged(&e, &[], &["true"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let sock = e.path("daemon.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .expect("chmod");
    let s = sock.display().to_string();
    let r = run_unprivileged(&e, &["--fs-write-scope", "--daemon-socket", &s], &["true"]);
    if r.reason() == "isolation_unavailable" {
        skip!("verify_names_the_open_daemon_socket_first…: {}", r.stderr);
        return;
    }
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], false);
    let receipt = e.path("r.json");
    std::fs::write(&receipt, &r.stdout).expect("save receipt");
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(out.lines().next(), Some("NOT_VERIFIED"), "{out}");
    for reason in ["signing_key_in_child_reach:", "no_leftover_processes:"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(reason))
            .unwrap_or_else(|| panic!("no {reason} in {out}"));
        let first_fix = line.split(';').next().unwrap_or("");
        assert!(
            first_fix.contains(&s),
            "the socket is not named first: {line}"
        );
        assert!(
            !first_fix.contains("--fs-write-scope"),
            "the first fix is a flag the lease has: {line}"
        );
    }
}

/// `receipt show --format text` gives each channel of the child's reach
/// its own line, the reachable ones first, whatever order the receipt
/// lists them in.
#[test]
fn the_text_view_shows_one_line_per_reach_channel_reachable_first() {
    require_root!("the_text_view_shows_one_line_per_reach_channel_reachable_first");
    let e = Env::new();
    let first = run_unprivileged(&e, &[], &["true"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    // A socket the child's modes deny, named first, then one it may use.
    let closed = e.path("closed.sock");
    let open = e.path("open.sock");
    let _l1 = std::os::unix::net::UnixListener::bind(&closed).expect("bind");
    let _l2 = std::os::unix::net::UnixListener::bind(&open).expect("bind");
    let (c, o) = (closed.display().to_string(), open.display().to_string());
    let flags = [
        "--fs-write-scope",
        "--daemon-socket",
        &c,
        "--daemon-socket",
        &o,
    ];
    e.approve(&flags, &["true"]);
    let bin = nobody_copy_of_binary(&e);
    std::os::unix::fs::chown(&closed, Some(0), Some(0)).expect("chown");
    std::fs::set_permissions(&closed, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .expect("chmod");
    let mut cmd = as_nobody(&bin, &e.run_cmd(&[], &["true"]));
    cmd.env("HOME", e.dir.path());
    let r = finish_run(output_settled(cmd));
    if r.reason() == "isolation_unavailable" {
        skip!(
            "the_text_view_shows_one_line_per_reach_channel…: {}",
            r.stderr
        );
        return;
    }
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let reach = r.predicate()["isolation"]["reach"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let pos = |path: &str| reach.iter().position(|x| x["path"] == path);
    let (pc, po) = (pos(&c).expect("closed entry"), pos(&o).expect("open entry"));
    assert!(
        pc < po,
        "the receipt lists the closed socket first: {reach:?}"
    );
    assert_eq!(reach[po]["reachable"], true, "{reach:?}");
    assert_eq!(reach[pc]["reachable"], false, "{reach:?}");
    let receipt = e.path("r.json");
    std::fs::write(&receipt, &r.stdout).expect("save receipt");
    let o2 = output(cmd_show(&receipt));
    let view = String::from_utf8_lossy(&o2.stdout).to_string();
    assert!(o2.status.success(), "{view}");
    // Each channel starts its own line; reachable ones come first.
    let starts: Vec<(usize, bool)> = reach
        .iter()
        .map(|x| {
            let name = format!(
                "{} {}",
                x["channel"].as_str().unwrap_or(""),
                x["path"].as_str().unwrap_or("")
            );
            let name = name.trim_end().to_string();
            let state = if x["reachable"] == true {
                "REACHABLE"
            } else {
                "out of reach"
            };
            let at = view
                .lines()
                .position(|l| l.contains(&format!("{state} {name}")))
                .unwrap_or_else(|| panic!("no line for {state} {name} in\n{view}"));
            (at, x["reachable"] == true)
        })
        .collect();
    let mut lines: Vec<usize> = starts.iter().map(|(l, _)| *l).collect();
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines.len(), reach.len(), "channels share a line:\n{view}");
    let last_open = starts.iter().filter(|(_, o)| *o).map(|(l, _)| *l).max();
    let first_closed = starts.iter().filter(|(_, o)| !*o).map(|(l, _)| *l).min();
    if let (Some(a), Some(b)) = (last_open, first_closed) {
        assert!(a < b, "a reachable channel after one out of reach:\n{view}");
    }
}

fn cmd_show(receipt: &Path) -> std::process::Command {
    let mut c = cmd();
    c.args(["receipt", "show"])
        .arg(receipt)
        .args(["--format", "text"]);
    c
}

/// `run` as uid 65534 (an unprivileged runner), with `flags` on the lease.
fn run_unprivileged(e: &Env, flags: &[&str], probe: &[&str]) -> Run {
    e.approve(flags, probe);
    let bin = nobody_copy_of_binary(e);
    let mut c = as_nobody(&bin, &e.run_cmd(&[], probe));
    c.env("HOME", e.dir.path());
    finish_run(output_settled(c))
}

#[test]
fn an_unprivileged_runner_keeps_its_key_from_an_isolated_child_of_its_own_uid() {
    require_root!("an_unprivileged_runner_keeps_its_key_from_an_isolated_child_of_its_own_uid");
    let e = Env::new();
    let key = e.state.join("runner.key");
    // The key exists before the probe run (created by a first run).
    let first = run_unprivileged(&e, &[], &["true"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(key.exists());
    assert_eq!(
        first.predicate()["signing"]["key_out_of_child_reach"],
        false,
        "default mode: the child has the runner's uid and can read the key"
    );
    let script = key_probe(&key, &e.state);
    let probe = ["sh", "-c", script.as_str()];
    let r = run_unprivileged(&e, &["--fs-write-scope"], &probe);
    if r.reason() == "isolation_unavailable" {
        skip!("an_unprivileged_runner_keeps_its_key…: {}", r.stderr);
        return;
    }
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["isolation"]["uid"], 65534);
    assert_key_not_read(&r, &key);
    assert_eq!(
        r.predicate()["signing"]["key_out_of_child_reach"],
        true,
        "{}",
        r.predicate()["signing"]
    );
    // The child cannot replace the key or the public half verify trusts.
    let script = format!(
        "rm -f {s}/runner.pub; echo x > {s}/runner.key; mv {s}/runner.key {s}/k2; ls {s} >/dev/null && echo LISTED",
        s = e.state.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    let before = std::fs::read(&key).expect("key");
    let r = run_unprivileged(&e, &["--fs-write-scope"], &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(std::fs::read(&key).expect("key"), before);
    assert!(e.state.join("runner.pub").exists());
}

#[test]
fn a_key_with_a_second_hard_link_is_reported_in_reach() {
    require_root!("a_key_with_a_second_hard_link_is_reported_in_reach");
    let e = Env::new();
    e.approve(&[], &["true"]);
    let _ = e.run(&[], &["true"]);
    let key = e.state.join("runner.key");
    // A second name for the same inode, outside every covered path.
    let link = e.path("key-link");
    std::fs::hard_link(&key, &link).expect("link");
    let script = format!("cat {} | head -1", link.display());
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--no-network"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    // The child did read it, and the receipt does not pretend otherwise.
    assert!(
        r.stdout_text().contains("PRIVATE KEY"),
        "{}",
        r.stdout_text()
    );
    let s = &r.predicate()["signing"];
    assert_eq!(s["key_out_of_child_reach"], false, "{s}");
    assert!(s["why"].as_str().unwrap_or("").contains("hard link"), "{s}");
}

#[test]
fn a_root_runner_without_cap_sys_admin_still_runs_isolated_children_and_says_what_it_could_not_cover(
) {
    require_root!("a_root_runner_without_cap_sys_admin_still_runs_isolated_children…");
    // A container's usual state: root without CAP_SYS_ADMIN.
    let e = Env::new();
    std::fs::set_permissions(
        e.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    std::fs::set_permissions(&e.ws, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("chmod");
    let without_admin = |flags: &[&str], probe: &[&str]| {
        e.approve(flags, probe);
        let inner = e.run_cmd(&[], probe);
        let mut c = std::process::Command::new("setpriv");
        c.args(["--bounding-set", "-sys_admin", "--"])
            .arg(inner.get_program())
            .args(inner.get_args())
            .stdin(std::process::Stdio::null());
        finish_run(output(&mut c))
    };
    let probe = ["sh", "-c", "grep CapEff /proc/self/status"];
    let r = without_admin(&["--as-user", "65534"], &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["isolation"]["mount_namespace"], false);
    assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], true);
    let r = without_admin(&["--fs-write-scope"], &probe);
    if r.reason() == "isolation_unavailable" && r.stderr.contains("Landlock") {
        skip!("…without_cap_sys_admin: {}", r.stderr);
        return;
    }
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert!(
        r.stdout_text().contains("CapEff:\t000000002004253b"),
        "{}",
        r.stdout_text()
    );
    let s = &r.predicate()["signing"];
    assert_eq!(s["key_out_of_child_reach"], false, "{s}");
    assert!(
        s["why"].as_str().unwrap_or("").contains("CAP_SYS_ADMIN"),
        "{s}"
    );
    // Without a mount namespace nothing covers a daemon socket, and this
    // child keeps CAP_DAC_OVERRIDE: where dockerd listens, it could have
    // asked it for processes outside every witness.
    let cleanup = &r.predicate()["cleanup"];
    let docker = std::path::Path::new("/var/run/docker.sock").exists();
    assert_eq!(cleanup["evadable"], docker, "{cleanup}");
    if docker {
        assert!(
            cleanup["evadable_why"]
                .as_str()
                .unwrap_or("")
                .contains("docker.sock"),
            "{cleanup}"
        );
    }
}

#[test]
fn an_isolated_root_child_cannot_leave_its_mount_namespace_through_its_cwd() {
    // The child's cwd must be in its own mount namespace: a cwd left in the
    // runner's tree lets `..` walk around every covering mount (the key, the
    // state dir, the read-only /proc/sys and /sys) and out of the cgroups.
    require_root!("an_isolated_root_child_cannot_leave_its_mount_namespace_through_its_cwd");
    let (e, key) = env_with_runner_key();
    let ws = std::fs::canonicalize(&e.ws).expect("ws");
    let up = vec![".."; ws.components().count() - 1].join("/");
    let script = format!(
        r#"/bin/pwd
cat ../state/runner.key
echo $$ > {up}/sys/fs/cgroup/pids/cgroup.procs 2>/dev/null && echo ESCAPED-PIDS
echo $$ > {up}/sys/fs/cgroup/unified/cgroup.procs 2>/dev/null && echo ESCAPED-V2
v=$(cat {up}/proc/sys/vm/overcommit_ratio 2>/dev/null)
[ -n "$v" ] && echo "$v" > {up}/proc/sys/vm/overcommit_ratio 2>/dev/null && echo WROTE-PROC-SYS
exit 0"#
    );
    let probe = ["sh", "-c", script.as_str()];
    for flags in [
        &["--no-network"][..],
        &["--pid-namespace"][..],
        &["--fs-write-scope"][..],
    ] {
        e.approve(flags, &probe);
        let r = e.run(&[], &probe);
        assert_eq!(r.class(), "exited", "{flags:?}: {}", r.stderr);
        let out = r.stdout_text();
        assert_eq!(
            out.lines().next(),
            Some(ws.to_str().expect("utf-8")),
            "{flags:?}: the child's cwd is not in its own mount namespace: {out}"
        );
        assert_key_not_read_plain(&r, &key);
        for escaped in ["ESCAPED-PIDS", "ESCAPED-V2", "WROTE-PROC-SYS"] {
            assert!(!out.contains(escaped), "{flags:?}: {escaped}: {out}");
        }
    }
}

/// The key's text appears nowhere in what the child printed.
fn assert_key_not_read_plain(r: &Run, key: &Path) {
    let pem = std::fs::read_to_string(key).expect("key");
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let out = format!(
        "{}{}",
        r.stdout_text(),
        r.predicate()["streams"]["stderr"]["text"]
    );
    assert!(
        !out.contains("PRIVATE KEY") && !out.contains(&body),
        "the child read the key: {out}"
    );
}

/// In a user namespace of its own a uid-0 child holds CAP_SYS_ADMIN over a
/// new cgroup and mount namespace; its cgroup namespace is rooted at the
/// run's pids group, so mounting the v1 pids hierarchy there would let it
/// raise its own pids.max. A Landlock domain forbids every mount.
const RAISE_PIDS_MAX: &str = r#"import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
print("unshare", libc.unshare(0x10000000 | 0x00020000 | 0x02000000))
libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18), None)
os.mkdir("m")
if libc.mount(b"none", b"m", b"cgroup", 0, b"pids") == 0:
    open("m/pids.max", "w").write("max")
    print("RAISED", open("m/pids.max").read().strip())
n = 0
for i in range(30):
    try:
        if os.fork() == 0:
            time.sleep(1); os._exit(0)
        n += 1
    except OSError:
        break
print("forked", n)
for _ in range(n): os.wait()
"#;

#[test]
fn an_isolated_root_child_cannot_raise_its_pids_max_through_a_user_namespace() {
    require_root!("an_isolated_root_child_cannot_raise_its_pids_max_through_a_user_namespace");
    let e = Env::new();
    let probe = ["python3", "-c", RAISE_PIDS_MAX];
    for flags in [&["--no-network"][..], &["--pid-namespace"][..]] {
        let mut approve = flags.to_vec();
        approve.extend(["--max-processes", "8"]);
        e.approve(&approve, &probe);
        let r = e.run(&[], &probe);
        let out = r.stdout_text();
        let p = r.predicate();
        assert!(!out.contains("RAISED"), "{flags:?}: {out}");
        let forked: u32 = out
            .lines()
            .find_map(|l| l.strip_prefix("forked "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        assert!(forked < 8, "{flags:?}: limit 8, forked {forked}: {out}");
        assert_eq!(p["isolation"]["process_limit_evadable"], false, "{flags:?}");
        assert_eq!(p["cleanup"]["evadable"], false, "{flags:?}");
    }
}

/// The state dir is covered, its parent is not: renaming the parent would
/// carry the cover away with it, and the child could plant a state dir,
/// and a runner key, of its own at the old path.
#[test]
fn an_isolated_root_child_cannot_replace_the_state_dir_by_renaming_its_parent() {
    require_root!("an_isolated_root_child_cannot_replace_the_state_dir_by_renaming_its_parent");
    rename_attack(&["--no-network"]);
}

/// `--as-user 0` drops every capability, but uid 0 still owns the state
/// dir's parent: it got the mount covers and not the guard, renamed the
/// parent and planted its own runner key.
#[test]
fn an_as_user_0_child_cannot_replace_the_state_dir_by_renaming_its_parent() {
    require_root!("an_as_user_0_child_cannot_replace_the_state_dir_by_renaming_its_parent");
    rename_attack(&["--as-user", "0"]);
}

fn rename_attack(flags: &[&str]) {
    let (e, _) = env_with_runner_key();
    let runner_pub = std::fs::read(e.runner_pub()).expect("runner.pub");
    let parent = e.dir.path().display().to_string();
    let script = format!(
        "mv {parent} {parent}.moved && echo MOVED-PARENT; mkdir {parent}/planted && echo MADE-ENTRY; mv {parent}/ws {parent}/ws2 && echo MOVED-WS; exit 0"
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(flags, &probe);
    let (r, receipt) = e.run_to_file("r.json", &probe);
    let out = r.stdout_text();
    for done in ["MOVED-PARENT", "MADE-ENTRY"] {
        assert!(!out.contains(done), "{done}: {out}");
    }
    assert_eq!(
        std::fs::read(e.runner_pub()).expect("runner.pub"),
        runner_pub
    );
    assert_eq!(
        r.predicate()["signing"]["key_out_of_child_reach"],
        true,
        "{}",
        r.stderr
    );
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    let verdict = String::from_utf8_lossy(&o.stdout);
    assert_eq!(verdict.lines().next(), Some("VERIFIED_DONE"), "{verdict}");
}

#[test]
fn an_isolated_root_child_cannot_turn_host_wide_proc_knobs() {
    require_root!("an_isolated_root_child_cannot_turn_host_wide_proc_knobs");
    if !Path::new("/proc/irq/default_smp_affinity").exists() {
        skip!("an_isolated_root_child_cannot_turn_host_wide_proc_knobs: no /proc/irq here");
        return;
    }
    let e = Env::new();
    // Writes back the value it read: nothing changes on the host even if
    // the write went through.
    let script = "v=$(cat /proc/irq/default_smp_affinity) && echo \"$v\" > /proc/irq/default_smp_affinity && echo WROTE-IRQ; \
                  v=$(cat /proc/sys/kernel/core_uses_pid) && echo \"$v\" > /proc/sys/kernel/core_uses_pid && echo WROTE-SYS; exit 0";
    let probe = ["sh", "-c", script];
    for flags in [&["--no-network"][..], &["--pid-namespace"][..]] {
        e.approve(flags, &probe);
        let r = e.run(&[], &probe);
        assert_eq!(r.class(), "exited", "{flags:?}: {}", r.stderr);
        for wrote in ["WROTE-IRQ", "WROTE-SYS"] {
            assert!(!r.stdout_text().contains(wrote), "{flags:?}: {wrote}");
        }
    }
}
