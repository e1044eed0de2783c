#!/usr/bin/env bash
# Build the release binary statically linked (static-pie against glibc's
# libc.a), so it can be copied into any Linux image and starts without the
# dynamic loader. governed-exec calls no NSS function (no getpwnam & co.)
# but getaddrinfo, for a PostgreSQL ledger's host name only (README, Install:
# without glibc's NSS modules in the image, name the ledger by IP), which
# is what makes a static glibc build safe. Prints the binary's path.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
target=$(rustc -vV | sed -n 's/^host: //p')
# Called from the test suite (tests/it/process/docker.rs), the environment holds
# what `cargo test` sets for a test binary (CARGO_MANIFEST_DIR,
# CARGO_PKG_*, …); ring's build script reruns when CARGO_MANIFEST_DIR
# changes, so the release build would flip between the suite's and a
# shell's environment and rebuild each time. The build sees neither.
for v in $(compgen -e); do
  case "$v" in
    CARGO_MANIFEST_DIR|CARGO_MANIFEST_PATH|CARGO_PKG_*|CARGO_CRATE_NAME|CARGO_BIN_NAME|CARGO_BIN_EXE_*|CARGO_PRIMARY_PACKAGE|CARGO_TARGET_TMPDIR|CARGO_RUSTC_CURRENT_DIR) unset "$v" ;;
  esac
done
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked --manifest-path "$repo/Cargo.toml" --target "$target" >&2
echo "${CARGO_TARGET_DIR:-$repo/target}/$target/release/governed-exec"
