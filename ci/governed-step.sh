#!/bin/sh
# The one CI step governed-exec runs (ci/github-actions.yml, ci/gitlab-ci.yml).
# A portable lease pins these bytes (path, mode, SHA-256): change this file
# and the lease must be re-approved. The child's environment is clean (a
# fresh private HOME, a fixed PATH), so this script points at the CI image's
# Rust toolchain itself; the argument names the CI system, so each system has
# its own lease (a different request) and neither supersedes the other.
# CARGO_HOME (registry cache, downloads) lives in the workspace: the lease's
# --fs-write-scope allows writes only there, in HOME and in TMPDIR.
set -eu
case "${1:-}" in
  github) toolchain=/home/runner/.cargo/bin RUSTUP_HOME=/home/runner/.rustup ;;
  gitlab) toolchain=/usr/local/cargo/bin RUSTUP_HOME=/usr/local/rustup ;;
  *) echo "usage: governed-step.sh github|gitlab" >&2; exit 2 ;;
esac
CARGO_HOME="$PWD/target/cargo-home"
# Pin the whole toolchain: the one the checkout selects, already installed
# (RUSTUP_AUTO_INSTALL=0: a governed run never installs or updates one, and
# the lease's write scope leaves RUSTUP_HOME read-only anyway), its own bin
# first in PATH so cargo's rustc is that toolchain's, not a proxy's choice.
RUSTUP_AUTO_INSTALL=0
export RUSTUP_HOME RUSTUP_AUTO_INSTALL
cargo_exe=$("$toolchain/rustup" which cargo)
tc_bin=$(dirname "$cargo_exe")
RUSTUP_TOOLCHAIN=$(basename "$(dirname "$tc_bin")")
PATH="$tc_bin:$toolchain:$PATH"
export RUSTUP_TOOLCHAIN CARGO_HOME PATH
exec "$cargo_exe" test --locked
