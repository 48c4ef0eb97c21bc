#!/bin/sh
# Connection-layer figures for issue 7, in one run: PostgreSQL statements/s one at a time vs
# pipelined, Redis EVALSHA vs INCR unpipelined and pipelined, the HTTP client against the stub
# with and without reuse. Each program starts its own embedded servers (private data directory,
# unix socket) and stops them.
#   bench/conn/run.sh [build-dir] [--quick]
# Writes bench/out/conn.txt and prints it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
out=$root/bench/out
mkdir -p "$out"
for b in conn_pg_bench conn_redis_bench conn_http_bench; do
	[ -x "$build/bench/conn/$b" ] || {
		echo "no $build/bench/conn/$b: build it first (ninja -C $build)" >&2
		exit 1
	}
done
{
	echo "# bench/conn/run.sh $* — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -r)"
	for b in conn_pg_bench conn_redis_bench conn_http_bench; do
		echo
		"$build/bench/conn/$b" "$@"
	done
} 2>&1 | tee "$out/conn.txt"
