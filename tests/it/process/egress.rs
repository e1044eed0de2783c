//! The egress allowlist (CONTRACT §8), through the real binary.
//!
//! Each test makes its own lab: two network namespaces joined by a veth
//! pair, 10.19.0.1 for the runner and 10.19.0.2 for the test servers
//! (addresses that exist only inside those namespaces). governed-exec runs
//! in the runner namespace, in a mount namespace of the test's where the
//! lab's own `/etc/hosts` is bind-mounted (the proxy's resolver reads it as
//! glibc does). The servers log every request, so the receipt's connection
//! list is checked against what the servers saw. Needs root, `ip`,
//! `nsenter`, `unshare`, `curl`, `openssl` and `python3`; SKIPs loudly
//! otherwise.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

const SERVER: &str = "10.19.0.2";
const RUNNER: &str = "10.19.0.1";

/// The servers: plain HTTP on 8080 and 8081, HTTPS (self-signed, names
/// `secure.test` and the IP) on 8443; every request line goes to the log.
const SERVER_PY: &str = r#"
import http.server, ssl, sys, threading, os
root, log, ready, certdir = sys.argv[1:5]
class H(http.server.SimpleHTTPRequestHandler):
    def __init__(s, *a, **k): super().__init__(*a, directory=root, **k)
    def log_message(s, fmt, *args):
        with open(log, "a") as f:
            f.write("%d %s %s\n" % (s.server.server_address[1], s.command, s.path))
def serve(port, tls):
    srv = http.server.ThreadingHTTPServer(("10.19.0.2", port), H)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(certdir, "cert.pem"), os.path.join(certdir, "key.pem"))
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    return srv
servers = [serve(8080, False), serve(8081, False), serve(8443, True)]
for s in servers:
    threading.Thread(target=s.serve_forever, daemon=True).start()
# A nameserver: every A query is answered 10.19.0.2, AAAA with no record;
# each query is logged as `53 QTYPE NAME`.
import socket, struct
dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dns.bind(("10.19.0.2", 53))
def answer():
    while True:
        q, peer = dns.recvfrom(512)
        i, labels = 12, []
        while q[i]:
            labels.append(q[i + 1:i + 1 + q[i]].decode()); i += 1 + q[i]
        qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
        question = q[12:i + 5]
        with open(log, "a") as f:
            f.write("53 %d %s\n" % (qtype, ".".join(labels)))
        if qtype == 1:
            rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + bytes([10, 19, 0, 2])
            head = q[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 1, 0, 0)
        else:
            rr, head = b"", q[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 0, 0, 0)
        dns.sendto(head + question + rr, peer)
threading.Thread(target=answer, daemon=True).start()
open(ready, "w").close()
threading.Event().wait()
"#;

struct Lab {
    ns_runner: String,
    ns_server: String,
    server: Option<Child>,
    dir: tempfile::TempDir,
}

fn tool(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn sh(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", cmd])
        .status()
        .is_ok_and(|s| s.success())
}

impl Lab {
    /// `None` (after a loud SKIP) when this machine cannot host it.
    fn new(test: &str) -> Option<Lab> {
        if !is_root() {
            skip!("{test}: needs root to make network namespaces (CI runs as root)");
            return None;
        }
        for t in ["ip", "nsenter", "unshare", "curl", "openssl", "python3"] {
            if !tool(t) {
                skip!("{test}: needs `{t}` (.ci/run installs it)");
                return None;
            }
        }
        let tag = format!("{}-{}", std::process::id(), rand_tag());
        let mut lab = Lab {
            ns_runner: format!("ge19r-{tag}"),
            ns_server: format!("ge19s-{tag}"),
            server: None,
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let (r, s) = (&lab.ns_runner, &lab.ns_server);
        let made = sh(&format!(
            "set -e; ip netns add {r}; ip netns add {s}; \
             ip -n {r} link add v0 type veth peer name v1 netns {s}; \
             ip -n {r} addr add {RUNNER}/24 dev v0; ip -n {s} addr add {SERVER}/24 dev v1; \
             ip -n {r} link set lo up; ip -n {s} link set lo up; \
             ip -n {r} link set v0 up; ip -n {s} link set v1 up"
        ));
        if !made {
            skip!("{test}: cannot make network namespaces and a veth pair here");
            return None;
        }
        let d = lab.dir.path();
        std::fs::create_dir(d.join("www")).unwrap();
        std::fs::write(d.join("www/hello.txt"), "hello from the test host\n").unwrap();
        std::fs::write(d.join("server.py"), SERVER_PY).unwrap();
        std::fs::write(
            d.join("hosts"),
            format!(
                "127.0.0.1 localhost\n{SERVER} web.test secure.test\n127.0.0.1 loop.test\n{RUNNER} self.test\n"
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("hosts.resolv"),
            format!("nameserver {SERVER}\noptions timeout:2 attempts:1\n"),
        )
        .unwrap();
        assert!(sh(&format!(
            "cd {} && openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem -days 1 \
             -subj /CN=secure.test -addext 'subjectAltName=DNS:secure.test,IP:{SERVER}' 2>/dev/null",
            d.display()
        )));
        let child = Command::new("ip")
            .args(["netns", "exec", s, "python3"])
            .arg(d.join("server.py"))
            .arg(d.join("www"))
            .arg(d.join("server.log"))
            .arg(d.join("ready"))
            .arg(d)
            .stdin(Stdio::null())
            .spawn()
            .expect("server");
        lab.server = Some(child);
        let t0 = Instant::now();
        while !d.join("ready").exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "test servers never became ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(lab)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The servers' log: `PORT METHOD PATH` lines.
    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("server.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `c` run inside the runner namespace, with the lab's /etc/hosts.
    fn wrap(&self, c: &Command) -> Command {
        let mut w = Command::new("nsenter");
        w.arg(format!("--net=/run/netns/{}", self.ns_runner))
            .args(["--", "unshare", "-m", "--propagation", "private", "--"])
            .args([
                "sh",
                "-c",
                "mount --bind \"$0\" /etc/hosts && mount --bind \"$0.resolv\" /etc/resolv.conf && exec \"$@\"",
            ])
            .arg(self.path("hosts"))
            .arg(c.get_program())
            .args(c.get_args())
            .stdin(Stdio::null());
        for (k, v) in c.get_envs() {
            if let Some(v) = v {
                w.env(k, v);
            }
        }
        w
    }

    fn run(&self, e: &Env, command: &[&str]) -> Run {
        finish_run(output(self.wrap(&e.run_cmd(&[], command))))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns_runner])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns_server])
            .status();
    }
}

fn rand_tag() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("{:x}", t % 0xfffff)
}

fn connections(r: &Run) -> Vec<Value> {
    r.predicate()["network"]["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn lease_of(e: &Env) -> Value {
    let m: Value = serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap();
    let body = &m["leases"][0]["body"];
    match body {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    }
}

fn network_goal(e: &Env, criterion: &str) {
    e.set_goal(&format!(
        r#"{{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
  "criteria": [ {{ "kind": "exit_code", "equals": 0 }}, {criterion} ] }}"#
    ));
}

fn save(e: &Env, r: &Run, name: &str) -> PathBuf {
    let p = e.path(name);
    std::fs::write(&p, &r.stdout).unwrap();
    p
}

#[test]
fn approve_puts_canonical_entries_in_the_lease_and_refuses_wildcards_and_no_network() {
    let e = Env::new();
    let o = output(e.approve_cmd(
        &[
            "--allow-net",
            "PyPI.org",
            "--allow-net",
            "files.pythonhosted.org:443",
            "--allow-net",
            "10.19.0.2:8080",
            "--allow-net",
            "[2001:db8::1]:8443",
        ],
        &["true"],
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let lease = lease_of(&e);
    assert_eq!(
        lease["isolation"]["allow_net"],
        serde_json::json!([
            "pypi.org:443",
            "files.pythonhosted.org:443",
            "10.19.0.2:8080",
            "[2001:db8::1]:8443"
        ]),
        "{lease}"
    );
    assert!(
        err.contains("only pypi.org:443, files.pythonhosted.org:443"),
        "{err}"
    );
    assert!(err.contains("HTTPS_PROXY=http://127.0.0.1:3128"), "{err}");
    assert!(err.contains("not covered"), "{err}");
    assert!(
        err.contains("a program that ignores those variables has no route at all"),
        "{err}"
    );

    for (flags, needle) in [
        (vec!["--allow-net", "*.pypi.org"], "wildcards"),
        (vec!["--allow-net", "pypi.org:0"], "port"),
        (vec!["--allow-net", "pypi.org:99999"], "port"),
        (vec!["--allow-net", "bad host"], "not a host name"),
        (
            vec!["--allow-net", "pypi.org", "--no-network"],
            "--no-network",
        ),
    ] {
        let o = output(e.approve_cmd(&flags, &["true"]));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(needle), "{flags:?}: {err}");
    }
}

#[test]
fn allowed_http_and_https_pass_and_every_connection_is_in_the_receipt() {
    let Some(lab) = Lab::new("allowed_http_and_https_pass_and_every_connection_is_in_the_receipt")
    else {
        return;
    };
    let e = Env::new();
    std::fs::copy(lab.path("cert.pem"), e.ws.join("ca.pem")).unwrap();
    let script = "curl -sS --fail http://10.19.0.2:8080/hello.txt && \
                  curl -sS --fail --cacert ca.pem https://10.19.0.2:8443/hello.txt && \
                  python3 -c 'import urllib.request as u; print(u.urlopen(\"http://10.19.0.2:8080/hello.txt?py\").read().decode().strip(), \"via urllib\")' && \
                  python3 -c 'import ssl, urllib.request as u; c = ssl.create_default_context(cafile=\"ca.pem\"); print(u.urlopen(\"https://10.19.0.2:8443/hello.txt?pys\", context=c).read().decode().strip(), \"via urllib https\")'";
    let cmd = ["sh", "-c", script];
    network_goal(
        &e,
        r#"{ "kind": "network", "max_denied": 0, "only": ["10.19.0.2:8080", "10.19.0.2:8443"] }"#,
    );
    e.approve(
        &[
            "--allow-net",
            "10.19.0.2:8080",
            "--allow-net",
            "10.19.0.2:8443",
            "--allow-net",
            "never.test",
        ],
        &cmd,
    );
    let r = lab.run(&e, &cmd);
    assert_eq!(
        (r.code, r.class()),
        (0, "exited"),
        "{}\n{}",
        r.stderr,
        r.stdout_text()
    );
    assert_eq!(
        r.stdout_text(),
        "hello from the test host\nhello from the test host\nhello from the test host via urllib\nhello from the test host via urllib https\n"
    );
    let net = &r.predicate()["network"];
    assert_eq!(net["mechanism"], "network_namespace");
    assert_eq!(net["unused"], serde_json::json!(["never.test:443"]));
    assert_eq!(net["omitted"], 0);
    let conns = connections(&r);
    let seen: Vec<(String, u64, String, String)> = conns
        .iter()
        .map(|c| {
            (
                c["host"].as_str().unwrap().to_string(),
                c["port"].as_u64().unwrap(),
                c["address"].as_str().unwrap_or("").to_string(),
                c["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = |port: u64| {
        (
            SERVER.to_string(),
            port,
            SERVER.to_string(),
            "allowed".to_string(),
        )
    };
    assert_eq!(
        seen,
        vec![want(8080), want(8443), want(8080), want(8443)],
        "{conns:?}"
    );
    for c in &conns {
        assert!(c["reason"].is_null(), "{c}");
        assert!(c["bytes_sent"].as_u64().unwrap() > 0, "{c}");
        assert!(c["bytes_received"].as_u64().unwrap() > 24, "{c}");
    }
    // What the servers logged is exactly what the receipt lists.
    assert_eq!(
        lab.log(),
        vec![
            "8080 GET /hello.txt",
            "8443 GET /hello.txt",
            "8080 GET /hello.txt?py",
            "8443 GET /hello.txt?pys"
        ]
    );

    // verify: the network criteria hold.
    let receipt = save(&e, &r, "ok.json");
    let (code, out) = e.verify(&receipt);
    assert_eq!(
        (code, out.lines().next()),
        (0, Some("VERIFIED_DONE")),
        "{out}"
    );

    // The text view shows the connections.
    let o = output(
        crate::support::cmd()
            .args(["receipt", "show", "--format", "text"])
            .arg(&receipt),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("ALLOWED 10.19.0.2:8443 -> 10.19.0.2"),
        "{text}"
    );
    assert!(text.contains("never used:"), "{text}");
    let o = output(
        crate::support::cmd()
            .args(["receipt", "show", "--format", "markdown"])
            .arg(&receipt),
    );
    let md = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        md.lines()
            .filter(|l| l.starts_with('|') && l.contains("ALLOWED 10.19.0.2:"))
            .count(),
        4,
        "{md}"
    );
    assert!(md.contains("never used: never.test:443"), "{md}");
}

#[test]
fn an_unlisted_host_gets_403_naming_the_option_and_is_denied_in_the_receipt() {
    let Some(lab) =
        Lab::new("an_unlisted_host_gets_403_naming_the_option_and_is_denied_in_the_receipt")
    else {
        return;
    };
    let e = Env::new();
    let cmd = [
        "sh",
        "-c",
        "curl -sS -w '%{http_code}\\n' http://10.19.0.2:8081/hello.txt; \
         curl -sS -w '%{http_code}\\n' http://web.test:8080/hello.txt; \
         curl -sS https://10.19.0.2:8443/ 2>&1 | tail -c 300; echo",
    ];
    network_goal(&e, r#"{ "kind": "network", "max_denied": 2 }"#);
    e.approve(&["--allow-net", "10.19.0.2:8080"], &cmd);
    let r = lab.run(&e, &cmd);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = r.stdout_text();
    assert!(
        out.contains("10.19.0.2:8081 is not in this lease's network allowlist; the approver can add it with --allow-net 10.19.0.2:8081\n403"),
        "{out}"
    );
    assert!(out.contains("--allow-net web.test:8080\n403"), "{out}");
    assert!(
        out.contains("403"),
        "curl reports the refused CONNECT: {out}"
    );
    let conns = connections(&r);
    assert_eq!(conns.len(), 3, "{conns:?}");
    for (c, (host, port)) in conns
        .iter()
        .zip([(SERVER, 8081), ("web.test", 8080), (SERVER, 8443)])
    {
        assert_eq!(
            (
                &c["host"],
                &c["port"],
                &c["decision"],
                &c["reason"],
                &c["address"]
            ),
            (
                &Value::from(host),
                &Value::from(port),
                &Value::from("denied"),
                &Value::from("not_in_allowlist"),
                &Value::Null
            ),
            "{c}"
        );
    }
    assert!(
        lab.log().is_empty(),
        "nothing reached the servers: {:?}",
        lab.log()
    );
    assert_eq!(
        r.predicate()["network"]["unused"],
        serde_json::json!(["10.19.0.2:8080"])
    );

    let receipt = save(&e, &r, "denied.json");
    let (code, out) = e.verify(&receipt);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("network: 3 connection(s) denied, at most 2 allowed; the first past the bound: 10.19.0.2:8443 (not_in_allowlist)"),
        "{out}"
    );
}

#[test]
fn a_name_resolving_to_an_internal_address_is_refused_unless_its_literal_is_listed() {
    let Some(lab) =
        Lab::new("a_name_resolving_to_an_internal_address_is_refused_unless_its_literal_is_listed")
    else {
        return;
    };
    let e = Env::new();
    let cmd = [
        "sh",
        "-c",
        "for u in http://web.test:8080/hello.txt http://loop.test:8080/ http://self.test:8080/; do \
           curl -sS -w ' %{http_code}\\n' $u; done",
    ];
    e.approve(
        &[
            "--allow-net",
            "web.test:8080",
            "--allow-net",
            "loop.test:8080",
            "--allow-net",
            "self.test:8080",
        ],
        &cmd,
    );
    let r = lab.run(&e, &cmd);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let reasons: Vec<String> = connections(&r)
        .iter()
        .map(|c| c["reason"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        reasons,
        ["private_address", "loopback_address", "runner_address"],
        "{}",
        r.stdout_text()
    );
    assert!(
        r.stdout_text()
            .contains("the approver can allow that address with --allow-net 10.19.0.2:8080"),
        "{}",
        r.stdout_text()
    );
    assert!(lab.log().is_empty(), "{:?}", lab.log());

    // Listing the IP literal too lets the name through, to that address.
    let e2 = Env::new();
    let cmd2 = ["curl", "-sS", "--fail", "http://web.test:8080/hello.txt"];
    // `only` names entries as the child asked for them: the address alone
    // does not stand for the name.
    network_goal(&e2, r#"{ "kind": "network", "only": ["10.19.0.2:8080"] }"#);
    e2.approve(
        &[
            "--allow-net",
            "web.test:8080",
            "--allow-net",
            "10.19.0.2:8080",
        ],
        &cmd2,
    );
    let r2 = lab.run(&e2, &cmd2);
    assert_eq!(r2.code, 0, "{}\n{}", r2.stderr, r2.stdout_text());
    assert_eq!(r2.stdout_text(), "hello from the test host\n");
    let c = &connections(&r2)[0];
    assert_eq!(
        (&c["host"], &c["address"], &c["decision"]),
        (
            &Value::from("web.test"),
            &Value::from(SERVER),
            &Value::from("allowed")
        )
    );
    assert_eq!(
        r2.predicate()["network"]["unused"],
        serde_json::json!(["10.19.0.2:8080"])
    );
    assert_eq!(lab.log(), vec!["8080 GET /hello.txt"]);
    let (code, out) = e2.verify(&save(&e2, &r2, "named.json"));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "network: connection to web.test:8080 (10.19.0.2) is not in the goal's `only` list"
        ),
        "{out}"
    );
}

#[test]
fn without_the_proxy_the_child_has_no_route_and_no_dns() {
    let Some(lab) = Lab::new("without_the_proxy_the_child_has_no_route_and_no_dns") else {
        return;
    };
    let e = Env::new();
    let probe = r#"
import socket, sys
def tcp():
    s = socket.create_connection(("10.19.0.2", 8080), timeout=5)
def udp_dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03web\x04test\x00\x00\x01\x00\x01", ("10.19.0.2", 53))
    s.recv(512)
def name():
    socket.getaddrinfo("example.org", 443)
for f in (tcp, udp_dns, name):
    try:
        f(); print(f.__name__, "REACHED")
    except Exception as e:
        print(f.__name__, "failed", type(e).__name__)
"#;
    std::fs::write(e.ws.join("probe.py"), probe).unwrap();
    let cmd = [
        "sh",
        "-c",
        "python3 probe.py; curl -sS --noproxy '*' --max-time 5 http://10.19.0.2:8080/ || echo curl-direct-failed",
    ];
    e.approve(&["--allow-net", "10.19.0.2:8080"], &cmd);
    let r = lab.run(&e, &cmd);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = r.stdout_text();
    for line in [
        "tcp failed",
        "udp_dns failed",
        "name failed",
        "curl-direct-failed",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    assert!(!out.contains("REACHED"), "{out}");
    assert!(connections(&r).is_empty());
    assert!(lab.log().is_empty(), "{:?}", lab.log());
}

/// `c` under tests/sim/seccomp-exec.py with Docker's default profile's
/// answers: clone3 ENOSYS, unshare EPERM (no user namespace either).
fn docker_like(c: &Command) -> Command {
    let mut w = Command::new("python3");
    w.arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sim/seccomp-exec.py"))
        .arg("clone3=ENOSYS,unshare=EPERM")
        .arg("--")
        .arg(c.get_program())
        .args(c.get_args())
        .stdin(Stdio::null());
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            w.env(k, v);
        }
    }
    w
}

/// Where no network namespace can be made for the proxy (root without
/// CAP_SYS_ADMIN and no user namespace, as under Docker's defaults; uid
/// 65534 likewise), `--allow-net` is refused before anything is spent or
/// spawned, and `doctor` run the same way says so and why.
#[test]
fn where_no_network_namespace_can_be_made_allow_net_is_refused_with_zero_spawn_and_doctor_agrees() {
    let name = "where_no_network_namespace_can_be_made_allow_net_is_refused_with_zero_spawn_and_doctor_agrees";
    if !is_root() {
        skip!("{name}: needs root to drop CAP_SYS_ADMIN and switch uid");
        return;
    }
    if !tool("setpriv") {
        skip!("{name}: needs setpriv (util-linux)");
        return;
    }
    let no_admin = |c: &Command| {
        let mut w = Command::new("setpriv");
        w.args(["--bounding-set", "-sys_admin", "--"])
            .arg(c.get_program())
            .args(c.get_args())
            .stdin(Stdio::null());
        docker_like(&w)
    };
    let touch = ["sh", "-c", "touch ran"];
    let mut dc = crate::support::cmd();
    dc.args(["doctor", "--json"]);
    // Root without CAP_SYS_ADMIN: its own files.
    let root_env = Env::new();
    root_env.approve(&["--allow-net", "example.org"], &touch);
    // uid 65534: a copy of the binary and files it owns.
    let (nobody_env, bin) = unprivileged_env();
    let o = output_settled(as_nobody(
        &bin,
        &nobody_env.approve_cmd(&["--allow-net", "example.org"], &touch),
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut nobody_run = as_nobody(&bin, &nobody_env.run_cmd(&[], &touch));
    nobody_run.env("HOME", nobody_env.dir.path());
    let mut nobody_doctor = as_nobody(&bin, &dc);
    nobody_doctor.env("HOME", nobody_env.dir.path());
    for (who, e, run, doctor) in [
        (
            "root without CAP_SYS_ADMIN",
            &root_env,
            no_admin(&root_env.run_cmd(&[], &touch)),
            no_admin(&dc),
        ),
        (
            "uid 65534",
            &nobody_env,
            docker_like(&nobody_run),
            docker_like(&nobody_doctor),
        ),
    ] {
        let marker = e.ws.join("ran");
        let before = e.journal_executing_count();
        let r = finish_run(output_settled(run));
        r.assert_refused("isolation_unavailable");
        assert!(
            r.stderr.contains("--allow-net cannot be enforced here")
                && r.stderr.contains("CAP_SYS_ADMIN")
                && r.stderr.contains("no user namespace"),
            "{who}: {}",
            r.stderr
        );
        assert!(!marker.exists(), "{who}: the command ran");
        assert_eq!(
            e.journal_executing_count(),
            before,
            "{who}: a use was spent"
        );
        let o = output_settled(doctor);
        assert!(
            o.status.success(),
            "{who}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let d: Value = serde_json::from_slice(&o.stdout).unwrap();
        let check = d["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "allow_net")
            .cloned()
            .unwrap_or_else(|| panic!("doctor has no allow_net: {d}"));
        assert_eq!(check["available"], false, "{who}: {check}");
        assert!(
            check["detail"]
                .as_str()
                .unwrap_or("")
                .contains("CAP_SYS_ADMIN"),
            "{who}: {check}"
        );
    }
}

/// A runner without CAP_SYS_ADMIN (uid 65534) gets the same proxy through
/// an unprivileged user namespace, where the kernel allows one.
#[test]
fn an_unprivileged_runner_serves_the_allowlist_through_a_user_namespace() {
    let Some(lab) =
        Lab::new("an_unprivileged_runner_serves_the_allowlist_through_a_user_namespace")
    else {
        return;
    };
    let (e, bin) = unprivileged_env();
    let cmd = [
        "sh",
        "-c",
        "curl -sS --fail http://10.19.0.2:8080/hello.txt; curl -sS -w '%{http_code}\\n' -o /dev/null http://10.19.0.2:8081/",
    ];
    let o = output_settled(as_nobody(
        &bin,
        &e.approve_cmd(&["--allow-net", "10.19.0.2:8080"], &cmd),
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut run = as_nobody(&bin, &e.run_cmd(&[], &cmd));
    run.env("HOME", e.dir.path());
    let r = finish_run(output_settled(lab.wrap(&run)));
    if r.reason() == "isolation_unavailable" && r.stderr.contains("no user namespace") {
        skip!("an_unprivileged_runner_serves_the_allowlist_through_a_user_namespace: this kernel gives uid 65534 no user namespace: {}", r.stderr);
        return;
    }
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    assert_eq!(r.stdout_text(), "hello from the test host\n403\n");
    assert_eq!(
        r.predicate()["isolation"]["network_mechanism"],
        "user_and_network_namespace"
    );
    let net = &r.predicate()["network"];
    assert_eq!(net["mechanism"], "user_and_network_namespace");
    let conns = connections(&r);
    assert_eq!(conns.len(), 2, "{conns:?}");
    assert_eq!(
        (&conns[0]["decision"], &conns[0]["address"]),
        (&Value::from("allowed"), &Value::from(SERVER))
    );
    assert_eq!(conns[1]["reason"], "not_in_allowlist");
    assert_eq!(lab.log(), vec!["8080 GET /hello.txt"]);
}

/// A wheel and a PEP 503 simple index for it, served by the lab's HTTPS host.
fn publish_wheel(lab: &Lab) {
    let script = r#"
import sys, zipfile, hashlib, base64, os
www = sys.argv[1]
d = os.path.join(www, "simple", "gehello")
os.makedirs(d, exist_ok=True)
name = "gehello-1.0-py3-none-any.whl"
files = {
    "gehello/__init__.py": b"GREETING = 'hello'\n",
    "gehello-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: gehello\nVersion: 1.0\n",
    "gehello-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for p, b in files.items():
    h = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
    record += f"{p},sha256={h},{len(b)}\n"
record += "gehello-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(os.path.join(d, name), "w") as z:
    for p, b in files.items():
        z.writestr(p, b)
    z.writestr("gehello-1.0.dist-info/RECORD", record)
with open(os.path.join(d, "index.html"), "w") as f:
    f.write(f'<html><body><a href="{name}">{name}</a></body></html>\n')
"#;
    let ok = Command::new("python3")
        .args(["-c", script])
        .arg(lab.path("www"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "building the test wheel");
}

#[test]
fn pip_download_from_a_listed_index_works_and_fails_without_it() {
    let Some(lab) = Lab::new("pip_download_from_a_listed_index_works_and_fails_without_it") else {
        return;
    };
    if !sh("/usr/bin/python3 -m pip --version >/dev/null 2>&1") {
        skip!("pip_download_from_a_listed_index_works_and_fails_without_it: needs pip for /usr/bin/python3 (python3-pip; .ci/run installs it)");
        return;
    }
    publish_wheel(&lab);
    let pip = [
        "python3",
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--retries",
        "0",
        "--timeout",
        "10",
        "--cert",
        "ca.pem",
        "--index-url",
        "https://secure.test:8443/simple/",
        "-d",
        "dl",
        "gehello==1.0",
    ];
    let cases = [
        (
            vec![
                "--allow-net",
                "secure.test:8443",
                "--allow-net",
                "10.19.0.2:8443",
            ],
            true,
        ),
        (vec!["--allow-net", "pypi.org"], false),
    ];
    for (flags, listed) in cases {
        let e = Env::new();
        std::fs::copy(lab.path("cert.pem"), e.ws.join("ca.pem")).unwrap();
        let before = lab.log().len();
        e.approve(&flags, &pip);
        let r = lab.run(&e, &pip);
        let wheel = e.ws.join("dl/gehello-1.0-py3-none-any.whl");
        let conns = connections(&r);
        if listed {
            assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout_text());
            assert!(wheel.exists());
            assert!(!conns.is_empty());
            for c in &conns {
                assert_eq!(
                    (&c["host"], &c["port"], &c["decision"], &c["address"]),
                    (
                        &Value::from("secure.test"),
                        &Value::from(8443),
                        &Value::from("allowed"),
                        &Value::from(SERVER)
                    ),
                    "{c}"
                );
            }
            let log = lab.log()[before..].to_vec();
            assert!(
                log.contains(&"8443 GET /simple/gehello/".to_string())
                    && log.contains(
                        &"8443 GET /simple/gehello/gehello-1.0-py3-none-any.whl".to_string()
                    ),
                "{log:?}"
            );
            // One tunnel per connection pip opened, each one in the log's order.
            assert!(conns.len() <= log.len(), "{conns:?} vs {log:?}");
        } else {
            assert_ne!(r.code, 0, "pip succeeded without its index listed");
            assert!(!wheel.exists());
            assert!(!conns.is_empty());
            assert!(
                conns.iter().all(|c| c["decision"] == "denied"
                    && c["reason"] == "not_in_allowlist"
                    && c["host"] == "secure.test"),
                "{conns:?}"
            );
            assert_eq!(lab.log().len(), before, "the index was reached");
            assert_eq!(
                r.predicate()["network"]["unused"],
                serde_json::json!(["pypi.org:443"])
            );
        }
    }
}

#[test]
fn a_name_not_in_hosts_is_resolved_by_the_proxy_over_udp_dns_from_the_runners_network() {
    let Some(lab) = Lab::new(
        "a_name_not_in_hosts_is_resolved_by_the_proxy_over_udp_dns_from_the_runners_network",
    ) else {
        return;
    };
    let e = Env::new();
    let cmd = [
        "sh",
        "-c",
        "curl -sS -w ' %{http_code}\\n' http://dns.test:8080/hello.txt; curl -sS -w ' %{http_code}\\n' http://listed.test:8080/hello.txt",
    ];
    e.approve(
        &[
            "--allow-net",
            "dns.test:8080",
            "--allow-net",
            "listed.test:8080",
            "--allow-net",
            "10.19.0.2:8080",
        ],
        &cmd,
    );
    let r = lab.run(&e, &cmd);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Both names came from the test nameserver (A, then AAAA), asked by the
    // proxy from the runner's namespace; with the literal listed, both pass.
    assert_eq!(
        r.stdout_text(),
        "hello from the test host\n 200\nhello from the test host\n 200\n"
    );
    let log = lab.log();
    for name in ["dns.test", "listed.test"] {
        assert!(log.contains(&format!("53 1 {name}")), "{log:?}");
    }
    let conns = connections(&r);
    assert_eq!(conns.len(), 2);
    for (c, host) in conns.iter().zip(["dns.test", "listed.test"]) {
        assert_eq!(
            (&c["host"], &c["address"], &c["decision"]),
            (
                &Value::from(host),
                &Value::from(SERVER),
                &Value::from("allowed")
            ),
            "{c}"
        );
    }
}

#[test]
fn the_receipt_lists_the_first_256_attempts_and_counts_the_rest() {
    let Some(lab) = Lab::new("the_receipt_lists_the_first_256_attempts_and_counts_the_rest") else {
        return;
    };
    let e = Env::new();
    // 300 CONNECTs to an unlisted host, one after the other, each refused.
    let flood = r#"
import socket
codes = set()
for i in range(300):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT flood.test:%d HTTP/1.1\r\n\r\n" % (i + 1))
    codes.add(s.recv(64).split(b" ")[1])
    s.close()
print(sorted(codes))
"#;
    std::fs::write(e.ws.join("flood.py"), flood).unwrap();
    let cmd = ["python3", "flood.py"];
    network_goal(&e, r#"{ "kind": "network", "max_denied": 299 }"#);
    e.approve(&["--allow-net", "10.19.0.2:8080"], &cmd);
    let r = lab.run(&e, &cmd);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout_text(), "[b'403']\n");
    let net = &r.predicate()["network"];
    let conns = connections(&r);
    assert_eq!(conns.len(), 256);
    assert_eq!(net["omitted"], 44);
    assert_eq!(conns[255]["port"], 256);
    // 256 listed + 44 counted: more than 299 cannot be ruled out... and
    // exactly 300 were denied, which the criterion must not let through.
    let (code, out) = e.verify(&save(&e, &r, "flood.json"));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("44 connection attempt(s) are only counted"),
        "{out}"
    );
}

#[test]
fn requests_the_proxy_does_not_serve_get_400_and_are_recorded_denied() {
    let Some(lab) = Lab::new("requests_the_proxy_does_not_serve_get_400_and_are_recorded_denied")
    else {
        return;
    };
    let e = Env::new();
    // An origin-form request, an https:// absolute-form one (TLS must be a
    // CONNECT), a head larger than the bound, and a connection that closes
    // having sent nothing (not an attempt).
    let probe = r#"
import socket
def ask(data):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(data)
    r = s.recv(200).split(b"\r\n")[0].decode()
    s.close()
    return r
print(ask(b"GET /hello.txt HTTP/1.1\r\nHost: 10.19.0.2:8080\r\n\r\n"))
print(ask(b"GET https://10.19.0.2:8443/ HTTP/1.1\r\n\r\n"))
print(ask(b"GET http://10.19.0.2:8080/ HTTP/1.1\r\nX: " + b"a" * 20000))
socket.create_connection(("127.0.0.1", 3128)).close()
"#;
    std::fs::write(e.ws.join("probe.py"), probe).unwrap();
    let cmd = ["python3", "probe.py"];
    e.approve(
        &[
            "--allow-net",
            "10.19.0.2:8080",
            "--allow-net",
            "10.19.0.2:8443",
        ],
        &cmd,
    );
    let r = lab.run(&e, &cmd);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout_text(),
        "HTTP/1.1 400 Bad Request\nHTTP/1.1 400 Bad Request\nHTTP/1.1 400 Bad Request\n"
    );
    let reasons: Vec<(String, String)> = connections(&r)
        .iter()
        .map(|c| {
            (
                c["decision"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let bad = ("denied".to_string(), "bad_request".to_string());
    assert_eq!(reasons, vec![bad.clone(), bad.clone(), bad]);
    assert!(lab.log().is_empty(), "{:?}", lab.log());
}
