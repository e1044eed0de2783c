#!/usr/bin/env bash
# The test suite: unit tests and the integration tests that drive the real
# binary, with the crash-injection points compiled in (a test-only feature;
# release builds never have them). Tests that need root or a kernel feature
# print SKIP loudly when it is missing; CI runs as root and runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
# The interop tests and Python examples use the venv .ci/run makes (they
# say SKIP without it).
if [ -z "${GOVERNED_EXEC_PYTHON:-}" ] && [ -x target/pyenv/bin/python ]; then
  export GOVERNED_EXEC_PYTHON="$PWD/target/pyenv/bin/python"
fi
exec cargo test --locked --all-features -- "$@"
