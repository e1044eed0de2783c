#!/usr/bin/env bash
# The integration suite where a container entrypoint runs: inside a
# container of a FROM-scratch image (Debian's static busybox, the host's
# shared libraries mounted read-only for the test binary, nothing else), as
# uid 1000, under Docker's defaults (its seccomp profile, no
# CAP_SYS_ADMIN, read-only cgroupfs). Tests that need what such a container
# lacks (bash, python3, root, a PostgreSQL cluster, Docker itself) say SKIP
# and why; everything else must pass there as it does on the host.
#
#   scripts/test-in-container.sh        # after scripts/test.sh (reuses its build)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v docker >/dev/null || ! docker version >/dev/null 2>&1; then
  echo "*** SKIP test-in-container: no Docker daemon reachable ***" >&2
  exit 0
fi
bb=""
for p in /bin/busybox /usr/bin/busybox; do
  if [ -x "$p" ] && file "$p" 2>/dev/null | grep -q 'statically linked'; then bb=$p; break; fi
done
[ -n "$bb" ] || { echo "test-in-container: needs Debian's busybox-static" >&2; exit 1; }
it=$(cargo test --locked --all-features --test it --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "it" and m.get("executable"):
        print(m["executable"])' | tail -1)
[ -x "$it" ] || { echo "test-in-container: no test binary built" >&2; exit 1; }
ctx=$(mktemp -d); scratch=$(mktemp -d)
tag="governed-exec-suite:$$"
cleanup() { docker image rm -f "$tag" >/dev/null 2>&1 || true; rm -rf "$ctx" "$scratch"; }
trap cleanup EXIT
cp "$bb" "$ctx/busybox"
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/busybox", "sh", "-c", "mkdir -p /tmp /usr/local/bin && chmod 1777 /tmp"]
ENV PATH=/usr/local/bin:/bin
DOCKERFILE
docker build -q --label governed-exec-test=1 -t "$tag" "$ctx" >/dev/null
chmod 1777 "$scratch"
libs=(-v /usr/lib:/usr/lib:ro -v /usr/lib:/lib:ro)
[ -d /usr/lib64 ] && libs+=(-v /usr/lib64:/lib64:ro)
echo "test-in-container: $(basename "$it") as uid 1000 in a FROM-scratch container" >&2
docker run --rm --user 1000:1000 -e TMPDIR="$scratch" -e HOME="$scratch" \
  -e GOVERNED_EXEC_STATE_DIR="$scratch/state" -e XDG_STATE_HOME="$scratch/xdg" \
  -v "$scratch:$scratch" -v "$PWD:$PWD:ro" "${libs[@]}" -w "$PWD" \
  --entrypoint "$it" "$tag" --test-threads 2
