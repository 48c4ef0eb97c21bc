# Sourced by bench/api/run.sh and bench/api/cpu.sh (with build, root and me set): checks the
# build, starts the private PostgreSQL and Redis (api-services; their URLs exported, kept alive
# while fd 3 is open; spid), migrates, creates organisation org-bench (20 lines, rate limits and
# pending ceiling raised to 1e9 so the limiter measures its cost, not its refusals), agent
# agent-bench, campaigns cmp-a and cmp-b and a key (API_KEY), picks a free port, and defines
# start_worker / stop_worker (one `dispatcher run`, DISPATCHER_ROLE=api: nothing is dialled;
# wpid). Everything is removed on exit.
bin=$build/dispatcher/dispatcher
svc=$build/bench/api/api-services
for x in "$bin" "$svc"; do
	[ -x "$x" ] || { echo "$me: $x not built (meson setup $build -Dbench=true)" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "$me: wrk not installed (.ci/bootstrap.sh)" >&2; exit 2; }
tmp=$(mktemp -d)
wpid=
spid=
cleanup() {
	[ -n "$wpid" ] && kill "$wpid" 2>/dev/null && wait "$wpid" 2>/dev/null || true
	exec 3>&- 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

mkfifo "$tmp/svc-in"
"$svc" <"$tmp/svc-in" >"$tmp/svc-out" 2>"$tmp/svc-err" &
spid=$!
exec 3>"$tmp/svc-in"
for _ in $(seq 600); do grep -q '^REDIS_URL=' "$tmp/svc-out" 2>/dev/null && break; sleep 0.1; done
grep -q '^REDIS_URL=' "$tmp/svc-out" || { cat "$tmp/svc-err" >&2; exit 1; }
export DATABASE_URL=$(sed -n 's/^DATABASE_URL=//p' "$tmp/svc-out")
export REDIS_URL=$(sed -n 's/^REDIS_URL=//p' "$tmp/svc-out")
"$bin" migrate >/dev/null
"$bin" admin org create --id org-bench --name bench --org-limit 20 >/dev/null
"$bin" admin agent create --org org-bench --id agent-bench --from-number +15550000001 >/dev/null
"$bin" admin campaign create --org org-bench --agent agent-bench --id cmp-a >/dev/null
"$bin" admin campaign create --org org-bench --agent agent-bench --id cmp-b >/dev/null
export API_KEY=$("$bin" admin key create --org org-bench --name bench | grep -o 'gat_[0-9A-Za-z]*')
psql -X -q "$DATABASE_URL" -c "UPDATE organisations SET rate_default_per_minute = 1000000000,
	rate_calls_per_minute = 1000000000, rate_executions_per_minute = 1000000000,
	pending_ceiling = 1000000000 WHERE id = 'org-bench'"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_worker() {
	DISPATCHER_ROLE=api DISPATCHER_LISTEN=127.0.0.1:$port DISPATCHER_WORKER_ID=bench-api \
		PROVIDER_URL=http://127.0.0.1:9 PROVIDER_WEBHOOK_SECRET=bench DISPATCHER_LOG_LEVEL=warn \
		"$bin" run 2>>"$tmp/worker.log" &
	wpid=$!
	for _ in $(seq 300); do
		curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$me: worker not ready" >&2; cat "$tmp/worker.log" >&2; exit 1
}
stop_worker() { kill "$wpid"; wait "$wpid" 2>/dev/null || true; wpid=; }
