#!/usr/bin/env bash
# bench/worker/run.sh [--quick] [build-dir] — the worker benchmark (issue 9, SPEC §5 P1 P4 P6, RSS).
# Runs `dispatcher demo --bench` (private PostgreSQL + Redis, the provider stub, N workers) for
# 1 and 3 workers, 20 lines, calls of 1 ms (throughput) and 100 ms; cmp-alpha and cmp-bravo hold
# 25,000 contacts each (50,000 backlogged; --quick: 2,500 each). Figures from the stub's ground
# truth while backlogged (the window ends when alpha or bravo runs dry). Writes bench/out/worker-*.txt.
set -euo pipefail
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
build=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$build/dispatcher/dispatcher
[ -x "$bin" ] || { echo "run.sh: $bin not built (meson setup $build -Dbench=true)" >&2; exit 2; }
per=25000; [ $quick = 1 ] && per=2500
out=$root/bench/out; mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
table=$out/worker-$stamp.txt
{
echo "# bench/worker/run.sh $* ($(date -u), $(uptime))"
printf '%-7s %-5s %-8s %8s %8s %10s %8s %10s %11s %s\n' workers lines hold_ms completed window_s util_% cycles/s pg_xact/cyc redis_cmd/cyc rss_MiB
} > "$table"
for hold in 1-1 100-100; do
	for w in 1 3; do
		log=$out/worker-$stamp-w$w-h$hold.log
		nice -n 5 "$bin" demo --bench --workers $w --lines 20 --hold-ms $hold \
			--contacts $per --minutes 5 >"$log" 2>&1 || echo "run.sh: demo exited $? (see $log)" >&2
		line=$(grep '^bench:' "$log" || true)
		[ -n "$line" ] || { echo "run.sh: no bench line in $log" >&2; continue; }
		v() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
		rss=$(v rss_kib | tr ',' '\n' | awk '{printf "%s%.1f", (NR>1 ? "," : ""), $1/1024}')
		printf '%-7s %-5s %-8s %8s %8s %10.1f %8s %10s %11s %s\n' $w 20 $hold "$(v completed)" \
			"$(v window_s)" "$(awk "BEGIN{print $(v util)*100}")" "$(v cycles_per_s)" \
			"$(v pg_xact_per_cycle)" "$(v redis_cmds_per_cycle)" "$rss" >> "$table"
	done
done
cat "$table"
echo "(written to $table; targets: P1 util >= 99 %, P4 >= 8,028 cycles/s, RSS <= 64 MiB)"
