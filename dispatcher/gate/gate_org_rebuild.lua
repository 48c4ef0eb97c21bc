-- gate_org_rebuild.lua: (re)builds one org's slot state under generation G from the live calls
-- the caller read from PostgreSQL (dispatcher/gate/README.md). The reconciler's primitive (C11)
-- and how a new organisation's state is first created (no records). Guarded by the *system*
-- generation: an org is built only under the generation the system state holds.
-- Slot records, running counts (campaign, agent, org), the waiter registry (k = 0: waiting direct
-- dials register again) and the shortfall aggregates are replaced; limits, floors and the
-- decision counters are kept. The system running count moves by the difference between the
-- new org count and the old one when the org was already built under G (otherwise the old
-- calls were never counted under G: gate_system_init.lua reset the system count).
-- The waking order (:wc, gate_wc.lua.inc) is re-scored under the new running counts.
-- KEYS: gen_key org_gen state slots wait sys wc
-- ARGV: gen ...
--   ... (call campaign agent taken_ms) per live call: campaign "*" = direct, agent "" = none;
--       a call id listed twice counts once
-- Reply: {records, old_running, new_running}

-- @include gate_wc.lua.inc

local OF = '<I4I4BI4dI4ddddd' .. string.rep('I4', 7)
local CF, AF, SF = '<I4I4I4B', '<I4d', '<I4I4d'
local CHUNK = 1000
local org_gen, state, slots, wait, sys = KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

local function id_ok(s)
	return #s >= 1 and #s <= 64 and string.match(s, '^[%w_-]+$') ~= nil
end
local function chunked(cmd, key, t, step)
	for i = 1, #t, step do
		redis.call(cmd, key, unpack(t, i, math.min(i + step - 1, #t)))
	end
end

if (#ARGV - 1) % 4 ~= 0 then
	return redis.error_reply('GATE ARGS records')
end
local seen, recs, run, arun, n = {}, {}, {}, {}, 0
for i = 2, #ARGV, 4 do
	local call, c, a, t = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
	if not id_ok(call) or (c ~= '*' and not id_ok(c)) or (a ~= '' and not id_ok(a)) or
		not string.match(t, '^%d+$') then
		return redis.error_reply('GATE ARGS record ' .. call)
	end
	if not seen[call] then
		seen[call] = true
		n = n + 1
		recs[#recs + 1] = call
		recs[#recs + 1] = c .. '|' .. a .. '|' .. t
		run[c] = (run[c] or 0) + 1
		if a ~= '' then
			arun[a] = (arun[a] or 0) + 1
		end
	end
end

local same = redis.call('GET', org_gen) == ARGV[1]
local all = redis.call('HGETALL', state)
local o = {0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0}
local camps, del = {}, {}
for i = 1, #all, 2 do
	local k, v = all[i], all[i + 1]
	local p = string.sub(k, 1, 2)
	if k == 'org' then
		o = {struct.unpack(OF, v)}
	elseif p == 'c:' then
		local e = {sag = string.sub(v, 14)}
		e.r, e.f, e.ceil, e.known = struct.unpack(CF, v)
		camps[string.sub(k, 3)] = e
		del[#del + 1] = k
	elseif p == 'a:' then
		del[#del + 1] = k
	end
end
local old = same and o[4] or 0
for c, r in pairs(run) do
	camps[c] = camps[c] or {f = 0, ceil = 0, known = 0, sag = ''}
end
local S, as = 0, {}
local set = {}
for c, e in pairs(camps) do
	e.r = run[c] or 0
	local sh = e.f - e.r
	if c ~= '*' and sh > 0 then
		S = S + sh
		if e.sag ~= '' then
			as[e.sag] = (as[e.sag] or 0) + sh
		end
	end
	if e.r > 0 or e.f > 0 or e.known == 1 then
		set[#set + 1] = 'c:' .. c
		set[#set + 1] = struct.pack(CF, e.r, e.f, e.ceil, e.known) .. e.sag
	end
end
for a, r in pairs(arun) do
	as[a] = as[a] or 0
end
for a, s in pairs(as) do
	set[#set + 1] = 'a:' .. a
	set[#set + 1] = struct.pack(AF, arun[a] or 0, s)
end
o[4], o[5], o[6] = n, S, 0
set[#set + 1] = 'org'
set[#set + 1] = struct.pack(OF, unpack(o, 1, 18))

chunked('HDEL', state, del, CHUNK)
chunked('HSET', state, set, 2 * CHUNK)
redis.call('DEL', slots, wait)
chunked('HSET', slots, recs, 2 * CHUNK)
local sv = redis.call('HGET', sys, 'v')
if sv then
	local limit, running, version = struct.unpack(SF, sv)
	redis.call('HSET', sys, 'v', struct.pack(SF, limit, math.max(running + n - old, 0), version))
end
local waiting = redis.call('ZRANGE', KEYS[7], 0, -1)
for i = 1, #waiting do
	local e = camps[waiting[i]]
	e = e or {r = 0, f = 0, ceil = 0, known = 0}
	redis.call('ZADD', KEYS[7], 'XX', wc_score(e.r, e.f, e.ceil, e.known), waiting[i])
end
redis.call('SET', org_gen, ARGV[1])
return {n, old, n}
