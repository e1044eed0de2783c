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
            .args(["--lease", lease, "--by", "ops"]),
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
fn an_index_edited_to_drop_a_revocation_is_ignored() {
    let e = Env::new();
    let cmd = ["sh", "-c", "echo forged"];
    let id = crowded(&e, 3, &cmd);
    revoke(&e, &id);
    settle();
    e.run(&[], &cmd).assert_refused("lease_revoked");
    let files = index_files(&e);
    assert_eq!(files.len(), 1, "the settled manifest is indexed");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("revocations "))
        .expect("revocations line")
        .to_string();
    assert!(line.contains(&id), "{line}");
    std::fs::write(&files[0], text.replace(&line, "revocations []")).unwrap();
    e.run(&[], &cmd).assert_refused("lease_revoked");
    // And an index that is not one at all (a FIFO, garbage) changes nothing.
    std::fs::write(&files[0], b"garbage").unwrap();
    e.run(&[], &cmd).assert_refused("lease_revoked");
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
