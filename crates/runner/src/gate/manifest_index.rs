//! The manifest's lease index, kept by `run` in the state dir, so that a
//! run's cost does not grow with the number of leases in its manifest.
//!
//! Why: `run` needs only the leases that answer its request, and the
//! manifest's revocations and supersessions; but a full parse reads every
//! lease into its typed, closed shape (about 12 µs a lease: 12 ms for a
//! manifest of 1000). The index lets a run read and parse only the byte
//! spans of the leases whose request (executable, argv, cwd) or id could
//! match, plus the manifest's head and its tail.
//!
//! What it holds, for one manifest path (`STATE/manifest-index/KEY`, a
//! text file): the stat stamp of the manifest it was built from (device,
//! inode, size, mtime, ctime) and one line per lease: a short key of its
//! request, a short key of its id, and its byte span. Then an HMAC-SHA256
//! over all of it, with the state dir's MAC key (the one that
//! authenticates journal checkpoints).
//!
//! Revocations and supersessions are never taken from the index: every
//! run reads them from the manifest's own bytes, the tail after the last
//! lease. That tail is found without trusting the index: the bytes before
//! the first lease must be exactly `{"schema": "…", "leases": [` (JSON
//! whitespace aside), the last lease's span must parse to a lease followed
//! by the `]` that closes the array, and the rest must parse, in a closed
//! shape, as the object's remaining members. So an index, even one forged
//! by whoever holds the key, can at most leave out leases (a refusal),
//! never a revocation or a supersession, and a manifest changed in a way
//! its stat stamp does not show (a write through a shared mapping to an
//! already dirty page leaves mtime and ctime alone) still gives the run
//! its current revocations and supersessions.
//!
//! Every lease read through the index is parsed in the same closed shape
//! and signature-checked by admission like any other, and must be the
//! lease its line names (same id, same request key). The index is used
//! only when all of this holds, else the run parses the whole manifest:
//! - its MAC verifies (a forged or torn index is ignored);
//! - the manifest's stamp, taken on the fd the spans are read from, equals
//!   the recorded one both before and after the reads (`approve` and
//!   `revoke` replace the file: a new inode; a `write` in place sets mtime
//!   and ctime);
//! - it was built from a manifest whose ctime was already [`SETTLED`] old,
//!   so that a later write in place cannot keep the same ctime even on a
//!   clock of coarse granularity (git's "racy index" rule);
//! - it was built from a manifest that passed the full parse, in the
//!   layout above, with no lease of a foreign format (other manifests are
//!   not indexed: a run parses them whole).
//!
//! It is written only by a run that was admitted (a refused run changes
//! nothing but its refusal record), after admission.

use std::fmt::Write as _;
use std::fs::{File, Metadata};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::gate::admission::Selection;
use crate::gate::lease::{self, MAX_MANIFEST_BYTES};
use governed_ledger::journal;
use governed_model::{Lease, Manifest, Request, Revocation, Supersession, MANIFEST_SCHEMA};
use governed_sys::safe_io;

const FORMAT: &str = "governed-exec/manifest-index/v2";

/// How old the manifest's last change must be before an index of it is
/// written.
pub(crate) const SETTLED: Duration = Duration::from_secs(2);

/// An index holds a few dozen bytes a lease; anything near this is not one.
const MAX_INDEX_BYTES: u64 = 16 * 1024 * 1024;

/// The manifest's tail (revocations, supersessions) is read on every run
/// through the index; a tail larger than this means a full parse instead.
const MAX_TAIL_BYTES: u64 = 4 * 1024 * 1024;

/// What `run` read of the manifest, and the index to write once the run is
/// admitted (when the manifest was parsed in full and may be indexed).
pub struct Loaded {
    pub manifest: Manifest,
    pub index: Option<PendingIndex>,
}

/// An index built from a fully parsed manifest, not yet written.
pub struct PendingIndex {
    state_dir: PathBuf,
    at: PathBuf,
    body: String,
}

impl PendingIndex {
    /// MAC and write the index (creating the state dir's MAC key if need
    /// be). A cache: a run that cannot write it is no worse off.
    pub fn write(self) {
        let Some(key) = journal::state_mac_key(&self.state_dir) else {
            return;
        };
        let mut text = self.body;
        let mac = journal::hmac_sha256(&key, text.as_bytes());
        let _ = writeln!(text, "mac {}", hex::encode(mac));
        if let Some(dir) = self.at.parent() {
            // Only into a real directory of the state dir: one replaced by a
            // symlink would carry the write elsewhere.
            let real_dir = journal::ensure_dir(dir).is_ok()
                && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
            if real_dir {
                let _ = safe_io::replace_file(&self.at, text.as_bytes(), 0o600);
            }
        }
    }
}

/// What `run` needs of the manifest at `path` for `selection`: through the
/// index when it is valid for the manifest as it is now (a manifest holding
/// only the leases that could answer `selection`, and every revocation and
/// supersession), else the whole manifest, parsed and checked in full.
pub fn load_for(
    path: &Path,
    state_dir: &Path,
    selection: &Selection,
) -> Result<Loaded, lease::ManifestError> {
    let failed = |e: std::io::Error| lease::ManifestError::read(path, e);
    // A manifest no one has approved into yet approves nothing: the run is
    // refused `no_matching_lease` (and its request queued for a person),
    // as with a manifest that holds no lease.
    let mut file = match safe_io::open_input(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Loaded {
                manifest: Manifest::empty(),
                index: None,
            })
        }
        opened => opened.map_err(failed)?,
    };
    let before = file.metadata().map_err(failed)?;
    let at = before
        .is_file()
        .then(|| index_path(state_dir, path))
        .flatten();
    if let (Some(at), Some(key)) = (&at, journal::existing_state_mac_key(state_dir)) {
        if let Some(manifest) = through_index(&file, &before, &key, at, selection) {
            return Ok(Loaded {
                manifest,
                index: None,
            });
        }
    }
    let bytes =
        governed_sys::safe_io::read_bounded_from(&mut file, MAX_MANIFEST_BYTES).map_err(failed)?;
    let manifest = lease::parse_manifest(path, &bytes)?;
    let index = at.and_then(|at| {
        let unchanged = file.metadata().is_ok_and(|m| stamp(&m) == stamp(&before));
        (unchanged && settled(&before, SystemTime::now()))
            .then(|| build(&before, &bytes, &manifest))
            .flatten()
            .map(|body| PendingIndex {
                state_dir: state_dir.to_path_buf(),
                at,
                body,
            })
    });
    Ok(Loaded { manifest, index })
}

/// `STATE/manifest-index/` + a digest of the manifest's canonical path.
pub fn index_path(state_dir: &Path, manifest: &Path) -> Option<PathBuf> {
    let canonical = std::fs::canonicalize(manifest).ok()?;
    let digest = Sha256::digest(canonical.as_os_str().as_encoded_bytes());
    Some(
        state_dir
            .join("manifest-index")
            .join(hex::encode(&digest[..16])),
    )
}

/// Device, inode, size, mtime and ctime, as one line of text.
pub fn stamp(m: &Metadata) -> String {
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

/// JSON's insignificant whitespace.
fn skip_ws(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .count();
    &b[n..]
}

/// Whether `head` (the bytes before the first lease) is exactly
/// `{"schema": SCHEMA, "leases": [`, whitespace between tokens aside.
fn head_is_canonical(head: &[u8]) -> bool {
    let schema = serde_json::to_string(MANIFEST_SCHEMA).unwrap_or_default();
    let tokens: [&[u8]; 8] = [
        b"{",
        b"\"schema\"",
        b":",
        schema.as_bytes(),
        b",",
        b"\"leases\"",
        b":",
        b"[",
    ];
    let mut rest = head;
    for t in tokens {
        match skip_ws(rest).strip_prefix(t) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    skip_ws(rest).is_empty()
}

/// The manifest's members after its leases array.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Tail {
    #[serde(default)]
    revocations: Vec<Revocation>,
    #[serde(default)]
    superseded: Vec<Supersession>,
}

/// Parse what follows the last lease: the `]` closing the array, then the
/// object's remaining members (only revocations and supersessions) and its
/// closing `}`, then nothing but whitespace.
fn parse_tail(tail: &[u8]) -> Option<Tail> {
    let rest = skip_ws(skip_ws(tail).strip_prefix(b"]")?);
    if let Some(after) = rest.strip_prefix(b"}") {
        return skip_ws(after).is_empty().then(|| Tail {
            revocations: vec![],
            superseded: vec![],
        });
    }
    let members = rest.strip_prefix(b",")?;
    if skip_ws(members).starts_with(b"}") {
        return None;
    }
    let mut object = Vec::with_capacity(members.len() + 1);
    object.push(b'{');
    object.extend_from_slice(members);
    serde_json::from_slice(&object).ok()
}

/// The index text (without its MAC) for `manifest`, parsed in full from
/// `bytes`; `None` when it is not to be indexed (no lease, a lease of a
/// foreign format, another layout, or spans that do not line up).
fn build(m: &Metadata, bytes: &[u8], manifest: &Manifest) -> Option<String> {
    if !manifest.foreign.is_empty() || manifest.leases.is_empty() {
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
    let span_of = |raw: &serde_json::value::RawValue| {
        let offset = raw.get().as_ptr() as usize - text.as_ptr() as usize;
        (offset, raw.get().len())
    };
    // The layout every run will check: what it finds must be what the full
    // parse found.
    let (first, _) = span_of(spans.leases.first()?);
    let (last, last_len) = span_of(spans.leases.last()?);
    let tail = parse_tail(&bytes[last + last_len..])?;
    if !head_is_canonical(&bytes[..first])
        || tail.revocations != manifest.revocations
        || tail.superseded != manifest.superseded
    {
        return None;
    }
    let mut out = String::new();
    let _ = writeln!(out, "{FORMAT}");
    let _ = writeln!(out, "stamp {}", stamp(m));
    for (lease, raw) in manifest.leases.iter().zip(&spans.leases) {
        let (offset, len) = span_of(raw);
        let _ = writeln!(
            out,
            "lease {} {} {} {}",
            request_key(&lease.body.request),
            id_key(&lease.body.lease_id),
            offset,
            len
        );
    }
    Some(out)
}

/// One lease line of an index.
struct Line<'a> {
    request: &'a str,
    id: &'a str,
    offset: u64,
    len: u64,
}

fn parse_line(line: &str) -> Option<Line<'_>> {
    let mut f = line.strip_prefix("lease ")?.split(' ');
    Some(Line {
        request: f.next()?,
        id: f.next()?,
        offset: f.next()?.parse().ok()?,
        len: f.next()?.parse().ok()?,
    })
}

/// `len` bytes of the manifest at `offset`, within the size it had.
fn region(file: &File, size: u64, offset: u64, len: u64) -> Option<Vec<u8>> {
    if offset.checked_add(len)? > size {
        return None;
    }
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    file.read_exact_at(&mut buf, offset).ok()?;
    Some(buf)
}

/// The lease at a line's span, when it is the lease the line names.
fn lease_at(file: &File, size: u64, line: &Line<'_>) -> Option<Lease> {
    let span = region(file, size, line.offset, line.len)?;
    let lease: Lease = serde_json::from_slice(&span).ok()?;
    (request_key(&lease.body.request) == line.request && id_key(&lease.body.lease_id) == line.id)
        .then_some(lease)
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
    let bytes = governed_sys::safe_io::read_bounded(at, MAX_INDEX_BYTES).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let mac_at = text.rfind("mac ")?;
    let (body, mac_line) = text.split_at(mac_at);
    let mac = mac_line.strip_prefix("mac ")?.strip_suffix('\n')?;
    if !journal::hmac_matches(key, body.as_bytes(), mac) {
        return None;
    }
    let mut lines = body.lines();
    if lines.next()? != FORMAT || lines.next()?.strip_prefix("stamp ")? != stamp(before) {
        return None;
    }
    let lines: Vec<Line<'_>> = lines.map(parse_line).collect::<Option<_>>()?;
    let size = before.size();
    // The head, the last lease and the tail: the manifest's own revocations
    // and supersessions, whatever the index says.
    let (first, last) = (lines.first()?, lines.last()?);
    if !head_is_canonical(&region(file, size, 0, first.offset)?) {
        return None;
    }
    let last_lease = lease_at(file, size, last)?;
    let tail_at = last.offset + last.len;
    let tail_len = size.checked_sub(tail_at)?;
    if tail_len > MAX_TAIL_BYTES {
        return None;
    }
    let tail = parse_tail(&region(file, size, tail_at, tail_len)?)?;
    let (want_request, want_id) = match selection {
        Selection::Request { request, .. } => (Some(request_key(request)), None),
        Selection::LeaseId(id) => (None, Some(id_key(id))),
    };
    let wanted = |l: &Line<'_>| {
        want_request.as_deref() == Some(l.request) || want_id.as_deref() == Some(l.id)
    };
    let mut leases = Vec::new();
    for line in &lines[..lines.len() - 1] {
        if wanted(line) {
            leases.push(lease_at(file, size, line)?);
        }
    }
    // The last lease was read and parsed above already.
    if wanted(last) {
        leases.push(last_lease);
    }
    // Everything was read from the manifest the index describes.
    if stamp(&file.metadata().ok()?) != stamp(before) {
        return None;
    }
    Some(Manifest {
        schema: MANIFEST_SCHEMA.to_string(),
        leases,
        revocations: tail.revocations,
        superseded: tail.superseded,
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
        use governed_model::Profile;
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
        let (template, key) = crate::gate::lease::tests::sample();
        let leases: Vec<Lease> = (1..=3)
            .map(|i| {
                let mut body = template.body.clone();
                body.lease_id = format!("lease-{i}");
                body.request.argv = vec!["-c".into(), format!("echo {i}")];
                crate::gate::lease::seal(body, &key)
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
        index(&path, &mac_key, &at);
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
        // Drop the line of lease-2: the MAC no longer verifies.
        let line2 = text.lines().nth(3).expect("line of lease-2").to_string();
        let forged = text.replacen(&format!("{line2}\n"), "", 1);
        assert_ne!(forged, text);
        std::fs::write(&at, &forged).expect("w");
        assert!(read(&path, &key, &at, &by_request(&m, 1)).is_none());
        std::fs::write(&at, &text).expect("w");
        assert!(read(&path, &[8u8; 32], &at, &by_request(&m, 1)).is_none());
        assert!(read(&path, &key, &at, &by_request(&m, 1)).is_some());
    }

    /// Rewrite the index's lease lines with `f` and MAC it with the key, as
    /// whoever holds the key could.
    fn forge(at: &Path, key: &[u8; 32], f: impl Fn(Vec<String>) -> Vec<String>) {
        let text = std::fs::read_to_string(at).expect("r");
        let body = &text[..text.rfind("mac ").expect("mac")];
        let lines: Vec<String> = body.lines().map(str::to_string).collect();
        write_with_mac(at, key, f(lines).join("\n") + "\n");
    }

    /// `body` and its MAC line, as `PendingIndex::write` writes them.
    fn write_with_mac(at: &Path, key: &[u8; 32], mut body: String) {
        let mac = journal::hmac_sha256(key, body.as_bytes());
        body.push_str(&format!("mac {}\n", hex::encode(mac)));
        std::fs::write(at, body).expect("index");
    }

    #[test]
    fn revocations_come_from_the_manifest_whatever_a_key_holder_writes_in_the_index() {
        let (_d, path, m, key, at) = indexed();
        // lease-2's line dropped: lease-1 (revoked) is still found with its
        // revocation, read from the manifest's tail; lease-2 is not found
        // at all (a refusal, never a lease without its revocations).
        forge(&at, &key, |l| {
            vec![l[0].clone(), l[1].clone(), l[2].clone(), l[4].clone()]
        });
        let got = read(&path, &key, &at, &by_request(&m, 0)).expect("a valid index");
        assert_eq!(got.leases, vec![m.leases[0].clone()]);
        assert_eq!(got.revocations, m.revocations);
        let got = read(&path, &key, &at, &by_request(&m, 1)).expect("a valid index");
        assert!(got.leases.is_empty());
        // The "last" line pointing at a lease that is not the last: what
        // follows it is not the end of the array, so no tail, no index.
        let (_d, path, m, key, at) = indexed();
        forge(&at, &key, |l| l[..4].to_vec());
        assert!(read(&path, &key, &at, &by_request(&m, 1)).is_none());
    }

    #[test]
    fn a_line_pointing_at_another_leases_span_is_refused_even_with_a_valid_mac() {
        // Whoever holds the key could still not make one lease's line
        // serve another lease's bytes.
        let (_d, path, m, key, at) = indexed();
        forge(&at, &key, |mut l| {
            let span3: Vec<String> = l[4].split(' ').skip(3).map(str::to_string).collect();
            let mut l2: Vec<String> = l[3].split(' ').take(3).map(str::to_string).collect();
            l2.extend(span3);
            l[3] = l2.join(" ");
            l
        });
        assert!(read(&path, &key, &at, &by_request(&m, 1)).is_none());
    }

    #[test]
    fn the_tail_parses_only_as_the_objects_remaining_members() {
        assert!(parse_tail(b"\n  ]\n}\n").is_some_and(|t| t.revocations.is_empty()));
        let t = parse_tail(
            br#"], "revocations": [{"lease_id": "a", "by": "o", "at": "t"}], "superseded": []}"#,
        )
        .expect("tail");
        assert_eq!(t.revocations.len(), 1);
        for bad in [
            &br#"}, {"format": 2}], "revocations": []}"#[..],
            br#"], "revocations": [], "leases": []}"#,
            br#"], "revocations": []} trailing"#,
            br#"],}"#,
            br#"] } "revocations": []"#,
            br#", "revocations": []}"#,
        ] {
            assert!(
                parse_tail(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(head_is_canonical(
            br#"{ "schema": "governed-exec/manifest/v1", "leases": [ "#
        ));
        assert!(!head_is_canonical(br#"{"leases": ["#));
        assert!(!head_is_canonical(
            br#"{"schema": "x", "revocations": [], "leases": ["#
        ));
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
        m.foreign.push(governed_model::ForeignLease {
            format: 99,
            lease_id: None,
            request: None,
            raw: "{}".into(),
        });
        let bytes = std::fs::read(&path).expect("r");
        let meta = std::fs::metadata(&path).expect("stat");
        let _ = key;
        assert!(build(&meta, &bytes, &m).is_none());
    }

    /// Index `path` as `run` would, MAC'd with `key`, at `at`.
    fn index(path: &Path, key: &[u8; 32], at: &Path) {
        let bytes = std::fs::read(path).expect("r");
        let parsed = lease::parse_manifest(path, &bytes).expect("parse");
        let meta = std::fs::metadata(path).expect("stat");
        write_with_mac(at, key, build(&meta, &bytes, &parsed).expect("indexable"));
    }

    #[test]
    fn only_a_manifest_whose_layout_a_run_will_find_again_is_indexed() {
        let (_d, path, m, _key, _at) = indexed();
        let bytes = std::fs::read(&path).expect("r");
        let meta = std::fs::metadata(&path).expect("stat");
        assert!(build(&meta, &bytes, &m).is_some());
        // What the full parse found must be what the tail gives.
        let mut no_revocations = m.clone();
        no_revocations.revocations.clear();
        assert!(build(&meta, &bytes, &no_revocations).is_none());
        let mut superseded = m.clone();
        superseded.superseded.push(Supersession {
            lease_id: "lease-2".into(),
            by_lease: "lease-3".into(),
            at: "2026-01-01T00:00:00Z".into(),
        });
        assert!(build(&meta, &bytes, &superseded).is_none());
        let mut empty = m.clone();
        empty.leases.clear();
        assert!(build(&meta, &bytes, &empty).is_none());
        // Leases not first: the head a run checks is not canonical.
        let reordered = serde_json::json!({
            "schema": MANIFEST_SCHEMA,
            "revocations": m.revocations,
            "leases": m.leases,
        });
        let bytes = serde_json::to_vec(&reordered).expect("json");
        let parsed = lease::parse_manifest(&path, &bytes).expect("a valid manifest");
        assert_eq!(parsed.leases.len(), m.leases.len());
        assert!(build(&meta, &bytes, &parsed).is_none());
    }

    #[test]
    fn a_line_naming_the_right_request_but_another_lease_id_is_refused() {
        // lease-3's line (the last) with one field taken from lease-2's
        // line (1: the request key, 2: the id key), MAC'd by the key holder.
        let forged_with = |field: usize| {
            let (d, path, m, key, at) = indexed();
            forge(&at, &key, |mut l| {
                let from2 = l[3].split(' ').nth(field).expect("field").to_string();
                let mut f: Vec<String> = l[4].split(' ').map(str::to_string).collect();
                f[field] = from2;
                l[4] = f.join(" ");
                l
            });
            (d, path, m, key, at)
        };
        // lease-3's span and request key, lease-2's id: the span does not
        // hold the lease the line names.
        let (_d, path, m, key, at) = forged_with(2);
        assert!(read(&path, &key, &at, &by_request(&m, 2)).is_none());
        // And the other way round: lease-2's request with lease-3's id.
        let (_d, path, m, key, at) = forged_with(1);
        assert!(read(&path, &key, &at, &Selection::LeaseId("lease-3".into())).is_none());
        assert!(read(&path, &key, &at, &by_request(&m, 1)).is_none());
    }

    #[test]
    fn an_index_of_many_megabytes_is_still_read() {
        // 60 000 lines that match nothing (about 2.6 MiB): a manifest of
        // that many leases must not fall back to the full parse.
        let (_d, path, m, key, at) = indexed();
        forge(&at, &key, |l| {
            let mut out = l[..4].to_vec();
            out.extend((0..60_000).map(|i| format!("lease {i:016x} {i:016x} 0 1")));
            out.push(l[4].clone());
            out
        });
        assert!(std::fs::metadata(&at).expect("stat").len() > 2 * 1024 * 1024);
        let got = read(&path, &key, &at, &by_request(&m, 1)).expect("the index is used");
        assert_eq!(got.leases, vec![m.leases[1].clone()]);
    }

    #[test]
    fn the_tail_is_read_through_the_index_up_to_its_bound_and_no_further() {
        let (_d, path, m, key, at) = indexed();
        let bytes = std::fs::read(&path).expect("r");
        let spans = std::fs::read_to_string(&at).expect("index");
        let last = parse_line(spans.lines().nth(4).expect("last lease")).expect("line");
        let tail = bytes.len() as u64 - (last.offset + last.len);
        // Trailing whitespace is part of the tail: pad it to the bound.
        let pad = |n: u64| {
            let mut b = bytes.clone();
            b.resize(bytes.len() + usize::try_from(n).expect("n"), b' ');
            std::fs::write(&path, &b).expect("w");
            index(&path, &key, &at);
        };
        // The bound in its own words, not the constant's: 4 MiB.
        let bound: u64 = 4 << 20;
        pad(bound - tail);
        let got = read(&path, &key, &at, &by_request(&m, 1)).expect("a tail at the bound");
        assert_eq!(got.revocations, m.revocations);
        pad(bound - tail + 1);
        assert!(read(&path, &key, &at, &by_request(&m, 1)).is_none());
    }
}
