//! Entry points of the fuzz targets (`fuzz/fuzz_targets/*`), here so that
//! `tests/it/testing/fuzz_regressions.rs` replays saved inputs through exactly the
//! same code on every `cargo test`. Each one panics only when an invariant
//! of the product is broken.

use std::path::Path;

use crate::ledger::journal::{self, Checkpoint};
use crate::model::{parse_json, Lease};

/// A checkpoint file: parsed, authenticated, bound, and continued by a
/// journal tail — never a panic, whatever its numbers (`next_seq` at
/// `u64::MAX` included).
pub fn checkpoint(data: &[u8]) {
    let Ok(cp) = serde_json::from_slice::<Checkpoint>(data) else {
        return;
    };
    let key = [3u8; 32];
    let tail: &[u8] = b"{\"v\":1,\"seq\":0,\"prev\":\"00\",\"at\":\"x\",\"event\":{\"kind\":\"revocation\",\"lease_id\":\"l\",\"by\":\"b\"}}\n";
    for bytes in [&b""[..], tail] {
        let _ = journal::checkpoint_trusted(&cp, &key, bytes);
        let _ = journal::fold_after(Path::new("fuzz.jsonl"), bytes, &cp.summary, cp.lines);
    }
}

/// A PEM key file as `run --key` / `--trust` read it: a key or an error.
pub fn pem_key(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::evidence::sign::verifying_key_from_pem(text);
        let _ = crate::evidence::sign::signing_key_from_pem(text);
    }
}

/// A stored lease: its signed body, fingerprint and signature, and the
/// validity times admission compares. A lease only verifies when its
/// fingerprint is the digest of its stored signed bytes.
pub fn lease(data: &[u8]) {
    let Ok(l) = parse_json::<Lease>("lease", data) else {
        return;
    };
    let key = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]).verifying_key();
    if crate::gate::lease::signature_valid(&l, &key) {
        assert_eq!(
            l.fingerprint,
            hex::encode(crate::gate::lease::fingerprint(&l.signed_body)),
            "a lease verified over bytes other than its stored ones"
        );
    }
    for t in [&l.body.issued_at, &l.body.expires_at] {
        let _ = humantime::parse_rfc3339_weak(t);
    }
    // Written back, it reads as the same lease.
    let again: Lease = serde_json::from_slice(&serde_json::to_vec(&l).unwrap_or_default())
        .unwrap_or_else(|e| panic!("a lease did not survive a write: {e}"));
    assert_eq!(again.signed_body, l.signed_body);
}

/// Child output bytes: the text projection is terminal-safe, and the
/// capture counts every byte.
pub fn output_projection(data: &[u8]) {
    let text = crate::process::capture::project_text(data);
    assert!(
        !text
            .chars()
            .any(|c| (c.is_control() && c != '\n' && c != '\t')
                || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')),
        "a control character reached the projection"
    );
    let split = data.len() / 2;
    let mut cap = crate::process::capture::StreamCapture::new(16);
    cap.push(&data[..split]);
    cap.push(&data[split..]);
    let r = cap.finish(true);
    assert_eq!(r.bytes, data.len() as u64);
}
