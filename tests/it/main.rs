//! Integration tests: every case drives the real binary.
//!
//! One test binary, its modules arranged by the stage of `src/` they test
//! (ARCHITECTURE.md, "Tests"): `cli`, `run`, `gate`, `ledger`, `process`,
//! `evidence`, `testing`; `agent` drives the MCP server as a client; `attack` holds the attack passes, which cross
//! stages; `shipped` replays what the README, docs/GUIDE.md, `examples/` and `ci/` ship.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

mod cli {
    mod approvals;
    mod compact;
    mod first_hour;
    mod toolchains;
}
mod run {
    mod outcomes;
    mod pipeline;
    mod speed;
}
mod gate {
    mod identity_drift;
    mod lease_rules;
    mod manifest_index;
    mod portable;
    mod reach;
}
mod ledger {
    mod journal;
    #[cfg(feature = "postgres")]
    pub mod pg;
}
mod process {
    mod containers;
    mod docker;
    mod egress;
    mod isolation;
    mod lifecycle;
    mod output;
    mod pid_init;
    mod resources;
    mod supervision;
}
mod evidence {
    pub mod interop;
    mod nonce;
    mod verify;
    mod views;
}
mod agent {
    mod mcp;
}
mod attack {
    mod egress;
    mod hardening;
    mod identity;
    mod outcomes;
    mod reach;
    mod rootchild;
    mod syscalls;
}
mod shipped {
    mod ci_flow;
    mod ci_summary;
    mod examples;
    mod release;
}
mod testing {
    mod fuzz_regressions;
}
