#!/usr/bin/env bash
# Quick start: build governed-exec and run the main job end to end on the
# shipped example, in a throwaway directory:
#   keygen → approve → run → verify, printing the receipt's text view and
#   the verdict.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# The binary users install: the static release build (scripts/build-static.sh).
bin=$(bash "$repo/scripts/build-static.sh")
work=$(mktemp -d "${TMPDIR:-/tmp}/governed-exec-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$repo/examples/hello/workspace" "$work/workspace"
cp "$repo/examples/hello/goal.json" "$repo/examples/hello/request.json" "$work/"
cd "$work"

echo "== 1. the approver makes a key pair (once)" >&2
"$bin" keygen --out approver

echo "== 2. a human approves exactly this request (summary on stderr)" >&2
# --fs-write-scope: writes only in the workspace; it also keeps the runner's
# key out of the child's reach, so the receipt proves something against it.
"$bin" approve --goal goal.json --workspace workspace --manifest manifest.json \
  --key approver.key --ttl 10m --uses 1 --approver demo --fs-write-scope --request request.json

echo "== 3. the agent / CI step runs it headless; the signed receipt:" >&2
set +e
"$bin" run --goal goal.json --manifest manifest.json --trust approver.pub \
  --state-dir state --receipt receipt.json --request request.json
code=$?
set -e
echo "run exited $code" >&2
# The human view of the signed receipt; `receipt show receipt.json` prints
# the decoded in-toto statement whole (JSON, for jq).
"$bin" receipt show receipt.json --format text

echo "== 4. verify the receipt against the goal (reads the products back)" >&2
"$bin" verify --goal goal.json --receipt receipt.json --trust state/runner.pub --state-dir state
