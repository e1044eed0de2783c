//! The child's life: its environment, limits and isolation, per-run cgroups,
//! the scratch HOME/TMPDIR, bounded output capture, and the supervision that
//! ends with every process of the run observed gone.

pub mod accounting;
pub mod capture;
pub mod cgroup;
pub mod env;
pub mod isolation;
pub mod network;
pub mod oom;
pub mod process_limit;
pub mod resolve;
pub mod scratch;
pub mod supervise;
