#![no_main]
//! verify on arbitrary envelopes: a verdict, never a panic, and never
//! VERIFIED_DONE for bytes the trusted key did not sign or whose statement
//! does not meet the goal. The seeds are signed with that key (see
//! `verify::tests::fuzz_seeds_are_signed_with_the_target_key`), so
//! mutations get past the signature check into the judgement.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    governed_exec::evidence::verify::fuzz_verify_envelope(data);
});
