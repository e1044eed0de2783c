#![no_main]
//! The request parser must never panic, whatever the bytes.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = governed_model::parse_json::<governed_model::Request>("fuzz", data);
});
