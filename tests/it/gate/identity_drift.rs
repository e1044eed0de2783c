//! Identity is checked at the point of use: any drift means zero spawn.

use std::os::unix::fs::PermissionsExt;

use crate::support::*;

fn marker_script(e: &Env, name: &str) -> std::path::PathBuf {
    let marker = e.path("ran");
    e.write_script(
        name,
        &format!("#!/bin/sh\necho ran >> {}\n", marker.display()),
    );
    marker
}

#[test]
fn content_changed_after_approval_is_refused() {
    let e = Env::new();
    let marker = marker_script(&e, "tool.sh");
    e.approve(&["--uses", "5"], &["./tool.sh"]);
    let p = e.ws.join("tool.sh");
    let mut body = std::fs::read_to_string(&p).expect("read");
    body.push_str("echo injected\n");
    std::fs::write(&p, body).expect("write");
    let r = e.run(&[], &["./tool.sh"]);
    r.assert_refused("executable_drift");
    assert_eq!(r.outcome()["needs_human"], true);
    assert!(!marker.exists(), "the drifted executable ran");
    assert_eq!(e.journal_executing_count(), 0, "a refusal spent a use");
}

#[test]
fn identical_copy_with_a_new_inode_is_refused() {
    let e = Env::new();
    let marker = marker_script(&e, "tool.sh");
    e.approve(&[], &["./tool.sh"]);
    let p = e.ws.join("tool.sh");
    let body = std::fs::read(&p).expect("read");
    let tmp = e.ws.join("tool.sh.new");
    std::fs::write(&tmp, &body).expect("write");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&tmp, &p).expect("rename");
    let r = e.run(&[], &["./tool.sh"]);
    r.assert_refused("executable_drift");
    assert!(!marker.exists());
}

#[test]
fn retargeted_symlink_is_refused() {
    let e = Env::new();
    let marker = marker_script(&e, "a.sh");
    e.write_script("b.sh", "#!/bin/sh\necho b\n");
    std::os::unix::fs::symlink("a.sh", e.ws.join("tool")).expect("symlink");
    e.approve(&[], &["./tool"]);
    std::fs::remove_file(e.ws.join("tool")).expect("rm");
    std::os::unix::fs::symlink("b.sh", e.ws.join("tool")).expect("symlink");
    let r = e.run(&[], &["./tool"]);
    r.assert_refused("executable_drift");
    assert!(!marker.exists());
}

#[test]
fn cwd_removed_and_recreated_is_refused() {
    let e = Env::new();
    let sub = e.ws.join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    let marker = e.path("ran");
    let probe = ["sh", "-c", &format!("touch {}", marker.display())];
    e.approve(&["--cwd", "sub"], &probe);
    std::fs::remove_dir(&sub).expect("rmdir");
    std::fs::create_dir(&sub).expect("mkdir");
    let r = e.run(&["--cwd", "sub"], &probe);
    r.assert_refused("cwd_drift");
    assert!(!marker.exists());
}

#[test]
fn cwd_outside_the_workspace_is_refused_at_approve() {
    let e = Env::new();
    let o = output(&mut e.approve_cmd(&["--cwd", ".."], &["true"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cwd"));
    std::os::unix::fs::symlink("/tmp", e.ws.join("out")).expect("symlink");
    let o = output(&mut e.approve_cmd(&["--cwd", "out"], &["true"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("outside the workspace"));
    assert!(!e.manifest.exists(), "a refused approval wrote a manifest");
}

#[test]
fn missing_executable_is_refused_at_approve() {
    let e = Env::new();
    let o = output(&mut e.approve_cmd(&[], &["no-such-tool-xyz"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-tool-xyz"));
}

/// A machine that cannot make the sealed copy to execute (here, as under
/// `vm.memfd_noexec = 2`) refuses `exec_failed`: the executable did not
/// drift, and the lease keeps its use.
#[cfg(feature = "fault-injection")]
#[test]
fn a_snapshot_this_machine_cannot_make_is_exec_failed_not_drift() {
    let e = Env::new();
    e.approve(&["--uses", "1"], &["true"]);
    let r = finish_run(output(
        e.run_cmd(&[], &["true"])
            .env("GOVERNED_EXEC_FAULT", "snapshot_refused"),
    ));
    r.assert_refused("exec_failed");
    assert!(r.stderr.contains("os error 13"), "{}", r.stderr);
    let r = e.run(&[], &["true"]);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
}

/// A hard link bumps only the executable's ctime: the refusal shows the
/// times as dates, says the content hash is the approved one (so a
/// re-approve is safe) and points at `--portable` for toolchains.
#[test]
fn a_metadata_only_change_says_the_content_is_unchanged_with_dates() {
    let e = Env::new();
    let marker = marker_script(&e, "tool.sh");
    e.approve(&[], &["./tool.sh"]);
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            std::fs::read(e.ws.join("tool.sh")).unwrap(),
        ))
    };
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::hard_link(e.ws.join("tool.sh"), e.path("tool-link")).expect("link");
    let r = e.run(&[], &["./tool.sh"]);
    r.assert_refused("executable_drift");
    assert!(!marker.exists());
    let msg = r.outcome()["message"].as_str().unwrap_or("").to_string();
    assert!(msg.contains("ctime approved 20"), "no date: {msg}");
    // RFC 3339, never raw nanoseconds since the epoch.
    assert!(
        !msg.split(|c: char| !c.is_ascii_digit())
            .any(|d| d.len() >= 15),
        "raw nanoseconds: {msg}"
    );
    assert!(msg.contains("content is unchanged"), "{msg}");
    assert!(msg.contains(&sha[..12]), "{msg}");
    assert!(msg.contains("re-approving is safe"), "{msg}");
    assert!(msg.contains("--portable"), "{msg}");
}
