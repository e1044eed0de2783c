//! The child's reach, computed and stated (CONTRACT §7, last paragraph):
//! a daemon socket that acts for whoever
//! connects (Docker's, against the machine's real engine) is either out of
//! the child's reach by a named mechanism, or the receipt says the key was
//! in reach and the cleanup evadable, naming the socket, and `verify`
//! refuses it.

use std::path::Path;

use crate::support::*;

const DOCKER_SOCK: &str = "/var/run/docker.sock";

/// A probe that asks the daemon behind `sock` for `/_ping` and prints
/// `DAEMON-ANSWERED` when it answers.
fn ping_probe(sock: &str) -> String {
    format!(
        "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{sock}'); s.sendall(b'GET /_ping HTTP/1.0\\r\\n\\r\\n'); print('DAEMON-ANSWERED' if b'200' in s.recv(64) else 'NO')\" 2>&1; exit 0"
    )
}

fn docker_socket_or_skip(test: &str) -> bool {
    if !is_root() {
        skip!("{test}: needs root (CI runs as root)");
        return false;
    }
    if !Path::new(DOCKER_SOCK).exists() {
        skip!("{test}: no Docker engine socket at {DOCKER_SOCK} (CI starts one)");
        return false;
    }
    true
}

fn socket_entry(r: &Run) -> Option<&serde_json::Value> {
    r.predicate()["isolation"]["reach"]
        .as_array()?
        .iter()
        .find(|e| {
            e["channel"] == "daemon_socket"
                && e["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("docker.sock"))
        })
}

#[test]
fn an_isolated_root_child_cannot_ask_docker_for_the_runner_key() {
    if !docker_socket_or_skip("an_isolated_root_child_cannot_ask_docker_for_the_runner_key") {
        return;
    }
    let e = Env::new();
    let script = ping_probe(DOCKER_SOCK);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(
        &["--no-network", "--pid-namespace", "--fs-write-scope"],
        &probe,
    );
    let (r, receipt) = e.run_to_file("r.json", &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert!(
        !r.stdout_text().contains("DAEMON-ANSWERED"),
        "{}",
        r.stdout_text()
    );
    let entry = socket_entry(&r).expect("a daemon_socket reach entry");
    assert_eq!(entry["reachable"], false, "{entry}");
    assert!(
        entry["how"].as_str().unwrap_or("").contains("covered"),
        "{entry}"
    );
    assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], true);
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    let v = String::from_utf8_lossy(&o.stdout);
    assert_eq!(v.lines().next(), Some("VERIFIED_DONE"), "{v}");
}

#[test]
fn a_root_childs_receipt_names_the_docker_socket_it_could_reach_and_verify_refuses_it() {
    if !docker_socket_or_skip("a_root_childs_receipt_names_the_docker_socket…") {
        return;
    }
    // Default mode: a full root child reaches everything; the receipt must
    // name the socket among the reasons, and verify refuses.
    let e = Env::new();
    e.set_goal(
        r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
      "criteria": [ { "kind": "exit_code", "equals": 0 }, { "kind": "no_leftover_processes" } ] }"#,
    );
    let script = ping_probe(DOCKER_SOCK);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&[], &probe);
    let (r, receipt) = e.run_to_file("r.json", &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert!(
        r.stdout_text().contains("DAEMON-ANSWERED"),
        "the control: {}",
        r.stdout_text()
    );
    let entry = socket_entry(&r).expect("a daemon_socket reach entry");
    assert_eq!(entry["reachable"], true, "{entry}");
    let p = r.predicate();
    assert_eq!(p["signing"]["key_out_of_child_reach"], false);
    assert_eq!(p["cleanup"]["evadable"], true);
    assert!(
        p["cleanup"]["evadable_why"]
            .as_str()
            .unwrap_or("")
            .contains("docker.sock"),
        "{}",
        p["cleanup"]
    );
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    let v = String::from_utf8_lossy(&o.stdout);
    assert_eq!(v.lines().next(), Some("NOT_VERIFIED"), "{v}");
    assert!(
        v.contains("no_leftover_processes") && v.contains("docker.sock"),
        "{v}"
    );
}

#[test]
fn a_child_of_another_uid_is_kept_from_the_docker_socket_by_its_modes() {
    if !docker_socket_or_skip("a_child_of_another_uid_is_kept_from_the_docker_socket_by_its_modes")
    {
        return;
    }
    let e = Env::new();
    let script = ping_probe(DOCKER_SOCK);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--as-user", "65534"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert!(
        !r.stdout_text().contains("DAEMON-ANSWERED"),
        "{}",
        r.stdout_text()
    );
    let entry = socket_entry(&r).expect("a daemon_socket reach entry");
    assert_eq!(entry["reachable"], false, "{entry}");
    assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], true);
}

/// The usual self-hosted CI runner: a non-root uid in group `docker`. Its
/// isolated child keeps the runner's groups (a non-root runner cannot drop
/// them), so it reaches dockerd; Landlock does not mediate connect(2) on a
/// path socket. The receipt must say so and `verify` must refuse.
#[test]
fn a_runner_in_the_docker_group_gets_a_receipt_that_says_its_child_reached_docker() {
    if !docker_socket_or_skip("a_runner_in_the_docker_group_gets_a_receipt…") {
        return;
    }
    let gid = std::fs::metadata(DOCKER_SOCK)
        .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
        .expect("socket");
    let e = Env::new();
    let script = ping_probe(DOCKER_SOCK);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--fs-write-scope"], &probe);
    let bin = nobody_copy_of_binary(&e);
    let inner = e.run_cmd(&[], &probe);
    let mut c = std::process::Command::new("setpriv");
    c.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--groups",
        &gid.to_string(),
        "--",
    ])
    .arg(&bin)
    .args(inner.get_args())
    .env("HOME", e.dir.path())
    .stdin(std::process::Stdio::null());
    let r = finish_run(output_settled(c));
    if r.reason() == "isolation_unavailable" {
        skip!("a_runner_in_the_docker_group…: {}", r.stderr);
        return;
    }
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let entry = socket_entry(&r).expect("a daemon_socket reach entry");
    let reached = r.stdout_text().contains("DAEMON-ANSWERED");
    assert_eq!(
        entry["reachable"],
        reached,
        "the entry must match what the child could do: {entry} / {}",
        r.stdout_text()
    );
    if reached {
        assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], false);
        assert_eq!(r.predicate()["cleanup"]["evadable"], true);
        let receipt = e.path("r.json");
        std::fs::write(&receipt, &r.stdout).expect("save");
        let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
        let v = String::from_utf8_lossy(&o.stdout);
        assert_eq!(v.lines().next(), Some("NOT_VERIFIED"), "{v}");
        assert!(v.contains("docker.sock"), "{v}");
    }
}

/// A lease's `--ledger DIR` holds its uses and revocations: an isolated
/// child that deletes it runs a 1-use lease again (finding 3).
#[test]
fn an_isolated_child_cannot_touch_the_ledger_dir_its_lease_names() {
    if !is_root() {
        skip!("an_isolated_child_cannot_touch_the_ledger_dir_its_lease_names: needs root");
        return;
    }
    let e = Env::new();
    let ledger = e.path("ledger");
    let script = format!(
        "ls {l}/journal >/dev/null 2>&1 && echo SAW-JOURNAL; rm -rf {l}/journal; exit 0",
        l = ledger.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(
        &["--no-network", "--ledger", ledger.to_str().expect("utf8")],
        &probe,
    );
    let r = e.run(&[], &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert!(
        !r.stdout_text().contains("SAW-JOURNAL"),
        "{}",
        r.stdout_text()
    );
    assert!(
        ledger.join("journal").is_dir(),
        "the child removed the ledger's journal"
    );
    let entry = r.predicate()["isolation"]["reach"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["channel"] == "ledger_dir").cloned())
        .expect("a ledger_dir reach entry");
    assert_eq!(entry["reachable"], false, "{entry}");
    // The one use is spent: a second run is refused.
    let again = e.run(&[], &probe);
    again.assert_refused("lease_exhausted");
}

/// A socket the approver names (`--daemon-socket`) is one more channel of
/// the reach: covered for an isolated root child, stated in the receipt.
#[test]
fn a_daemon_socket_the_approver_names_is_covered_and_stated() {
    if !is_root() {
        skip!("a_daemon_socket_the_approver_names_is_covered_and_stated: needs root (CI runs as root)");
        return;
    }
    let e = Env::new();
    let sock = e.path("agent.sock");
    let sock_s = sock.display().to_string();
    // A stand-in daemon that answers every connection.
    let mut daemon = std::process::Command::new("python3")
        .args([
            "-c",
            "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1]); s.listen(8)\nwhile True:\n  c,_=s.accept(); c.recv(256); c.sendall(b'200 DAEMON'); c.close()",
            &sock_s,
        ])
        .spawn()
        .expect("daemon");
    for _ in 0..100 {
        if sock.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let script = ping_probe(&sock_s);
    let probe = ["sh", "-c", script.as_str()];
    // The control: without naming it, an isolated root child reaches it.
    e.approve(&["--no-network", "--uses", "2"], &probe);
    let r = e.run(&[], &probe);
    assert!(
        r.stdout_text().contains("DAEMON-ANSWERED"),
        "control: {}",
        r.stdout_text()
    );
    // Named: covered, and the receipt says so.
    e.approve(&["--no-network", "--daemon-socket", &sock_s], &probe);
    let r = e.run(&[], &probe);
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert!(
        !r.stdout_text().contains("DAEMON-ANSWERED"),
        "{}",
        r.stdout_text()
    );
    let entry = r.predicate()["isolation"]["reach"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|x| {
                    x["path"]
                        .as_str()
                        .is_some_and(|p| p.ends_with("agent.sock"))
                })
                .cloned()
        })
        .expect("the named socket's reach entry");
    assert_eq!(entry["reachable"], false, "{entry}");
    assert!(
        entry["how"]
            .as_str()
            .unwrap_or("")
            .contains("named by the approver"),
        "{entry}"
    );
    // A relative path is refused at approve.
    let o = output(e.approve_cmd(&["--daemon-socket", "agent.sock"], &probe));
    assert_eq!(o.status.code(), Some(2));
}

/// A portable lease's write scope follows `run --workspace`: the summary
/// says so where the approver decides.
#[test]
fn a_portable_write_scope_says_it_follows_the_workspace_run_names() {
    let e = Env::new();
    let o = output(e.approve_cmd(&["--portable", "--fs-write-scope"], &["true"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = String::from_utf8_lossy(&o.stderr);
    assert!(summary.contains("`run --workspace` names"), "{summary}");
}

/// `approve` says, where the approver decides, when a daemon socket will be
/// in the child's reach on this machine (its receipts will not verify), and
/// stays quiet where the socket is covered or the modes keep it out.
#[test]
fn approve_warns_when_a_daemon_socket_will_be_in_the_childs_reach() {
    if !docker_socket_or_skip("approve_warns_when_a_daemon_socket_will_be_in_the_childs_reach") {
        return;
    }
    let gid = std::fs::metadata(DOCKER_SOCK)
        .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
        .expect("socket");
    let e = Env::new();
    let warned = |flags: &[&str]| {
        let o = output(e.approve_cmd(flags, &["true"]));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s = String::from_utf8_lossy(&o.stderr).to_string();
        s.lines()
            .any(|l| l.contains("WARNING") && l.contains("docker.sock"))
    };
    let docker_gid = format!("65534:{gid}");
    assert!(
        warned(&["--as-user", &docker_gid]),
        "a child in docker's group"
    );
    assert!(
        !warned(&["--as-user", &docker_gid, "--pid-namespace"]),
        "covers hold with a fresh /proc"
    );
    assert!(!warned(&["--as-user", "65534:65534"]), "modes keep it out");
    assert!(
        !warned(&["--no-network"]),
        "an isolated root child: covered"
    );
}

/// A runner that is itself uid 65534 (nobody) and enters a user namespace
/// for `--pid-namespace`: inside it every owner it does not map reads as
/// the overflow uid, 65534. The reach is judged on the host's owners, read
/// before the namespace: root:docker 0660 is not the child's to connect to,
/// and the entry says so, matching what the child could actually do.
#[test]
fn a_nobody_runner_in_a_user_namespace_does_not_take_root_owned_sockets_for_its_own() {
    if !docker_socket_or_skip("a_nobody_runner_in_a_user_namespace…") {
        return;
    }
    let e = Env::new();
    let script = ping_probe(DOCKER_SOCK);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--pid-namespace"], &probe);
    let bin = nobody_copy_of_binary(&e);
    let mut c = as_nobody(&bin, &e.run_cmd(&[], &probe));
    c.env("HOME", e.dir.path());
    let r = finish_run(output_settled(c));
    if r.reason() == "isolation_unavailable" {
        skip!("a_nobody_runner_in_a_user_namespace…: {}", r.stderr);
        return;
    }
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(
        r.predicate()["isolation"]["pid_namespace_mechanism"],
        "user_and_pid_namespace"
    );
    let entry = socket_entry(&r).expect("a daemon_socket reach entry");
    let reached = r.stdout_text().contains("DAEMON-ANSWERED");
    assert!(!reached, "uid 65534 reached Docker: {}", r.stdout_text());
    assert_eq!(entry["reachable"], false, "{entry}");
    assert!(
        entry["how"].as_str().unwrap().contains("owner 0:"),
        "the host's owner, not the overflow uid: {entry}"
    );
}
