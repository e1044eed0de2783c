#!/usr/bin/env bash
# The test suite: unit tests and the integration tests that drive the real
# binary, with the crash-injection points compiled in (a test-only feature;
# release builds never have them). Tests that need root or a kernel feature
# print SKIP loudly when it is missing; CI runs as root and runs them, with
# GOVERNED_EXEC_REQUIRE=all, which turns any SKIP into a failure (a comma
# list of words instead, e.g. root,docker,postgres,python,git, fails only
# the skips whose reason names one).
#
# The PostgreSQL ledger tests need a server: unless the caller already
# exported one (GOVERNED_EXEC_TEST_PG_PORT …), a throwaway cluster is started
# here by scripts/pg-test-cluster.sh (which installs Debian's postgresql
# package when root and missing) and stopped on exit. Without one, those
# tests SKIP loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
# Hermetic: the tests write only temporary directories. A test that forgot
# --state-dir would otherwise write the user's real
# ~/.local/state/governed-exec (revocations, keys, journals): every default
# points into this run's own temporary directory, removed at the end, and
# so do the Docker images this run builds (labelled with its id; other
# suites running beside it keep theirs).
run_id="$$-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/governed-exec-test.XXXXXX")
export GOVERNED_EXEC_TEST_RUN="$run_id"
export GOVERNED_EXEC_STATE_DIR="$scratch/state"
export XDG_STATE_HOME="$scratch/xdg-state"
# The tests' own temporary directories (the fuzz targets' among them) go
# there too, so a run that is killed leaves nothing in the system's. Like
# /tmp it is world-writable and sticky, and the scratch dir above it
# traversable, because tests run children as other uids (65534, 1000)
# in directories made there.
sys_tmp=${TMPDIR:-/tmp}
chmod 0711 "$scratch"
mkdir -m 1777 "$scratch/tmp"
export TMPDIR="$scratch/tmp"
pgdir=""
cleanup() {
  if [ -n "$pgdir" ]; then bash scripts/pg-test-cluster.sh stop "$pgdir" || true; fi
  if command -v docker >/dev/null && docker version >/dev/null 2>&1; then
    docker image ls -q --filter "label=governed-exec-test-run=$run_id" | sort -u \
      | xargs -r docker image rm -f >/dev/null 2>&1 || true
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP
# The interop tests and Python examples use the venv .ci/run makes: made
# here too (PyPI), so the full set runs, not three SKIPs.
if [ -z "${GOVERNED_EXEC_PYTHON:-}" ]; then
  if py=$(bash scripts/pyenv.sh); then
    export GOVERNED_EXEC_PYTHON="$py"
  else
    echo "*** SKIP: no Python venv could be made; the interop tests will SKIP ***" >&2
    [ -z "${GOVERNED_EXEC_REQUIRE:-}" ] || { echo "test.sh: GOVERNED_EXEC_REQUIRE is set: a missing venv is a failure" >&2; exit 1; }
  fi
fi
if [ -z "${GOVERNED_EXEC_TEST_PG_PORT:-}" ]; then
  pgdir=$(mktemp -d "$sys_tmp/governed-exec-pg.XXXXXX")
  rmdir "$pgdir"
  if pgenv=$(bash scripts/pg-test-cluster.sh start "$pgdir"); then
    eval "$pgenv"
    echo "test.sh: PostgreSQL test cluster on 127.0.0.1:$GOVERNED_EXEC_TEST_PG_PORT" >&2
  else
    pgdir=""
    echo "*** SKIP: no PostgreSQL test cluster could be started; the PostgreSQL ledger tests will SKIP ***" >&2
    [ -z "${GOVERNED_EXEC_REQUIRE:-}" ] || { echo "test.sh: GOVERNED_EXEC_REQUIRE is set: a missing PostgreSQL cluster is a failure" >&2; exit 1; }
  fi
fi
cargo test --locked --workspace --all-features -- "$@"
