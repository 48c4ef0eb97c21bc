-- gate_install.lua: installs an org's limits (C4) or floors (C5), fenced by version
-- (dispatcher/gate/README.md). An install whose version is not greater than the stored one
-- changes nothing. Either kind replaces the whole set (a campaign left out loses its limits, or
-- its floor), then rebuilds the shortfall aggregates (org shortfall, each agent's) from the
-- floors, the running counts and the campaigns' agents: O(campaigns), once per install, as
-- fairshare_gate_install(). Running counts are never touched (nothing is pre-empted, R13).
-- The waking order (:wc, gate_wc.lua.inc) follows: the campaigns with waiters are re-scored, a
-- full install all of them (O(waiting campaigns x log n)), a delta only those it changes.
-- KEYS: gen_key state wc
-- ARGV: gen kind version ...
--   kind "limits": org_limit per_agent enforced, then (campaign ceiling agent) triples;
--                  per_agent 0 = unset, enforced 1/0, ceiling "" = none, agent "" = none
--   kind "floors": ttl_ms, then (campaign floor) pairs; campaign "*" = the direct pseudo-campaign
--   kind "delta":  base_version ttl_ms, then (campaign floor) pairs: only these campaigns' floors
--                  change (the others keep theirs), S and S_a move by the differences, the expiry
--                  is renewed; applied only when the stored floors version is base_version —
--                  O(changed), not O(campaigns)
-- Reply: {applied, version, now_ms, floors_expire_ms, shortfall}
--   applied 1, or 0 when version is not newer, or (delta) the stored version is not
--   base_version (version is then the stored one: the caller installs in full)

-- @include gate_wc.lua.inc

local OF = '<I4I4BI4dI4ddddd' .. string.rep('I4', 7)
local CF, AF = '<I4I4I4B', '<I4d'
local COUNT_MAX = 1073741824
local CHUNK = 1000

local state = KEYS[2]
local kind, version = ARGV[2], tonumber(ARGV[3])

local function args_error(what)
	return redis.error_reply('GATE ARGS ' .. what)
end
local function id_ok(s)
	return #s >= 1 and #s <= 64 and string.match(s, '^[%w_-]+$') ~= nil
end
local function count(s, min)
	local n = string.match(s, '^%d+$') and tonumber(s)
	if not n or n < min or n > COUNT_MAX then
		return nil
	end
	return n
end
local function chunked(cmd, t, step)
	for i = 1, #t, step do
		redis.call(cmd, state, unpack(t, i, math.min(i + step - 1, #t)))
	end
end

if (kind ~= 'limits' and kind ~= 'floors' and kind ~= 'delta') or not string.match(ARGV[3], '^%d+$') or
	version < 1 or version > 9007199254740991 then
	return args_error('kind or version')
end
local raw = redis.call('HGET', state, 'org')
local o = raw and {struct.unpack(OF, raw)} or
	{0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0}
local now = o[10]
if now < 0 then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local stored = kind == 'limits' and o[7] or o[8]
if kind == 'delta' and not string.match(ARGV[4] or '', '^%d+$') then
	return args_error('base version')
end
if version <= stored or (kind == 'delta' and tonumber(ARGV[4]) ~= stored) then
	return {0, stored, now, o[9], o[5]}
end

-- A delta: the changed floors only; S and S_a move by the differences (O(changed)).
if kind == 'delta' then
	local ttl = string.match(ARGV[5] or '', '^%d+$') and tonumber(ARGV[5])
	if not ttl or ttl > 1099511627776 or (#ARGV - 5) % 2 ~= 0 then
		return args_error('delta')
	end
	local ids, fields, floors, seen = {}, {}, {}, {}
	for i = 6, #ARGV, 2 do
		local c, f = ARGV[i], count(ARGV[i + 1], 0)
		if (c ~= '*' and not id_ok(c)) or not f or seen[c] then
			return args_error('floor ' .. c)
		end
		seen[c] = true
		ids[#ids + 1], fields[#fields + 1], floors[#floors + 1] = c, 'c:' .. c, f
	end
	local set, del, adelta, anames = {}, {}, {}, {}
	local S = o[5]
	for i = 1, #fields, CHUNK do
		local recs = redis.call('HMGET', state, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
		for j = 1, #recs do
			local n, raw = i + j - 1, recs[j]
			local r, f, ceil, known, sag = 0, 0, 0, 0, ''
			if raw then
				r, f, ceil, known = struct.unpack(CF, raw)
				sag = string.sub(raw, 14)
			end
			local d = 0
			if ids[n] ~= '*' then
				d = math.max(0, floors[n] - r) - math.max(0, f - r)
			end
			S = S + d
			if d ~= 0 and sag ~= '' then
				if not adelta[sag] then
					anames[#anames + 1] = sag
				end
				adelta[sag] = (adelta[sag] or 0) + d
			end
			if r > 0 or floors[n] > 0 or known == 1 then
				set[#set + 1] = fields[n]
				set[#set + 1] = struct.pack(CF, r, floors[n], ceil, known) .. sag
			elseif raw then
				del[#del + 1] = fields[n]
			end
			if ids[n] ~= '*' and floors[n] ~= f then -- only when it has waiters (XX)
				redis.call('ZADD', KEYS[3], 'XX', wc_score(r, floors[n], ceil, known), ids[n])
			end
		end
	end
	for i = 1, #anames do
		local raw = redis.call('HGET', state, 'a:' .. anames[i])
		local r, sa = 0, 0
		if raw then
			r, sa = struct.unpack(AF, raw)
		end
		sa = sa + adelta[anames[i]]
		if r > 0 or sa > 0 then
			set[#set + 1] = 'a:' .. anames[i]
			set[#set + 1] = struct.pack(AF, r, sa)
		elseif raw then
			del[#del + 1] = 'a:' .. anames[i]
		end
	end
	o[5], o[8], o[9] = S, version, now + ttl
	set[#set + 1] = 'org'
	set[#set + 1] = struct.pack(OF, unpack(o, 1, 18))
	chunked('HDEL', del, CHUNK)
	chunked('HSET', set, 2 * CHUNK)
	return {1, version, now, o[9], S}
end

-- The new set, checked before anything is written.
local new = {}
if kind == 'limits' then
	local L, pa = count(ARGV[4] or '', 1), count(ARGV[5] or '', 0)
	if not L or not pa or (ARGV[6] ~= '0' and ARGV[6] ~= '1') or (#ARGV - 6) % 3 ~= 0 then
		return args_error('limits')
	end
	for i = 7, #ARGV, 3 do
		local c, ceil, ag = ARGV[i], ARGV[i + 1], ARGV[i + 2]
		if not id_ok(c) or (ceil ~= '' and not count(ceil, 1)) or (ag ~= '' and not id_ok(ag)) then
			return args_error('campaign ' .. c)
		end
		new[c] = {ceil = tonumber(ceil) or 0, ag = ag}
	end
	o[1], o[2], o[3], o[7] = L, pa, tonumber(ARGV[6]), version
else
	local ttl = string.match(ARGV[4] or '', '^%d+$') and tonumber(ARGV[4])
	if not ttl or ttl > 1099511627776 or (#ARGV - 4) % 2 ~= 0 then
		return args_error('floors')
	end
	for i = 5, #ARGV, 2 do
		local c, f = ARGV[i], count(ARGV[i + 1], 0)
		if (c ~= '*' and not id_ok(c)) or not f then
			return args_error('floor ' .. c)
		end
		new[c] = f
	end
	o[8], o[9] = version, now + ttl
end

-- Every campaign and agent record; the new set replaces the old one.
local all = redis.call('HGETALL', state)
local camps, agents = {}, {}
for i = 1, #all, 2 do
	local k, v = all[i], all[i + 1]
	local p = string.sub(k, 1, 2)
	if p == 'c:' then
		local e = {raw = v, sag = string.sub(v, 14)}
		e.r, e.f, e.ceil, e.known = struct.unpack(CF, v)
		camps[string.sub(k, 3)] = e
	elseif p == 'a:' then
		local e = {raw = v}
		e.r, e.s = struct.unpack(AF, v)
		agents[string.sub(k, 3)] = e
	end
end
for c, n in pairs(new) do
	if not camps[c] then
		camps[c] = {r = 0, f = 0, ceil = 0, known = 0, sag = ''}
	end
end
for c, e in pairs(camps) do
	local n = new[c]
	if kind == 'floors' then
		e.f = n or 0
	elseif n then
		e.ceil, e.sag, e.known = n.ceil, n.ag, 1
	else
		e.ceil, e.sag, e.known = 0, '', 0
	end
end

-- S and each agent's S_a from the floors, the running counts and the agents (R6, R7).
local S = 0
for _, e in pairs(agents) do
	e.s = 0
end
for c, e in pairs(camps) do
	local sh = e.f - e.r
	if c ~= '*' and sh > 0 then
		S = S + sh
		if e.sag ~= '' then
			agents[e.sag] = agents[e.sag] or {r = 0, s = 0}
			agents[e.sag].s = agents[e.sag].s + sh
		end
	end
end
o[5] = S

local set, del = {'org', struct.pack(OF, unpack(o, 1, 18))}, {}
local function put(field, keep, value, old)
	if not keep then
		if old then
			del[#del + 1] = field
		end
	elseif value ~= old then
		set[#set + 1] = field
		set[#set + 1] = value
	end
end
for c, e in pairs(camps) do
	put('c:' .. c, e.r > 0 or e.f > 0 or e.known == 1,
		struct.pack(CF, e.r, e.f, e.ceil, e.known) .. e.sag, e.raw)
end
for a, e in pairs(agents) do
	put('a:' .. a, e.r > 0 or e.s > 0, struct.pack(AF, e.r, e.s), e.raw)
end
chunked('HDEL', del, CHUNK)
chunked('HSET', set, 2 * CHUNK)
-- The waking order under the new floors or limits: every campaign with waiters re-scored.
local waiting = redis.call('ZRANGE', KEYS[3], 0, -1)
for i = 1, #waiting do
	local e = camps[waiting[i]] or {r = 0, f = 0, ceil = 0, known = 0}
	redis.call('ZADD', KEYS[3], 'XX', wc_score(e.r, e.f, e.ceil, e.known), waiting[i])
end
return {1, version, now, o[9], S}
