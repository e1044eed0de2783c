//! Admission: what may run. The executable's and directories' identity read
//! from open fds, the signed lease and the manifest (and its index), the
//! exact match and the ordered checks that turn a request into `Admitted`
//! or a `Refusal`, and the child's reach (what it could touch on this
//! machine) computed before spawn.

pub mod admission;
pub mod git;
pub mod identity;
pub mod lease;
pub mod manifest_index;
pub mod reach;
