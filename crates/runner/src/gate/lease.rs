//! Leases and the manifest: canonical encoding, fingerprint, signature, and
//! durable manifest updates.
//!
//! The fingerprint is recomputed at every use from the bytes the approver
//! signed, as stored in the lease (never from a re-serialisation by the
//! code reading it): a lease whose body was edited fails even if its stored
//! fingerprint and signature were left untouched, and a lease written by an
//! earlier release keeps verifying after the body struct gained fields.

use std::fs;
use std::path::{Path, PathBuf};

use ed25519_dalek::{SigningKey, VerifyingKey};
use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};

use governed_evidence::sign;
use governed_model::{parse_json, Lease, LeaseBody, Manifest, LEASE_FORMAT, MANIFEST_SCHEMA};
use governed_sys::safe_io;

/// SHA-256 over the signed bytes.
pub fn fingerprint(signed_body: &str) -> [u8; 32] {
    Sha256::digest(signed_body.as_bytes()).into()
}

/// Encode the body once (its canonical encoding), sign that, and keep
/// exactly those bytes in the lease.
pub fn seal(body: LeaseBody, key: &SigningKey) -> Lease {
    let signed_body = serde_json::to_string(&body).unwrap_or_default();
    let fp = fingerprint(&signed_body);
    Lease {
        format: LEASE_FORMAT,
        body,
        signed_body,
        fingerprint: hex::encode(fp),
        keyid: sign::keyid(&key.verifying_key()),
        signature: sign::sign_digest(key, &fp),
    }
}

/// Whether the lease is exactly what the trusted approver signed.
pub fn signature_valid(lease: &Lease, trust: &VerifyingKey) -> bool {
    let fp = fingerprint(&lease.signed_body);
    hex::encode(fp) == lease.fingerprint && sign::verify_digest(trust, &fp, &lease.signature)
}

/// Size bound of a manifest file (thousands of leases).
pub(crate) const MAX_MANIFEST_BYTES: u64 = 64 * 1024 * 1024;

/// Why a manifest could not be read (`invalid_input` in `run`).
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] governed_model::ParseError),
    #[error("manifest {path}: field `schema` is {found:?}, expected {MANIFEST_SCHEMA:?}")]
    Schema { path: String, found: String },
    #[error("manifest lock {path}: {source}")]
    Lock {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("manifest lock {path}: {source}")]
    LockWait {
        path: String,
        #[source]
        source: nix::errno::Errno,
    },
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

impl ManifestError {
    pub fn read(path: &Path, source: std::io::Error) -> ManifestError {
        ManifestError::Read {
            path: path.display().to_string(),
            source,
        }
    }
}

pub fn load_manifest(path: &Path) -> Result<Manifest, ManifestError> {
    let bytes = governed_sys::safe_io::read_bounded(path, MAX_MANIFEST_BYTES)
        .map_err(|e| ManifestError::read(path, e))?;
    parse_manifest(path, &bytes)
}

/// Parse a whole manifest read from `path`: every lease in its closed shape,
/// the schema checked.
pub fn parse_manifest(path: &Path, bytes: &[u8]) -> Result<Manifest, ManifestError> {
    let m: Manifest = parse_json(&format!("manifest {}", path.display()), bytes)?;
    if m.schema != MANIFEST_SCHEMA {
        return Err(ManifestError::Schema {
            path: path.display().to_string(),
            found: m.schema,
        });
    }
    Ok(m)
}

fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    path.with_file_name(name)
}

/// Read-modify-write the manifest under a lock file beside it, replacing it
/// atomically (write temp, fsync, rename, fsync dir). A missing manifest is
/// created when `create` is true. Neither the lock file nor the temporary
/// is ever reached through a symlink or opened if it is a FIFO: the lock
/// is opened `O_NOFOLLOW|O_NONBLOCK` and must be a regular file, and the
/// temporary is a fresh unpredictable name created `O_EXCL|O_NOFOLLOW`.
pub fn update_manifest<T>(
    path: &Path,
    create: bool,
    f: impl FnOnce(&mut Manifest) -> T,
) -> Result<T, ManifestError> {
    let lock_file =
        safe_io::open_lock_file(&lock_path(path)).map_err(|source| ManifestError::Lock {
            path: lock_path(path).display().to_string(),
            source,
        })?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive).map_err(|(_, source)| {
        ManifestError::LockWait {
            path: path.display().to_string(),
            source,
        }
    })?;
    let mut manifest = match fs::metadata(path) {
        Ok(_) => load_manifest(path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => Manifest::empty(),
        Err(e) => return Err(ManifestError::read(path, e)),
    };
    let out = f(&mut manifest);
    let mut bytes = serde_json::to_vec_pretty(&manifest)?;
    bytes.push(b'\n');
    safe_io::replace_file(path, &bytes, 0o644).map_err(|e| ManifestError::read(path, e))?;
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use governed_model::*;
    use proptest::prelude::*;

    pub(crate) fn sample() -> (Lease, SigningKey) {
        let key = governed_testkit::fixtures::lease_key();
        (seal(governed_testkit::fixtures::lease_body(), &key), key)
    }

    #[test]
    fn a_sealed_lease_verifies() {
        let (lease, key) = sample();
        assert!(signature_valid(&lease, &key.verifying_key()));
    }

    #[test]
    fn the_committed_format_1_lease_verifies_over_its_stored_bytes() {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/lease-v1");
        let m = load_manifest(&dir.join("manifest.json")).unwrap();
        let trust = sign::load_verifying_key(&dir.join("approver.pub")).unwrap();
        assert_eq!(m.leases.len(), 1);
        let l = &m.leases[0];
        assert_eq!(l.format, 1);
        assert!(signature_valid(l, &trust));
        // Format 1 had no cancel grace: it gets the default of every tier.
        assert_eq!(l.body.limits.cancel_grace_ms, DEFAULT_CANCEL_GRACE_MS);
        // The signed bytes are the stored ones, not today's encoding.
        assert_ne!(serde_json::to_string(&l.body).unwrap(), l.signed_body);
    }

    /// The signature holds over the stored bytes even when the current
    /// struct would encode the body differently (another field order here).
    #[test]
    fn signed_bytes_are_never_re_serialised() {
        let (lease, key) = sample();
        let v: serde_json::Value = serde_json::from_str(&lease.signed_body).unwrap();
        let sorted = serde_json::to_string(&v).unwrap(); // keys sorted
        assert_ne!(sorted, lease.signed_body);
        let fp = fingerprint(&sorted);
        let text = format!(
            r#"{{"format":2,"body":{sorted},"fingerprint":"{}","keyid":"{}","signature":"{}"}}"#,
            hex::encode(fp),
            lease.keyid,
            sign::sign_digest(&key, &fp)
        );
        let l: Lease = serde_json::from_str(&text).unwrap();
        assert_eq!(l.body, lease.body);
        assert!(signature_valid(&l, &key.verifying_key()));
        // Re-indenting the stored lease (as `jq .` would) keeps it valid.
        let indented = serde_json::to_string(&lease)
            .unwrap()
            .replace(",\"", ",\n    \"");
        let l: Lease = serde_json::from_str(&indented).unwrap();
        assert!(signature_valid(&l, &key.verifying_key()));
    }

    /// The `lease` fuzz target's format-2 seed is signed by the key the
    /// target trusts ([9u8; 32]). `UPDATE_FUZZ_SEEDS=1` rewrites it.
    #[test]
    fn the_lease_fuzz_seed_verifies() {
        let (lease, key) = sample();
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("fuzz/seeds/lease/format-2.json");
        if std::env::var_os("UPDATE_FUZZ_SEEDS").is_some() {
            std::fs::write(&path, serde_json::to_vec_pretty(&lease).unwrap()).unwrap();
        }
        let l: Lease = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(signature_valid(&l, &key.verifying_key()));
        governed_testkit::fuzzing::lease(&std::fs::read(&path).unwrap());
    }

    /// A manifest is read up to `MAX_MANIFEST_BYTES` (the documented 64
    /// MiB): exactly that many bytes load, one more is refused before
    /// parsing.
    #[test]
    fn the_manifest_size_bound_is_exact() {
        assert_eq!(MAX_MANIFEST_BYTES, 64 << 20);
        let d = tempfile::tempdir().unwrap();
        let body = format!(r#"{{"schema":"{MANIFEST_SCHEMA}","leases":[]}}"#);
        let sized = |n: u64| {
            let mut b = body.clone().into_bytes();
            b.resize(usize::try_from(n).unwrap(), b' ');
            let p = d.path().join("manifest.json");
            std::fs::write(&p, b).unwrap();
            load_manifest(&p)
                .map(|m| m.leases.len())
                .map_err(|e| e.to_string())
        };
        assert_eq!(sized(MAX_MANIFEST_BYTES), Ok(0), "exactly at the bound");
        let over = sized(MAX_MANIFEST_BYTES + 1).unwrap_err();
        assert!(over.contains("byte bound"), "{over}");
    }

    /// `update_manifest` creates a missing manifest only when asked to
    /// (`approve`), never for `revoke` (a mistyped path must not become an
    /// empty manifest that revokes nothing), and takes its lock on
    /// `NAME.lock` beside it.
    #[test]
    fn update_manifest_creates_only_when_asked_and_locks_beside_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.json");
        assert!(update_manifest(&p, false, |_| ()).is_err());
        assert!(!p.exists(), "created without being asked");
        update_manifest(&p, true, |m| assert!(m.leases.is_empty())).unwrap();
        assert_eq!(load_manifest(&p).unwrap().schema, MANIFEST_SCHEMA);
        assert!(d.path().join("m.json.lock").is_file());
    }

    #[test]
    fn whitespace_inside_strings_is_kept() {
        assert_eq!(
            governed_model::strip_json_whitespace("{ \"a b\" : [1, \"\\\" x\"] }\n"),
            "{\"a b\":[1,\"\\\" x\"]}"
        );
    }

    proptest! {
        /// Any single-byte edit of a signed lease either fails to parse or
        /// is rejected, unless it only re-encodes the same signature.
        #[test]
        fn any_byte_edit_of_a_signed_lease_is_rejected(pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let (lease, key) = sample();
            let bytes = serde_json::to_vec(&lease).unwrap();
            let i = pos.index(bytes.len());
            prop_assume!(bytes[i] != byte);
            let mut edited = bytes.clone();
            edited[i] = byte;
            if let Ok(l) = serde_json::from_slice::<Lease>(&edited) {
                if signature_valid(&l, &key.verifying_key()) {
                    prop_assert_eq!(&l.body, &lease.body);
                    prop_assert_eq!(sign::b64_decode(&l.signature), sign::b64_decode(&lease.signature));
                }
            }
        }

        /// Any single-byte edit of a receipt envelope is rejected unless the
        /// verified payload is byte-identical to the original.
        #[test]
        fn any_byte_edit_of_a_receipt_is_rejected(pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let key = SigningKey::from_bytes(&[4u8; 32]);
            let payload = br#"{"predicate":{"outcome":{"class":"exited","exit_code":0}}}"#;
            let env = sign::sign_envelope(Some(&key), DSSE_PAYLOAD_TYPE, payload);
            let bytes = serde_json::to_vec(&env).unwrap();
            let i = pos.index(bytes.len());
            prop_assume!(bytes[i] != byte);
            let mut edited = bytes.clone();
            edited[i] = byte;
            if let Ok(e) = serde_json::from_slice::<Envelope>(&edited) {
                if let Ok(p) = sign::verify_envelope(&e, &key.verifying_key()) {
                    prop_assert_eq!(p.as_slice(), payload.as_slice());
                    prop_assert_eq!(e.payload_type.as_str(), DSSE_PAYLOAD_TYPE);
                }
            }
        }
    }
}
