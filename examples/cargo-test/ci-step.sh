#!/usr/bin/env bash
# A CI step that wraps `cargo test` with governed-exec, with the --env recipe
# a rustup-managed toolchain needs: the child gets a clean PATH and a fresh
# private HOME, so without it `cargo` is not found, then the rustup proxy
# finds no toolchain ("run rustup default stable"), then no registry cache.
#
#   bash examples/cargo-test/ci-step.sh WORKSPACE [OUT]
#
# WORKSPACE is the crate (examples/cargo-test/crate is a tiny one); OUT gets
# the keys, manifest, state dir and receipt (default WORKSPACE/.governed).
# In a real pipeline step 1 happens once, on a trusted machine, and the
# manifest, goal and approver.pub are committed; see ci/github-actions.yml.
set -euo pipefail
GE=${GE:-governed-exec}
here=$(cd "$(dirname "$0")" && pwd)
ws=$(cd "${1:?usage: ci-step.sh WORKSPACE [OUT]}" && pwd)
out=${2:-$ws/.governed}
mkdir -p "$out"

# Where rustup keeps its toolchains and cargo its registry cache. Inside
# the child HOME is a fresh empty directory, so each must be given
# explicitly. Under rustup the whole toolchain is pinned: the lease names
# the toolchain's own cargo (the path `rustup which cargo` prints, hashed),
# its bin comes first in PATH (so cargo's `rustc` is that toolchain's, not
# a proxy's choice), RUSTUP_TOOLCHAIN names it and RUSTUP_AUTO_INSTALL=0,
# and the write scope leaves RUSTUP_HOME read-only: no governed run can
# install or update a toolchain.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
if command -v rustup >/dev/null && cargo_exe=$(cd "$ws" && rustup which cargo 2>/dev/null); then
  tc_bin=$(dirname "$cargo_exe")
  tc_name=$(basename "$(dirname "$tc_bin")")
  recipe=(--env "PATH=$tc_bin:/usr/local/bin:/usr/bin:/bin"
          --env "RUSTUP_TOOLCHAIN=$tc_name" --env RUSTUP_AUTO_INSTALL=0
          --env "RUSTUP_HOME=$rustup_home" --env "CARGO_HOME=$cargo_home")
else
  cargo_exe=$(command -v cargo)
  recipe=(--env "PATH=$(dirname "$cargo_exe"):/usr/local/bin:/usr/bin:/bin"
          --env "CARGO_HOME=$cargo_home")
fi

# 0. Before the governed run, which is --offline: the registry cache.
(cd "$ws" && "$cargo_exe" fetch --locked)

# 1. Once, by a human: approve exactly this step, kept as code in an
#    approvals file (in a real repository it is committed and reviewed; here
#    it is written with this machine's paths). The approval summary (stderr)
#    says whether cargo is a rustup proxy and which env values it needs.
#    fs_write: writes only in the workspace and cargo's home (its package
#    cache lock); any isolation option also keeps the runner key out of the
#    child's reach, which verify requires (keep OUT outside the workspace).
env_toml=""
for ((i = 1; i < ${#recipe[@]}; i += 2)); do
  kv=${recipe[$i]}
  env_toml+="${env_toml:+, }${kv%%=*} = '${kv#*=}'"
done
cat > "$out/approvals.toml" <<EOF
goal = '$here/goal.json'
workspace = '$ws'
ttl = "1h"
uses = 1
profile = "long"

[[command]]
name = "cargo-test"
run = ['$cargo_exe', "test", "--offline", "--locked"]
env = { $env_toml }
fs_write = ['$cargo_home']
EOF
[ -e "$out/approver.key" ] || "$GE" keygen --out "$out/approver"
"$GE" approve --file "$out/approvals.toml" --manifest "$out/manifest.json" \
  --key "$out/approver.key"
# What a pull request's CI job runs (no key): the file and the signed
# manifest agree, exit 0; a change to either is listed field by field.
"$GE" approve --file "$out/approvals.toml" --manifest "$out/manifest.json" --check

# 2. The pipeline step: headless, bounded, never prompts. Its exit code is
#    cargo's own; keep going to verify and summarise either way.
status=0
"$GE" run --goal "$here/goal.json" --manifest "$out/manifest.json" \
  --trust "$out/approver.pub" --state-dir "$out/state" --receipt "$out/receipt.json" \
  --profile long -- "$cargo_exe" test --offline --locked || status=$?

# 3. What a person reads: the verdict and the receipt's text view.
"$GE" verify --goal "$here/goal.json" --receipt "$out/receipt.json" \
  --trust "$out/state/runner.pub" --state-dir "$out/state" || status=$?
"$GE" receipt show "$out/receipt.json" --format text
exit "$status"
