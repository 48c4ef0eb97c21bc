#!/usr/bin/env bash
# bench/worker/run.sh [--quick] [build-dir] — the worker benchmark (issue 9, SPEC §5 P1 P2 P4 P6,
# RSS). Each cell is one `dispatcher demo --bench` (private PostgreSQL + Redis, the provider stub,
# N workers): cmp-alpha and cmp-bravo hold 25,000 contacts each (50,000 backlogged; cmp-capped,
# ceiling 3, as many). After a warm-up from the first call placed, a FIXED window is measured
# while both are backlogged (it ends sooner, marked backlogged=no, when one has no due contact
# left), then everything stops.
#   full:    1 and 3 workers x 20 and 200 lines x calls of 1 ms, 100 ms and 2 s; warm-up 3 s,
#            window 30 s (12 cells, about 10 minutes)
#   --quick: 1 and 3 workers x 20 and 200 lines x calls of 1 ms and 2 s; 10,000 contacts per
#            campaign, warm-up 2 s, window 8 s (8 cells, 3-4 minutes)
# Writes the table to bench/out/worker-<stamp>.txt (gitignored) and each cell's log (its
# summary, the "bench:" line and PostgreSQL's top statements) next to it. Columns: bench/RESULTS.md, "Worker".
set -euo pipefail
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
build=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$build/dispatcher/dispatcher
[ -x "$bin" ] || { echo "run.sh: $bin not built (meson setup $build -Dbench=true)" >&2; exit 2; }
if [ $quick = 1 ]; then
	per=10000 warm=2 window=8 holds="1 2000"
else
	per=25000 warm=3 window=30 holds="1 100 2000"
fi
out=$root/bench/out; mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
table=$out/worker-$stamp.txt
{
	echo "# bench/worker/run.sh$([ $quick = 1 ] && echo ' --quick') — $(date -u '+%F %T UTC')," \
		"$(nproc) CPUs, load average at start:$(cut -d' ' -f1-3 /proc/loadavg | sed 's/^/ /')"
	echo "# $per contacts in each of cmp-alpha, cmp-bravo (and cmp-capped); warm-up ${warm} s, window ${window} s"
	echo "# ev/call: every EVALSHA per call placed (window); as/adm rel/c take/c oth/c: scripts by" \
		"kind per admitted call over the whole run (the workers' exit lines)"
	printf '%-3s %-5s %-6s %-4s %7s %7s %8s %7s %7s %7s %6s %6s %6s %6s %7s %6s %6s %6s %6s %6s %6s %6s %6s %s\n' \
		w lines hold_ms blog window_s util_% cycles/s p2_n p2_p50 p2_p99 cpu_wk cpu_rd cpu_pg \
		cpu_st ev/call as/adm rel/c take/c oth/c rcmd/c stmt/c rows/c xact/c rss_MiB
} >"$table"
for hold in $holds; do
	for lines in 20 200; do
		for w in 1 3; do
			log=$out/worker-$stamp-w$w-l$lines-h$hold.log
			nice -n 5 "$bin" demo --bench --workers $w --lines $lines --hold-ms "$hold-$hold" \
				--contacts $per --warmup-s $warm --window-s $window --minutes 5 \
				>"$log" 2>&1 || echo "run.sh: demo exited $? (see $log)" >&2
			line=$(grep '^bench: workers' "$log" || true)
			[ -n "$line" ] || { echo "run.sh: no bench line in $log" >&2; continue; }
			v() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
			ms() { awk "BEGIN{v=$1; if (v < 0) print \"-\"; else printf \"%.2f\", v/1000}"; }
			rss=$(v rss_kib | tr ',' '\n' | awk '{printf "%s%.1f", (NR>1 ? "," : ""), $1/1024}')
			p2n=$(v handoff_n)
			if [ "${p2n:-0}" -gt 0 ] 2>/dev/null; then
				p50=$(ms "$(v handoff_p50_us)") p99=$(ms "$(v handoff_p99_us)")
			else
				p50=- p99=-
			fi
			printf '%-3s %-5s %-6s %-4s %7s %7.1f %8s %7s %7s %7s %6s %6s %6s %6s %7s %6s %6s %6s %6s %6s %6s %6s %6s %s\n' \
				$w $lines $hold "$(v backlogged)" "$(v window_s)" \
				"$(awk "BEGIN{print $(v util)*100}")" "$(v cycles_per_s)" "$p2n" "$p50" "$p99" \
				"$(v cpu_worker_per_kcycle)" "$(v cpu_redis_per_kcycle)" \
				"$(v cpu_pg_per_kcycle)" "$(v cpu_stub_per_kcycle)" \
				"$(v evalsha_per_admission)" "$(v admit_scripts_per_admission)" \
				"$(v release_scripts_per_cycle)" "$(v lane_takes_per_cycle)" \
				"$(v other_scripts_per_cycle)" "$(v redis_cmds_per_cycle)" \
				"$(v pg_stmts_per_cycle)" "$(v pg_rows_per_cycle)" "$(v pg_xact_per_cycle)" \
				"$rss" >>"$table"
		done
	done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$table"
cat "$table"
echo "(written to $table; targets: P1 util >= 99 %, P2 p50 <= 1 ms and p99 <= 5 ms," \
	"P4 >= 8,028 cycles/s at 1 ms, P6 as/adm = 1 gate round trip per admission, RSS <= 64 MiB)"
