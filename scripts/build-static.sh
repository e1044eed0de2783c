#!/usr/bin/env bash
# Build the release binary statically linked (static-pie against glibc's
# libc.a), so it can be copied into any Linux image and starts without the
# dynamic loader. governed-exec calls no NSS function (no getpwnam & co.)
# but getaddrinfo, for a PostgreSQL ledger's host name only (README:
# without glibc's NSS modules in the image, name the ledger by IP), which
# is what makes a static glibc build safe. Prints the binary's path.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
target=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked --manifest-path "$repo/Cargo.toml" --target "$target" >&2
echo "${CARGO_TARGET_DIR:-$repo/target}/$target/release/governed-exec"
