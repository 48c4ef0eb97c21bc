-- gate_slot_add.lua: puts back the slot of a live call that has none (SPEC C11; core/reconcile.h
-- RECONCILE_ADD; dispatcher/gate/README.md). The reconciler's correction of a lost slot: the
-- call row is live in PostgreSQL, so the call counts, whatever the limits say — no limit is
-- checked, and a level may end above its limit (it then refuses until calls end, C6/R13). Only
-- when the call has no slot record: it then takes one slot at every level (system, org,
-- campaign, agent) with the shortfall aggregates by the stored floor, through the very writes
-- of an admission's acquire (gate_acquire.lua.inc). No decision is counted, no waiter touched.
-- KEYS: gen_key state slots sys wc
-- ARGV: gen call campaign agent taken_ms
--   campaign "*" = direct; agent "" = none (the call row's agent); taken_ms: the record's time
-- Reply: {added, record}: 1 and the record written, or 0 and the record the call already has
-- Errors: GATE NOSYSTEM, GATE OVERFLOW, GATE ARGS <what>.

-- @include gate_wc.lua.inc
-- @include gate_acquire.lua.inc

local OF = '<I4I4BI4dI4dddddI4I4I4I4I4I4I4'
local CF, AF, SF = '<I4I4I4B', '<I4d', '<I4I4d'
local COUNT_MAX = 1073741824

local state, slots, sys = KEYS[2], KEYS[3], KEYS[4]
local call, c, ag, taken = ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local function id_ok(s)
	return s ~= nil and #s >= 1 and #s <= 64 and string.match(s, '^[%w_-]+$') ~= nil
end
if #ARGV ~= 5 or not id_ok(call) or (c ~= '*' and not id_ok(c)) or
	(ag ~= '' and not id_ok(ag)) or not string.match(taken, '^%d+$') then
	return redis.error_reply('GATE ARGS slot add')
end

local held = redis.call('HGET', slots, call)
if held then
	return {0, held}
end
local sv = redis.call('HGET', sys, 'v')
if not sv then
	return redis.error_reply('GATE NOSYSTEM')
end
local slim, srun, sver = struct.unpack(SF, sv)
local v = redis.call('HMGET', state, 'org', 'c:' .. c)
local o = {0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0}
if v[1] then
	o = {struct.unpack(OF, v[1])}
end
local r, f, ceil, known, sag = 0, 0, 0, 0, ''
if v[2] then
	r, f, ceil, known = struct.unpack(CF, v[2])
	sag = string.sub(v[2], 14)
end
local agr, ags = 0, 0
if ag ~= '' then
	local araw = redis.call('HGET', state, 'a:' .. ag)
	if araw then
		agr, ags = struct.unpack(AF, araw)
	end
end
if srun >= COUNT_MAX or o[4] >= COUNT_MAX or r >= COUNT_MAX or agr >= COUNT_MAX then
	return redis.error_reply('GATE OVERFLOW')
end
ga_take({state = state, slots = slots, sys = sys, wc = KEYS[5], call = call, c = c, ag = ag,
	taken = tonumber(taken), r = r, f = f, ceil = ceil, known = known, sag = sag, agr = agr,
	ags = ags, slim = slim, srun = srun, sver = sver, extra = {}}, o)
return {1, c .. '|' .. ag .. '|' .. taken}
