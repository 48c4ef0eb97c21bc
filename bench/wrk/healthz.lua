-- wrk script: GET /healthz, a trivial route of the HTTP server (common/http_server.c, here
-- inside the provider stub); prints p50/p99.
function done(summary, latency, requests)
   io.write(string.format("requests %d, non-2xx/errors %d\n", summary.requests,
      summary.errors.status + summary.errors.connect + summary.errors.read))
   io.write(string.format("latency p50 %.2f ms, p99 %.2f ms\n",
      latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
