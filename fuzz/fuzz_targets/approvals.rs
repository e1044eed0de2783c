#![no_main]
//! See `governed_testkit::fuzzing::approvals`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    governed_testkit::fuzzing::approvals(data);
});
