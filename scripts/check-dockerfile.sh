#!/usr/bin/env bash
# No Docker engine runs here, so check what can be checked: every path the
# Dockerfile copies from the build context exists, and the static binary the
# build stage produces starts and runs a governed command.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
while read -r src; do
  [ -e "$src" ] || { echo "Dockerfile copies missing path: $src" >&2; status=1; }
done < <(awk '/^COPY / && !/--from=/ { for (i = 2; i < NF; i++) print $i }' Dockerfile)
bin=$(bash scripts/build-static.sh)
file "$bin" 2>/dev/null | grep -q 'static' || ldd "$bin" 2>&1 | grep -q 'not a dynamic' || { echo "binary is not static: $bin" >&2; status=1; }
"$bin" --version
exit $status
