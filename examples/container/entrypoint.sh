#!/bin/sh
# Container entrypoint for one governed step: the container's command line
# (CMD, or what `docker run IMAGE ...` appends) is the request part of
# `governed-exec run`, e.g. `--request /work/request.json` or
# `-- ./build.sh --report out/report.txt`.
#
# `exec` matters: governed-exec itself becomes PID 1, so it reaps every
# orphan of the step and turns `docker stop`'s SIGTERM into a
# cancelled_reaped receipt (exit 143) with every process confirmed gone. A
# shell left as PID 1 would ignore SIGTERM (PID 1 has no default action),
# docker would SIGKILL it after its grace, and no receipt would be written.
set -eu
GE_BIN=${GE_BIN:-/usr/local/bin/governed-exec}
GE_GOAL=${GE_GOAL:-/work/ci/goal.json}
GE_MANIFEST=${GE_MANIFEST:-/work/ci/manifest.json}
GE_TRUST=${GE_TRUST:-/work/ci/approver.pub}
GE_RECEIPT=${GE_RECEIPT:-/work/receipt.json}
# The state dir (runner key, journal) comes from GOVERNED_EXEC_STATE_DIR,
# a volume, so an unknown outcome survives a restart and is never replayed.
exec "$GE_BIN" run --goal "$GE_GOAL" --manifest "$GE_MANIFEST" --trust "$GE_TRUST" \
  --receipt "$GE_RECEIPT" --stream "$@"
