//! The SHA-256 hex digest the journal's chain, the goal's identity and the
//! receipt's subjects share: below every stage that uses it, so `ledger`
//! and `model` need not import `evidence` for it.

use sha2::{Digest, Sha256};

/// Lowercase hex of the SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
