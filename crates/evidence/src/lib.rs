//! What a run proves and how it is checked: the in-toto statement and its
//! DSSE envelope, ed25519 keys, the products' digests, `verify` against a
//! Goal, the human views, and the one escaping of untrusted strings every
//! view uses.

#![forbid(unsafe_code)]

pub mod escape;
pub mod goal_file;
pub mod products;
pub mod receipt;
pub mod sign;
pub mod verify;
pub mod view;
