-- wrk script: GET with the key from the environment (API_KEY); the path is the URL's.
--   API_KEY=gat_... wrk -t2 -c16 -d10s -s bench/api/get.lua http://127.0.0.1:PORT/v2/user/me
local key = os.getenv("API_KEY")

function request()
   return wrk.format("GET", nil, { ["Authorization"] = "Bearer " .. key })
end

function done(summary, latency, requests)
   io.write(string.format("latency p50 %.2f ms p99 %.2f ms; non-2xx/3xx %d\n",
      latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.errors.status))
end
