#!/usr/bin/env bash
# Bounded fuzzing of every target, then each target's coverage of the
# functions it exists for (docs/FUZZING.md says what each one reaches).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default 60, all)
#   FUZZ_COVERAGE=0   skip the coverage report
#   FUZZ_NICE=N       niceness of the fuzzing processes (default 10)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). It runs on the
# stable toolchain: RUSTC_BOOTSTRAP=1 unlocks the -Z flags cargo-fuzz
# passes. The coverage report needs llvm-cov and llvm-profdata of the same
# LLVM as rustc (`rustup component add llvm-tools`); without them it says
# so and reports nothing. No sanitizer (`-s none`): all `unsafe` is in
# src/os/sys.rs, which no target reaches; debug assertions (overflow
# checks) stay on.
#
# Crash inputs land in fuzz/artifacts/<target>/; copy each into
# fuzz/regressions/<target>/ so `cargo test --lib` replays it for good
# (testing::fuzzing::tests).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
all=(parse_goal parse_request parse_manifest parse_receipt parse_journal verify_envelope
  checkpoint pem_key lease output_projection git_head manifest_index receipt_view pg_rows
  pg_credentials approvals)
targets=("${@:-${all[@]}}")
export RUSTC_BOOTSTRAP=1
nice_n=${FUZZ_NICE:-10}

# The functions each target is for (llvm-cov -name-regex over the
# demangled names).
declare -A focus=(
  [parse_goal]='goal::from_bytes'
  [parse_request]='model::parse_json'
  [parse_manifest]='model::parse_json'
  [parse_receipt]='receipt::decode_statement'
  [parse_journal]='journal::parse_chain_from'
  [verify_envelope]='verify::(judge_authentic|check_file|cross_check_journal|check_resources|check_network)'
  [checkpoint]='journal::(checkpoint_bound|checkpoint_trusted|hmac_sha256|hmac_matches|fold_after|Summary>::fold)'
  [pem_key]='sign::(signing|verifying)_key_from_pem'
  [lease]='lease::signature_valid|model::strip_json_whitespace|LeaseWire.*try_from'
  [output_projection]='capture::project_text'
  [git_head]='gate::git::(head|read_inside)'
  [manifest_index]='manifest_index::(load_for|through_index|head_is_canonical|parse_tail|lease_at)'
  [receipt_view]='view::(receipt_text|receipt_markdown|rows_of|wrap)'
  [pg_rows]='pg::check_rows'
  [pg_credentials]='pg::(pgpass_lookup|service_section|PgTarget>::parse)'
  [approvals]='approvals::(parse|entry_at|key_line|header_line)'
)

# A stale lock fails here, not halfway through a build.
cargo metadata --locked --format-version 1 >/dev/null

for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  for seeds in "seeds/$t" "regressions/$t" "../tests/fuzz-regressions/$t"; do
    [ -d "$seeds" ] && cp -n "$seeds"/* "corpus/$t/" 2>/dev/null || true
  done
  echo "== $t (${secs}s)"
  nice -n "$nice_n" cargo fuzz run -s none "$t" "corpus/$t" -- \
    -max_total_time="$secs" -print_final_stats=1 2>&1 \
    | grep -E 'stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY|panicked|ERROR|crash-|Test unit written' || true
done

[ "${FUZZ_COVERAGE:-1}" = 0 ] && exit 0

bin_dir="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
cov="$bin_dir/llvm-cov"
if [ ! -x "$cov" ] || [ ! -x "$bin_dir/llvm-profdata" ]; then
  echo "coverage: no llvm-cov/llvm-profdata beside rustc ($bin_dir); rustup component add llvm-tools"
  exit 0
fi
triple=$(rustc -vV | sed -n 's/^host: //p')

# Lines of function NAME covered, from `llvm-cov show` of that function:
# "NAME: ran N times, L/M lines" and, with --lines, the line numbers missed.
report() { # target regex
  local t=$1 re=$2
  local bin="target/$triple/coverage/$triple/release/$t"
  local prof="coverage/$t/coverage.profdata"
  "$cov" show "$bin" -instr-profile="$prof" -name-regex="$re" -show-line-counts \
    -use-color=false 2>/dev/null | python3 -c '
import re, sys
fns = {}
name = None
for line in sys.stdin:
    line = line.rstrip("\n")
    if line and not line.startswith(" ") and line.endswith(":") and "|" not in line:
        name = re.sub(r"::h[0-9a-f]{16}:$|:$", "", line)
        name = re.sub(r"^.*?(governed_exec::)", r"\1", name)
        fns.setdefault(name, [None, [], []])
        continue
    m = re.match(r"\s*(\d+)\|\s*([0-9.kMGE]*)\|", line)
    if not m or name is None or m.group(2) == "":
        continue
    n, c = int(m.group(1)), m.group(2)
    count = float(c[:-1]) * {"k": 1e3, "M": 1e6, "G": 1e9, "E": 1e18}[c[-1]] if c[-1] in "kMGE" else float(c)
    f = fns[name]
    if f[0] is None:
        f[0] = count
    (f[1] if count > 0 else f[2]).append(n)
if not fns:
    print("   (none of its functions were found in the coverage build)")
for name, (ran, hit, miss) in sorted(fns.items()):
    total = len(hit) + len(miss)
    short = name.replace("governed_exec::", "")
    print(f"   {short}: ran {int(ran or 0)} times, {len(hit)}/{total} lines")
    if miss and sys.argv[1] == "lines":
        print(f"     lines not reached: {miss}")
' "${3:-}"
}

echo
echo "== coverage of the functions each target is for (corpus replay, llvm-cov)"
for t in "${targets[@]}"; do
  nice -n "$nice_n" cargo fuzz coverage -s none "$t" "corpus/$t" >/dev/null 2>&1 || {
    echo "$t: coverage build or replay failed"
    continue
  }
  echo "$t:"
  case $t in
    verify_envelope) report "$t" "${focus[$t]}" lines ;;
    *) report "$t" "${focus[$t]}" ;;
  esac
done
