#!/usr/bin/env bash
# Bounded fuzzing of every parser and of verify on arbitrary envelopes.
# Needs the nightly toolchain and cargo-fuzz (cargo install cargo-fuzz).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
# Crash inputs land in fuzz/artifacts/<target>/; copy each into
# tests/fuzz-regressions/<target>/ so `cargo test` replays it for good.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
for t in parse_goal parse_request parse_manifest parse_receipt parse_journal verify_envelope \
  checkpoint pem_key lease output_projection; do
  mkdir -p "corpus/$t"
  for seeds in "seeds/$t" "../tests/fuzz-regressions/$t"; do
    [ -d "$seeds" ] && cp -n "$seeds"/* "corpus/$t/" 2>/dev/null || true
  done
  echo "== $t (${secs}s)"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1 2>&1 \
    | grep -E 'stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY|ERROR|crash-' || true
done
