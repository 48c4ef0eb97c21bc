#!/usr/bin/env bash
# bench/api/cpu.sh [build-dir] [duration] [connections] [path] — where the CPU of one API route
# goes (issue 10, SPEC P7): the same set-up as bench/api/run.sh (private PostgreSQL and Redis,
# one organisation with its rate limits raised to 1e9 a minute, campaigns cmp-a and cmp-b, one
# `dispatcher run` with DISPATCHER_ROLE=api), then one wrk run on path (default the capacity
# route), and the CPU time (utime + stime from /proc/<pid>/stat) each process group used during
# it, per request: the worker, PostgreSQL (every process of the private cluster), Redis and
# wrk. Run it on an otherwise idle machine for throughput; the per-request CPU figures hold
# under load too (they count CPU used, not time waited).
set -euo pipefail
build=${1:-build}
dur=${2:-8s}
conns=${3:-16}
path=${4:-/api/v1/campaigns/cmp-a/capacity}
root=$(cd "$(dirname "$0")/../.." && pwd)
me=cpu.sh
. "$root/bench/api/setup.sh"
start_worker
url=http://127.0.0.1:$port$path
echo "# $(curl -s -w ' -> HTTP %{http_code}' -H "Authorization: Bearer $API_KEY" "$url" | head -c 300)"
sleep 2 # the refresher's first installs
# One wrk run; the CPU ticks of each group are read in one pass over /proc at 1 s in and 1 s
# before the end, so the groups' figures cover the same interval.
python3 - "$spid" "$wpid" "$dur" "$conns" "$root/bench/api/get.lua" "$url" <<'PY'
import os, re, subprocess, sys, time
spid, wpid, dur, conns, script, url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
secs = int(dur.rstrip('s'))
def snap(roots):
    kids, info, wait = {}, {}, {}
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try: s = open('/proc/%s/stat' % p).read()
        except OSError: continue
        f = s[s.rindex(')') + 2:].split()
        kids.setdefault(int(f[1]), []).append(int(p))
        info[int(p)] = (s[s.index('(') + 1:s.rindex(')')], int(f[11]) + int(f[12]))
        try: wait[int(p)] = int(open('/proc/%s/schedstat' % p).read().split()[1])
        except (OSError, IndexError, ValueError): wait[int(p)] = 0
    out, rq = {}, {}
    for name, (root, pat) in roots.items():
        tot, w, todo = 0, 0, [root]
        while todo:
            q = todo.pop()
            if q in info and re.search(pat, info[q][0]): tot, w = tot + info[q][1], w + wait[q]
            todo += kids.get(q, [])
        out[name], rq[name] = tot, w
    return out, rq, time.monotonic()
w = subprocess.Popen(['wrk', '-t1', '-c' + conns, '-d' + dur, '--latency', '-s', script, url],
                     stdout=subprocess.PIPE, text=True)
roots = {'worker': (wpid, '.'), 'PostgreSQL': (spid, '^postgres'), 'Redis': (spid, '^redis'),
         'wrk': (w.pid, '.')}
time.sleep(1); a, qa, t0 = snap(roots)
time.sleep(secs - 2); b, qb, t1 = snap(roots)
out = w.communicate()[0]
rps = float(re.search(r'Requests/sec:\s*([0-9.]+)', out).group(1))
lat = re.search(r'^latency p50.*$', out, re.M).group(0)
n = rps * (t1 - t0); us = 1e6 / os.sysconf('SC_CLK_TCK')
print('# wrk -t1 -c%s -d%s: %s; load average %s' % (conns, dur, lat, open('/proc/loadavg').read().split()[:3]))
print('%.0f req/s; CPU per request: ' % rps + ', '.join('%s %.0f us' % (k, (b[k] - a[k]) * us / n) for k in roots))
# Time runnable but not running (/proc/<pid>/schedstat, main threads; PostgreSQL's summed over
# its processes), as a share of the interval: the other load of the machine taking the CPUs.
print('waiting for a CPU (run queue), share of the interval: ' + ', '.join('%s %.0f %%' % (k, (qb[k] - qa[k]) / 1e7 / (t1 - t0)) for k in roots))
PY
