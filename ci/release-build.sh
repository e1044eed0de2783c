#!/bin/sh
# The release build governed-exec runs (.github/workflows/release.yml; the
# lease is ci/release-approvals.toml's, under the Goal ci/release-goal.json).
#   ci/release-build.sh TOOLCHAIN BUILD-SCRIPT
# TOOLCHAIN: `github` (the hosted runner's rustup, pinned as
# ci/governed-step.sh pins it) or `none` (a build script that needs no Rust
# toolchain). BUILD-SCRIPT: run with bash from the checkout; its last line
# on stdout is the path of the binary it built (scripts/build-static.sh's
# interface). Both are in the approved argv, so the lease names the build
# exactly; its bytes, and the whole source, are the commit the receipt
# names (predicate.workspace_git.head).
# Leaves, in dist/: governed-exec (the file the Goal's `file` criterion
# names, so the receipt's products carry its SHA-256) and
# governed-exec.sha256 (for `sha256sum -c`).
# A portable lease pins these bytes (path, mode, SHA-256): change this
# file and the lease must be re-approved.
set -eu
case "${1:-}" in
  github)
    RUSTUP_HOME=/home/runner/.rustup
    toolchain=/home/runner/.cargo/bin
    # The child's environment is clean (a private HOME, a fixed PATH): the
    # toolchain the checkout selects, already installed, its own bin
    # first in PATH; the registry cache in the checkout, the one place
    # besides HOME and TMPDIR the lease's write scope allows.
    RUSTUP_AUTO_INSTALL=0
    export RUSTUP_HOME RUSTUP_AUTO_INSTALL
    cargo_exe=$("$toolchain/rustup" which cargo)
    tc_bin=$(dirname "$cargo_exe")
    RUSTUP_TOOLCHAIN=$(basename "$(dirname "$tc_bin")")
    CARGO_HOME="$PWD/target/cargo-home"
    PATH="$tc_bin:$toolchain:$PATH"
    export RUSTUP_TOOLCHAIN CARGO_HOME PATH
    ;;
  none) ;;
  *) echo "usage: release-build.sh github|none BUILD-SCRIPT" >&2; exit 2 ;;
esac
[ -n "${2:-}" ] || { echo "usage: release-build.sh github|none BUILD-SCRIPT" >&2; exit 2; }
bin=$(bash "$2" | tail -n 1)
mkdir -p dist
cp "$bin" dist/governed-exec
chmod 0755 dist/governed-exec
(cd dist && sha256sum governed-exec > governed-exec.sha256)
cat dist/governed-exec.sha256
