//! Attacks on the identity, binding, lease-matching and ledger promises
//! (contract §2, §4, §6.7), each through the real binary.

use crate::support::*;

/// A ledger-bound lease that a re-approval superseded must not run again
/// from an old copy of the manifest: supersession is a revocation, and the
/// ledger every runner checks has to hold it (§2, §6.7).
#[test]
fn a_superseded_ledger_lease_stays_dead_in_an_old_manifest_copy() {
    let e = Env::new();
    let led = e.path("ledger");
    let led = led.to_str().unwrap();
    let old_id = e.approve(&["--uses", "5", "--ledger", led], &["true"]);
    let old_copy = e.path("old-manifest.json");
    std::fs::copy(&e.manifest, &old_copy).unwrap();
    let new_id = e.approve(&["--uses", "5", "--ledger", led], &["true"]);

    let other_state = e.path("other-state");
    let files = RunFiles {
        manifest: &old_copy,
        state: &other_state,
        ..e.files()
    };
    let r = finish_run(output(run_cmd_with(files, &["--lease", &old_id], &[])));
    r.assert_refused("lease_revoked");

    let r = e.run(&["--lease", &new_id], &[]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
}

/// A ledger directory that is gone (deleted, or an empty mount point where
/// its file system is not mounted) is unreachable: `run` refuses with
/// `ledger_unavailable` and spawns nothing, instead of re-creating an empty
/// ledger and spending an exhausted lease's uses afresh (§6.7).
#[test]
fn a_named_ledger_that_is_gone_is_unavailable_never_recreated_empty() {
    let e = Env::new();
    let led = e.path("ledger");
    e.approve(
        &["--uses", "1", "--ledger", led.to_str().unwrap()],
        &["sh", "-c", "echo ran >> ran.txt"],
    );
    let r = e.run(&[], &["sh", "-c", "echo ran >> ran.txt"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let r = e.run(&[], &["sh", "-c", "echo ran >> ran.txt"]);
    r.assert_refused("lease_exhausted");

    // Deleted: refused, and run does not create it.
    std::fs::remove_dir_all(&led).unwrap();
    let r = e.run(&[], &["sh", "-c", "echo ran >> ran.txt"]);
    r.assert_refused("ledger_unavailable");
    assert!(!led.exists());
    // An empty directory in its place (an unmounted mount point): refused.
    std::fs::create_dir(&led).unwrap();
    let r = e.run(&[], &["sh", "-c", "echo ran >> ran.txt"]);
    r.assert_refused("ledger_unavailable");
    assert!(r.stderr.contains("never re-created by run"), "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(e.ws.join("ran.txt")).unwrap(),
        "ran\n"
    );
}

/// A portable lease drops inode, device and timestamps, not the cwd's place:
/// in a workspace where the approved `sub` is a symlink to another directory
/// of the same workspace, `run` refuses `cwd_drift` instead of running there
/// (§4, portable binding).
#[test]
fn a_portable_cwd_moved_by_an_in_workspace_symlink_is_drift() {
    let e = Env::new();
    std::fs::create_dir(e.ws.join("sub")).unwrap();
    e.approve(
        &["--portable", "--uses", "3", "--cwd", "sub"],
        &["sh", "-c", "pwd"],
    );
    let clone = e.path("clone");
    std::fs::create_dir_all(clone.join("secrets")).unwrap();
    std::os::unix::fs::symlink("secrets", clone.join("sub")).unwrap();
    let clone_s = clone.to_str().unwrap();
    let r = finish_run(output(e.run_cmd(
        &["--workspace", clone_s, "--cwd", "sub"],
        &["sh", "-c", "pwd"],
    )));
    r.assert_refused("cwd_drift");
    assert!(
        r.stderr.contains("the lease approved ./sub"),
        "{}",
        r.stderr
    );

    // The same layout with a real `sub` runs there.
    std::fs::remove_file(clone.join("sub")).unwrap();
    std::fs::create_dir(clone.join("sub")).unwrap();
    let r = finish_run(output(e.run_cmd(
        &["--workspace", clone_s, "--cwd", "sub"],
        &["sh", "-c", "pwd"],
    )));
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    let want = std::fs::canonicalize(clone.join("sub")).unwrap();
    assert_eq!(r.stdout_text(), format!("{}\n", want.display()));
}

/// `run -- CMD` without `--profile` takes the profile of the lease it
/// matches; a revoked lease of another profile approves nothing and must
/// not make the request ambiguous (§2).
#[test]
fn a_revoked_lease_of_another_profile_does_not_block_profile_inference() {
    let e = Env::new();
    let long = e.approve(&["--profile", "long"], &["sh", "-c", "echo p"]);
    let o = output(
        cmd()
            .args(["revoke", "--manifest"])
            .arg(&e.manifest)
            .args(["--lease", &long, "--by", "ops"])
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    e.approve(&["--profile", "short"], &["sh", "-c", "echo p"]);
    let r = e.run(&[], &["sh", "-c", "echo p"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["request"]["profile"], "short");
    // The revoked one stays refused when asked for by its profile.
    let r = e.run(&["--profile", "long"], &["sh", "-c", "echo p"]);
    r.assert_refused("lease_revoked");
}

/// A revoked lease that named another ledger does not make the live
/// lease of the same request ambiguous: the run spends in the live lease's
/// ledger (§2, §6.7).
#[test]
fn a_revoked_lease_of_another_ledger_does_not_make_the_request_ambiguous() {
    let e = Env::new();
    let led = e.path("ledger");
    let old = e.approve(&["--ledger", led.to_str().unwrap()], &["true"]);
    let o = output(
        cmd()
            .args(["revoke", "--manifest"])
            .arg(&e.manifest)
            .args(["--lease", &old, "--by", "ops"])
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let new = e.approve(&[], &["true"]);
    let r = e.run(&[], &["true"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.predicate()["lease"]["id"], new.as_str());
    let r = e.run(&["--lease", &old], &[]);
    r.assert_refused("lease_revoked");
}
