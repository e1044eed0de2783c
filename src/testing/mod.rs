//! Test-only entry points: crash-injection points (compiled only with the
//! `fault-injection` feature) and the fuzz targets' entry points, replayed by
//! `tests/it/testing/fuzz_regressions.rs`; and the check of the folders'
//! layer order (`layers`, a unit test).

pub mod fault;
pub mod fuzzing;
#[cfg(test)]
mod layers;
