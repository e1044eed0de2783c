#![no_main]
//! See `governed_testkit::fuzzing::verify_envelope`: the harness signs
//! the fuzzed statement with the trusted key and fuzzes the goal and the
//! journal too, so the judgement behind the signature check is what runs.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    governed_testkit::fuzzing::verify_envelope(data);
});
