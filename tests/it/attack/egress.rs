//! Attacks on the v1.2 promises (CONTRACT §8 egress allowlist, §9 memory
//! cgroup and resource accounting, §10 approvals file), through the real
//! binary. Each case is an attempt to make governed-exec report something
//! that did not happen; each asserts what the contract promises.

use crate::support::*;

/// The memory cgroup `run` will use here, or SKIP with doctor's reason.
fn memory_cgroup(test: &str) -> bool {
    if !is_root() {
        skip!("{test}: needs root to make a per-run memory cgroup");
        return false;
    }
    let o = output(cmd().args(["doctor", "--json"]));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    if !text.contains("memory_cgroup_") {
        skip!("{test}: no memory cgroup here (doctor: {text})");
        return false;
    }
    true
}

/// §9: `memory_limit_reaped` is "the kernel killed the main process for the
/// memory cgroup's limit"; "an OOM kill of another process leaves the main
/// outcome as it is". Here the OOM killer kills a helper (the main shell
/// survives it and prints the helper's 137), then the main process SIGKILLs
/// itself. Nothing killed the main process for memory: the outcome must be
/// `signaled` (128 + 9), not `memory_limit_reaped` (121).
#[test]
fn a_main_process_that_sigkills_itself_after_a_sibling_oom_is_not_memory_limit_reaped() {
    if !memory_cgroup(
        "a_main_process_that_sigkills_itself_after_a_sibling_oom_is_not_memory_limit_reaped",
    ) {
        return;
    }
    let e = Env::new();
    let probe = [
        "sh",
        "-c",
        "python3 -c \"b = b'x' * (600 << 20)\"; echo helper-status=$?; kill -9 $$",
    ];
    e.approve(&["--memory", "512MiB"], &probe);
    let r = e.run(&[], &probe);
    assert!(
        r.stdout_text().contains("helper-status=137"),
        "the helper was not OOM-killed: {}",
        r.stdout_text()
    );
    assert_eq!(
        r.predicate()["resources"]["oom_kills"],
        1,
        "{}",
        r.predicate()["resources"]
    );
    assert_eq!(
        (r.class(), r.code),
        ("signaled", 137),
        "the main process killed itself with SIGKILL after a helper's OOM kill; the receipt says: {}",
        r.outcome()
    );
}

/// An upstream HTTP/1.1 server (keep-alive) on 10.23.0.2:8080 that logs
/// `PATH HOST` for every request it serves.
const UPSTREAM_PY: &str = r#"
import http.server, sys
log, ready = sys.argv[1:3]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(s):
        with open(log, "a") as f:
            f.write("%s %s\n" % (s.path, s.headers.get("Host")))
        body = b"served\n"
        s.send_response(200)
        s.send_header("Content-Length", str(len(body)))
        s.end_headers()
        s.wfile.write(body)
    def log_message(s, *a): pass
srv = http.server.ThreadingHTTPServer(("10.23.0.2", 8080), H)
open(ready, "w").close()
srv.serve_forever()
"#;

/// Two network namespaces joined by a veth pair: the runner's (10.23.0.1)
/// and the upstream server's (10.23.0.2). Addresses exist only inside them.
struct NetLab {
    ns_runner: String,
    ns_server: String,
    server: Option<std::process::Child>,
    dir: tempfile::TempDir,
}

impl NetLab {
    fn new(test: &str) -> Option<NetLab> {
        use std::process::{Command, Stdio};
        if !is_root() {
            skip!("{test}: needs root to make network namespaces");
            return None;
        }
        let has = |t: &str| {
            Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        for t in ["ip", "nsenter", "python3", "curl"] {
            if !has(t) {
                skip!("{test}: needs `{t}`");
                return None;
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let tag = format!("{}-{:x}", std::process::id(), nanos % 0xfffff);
        let mut lab = NetLab {
            ns_runner: format!("ge23r-{tag}"),
            ns_server: format!("ge23s-{tag}"),
            server: None,
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let (r, s) = (&lab.ns_runner, &lab.ns_server);
        let made = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "set -e; ip netns add {r}; ip netns add {s}; \
                     ip -n {r} link add v0 type veth peer name v1 netns {s}; \
                     ip -n {r} addr add 10.23.0.1/24 dev v0; ip -n {s} addr add 10.23.0.2/24 dev v1; \
                     ip -n {r} link set lo up; ip -n {s} link set lo up; \
                     ip -n {r} link set v0 up; ip -n {s} link set v1 up"
                ),
            ])
            .status()
            .is_ok_and(|st| st.success());
        if !made {
            skip!("{test}: cannot make network namespaces and a veth pair here");
            return None;
        }
        let d = lab.dir.path();
        std::fs::write(d.join("upstream.py"), UPSTREAM_PY).unwrap();
        lab.server = Some(
            Command::new("ip")
                .args(["netns", "exec", s, "python3"])
                .arg(d.join("upstream.py"))
                .arg(d.join("upstream.log"))
                .arg(d.join("ready"))
                .stdin(Stdio::null())
                .spawn()
                .expect("upstream server"),
        );
        let t0 = std::time::Instant::now();
        while !d.join("ready").exists() {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "upstream never became ready"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Some(lab)
    }

    /// `PATH HOST` per request the upstream served.
    fn served(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("upstream.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Run `command` under its lease, the runner in the lab's runner namespace.
    fn run(&self, e: &Env, command: &[&str]) -> Run {
        let inner = e.run_cmd(&[], command);
        let mut w = std::process::Command::new("nsenter");
        w.arg(format!("--net=/run/netns/{}", self.ns_runner))
            .arg("--")
            .arg(inner.get_program())
            .args(inner.get_args())
            .stdin(std::process::Stdio::null());
        for (k, v) in inner.get_envs() {
            if let Some(v) = v {
                w.env(k, v);
            }
        }
        finish_run(output(w))
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.ns_runner, &self.ns_server] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}

/// §8: absolute-form plain HTTP "reaches a listed host:port only". A proxy
/// that receives an absolute-form request must replace the Host header
/// with the target's authority (RFC 9112 §3.2.2); this one forwards the
/// child's own `Host: evil.test` to the listed upstream, so a request for
/// another (virtual) host goes out while the receipt names only the listed
/// entry.
#[test]
fn a_plain_http_request_to_a_listed_host_carries_the_childs_host_header_upstream() {
    let Some(lab) = NetLab::new(
        "a_plain_http_request_to_a_listed_host_carries_the_childs_host_header_upstream",
    ) else {
        return;
    };
    let e = Env::new();
    let cmd = [
        "curl",
        "-sS",
        "--fail",
        "-H",
        "Host: evil.test",
        "http://10.23.0.2:8080/fronted",
    ];
    e.approve(&["--allow-net", "10.23.0.2:8080"], &cmd);
    let r = lab.run(&e, &cmd);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let conns = r.predicate()["network"]["connections"].clone();
    assert_eq!(conns[0]["host"], "10.23.0.2", "{conns}");
    assert_eq!(conns[0]["decision"], "allowed", "{conns}");
    let served = lab.served();
    assert_eq!(
        served,
        vec!["/fronted 10.23.0.2:8080".to_string()],
        "the upstream served a request for another host than the listed entry the receipt names ({conns})"
    );
}

/// §8 and the proxy's own rule ("one request per upstream connection: the
/// next one on the child's connection could name another host"): after the
/// head it rewrote, the proxy relays the child's bytes raw. A header value
/// holding a bare LF ends that header for the upstream, so the child's
/// `Connection: keep-alive` precedes the proxy's `Connection: close`, and a
/// second, pipelined request for `evil.test` is served on the same
/// connection; the receipt shows one request's connection to the entry.
#[test]
fn a_second_request_smuggled_behind_a_bare_lf_header_is_served_upstream() {
    let Some(lab) =
        NetLab::new("a_second_request_smuggled_behind_a_bare_lf_header_is_served_upstream")
    else {
        return;
    };
    let e = Env::new();
    let script = r#"
import socket, time
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET http://10.23.0.2:8080/first HTTP/1.1\r\nHost: 10.23.0.2:8080\r\nX-A: b\nConnection: keep-alive\r\n\r\n"
          b"GET /second HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n")
s.settimeout(5)
got = b""
while True:
    try:
        c = s.recv(65536)
    except socket.timeout:
        break
    if not c:
        break
    got += c
print(got.count(b"HTTP/1.1 200"))
"#;
    let cmd = ["python3", "-c", script];
    e.approve(&["--allow-net", "10.23.0.2:8080"], &cmd);
    let r = lab.run(&e, &cmd);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    // Either the ambiguous head is refused outright (400, nothing served)
    // or exactly the first request is served: never the second.
    let served = lab.served();
    assert!(
        served.is_empty() || served == vec!["/first 10.23.0.2:8080".to_string()],
        "the upstream served more than the one request the proxy read: {served:?} (child saw {} responses; receipt {})",
        r.stdout_text().trim(),
        r.predicate()["network"]["connections"]
    );
    if served.is_empty() {
        assert_eq!(
            r.predicate()["network"]["connections"][0]["reason"],
            "bad_request",
            "{}",
            r.predicate()["network"]
        );
    }
}

/// §9: `io_write_bytes` is what the run wrote, or null with a `…_why` where
/// the kernel cannot say. A child that writes 64 MiB without fsync and exits
/// leaves the write-back to the kernel's flusher, which a v1 `blkio` group
/// never charges: the receipt then claims a figure far below what the run
/// wrote, rather than saying it cannot tell.
#[test]
fn buffered_writes_left_to_write_back_are_not_reported_as_a_near_zero_io_write_figure() {
    if !memory_cgroup(
        "buffered_writes_left_to_write_back_are_not_reported_as_a_near_zero_io_write_figure",
    ) {
        return;
    }
    let e = Env::new();
    let probe = [
        "python3",
        "-c",
        "open('big.bin', 'wb').write(b'x' * (64 << 20))",
    ];
    e.approve(&["--memory", "512MiB"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    std::process::Command::new("sync").status().unwrap();
    let res = &r.predicate()["resources"];
    if let Some(written) = res["io_write_bytes"].as_u64() {
        assert!(
            written >= 64 << 20,
            "the run wrote 64 MiB (on disk after sync), the receipt says io_write_bytes {written} ({}): {res}",
            res["mechanism"]
        );
    } else {
        assert!(res["io_write_bytes_why"].is_string(), "{res}");
    }
}

/// `/etc/hosts` and `/etc/resolv.conf` are read by the egress proxy's own
/// resolver before spawn. A FIFO there (or a device, as a symlink to
/// `/dev/zero` becomes once followed) must be refused at once, naming the
/// file, like every other input the runner reads: never a setup that waits
/// for a writer (holding the Goal's lock, deaf to SIGTERM) or reads without
/// end. The file is put in place by a bind mount in a private mount
/// namespace of the test's, so the machine's own `/etc` is never touched.
#[test]
fn a_fifo_or_device_at_etc_hosts_or_resolv_conf_is_a_refusal_naming_it_not_a_hang() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let test = "a_fifo_or_device_at_etc_hosts_or_resolv_conf_is_a_refusal_naming_it_not_a_hang";
    if !is_root() {
        skip!("{test}: needs root for a private mount namespace (CI runs as root)");
        return;
    }
    if !on_path("unshare") {
        skip!("{test}: needs `unshare`");
        return;
    }
    let e = Env::new();
    e.approve(&["--allow-net", "example.test:443"], &["true"]);
    let fifo = e.path("planted.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    let cases = [
        ("/etc/hosts", fifo.clone()),
        ("/etc/resolv.conf", fifo.clone()),
        ("/etc/resolv.conf", std::path::PathBuf::from("/dev/zero")),
    ];
    for (target, planted) in cases {
        let inner = e.run_cmd(&[], &["true"]);
        let mut c = Command::new("unshare");
        c.args(["-m", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount --bind \"$0\" \"$1\" && shift && exec \"$@\"")
            .arg(&planted)
            .arg(target)
            .arg(inner.get_program())
            .args(inner.get_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in inner.get_envs() {
            if let Some(v) = v {
                c.env(k, v);
            }
        }
        let mut child = c.spawn().expect("spawn");
        let start = Instant::now();
        while child.try_wait().expect("try_wait").is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let o = child.wait_with_output().expect("output");
                panic!(
                    "run hung in setup with {} at {target}; stderr: {}",
                    planted.display(),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let r = finish_run(child.wait_with_output().expect("output"));
        r.assert_refused("isolation_unavailable");
        assert!(
            r.stderr.contains(target),
            "the refusal does not name {target}: {}",
            r.stderr
        );
    }
}

/// Three addresses of `slow.test` in TEST-NET-1, routed through the
/// upstream's namespace, which does not forward: every SYN to them is
/// dropped without an answer, so a dial waits for its timeout. The route
/// exists only in the lab's runner namespace (where the proxy dials from);
/// nothing leaves the lab's two namespaces.
const SLOW_HOSTS: &str =
    "127.0.0.1 localhost\n192.0.2.10 slow.test\n192.0.2.11 slow.test\n192.0.2.12 slow.test\n";

impl NetLab {
    /// Route TEST-NET-1 into the upstream's namespace, where it is dropped.
    fn blackhole_test_net(&self) {
        let (r, s) = (&self.ns_runner, &self.ns_server);
        let ok = std::process::Command::new("sh")
            .args([
                "-c",
                &format!(
                    "set -e; ip netns exec {s} sysctl -qw net.ipv4.ip_forward=0; \
                     ip -n {r} route add 192.0.2.0/24 via 10.23.0.2"
                ),
            ])
            .status()
            .is_ok_and(|st| st.success());
        assert!(ok, "cannot route TEST-NET-1 into the lab");
    }

    /// Start `command` under its lease in the runner namespace, with
    /// `hosts` bind-mounted on /etc/hosts in a private mount namespace of
    /// the test's; the returned process is the runner itself (nsenter,
    /// unshare and sh exec into it).
    fn spawn_with_hosts(
        &self,
        e: &Env,
        flags: &[&str],
        command: &[&str],
        hosts: &str,
    ) -> std::process::Child {
        use std::process::{Command, Stdio};
        let file = self.dir.path().join("hosts");
        std::fs::write(&file, hosts).unwrap();
        let inner = e.run_cmd(flags, command);
        let mut w = Command::new("nsenter");
        w.arg(format!("--net=/run/netns/{}", self.ns_runner))
            .args(["--", "unshare", "-m", "--propagation", "private", "--"])
            .args(["sh", "-c", "mount --bind \"$0\" /etc/hosts && exec \"$@\""])
            .arg(&file)
            .arg(inner.get_program())
            .args(inner.get_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in inner.get_envs() {
            if let Some(v) = v {
                w.env(k, v);
            }
        }
        w.spawn().expect("spawn governed-exec")
    }
}

/// Wait for `child` at most `limit`; how long it took and its run, or a
/// panic naming `what` after killing it.
fn wait_bounded(
    mut child: std::process::Child,
    since: std::time::Instant,
    limit: std::time::Duration,
    what: &str,
) -> (std::time::Duration, Run) {
    use std::io::Read;
    // Drain the pipes while waiting: a receipt larger than a pipe buffer
    // must not stall the runner.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let e = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let took = since.elapsed();
            let output = std::process::Output {
                status,
                stdout: o.join().unwrap(),
                stderr: e.join().unwrap(),
            };
            return (took, finish_run(output));
        }
        if since.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: the runner was still alive {:?} later (killed; {})",
                since.elapsed(),
                String::from_utf8_lossy(&e.join().unwrap())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The connection to `slow.test` in the receipt: recorded, and cut.
fn assert_cut_at_run_end(r: &Run) {
    let conns = &r.predicate()["network"]["connections"];
    let slow: Vec<&serde_json::Value> = conns
        .as_array()
        .map(|c| c.iter().filter(|c| c["host"] == "slow.test").collect())
        .unwrap_or_default();
    assert_eq!(slow.len(), 1, "{conns}");
    assert_eq!(
        slow[0]["reason"], "run_ended",
        "the dial still in flight when the run ended is not recorded as cut: {conns}"
    );
    assert_eq!(slow[0]["decision"], "allowed", "{conns}");
    assert_eq!(
        r.predicate()["network"]["unused"],
        serde_json::json!([]),
        "{}",
        r.predicate()["network"]
    );
}

/// §6.8 and §8: once the run's processes are gone, the receipt and result
/// record follow within a small bound. A CONNECT to an allowed name whose
/// addresses all drop SYNs holds a proxy worker in its dials (10 s each);
/// the runner used to join that worker before sealing, so a SIGTERM with a
/// 2 s cancel grace left the runner alive for the whole dial chain, and the
/// caller's SIGKILL then left no receipt at all.
#[test]
fn a_dial_to_addresses_that_drop_syns_does_not_hold_the_runner_after_sigterm() {
    use std::time::{Duration, Instant};
    let Some(lab) =
        NetLab::new("a_dial_to_addresses_that_drop_syns_does_not_hold_the_runner_after_sigterm")
    else {
        return;
    };
    lab.blackhole_test_net();
    let e = Env::new();
    let cmd = [
        "curl",
        "-sS",
        "--connect-timeout",
        "120",
        "https://slow.test/",
    ];
    e.approve(&["--allow-net", "slow.test:443"], &cmd);
    let child = lab.spawn_with_hosts(&e, &[], &cmd, SLOW_HOSTS);
    // Long enough for setup, curl's CONNECT and the first dial to begin.
    std::thread::sleep(Duration::from_secs(3));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let termed = Instant::now();
    let (took, r) = wait_bounded(child, termed, Duration::from_secs(60), "after SIGTERM");
    eprintln!("runner ended {took:?} after SIGTERM");
    assert_eq!(r.class(), "cancelled_reaped", "{}", r.stderr);
    // Cancel grace (2 s by default) and a small fixed bound.
    assert!(
        took < Duration::from_secs(2 + 3),
        "the runner ended {took:?} after SIGTERM (cancel grace 2 s): a proxy dial held it"
    );
    assert_cut_at_run_end(&r);
}

/// A short wall-time lease: the runner ends within wall time, kill grace
/// and a small bound, whatever the proxy is dialling; the receipt says when
/// the run's processes ended and, apart, when the runner finished.
#[test]
fn a_dial_to_addresses_that_drop_syns_does_not_outlast_a_short_wall_time() {
    use std::time::{Duration, Instant};
    let Some(lab) =
        NetLab::new("a_dial_to_addresses_that_drop_syns_does_not_outlast_a_short_wall_time")
    else {
        return;
    };
    lab.blackhole_test_net();
    let e = Env::new();
    let cmd = [
        "curl",
        "-sS",
        "--connect-timeout",
        "120",
        "https://slow.test/",
    ];
    e.approve(
        &[
            "--allow-net",
            "slow.test:443",
            "--wall-time",
            "2s",
            "--kill-grace",
            "1s",
        ],
        &cmd,
    );
    let started = Instant::now();
    let child = lab.spawn_with_hosts(&e, &[], &cmd, SLOW_HOSTS);
    let (took, r) = wait_bounded(child, started, Duration::from_secs(90), "after wall time");
    eprintln!("runner of a 2 s wall-time lease ended {took:?} after its start");
    assert_eq!(r.class(), "timed_out_reaped", "{}", r.stderr);
    assert!(
        took < Duration::from_secs(2 + 1 + 3),
        "the runner of a 2 s wall-time lease ended after {took:?}: a proxy dial held it"
    );
    assert_cut_at_run_end(&r);
    let p = r.predicate();
    let ended = humantime::parse_rfc3339(p["ended_at"].as_str().unwrap()).unwrap();
    let finished = humantime::parse_rfc3339(
        p["finished_at"]
            .as_str()
            .unwrap_or_else(|| panic!("no finished_at: {p}")),
    )
    .unwrap();
    assert!(finished >= ended, "{p}");
    assert!(
        finished.duration_since(ended).unwrap() < Duration::from_secs(3),
        "{p}"
    );
}

/// §8: one dial budget per connection, not per address. A name with three
/// addresses that all drop SYNs used to be dialled 10 s per address (30 s,
/// and a name the child's own DNS answers can carry a hundred addresses);
/// the whole connection now gets one 10 s budget and the child its 502.
#[test]
fn a_name_with_many_silent_addresses_gets_one_dial_budget_not_one_per_address() {
    use std::time::{Duration, Instant};
    let Some(lab) =
        NetLab::new("a_name_with_many_silent_addresses_gets_one_dial_budget_not_one_per_address")
    else {
        return;
    };
    lab.blackhole_test_net();
    let e = Env::new();
    let cmd = [
        "curl",
        "-sS",
        "--connect-timeout",
        "120",
        "https://slow.test/",
    ];
    e.approve(&["--allow-net", "slow.test:443"], &cmd);
    let started = Instant::now();
    let child = lab.spawn_with_hosts(&e, &[], &cmd, SLOW_HOSTS);
    let (took, r) = wait_bounded(child, started, Duration::from_secs(90), "a failing dial");
    eprintln!("runner of a run whose one dial failed ended {took:?} after its start");
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let conns = &r.predicate()["network"]["connections"];
    assert_eq!(conns[0]["reason"], "connect_failed", "{conns}");
    let ms = conns[0]["duration_ms"].as_u64().unwrap_or(u64::MAX);
    assert!(
        (9_000..13_000).contains(&ms),
        "three silent addresses took {ms} ms to give up on: {conns}"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}
