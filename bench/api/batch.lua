-- wrk script: POST /v2/batches with a body of 1,000 contacts (unique phone numbers per request),
-- the key from the environment (API_KEY) and the campaign from CAMPAIGN.
--   API_KEY=gat_... CAMPAIGN=cmp-a wrk -t2 -c8 -d10s -s bench/api/batch.lua http://127.0.0.1:PORT
local n = 0
local key = os.getenv("API_KEY")
local campaign = os.getenv("CAMPAIGN") or "cmp-a"
local tid = 0
local threads = 0

function setup(thread)
   thread:set("tid", threads)
   threads = threads + 1
end

function request()
   n = n + 1
   local parts = {}
   local base = 1000000000 + (tid * 100000 + n % 100000) * 1000
   for i = 0, 999 do
      parts[#parts + 1] = string.format('{"phone":"+1%d"}', base + i)
   end
   local body = string.format('{"campaign_id":"%s","name":"wrk-%d-%d","contacts":[%s]}',
      campaign, tid, n, table.concat(parts, ","))
   return wrk.format("POST", "/v2/batches", {
      ["Authorization"] = "Bearer " .. key,
      ["Content-Type"] = "application/json",
   }, body)
end

function done(summary, latency, requests)
   io.write(string.format("latency p50 %.2f ms p99 %.2f ms; non-2xx/3xx %d\n",
      latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.errors.status))
end
