//! The manifest index (`STATE/manifest-index/`): `run` reads only the
//! leases that could answer it once the manifest has settled, and never
//! misses what the manifest says now: a revocation made a moment ago, a
//! manifest edited in place, or an index edited by someone else.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;

/// Longer than the index's settling time (2 s): a manifest this old may be
/// indexed by the next run.
fn settle() {
    std::thread::sleep(Duration::from_millis(2300));
}

fn index_files(e: &Env) -> Vec<PathBuf> {
    std::fs::read_dir(e.state.join("manifest-index"))
        .map(|d| d.filter_map(|x| x.ok().map(|x| x.path())).collect())
        .unwrap_or_default()
}

fn revoke(e: &Env, lease: &str) {
    let o = output(
        cmd()
            .args(["revoke", "--manifest"])
            .arg(&e.manifest)
            .args(["--lease", lease, "--by", "ops"])
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A manifest of `others` leases plus the one under test (uses 10).
fn crowded(e: &Env, others: usize, cmd: &[&str]) -> String {
    for i in 0..others {
        e.approve(&[], &["true", &format!("other-{i}")]);
    }
    e.approve(&["--uses", "10"], cmd)
}

#[test]
fn a_fresh_manifest_is_not_indexed_a_settled_one_is_and_a_revoke_counts_at_once() {
    let e = Env::new();
    let cmd = ["sh", "-c", "echo indexed"];
    let id = crowded(&e, 5, &cmd);
    let r = e.run(&[], &cmd);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert!(
        index_files(&e).is_empty(),
        "a manifest changed a moment ago must not be indexed"
    );
    settle();
    let r = e.run(&[], &cmd);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(index_files(&e).len(), 1, "the settled manifest is indexed");
    // Through the index, by request and by id.
    let r = e.run(&[], &cmd);
    assert_eq!(r.predicate()["lease"]["id"], id.as_str(), "{}", r.stderr);
    let r = e.run(&["--lease", &id], &[]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    // Revoked a moment ago: the next run sees it, index or not.
    revoke(&e, &id);
    e.run(&[], &cmd).assert_refused("lease_revoked");
    e.run(&["--lease", &id], &[])
        .assert_refused("lease_revoked");
}

#[test]
fn a_revocation_written_into_the_manifest_in_place_is_seen_by_the_next_run() {
    // Same inode, no `revoke` command: an editor that writes in place.
    let e = Env::new();
    let cmd = ["sh", "-c", "echo in-place"];
    let id = crowded(&e, 3, &cmd);
    settle();
    assert_eq!(e.run(&[], &cmd).class(), "exited");
    assert_eq!(index_files(&e).len(), 1);
    // A textual edit: re-encoding the JSON would change the signed bodies.
    let text = std::fs::read_to_string(&e.manifest).unwrap();
    let revocation = format!(
        r#""revocations": [{{"lease_id": "{id}", "by": "ops", "at": "2026-01-01T00:00:00Z"}}]"#
    );
    let bytes = text.replacen(r#""revocations": []"#, &revocation, 1);
    assert_ne!(bytes, text, "no empty revocations list to edit: {text}");
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&e.manifest).unwrap());
    std::fs::write(&e.manifest, bytes).unwrap();
    assert_eq!(
        ino,
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&e.manifest).unwrap()),
        "the edit must keep the inode for this test to mean anything"
    );
    e.run(&[], &cmd).assert_refused("lease_revoked");
}

#[test]
fn an_edited_or_garbage_index_changes_nothing() {
    let e = Env::new();
    let cmd = ["sh", "-c", "echo forged"];
    let id = crowded(&e, 3, &cmd);
    revoke(&e, &id);
    let live = e.approve(&["--uses", "10"], &["sh", "-c", "echo live"]);
    settle();
    e.run(&[], &cmd).assert_refused("lease_revoked");
    assert!(index_files(&e).is_empty(), "a refused run writes no index");
    assert_eq!(e.run(&[], &["sh", "-c", "echo live"]).class(), "exited");
    let files = index_files(&e);
    assert_eq!(
        files.len(),
        1,
        "an admitted run indexes the settled manifest"
    );
    let text = std::fs::read_to_string(&files[0]).unwrap();
    // Without the key: drop a line, the MAC fails, the manifest is parsed.
    let first_lease = text.lines().find(|l| l.starts_with("lease ")).unwrap();
    std::fs::write(&files[0], text.replacen(&format!("{first_lease}\n"), "", 1)).unwrap();
    e.run(&[], &cmd).assert_refused("lease_revoked");
    std::fs::write(&files[0], b"garbage").unwrap();
    e.run(&[], &cmd).assert_refused("lease_revoked");
    let r = e.run(&["--lease", &live], &[]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
}

fn mac_key(e: &Env) -> [u8; 32] {
    std::fs::read(e.state.join("checkpoints/mac.key"))
        .unwrap()
        .try_into()
        .unwrap()
}

/// Rewrite an index's lines with `f`, MAC'd with the state dir's key: what
/// a same-uid child of a default-mode run could do.
fn forge_index(e: &Env, f: impl Fn(Vec<String>) -> Vec<String>) {
    let files = index_files(e);
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let lines: Vec<String> = text[..text.rfind("mac ").unwrap()]
        .lines()
        .map(str::to_string)
        .collect();
    let body = f(lines).join("\n") + "\n";
    let mac = governed_ledger::journal::hmac_sha256(&mac_key(e), body.as_bytes());
    std::fs::write(&files[0], format!("{body}mac {}\n", hex::encode(mac))).unwrap();
}

#[test]
fn a_key_holder_forging_the_index_cannot_revive_a_superseded_lease() {
    // The index holds no revocations or supersessions: a run reads them
    // from the manifest itself. A forged index can only hide leases.
    let e = Env::new();
    let cmd = ["sh", "-c", "echo revived"];
    let old = e.approve(&["--uses", "10"], &cmd);
    let new = e.approve(&["--uses", "10"], &cmd);
    settle();
    let r = e.run(&[], &cmd);
    assert_eq!(r.predicate()["lease"]["id"], new.as_str(), "{}", r.stderr);
    // Keep only the old lease's line (the first) and the last one.
    forge_index(&e, |l| {
        let mut kept = l[..3].to_vec();
        kept.push(l.last().unwrap().clone());
        kept
    });
    e.run(&["--lease", &old], &[])
        .assert_refused("lease_revoked");
    let r = e.run(&[], &cmd);
    assert_ne!(
        r.predicate()["lease"]["id"],
        old.as_str(),
        "the superseded lease ran: {}",
        r.stderr
    );
    // The index hid nothing here (the new lease is the last line): it runs.
    assert_eq!(r.class(), "exited", "{}", r.stderr);
}

#[test]
fn a_revocation_written_through_a_shared_mapping_is_seen_though_the_stamp_is_unchanged() {
    if std::env::var_os("GOVERNED_EXEC_PYTHON").is_none() {
        require_tool!(
            "a_revocation_written_through_a_shared_mapping_is_seen_though_the_stamp_is_unchanged",
            "python3"
        );
    }
    // A write to an already dirty page of a shared mapping updates neither
    // mtime nor ctime: the stamp stays, the index stays valid, and the run
    // must still read the manifest's current revocations.
    let e = Env::new();
    let cmd = ["sh", "-c", "echo mmap"];
    let decoy = e.approve(&[], &["true", "decoy"]);
    let victim = e.approve(&["--uses", "10"], &cmd);
    assert_eq!(decoy.len(), victim.len());
    let text = std::fs::read_to_string(&e.manifest).unwrap();
    let text = text.replacen(
        r#""revocations": []"#,
        &format!(r#""revocations": [{{"lease_id": "{decoy}", "by": "ops", "at": "2026-01-01T00:00:00Z"}}]"#),
        1,
    );
    std::fs::write(&e.manifest, &text).unwrap();
    let at = text.rfind(&decoy).unwrap();
    // One python process holds the mapping: it dirties the page, waits, then
    // writes the victim's id over the decoy's in that same page.
    let script = format!(
        "import mmap,sys\nf=open(sys.argv[1],'r+b')\nm=mmap.mmap(f.fileno(),0)\nm[{at}]=m[{at}]\nprint('dirty',flush=True)\nsys.stdin.readline()\nm[{at}:{end}]=sys.argv[2].encode()\nprint('done',flush=True)\nsys.stdin.readline()\n",
        end = at + victim.len()
    );
    let python = std::env::var("GOVERNED_EXEC_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut py = std::process::Command::new(python)
        .args(["-c", &script])
        .arg(&e.manifest)
        .arg(&victim)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::{BufRead, Write};
    let mut out = std::io::BufReader::new(py.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "dirty");
    settle();
    assert_eq!(e.run(&[], &cmd).class(), "exited");
    assert_eq!(index_files(&e).len(), 1, "indexed");
    let stamp = |p: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(p).unwrap();
        (m.ino(), m.size(), m.mtime_nsec(), m.ctime_nsec())
    };
    let before = stamp(&e.manifest);
    let mut stdin = py.stdin.take().unwrap();
    writeln!(stdin).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done");
    let edited = std::fs::read_to_string(&e.manifest).unwrap();
    assert!(edited.contains(&format!(r#""lease_id": "{victim}", "by""#)));
    if stamp(&e.manifest) != before {
        eprintln!("note: this kernel updated the stamp on the second write; the test still checks the outcome");
    }
    e.run(&[], &cmd).assert_refused("lease_revoked");
    writeln!(stdin).unwrap();
    let _ = py.wait();
}

#[test]
fn a_run_refused_for_bad_input_writes_no_index() {
    let e = Env::new();
    let cmd = ["sh", "-c", "echo x"];
    e.approve(&[], &cmd);
    settle();
    let r = finish_run(output(e.run_cmd_trusting(
        &e.path("missing.pub"),
        &[],
        &cmd,
    )));
    r.assert_refused("invalid_input");
    assert!(index_files(&e).is_empty(), "a refused run wrote an index");
    assert!(
        !e.state.join("checkpoints/mac.key").exists(),
        "a refused run created the MAC key"
    );
}

#[test]
fn a_lease_with_an_unknown_field_still_fails_the_whole_manifest_after_an_edit() {
    // The index skips parsing leases a run does not use only for a
    // manifest that passed the full parse; any edit brings the full parse
    // (closed shapes) back.
    let e = Env::new();
    let cmd = ["sh", "-c", "echo closed"];
    crowded(&e, 2, &cmd);
    settle();
    assert_eq!(e.run(&[], &cmd).class(), "exited");
    assert_eq!(index_files(&e).len(), 1);
    let text = std::fs::read_to_string(&e.manifest).unwrap();
    let edited = text.replacen(r#""fingerprint""#, r#""surprise": 1, "fingerprint""#, 1);
    assert_ne!(edited, text);
    std::fs::write(&e.manifest, edited).unwrap();
    let r = e.run(&[], &cmd);
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert!(r.stderr.contains("surprise"), "{}", r.stderr);
}

#[test]
fn a_symlink_planted_at_the_index_directory_is_not_written_through() {
    let e = Env::new();
    let cmd = ["sh", "-c", "echo planted"];
    crowded(&e, 1, &cmd);
    let elsewhere = e.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::create_dir_all(&e.state).unwrap();
    std::os::unix::fs::symlink(&elsewhere, e.state.join("manifest-index")).unwrap();
    settle();
    assert_eq!(e.run(&[], &cmd).class(), "exited");
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "the index was written through the planted symlink"
    );
    // Runs keep working (through the full parse).
    assert_eq!(e.run(&[], &cmd).class(), "exited");
}
