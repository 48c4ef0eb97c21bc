-- gate_stats.lua: one org's decision counters (SPEC §7: every refusal counted by the level that
-- refused, and fcfs decisions), in total and over the rolling minute (dispatcher/gate/README.md).
-- Not guarded: counters are read even when the slot state is lost.
-- KEYS: state
-- ARGV:
-- Reply: {now_s, total x 7, minute x 7}, each seven being admitted, fcfs, then refusals by
--        level: system, organisation, agent, campaign, fair_share. The minute sums the seconds
--        in (now - 60 s, now].

local OF = '<I4I4BI4dI4ddddd' .. string.rep('I4', 7)
local RF, TF = '<d' .. string.rep('I4', 7), '<' .. string.rep('d', 7)
local names = {'org', 'tot'}
for i = 0, 59 do
	names[#names + 1] = 'm:' .. i
end
local v = redis.call('HMGET', KEYS[1], unpack(names))
local o = v[1] and {struct.unpack(OF, v[1])} or
	{0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0}
local now = o[10]
if now < 0 then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local sec = math.floor(now / 1000)
local tot = v[2] and {struct.unpack(TF, v[2])} or {0, 0, 0, 0, 0, 0, 0}
local reply = {sec}
for i = 1, 7 do
	reply[1 + i] = tot[i] + o[11 + i] -- the current second is not in the totals yet
	reply[8 + i] = 0
end
local function add(s, first)
	if s > sec - 60 and s <= sec then
		for i = 1, 7 do
			reply[8 + i] = reply[8 + i] + first[i]
		end
	end
end
add(o[11], {unpack(o, 12, 18)})
for j = 3, 62 do
	if v[j] then
		local m = {struct.unpack(RF, v[j])}
		add(m[1], {unpack(m, 2, 8)})
	end
end
return reply
