#!/usr/bin/env bash
# The test suite: unit tests and the integration tests that drive the real
# binary, with the crash-injection points compiled in (a test-only feature;
# release builds never have them). Tests that need root or a kernel feature
# print SKIP loudly when it is missing; CI runs as root and runs them.
#
# The PostgreSQL ledger tests need a server: unless the caller already
# exported one (GOVERNED_EXEC_TEST_PG_PORT …), a throwaway cluster is started
# here by scripts/pg-test-cluster.sh (which installs Debian's postgresql
# package when root and missing) and stopped on exit. Without one, those
# tests SKIP loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
# The interop tests and Python examples use the venv .ci/run makes (they
# say SKIP without it).
if [ -z "${GOVERNED_EXEC_PYTHON:-}" ] && [ -x target/pyenv/bin/python ]; then
  export GOVERNED_EXEC_PYTHON="$PWD/target/pyenv/bin/python"
fi
if [ -z "${GOVERNED_EXEC_TEST_PG_PORT:-}" ]; then
  pgdir=$(mktemp -d "${TMPDIR:-/tmp}/governed-exec-pg.XXXXXX")
  rmdir "$pgdir"
  if pgenv=$(bash scripts/pg-test-cluster.sh start "$pgdir"); then
    eval "$pgenv"
    trap 'bash scripts/pg-test-cluster.sh stop "$pgdir"' EXIT
    trap 'exit 143' TERM INT HUP
    echo "test.sh: PostgreSQL test cluster on 127.0.0.1:$GOVERNED_EXEC_TEST_PG_PORT" >&2
  else
    echo "*** SKIP: no PostgreSQL test cluster could be started; the PostgreSQL ledger tests will SKIP ***" >&2
  fi
fi
cargo test --locked --all-features -- "$@"
