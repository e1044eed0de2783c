//! Portable binding, re-approval that supersedes, the lease's profile, and a
//! local ledger the lease names.

use std::path::Path;
use std::process::Command;

use crate::support::*;

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn a_portable_lease_runs_in_a_fresh_clone_and_refuses_changed_bytes() {
    let e = Env::new();
    if !git(&e.ws, &["init", "-q"]) {
        skip!("git is not installed: the portable-lease clone test needs it");
        return;
    }
    e.write_script("build.sh", "#!/bin/sh\necho built > out.txt\necho ok\n");
    std::fs::create_dir(e.ws.join("sub")).unwrap();
    std::fs::write(e.ws.join("sub/keep"), "").unwrap();
    assert!(git(&e.ws, &["add", "-A"]) && git(&e.ws, &["commit", "-qm", "init"]));
    let o = output(e.approve_cmd(&["--portable", "--uses", "5"], &["./build.sh"]));
    assert!(o.status.success());
    let summary = String::from_utf8_lossy(&o.stderr);
    assert!(
        summary.contains("binding       portable: executable build.sh (relative to the workspace)"),
        "{summary}"
    );
    let machine = e.approve(&["--uses", "5"], &["sh", "-c", "echo machine"]);

    let clone = e.path("clone");
    assert!(git(
        e.dir.path(),
        &["clone", "-q", e.ws.to_str().unwrap(), "clone"]
    ));
    let head = read(&clone.join(".git/HEAD"));
    assert!(head.starts_with("ref: refs/heads/"));

    // Runs in the clone, named by --workspace; the receipt says so.
    let r = e.run(&["--workspace", clone.to_str().unwrap()], &["./build.sh"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let p = r.predicate();
    assert_eq!(p["binding"], "portable");
    let canon = std::fs::canonicalize(&clone).unwrap();
    assert_eq!(p["workspace"], canon.to_str().unwrap());
    let out = Command::new("git")
        .current_dir(&clone)
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    assert_eq!(
        p["workspace_git"]["head"],
        String::from_utf8_lossy(&out.stdout).trim()
    );
    assert!(clone.join("out.txt").exists(), "ran in the clone");
    assert!(
        !e.ws.join("out.txt").exists(),
        "not in the approving workspace"
    );

    // Default workspace: the current directory.
    let r = finish_run(output(e.run_cmd(&[], &["./build.sh"]).current_dir(&clone)));
    assert_eq!(r.class(), "exited", "{}", r.stderr);

    // A machine lease does not follow the clone.
    let r = e.run(
        &["--workspace", clone.to_str().unwrap(), "--lease", &machine],
        &[],
    );
    r.assert_refused("workspace_drift");

    // One changed byte of the executable in the clone: drift, zero spawn.
    e.write_script(
        "../clone/build.sh",
        "#!/bin/sh\necho BUILT > out.txt\necho ok\n",
    );
    std::fs::remove_file(clone.join("out.txt")).unwrap();
    let r = e.run(&["--workspace", clone.to_str().unwrap()], &["./build.sh"]);
    r.assert_refused("executable_drift");
    assert!(!clone.join("out.txt").exists());
}

#[test]
fn a_portable_cwd_that_leaves_the_workspace_through_a_symlink_is_refused() {
    let e = Env::new();
    std::fs::create_dir(e.ws.join("sub")).unwrap();
    e.approve(&["--portable", "--cwd", "sub"], &["true"]);
    let other = e.path("other");
    std::fs::create_dir(&other).unwrap();
    let outside = e.path("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, other.join("sub")).unwrap();
    let r = finish_run(output(e.run_cmd(
        &["--workspace", other.to_str().unwrap(), "--cwd", "sub"],
        &["true"],
    )));
    r.assert_refused("cwd_drift");
    assert!(r.stderr.contains("outside the workspace"), "{}", r.stderr);
}

#[test]
fn re_approval_supersedes_and_only_the_new_lease_runs() {
    let e = Env::new();
    let first = e.approve(&["--uses", "3"], &["sh", "-c", "echo hi"]);
    let o = output(e.approve_cmd(&["--uses", "3"], &["sh", "-c", "echo hi"]));
    assert!(o.status.success());
    let second = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let summary = String::from_utf8_lossy(&o.stderr);
    assert!(
        summary.contains(&format!("replaces      lease {first}")),
        "{summary}"
    );
    let m: serde_json::Value = serde_json::from_str(&read(&e.manifest)).unwrap();
    assert_eq!(m["superseded"][0]["lease_id"], first.as_str());
    assert_eq!(m["superseded"][0]["by_lease"], second.as_str());

    let r = e.run(&[], &["sh", "-c", "echo hi"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["lease"]["id"], second.as_str());
    let r = e.run(&["--lease", &first], &[]);
    r.assert_refused("lease_revoked");
    assert!(
        r.stderr.contains(&format!("superseded by lease {second}")),
        "{}",
        r.stderr
    );

    // A different request is not superseded.
    let o = output(e.approve_cmd(&[], &["sh", "-c", "echo other"]));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("replaces"));
}

#[test]
fn run_without_profile_takes_the_leases_and_with_it_must_match() {
    let e = Env::new();
    e.approve(
        &["--profile", "long", "--uses", "3"],
        &["sh", "-c", "echo long"],
    );
    let r = e.run(&[], &["sh", "-c", "echo long"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["request"]["profile"], "long");
    let r = finish_run(output(
        e.run_cmd(&["--profile", "long"], &["sh", "-c", "echo long"]),
    ));
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let r = finish_run(output(
        e.run_cmd(&["--profile", "short"], &["sh", "-c", "echo long"]),
    ));
    r.assert_refused("no_matching_lease");
    // Two live leases of different profiles: the caller must choose.
    e.approve(&["--profile", "short"], &["sh", "-c", "echo long"]);
    let r = e.run(&[], &["sh", "-c", "echo long"]);
    r.assert_refused("no_matching_lease");
    assert!(r.stderr.contains("give --profile"), "{}", r.stderr);
}

#[test]
fn a_local_ledger_the_lease_names_counts_uses_across_state_dirs_and_keeps_revocations() {
    let e = Env::new();
    let o = output(e.approve_cmd(&[], &["true"]));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("uses, revocations and unknown outcomes are counted per state dir"));
    let led = e.path("ledger");
    let id = e.approve(
        &["--uses", "1", "--ledger", led.to_str().unwrap()],
        &["sh", "-c", "echo once"],
    );
    let r = e.run(&[], &["sh", "-c", "echo once"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(
        r.predicate()["ledger"],
        std::fs::canonicalize(&led).unwrap().to_str().unwrap()
    );
    // Another state dir: the ledger still says the one use is spent.
    let other_state = e.path("state2");
    let r = finish_run(output(crate::ledger::pg::run_cmd_in(
        &e,
        &other_state,
        &[],
        &["sh", "-c", "echo once"],
    )));
    r.assert_refused("lease_exhausted");

    // journal --ledger lists the attempt; the state dir's journal has none.
    let o = output(cmd().args([
        "journal",
        "--ledger",
        led.to_str().unwrap(),
        "list",
        "--json",
    ]));
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["lease_id"], id.as_str());
    assert_eq!(e.journal_executing_count(), 0);

    // Revoke, then an old manifest copy: the ledger keeps the lease revoked.
    let id2 = e.approve(
        &["--uses", "5", "--ledger", led.to_str().unwrap()],
        &["sh", "-c", "echo many"],
    );
    let old = e.path("old-manifest.json");
    std::fs::copy(&e.manifest, &old).unwrap();
    let o = output(
        cmd()
            .args(["revoke", "--manifest"])
            .arg(&e.manifest)
            .args(["--lease", &id2, "--by", "ops"])
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let state3 = e.path("state3");
    let files = RunFiles {
        manifest: &old,
        state: &state3,
        ..e.files()
    };
    let r = finish_run(output(run_cmd_with(files, &[], &["sh", "-c", "echo many"])));
    r.assert_refused("lease_revoked");
}

/// The receipt's `workspace_git` was read after the child ran, so the child
/// chose the commit a verified receipt attests; and a `.git/HEAD` it left as
/// a FIFO hung the next runner.
#[test]
fn the_child_neither_chooses_the_attested_commit_nor_hangs_the_next_run_through_dot_git() {
    let e = Env::new();
    if !git(&e.ws, &["init", "-q"]) {
        skip!("git is not installed: the workspace_git test needs it");
        return;
    }
    let forged = "f".repeat(40);
    e.write_script(
        "step.sh",
        &format!(
            "#!/bin/sh\ncase \"$1\" in\n  forge) echo {forged} > .git/HEAD ;;\n  fifo) rm -f .git/HEAD; mkfifo .git/HEAD ;;\nesac\n"
        ),
    );
    assert!(git(&e.ws, &["add", "-A"]) && git(&e.ws, &["commit", "-qm", "init"]));
    let real = Command::new("git")
        .current_dir(&e.ws)
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    let ws = e.ws.to_str().unwrap();
    e.approve(&["--portable", "--uses", "3"], &["./step.sh", "forge"]);
    e.approve(&["--portable", "--uses", "3"], &["./step.sh", "fifo"]);
    e.approve(&["--portable", "--uses", "3"], &["./step.sh", "noop"]);

    let r = e.run(&["--workspace", ws], &["./step.sh", "forge"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["workspace_git"]["head"], real.as_str());

    let r = e.run(&["--workspace", ws], &["./step.sh", "fifo"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    // The next run meets the FIFO before spawn: no hang, no workspace_git.
    let mut c = e.run_cmd(&["--workspace", ws], &["./step.sh", "noop"]);
    let child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let o = child.wait_with_output().unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
    let r = finish_run(o);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert!(
        r.predicate()["workspace_git"].is_null(),
        "{}",
        r.predicate()["workspace_git"]
    );
}

/// A superseded lease ran again from an old copy of the manifest, in the
/// very state dir that ran its replacement: the supersession lived only in
/// the manifest. Now the replacement's first run
/// records it where uses are counted, as a revocation is.
#[test]
fn an_old_manifest_copy_cannot_bring_back_a_superseded_lease() {
    let e = Env::new();
    let cmd_line = ["sh", "-c", "echo hi"];
    let first = e.approve(&["--uses", "5"], &cmd_line);
    let old_copy = e.path("manifest-old.json");
    std::fs::copy(&e.manifest, &old_copy).unwrap();
    let second = e.approve(&["--uses", "5"], &cmd_line);
    let r = e.run(&[], &cmd_line);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["lease"]["id"], second.as_str());

    let files = RunFiles {
        manifest: &old_copy,
        ..e.files()
    };
    let r = finish_run(output(run_cmd_with(files, &[], &cmd_line)));
    r.assert_refused("lease_revoked");
    assert_eq!(r.predicate()["lease"]["id"], first.as_str());
    assert!(
        r.stderr.contains(&format!("superseded by lease {second}")) || r.stderr.contains("revoked"),
        "{}",
        r.stderr
    );
}

/// A portable lease binds where in the workspace its executable is, not only
/// its bytes: the same bytes reached at another workspace path (the
/// `./tool` symlink re-pointed from `bin/real` to an identical `lib/real`)
/// are drift, zero spawn.
#[test]
fn a_portable_lease_refuses_the_same_bytes_at_another_workspace_path() {
    let e = Env::new();
    for d in ["bin", "lib"] {
        std::fs::create_dir(e.ws.join(d)).unwrap();
        e.write_script(&format!("{d}/real"), "#!/bin/sh\necho ran > ran.txt\n");
    }
    let tool = e.ws.join("tool");
    std::os::unix::fs::symlink("bin/real", &tool).unwrap();
    e.approve(&["--portable", "--uses", "2"], &["./tool"]);
    let ws = ["--workspace", e.ws.to_str().unwrap()];
    assert_eq!(e.run(&ws, &["./tool"]).class(), "exited", "as approved");
    std::fs::remove_file(e.ws.join("ran.txt")).unwrap();
    std::fs::remove_file(&tool).unwrap();
    std::os::unix::fs::symlink("lib/real", &tool).unwrap();
    let r = e.run(&ws, &["./tool"]);
    r.assert_refused("executable_drift");
    assert!(r.stderr.contains("path differs"), "{}", r.stderr);
    assert!(!e.ws.join("ran.txt").exists(), "a refused run spawned");
}
