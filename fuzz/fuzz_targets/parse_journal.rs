#![no_main]
//! The journal chain parser fails closed and never panics.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = governed_ledger::journal::parse_journal_bytes(std::path::Path::new("fuzz.jsonl"), data);
});
