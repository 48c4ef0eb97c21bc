-- lane_mark.lua: writes one of a fleet-wide lane's gates, on Redis's clock (the rare transitions
-- the workers' core/lane.c decide; dispatcher/worker/README.md, "Fleet-wide lanes").
-- KEYS: lane
-- ARGV: field op ms
--   lane   dsp:v1:{o:<org>}:lane:<provider> (see lane_take.lua)
--   field  stopped_until_ms, parked_until_ms or open_until_ms
--   op     'max': field = max(stored, now + ms) — a shorter park never shortens a longer one;
--          'clear': deletes field when it holds ms (the probe_until_ms lane_take.lua answered to
--          the probe whose success this is), so a newer stop or open is never cleared.
-- Reply: ms until field's time (0 when it is absent or past) after the write.
local field, op, ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
if (field ~= 'stopped_until_ms' and field ~= 'parked_until_ms' and field ~= 'open_until_ms') or
	not ms or ms < 0 or ms % 1 ~= 0 or (op ~= 'max' and op ~= 'clear') then
	return redis.error_reply('LANE ARGS')
end
local f = redis.call('HMGET', KEYS[1], field, 'clock_ms')
local now = tonumber(f[2])
if not now then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local stored = tonumber(f[1])
if op == 'clear' then
	if stored == ms then
		redis.call('HDEL', KEYS[1], field)
		stored = nil
	end
elseif not stored or now + ms > stored then
	stored = now + ms
	redis.call('HSET', KEYS[1], field, stored)
end
if stored and stored > now then
	return stored - now
end
return 0
