#![no_main]
//! Envelope and statement parsing, and the statement decoder, never panic.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(env) = governed_model::parse_json::<governed_model::Envelope>("fuzz", data) {
        let _ = governed_evidence::receipt::decode_statement(&env);
    }
    let _ = governed_model::parse_json::<governed_model::Statement>("fuzz", data);
});
