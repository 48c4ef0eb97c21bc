#!/usr/bin/env bash
# Smoke test of `dispatcher demo` (issue 9, item 10): a 15-second run with two workers must exit
# 0 and print its summary — dialled, 0 duplicates, maximum live within the lines, utilisation,
# Jain's index, the late campaign at its floor, "Result: ok" — and leave no process behind.
# Usage: demo_smoke.sh DISPATCHER
set -uo pipefail
bin=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$bin" demo --minutes 0.25 --workers 2 >"$out" 2>&1 </dev/null
rc=$?
cat "$out"
fail() { echo "demo_smoke: $*"; exit 1; }
[ "$rc" -eq 0 ] || fail "exit $rc, expected 0"
grep -Eq '^  dialled: +[1-9][0-9]* calls' "$out" || fail "no calls dialled"
grep -Eq '^  duplicates: +0$' "$out" || fail "duplicates are not 0"
grep -Eq '^  maximum live, org: +([0-9]|1[0-9]|20) of 20 lines$' "$out" || fail "maximum live above 20"
grep -Eq '^  line utilisation: +[0-9.]+ %' "$out" || fail "no utilisation line"
grep -Eq "^  Jain's fairness index: +[0-9.]+ over" "$out" || fail "no Jain line"
grep -Eq '^  late campaign at floor: +[0-9.]+ s after it joined' "$out" || fail "late campaign never at its floor"
grep -q '^Result: ok$' "$out" || fail "no 'Result: ok'"
# plain lines, not an in-place table, when stdout is not a terminal
grep -q $'\033' "$out" && fail "terminal escapes in non-terminal output"

# --bench: the bench line, with the scripts by kind read from both workers' exit lines (over the
# whole run): every admitted call took at least its one admission script.
"$bin" demo --bench --workers 2 --contacts 2000 --warmup-s 1 --window-s 2 --hold-ms 1-1 \
	--minutes 1 >"$out" 2>&1 </dev/null
rc=$?
grep -E '^bench:|^Result' "$out"
[ "$rc" -eq 0 ] || { cat "$out"; fail "--bench: exit $rc, expected 0"; }
line=$(grep '^bench: workers=' "$out") || fail "--bench: no bench line"
v() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
[ "$(v scripts_workers)" = 2 ] || fail "--bench: the script calls of both workers were not read"
awk -v a="$(v run_admitted)" -v s="$(v run_admit_scripts)" -v t="$(v run_admission_tries)" \
	-v r="$(v admit_scripts_per_admission)" -v l="$(v lane_takes_per_cycle)" \
	'BEGIN { exit !(a > 0 && s >= a && t >= s && r >= 1 && r == sprintf("%.3f", s / a) && l > 0) }' ||
	fail "--bench: admission scripts per admission missing or inconsistent"
echo "demo_smoke: ok"
