//! Isolation options: enforced or refused, and reported truthfully.
//! These need root (CI runs as root); without it they print SKIP loudly.

use std::os::unix::fs::PermissionsExt;

use crate::support::*;

macro_rules! require_root {
    ($name:expr) => {
        if !is_root() {
            skip!("{}: needs root (CI runs as root)", $name);
            return;
        }
    };
}

/// Let another uid traverse the test directory and write the workspace.
fn open_up(e: &Env) {
    std::fs::set_permissions(e.dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&e.ws, std::fs::Permissions::from_mode(0o777)).expect("chmod");
}

fn status_field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{key} missing in {text}"))
}

#[test]
fn as_user_drops_uid_gid_groups_and_every_capability() {
    require_root!("as_user_drops_uid_gid_groups_and_every_capability");
    let e = Env::new();
    open_up(&e);
    let probe = ["sh", "-c", "grep -E '^(Uid|Gid|Groups|Cap|NoNewPrivs)' /proc/self/status; echo home_owner=$(stat -c %u \"$HOME\") tmp_owner=$(stat -c %u \"$TMPDIR\")"];
    e.approve(&["--as-user", "65534:65534"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let t = r.stdout_text();
    assert_eq!(
        status_field(t, "Uid:")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["65534"; 4]
    );
    assert_eq!(
        status_field(t, "Gid:")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["65534"; 4]
    );
    assert_eq!(status_field(t, "Groups:"), "");
    for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
        assert_eq!(status_field(t, cap), "0000000000000000", "{cap}");
    }
    assert_eq!(status_field(t, "NoNewPrivs:"), "1");
    assert!(t.contains("home_owner=65534 tmp_owner=65534"), "{t}");
    let iso = &r.predicate()["isolation"];
    assert_eq!(iso["uid"], 65534);
    assert_eq!(iso["capabilities_dropped"], true);
    let kv = &iso["kernel_view"];
    if !kv.is_null() {
        assert_eq!(kv["cap_eff"], "0000000000000000");
        assert_eq!(kv["uid"], "65534 65534 65534 65534");
    }
}

#[test]
fn the_runner_key_is_out_of_reach_of_another_uid_and_the_receipt_says_so() {
    require_root!("the_runner_key_is_out_of_reach_of_another_uid_and_the_receipt_says_so");
    let e = Env::new();
    open_up(&e);
    let key = e.state.join("runner.key");
    let probe_s = format!("cat {} && echo READ-THE-KEY; exit 0", key.display());
    let probe = ["sh", "-c", probe_s.as_str()];
    e.approve(&["--as-user", "65534"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout_text().contains("READ-THE-KEY"));
    assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], true);
    // The same uid as the runner: the receipt says the key was reachable.
    e.approve(&[], &["true"]);
    let r = e.run(&[], &["true"]);
    assert_eq!(r.predicate()["signing"]["key_out_of_child_reach"], false);
}

#[test]
fn landlock_confines_writes_to_the_scope() {
    if !std::path::Path::new("/sys/kernel/security/landlock").exists() && !is_root() {
        skip!("landlock_confines_writes_to_the_scope: no Landlock visible");
        return;
    }
    let e = Env::new();
    let outside = e.path("outside");
    let extra = e.path("extra");
    std::fs::create_dir(&outside).expect("dir");
    std::fs::create_dir(&extra).expect("dir");
    let script = format!(
        "echo in > inside.txt && echo ok-inside; echo x > {o}/escaped.txt || echo denied-outside; echo y > {x}/allowed.txt && echo ok-extra; echo z > \"$TMPDIR/t\" && echo ok-tmp; cat /etc/hostname >/dev/null && echo ok-read",
        o = outside.display(),
        x = extra.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--fs-write", extra.to_str().expect("utf8")], &probe);
    let r = e.run(&[], &probe);
    if r.reason() == "isolation_unavailable" {
        skip!("landlock_confines_writes_to_the_scope: {}", r.stderr);
        return;
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    let t = r.stdout_text();
    for want in [
        "ok-inside",
        "denied-outside",
        "ok-extra",
        "ok-tmp",
        "ok-read",
    ] {
        assert!(t.contains(want), "{want} missing: {t}");
    }
    assert!(
        !outside.join("escaped.txt").exists(),
        "a write outside the scope landed"
    );
    assert!(e.ws.join("inside.txt").exists());
    assert!(
        r.predicate()["isolation"]["landlock_abi"]
            .as_i64()
            .unwrap_or(0)
            >= 1
    );
}

#[test]
fn no_network_cannot_reach_the_hosts_loopback() {
    require_root!("no_network_cannot_reach_the_hosts_loopback");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let e = Env::new();
    // Its own loopback is up: a closed port there refuses the connection
    // (a loopback left down would say the network is unreachable).
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED; (exec 4<>/dev/tcp/127.0.0.1/1) 2>&1 | grep -q refused && echo OWN_LOOPBACK_UP; true");
    let probe = ["bash", "-c", script.as_str()];
    e.approve(&["--no-network"], &probe);
    let r = e.run(&[], &probe);
    assert!(
        !r.stdout_text().contains("CONNECTED"),
        "reached the host: {}",
        r.stdout_text()
    );
    assert!(
        listener.accept().is_err(),
        "the host listener saw a connection"
    );
    assert_eq!(r.predicate()["isolation"]["network_namespace"], true);
    assert!(
        r.stdout_text().contains("OWN_LOOPBACK_UP"),
        "the child's own loopback is not up: {}",
        r.stdout_text()
    );
    // Without the option the same probe does connect: the test can fail.
    e.approve(&[], &probe);
    let r = e.run(&[], &probe);
    assert!(
        r.stdout_text().contains("CONNECTED"),
        "control run did not connect: {}",
        r.stderr
    );
}

#[test]
fn pid_namespace_runs_the_child_under_init_and_takes_setsid_descendants_with_it() {
    require_root!("pid_namespace_runs_the_child_under_init_and_takes_setsid_descendants_with_it");
    let e = Env::new();
    // In the workspace: the directories above the state dir are read-only
    // to an isolated uid-0 child (its Landlock guard).
    let gc = e.ws.join("gc.pid");
    // The child's /proc is its own namespace's, so the grandchild is found
    // on the host by a sleep duration unique to this test process.
    let marker = format!("{}", 1_000_000 + std::process::id());
    let script = format!(
        "echo ns_pid=$$; setsid sh -c 'echo $$ > {g}.tmp; mv {g}.tmp {g}; exec sleep {marker}' & while [ ! -s {g} ]; do sleep 0.01; done",
        g = gc.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(&["--pid-namespace"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // pid 2: pid 1 is governed-exec's init.
    assert!(r.stdout_text().contains("ns_pid=2"), "{}", r.stdout_text());
    assert!(read_pid(&gc) > 1, "the grandchild did not start");
    let survivors: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|d| {
            std::fs::read(d.path().join("cmdline"))
                .is_ok_and(|c| c == format!("sleep\0{marker}\0").as_bytes())
        })
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .filter(|p| p.parse::<i32>().is_ok_and(pid_alive))
        .collect();
    assert!(
        survivors.is_empty(),
        "a setsid descendant outlived the namespace: {survivors:?}"
    );
    assert_eq!(r.predicate()["isolation"]["pid_namespace"], true);
}

#[test]
fn as_user_without_root_is_refused_with_zero_spawn() {
    require_root!("as_user_without_root_is_refused_with_zero_spawn");
    let e = Env::new();
    let marker = e.path("ran");
    let probe_s = format!("touch {}", marker.display());
    let probe = ["sh", "-c", probe_s.as_str()];
    e.approve(&["--as-user", "65534"], &probe);
    // governed-exec itself runs unprivileged: copy the binary where uid 65534 can run it.
    let bin = e.path("governed-exec");
    std::fs::copy(BIN, &bin).expect("copy");
    let _ = std::process::Command::new("chown")
        .arg("-R")
        .arg("65534:65534")
        .arg(e.dir.path())
        .status();
    std::fs::set_permissions(e.dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let inner = e.run_cmd(&[], &probe);
    let mut c = std::process::Command::new("setpriv");
    c.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "--",
    ])
    .arg(&bin)
    .args(inner.get_args())
    .stdin(std::process::Stdio::null());
    let r = finish_run(output(&mut c));
    r.assert_refused("isolation_unavailable");
    assert!(r.stderr.contains("root"), "{}", r.stderr);
    assert!(!marker.exists(), "spawned despite the refusal");
    assert_eq!(e.journal_executing_count(), 0, "a refusal spent a use");
}

#[test]
fn fs_read_narrows_reads_to_the_listed_paths() {
    let e = Env::new();
    std::fs::write(e.ws.join("data.txt"), "inside\n").expect("write");
    let secret = e.path("secret.txt");
    std::fs::write(&secret, "outside\n").expect("write");
    let script = format!(
        "cat data.txt && echo READ-WS; cat {} && echo READ-OUTSIDE; echo done",
        secret.display()
    );
    let probe = ["sh", "-c", script.as_str()];
    e.approve(
        &[
            "--fs-read",
            "/usr",
            "--fs-read",
            "/lib",
            "--fs-read",
            "/etc",
        ],
        &probe,
    );
    let r = e.run(&[], &probe);
    if r.reason() == "isolation_unavailable" {
        skip!("fs_read_narrows_reads_to_the_listed_paths: {}", r.stderr);
        return;
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    let t = r.stdout_text();
    assert!(t.contains("READ-WS") && t.contains("done"), "{t}");
    assert!(
        !t.contains("READ-OUTSIDE"),
        "read a file outside the read scope: {t}"
    );
    assert!(!t.contains("outside"));
    let readable = &r.predicate()["isolation"]["landlock_readable"];
    assert!(readable.as_array().is_some_and(|a| !a.is_empty()));
}

/// The child's mount namespace is tried in a throwaway child before the use
/// is spent; that try now runs beside the rest of the setup. A plan this
/// machine refuses (here injected: the first `mount` says EPERM) is still
/// `isolation_unavailable` with nothing spent and nothing run, and the
/// next run, the machine willing, goes ahead.
#[cfg(feature = "fault-injection")]
#[test]
fn a_mount_namespace_the_machine_refuses_spends_nothing_and_runs_nothing() {
    require_root!("a_mount_namespace_the_machine_refuses_spends_nothing_and_runs_nothing");
    let e = Env::new();
    // In the workspace: an isolated uid-0 child writes nowhere above it.
    let marker = e.ws.join("ran");
    let probe_s = format!("touch {}", marker.display());
    let probe = ["sh", "-c", probe_s.as_str()];
    e.approve(&["--uses", "1", "--no-network", "--pid-namespace"], &probe);
    let r = finish_run(output(
        e.run_cmd(&[], &probe)
            .env("GOVERNED_EXEC_FAULT", "mount_probe_refused"),
    ));
    r.assert_refused("isolation_unavailable");
    assert!(
        r.stderr.contains("mount namespace failed here") && r.stderr.contains("os error 1"),
        "{}",
        r.stderr
    );
    assert!(!marker.exists(), "the command ran despite the refusal");
    assert_eq!(e.journal_executing_count(), 0, "a refusal spent a use");
    let r = e.run(&[], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    assert!(marker.exists(), "the control run did not run");
}
