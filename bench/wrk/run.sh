#!/bin/sh
# wrk figures for issue 4: the HTTP server on a trivial route (GET /healthz) and the provider
# stub's POST /calls with a unique Idempotency-Key per request. Loopback only.
#   bench/wrk/run.sh [build-dir] [duration] [connections] [threads]
# Writes raw output to bench/out/wrk-*.txt and prints a summary.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
dur=${2:-10s}
conns=${3:-16}
threads=${4:-2}
stub=$build/bench/provider-stub/provider-stub
out=$root/bench/out
mkdir -p "$out"
[ -x "$stub" ] || { echo "no $stub: build it first (ninja -C $build bench/provider-stub/provider-stub)" >&2; exit 1; }

# Held calls and dropped events: the figure is the dial path alone (no event posting).
"$stub" --port 0 --hold --drop-pct 100 > "$out/wrk-stub.txt" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT INT TERM
for i in $(seq 50); do
	port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$out/wrk-stub.txt")
	[ -n "$port" ] && break
	sleep 0.1
done
[ -n "$port" ] || { echo "stub did not start" >&2; exit 1; }
url=http://127.0.0.1:$port

echo "== GET /healthz: wrk -t$threads -c$conns -d$dur -s bench/wrk/healthz.lua $url/healthz"
wrk -t"$threads" -c"$conns" -d"$dur" -s "$here/healthz.lua" "$url/healthz" | tee "$out/wrk-healthz.txt"
echo "== POST /calls: wrk -t$threads -c$conns -d$dur -s bench/wrk/calls.lua $url"
wrk -t"$threads" -c"$conns" -d"$dur" -s "$here/calls.lua" "$url" | tee "$out/wrk-calls.txt"
curl -s "$url/stats" > "$out/wrk-stats.json"
kill $pid
wait $pid 2>/dev/null || true
trap - EXIT INT TERM
placed=$(sed -n 's/.*"calls_placed":\([0-9]*\).*/\1/p' "$out/wrk-stats.json")
replays=$(sed -n 's/.*"replays":\([0-9]*\).*/\1/p' "$out/wrk-stats.json")
echo "== stub ground truth: calls_placed $placed, replays $replays (every wrk request a new key)"
