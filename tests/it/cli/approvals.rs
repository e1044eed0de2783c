//! Approvals as code (CONTRACT §10): `approve --file`, `--check`, `--prune`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support::*;

/// Write the approvals file beside the goal (its relative paths are
/// relative to this directory: `goal.json`, `ws`).
fn write_file(e: &Env, name: &str, text: &str) -> PathBuf {
    let p = e.path(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn file_cmd(e: &Env, file: &Path, flags: &[&str]) -> Command {
    let mut c = cmd();
    c.arg("approve")
        .arg("--file")
        .arg(file)
        .arg("--manifest")
        .arg(&e.manifest)
        .args(flags);
    c
}

fn approve_file(e: &Env, file: &Path, flags: &[&str]) -> Output {
    let mut c = file_cmd(e, file, &["--approver", "alice"]);
    c.arg("--key").arg(&e.key).args(flags);
    output(c)
}

/// `--check`, with no key anywhere on the command line.
fn check(e: &Env, file: &Path, flags: &[&str]) -> Output {
    output(file_cmd(e, file, &["--check"]).args(flags))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn manifest(e: &Env) -> Value {
    serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap()
}

fn lease_ids(stdout: &[u8]) -> Vec<String> {
    text(stdout)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

fn sha256_of(p: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(p).unwrap()))
}

fn system(name: &str) -> PathBuf {
    ["/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap()
}

const HEAD: &str = "goal = \"goal.json\"\nworkspace = \"ws\"\nttl = \"1h\"\n";

fn five() -> String {
    let mut t = HEAD.to_string();
    for (i, word) in ["one", "two", "three", "four", "five"].iter().enumerate() {
        t.push_str(&format!(
            "\n[[command]]\nname = \"{word}\"\nrun = [\"echo\", \"{word}\"]\nuses = {}\n",
            i + 1
        ));
    }
    t
}

#[test]
fn five_entries_approve_five_leases_in_one_write() {
    let e = Env::new();
    let f = write_file(&e, "approvals.toml", &five());
    let o = approve_file(&e, &f, &[]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let ids = lease_ids(&o.stdout);
    assert_eq!(ids.len(), 5, "{}", text(&o.stdout));
    let m = manifest(&e);
    let stored: Vec<&str> = m["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["body"]["lease_id"].as_str().unwrap())
        .collect();
    assert_eq!(stored, ids.iter().map(String::as_str).collect::<Vec<_>>());
    // One combined summary: every entry's, with its line, then the table.
    for (word, line) in [("one", 5), ("three", 15), ("five", 25)] {
        assert!(
            err.contains(&format!("entry \"{word}\" (line {line})")),
            "{err}"
        );
    }
    assert!(
        err.contains("ENTRY") && err.contains("in one write"),
        "{err}"
    );
    let uses: Vec<u64> = m["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["body"]["max_uses"].as_u64().unwrap())
        .collect();
    assert_eq!(uses, vec![1, 2, 3, 4, 5]);
    // The leases run.
    let r = e.run(&[], &["echo", "four"]);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    assert_eq!(r.stdout_text(), "four\n");
    // And the file agrees with the manifest.
    let c = check(&e, &f, &[]);
    assert_eq!(
        c.status.code(),
        Some(0),
        "{}{}",
        text(&c.stdout),
        text(&c.stderr)
    );
    assert_eq!(text(&c.stdout).matches("unchanged ").count(), 5);
}

#[test]
fn a_crash_after_the_third_entry_leaves_the_manifest_unchanged() {
    if !cfg!(feature = "fault-injection") {
        skip!("built without the fault-injection feature");
        return;
    }
    let e = Env::new();
    let first = e.approve(&[], &["true"]);
    let before = std::fs::read(&e.manifest).unwrap();
    let f = write_file(&e, "approvals.toml", &five());
    let mut c = file_cmd(&e, &f, &[]);
    c.arg("--key")
        .arg(&e.key)
        .env("GOVERNED_EXEC_FAULT", "approvals_after_third_entry");
    let o = output(c);
    assert!(!o.status.success(), "the fault point was not reached");
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    assert_eq!(std::fs::read(&e.manifest).unwrap(), before);
    // Without the fault, all five land beside the first lease.
    let o = approve_file(&e, &f, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let m = manifest(&e);
    assert_eq!(m["leases"].as_array().unwrap().len(), 6);
    assert_eq!(m["leases"][0]["body"]["lease_id"], first.as_str());
}

const BEFORE: &str = "
[[command]]
name = \"keep\"
run = [\"echo\", \"keep\"]

[[command]]
name = \"tweak\"
run = [\"echo\", \"tweak\"]
memory = \"256MiB\"
env = { MODE = \"a\" }

[[command]]
name = \"gone\"
run = [\"echo\", \"gone\"]
";

const AFTER: &str = "
[[command]]
name = \"keep\"
run = [\"echo\", \"keep\"]

[[command]]
name = \"tweak\"
run = [\"echo\", \"tweak\"]
memory = \"512MiB\"
env = { MODE = \"b\" }

[[command]]
name = \"fresh\"
run = [\"echo\", \"fresh\"]
";

#[test]
fn check_reports_unchanged_new_changed_and_only_in_manifest() {
    let e = Env::new();
    let before = write_file(&e, "before.toml", &format!("{HEAD}{BEFORE}"));
    let o = approve_file(&e, &before, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let ids = lease_ids(&o.stdout);
    let c = check(&e, &before, &[]);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));

    let after = write_file(&e, "after.toml", &format!("{HEAD}{AFTER}"));
    let manifest_bytes = std::fs::read(&e.manifest).unwrap();
    let c = check(&e, &after, &[]);
    let out = text(&c.stdout);
    assert_eq!(c.status.code(), Some(1), "{out}{}", text(&c.stderr));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        vec![
            format!("unchanged         \"keep\"  [\"echo\" \"keep\"]  lease {}", ids[0]).as_str(),
            format!("changed           \"tweak\"  [\"echo\" \"tweak\"]  lease {}", ids[1]).as_str(),
            "    env.fixed.MODE: \"a\" → \"b\"",
            "    limits.memory_bytes: 268435456 (256 MiB) → 536870912 (512 MiB) (widening)",
            "new               \"fresh\"  [\"echo\" \"fresh\"]",
            "    isolation.as_user: none (the runner's uid)",
            "    isolation.fs_read: none (reads everywhere)",
            "    isolation.fs_write: none (writes not scoped)",
            "    isolation.no_network: false",
            "    isolation.pid_namespace: false",
            "    max_uses: 1",
            "    ttl: 1h",
            "    env.fixed: none",
            "    env.path: \"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"",
            format!("only in manifest  lease {}  [\"echo\" \"gone\"]  goal \"t\"", ids[2]).as_str(),
            format!(
                "differ: {} and {} (approve --file to sign the file's state; --prune to revoke what only the manifest holds)",
                after.display(),
                e.manifest.display()
            )
            .as_str(),
        ],
        "{out}"
    );
    let md = check(&e, &after, &["--format", "markdown"]);
    let md_out = text(&md.stdout);
    assert_eq!(md.status.code(), Some(1));
    assert!(md_out.starts_with("### Approvals: differ"), "{md_out}");
    assert!(
        md_out.contains("| status | entry | command | lease | what changes |"),
        "{md_out}"
    );
    assert!(md_out.contains(&format!("| changed | \"tweak\" | \"echo\" \"tweak\" | {} | env.fixed.MODE: \"a\" → \"b\"<br>limits.memory\\_bytes: 268435456 (256 MiB) → 536870912 (512 MiB) (widening) |", ids[1])), "{md_out}");
    assert!(md_out.contains("| new | \"fresh\" |"), "{md_out}");
    assert!(
        md_out.contains(&format!(
            "| only in manifest | | \"echo\" \"gone\" | {} |",
            ids[2]
        )),
        "{md_out}"
    );
    // --check writes nothing.
    assert_eq!(std::fs::read(&e.manifest).unwrap(), manifest_bytes);
    // Bad input is 2, not 1.
    let bad = write_file(
        &e,
        "bad.toml",
        &format!("{HEAD}[[command]]\nrun = [\"echo\"\n"),
    );
    assert_eq!(check(&e, &bad, &[]).status.code(), Some(2));
    // --goal naming the file's goal is the same goal; another one is refused.
    let c = check(&e, &after, &["--goal", e.goal.to_str().unwrap()]);
    assert_eq!(c.status.code(), Some(1), "{}", text(&c.stderr));
    let other = e.path("other.json");
    std::fs::copy(&e.goal, &other).unwrap();
    let c = check(&e, &after, &["--goal", other.to_str().unwrap()]);
    assert_eq!(c.status.code(), Some(2));
    assert!(
        text(&c.stderr).contains("--goal names"),
        "{}",
        text(&c.stderr)
    );
    // --check creates nothing, not even a ledger directory an entry names.
    let with_ledger = write_file(
        &e,
        "ledger.toml",
        &format!("{HEAD}ledger = \"new-ledger\"\n{AFTER}"),
    );
    assert_eq!(check(&e, &with_ledger, &[]).status.code(), Some(1));
    assert!(!e.path("new-ledger").exists());
    // No manifest at all: every entry is new.
    std::fs::remove_file(&e.manifest).unwrap();
    let c = check(&e, &after, &[]);
    assert_eq!(c.status.code(), Some(1));
    assert_eq!(
        text(&c.stdout).matches("new ").count(),
        3,
        "{}",
        text(&c.stdout)
    );
}

#[test]
fn a_changed_executable_shows_its_digest_and_runs_after_reapproval() {
    if std::fs::canonicalize(system("true")).ok() == std::fs::canonicalize(system("false")).ok() {
        skip!("a_changed_executable_shows_its_digest_and_runs_after_reapproval: true and false are one multi-call binary here (busybox): no two programs to swap");
        return;
    }
    let e = Env::new();
    let tool = e.ws.join("tool");
    std::fs::copy(system("true"), &tool).unwrap();
    let f = write_file(
        &e,
        "approvals.toml",
        &format!("{HEAD}\n[[command]]\nname = \"tool\"\nrun = [\"./tool\"]\nuses = 2\n"),
    );
    let o = approve_file(&e, &f, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let old_id = lease_ids(&o.stdout).remove(0);
    let old_sha = sha256_of(&tool);
    // A "package upgrade": the same path, other bytes.
    std::fs::copy(system("false"), &tool).unwrap();
    let new_sha = sha256_of(&tool);
    assert_ne!(old_sha, new_sha);
    e.run(&[], &["./tool"]).assert_refused("executable_drift");

    let c = check(&e, &f, &[]);
    let out = text(&c.stdout);
    assert_eq!(c.status.code(), Some(1), "{out}");
    assert!(
        out.starts_with(&format!(
            "changed           \"tool\"  [\"./tool\"]  lease {old_id}\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "    executable.sha256: \"{old_sha}\" → \"{new_sha}\"\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("toolchain:   old: sha256 {old_sha}, ")),
        "{out}"
    );
    assert!(
        out.contains(&format!("toolchain:   new: sha256 {new_sha}, ")),
        "{out}"
    );

    let o = approve_file(&e, &f, &[]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("changed since lease {old_id} was approved")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "lease {old_id} (same goal, request and binding): marked superseded"
        )),
        "{err}"
    );
    let m = manifest(&e);
    assert_eq!(m["superseded"][0]["lease_id"], old_id.as_str());
    let r = e.run(&[], &["./tool"]);
    assert_eq!((r.class(), r.code), ("exited", 1), "{}", r.stderr);
    assert_eq!(check(&e, &f, &[]).status.code(), Some(0));
}

/// Each bad file: exit 2, the entry and line named, the manifest untouched,
/// with and without `--check`.
#[test]
fn bad_files_name_the_entry_and_line_and_change_nothing() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let before = std::fs::read(&e.manifest).unwrap();
    let ok = "\n[[command]]\nname = \"a\"\nrun = [\"true\"]\n";
    let cases: [(&str, String, &[&str]); 6] = [
        (
            "a value approve cannot take",
            format!("{HEAD}{ok}\n[[command]]\nname = \"b\"\nrun = [\"echo\"]\n\nmemory = \"lots\"\n"),
            &["entry \"b\" (line 13)", "`memory`: invalid size \"lots\""],
        ),
        (
            "unknown key",
            format!("{HEAD}{ok}\n[[command]]\nname = \"b\"\nrun = [\"echo\"]\nwall_tme = \"1s\"\n"),
            &["entry \"b\" (line 12)", "unknown field `wall_tme`"],
        ),
        (
            "duplicate name",
            format!("{HEAD}{ok}\n[[command]]\nname = \"a\"\nrun = [\"echo\"]\n"),
            &["entry \"a\" (line 9)", "duplicate name", "line 5"],
        ),
        (
            "executable that does not resolve",
            format!("{HEAD}{ok}\n[[command]]\nname = \"b\"\nrun = [\"no-such-program-xyz\"]\n"),
            &["entry \"b\" (line 9)", "no-such-program-xyz"],
        ),
        (
            "malformed",
            format!("{HEAD}{ok}\n[[command]]\nname = \"b\"\nrun = [\"echo\"\n"),
            &["entry \"b\" (line 11)"],
        ),
        (
            "allow_net with a wildcard",
            format!("{HEAD}{ok}\n[[command]]\nname = \"b\"\nrun = [\"echo\"]\nallow_net = [\"*.example.org\"]\n"),
            &["entry \"b\"", "*.example.org"],
        ),
    ];
    for (what, body, wants) in cases {
        let f = write_file(&e, "approvals.toml", &body);
        for o in [approve_file(&e, &f, &[]), check(&e, &f, &[])] {
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{what}: {err}");
            assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
            for w in wants {
                assert!(err.contains(w), "{what}: wants {w:?}: {err}");
            }
            assert!(o.stdout.is_empty(), "{what}");
            assert_eq!(std::fs::read(&e.manifest).unwrap(), before, "{what}");
        }
    }
}

/// The same approval from the file and from the command line: the signed
/// bodies are equal but for the lease id and the two times.
#[test]
fn file_leases_are_the_command_line_leases() {
    let e = Env::new();
    std::fs::create_dir(e.ws.join("sub")).unwrap();
    std::fs::create_dir(e.path("out")).unwrap();
    let f = write_file(
        &e,
        "approvals.toml",
        &format!(
            "{HEAD}
[[command]]
name = \"full\"
run = [\"echo\", \"a b\", \"$(x); |\"]
cwd = \"sub\"
profile = \"short\"
ttl = \"2h\"
uses = 3
wall_time = \"7s\"
kill_grace = \"1s\"
cpu_time = \"9s\"
memory = \"300MiB\"
max_processes = 64
max_open_files = 100
max_file_size = 1048576
keep_output = \"4KiB\"
output_cap = \"1MiB\"
cancel_grace = \"3s\"
env = {{ A = \"1\", B = \"two words\" }}
fs_write = [\"out\"]
pid_namespace = true
"
        ),
    );
    let o = approve_file(&e, &f, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let from_file = manifest(&e)["leases"][0]["body"].clone();

    let cli_manifest = e.path("cli-manifest.json");
    let out_dir = e.path("out");
    let files = ApproveFiles {
        manifest: &cli_manifest,
        ..e.approve_files()
    };
    let mut c = approve_cmd_with(files, &[], &[]);
    c.args([
        "--approver",
        "alice",
        "--cwd",
        "sub",
        "--profile",
        "short",
        "--ttl",
        "2h",
        "--uses",
        "3",
    ])
    .args([
        "--wall-time",
        "7s",
        "--kill-grace",
        "1s",
        "--cpu-time",
        "9s",
        "--memory",
        "300MiB",
    ])
    .args([
        "--max-processes",
        "64",
        "--max-open-files",
        "100",
        "--max-file-size",
        "1048576",
    ])
    .args([
        "--keep-output",
        "4KiB",
        "--output-cap",
        "1MiB",
        "--cancel-grace",
        "3s",
    ])
    .args(["--env", "B=two words", "--env", "A=1", "--fs-write"])
    .arg(&out_dir)
    .args(["--pid-namespace", "--", "echo", "a b", "$(x); |"]);
    let o = output(c);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let m: Value = serde_json::from_slice(&std::fs::read(&cli_manifest).unwrap()).unwrap();
    let from_cli = m["leases"][0]["body"].clone();

    let strip = |mut v: Value| {
        let o = v.as_object_mut().unwrap();
        let ttl = |o: &serde_json::Map<String, Value>| {
            let t = |k: &str| humantime::parse_rfc3339(o[k].as_str().unwrap()).unwrap();
            t("expires_at").duration_since(t("issued_at")).unwrap()
        };
        assert_eq!(ttl(o), std::time::Duration::from_secs(7200));
        for k in ["lease_id", "issued_at", "expires_at"] {
            assert!(o.remove(k).is_some(), "{k}");
        }
        v
    };
    assert_eq!(strip(from_file), strip(from_cli));
    // And the check sees the command line's lease as the entry's.
    std::fs::copy(&cli_manifest, &e.manifest).unwrap();
    let c = check(&e, &f, &[]);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
}

#[test]
fn prune_revokes_the_leases_no_entry_approves_any_more() {
    let e = Env::new();
    let before = write_file(&e, "before.toml", &format!("{HEAD}{BEFORE}"));
    let o = approve_file(&e, &before, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let gone = lease_ids(&o.stdout).remove(2);
    // Another Goal's lease in the same manifest is not the file's to prune.
    let other_goal = e.path("other-goal.json");
    std::fs::write(
        &other_goal,
        DEFAULT_GOAL.replace("\"id\": \"t\"", "\"id\": \"other\""),
    )
    .unwrap();
    let files = ApproveFiles {
        goal: &other_goal,
        ..e.approve_files()
    };
    let o = output(approve_cmd_with(files, &[], &["echo", "other"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let other = text(&o.stdout).trim().to_string();

    let after = write_file(&e, "after.toml", &format!("{HEAD}{AFTER}"));
    // Without --prune the removed entry's lease stays live.
    let o = approve_file(&e, &after, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(manifest(&e)["revocations"].as_array().unwrap().is_empty());
    assert_eq!(check(&e, &after, &[]).status.code(), Some(1));

    let o = approve_file(&e, &after, &["--prune"]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let listed = err
        .find(&format!("prune         lease {gone} [\"echo\" \"gone\"]"))
        .expect(&err);
    assert!(listed < err.find("approved:").unwrap(), "{err}");
    assert!(!err.contains(&other), "{err}");
    let revoked: Vec<String> = manifest(&e)["revocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["lease_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(revoked, vec![gone]);
    let r = e.run(&[], &["echo", "gone"]);
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert_eq!(check(&e, &after, &[]).status.code(), Some(0));
}

/// The shipped `ci/approvals.toml`, in a checkout: `--check` without a
/// manifest lists both steps as new (exit 1), approving the file makes it
/// agree (exit 0), and an edit of the step script shows as its digest.
#[test]
fn the_shipped_ci_approvals_file_approves_and_checks() {
    let e = Env::new();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checkout = e.path("checkout");
    std::fs::create_dir_all(checkout.join("ci")).unwrap();
    for f in ["approvals.toml", "goal.json", "governed-step.sh"] {
        std::fs::copy(repo.join("ci").join(f), checkout.join("ci").join(f)).unwrap();
    }
    let file = checkout.join("ci/approvals.toml");
    let manifest = checkout.join("ci/manifest.json");
    let with = |flags: &[&str]| {
        let mut c = cmd();
        c.arg("approve")
            .arg("--file")
            .arg(&file)
            .arg("--manifest")
            .arg(&manifest)
            .args(flags);
        output(c)
    };
    let c = with(&["--check"]);
    assert_eq!(c.status.code(), Some(1), "{}", text(&c.stderr));
    let starting = |out: &str, word: &str| out.lines().filter(|l| l.starts_with(word)).count();
    assert_eq!(starting(&text(&c.stdout), "new "), 2, "{}", text(&c.stdout));
    let o = with(&["--key", e.key.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let m: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    let bodies: Vec<&Value> = m["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["body"])
        .collect();
    assert_eq!(bodies.len(), 2);
    assert!(bodies
        .iter()
        .all(|b| b["binding"] == "portable" && b["max_uses"] == 500));
    assert_eq!(bodies[1]["isolation"]["as_user"]["uid"], 1000);
    let c = with(&["--check", "--format", "markdown"]);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    assert!(text(&c.stdout).starts_with("### Approvals: agree"));
    // A change to the step script is a change of what is approved.
    let script = checkout.join("ci/governed-step.sh");
    let old_sha = sha256_of(&script);
    let mut body = std::fs::read(&script).unwrap();
    body.extend_from_slice(b"# edited\n");
    std::fs::write(&script, body).unwrap();
    let c = with(&["--check"]);
    let out = text(&c.stdout);
    assert_eq!(c.status.code(), Some(1), "{out}");
    assert_eq!(starting(&out, "changed "), 2, "{out}");
    assert!(
        out.contains(&format!(
            "portable.sha256: \"{old_sha}\" → \"{}\"",
            sha256_of(&script)
        )),
        "{out}"
    );
}

/// `allow_net` in an approvals file is `approve --allow-net`: the same
/// canonical entries in the lease (host lower-cased, port explicit).
#[test]
fn allow_net_in_the_file_is_the_flags_lease_field() {
    let e = Env::new();
    let body = format!(
        "{HEAD}\n[[command]]\nname = \"fetch\"\nrun = [\"true\"]\nallow_net = [\"PyPI.org\", \"files.pythonhosted.org:443\", \"10.0.0.1:8080\"]\n"
    );
    let f = write_file(&e, "approvals.toml", &body);
    let o = approve_file(&e, &f, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&e.manifest).unwrap()).unwrap();
    let lease = m["leases"].as_array().unwrap().last().unwrap().clone();
    let body = if lease["body"].is_object() {
        &lease["body"]
    } else {
        &lease
    };
    assert_eq!(
        body["isolation"]["allow_net"],
        serde_json::json!([
            "pypi.org:443",
            "files.pythonhosted.org:443",
            "10.0.0.1:8080"
        ]),
        "{lease}"
    );
}

/// `--check` shows a new entry's whole grant, not only its name and
/// command, and marks every change that grants more as widening, in text
/// and in markdown.
#[test]
fn check_shows_a_new_entrys_grant_and_marks_widening_changes() {
    let e = Env::new();
    let before = write_file(
        &e,
        "before.toml",
        &format!(
            "{HEAD}\n[[command]]\nname = \"net\"\nrun = [\"echo\", \"net\"]\nno_network = true\nmemory = \"256MiB\"\nuses = 1\n\n[[command]]\nname = \"narrow\"\nrun = [\"echo\", \"narrow\"]\nmemory = \"512MiB\"\n"
        ),
    );
    let o = approve_file(&e, &before, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let after = write_file(
        &e,
        "after.toml",
        &format!(
            "{HEAD}\n[[command]]\nname = \"net\"\nrun = [\"echo\", \"net\"]\nno_network = false\nmemory = \"512MiB\"\nuses = 3\nttl = \"2h\"\n\n[[command]]\nname = \"narrow\"\nrun = [\"echo\", \"narrow\"]\nmemory = \"256MiB\"\n\n[[command]]\nname = \"fresh\"\nrun = [\"echo\", \"fresh\"]\nfs_write_scope = true\nno_network = true\nmemory = \"1GiB\"\nuses = 4\nenv = {{ MODE = \"b\" }}\n"
        ),
    );
    let c = check(&e, &after, &[]);
    let out = text(&c.stdout);
    assert_eq!(c.status.code(), Some(1), "{out}{}", text(&c.stderr));
    let lines: Vec<&str> = out.lines().collect();
    let has = |l: &str| lines.contains(&l);
    for l in [
        "    isolation.no_network: true → false (widening)",
        "    limits.memory_bytes: 268435456 (256 MiB) → 536870912 (512 MiB) (widening)",
        "    max_uses: 1 → 3 (widening)",
        "    ttl: 1h → 2h (widening)",
        // A narrower limit is a change, not a widening.
        "    limits.memory_bytes: 536870912 (512 MiB) → 268435456 (256 MiB)",
    ] {
        assert!(has(l), "no line {l:?} in\n{out}");
    }
    // The new entry's grant, line by line under it.
    let at = lines
        .iter()
        .position(|l| l.starts_with("new ") && l.contains("\"fresh\""))
        .unwrap_or_else(|| panic!("{out}"));
    let grant: Vec<&str> = lines[at + 1..]
        .iter()
        .take_while(|l| l.starts_with("    "))
        .copied()
        .collect();
    for want in [
        "    isolation.as_user: none (the runner's uid)",
        "    isolation.no_network: true",
        "    isolation.pid_namespace: false",
        "    isolation.syscalls: \"default\"",
        "    limits.memory_bytes: 1073741824 (1 GiB) (tier standard: 8589934592 (8 GiB))",
        "    max_uses: 4",
        "    ttl: 1h",
        "    env.fixed.MODE: \"b\"",
    ] {
        assert!(grant.contains(&want), "no {want:?} in the grant:\n{out}");
    }
    assert!(
        grant
            .iter()
            .any(|l| l.starts_with("    isolation.fs_write: [")),
        "{out}"
    );
    // Limits equal to the tier are the tier's, not repeated.
    assert!(!grant.iter().any(|l| l.contains("wall_time_ms")), "{out}");

    let md = check(&e, &after, &["--format", "markdown"]);
    let md_out = text(&md.stdout);
    let row = |name: &str| {
        md_out
            .lines()
            .find(|l| l.contains(&format!("| \"{name}\" |")))
            .unwrap_or_else(|| panic!("no row {name} in {md_out}"))
            .to_string()
    };
    let net = row("net");
    assert!(
        net.contains("isolation.no\\_network: true → false (widening)"),
        "{net}"
    );
    assert!(net.contains("max\\_uses: 1 → 3 (widening)"), "{net}");
    assert!(!row("narrow").contains("widening"), "{md_out}");
    let fresh = row("fresh");
    assert!(fresh.starts_with("| new |"), "{fresh}");
    assert!(fresh.contains("isolation.no\\_network: true"), "{fresh}");
    assert!(fresh.contains("max\\_uses: 4"), "{fresh}");
    assert!(fresh.contains("env.fixed.MODE: \"b\""), "{fresh}");
}
