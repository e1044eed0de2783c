#!/usr/bin/env bash
# Bounded fuzzing of every target, then each target's coverage of the
# functions it exists for (docs/FUZZING.md says what each one reaches).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default 60, all;
#        0 seconds: only the coverage report of the corpus kept so far)
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

# The functions each target is for (a regex over their paths in the crate).
declare -A focus=(
  [parse_goal]='model::parse_json::Goal'
  [parse_request]='model::parse_json::Request'
  [parse_manifest]='model::parse_json::Manifest'
  [parse_receipt]='receipt::decode_statement'
  [parse_journal]='journal::parse_chain_from'
  [verify_envelope]='verify::(judge_authentic|check_file|cross_check_journal|check_resources|check_network)$'
  [checkpoint]='journal::(checkpoint_bound|checkpoint_trusted|hmac_sha256|hmac_matches|fold_after|Summary::fold|Summary::of)$'
  [pem_key]='sign::(signing|verifying)_key_from_pem'
  [lease]='lease::signature_valid|model::strip_json_whitespace|LeaseWire.*try_from'
  [output_projection]='capture::project_text'
  [git_head]='gate::git::(head|read_inside)'
  [manifest_index]='manifest_index::(load_for|through_index|head_is_canonical|parse_tail|lease_at)'
  [receipt_view]='view::(receipt_text|receipt_markdown|rows_of|wrap)'
  [pg_rows]='pg::check_rows'
  [pg_credentials]='pg::(pgpass_lookup|service_section|PgTarget::parse)$'
  [approvals]='approvals::(parse|entry_at|key_line|header_line)'
)

# A stale lock fails here, not halfway through a build.
cargo metadata --locked --format-version 1 >/dev/null

for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  for seeds in "seeds/$t" "regressions/$t" "../tests/fuzz-regressions/$t"; do
    [ -d "$seeds" ] && cp -n "$seeds"/* "corpus/$t/" 2>/dev/null || true
  done
  [ "$secs" = 0 ] && continue
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

# How often each function whose name matches REGEX ran and how many of its
# lines were reached, from `llvm-cov show` over the crate's functions
# (v0-mangled names, read here: no rustfilt needed); with `lines`, the line
# numbers not reached.
report() { # target regex [lines]
  local t=$1 re=$2
  "$cov" show "target/$triple/coverage/$triple/release/$t" \
    -instr-profile="coverage/$t/coverage.profdata" -name-regex=governed_exec \
    -show-line-counts -use-color=false 2>/dev/null | python3 -c "$report_py" "$re" "${3:-}"
}
report_py=$(cat <<'PY'
import re, sys
want = re.compile(sys.argv[1])
show_lines = len(sys.argv) > 2 and sys.argv[2] == "lines"

def demangle(s):
    """The path of a v0-mangled governed_exec symbol, closures folded into
    their function: enough to name what a target is for."""
    k = s.find("13governed_exec")
    if k < 0:
        return None
    i, out = k + len("13governed_exec"), []
    while i < len(s):
        c = s[i]
        if c in "Bs":
            j = s.find("_", i)
            i = len(s) if j < 0 else j + 1
        elif c.isdigit():
            m = re.match(r"\d+", s[i:])
            n = int(m.group())
            i += len(m.group())
            if i < len(s) and s[i] == "_":
                i += 1
            if n:
                out.append(s[i:i + n])
            i += n
        else:
            i += 1
    return "::".join(out)

fns, name = {}, None
for line in sys.stdin:
    line = line.rstrip("\n")
    if line and not line.startswith(" ") and line.endswith(":") and "|" not in line:
        path = demangle(line[:-1])
        name = path if path and want.search(path) else None
        if name:
            fns.setdefault(name, {})
        continue
    m = re.match(r"\s*(\d+)\|\s*([0-9.]+[kMGTE]?)\|", line)
    if not m or name is None:
        continue
    n, c = int(m.group(1)), m.group(2)
    mult = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "E": 1e18}
    count = float(c[:-1]) * mult[c[-1]] if c[-1] in mult else float(c)
    f = fns[name]
    f[n] = max(f.get(n, 0), count)
# Closures are separate functions in the profile; fold each into the
# function whose name it extends.
merged = {}
for name in sorted(fns, key=len):
    parent = next((p for p in merged if name.startswith(p + "::")), None)
    tgt = merged.setdefault(parent or name, {})
    for n, c in fns[name].items():
        tgt[n] = max(tgt.get(n, 0), c)
if not merged:
    print("   (none of its functions is in the coverage build)")
for name, lines in sorted(merged.items()):
    first = min(lines)
    hit = sorted(n for n, c in lines.items() if c > 0)
    miss = sorted(n for n, c in lines.items() if c == 0)
    print(f"   {name}: ran {int(lines[first])} times, {len(hit)}/{len(lines)} lines")
    if miss and show_lines:
        print(f"     lines not reached: {miss}")
PY
)

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
