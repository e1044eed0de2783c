#!/usr/bin/env bash
# The Python venv the interop tests (securesystemslib's DSSE, Python
# cryptography) and the Python examples use: target/pyenv, from PyPI with
# pinned versions; and the official MCP SDK (`mcp`), whose client drives
# `governed-exec mcp` in the interop test. Made once, reused while it imports what it must.
# .ci/run and scripts/test.sh both call it. Prints the venv's python.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv="$repo/target/pyenv"
if ! "$venv/bin/python" -c 'import securesystemslib.dsse, cryptography, pytest, mcp' 2>/dev/null; then
  echo "pyenv: making $venv (PyPI: securesystemslib, cryptography, pytest, mcp)" >&2
  if ! python3 -m venv --clear "$venv" >&2; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      (apt-get update -qq && apt-get install -y -qq python3-venv) >&2
      python3 -m venv --clear "$venv" >&2
    else
      echo "pyenv: python3 -m venv failed (install python3-venv)" >&2
      exit 1
    fi
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check \
    'securesystemslib==1.6.0' 'cryptography==50.0.2' 'pytest==9.2.0' 'mcp==2.3.0' >&2
fi
echo "$venv/bin/python"
