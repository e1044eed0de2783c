//! The floor everything stands on: `sys` holds every `unsafe` block of the
//! crate (syscalls, the forked child before exec), `safe_io` every file the
//! runner opens or writes (no symlink followed, temp-and-rename).

pub mod safe_io;
pub mod sys;
pub mod wait;
