//! Leases and the manifest: canonical encoding, fingerprint, signature, and
//! durable manifest updates.
//!
//! The fingerprint is recomputed from the lease's own content at every use:
//! a lease whose body was edited fails even if its stored fingerprint and
//! signature were left untouched.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ed25519_dalek::{SigningKey, VerifyingKey};
use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};

use crate::journal::write_durable;
use crate::model::{parse_json, Lease, LeaseBody, Manifest, MANIFEST_SCHEMA};
use crate::sign;

/// SHA-256 over the canonical encoding of the body.
pub fn fingerprint(body: &LeaseBody) -> [u8; 32] {
    let canonical = serde_json::to_vec(body).unwrap_or_default();
    Sha256::digest(&canonical).into()
}

pub fn seal(body: LeaseBody, key: &SigningKey) -> Lease {
    let fp = fingerprint(&body);
    Lease {
        body,
        fingerprint: hex::encode(fp),
        keyid: sign::keyid(&key.verifying_key()),
        signature: sign::sign_digest(key, &fp),
    }
}

/// Whether the lease is exactly what the trusted approver signed.
pub fn signature_valid(lease: &Lease, trust: &VerifyingKey) -> bool {
    let fp = fingerprint(&lease.body);
    hex::encode(fp) == lease.fingerprint && sign::verify_digest(trust, &fp, &lease.signature)
}

pub fn load_manifest(path: &Path) -> Result<Manifest, String> {
    let bytes = fs::read(path).map_err(|e| format!("manifest {}: {e}", path.display()))?;
    let m: Manifest = parse_json(&format!("manifest {}", path.display()), &bytes)?;
    if m.schema != MANIFEST_SCHEMA {
        return Err(format!(
            "manifest {}: field `schema` is {:?}, expected {MANIFEST_SCHEMA:?}",
            path.display(),
            m.schema
        ));
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
/// created when `create` is true.
pub fn update_manifest<T>(
    path: &Path,
    create: bool,
    f: impl FnOnce(&mut Manifest) -> Result<T, String>,
) -> Result<T, String> {
    let lock_file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(lock_path(path))
        .map_err(|e| format!("manifest lock {}: {e}", lock_path(path).display()))?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("manifest lock {}: {e}", path.display()))?;
    let mut manifest = match fs::metadata(path) {
        Ok(_) => load_manifest(path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => Manifest {
            schema: MANIFEST_SCHEMA.to_string(),
            leases: vec![],
            revocations: vec![],
        },
        Err(e) => return Err(format!("manifest {}: {e}", path.display())),
    };
    let out = f(&mut manifest)?;
    let mut bytes = serde_json::to_vec_pretty(&manifest).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    write_durable(&tmp, &bytes, 0o644).map_err(|e| format!("manifest {}: {e}", tmp.display()))?;
    fs::rename(&tmp, path).map_err(|e| format!("manifest {}: {e}", path.display()))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("manifest dir {}: {e}", dir.display()))?;
    }
    Ok(out)
}
