//! The manifest's lease index, kept by `run` in the state dir, so that a
//! run's cost does not grow with the number of leases in its manifest.
//!
//! Why: `run` needs only the leases that answer its request, and the
//! manifest's revocations and supersessions; but a full parse reads every
//! lease into its typed, closed shape (about 12 µs a lease: 12 ms for a
//! manifest of 1000). The index lets a run read and parse only the byte
//! spans of the leases whose request (executable, argv, cwd) or id could
//! match.
//!
//! What it holds, for one manifest path (`STATE/manifest-index/KEY`, a
//! text file): the stat stamp of the manifest it was built from (device,
//! inode, size, mtime, ctime), that manifest's revocations and
//! supersessions, and one line per lease: a short key of its request, a
//! short key of its id, and its byte span. Then an HMAC-SHA256 over all of
//! it, with the state dir's MAC key (the one that authenticates journal
//! checkpoints).
//!
//! Why it cannot widen authority: every lease read through it is parsed in
//! the same closed shape and signature-checked by admission like any other.
//! What an index could do wrong is hide something (a lease, a revocation, a
//! supersession), so it is used only when all of this holds, else the run
//! parses the whole manifest (and rebuilds the index when it may):
//! - its MAC verifies (a forged or torn index is ignored);
//! - the manifest's stamp, taken on the fd the spans are read from, equals
//!   the recorded one both before and after the spans are read (`approve`
//!   and `revoke` replace the file: a new inode; any write in place sets
//!   mtime and ctime);
//! - it was built from a manifest whose ctime was already [`SETTLED`] old,
//!   so that a later write in place cannot keep the same ctime even on a
//!   clock of coarse granularity (git's "racy index" rule);
//! - it was built from a manifest that passed the full parse, with no
//!   lease of a foreign format (those manifests are not indexed);
//! - each span read parses to a lease with the id and request the line
//!   names.

use std::fmt::Write as _;
use std::fs::{File, Metadata};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::admission::Selection;
use crate::journal;
use crate::lease::{self, MAX_MANIFEST_BYTES};
use crate::model::{Lease, Manifest, Request, Revocation, Supersession, MANIFEST_SCHEMA};
use crate::safe_io;

const FORMAT: &str = "governed-exec/manifest-index/v1";

/// How old the manifest's last change must be before an index of it is
/// written.
pub const SETTLED: Duration = Duration::from_secs(2);

/// An index holds a few dozen bytes a lease; anything near this is not one.
const MAX_INDEX_BYTES: u64 = 16 * 1024 * 1024;

/// What `run` needs of the manifest at `path` for `selection`: through the
/// index when it is valid for the manifest as it is now (a manifest holding
/// only the leases that could answer `selection`, and every revocation and
/// supersession), else the whole manifest, parsed and checked in full.
pub fn load_for(path: &Path, state_dir: &Path, selection: &Selection) -> Result<Manifest, String> {
    let failed = |e: std::io::Error| format!("manifest {}: {e}", path.display());
    let mut file = safe_io::open_input(path).map_err(failed)?;
    let before = file.metadata().map_err(failed)?;
    let indexed = before
        .is_file()
        .then(|| {
            Some((
                journal::state_mac_key(state_dir)?,
                index_path(state_dir, path)?,
            ))
        })
        .flatten();
    if let Some((key, at)) = &indexed {
        if let Some(m) = through_index(&file, &before, key, at, selection) {
            return Ok(m);
        }
    }
    let bytes = journal::read_bounded_from(&mut file, MAX_MANIFEST_BYTES).map_err(failed)?;
    let manifest = lease::parse_manifest(path, &bytes)?;
    if let Some((key, at)) = &indexed {
        let unchanged = file.metadata().is_ok_and(|m| stamp(&m) == stamp(&before));
        if unchanged && settled(&before, SystemTime::now()) {
            if let Some(index) = build(&before, &bytes, &manifest, key) {
                // A cache: a run that cannot write it is no worse off.
                let _ = journal::ensure_dir(at.parent().unwrap_or(state_dir))
                    .map_err(|_| ())
                    .and_then(|()| {
                        safe_io::replace_file(at, index.as_bytes(), 0o600).map_err(|_| ())
                    });
            }
        }
    }
    Ok(manifest)
}

/// `STATE/manifest-index/` + a digest of the manifest's canonical path.
fn index_path(state_dir: &Path, manifest: &Path) -> Option<PathBuf> {
    let canonical = std::fs::canonicalize(manifest).ok()?;
    let digest = Sha256::digest(canonical.as_os_str().as_encoded_bytes());
    Some(
        state_dir
            .join("manifest-index")
            .join(hex::encode(&digest[..16])),
    )
}

/// Device, inode, size, mtime and ctime, as one line of text.
fn stamp(m: &Metadata) -> String {
    format!(
        "{} {} {} {}.{:09} {}.{:09}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    )
}

/// Whether the manifest's last change (its ctime) is [`SETTLED`] old.
fn settled(m: &Metadata, now: SystemTime) -> bool {
    let ctime = UNIX_EPOCH + Duration::new(m.ctime().max(0) as u64, m.ctime_nsec() as u32);
    now.duration_since(ctime).is_ok_and(|age| age > SETTLED)
}

/// 16 hex digits of SHA-256 over what a request selects by (its profile
/// aside: `run -- CMD` without `--profile` matches any).
fn request_key(r: &Request) -> String {
    let encoded = serde_json::to_vec(&(&r.executable, &r.argv, &r.cwd)).unwrap_or_default();
    hex::encode(&Sha256::digest(encoded)[..8])
}

fn id_key(lease_id: &str) -> String {
    hex::encode(&Sha256::digest(lease_id.as_bytes())[..8])
}

/// The index text for `manifest`, parsed in full from `bytes`; `None` when
/// it is not to be indexed (a lease of a foreign format, or spans that do
/// not line up with the parsed leases).
fn build(m: &Metadata, bytes: &[u8], manifest: &Manifest, key: &[u8; 32]) -> Option<String> {
    if !manifest.foreign.is_empty() {
        return None;
    }
    #[derive(Deserialize)]
    struct Spans<'a> {
        #[serde(borrow)]
        leases: Vec<&'a serde_json::value::RawValue>,
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let spans: Spans = serde_json::from_str(text).ok()?;
    if spans.leases.len() != manifest.leases.len() {
        return None;
    }
    let mut out = String::new();
    let _ = writeln!(out, "{FORMAT}");
    let _ = writeln!(out, "stamp {}", stamp(m));
    let _ = writeln!(
        out,
        "revocations {}",
        serde_json::to_string(&manifest.revocations).ok()?
    );
    let _ = writeln!(
        out,
        "superseded {}",
        serde_json::to_string(&manifest.superseded).ok()?
    );
    for (lease, raw) in manifest.leases.iter().zip(&spans.leases) {
        let offset = raw.get().as_ptr() as usize - text.as_ptr() as usize;
        let _ = writeln!(
            out,
            "lease {} {} {} {}",
            request_key(&lease.body.request),
            id_key(&lease.body.lease_id),
            offset,
            raw.get().len()
        );
    }
    let mac = journal::hmac_sha256(key, out.as_bytes());
    let _ = writeln!(out, "mac {}", hex::encode(mac));
    Some(out)
}

/// The manifest for `selection` read through the index at `at`, or `None`
/// when the index is missing, forged, stale or does not line up.
fn through_index(
    file: &File,
    before: &Metadata,
    key: &[u8; 32],
    at: &Path,
    selection: &Selection,
) -> Option<Manifest> {
    let bytes = journal::read_bounded(at, MAX_INDEX_BYTES).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let mac_at = text.rfind("mac ")?;
    let (body, mac_line) = text.split_at(mac_at);
    let mac = hex::decode(mac_line.strip_prefix("mac ")?.strip_suffix('\n')?).ok()?;
    if mac != journal::hmac_sha256(key, body.as_bytes()) {
        return None;
    }
    let mut lines = body.lines();
    if lines.next()? != FORMAT || lines.next()?.strip_prefix("stamp ")? != stamp(before) {
        return None;
    }
    let revocations: Vec<Revocation> =
        serde_json::from_str(lines.next()?.strip_prefix("revocations ")?).ok()?;
    let superseded: Vec<Supersession> =
        serde_json::from_str(lines.next()?.strip_prefix("superseded ")?).ok()?;
    let (want_request, want_id) = match selection {
        Selection::Request { request, .. } => (Some(request_key(request)), None),
        Selection::LeaseId(id) => (None, Some(id_key(id))),
    };
    let mut leases = Vec::new();
    for line in lines {
        let mut fields = line.strip_prefix("lease ")?.split(' ');
        let (request, id) = (fields.next()?, fields.next()?);
        if want_request.as_deref() != Some(request) && want_id.as_deref() != Some(id) {
            continue;
        }
        let offset: u64 = fields.next()?.parse().ok()?;
        let len: usize = fields.next()?.parse().ok()?;
        if offset.checked_add(len as u64)? > before.size() {
            return None;
        }
        let mut span = vec![0u8; len];
        file.read_exact_at(&mut span, offset).ok()?;
        let lease: Lease = serde_json::from_slice(&span).ok()?;
        if request_key(&lease.body.request) != request || id_key(&lease.body.lease_id) != id {
            return None;
        }
        leases.push(lease);
    }
    // The spans were read from the manifest the index describes.
    if stamp(&file.metadata().ok()?) != stamp(before) {
        return None;
    }
    Some(Manifest {
        schema: MANIFEST_SCHEMA.to_string(),
        leases,
        revocations,
        superseded,
        foreign: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_changed_within_the_settling_time_is_not_indexed() {
        let f = tempfile::NamedTempFile::new().expect("tmp");
        let m = f.as_file().metadata().expect("stat");
        let changed = UNIX_EPOCH + Duration::new(m.ctime() as u64, m.ctime_nsec() as u32);
        assert!(!settled(&m, changed));
        assert!(!settled(&m, changed + SETTLED));
        assert!(settled(&m, changed + SETTLED + Duration::from_millis(1)));
        // A clock set back before the change: not settled.
        assert!(!settled(&m, changed - Duration::from_secs(60)));
    }

    #[test]
    fn keys_tell_requests_apart_by_executable_argv_and_cwd_only() {
        let r = |e: &str, a: &[&str], c: &str, p| Request {
            executable: e.into(),
            argv: a.iter().map(|s| s.to_string()).collect(),
            cwd: c.into(),
            profile: p,
        };
        use crate::model::Profile;
        let base = request_key(&r("/bin/x", &["x"], ".", Profile::Standard));
        assert_eq!(base, request_key(&r("/bin/x", &["x"], ".", Profile::Long)));
        assert_ne!(
            base,
            request_key(&r("/bin/x", &["x", ""], ".", Profile::Standard))
        );
        assert_ne!(
            base,
            request_key(&r("/bin/x", &["x"], "sub", Profile::Standard))
        );
        assert_ne!(
            base,
            request_key(&r("/bin/y", &["x"], ".", Profile::Standard))
        );
        // No ambiguity from joining: ["a b"] and ["a", "b"] differ.
        assert_ne!(
            request_key(&r("/bin/x", &["a b"], ".", Profile::Standard)),
            request_key(&r("/bin/x", &["a", "b"], ".", Profile::Standard))
        );
    }

    /// A manifest of three leases (ids lease-1..3, argv differing) with
    /// lease-1 revoked, written to a file; its index built as `run` would.
    fn indexed() -> (tempfile::TempDir, PathBuf, Manifest, [u8; 32], PathBuf) {
        let (template, key) = crate::lease::tests::sample();
        let leases: Vec<Lease> = (1..=3)
            .map(|i| {
                let mut body = template.body.clone();
                body.lease_id = format!("lease-{i}");
                body.request.argv = vec!["-c".into(), format!("echo {i}")];
                crate::lease::seal(body, &key)
            })
            .collect();
        let manifest = Manifest {
            schema: MANIFEST_SCHEMA.into(),
            leases,
            revocations: vec![Revocation {
                lease_id: "lease-1".into(),
                by: "ops".into(),
                at: "2026-01-01T00:00:00Z".into(),
            }],
            superseded: vec![],
            foreign: vec![],
        };
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("manifest.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&manifest).expect("json")).expect("w");
        let mac_key = [7u8; 32];
        let at = dir.path().join("index");
        let bytes = std::fs::read(&path).expect("r");
        let parsed = lease::parse_manifest(&path, &bytes).expect("parse");
        let meta = std::fs::metadata(&path).expect("stat");
        let index = build(&meta, &bytes, &parsed, &mac_key).expect("indexable");
        std::fs::write(&at, index).expect("index");
        (dir, path, parsed, mac_key, at)
    }

    fn by_request(m: &Manifest, i: usize) -> Selection {
        Selection::Request {
            request: m.leases[i].body.request.clone(),
            profile_given: false,
        }
    }

    fn read(path: &Path, key: &[u8; 32], at: &Path, s: &Selection) -> Option<Manifest> {
        let f = File::open(path).expect("open");
        let meta = f.metadata().expect("stat");
        through_index(&f, &meta, key, at, s)
    }

    #[test]
    fn the_index_gives_exactly_the_matching_leases_and_every_revocation() {
        let (_d, path, m, key, at) = indexed();
        let got = read(&path, &key, &at, &by_request(&m, 1)).expect("valid index");
        assert_eq!(got.leases, vec![m.leases[1].clone()]);
        assert_eq!(got.revocations, m.revocations);
        let got = read(&path, &key, &at, &Selection::LeaseId("lease-3".into())).expect("valid");
        assert_eq!(got.leases, vec![m.leases[2].clone()]);
        let got = read(&path, &key, &at, &Selection::LeaseId("lease-9".into())).expect("valid");
        assert!(got.leases.is_empty());
    }

    #[test]
    fn an_edited_index_or_another_key_is_ignored() {
        let (_d, path, m, key, at) = indexed();
        let text = std::fs::read_to_string(&at).expect("r");
        // Drop the revocation: the MAC no longer verifies.
        let forged = text.replacen("\"lease-1\"", "\"lease-0\"", 1);
        assert_ne!(forged, text);
        std::fs::write(&at, &forged).expect("w");
        assert!(read(&path, &key, &at, &by_request(&m, 0)).is_none());
        std::fs::write(&at, &text).expect("w");
        assert!(read(&path, &[8u8; 32], &at, &by_request(&m, 0)).is_none());
        assert!(read(&path, &key, &at, &by_request(&m, 0)).is_some());
    }

    #[test]
    fn a_line_pointing_at_another_leases_span_is_refused_even_with_a_valid_mac() {
        // Whoever holds the key could still not make one lease's line
        // serve another lease's bytes.
        let (_d, path, m, key, at) = indexed();
        let text = std::fs::read_to_string(&at).expect("r");
        let body = &text[..text.rfind("mac ").expect("mac")];
        let lines: Vec<&str> = body.lines().collect();
        let span3: Vec<&str> = lines[6].split(' ').skip(3).collect();
        let mut l2: Vec<&str> = lines[5].split(' ').take(3).collect();
        l2.extend(span3);
        let mut forged: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
        forged[5] = l2.join(" ");
        let mut out = forged.join("\n") + "\n";
        let mac = journal::hmac_sha256(&key, out.as_bytes());
        out.push_str(&format!("mac {}\n", hex::encode(mac)));
        std::fs::write(&at, out).expect("w");
        assert!(read(&path, &key, &at, &by_request(&m, 1)).is_none());
    }

    #[test]
    fn a_manifest_rewritten_in_place_no_longer_matches_its_index() {
        let (_d, path, m, key, at) = indexed();
        assert!(read(&path, &key, &at, &by_request(&m, 1)).is_some());
        // Same bytes, same inode, same size: only the times change.
        std::thread::sleep(Duration::from_millis(20));
        let bytes = std::fs::read(&path).expect("r");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
            .expect("rewrite");
        assert!(read(&path, &key, &at, &by_request(&m, 1)).is_none());
    }

    #[test]
    fn a_manifest_with_a_foreign_lease_is_not_indexed() {
        let (_d, path, mut m, key, _at) = indexed();
        m.foreign.push(crate::model::ForeignLease {
            format: 99,
            lease_id: None,
            request: None,
            raw: "{}".into(),
        });
        let bytes = std::fs::read(&path).expect("r");
        let meta = std::fs::metadata(&path).expect("stat");
        assert!(build(&meta, &bytes, &m, &key).is_none());
    }
}
