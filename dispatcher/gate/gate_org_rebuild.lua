-- gate_org_rebuild.lua: (re)builds one org's slot state under generation G from the live calls
-- the caller read from PostgreSQL (dispatcher/gate/README.md). The reconciler's primitive (C11)
-- and how a new organisation's state is first created (no records). Guarded by the *system*
-- generation: an org is built only under the generation the system state holds.
-- Slot records, running counts (campaign, agent, org), the waiter registry (k = 0: waiting direct
-- dials register again) and the shortfall aggregates are replaced; limits, floors and the
-- decision counters are kept. The system running count moves by the difference between the
-- new org count and the old one when the org was already built under G (otherwise the old
-- calls were never counted under G: gate_system_init.lua reset the system count).
-- KEYS: gen_key org_gen state slots wait sys
-- ARGV: gen ...
--   ... (call campaign agent taken_ms) per live call: campaign "*" = direct, agent "" = none;
--       a call id listed twice counts once
-- Reply: {records, old_running, new_running}

local org_gen, state, slots, wait, sys = KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local CHUNK = 1000
local function id_ok(s)
	return #s >= 1 and #s <= 64 and string.match(s, '^[%w_-]+$') ~= nil
end
local function fmt(n)
	return string.format('%d', n)
end
local function chunked(cmd, key, t, step)
	for i = 1, #t, step do
		redis.call(cmd, key, unpack(t, i, math.min(i + step - 1, #t)))
	end
end

if (#ARGV - 1) % 4 ~= 0 then
	return redis.error_reply('GATE ARGS records')
end
local seen, recs, r, ar, n = {}, {}, {}, {}, 0
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
		r[c] = (r[c] or 0) + 1
		if a ~= '' then
			ar[a] = (ar[a] or 0) + 1
		end
	end
end

local same = redis.call('GET', org_gen) == ARGV[1]
local all = redis.call('HGETALL', state)
local x, f, gone, old = {}, {}, {}, 0
for i = 1, #all, 2 do
	local k, v = all[i], all[i + 1]
	local p, q = string.sub(k, 1, 2), string.sub(k, 1, 3)
	if p == 'x:' then
		x[string.sub(k, 3)] = v
	elseif p == 'f:' then
		f[string.sub(k, 3)] = tonumber(v)
	elseif p == 'r:' or q == 'ar:' or q == 'as:' or k == 'shortfall' or k == 'waiting' then
		gone[#gone + 1] = k
	elseif k == 'running' then
		old = tonumber(v) or 0
		gone[#gone + 1] = k
	end
end
if not same then
	old = 0
end
chunked('HDEL', state, gone, CHUNK)
redis.call('DEL', slots, wait)
chunked('HSET', slots, recs, 2 * CHUNK)

local S, as = 0, {}
for c, fl in pairs(f) do
	if c ~= '*' then
		local sh = fl - (r[c] or 0)
		if sh > 0 then
			S = S + sh
			local a = x[c] and string.match(x[c], '|(.*)$') or ''
			if a ~= '' then
				as[a] = (as[a] or 0) + sh
			end
		end
	end
end
local w = {'running', fmt(n), 'shortfall', fmt(S), 'waiting', '0'}
for c, v in pairs(r) do
	w[#w + 1] = 'r:' .. c
	w[#w + 1] = fmt(v)
end
for a, v in pairs(ar) do
	w[#w + 1] = 'ar:' .. a
	w[#w + 1] = fmt(v)
end
for a, v in pairs(as) do
	w[#w + 1] = 'as:' .. a
	w[#w + 1] = fmt(v)
end
chunked('HSET', state, w, 2 * CHUNK)
local sr = (tonumber(redis.call('HGET', sys, 'running')) or 0) + n - old
redis.call('HSET', sys, 'running', fmt(math.max(sr, 0)))
redis.call('SET', org_gen, ARGV[1])
return {n, old, n}
