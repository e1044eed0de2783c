//! ed25519 keys (PKCS#8 / SPKI PEM, the format `openssl genpkey -algorithm
//! ed25519` writes) and DSSE envelopes over the pre-authentication encoding.

use std::path::Path;

use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

pub use governed_model::digest::sha256_hex;

use governed_model::{DsseSignature, Envelope};
use governed_sys::safe_io;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// `hint`: for a permission error, who owns what and the fix.
    #[error("cannot read key file {path}: {source}{hint}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
        hint: String,
    },
    #[error("key file {path} is not a PEM ed25519 {kind} key: {detail}")]
    Format {
        path: String,
        kind: &'static str,
        detail: String,
    },
    #[error("cannot write key file {path}: {source}{hint}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
        hint: String,
    },
    #[error("cannot generate a key: no system randomness: {0}")]
    Random(String),
}

/// Key id, in the convention DSSE/in-toto tooling computes by default
/// (securesystemslib's `SSlibKey.from_crypto`, in-toto): the SHA-256, hex,
/// of the canonical JSON of the key
/// `{"keytype":"ed25519","keyval":{"public":"<hex>"},"scheme":"ed25519"}`.
/// So `Envelope.verify([key], 1)` of such a tool matches the envelope's
/// signature to the runner's public key without being told the id.
pub fn keyid(key: &VerifyingKey) -> String {
    let canonical = format!(
        r#"{{"keytype":"ed25519","keyval":{{"public":"{}"}},"scheme":"ed25519"}}"#,
        hex::encode(key.as_bytes())
    );
    sha256_hex(canonical.as_bytes())
}

/// Size bound of a PEM key file.
pub(crate) const MAX_KEY_BYTES: u64 = 64 * 1024;

fn read_pem(path: &Path) -> Result<String, KeyError> {
    let bytes = governed_sys::safe_io::read_bounded(path, MAX_KEY_BYTES).map_err(|source| {
        KeyError::Read {
            path: path.display().to_string(),
            hint: governed_sys::safe_io::permission_hint(path, &source),
            source,
        }
    })?;
    String::from_utf8(bytes).map_err(|e| KeyError::Read {
        path: path.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        hint: String::new(),
    })
}

/// A private key from PKCS#8 PEM text.
pub fn signing_key_from_pem(pem: &str) -> Option<SigningKey> {
    SigningKey::from_pkcs8_pem(pem).ok()
}

/// A public key from SPKI PEM text, or the public half of a private key.
pub fn verifying_key_from_pem(pem: &str) -> Option<VerifyingKey> {
    VerifyingKey::from_public_key_pem(pem)
        .ok()
        .or_else(|| signing_key_from_pem(pem).map(|k| k.verifying_key()))
}

pub fn load_signing_key(path: &Path) -> Result<SigningKey, KeyError> {
    let pem = read_pem(path)?;
    SigningKey::from_pkcs8_pem(&pem).map_err(|e| KeyError::Format {
        path: path.display().to_string(),
        kind: "private (PKCS#8)",
        detail: e.to_string(),
    })
}

pub fn load_verifying_key(path: &Path) -> Result<VerifyingKey, KeyError> {
    let pem = read_pem(path)?;
    if let Ok(k) = VerifyingKey::from_public_key_pem(&pem) {
        return Ok(k);
    }
    // Also accept a private key file: its public half is derivable.
    SigningKey::from_pkcs8_pem(&pem)
        .map(|k| k.verifying_key())
        .map_err(|e| KeyError::Format {
            path: path.display().to_string(),
            kind: "public (SPKI)",
            detail: e.to_string(),
        })
}

pub fn generate() -> Result<SigningKey, KeyError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Write `PREFIX.key` (0600, PKCS#8 PEM) and `PREFIX.pub` (SPKI PEM).
/// Refuses to overwrite an existing key.
pub fn write_keypair(key: &SigningKey, key_path: &Path, pub_path: &Path) -> Result<(), KeyError> {
    let werr = |path: &Path| {
        let shown = path.display().to_string();
        let path = path.to_path_buf();
        move |source: std::io::Error| KeyError::Write {
            path: shown,
            hint: governed_sys::safe_io::permission_hint(&path, &source),
            source,
        }
    };
    let fmt_err = |e: String| KeyError::Write {
        path: key_path.display().to_string(),
        source: std::io::Error::other(e),
        hint: String::new(),
    };
    // PKCS#8 v1 (RFC 5208) without the optional public key: the exact form
    // `openssl genpkey -algorithm ed25519` writes, which OpenSSL 3.0 and
    // Python `cryptography` read. (The v2 form with the public key
    // attribute, which earlier releases wrote, is still read.)
    let private = ed25519_dalek::pkcs8::KeypairBytes {
        secret_key: key.to_bytes(),
        public_key: None,
    }
    .to_pkcs8_pem(Default::default())
    .map_err(|e| fmt_err(e.to_string()))?;
    let public = key
        .verifying_key()
        .to_public_key_pem(Default::default())
        .map_err(|e| fmt_err(e.to_string()))?;
    // The private key appears complete or not at all, and never replaces an
    // existing one: written to an unpredictable temporary name (O_EXCL|
    // O_NOFOLLOW), then hard-linked into place (link fails if the name
    // exists). Concurrent first runs racing to create the runner key
    // therefore never read a partial file, and a symlink planted at either
    // name is never written through. The public half replaces whatever is
    // at its name the same way (a planted `.pub` symlink would otherwise
    // make the trust anchor the planter's file).
    safe_io::WriteTarget::new(key_path)
        .and_then(|t| t.create_new(private.as_bytes(), 0o600))
        .map_err(werr(key_path))?;
    safe_io::replace_file(pub_path, public.as_bytes(), 0o644).map_err(werr(pub_path))?;
    Ok(())
}

/// DSSE pre-authentication encoding:
/// `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

pub fn sign_envelope(key: Option<&SigningKey>, payload_type: &str, payload: &[u8]) -> Envelope {
    let signatures = key
        .map(|k| {
            let sig = k.sign(&pae(payload_type, payload));
            vec![DsseSignature {
                keyid: keyid(&k.verifying_key()),
                sig: STANDARD.encode(sig.to_bytes()),
            }]
        })
        .unwrap_or_default();
    Envelope {
        payload: STANDARD.encode(payload),
        payload_type: payload_type.to_string(),
        signatures,
    }
}

/// Decode standard or URL-safe base64 (both allowed by DSSE).
pub fn b64_decode(s: &str) -> Option<Vec<u8>> {
    STANDARD
        .decode(s)
        .or_else(|_| URL_SAFE.decode(s))
        .or_else(|_| URL_SAFE_NO_PAD.decode(s))
        .ok()
}

/// Why an envelope does not authenticate under the trusted key: the
/// `authentic:` line of a `NOT_VERIFIED` verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("payload is not valid base64")]
    Base64,
    #[error("envelope carries no signature")]
    Unsigned,
    #[error("no signature verifies under the trusted key")]
    NoValidSignature,
}

/// The payload of `env` if at least one signature verifies under `key`.
pub fn verify_envelope(env: &Envelope, key: &VerifyingKey) -> Result<Vec<u8>, EnvelopeError> {
    let payload = b64_decode(&env.payload).ok_or(EnvelopeError::Base64)?;
    let message = pae(&env.payload_type, &payload);
    for s in &env.signatures {
        let Some(raw) = b64_decode(&s.sig) else {
            continue;
        };
        let Ok(sig) = Signature::from_slice(&raw) else {
            continue;
        };
        if key.verify(&message, &sig).is_ok() {
            return Ok(payload);
        }
    }
    if env.signatures.is_empty() {
        Err(EnvelopeError::Unsigned)
    } else {
        Err(EnvelopeError::NoValidSignature)
    }
}

/// Sign a 32-byte digest (the lease fingerprint).
pub fn sign_digest(key: &SigningKey, digest: &[u8]) -> String {
    STANDARD.encode(key.sign(digest).to_bytes())
}

pub fn verify_digest(key: &VerifyingKey, digest: &[u8], sig_b64: &str) -> bool {
    b64_decode(sig_b64)
        .and_then(|raw| Signature::from_slice(&raw).ok())
        .is_some_and(|sig| key.verify(digest, &sig).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// The DSSE specification's published PAE example.
    #[test]
    fn pae_matches_dsse_spec_vector() {
        let got = pae("http://example.com/HelloWorld", b"hello world");
        assert_eq!(
            got,
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    /// The private key file is byte for byte what `openssl genpkey
    /// -algorithm ed25519` would write for the same seed: PKCS#8 v1, no
    /// public key attribute (RFC 8410 §10.3's example shape).
    #[test]
    fn private_key_is_pkcs8_v1_without_public_key() {
        let dir = std::env::temp_dir().join(format!("ge-sign-{}", std::process::id()));
        let _ = fs::create_dir_all(&dir);
        let (k, p) = (dir.join("a.key"), dir.join("a.pub"));
        let _ = fs::remove_file(&k);
        let key = SigningKey::from_bytes(&[9u8; 32]);
        write_keypair(&key, &k, &p).unwrap();
        let pem = fs::read_to_string(&k).unwrap();
        let _ = fs::remove_dir_all(&dir);
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = STANDARD.decode(body).unwrap();
        let mut want = hex::decode("302e020100300506032b657004220420").unwrap();
        want.extend_from_slice(&[9u8; 32]);
        assert_eq!(der, want);
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    }

    const KEYID_RFC8032_1: &str =
        "74c181c7ad8a0855d4b55e44d2ba87aabdddb196832571f15f92fece332e4916";

    /// securesystemslib's default key id for an ed25519 key (value computed
    /// by `SSlibKey.from_crypto` for the RFC 8032 test 1 public key).
    #[test]
    fn keyid_is_the_dsse_tooling_default() {
        let pk: [u8; 32] =
            hex::decode("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
                .unwrap()
                .try_into()
                .unwrap();
        let vk = VerifyingKey::from_bytes(&pk).unwrap();
        assert_eq!(keyid(&vk), KEYID_RFC8032_1);
    }

    #[test]
    fn envelope_roundtrip_and_tamper() {
        let k = SigningKey::from_bytes(&[7u8; 32]);
        let env = sign_envelope(Some(&k), "t", b"{}");
        assert_eq!(
            verify_envelope(&env, &k.verifying_key()).ok(),
            Some(b"{}".to_vec())
        );
        let mut bad = env.clone();
        bad.payload_type = "u".into();
        assert_eq!(
            verify_envelope(&bad, &k.verifying_key()),
            Err(EnvelopeError::NoValidSignature)
        );
        let other = SigningKey::from_bytes(&[8u8; 32]);
        assert_eq!(
            verify_envelope(&env, &other.verifying_key()),
            Err(EnvelopeError::NoValidSignature)
        );
    }

    /// The words of each refusal are the `authentic:` line `verify` prints.
    #[test]
    fn envelope_refusals_keep_their_words() {
        let k = SigningKey::from_bytes(&[7u8; 32]);
        let mut unsigned = sign_envelope(Some(&k), "t", b"{}");
        unsigned.signatures.clear();
        let e = verify_envelope(&unsigned, &k.verifying_key()).unwrap_err();
        assert_eq!(e, EnvelopeError::Unsigned);
        assert_eq!(e.to_string(), "envelope carries no signature");
        let mut garbled = sign_envelope(Some(&k), "t", b"{}");
        garbled.payload = "!!".into();
        let e = verify_envelope(&garbled, &k.verifying_key()).unwrap_err();
        assert_eq!(e.to_string(), "payload is not valid base64");
        assert_eq!(
            EnvelopeError::NoValidSignature.to_string(),
            "no signature verifies under the trusted key"
        );
    }
}
