//! governed-exec's test kit, a dev-dependency only: the fuzz targets'
//! harnesses (`fuzzing`, replayed by the integration tests and driven by
//! `fuzz/`), and the fixtures the tests share (`fixtures`). Nothing of it
//! is in a release build of the binary.

#![forbid(unsafe_code)]

pub mod fixtures;
pub mod fuzzing;
