#!/usr/bin/env bash
# The static release binary is reproducible: two clones of this checkout, at
# paths of different lengths, each built by scripts/build-static.sh into its
# own target dir, give the same SHA-256. Prints both digests; fails when
# they differ (and then names the first strings that differ). The cargo
# registry (CARGO_HOME) is shared: its sources are the same bytes however
# they got there, and build-static.sh rewrites its path anyway.
#
# What is compared is HEAD (a clone takes the committed tree): commit first.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/governed-exec-repro.XXXXXX")
trap 'rm -rf "$work"' EXIT
a="$work/a"
b="$work/a-much-longer-path-for-the-second-clone/b"
mkdir -p "$(dirname "$b")"
git clone -q --no-hardlinks "$repo" "$a"
git clone -q --no-hardlinks "$repo" "$b"
start=$(date +%s)
bin_a=$(cd "$a" && CARGO_TARGET_DIR="$a/target" bash scripts/build-static.sh)
# A later build: nothing in the binary may depend on when it was made.
sleep 1
bin_b=$(cd "$b" && CARGO_TARGET_DIR="$b/target-of-b" bash scripts/build-static.sh)
sum_a=$(sha256sum "$bin_a" | cut -d' ' -f1)
sum_b=$(sha256sum "$bin_b" | cut -d' ' -f1)
echo "$sum_a  clone 1 ($a)"
echo "$sum_b  clone 2 ($b)"
echo "check-reproducible: two release builds in $(($(date +%s) - start))s" >&2
if [ "$sum_a" != "$sum_b" ]; then
  echo "check-reproducible: the two builds differ; strings in one and not the other:" >&2
  diff <(strings -n 8 "$bin_a" | sort -u) <(strings -n 8 "$bin_b" | sort -u) | head -20 >&2 || true
  exit 1
fi
echo "check-reproducible: same SHA-256 from both clones"
