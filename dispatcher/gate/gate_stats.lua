-- gate_stats.lua: one org's decision counters (SPEC §7: every refusal counted by the level that
-- refused, and fcfs decisions), in total and over the rolling minute (dispatcher/gate/README.md).
-- Not guarded: counters are read even when the slot state is lost.
-- KEYS: state
-- ARGV:
-- Reply: {now_s, total x 7, minute x 7}, each seven being admitted, fcfs, then refusals by
--        level: system, organisation, agent, campaign, fair_share. The minute sums the seconds
--        in (now - 60 s, now].

local state = KEYS[1]
local names = {'n', 'clock_ms'}
for i = 0, 59 do
	names[#names + 1] = 'm:' .. i
end
local v = redis.call('HMGET', state, unpack(names))
local now = tonumber(v[2])
if not now then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local sec = math.floor(now / 1000)
local reply = {sec}
local i = 0
for x in string.gmatch(v[1] or '0 0 0 0 0 0 0', '%d+') do
	i = i + 1
	reply[1 + i] = tonumber(x)
end
for q = 1, 7 do
	reply[8 + q] = 0
end
for j = 3, 62 do
	if v[j] then
		local n, first = 0, nil
		for x in string.gmatch(v[j], '%d+') do
			if not first then
				first = tonumber(x)
				if first > sec or first <= sec - 60 then
					break
				end
			else
				n = n + 1
				reply[8 + n] = reply[8 + n] + tonumber(x)
			end
		end
	end
end
return reply
