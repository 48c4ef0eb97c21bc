-- gate_test_clock.lua: tests only — pins the clock of one org's scripts (the org record's
-- clock_ms), so the shared test vectors can set their instants; -1 unpins it (the scripts use
-- the Redis server's TIME again). Production never calls it (dispatcher/gate/README.md).
-- KEYS: state
-- ARGV: now_ms
-- Reply: "OK"

local OF = '<I4I4BI4dI4ddddd' .. string.rep('I4', 7)
local now = tonumber(ARGV[1])
if not now or now % 1 ~= 0 or now < -1 or now > 9007199254740991 then
	return redis.error_reply('GATE ARGS now_ms')
end
local raw = redis.call('HGET', KEYS[1], 'org')
local o = raw and {struct.unpack(OF, raw)} or
	{0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0}
o[10] = now
redis.call('HSET', KEYS[1], 'org', struct.pack(OF, unpack(o, 1, 18)))
return redis.status_reply('OK')
