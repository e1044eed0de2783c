#![no_main]
//! The request parser must never panic, whatever the bytes.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = governed_exec::model::parse_json::<governed_exec::model::Request>("fuzz", data);
});
