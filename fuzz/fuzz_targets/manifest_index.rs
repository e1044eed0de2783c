#![no_main]
//! See `governed_exec::testing::fuzzing::manifest_index`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    governed_exec::testing::fuzzing::manifest_index(data);
});
