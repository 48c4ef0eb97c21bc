-- gate_slots.lua: one org's slot records and the Redis time, for the periodic reconciler
-- (SPEC C11, dispatcher/gate/README.md, core/reconcile.h step 2). Read-only. O(slots of the org):
-- the reconciler's read, at most once per period per org, never on the admission path.
-- The time is the server's TIME, the clock every admission stored its taken_ms on (an org
-- clock pinned by gate_test_clock.lua is not used: tests of the reconciler use real time).
-- KEYS: gen_key slots
-- ARGV: gen
-- Reply: {now_ms, call1, record1, call2, record2, ...}; record = <campaign>|<agent>|<taken_ms>

local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all do
	out[#out + 1] = all[i]
end
return out
