#!/usr/bin/env bash
# The test suite: unit tests and the integration tests that drive the real
# binary, with the crash-injection points compiled in (a test-only feature;
# release builds never have them). Tests that need root or a kernel feature
# print SKIP loudly when it is missing; CI runs as root and runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --locked --all-features -- "$@"
