#![no_main]
//! See `governed_exec::testing::fuzzing::git_head`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    governed_exec::testing::fuzzing::git_head(data);
});
