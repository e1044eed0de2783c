//! Integration tests: every case drives the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

mod attack_identity;
mod attack_outcomes;
mod ci_flow;
mod ci_summary;
mod containers;
mod docker;
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
mod outcomes;
mod output;
mod pipeline;
mod portable;
mod rootchild;
mod speed;
mod supervision;
mod toolchains;
mod verify;
mod views;
