//! Integration tests: every case drives the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

mod approvals;
mod attack_egress;
mod attack_identity;
mod attack_outcomes;
mod attack_reach;
mod ci_flow;
mod ci_summary;
mod containers;
mod docker;
mod egress;
mod examples;
mod first_hour;
mod fuzz_regressions;
mod hardening;
mod identity_drift;
mod interop;
mod isolation;
mod journal;
mod lease_rules;
mod ledger_pg;
mod lifecycle;
mod manifest_index;
mod nonce;
mod outcomes;
mod output;
mod pipeline;
mod portable;
mod reach;
mod resources;
mod rootchild;
mod speed;
mod supervision;
mod toolchains;
mod verify;
mod views;
