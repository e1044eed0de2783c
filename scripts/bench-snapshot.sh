#!/usr/bin/env bash
# The cost of the sealed executable snapshot (docs/PERFORMANCE.md, "exec
# exactly the hashed bytes"): hash only vs hash + copy into a sealed memfd,
# for a 35 KiB, a 6 MiB and a 256 MiB executable. Usage: scripts/bench-snapshot.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
echo "snapshot bench, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, kernel $(uname -r)" >&2
cargo bench --locked --bench snapshot -- "${1:-50}"
