-- gate_install.lua: installs an org's limits (C4) or floors (C5), fenced by version
-- (dispatcher/gate/README.md). An install whose version is not greater than the stored one
-- changes nothing. Either kind replaces the whole set (a campaign left out loses its limits, or
-- its floor), then rebuilds the shortfall aggregates (shortfall, as:<agent>) from the floors,
-- the running counts and the campaigns' agents: O(campaigns), once per install, as
-- fairshare_gate_install(). Running counts are never touched (nothing is pre-empted, R13).
-- KEYS: gen_key state
-- ARGV: gen kind version ...
--   kind "limits": org_limit per_agent enforced, then (campaign ceiling agent) triples;
--                  per_agent 0 = unset, enforced 1/0, ceiling "" = none, agent "" = none
--   kind "floors": ttl_ms, then (campaign floor) pairs; campaign "*" = the direct pseudo-campaign
-- Reply: {applied, version, now_ms, floors_expire_ms, shortfall}
--   applied 1, or 0 when version is not newer (version is then the stored one)

local state = KEYS[2]
local kind, version = ARGV[2], tonumber(ARGV[3])
local COUNT_MAX = 1073741824
local CHUNK = 1000

local function args_error(what)
	return redis.error_reply('GATE ARGS ' .. what)
end
local function id_ok(s)
	return #s >= 1 and #s <= 64 and string.match(s, '^[%w_-]+$') ~= nil
end
local function count(s, min)
	local n = tonumber(s)
	if not n or n % 1 ~= 0 or n < min or n > COUNT_MAX or not string.match(s, '^%d+$') then
		return nil
	end
	return n
end
local function fmt(n)
	return string.format('%d', n)
end
-- HSET/HDEL of many fields, in chunks (unpack has a stack limit).
local function hset(t)
	for i = 1, #t, 2 * CHUNK do
		redis.call('HSET', state, unpack(t, i, math.min(i + 2 * CHUNK - 1, #t)))
	end
end
local function hdel(t)
	for i = 1, #t, CHUNK do
		redis.call('HDEL', state, unpack(t, i, math.min(i + CHUNK - 1, #t)))
	end
end

if (kind ~= 'limits' and kind ~= 'floors') or not version or version < 1 or
	version > 9007199254740991 or version % 1 ~= 0 or not string.match(ARGV[3], '^%d+$') then
	return args_error('kind or version')
end
local vfield = kind == 'limits' and 'limits_version' or 'floors_version'
local cur = redis.call('HMGET', state, vfield, 'clock_ms', 'floors_expire_ms', 'shortfall')
local now = tonumber(cur[2])
if not now then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local stored = tonumber(cur[1]) or 0
if version <= stored then
	return {0, stored, now, tonumber(cur[3]) or 0, tonumber(cur[4]) or 0}
end

-- The new set, checked before anything is written.
local new, fields = {}, {}
local expire = tonumber(cur[3]) or 0
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
		new[c] = ceil .. '|' .. ag
	end
	fields = {'org_limit', ARGV[4], 'per_agent', ARGV[5], 'enforced', ARGV[6],
		'limits_version', ARGV[3]}
else
	local ttl = tonumber(ARGV[4])
	if not ttl or ttl < 0 or ttl > 1099511627776 or ttl % 1 ~= 0 or (#ARGV - 4) % 2 ~= 0 then
		return args_error('floors')
	end
	for i = 5, #ARGV, 2 do
		local c, f = ARGV[i], count(ARGV[i + 1], 0)
		if (c ~= '*' and not id_ok(c)) or not f then
			return args_error('floor ' .. c)
		end
		if f > 0 then
			new[c] = f
		end
	end
	expire = now + ttl
	fields = {'floors_version', ARGV[3], 'floors_expire_ms', fmt(expire), 'floors_at_ms', fmt(now)}
end

-- Current campaign fields, then the replaced set: stale entries go, new ones are written.
local all = redis.call('HGETALL', state)
local x, f, r, old_as = {}, {}, {}, {}
for i = 1, #all, 2 do
	local k, v = all[i], all[i + 1]
	local p = string.sub(k, 1, 2)
	if p == 'x:' then
		x[string.sub(k, 3)] = v
	elseif p == 'f:' then
		f[string.sub(k, 3)] = tonumber(v)
	elseif p == 'r:' then
		r[string.sub(k, 3)] = tonumber(v)
	elseif p == 'as' and string.sub(k, 3, 3) == ':' then
		old_as[#old_as + 1] = k
	end
end
local prefix, cur_set = kind == 'limits' and 'x:' or 'f:', kind == 'limits' and x or f
local gone = {}
for c in pairs(cur_set) do
	if new[c] == nil then
		gone[#gone + 1] = prefix .. c
	end
end
for c, v in pairs(new) do
	fields[#fields + 1] = prefix .. c
	fields[#fields + 1] = type(v) == 'number' and fmt(v) or v
end
if kind == 'limits' then
	x = new
else
	f = new
end

-- S and S_a from the floors, the running counts and the campaigns' agents (R6, R7).
local S, as = 0, {}
for c, fl in pairs(f) do
	if c ~= '*' then
		local sh = fl - (r[c] or 0)
		if sh > 0 then
			S = S + sh
			local ag = x[c] and string.match(x[c], '|(.*)$') or ''
			if ag ~= '' then
				as[ag] = (as[ag] or 0) + sh
			end
		end
	end
end
for i = 1, #old_as do
	gone[#gone + 1] = old_as[i]
end
hdel(gone)
fields[#fields + 1] = 'shortfall'
fields[#fields + 1] = fmt(S)
for ag, v in pairs(as) do
	fields[#fields + 1] = 'as:' .. ag
	fields[#fields + 1] = fmt(v)
end
hset(fields)
return {1, version, now, expire, S}
