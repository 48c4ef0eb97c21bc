-- wrk script: POST /calls to the provider stub with a unique Idempotency-Key per request
-- (SPEC D0 body), spread over 10 organisations. Every request is a first send: the stub places
-- a call for each (check calls_placed in its /stats against wrk's request count).
--   wrk -t2 -c16 -d10s -s bench/wrk/calls.lua http://127.0.0.1:PORT
local threads = {}
local next_id = 0

function setup(thread)
   thread:set("tid", next_id)
   next_id = next_id + 1
   table.insert(threads, thread)
end

function init(args)
   counter = 0
   prefix = string.format("wrk-%d-%d-%d-", os.time(), math.random(1, 1000000), tid)
end

function request()
   counter = counter + 1
   local key = prefix .. counter
   local body = string.format(
      '{"to":"+15551230000","from":null,"org_id":"org-%d","campaign_id":"camp-%d",' ..
      '"agent_id":"agent-1","contact_id":"%s","attempt":1,' ..
      '"callback_url":"http://127.0.0.1:9/events"}', counter % 10, counter % 50, key)
   return wrk.format("POST", "/calls",
      { ["Content-Type"] = "application/json", ["Idempotency-Key"] = key }, body)
end

function done(summary, latency, requests)
   io.write(string.format("requests %d, errors connect %d read %d write %d status %d timeout %d\n",
      summary.requests, summary.errors.connect, summary.errors.read, summary.errors.write,
      summary.errors.status, summary.errors.timeout))
   io.write(string.format("latency p50 %.2f ms, p99 %.2f ms\n",
      latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
