#!/usr/bin/env bash
# Benchmarks (not timed tests). Builds the binary README's build gives users
# (scripts/build-static.sh), the floor of a governed run (benches/floor.rs,
# linked the same static way) and, for comparison, the dynamically linked
# `cargo build --release` one, then prints every figure with its ratio
# against the comparison command, measured side by
# side (interleaved, medians) in one run, and a table saying which targets
# hold. bubblewrap is installed from Debian when missing (root only; else
# its line says SKIP).
#
# Usage: scripts/bench.sh [--quick] [REPS]
#   --quick      smaller sizes (well under a minute of measuring instead of ~5)
#   REPS         rounds of the fixed-cost and manifest figures (default 200, quick 40)
# Knobs (environment): HISTORY (runs of one goal, default 3000),
#   RSS_HISTORY (prior runs for the peak-RSS figure, default 10000),
#   LEASES (other leases in the big manifest, default 1000),
#   ROUNDS (rounds of 12-in-a-row vs 12-at-once, default 20),
#   BASELINE (another governed-exec binary, e.g. an older build, measured
#   beside this one), BENCH_DIR (where state dirs live; default target/bench,
#   on the repo's own disk), DYNAMIC=0 (skip building and measuring the
#   dynamically linked build), BENCH_RT=0 (see below), MCP=0 (skip the
#   agent tool's per-call figures, scripts/bench-mcp.sh), FIXED_ONLY=1 (only
#   figure 1: the fixed cost beside the floor, timeout and bwrap, with CPU
#   and page faults; with BASELINE, the A/B of one change), EGRESS=0.
#
# On a machine shared with other work, a process that sleeps and wakes a
# dozen times per run (as governed-exec does) waits behind every runnable
# task at each wake-up, and the figures measure the load, not the program.
# As root the harness therefore runs under SCHED_FIFO priority 1 (`chrt -f 1`;
# every command compared inherits it, so ratios stay like for like); the
# kernel's RT throttling still leaves other work 5% of each second.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
if [ "${1:-}" = "--quick" ]; then args+=(--quick); shift; fi
if [ -n "${1:-}" ]; then args+=(--reps "$1"); fi
if [ -n "${HISTORY:-}" ]; then args+=(--history "$HISTORY"); fi
if [ -n "${RSS_HISTORY:-}" ]; then args+=(--rss-history "$RSS_HISTORY"); fi
if [ -n "${LEASES:-}" ]; then args+=(--leases "$LEASES"); fi
if [ -n "${ROUNDS:-}" ]; then args+=(--rounds "$ROUNDS"); fi
if [ -n "${BASELINE:-}" ]; then args+=(--baseline "$BASELINE"); fi
dir="${BENCH_DIR:-$PWD/target/bench}"
mkdir -p "$dir"
bin=$(bash scripts/build-static.sh)
# The floor, built by the same flags as build-static.sh (the product's
# release profile, +crt-static, the host target).
target=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked --example floor --target "$target" >&2
floor="${CARGO_TARGET_DIR:-$PWD/target}/$target/release/examples/floor"
args+=(--floor "$floor")
if [ "${FIXED_ONLY:-0}" = 1 ]; then args+=(--fixed-only); fi
if ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1 \
    || echo "bench.sh: could not install bubblewrap; its line will say SKIP" >&2
fi
if [ "${DYNAMIC:-1}" != 0 ]; then
  cargo build --release --locked >&2
  cp target/release/governed-exec "$dir/governed-exec-dynamic"
  args+=(--dynamic "$dir/governed-exec-dynamic")
fi
# The harness only spawns and times processes: a dev build of it is enough
# (and quick); what is measured is the release binary above.
harness=$(cargo bench --locked --profile dev --bench governed --no-run --message-format=json \
  | grep '"name":"governed","src_path"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$harness" ] || { echo "bench.sh: could not find the bench harness executable" >&2; exit 1; }
prio=()
if [ "$(id -u)" = 0 ] && [ "${BENCH_RT:-1}" != 0 ] && command -v chrt >/dev/null; then
  prio=(chrt -f 1)
fi
echo "governed-exec bench, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), priority: ${prio[*]:-normal}" >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"${prio[@]}" "$harness" --bin "$bin" --dir "$dir" "${args[@]}" | tee "$out"
# The egress allowlist's figures (1 GiB through the proxy vs
# direct, --allow-net vs --no-network per run): root only, as they need
# network namespaces; EGRESS=0 skips them. Their rows join the table.
if [ "${FIXED_ONLY:-0}" != 1 ] && [ "${EGRESS:-1}" != 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    rows=$(mktemp)
    "${prio[@]}" env ROWS="$rows" bash scripts/bench-egress.sh "$bin"
    echo
    echo "| target | measured | holds |"
    echo "|---|---|---|"
    sed -n '/^| .* | \(yes\|no\) |$/p' "$out"
    cat "$rows"
    total=$(( $(sed -n '/^| .* | \(yes\|no\) |$/p' "$out" | wc -l) + $(wc -l < "$rows") ))
    held=$(( $(sed -n '/^| .* | yes |$/p' "$out" | wc -l) + $(grep -c '| yes |$' "$rows" || true) ))
    echo "$held of $total targets hold (with the egress figures)"
    rm -f "$rows"
  else
    echo "egress figures: SKIP (need root for network namespaces)"
  fi
fi
# The agent's tool: a `local_process` call through one `mcp` session beside
# a `run` process of the same request (and bwrap, isolated); MCP=0 skips.
if [ "${FIXED_ONLY:-0}" != 1 ] && [ "${MCP:-1}" != 0 ]; then
  echo
  "${prio[@]}" bash scripts/bench-mcp.sh "$bin"
fi
