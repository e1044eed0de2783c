#!/usr/bin/env bash
# The shipped Dockerfile builds from exactly the files it copies, and the
# binary it builds works as governed-exec's PID 1 in a container.
#
# What is real here and what is not: no image can be pulled on the project's
# machines, so neither the Dockerfile's `rust:1-bookworm` build stage nor its
# `debian:bookworm-slim` runtime stage can be built with `docker build`
# (unless both images are already present: then this script does exactly
# that). Instead it
#   1. stages a directory holding ONLY the paths the Dockerfile COPYs into the
#      build stage (target/dockerfile-context/; a path the Dockerfile forgets
#      is missing there, and the build fails as it would in `docker build`),
#   2. runs the build stage's RUN step in it (scripts/build-static.sh, with
#      this machine's toolchain instead of the image's), and
#   3. with a Docker daemon, builds an image FROM scratch with that static
#      binary and busybox-static, and runs keygen → approve → run → verify in
#      it with governed-exec as PID 1 under Docker's defaults.
# `check-dockerfile.sh binary` does 1 only, then prints the path of the
# static binary scripts/build-static.sh builds from the repository (the
# Docker tests use it: the build the user, the demo and the benches already
# made, not another one).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
ctx="$repo/target/dockerfile-context"

# The build stage: from its FROM line to the next FROM.
build_stage=$(awk '/^FROM /{n++} n==1' Dockerfile)
sources=$(awk '/^COPY / && !/--from=/ { for (i = 2; i < NF; i++) print $i }' <<<"$build_stage")
rm -rf "$ctx"
mkdir -p "$ctx"
for src in $sources; do
  [ -e "$src" ] || { echo "Dockerfile copies a missing path: $src" >&2; exit 1; }
  # -p keeps mtimes, so cargo does not rebuild an unchanged tree.
  cp -rp --parents "$src" "$ctx/"
done
run_step=$(awk '/^RUN / { sub(/^RUN /, ""); print; exit }' <<<"$build_stage")
[ -n "$run_step" ] || { echo "the Dockerfile's build stage has no RUN step" >&2; exit 1; }
if [ "${1:-}" = binary ]; then
  # The Docker tests' binary: the same static build the README, the demo
  # and scripts/bench.sh make from the repository (the staged context was
  # still checked above for every path the Dockerfile copies). Building it
  # from $ctx instead would rebuild the release binary each time it
  # alternates with a build from the repository (cargo fingerprints the
  # source path); the full check below builds from $ctx.
  bin=$(bash scripts/build-static.sh)
  echo "$bin"
  exit 0
fi
echo "== building from $ctx, which holds only: $(echo $sources)" >&2
# The RUN step, minus its copy into the image's root.
(cd "$ctx" && CARGO_TARGET_DIR="$repo/target" bash scripts/build-static.sh >/dev/null)
bin=$(cd "$ctx" && CARGO_TARGET_DIR="$repo/target" bash scripts/build-static.sh 2>/dev/null)
if ! file "$bin" 2>/dev/null | grep -q 'static' && ! ldd "$bin" 2>&1 | grep -q 'not a dynamic'; then
  echo "binary is not static: $bin" >&2
  exit 1
fi
"$bin" --version

if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
  echo "*** SKIP the image check: no Docker daemon reachable ***" >&2
  exit 0
fi
tag="governed-exec-dockerfile-check:$$"
if docker image inspect rust:1-bookworm debian:bookworm-slim >/dev/null 2>&1; then
  echo "== docker build of the shipped Dockerfile" >&2
  cp Dockerfile "$ctx/Dockerfile"
  docker build -q -t "$tag" "$ctx" >/dev/null
else
  echo "== the base images cannot be pulled here: image FROM scratch with the same binary and busybox-static" >&2
  bb=$(command -v busybox || true)
  file "$bb" 2>/dev/null | grep -q 'statically linked' || { echo "busybox-static is not installed" >&2; exit 1; }
  img=$(mktemp -d)
  trap 'rm -rf "$img"' EXIT
  cp "$bin" "$img/governed-exec"
  cp "$bb" "$img/busybox"
  cat > "$img/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/busybox", "sh", "-c", "mkdir -p /tmp /work /var/lib/governed-exec /usr/local/bin && chmod 1777 /tmp"]
COPY governed-exec /usr/local/bin/governed-exec
ENV PATH=/usr/local/bin:/bin GOVERNED_EXEC_STATE_DIR=/var/lib/governed-exec
VOLUME ["/var/lib/governed-exec"]
WORKDIR /work
ENTRYPOINT ["/usr/local/bin/governed-exec"]
CMD ["--help"]
DOCKERFILE
  docker build -q -t "$tag" "$img" >/dev/null
fi
cleanup_image() { docker image rm -f "$tag" >/dev/null 2>&1 || true; }
trap 'cleanup_image; rm -rf "${img:-}"' EXIT
docker run --rm "$tag" --version
docker run --rm "$tag" doctor >&2
# The documented use: state on a volume, governed-exec as PID 1, a child of
# another uid (RLIMIT_NPROC binds it, and the root-owned key is out of its
# reach, which `verify` requires).
docker run --rm --entrypoint /bin/sh "$tag" -c '
  set -e
  mkdir -p /work/ws && chmod 777 /work/ws && cd /work
  echo "{\"schema\":\"governed-exec/goal/v1\",\"id\":\"check\",\"revision\":1,\"criteria\":[{\"kind\":\"exit_code\",\"equals\":0},{\"kind\":\"file\",\"path\":\"out.txt\",\"contains\":\"ok\"}]}" > goal.json
  governed-exec keygen --out approver >/dev/null
  governed-exec approve --goal goal.json --workspace ws --manifest manifest.json --key approver.key \
    --as-user 1000 -- sh -c "echo ok > out.txt" 2>/dev/null >/dev/null
  governed-exec run --goal goal.json --manifest manifest.json --trust approver.pub \
    --receipt receipt.json -- sh -c "echo ok > out.txt"
  governed-exec verify --goal goal.json --receipt receipt.json --trust /var/lib/governed-exec/runner.pub
'
echo "== the image runs an approved command and its receipt verifies" >&2
