#!/usr/bin/env bash
# Benchmarks (not timed tests): builds the static release binary and prints
# each target's figure with its ratio against the comparison command,
# measured pairwise and interleaved in one run. Usage: scripts/bench.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(bash scripts/build-static.sh)
echo "governed-exec bench, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, kernel $(uname -r), binary $bin" >&2
cargo bench --locked --bench governed -- "$bin" "${1:-200}"
