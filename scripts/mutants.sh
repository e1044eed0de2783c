#!/usr/bin/env bash
# Mutation testing of the decision modules: for each module, cargo-mutants changes one decision at a time
# (a comparison, a `&&`, a negation, a function's result) and runs the tests
# that exercise that module; a mutant no test notices is a decision that
# could be wrong with every test green. Prints caught/viable per module
# against the 90 % target. Run it before a release.
#
#   bash scripts/mutants.sh                 every module below
#   bash scripts/mutants.sh journal verify  only those (names as below)
#   MUTANTS_RE='check_rows' bash scripts/mutants.sh pg   one function
#
# Needs `cargo install cargo-mutants --locked`. Each module runs with the
# focused tests given beside it (the unit tests where its rules live, and
# the integration tests that drive them through the binary), not the whole
# suite: that is what keeps a run short enough to do before every release.
# A survivor here may still be caught elsewhere in the suite; the fix is a
# test where the rule lives, not a longer filter.
#
# Mutants are applied in place, one at a time (cargo-mutants restores the
# file after each, and on Ctrl-C), so builds are incremental: leave the
# tree alone while it runs. MUTANTS_COPY=1 mutates a copy instead (a full
# build per module; safe to keep editing). Reports are in
# target/mutants/<module>/mutants.out/ (missed.txt lists the survivors).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-mutants >/dev/null || {
  echo "mutants.sh: cargo-mutants is not installed: cargo install cargo-mutants --locked" >&2
  exit 2
}

# name | file | mutant-name regex (empty: every function) | test targets -- name filters
# The journal's regex keeps to its decisions (checkpoint, invariants, the
# audit, the fold), not the file plumbing the integration suite covers.
modules=(
  "admission|crates/runner/src/gate/admission.rs||--lib --test it -- gate::admission gate::lease_rules gate::portable gate::identity_drift"
  "lease|crates/runner/src/gate/lease.rs||--lib -- gate::lease"
  "journal|crates/ledger/src/journal.rs|check_checkpoint|checkpoint_bound|checkpoint_trusted|load_checkpoint|record_ending_at|invariant_violations|audit|summary_difference|Summary::fold|hmac|--lib -- journal::"
  "verify|crates/evidence/src/verify.rs||--lib -- verify::"
  "goal|crates/model/src/goal.rs||--lib -- goal::"
  "limits|crates/model/src/limits.rs||--lib -- limits::"
  "ledger|crates/ledger/src/lib.rs||--lib -- tests::"
  "local|crates/ledger/src/local.rs||--lib --test it -- ledger:: gate::portable::a_local_ledger"
  "process_limit|crates/runner/src/process/process_limit.rs||--lib -- process::process_limit"
  "manifest_index|crates/runner/src/gate/manifest_index.rs||--lib --test it -- gate::manifest_index"
  "pg|crates/ledger/src/pg/*.rs||--lib --test it -- ledger::pg"
)

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w
  for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

place=(--in-place)
[ "${MUTANTS_COPY:-}" = 1 ] && place=(-j 1)
if [ "${place[0]}" = --in-place ] && ! git diff --quiet -- src crates; then
  echo "mutants.sh: src/ or crates/ has uncommitted changes; commit them or use MUTANTS_COPY=1" >&2
  exit 2
fi

# A mutant that breaks a proptest makes proptest save its "regression"
# beside the source; those are the mutant's, not the code's.
keep_regressions=0
[ -e proptest-regressions ] && keep_regressions=1
summary=()
status=0
for m in "${modules[@]}"; do
  # The journal's regex holds `|`: the name is first, the file second, the
  # test args last (after the final `|`), the regex what is between.
  name=${m%%|*}
  rest=${m#*|}
  file=${rest%%|*}
  rest=${rest#*|}
  args=${rest##*|}
  re=${rest%|*}
  [ "$re" = "$rest" ] && re=""
  selected "$name" || continue
  [ -n "${MUTANTS_RE:-}" ] && re=$MUTANTS_RE
  out="target/mutants/$name"
  mkdir -p "$out"
  echo "== $name: $file${re:+ (functions: $re)}; tests: cargo test $args" >&2
  filter=()
  [ -n "$re" ] && filter=(--re "$re")
  # The test targets go to every cargo call (so a mutant builds only the
  # lib's tests, or those and tests/it, not every target); the name
  # filters only to the test binaries.
  targets=()
  for t in ${args%% -- *}; do targets+=("--cargo-arg=$t"); done
  # The integration tests (`--test it`) are the binary package's, not the
  # mutated crate's: test the workspace then, else only the mutated crate.
  case " ${args%% -- *} " in
    *" --test it "*) targets+=(--test-workspace=true) ;;
  esac
  # shellcheck disable=SC2086 # the filters are words
  cargo mutants "${place[@]}" --all-features --no-shuffle --colors never \
    --minimum-test-timeout 60 -f "$file" "${filter[@]}" "${targets[@]}" -o "$out" \
    -- -- ${args#* -- } >&2 || true
  d="$out/mutants.out"
  count() {
    local n
    n=$(grep -c . "$d/$1.txt" 2>/dev/null) || true
    echo "${n:-0}"
  }
  caught=$(( $(count caught) + $(count timeout) ))
  missed=$(count missed)
  viable=$(( caught + missed ))
  if [ "$viable" -eq 0 ]; then
    summary+=("$(printf '%-15s no viable mutants (see %s)' "$name" "$d")")
    status=1
    continue
  fi
  pct=$(( 100 * caught / viable ))
  mark=ok
  [ "$pct" -lt 90 ] && { mark="BELOW 90 %"; status=1; }
  summary+=("$(printf '%-15s %4d/%-4d caught %3d %%  %s' "$name" "$caught" "$viable" "$pct" "$mark")")
done

[ "$keep_regressions" = 1 ] || rm -rf proptest-regressions

echo
echo "caught (or timed out) / viable mutants, target 90 %:"
printf '  %s\n' "${summary[@]}"
echo "survivors: target/mutants/<module>/mutants.out/missed.txt"
exit $status
