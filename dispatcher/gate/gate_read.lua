-- gate_read.lua: one org's limits, floors and live counts in one round trip, for the capacity
-- view (C12) and the API (dispatcher/gate/README.md). O(campaigns): a read, not a decision.
-- KEYS: gen_key state sys slots wait
-- ARGV: gen
-- Reply: {now_ms, limits_version, org_limit, per_agent, enforced, running, shortfall, waiting,
--         floors_version, floors_expire_ms, floors_valid, direct_reserve, system_limit,
--         system_running, slots, waiters, campaigns, agents, system_version}
--   system_version: the version of the installed system limit (gate_system.lua), 0: none
--   campaigns: flat {id, running, floor, ceiling, agent, known}, sorted by id ("*" = direct
--              first), per campaign record (limits installed, a floor, or running calls);
--              ceiling 0 = none; known 1 when the campaign has limits installed
--   agents:    flat {id, running, shortfall}, sorted by id
--   org_limit 0: no limits installed.

local OF = '<I4I4BI4dI4ddddd' .. string.rep('I4', 7)
local CF, AF, SF = '<I4I4I4B', '<I4d', '<I4I4d'
local state, sys, slots, wait = KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local all = redis.call('HGETALL', state)
local o = {0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0}
local camps, agents, corder, aorder = {}, {}, {}, {}
for i = 1, #all, 2 do
	local k, v = all[i], all[i + 1]
	local p = string.sub(k, 1, 2)
	if k == 'org' then
		o = {struct.unpack(OF, v)}
	elseif p == 'c:' then
		local c = string.sub(k, 3)
		local r, f, ceil, known = struct.unpack(CF, v)
		camps[c] = {r, f, ceil, string.sub(v, 14), known}
		corder[#corder + 1] = c
	elseif p == 'a:' then
		local a = string.sub(k, 3)
		local r, s = struct.unpack(AF, v)
		agents[a] = {r, s}
		aorder[#aorder + 1] = a
	end
end
local now = o[10]
if now < 0 then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local valid = o[8] > 0 and now < o[9]
local fd = 1
if valid and camps['*'] and camps['*'][2] > 1 then
	fd = camps['*'][2]
end
local sys_limit, sys_running, sys_version = 0, 0, 0
local sv = redis.call('HGET', sys, 'v')
if sv then
	sys_limit, sys_running, sys_version = struct.unpack(SF, sv)
end

table.sort(corder)
table.sort(aorder)
local cs, as = {}, {}
for _, c in ipairs(corder) do
	local e = camps[c]
	for _, x in ipairs({c, e[1], e[2], e[3], e[4], e[5]}) do
		cs[#cs + 1] = x
	end
end
for _, a in ipairs(aorder) do
	for _, x in ipairs({a, agents[a][1], agents[a][2]}) do
		as[#as + 1] = x
	end
end
return {now, o[7], o[1], o[2], o[3], o[4], o[5], o[6], o[8], o[9], valid and 1 or 0,
	math.min(o[6], fd), sys_limit, sys_running, redis.call('HLEN', slots),
	redis.call('HLEN', wait), cs, as, sys_version}
