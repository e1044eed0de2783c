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
# Reproducible: the same source, Cargo.lock and toolchain give the same
# bytes whatever the checkout's path, the user's CARGO_HOME, the rustup
# install or the clock (scripts/check-reproducible.sh builds two clones and
# compares). Absolute paths reach the binary through panic locations and
# debug strings: each prefix that differs between machines is rewritten to
# a fixed one (rustc: when several match, the last one given wins, so the
# more specific prefixes come after the checkout's, e.g. a CARGO_HOME
# inside it). The GNU build id is a hash of the output (sha1), not random;
# no build script reads the clock.
target_dir=${CARGO_TARGET_DIR:-$repo/target}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
sysroot=$(rustc --print sysroot)
# Passed as CARGO_ENCODED_RUSTFLAGS (one flag per field), so a path with a
# space stays one flag; a caller's RUSTFLAGS or CARGO_ENCODED_RUSTFLAGS
# comes first, as before.
flags=()
if [ -n "${CARGO_ENCODED_RUSTFLAGS:-}" ]; then
  IFS=$'\x1f' read -r -a flags <<<"$CARGO_ENCODED_RUSTFLAGS"
elif [ -n "${RUSTFLAGS:-}" ]; then
  read -r -a flags <<<"$RUSTFLAGS"
fi
flags+=(
  -C target-feature=+crt-static
  "--remap-path-prefix=$sysroot=/rustc/sysroot"
  "--remap-path-prefix=$repo=/governed-exec"
  "--remap-path-prefix=$target_dir=/governed-exec/target"
  "--remap-path-prefix=$cargo_home=/cargo"
  -C link-arg=-Wl,--build-id=sha1
)
# The C compiler ring's build script runs (through cc) takes __DATE__ and
# __TIME__ from SOURCE_DATE_EPOCH; a constant, not the commit's time, since
# cc reruns the build script whenever its value changes.
export SOURCE_DATE_EPOCH=0
CARGO_ENCODED_RUSTFLAGS=$(IFS=$'\x1f'; printf '%s' "${flags[*]}")
export CARGO_ENCODED_RUSTFLAGS
unset RUSTFLAGS
cargo build --release --locked --manifest-path "$repo/Cargo.toml" --target "$target" >&2
echo "$target_dir/$target/release/governed-exec"
