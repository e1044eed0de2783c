#![no_main]
//! verify on arbitrary envelopes: a verdict, never a panic, and never
//! VERIFIED_DONE for bytes not signed by the trusted key.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    let goal = br#"{"schema":"governed-exec/goal/v1","id":"g","revision":1,"criteria":[]}"#;
    let v = governed_exec::verify::judge_bytes(goal, data, &key);
    assert!(!v.done(), "unsigned bytes verified");
});
