//! The syscall policy of an isolated lease (CONTRACT §7, v1.3), attacked:
//! an isolated child trying to make namespaces, mount, use the kernel
//! keyring or ptrace is answered EPERM (clone3: ENOSYS); the same lease
//! with `--syscalls unconfined` can; the receipt names the policy and the
//! digest `approve` printed; a lease without isolation has no policy and
//! says so.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use serde_json::Value;

use crate::support::*;

/// Each probe is a raw system call with arguments the kernel itself
/// answers with something other than EPERM for this child (a bad pointer,
/// fd or pid, or success), so only a filter makes it EPERM. One line each,
/// `name=ok` or `name=ERRNO`. `unshare` comes last: when it succeeds the
/// probe lives on in a user namespace of its own.
const PROBE: &str = r#"
import ctypes, errno, os, platform
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
NR = {
  "x86_64": dict(unshare=272, clone=56, clone3=435, mount=165, keyctl=250,
                 ptrace=101, setns=308, personality=135),
  "aarch64": dict(unshare=97, clone=220, clone3=435, mount=40, keyctl=219,
                  ptrace=117, setns=268, personality=92),
}[platform.machine()]
def call(name, *args):
    ctypes.set_errno(0)
    r = l.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
    return r, ctypes.get_errno()
def say(what, r, e):
    print(what + "=" + ("ok" if r >= 0 else errno.errorcode.get(e, str(e))), flush=True)
say("clone3", *call("clone3", 0, 0))
say("mount", *call("mount", 0, 0, 0, 0, 0))
say("keyctl", *call("keyctl", 0, -2, 1))
say("ptrace", *call("ptrace", 16, 0x3fffffff, 0, 0))
say("setns", *call("setns", -1, 0))
say("personality", *call("personality", 0x0040000))
r, e = call("clone", 0x10000000 | 17, 0, 0, 0, 0)
if r == 0:
    os._exit(0)
if r > 0:
    os.waitpid(r, 0)
say("clone_newuser", r, e)
say("unshare", *call("unshare", 0x10000000))
"#;

/// What the policy answers each probe.
const UNDER_POLICY: &[(&str, &str)] = &[
    ("clone3", "ENOSYS"),
    ("mount", "EPERM"),
    ("keyctl", "EPERM"),
    ("ptrace", "EPERM"),
    ("setns", "EPERM"),
    ("personality", "EPERM"),
    ("clone_newuser", "EPERM"),
    ("unshare", "EPERM"),
];

fn answers(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The probe run by the test itself, outside any run: what this kernel
/// answers a process with every right (a host that forbids user
/// namespaces to everyone says EPERM here too, and those probes then
/// prove nothing in the control run).
fn host_answers() -> BTreeMap<String, String> {
    let o = std::process::Command::new("python3")
        .args(["-c", PROBE])
        .output()
        .expect("python3");
    answers(&String::from_utf8_lossy(&o.stdout))
}

/// Let another uid traverse the test directory and enter the workspace.
fn open_up(e: &Env) {
    std::fs::set_permissions(e.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&e.ws, std::fs::Permissions::from_mode(0o777)).unwrap();
}

/// The isolation options to attack from: as root every kind; otherwise
/// the one a non-root runner can always try (Landlock).
fn isolations() -> Vec<Vec<&'static str>> {
    if is_root() {
        vec![
            vec!["--no-network"],
            vec!["--fs-write-scope"],
            vec!["--pid-namespace"],
            vec!["--as-user", "65534"],
        ]
    } else {
        vec![vec!["--fs-write-scope"]]
    }
}

/// `approve` and the digest its summary printed on the `syscalls` line.
fn approve_with_digest(e: &Env, flags: &[&str], command: &[&str]) -> (String, Option<String>) {
    let o = output(e.approve_cmd(flags, command));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "approve {flags:?}: {err}");
    let line = err
        .lines()
        .find(|l| l.trim_start().starts_with("syscalls "))
        .unwrap_or_else(|| panic!("no syscalls line in the summary: {err}"))
        .to_string();
    let digest = line
        .split("sha256 ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_string);
    (line, digest)
}

fn policy(r: &Run) -> &Value {
    &r.predicate()["isolation"]["syscall_policy"]
}

#[test]
fn an_isolated_child_is_refused_namespaces_mount_keyring_and_ptrace_until_waived() {
    require_tool!(
        "an_isolated_child_is_refused_namespaces_mount_keyring_and_ptrace_until_waived",
        "python3"
    );
    let host = host_answers();
    assert_eq!(
        host.len(),
        UNDER_POLICY.len(),
        "the probe runs here: {host:?}"
    );
    let probe = ["python3", "-c", PROBE];
    for flags in isolations() {
        let e = Env::new();
        open_up(&e);
        let (line, digest) = approve_with_digest(&e, &flags, &probe);
        let digest = digest.unwrap_or_else(|| panic!("{flags:?}: no digest in {line}"));
        let r = e.run(&[], &probe);
        if r.reason() == "isolation_unavailable" && !is_root() {
            skip!("syscall policy under {flags:?}: {}", r.stderr);
            continue;
        }
        assert_eq!(
            (r.code, r.class()),
            (0, "exited"),
            "{flags:?}: {}",
            r.stderr
        );
        let got = answers(r.stdout_text());
        for (name, want) in UNDER_POLICY {
            assert_eq!(
                got.get(*name).map(String::as_str),
                Some(*want),
                "{flags:?}: {name} under the policy: {got:?}"
            );
        }
        let p = policy(&r);
        assert_eq!(p["state"], "enforced", "{flags:?}: {p}");
        assert_eq!(p["name"], "docker-default-v1", "{flags:?}");
        assert_eq!(p["mechanism"], "seccomp_bpf", "{flags:?}");
        assert_eq!(
            p["sha256"],
            digest.as_str(),
            "{flags:?}: the digest approve printed"
        );

        // The same command, the policy waived: the kernel's own answers.
        let (line, none) = approve_with_digest(
            &e,
            &[&flags[..], &["--syscalls", "unconfined"]].concat(),
            &probe,
        );
        assert!(
            line.contains("unconfined (waived by the approver"),
            "{line}"
        );
        assert_eq!(none, None, "{line}");
        let r = e.run(&[], &probe);
        assert_eq!(
            (r.code, r.class()),
            (0, "exited"),
            "{flags:?}: {}",
            r.stderr
        );
        let got = answers(r.stdout_text());
        for (name, want) in UNDER_POLICY {
            if host.get(*name).map(String::as_str) == Some("EPERM") {
                continue;
            }
            let got = got.get(*name).map(String::as_str);
            assert!(
                got.is_some() && got != Some(*want),
                "{flags:?}: {name} waived still answers {got:?}"
            );
        }
        assert_eq!(policy(&r)["state"], "waived", "{flags:?}");
        assert!(policy(&r).get("sha256").is_none(), "{flags:?}");
    }
}

#[test]
fn the_digest_is_stable_and_the_same_in_approve_doctor_and_every_receipt() {
    let e = Env::new();
    let probe = ["true"];
    let (_, first) = approve_with_digest(&e, &["--fs-write-scope", "--uses", "2"], &probe);
    let first = first.expect("a digest");
    assert_eq!(first.len(), 64, "{first}");
    assert!(first.bytes().all(|b| b.is_ascii_hexdigit()), "{first}");
    let a = e.run(&[], &probe);
    if a.reason() == "isolation_unavailable" {
        skip!("syscall policy digest: {}", a.stderr);
        return;
    }
    let b = e.run(&[], &probe);
    for r in [&a, &b] {
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(policy(r)["sha256"], first.as_str());
    }
    // The short human view names the policy and its digest too.
    let receipt = e.path("receipt.json");
    std::fs::write(&receipt, &a.stdout).unwrap();
    let o = output(
        cmd()
            .args(["receipt", "show", "--format", "text"])
            .arg(&receipt),
    );
    let view = String::from_utf8_lossy(&o.stdout);
    let line = view
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("syscalls"))
        .take(2)
        .collect::<String>();
    assert!(
        line.contains("docker-default-v1") && line.contains(&first),
        "{view}"
    );
    let doctor = doctor_report(output(doctor_cmd()));
    let row = doctor_check(&doctor, "syscall_policy");
    assert_eq!(row["available"], true, "{row}");
    assert_eq!(row["mechanism"], "seccomp_bpf", "{row}");
    assert!(
        row["detail"].as_str().unwrap_or("").contains(&first),
        "doctor names another digest: {row}"
    );
    // Another approval in another place: the same program, the same digest.
    let other = Env::new();
    let (_, again) = approve_with_digest(&other, &["--no-network"], &["false"]);
    assert_eq!(again.as_deref(), Some(first.as_str()));
}

#[test]
fn a_lease_without_isolation_has_no_policy_and_says_so() {
    require_tool!(
        "a_lease_without_isolation_has_no_policy_and_says_so",
        "python3"
    );
    let e = Env::new();
    let probe = ["python3", "-c", PROBE];
    let (line, digest) = approve_with_digest(&e, &[], &probe);
    assert!(
        line.contains("none: the lease asks for no isolation option"),
        "{line}"
    );
    assert_eq!(digest, None);
    let m: Value = serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap();
    assert!(
        m["leases"][0]["body"]["isolation"]
            .get("syscalls")
            .is_none(),
        "a lease without isolation names no policy: {m}"
    );
    let r = e.run(&[], &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let p = policy(&r);
    assert_eq!(p["state"], "not_applicable", "{p}");
    assert!(p.get("name").is_none() && p.get("sha256").is_none(), "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap_or("")
            .contains("no isolation option"),
        "{p}"
    );
    // Nothing was installed: the keyring and clone3 answer as the kernel does.
    let got = answers(r.stdout_text());
    assert_eq!(got.get("keyctl").map(String::as_str), Some("ok"), "{got:?}");
    assert_ne!(
        got.get("clone3").map(String::as_str),
        Some("ENOSYS"),
        "{got:?}"
    );

    // Choosing or waiving a policy that cannot apply is refused, and
    // nothing is written.
    let before = std::fs::read(&e.manifest).unwrap();
    for choice in ["unconfined", "default"] {
        let o = output(e.approve_cmd(&["--syscalls", choice], &["true"]));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{choice}: {err}");
        assert!(
            err.contains(&format!("--syscalls {choice}")) && err.contains("isolation option"),
            "{choice}: {err}"
        );
        assert_eq!(std::fs::read(&e.manifest).unwrap(), before, "{choice}");
    }
    let o = output(e.approve_cmd(&["--no-network", "--syscalls", "off"], &["true"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("off"));
}

#[test]
fn the_signed_lease_names_the_choice_and_a_lease_from_before_it_gets_the_policy() {
    let e = Env::new();
    let probe = ["true"];
    e.approve(&["--fs-write-scope"], &probe);
    let m: Value = serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap();
    assert_eq!(m["leases"][0]["body"]["isolation"]["syscalls"], "default");
    // The waiver is in the signed bytes: editing it back without signing
    // breaks the lease.
    e.approve(&["--fs-write-scope", "--syscalls", "unconfined"], &probe);
    let text = std::fs::read_to_string(&e.manifest).unwrap();
    assert!(
        text.contains(r#""syscalls":"unconfined""#),
        "the waiver is not in the stored body: {text}"
    );
    let tampered = text.replacen(r#""syscalls":"unconfined""#, r#""syscalls":"default""#, 1);
    assert_ne!(tampered, text);
    std::fs::write(&e.manifest, &tampered).unwrap();
    let r = e.run(&[], &probe);
    r.assert_refused("lease_signature_invalid");
    std::fs::write(&e.manifest, &text).unwrap();

    // A lease signed before the field existed: isolated, no `syscalls`.
    if !on_path("python3") {
        skip!("a pre-policy lease: needs python3 on PATH");
        return;
    }
    let probe = ["python3", "-c", PROBE];
    let old = Env::new();
    old.approve(&["--fs-write-scope"], &probe);
    resign_first_lease(&old, |b| {
        b["isolation"].as_object_mut().unwrap().remove("syscalls");
    });
    let stored = std::fs::read_to_string(&old.manifest).unwrap();
    assert!(!stored.contains("syscalls"), "{stored}");
    let r = old.run(&[], &probe);
    if r.reason() == "isolation_unavailable" {
        skip!("a pre-policy lease: {}", r.stderr);
        return;
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        policy(&r)["state"],
        "enforced",
        "the safe reading of an old lease"
    );
    let got = answers(r.stdout_text());
    assert_eq!(
        got.get("keyctl").map(String::as_str),
        Some("EPERM"),
        "{got:?}"
    );
    assert_eq!(
        got.get("clone3").map(String::as_str),
        Some("ENOSYS"),
        "{got:?}"
    );
}

#[test]
fn a_policy_this_machine_cannot_enforce_is_refused_with_zero_spawn() {
    let e = Env::new();
    // In the workspace: the write scope lets the child write there.
    let marker = e.ws.join("ran");
    let probe_s = format!("touch {}", marker.display());
    let probe = ["sh", "-c", probe_s.as_str()];
    e.approve(&["--fs-write-scope"], &probe);
    let r = finish_run(output(
        e.run_cmd(&[], &probe)
            .env("GOVERNED_EXEC_FAULT", "syscall_policy_refused"),
    ));
    r.assert_refused("isolation_unavailable");
    assert!(
        r.stderr.contains("docker-default-v1") && r.stderr.contains("--syscalls unconfined"),
        "{}",
        r.stderr
    );
    assert!(!marker.exists(), "the command ran despite the refusal");
    assert_eq!(e.journal_executing_count(), 0, "a refusal spent a use");
    // The waiver is what lets such a machine run it: nothing is checked.
    e.approve(&["--fs-write-scope", "--syscalls", "unconfined"], &probe);
    let r = finish_run(output(
        e.run_cmd(&[], &probe)
            .env("GOVERNED_EXEC_FAULT", "syscall_policy_refused"),
    ));
    if r.reason() == "isolation_unavailable" {
        skip!("the waived control run: {}", r.stderr);
        return;
    }
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    assert!(marker.exists(), "the waived run did not run");
}

#[test]
fn the_approvals_file_takes_the_syscalls_key() {
    let e = Env::new();
    let file = e.path("approvals.toml");
    let head = "goal = \"goal.json\"\nworkspace = \"ws\"\nttl = \"1h\"\n";
    std::fs::write(
        &file,
        format!("{head}\n[[command]]\nname = \"a\"\nrun = [\"true\"]\nno_network = true\nsyscalls = \"unconfined\"\n\n[[command]]\nname = \"b\"\nrun = [\"false\"]\nfs_write_scope = true\n"),
    )
    .unwrap();
    let approve = |file: &std::path::Path| {
        let mut c = cmd();
        c.arg("approve")
            .arg("--file")
            .arg(file)
            .arg("--manifest")
            .arg(&e.manifest)
            .arg("--key")
            .arg(&e.key);
        output(c)
    };
    let o = approve(&file);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m: Value = serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap();
    let by_exe = |exe: &str| {
        m["leases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["body"]["request"]["executable"] == exe)
            .map(|l| l["body"]["isolation"]["syscalls"].clone())
            .unwrap()
    };
    assert_eq!(by_exe("true"), "unconfined");
    assert_eq!(by_exe("false"), "default");
    // A lease signed before `syscalls` existed is the same lease as one
    // that names the policy: `--check` does not call it changed.
    let one = e.path("one.toml");
    let one_entry =
        format!("{head}\n[[command]]\nname = \"b\"\nrun = [\"false\"]\nfs_write_scope = true\n");
    std::fs::write(&one, &one_entry).unwrap();
    let fresh = Env::new();
    std::fs::copy(&one, fresh.path("one.toml")).unwrap();
    let check = |env: &Env| {
        let mut c = cmd();
        c.arg("approve")
            .arg("--file")
            .arg(env.path("one.toml"))
            .arg("--manifest")
            .arg(&env.manifest)
            .arg("--check");
        output(c)
    };
    let mut c = cmd();
    c.arg("approve")
        .arg("--file")
        .arg(fresh.path("one.toml"))
        .arg("--manifest")
        .arg(&fresh.manifest)
        .arg("--key")
        .arg(&fresh.key);
    assert!(output(c).status.success());
    assert_eq!(check(&fresh).status.code(), Some(0));
    resign_first_lease(&fresh, |b| {
        b["isolation"].as_object_mut().unwrap().remove("syscalls");
    });
    let o = check(&fresh);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // A waiver is a change.
    std::fs::write(
        fresh.path("one.toml"),
        format!("{one_entry}syscalls = \"unconfined\"\n"),
    )
    .unwrap();
    let o = check(&fresh);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("isolation.syscalls"), "{out}");
    let bad = e.path("bad.toml");
    std::fs::write(
        &bad,
        format!("{head}\n[[command]]\nname = \"a\"\nrun = [\"true\"]\nno_network = true\nsyscalls = \"off\"\n"),
    )
    .unwrap();
    let o = approve(&bad);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("entry \"a\"") && err.contains("off"), "{err}");
}
