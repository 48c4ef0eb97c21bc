#!/usr/bin/env bash
# bench/api/run.sh [build-dir] [duration] [connections] — the API benchmark (issue 10, SPEC P7).
# Starts a private PostgreSQL and Redis (bench/api/services), migrates, creates an organisation
# (20 lines, rate limits raised to 1e9 a minute so the limiter measures its cost, not its
# refusals; pending ceiling 1e9), two campaigns and a key with `dispatcher admin`, starts one
# `dispatcher run` (DISPATCHER_ROLE=api: nothing is dialled) and runs wrk on:
#   GET /api/v1/campaigns/cmp-a/capacity      (P7: >= 10,000 req/s, p99 <= 5 ms)
#   GET /v2/user/me
#   POST /v2/batches with 1,000-contact bodies
# then imports a 250,000-row CSV through POST /v2/batches/upload and a 250,000-contact JSON body
# through POST /v2/batches with curl, and reports rows/s and the worker's peak RSS (VmHWM) for
# each (a fresh worker per import, so each peak is its route's).
# Writes bench/out/api-<stamp>.txt; the latest figures go to bench/RESULTS.md ("API").
# Where the CPU of one route goes, per process: bench/api/cpu.sh.
set -euo pipefail
build=${1:-build}
dur=${2:-10s}
conns=${3:-16}
root=$(cd "$(dirname "$0")/../.." && pwd)
me=run.sh
. "$root/bench/api/setup.sh"
export CAMPAIGN=cmp-a
out=$root/bench/out; mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
table=$out/api-$stamp.txt
hwm_kib() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$wpid/status"; }

start_worker
url=http://127.0.0.1:$port
{
	echo "# bench/api/run.sh — $(date -u '+%F %T UTC'), commit $(git -C "$root" rev-parse --short HEAD)," \
		"$(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# wrk -t1 -c$conns -d$dur (batches: -c1); one worker (DISPATCHER_ROLE=api)"
} >"$table"
bench() { # name path script [connections]
	local name=$1 path=$2 script=$3 c=${4:-$conns}
	if [ "$script" = get.lua ]; then # one request first: what the benchmark is measuring
		echo "# $name: $(curl -s -w ' -> HTTP %{http_code}' -H "Authorization: Bearer $API_KEY" \
			"$url$path" | head -c 400)" >>"$table"
	fi
	wrk -t1 -c"$c" -d"$dur" --latency -s "$root/bench/api/$script" "$url$path" >"$tmp/wrk.txt" 2>&1
	local rps lat
	rps=$(sed -n 's/^Requests\/sec:[[:space:]]*//p' "$tmp/wrk.txt")
	lat=$(grep '^latency p50' "$tmp/wrk.txt")
	printf '%-34s %10s req/s   c=%-3s %s\n' "$name" "$rps" "$c" "$lat" | tee -a "$table"
	cp "$tmp/wrk.txt" "$out/api-$stamp-$name.wrk.txt"
}
bench capacity /api/v1/campaigns/cmp-a/capacity get.lua
bench user_me /v2/user/me get.lua
# One import at a time per organisation (dispatcher/api/README.md "Creating batches"): one
# connection, so every request is an import rather than a 503 imports_busy.
bench batches_json_1000 /v2/batches batch.lua 1
echo "# worker peak RSS after the wrk runs: $(hwm_kib) KiB" >>"$table"
stop_worker

# Imports of 250,000 contacts, each by a fresh worker so VmHWM is that import's.
rows=250000
python3 - "$tmp" "$rows" <<'PY'
import sys
d, n = sys.argv[1], int(sys.argv[2])
with open(d + "/big.csv", "w") as f:
    f.write("phone,first_name\n")
    for i in range(n):
        f.write("+1%d,name%d\n" % (2000000000 + i, i))
with open(d + "/big.json", "w") as f:
    f.write('{"campaign_id":"cmp-b","name":"json-250k","contacts":[')
    f.write(",".join('{"phone":"+1%d","variables":{"first_name":"name%d"}}' % (3000000000 + i, i) for i in range(n)))
    f.write("]}")
PY
import() { # name curl-args...
	local name=$1; shift
	start_worker
	local t0 t1 code
	t0=$(date +%s.%N)
	code=$(curl -s -o "$tmp/import.json" -w '%{http_code}' "$@")
	t1=$(date +%s.%N)
	local hwm; hwm=$(hwm_kib)
	stop_worker
	awk -v n="$name" -v c="$code" -v a="$t0" -v b="$t1" -v r="$rows" -v h="$hwm" 'BEGIN{
		printf "%-34s HTTP %s  %d rows in %.2f s = %.0f rows/s   peak RSS %.1f MiB\n",
		n, c, r, b-a, r/(b-a), h/1024 }' | tee -a "$table"
	head -c 300 "$tmp/import.json" >>"$table"; echo >>"$table"
}
import csv_upload_250k -X POST "$url/v2/batches/upload?campaign_id=cmp-a&name=csv-250k" \
	-H "Authorization: Bearer $API_KEY" -F "file=@$tmp/big.csv;type=text/csv"
import json_250k -X POST "$url/v2/batches" -H "Authorization: Bearer $API_KEY" \
	-H 'Content-Type: application/json' --data-binary "@$tmp/big.json"
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$table"
echo "(written to $table; P7: capacity >= 10,000 req/s and p99 <= 5 ms)"
