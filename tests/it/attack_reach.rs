//! Attacks on the child's reach (issue 18): daemon sockets reached by a
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
