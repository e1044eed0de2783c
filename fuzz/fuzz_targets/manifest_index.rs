#![no_main]
//! See `governed_testkit::fuzzing::manifest_index`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    governed_testkit::fuzzing::manifest_index(data);
});
