-- gate_release.lua: gives one call's slots back, once (dispatcher/gate/README.md).
-- Transcribes fairshare_gate_release() of dispatcher/core/fairshare_gate.c. Idempotent per call
-- id: a call id without a slot record (a duplicate, out-of-order or unknown release) frees
-- nothing. A count that is already 0 changes nothing (range) and the record stays for the
-- reconciler. The shortfall aggregates follow the stored floor (expired or not), attributed to
-- the campaign's agent as installed (x:).
-- KEYS: gen_key state slots sys
-- ARGV: gen call
-- Reply: {outcome, campaign, agent, taken_ms, now_ms}
--   outcome 1 freed, 0 not held (campaign, agent "" and taken_ms 0), -1 range

local state, slots, sys = KEYS[2], KEYS[3], KEYS[4]
local call = ARGV[2]

local function clock()
	local pinned = redis.call('HGET', state, 'clock_ms')
	if pinned then
		return tonumber(pinned)
	end
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local rec = redis.call('HGET', slots, call)
if not rec then
	return {0, '', '', 0, clock()}
end
local c, ag, taken = string.match(rec, '^([^|]*)|([^|]*)|(%d+)$')
taken = tonumber(taken)
local o = redis.call('HMGET', state, 'running', 'shortfall', 'clock_ms', 'r:' .. c, 'f:' .. c,
	'x:' .. c, 'ar:' .. ag)
local now = tonumber(o[3])
if not now then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local org_running, S = tonumber(o[1]) or 0, tonumber(o[2]) or 0
local r, f, ar = tonumber(o[4]) or 0, tonumber(o[5]) or 0, tonumber(o[7]) or 0
local sys_running = tonumber(redis.call('HGET', sys, 'running')) or 0
if sys_running == 0 or org_running == 0 or r == 0 or (ag ~= '' and ar == 0) then
	return {-1, c, ag, taken, now}
end

local w = {'running', org_running - 1}
local del = {}
if r == 1 then
	del[#del + 1] = 'r:' .. c
else
	w[#w + 1] = 'r:' .. c
	w[#w + 1] = r - 1
end
if ag ~= '' then
	if ar == 1 then
		del[#del + 1] = 'ar:' .. ag
	else
		w[#w + 1] = 'ar:' .. ag
		w[#w + 1] = ar - 1
	end
end
if c ~= '*' and r - 1 < f then
	w[#w + 1] = 'shortfall'
	w[#w + 1] = S + 1
	local sa = o[6] and string.match(o[6], '|(.*)$') or ''
	if sa ~= '' then
		w[#w + 1] = 'as:' .. sa
		w[#w + 1] = (tonumber(redis.call('HGET', state, 'as:' .. sa)) or 0) + 1
	end
end
redis.call('HSET', state, unpack(w))
if #del > 0 then
	redis.call('HDEL', state, unpack(del))
end
redis.call('HDEL', slots, call)
redis.call('HSET', sys, 'running', sys_running - 1)
return {1, c, ag, taken, now}
