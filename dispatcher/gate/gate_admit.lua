-- gate_admit.lua: one admission decision for a call id, and its slots (dispatcher/gate/README.md).
-- Transcribes fairshare_gate_try() of dispatcher/core/fairshare_gate.c over the aggregates kept
-- in the org's state hash: the candidates, in the selector's order, are decided one after the
-- other; the first admitted takes its slots at every level; a refusal that holds for every
-- campaign (system, organisation, direct reserve: fairshare_gate_blocks_org()) ends the walk.
-- O(1) in the number of campaigns: a fixed set of fields per candidate.
-- KEYS: gen_key state slots wait sys
-- ARGV: gen call flags agent ...
--   call    the call id (the slot id at every level)
--   flags   "" or "w": a refused direct dial registers as a waiting direct dial (k + 1)
--   agent   a direct dial's agent ("" for none); ignored for batch candidates
--   ...     1..16 candidate campaign ids, or "*" alone (a direct dial)
-- Reply: {outcome, campaign, now_ms, k, waiter, n, level_1, reason_1, fcfs_1, ...}
--   outcome 1 admitted (campaign: the admitted one), 0 refused (campaign ""),
--           2 held: the call already holds a slot, nothing taken and no decision counted:
--           {2, campaign, now_ms, k, 0, 0, agent, taken_ms}
--   waiter  1 registered as waiting, -1 its registration withdrawn, 0 unchanged
--   n       decisions that follow, one per evaluated candidate, in order
--   level   0 none, 1 system, 2 organisation, 3 agent, 4 campaign, 5 fair_share
--   reason  0 none, 1 full, 2 direct_reserve, 3 floors, 4 agent_floors, 5 unknown campaign
-- Errors: GATE NOLIMITS, GATE NOSYSTEM, GATE OVERFLOW, GATE ARGS <what>.

local state, slots, wait, sys = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local call, flags, dagent = ARGV[2], ARGV[3], ARGV[4]
local ncand = #ARGV - 4
local COUNT_MAX = 1073741824

if ncand < 1 or ncand > 16 then
	return redis.error_reply('GATE ARGS candidates')
end
local direct = ARGV[5] == '*'
if direct and ncand ~= 1 then
	return redis.error_reply('GATE ARGS a direct dial is its only candidate')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local c1 = ARGV[5]
local o = redis.call('HMGET', state, 'org_limit', 'per_agent', 'enforced', 'running',
	'shortfall', 'waiting', 'floors_version', 'floors_expire_ms', 'clock_ms', 'n',
	'm:' .. (math.floor(now / 1000) % 60), 'x:' .. c1, 'r:' .. c1, 'f:' .. c1)
if not o[1] then
	return redis.error_reply('GATE NOLIMITS')
end
local mfield = o[11]
if o[9] then -- a pinned clock (tests only)
	now = tonumber(o[9])
	mfield = redis.call('HGET', state, 'm:' .. (math.floor(now / 1000) % 60))
end
local L = tonumber(o[1])
local per_agent = tonumber(o[2]) or 0
local enforced = o[3] == '1'
local org_running = tonumber(o[4]) or 0
local S = tonumber(o[5]) or 0
local k = tonumber(o[6]) or 0
local valid = (tonumber(o[7]) or 0) > 0 and now < (tonumber(o[8]) or 0)
local cap = (per_agent > 0 and per_agent < L) and per_agent or nil -- C2: gates below org_limit

local s = redis.call('HMGET', sys, 'limit', 'running')
if not s[1] then
	return redis.error_reply('GATE NOSYSTEM')
end
local sys_limit, sys_running = tonumber(s[1]), tonumber(s[2]) or 0

local held = redis.call('HGET', slots, call)
if held then
	local hc, ha, ht = string.match(held, '^([^|]*)|([^|]*)|(%d+)$')
	return {2, hc, now, k, 0, 0, ha, tonumber(ht)}
end

-- min(k, max(1, floor(direct))) with valid floors, min(k, 1) without (R6, R9).
local reserve_cache
local function reserve()
	if reserve_cache then
		return reserve_cache
	end
	local fd = 1
	if k > 0 and valid then
		local f = tonumber(redis.call('HGET', state, 'f:*')) or 0
		if f > 1 then
			fd = f
		end
	end
	reserve_cache = math.min(k, fd)
	return reserve_cache
end

local agents = {}
local function agent_counts(a)
	local v = agents[a]
	if not v then
		local r = redis.call('HMGET', state, 'ar:' .. a, 'as:' .. a)
		v = {tonumber(r[1]) or 0, tonumber(r[2]) or 0}
		agents[a] = v
	end
	return v
end

-- fairshare_gate_admit(): checks 1..6 in order. Returns level, reason, and the candidate's
-- counts for the acquire.
local function decide(c, x, r, f)
	local ceil, ag
	if c == '*' then
		ag = dagent
	elseif x then
		ceil, ag = string.match(x, '^(%d*)|(.*)$')
		ceil = tonumber(ceil)
	end
	local cand = {c = c, ag = ag, r = r, f = f}
	local O1 = org_running + 1
	if sys_running + 1 > sys_limit then
		return 1, 1, cand
	end
	if c ~= '*' and not x then
		return 4, 5, cand -- no limits installed for this campaign
	end
	if ag ~= '' then
		cand.a = agent_counts(ag)
	end
	if not enforced then
		return 0, 0, cand
	end
	if O1 > L then
		return 2, 1, cand
	end
	if cap and ag ~= '' and cand.a[1] + 1 > cap then
		return 3, 1, cand
	end
	if c ~= '*' and ceil and r + 1 > ceil then
		return 4, 1, cand
	end
	if not valid then -- R9: first come first served, waiting direct dials keep min(k, 1)
		if c ~= '*' and O1 + reserve() > L then
			return 5, 2, cand
		end
		return 0, 0, cand
	end
	if c == '*' then -- R8
		if r < math.max(1, f) or O1 + S <= L then
			return 0, 0, cand
		end
		return 5, 3, cand
	end
	local R = reserve()
	if O1 + R > L then
		return 5, 2, cand
	end
	if r < f then
		return 0, 0, cand
	end
	if O1 + R + S > L then -- c is at or above its floor: S is the others' shortfall
		return 5, 3, cand
	end
	if cap and ag ~= '' and cand.a[1] + 1 + cand.a[2] > cap then -- R7
		return 5, 4, cand
	end
	return 0, 0, cand
end

-- Counters: admitted, fcfs, then refusals by level 1..5.
local cnt = {0, 0, 0, 0, 0, 0, 0}
local fcfs = enforced and not valid
local reply = {0, '', now, k, 0, 0}
local admitted
for i = 1, ncand do
	local c, x, r, f = ARGV[4 + i], o[12], o[13], o[14]
	if i > 1 then
		local v = redis.call('HMGET', state, 'x:' .. c, 'r:' .. c, 'f:' .. c)
		x, r, f = v[1], v[2], v[3]
	end
	local level, reason, cand = decide(c, x, tonumber(r) or 0, tonumber(f) or 0)
	reply[#reply + 1] = level
	reply[#reply + 1] = reason
	reply[#reply + 1] = fcfs and 1 or 0
	reply[6] = i
	if fcfs then
		cnt[2] = cnt[2] + 1
	end
	if level == 0 then
		cnt[1] = cnt[1] + 1
		admitted = cand
		break
	end
	cnt[level + 2] = cnt[level + 2] + 1
	if level == 1 or level == 2 or reason == 2 then
		break -- holds for every campaign
	end
end

-- The decision counters: totals, and this second of the rolling minute.
local function counters()
	local tot, i = {}, 0
	for v in string.gmatch(o[10] or '0 0 0 0 0 0 0', '%d+') do
		i = i + 1
		tot[i] = tonumber(v) + cnt[i]
	end
	local sec = math.floor(now / 1000)
	local m, j = {sec}, 0
	local ms = mfield and string.match(mfield, '^(%d+) ')
	if ms and tonumber(ms) == sec then
		for v in string.gmatch(string.sub(mfield, #ms + 2), '%d+') do
			j = j + 1
			m[j + 1] = tonumber(v) + cnt[j]
		end
	else
		for q = 1, 7 do
			m[q + 1] = cnt[q]
		end
	end
	return table.concat(tot, ' '), table.concat(m, ' '), 'm:' .. (sec % 60)
end

local ntot, mval, mkey = counters()
if not admitted then
	if direct and string.find(flags, 'w', 1, true) then
		if redis.call('HSETNX', wait, call, dagent .. '|' .. now) == 1 then
			k = k + 1
			reply[4] = k
			reply[5] = 1
			redis.call('HSET', state, 'n', ntot, mkey, mval, 'waiting', k)
			return reply
		end
	end
	redis.call('HSET', state, 'n', ntot, mkey, mval)
	return reply
end

-- fairshare_gate_acquire(): every level, and the shortfall by the stored floor.
local c, ag, r, f, a = admitted.c, admitted.ag, admitted.r, admitted.f, admitted.a
if sys_running >= COUNT_MAX or org_running >= COUNT_MAX or r >= COUNT_MAX or
	(a and a[1] >= COUNT_MAX) then
	redis.call('HSET', state, 'n', ntot, mkey, mval)
	return redis.error_reply('GATE OVERFLOW')
end
local w = {'n', ntot, mkey, mval, 'running', org_running + 1, 'r:' .. c, r + 1}
if c ~= '*' and r < f then
	w[#w + 1] = 'shortfall'
	w[#w + 1] = S - 1
	if ag ~= '' then
		w[#w + 1] = 'as:' .. ag
		w[#w + 1] = a[2] - 1
	end
end
if ag ~= '' then
	w[#w + 1] = 'ar:' .. ag
	w[#w + 1] = a[1] + 1
end
if direct and k > 0 and redis.call('HDEL', wait, call) == 1 then
	k = k - 1
	reply[4] = k
	reply[5] = -1
	w[#w + 1] = 'waiting'
	w[#w + 1] = k
end
redis.call('HSET', state, unpack(w))
redis.call('HSET', slots, call, c .. '|' .. ag .. '|' .. now)
redis.call('HSET', sys, 'running', sys_running + 1)
reply[1] = 1
reply[2] = c
return reply
