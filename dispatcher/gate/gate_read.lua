-- gate_read.lua: one org's limits, floors and live counts in one round trip, for the capacity
-- view (C12) and the API (dispatcher/gate/README.md). O(campaigns): a read, not a decision.
-- KEYS: gen_key state sys slots wait
-- ARGV: gen
-- Reply: {now_ms, limits_version, org_limit, per_agent, enforced, running, shortfall, waiting,
--         floors_version, floors_expire_ms, floors_valid, direct_reserve, system_limit,
--         system_running, slots, waiters, campaigns, agents}
--   campaigns: flat {id, running, floor, ceiling, agent, known} per campaign that has limits,
--              a floor or running calls ("*" = direct; ceiling 0 = none; known 1 when the
--              campaign has limits installed)
--   agents:    flat {id, running, shortfall} per agent with either non-zero
--   A field never written reads 0 (org_limit 0: no limits installed).

local state, sys, slots, wait = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local all = redis.call('HGETALL', state)
local h, camp, ag, order, aorder = {}, {}, {}, {}, {}
local function campaign(c)
	local e = camp[c]
	if not e then
		e = {running = 0, floor = 0, ceiling = 0, agent = '', known = 0}
		camp[c] = e
		order[#order + 1] = c
	end
	return e
end
local function agent(a)
	local e = ag[a]
	if not e then
		e = {running = 0, shortfall = 0}
		ag[a] = e
		aorder[#aorder + 1] = a
	end
	return e
end
for i = 1, #all, 2 do
	local k, v = all[i], all[i + 1]
	local p, q = string.sub(k, 1, 2), string.sub(k, 1, 3)
	if p == 'x:' then
		local e = campaign(string.sub(k, 3))
		local ceil, a = string.match(v, '^(%d*)|(.*)$')
		e.ceiling, e.agent, e.known = tonumber(ceil) or 0, a, 1
	elseif p == 'f:' then
		campaign(string.sub(k, 3)).floor = tonumber(v)
	elseif p == 'r:' then
		campaign(string.sub(k, 3)).running = tonumber(v)
	elseif q == 'ar:' then
		agent(string.sub(k, 4)).running = tonumber(v)
	elseif q == 'as:' then
		agent(string.sub(k, 4)).shortfall = tonumber(v)
	elseif p ~= 'm:' then
		h[k] = v
	end
end
local function num(k)
	return tonumber(h[k]) or 0
end
local now = tonumber(h.clock_ms)
if not now then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local valid = num('floors_version') > 0 and now < num('floors_expire_ms')
local k = num('waiting')
local fd = 1
if valid and camp['*'] and camp['*'].floor > 1 then
	fd = camp['*'].floor
end
local s = redis.call('HMGET', sys, 'limit', 'running')

table.sort(order)
table.sort(aorder)
local cs, as = {}, {}
for _, c in ipairs(order) do
	local e = camp[c]
	for _, v in ipairs({c, e.running, e.floor, e.ceiling, e.agent, e.known}) do
		cs[#cs + 1] = v
	end
end
for _, a in ipairs(aorder) do
	local e = ag[a]
	if e.running ~= 0 or e.shortfall ~= 0 then
		for _, v in ipairs({a, e.running, e.shortfall}) do
			as[#as + 1] = v
		end
	end
end
return {now, num('limits_version'), num('org_limit'), num('per_agent'), num('enforced'),
	num('running'), num('shortfall'), k, num('floors_version'), num('floors_expire_ms'),
	valid and 1 or 0, math.min(k, fd), tonumber(s[1]) or 0, tonumber(s[2]) or 0,
	redis.call('HLEN', slots), redis.call('HLEN', wait), cs, as}
