#!/usr/bin/env bash
# A Python project's pytest, run in its venv under governed-exec.
#
#   bash examples/pytest-venv/run.sh WORKSPACE [OUT]
#
# WORKSPACE is the project (examples/pytest-venv/project is a tiny one).
# VENV names a venv that has pytest (default WORKSPACE/.venv, created with
# `python3 -m venv` and `pip install pytest` when missing). OUT gets the
# keys, manifest, state dir and receipt (default WORKSPACE/.governed).
#
# The child's environment is clean: a venv is not "activated" in it. The
# recipe is the venv's interpreter by absolute path plus
#   --env PATH=VENV/bin:… --env VIRTUAL_ENV=VENV
# (entry points and subprocesses then find the venv). The approval summary
# warns when these are missing. The lease pins the interpreter's bytes, not
# the venv's packages.
set -euo pipefail
GE=${GE:-governed-exec}
here=$(cd "$(dirname "$0")" && pwd)
ws=$(cd "${1:?usage: run.sh WORKSPACE [OUT]}" && pwd)
out=${2:-$ws/.governed}
mkdir -p "$out"
venv=${VENV:-$ws/.venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q pytest
fi
venv=$(cd "$venv" && pwd)
request=("$venv/bin/python" -m pytest -q -p no:cacheprovider --junitxml=report.xml)

# 1. Once, by a human: approve exactly this command, with the venv recipe.
[ -e "$out/approver.key" ] || "$GE" keygen --out "$out/approver"
"$GE" approve --goal "$here/goal.json" --workspace "$ws" --manifest "$out/manifest.json" \
  --key "$out/approver.key" --ttl 1h --uses 1 \
  --env "PATH=$venv/bin:/usr/local/bin:/usr/bin:/bin" --env "VIRTUAL_ENV=$venv" \
  --fs-write-scope -- "${request[@]}"

# 2. The run: headless and bounded; pytest's exit code comes back as ours.
status=0
"$GE" run --goal "$here/goal.json" --manifest "$out/manifest.json" \
  --trust "$out/approver.pub" --state-dir "$out/state" --receipt "$out/receipt.json" \
  -- "${request[@]}" || status=$?

# 3. The goal also wants pytest's JUnit report, read back from disk.
"$GE" verify --goal "$here/goal.json" --receipt "$out/receipt.json" \
  --trust "$out/state/runner.pub" --state-dir "$out/state" || status=$?
"$GE" receipt show "$out/receipt.json" --format text
exit "$status"
