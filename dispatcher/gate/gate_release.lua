-- gate_release.lua: gives one call's slots back, once (dispatcher/gate/README.md).
-- Transcribes fairshare_gate_release() of dispatcher/core/fairshare_gate.c. Idempotent per call
-- id: a call id without a slot record (a duplicate, out-of-order or unknown release) frees
-- nothing. A count that is already 0 changes nothing (range) and the record stays for the
-- reconciler. The shortfall aggregates follow the stored floor (expired or not), attributed to
-- the campaign's agent as installed.
-- A freed line wakes the one waiter the rule would admit (gate_wake.lua.inc, C9): PUBLISH to its
-- worker's channel, in this same script.
-- Demand below floor (issue 8 item 3): a release that leaves a batch campaign below its valid
-- floor while no waiter of it is queued (nor woken by this release) PUBLISHes the org id on
-- dsp:v1:refresh, so the refresher recomputes at once; at most once per org per 100 ms (Redis
-- time of the last one in the state field refresh_ms, text; no TTL).
-- KEYS: gen_key state slots sys wait bwait wq wc wdl workers
-- ARGV: gen call deadline_ms
--   deadline_ms  how long a woken waiter has to take its line before the wake passes on
-- Reply: {outcome, campaign, agent, taken_ms, now_ms, woken, passed, receivers, woken_call,
--         refresh}
--   outcome 1 freed, 0 not held (campaign, agent "" and taken_ms 0), -1 range
--   woken      waiters woken (0 or 1, plus one per expired wake passed on)
--   passed     expired wakes passed on; receivers: subscribers the PUBLISHes reached
--   woken_call the last woken waiter's call id ("" for none)
--   refresh    1 when this release published demand below floor on dsp:v1:refresh, else 0

-- @include gate_wc.lua.inc
-- @include gate_wake.lua.inc

local OF = '<I4I4BI4dI4ddddd' .. string.rep('I4', 7)
local CF, AF, SF = '<I4I4I4B', '<I4d', '<I4I4d'

local state, slots, sys = KEYS[2], KEYS[3], KEYS[4]
local call = ARGV[2]

local rec = redis.call('HGET', slots, call)
local c, ag, taken = '', '', 0
if rec then
	c, ag, taken = string.match(rec, '^([^|]*)|([^|]*)|(%d+)$')
	taken = tonumber(taken)
end
local cf, af = 'c:' .. c, 'a:' .. ag
local v = redis.call('HMGET', state, 'org', cf, af)
-- The org record's fields as locals: a release without waiters builds no table (every table is
-- paid per call, README.md "Sizing").
local L, pa, en, orun, S, k, lver, fver, fexp, clock, sec, n1, n2, n3, n4, n5, n6, n7
if v[1] then
	L, pa, en, orun, S, k, lver, fver, fexp, clock, sec, n1, n2, n3, n4, n5, n6, n7 =
		struct.unpack(OF, v[1])
end
local now
if v[1] and clock >= 0 then
	now = clock
else
	local t = redis.call('TIME')
	now = t[1] * 1000 + math.floor(t[2] / 1000)
end
if not rec then
	return {0, '', '', 0, now}
end

local r, f, ceil, known, sag = 0, 0, 0, 0, ''
if v[2] then
	r, f, ceil, known = struct.unpack(CF, v[2])
	sag = string.sub(v[2], 14)
end
local ar, as = 0, 0
if v[3] then
	ar, as = struct.unpack(AF, v[3])
end
local sv = redis.call('HGET', sys, 'v')
local sys_limit, sys_running, sys_version = 0, 0, 0
if sv then
	sys_limit, sys_running, sys_version = struct.unpack(SF, sv)
end
if not v[1] or sys_running == 0 or orun == 0 or r == 0 or (ag ~= '' and ar == 0) then
	return {-1, c, ag, taken, now}
end

r = r - 1
orun = orun - 1
if ag ~= '' then
	ar = ar - 1
end
local other -- the campaign's installed agent when it is not ag: its shortfall moves too
if c ~= '*' and r < f then
	S = S + 1
	if sag ~= '' then
		if sag == ag then
			as = as + 1
		else
			local raw = redis.call('HGET', state, 'a:' .. sag)
			local sr, ss = 0, 0
			if raw then
				sr, ss = struct.unpack(AF, raw)
			end
			other = struct.pack(AF, sr, ss + 1)
		end
	end
end
-- A record whose counts are all 0 goes (nil: delete its field).
local crec = (r > 0 or f > 0 or known == 1) and struct.pack(CF, r, f, ceil, known) .. sag or nil
local arec = ag ~= '' and (ar > 0 or as > 0) and struct.pack(AF, ar, as) or nil
-- Anyone queued or woken in this org? (one EXISTS: a release without waiters pays only this)
local waiting = redis.call('EXISTS', KEYS[7], KEYS[9]) > 0
if waiting and c ~= '*' then
	redis.call('ZADD', KEYS[8], 'XX', wc_score(r, f, ceil, known), c) -- its place in C9's order
end
if not crec or (ag ~= '' and not arec) then
	local del = {}
	if not crec then
		del[1] = cf
	end
	if ag ~= '' and not arec then
		del[#del + 1] = af
	end
	redis.call('HDEL', state, unpack(del))
end
redis.call('HDEL', slots, call)
redis.call('HSET', sys, 'v', struct.pack(SF, sys_limit, sys_running - 1, sys_version))
-- Demand below floor: this campaign is short, and (checked after the wake) nobody of it waits.
local short = c ~= '*' and r < f and fver > 0 and now < fexp
-- The fields to set (org first; its record is written last when a wake follows).
local set = nil
if other or not crec or (ag ~= '' and not arec) then
	set = {'org', ''}
	if crec then
		set[#set + 1], set[#set + 2] = cf, crec
	end
	if arec then
		local n = #set
		set[n + 1], set[n + 2] = af, arec
	end
	if other then
		local n = #set
		set[n + 1], set[n + 2] = 'a:' .. sag, other
	end
end
local woken, passed, receivers, last = 0, 0, 0, '' -- the wake's outcome (none: nobody waits)
if not waiting then
	local orec = struct.pack(OF, L, pa, en, orun, S, k, lver, fver, fexp, clock, sec, n1, n2, n3,
		n4, n5, n6, n7)
	if set then
		set[2] = orec
		redis.call('HSET', state, unpack(set))
	elseif arec then
		redis.call('HSET', state, 'org', orec, cf, crec, af, arec)
	else
		redis.call('HSET', state, 'org', orec, cf, crec)
	end
else
	if set then
		if #set > 2 then
			redis.call('HSET', state, unpack(set, 3))
		end
	elseif arec then
		redis.call('HSET', state, cf, crec, af, arec)
	else
		redis.call('HSET', state, cf, crec)
	end
	local o = {L, pa, en, orun, S, k, lver, fver, fexp, clock, sec, n1, n2, n3, n4, n5, n6, n7}
	local x = {state = state, wait = KEYS[5], bwait = KEYS[6], wq = KEYS[7], wc = KEYS[8],
		wdl = KEYS[9], workers = KEYS[10], org = string.match(state, '{o:([^}]*)}'), now = now,
		deadline = tonumber(ARGV[3]) or 300, L = o[1], pa = o[2], en = o[3] == 1,
		cap = o[2] > 0 and o[2] < o[1], orun = o[4], S = o[5], k = o[6],
		valid = o[8] > 0 and now < o[9], slim = sys_limit, srun = sys_running - 1, woken = 0,
		passed = 0, dropped = 0, receivers = 0, alive = {}, last = ''}
	handoff_wake(x, 1)
	o[6] = x.k
	redis.call('HSET', state, 'org', struct.pack(OF, unpack(o, 1, 18)))
	woken, passed, receivers, last = x.woken, x.passed, x.receivers, x.last
	short = short and x.last_c ~= c and not redis.call('ZSCORE', KEYS[8], c)
end
-- Demand below floor published (rate-limited by refresh_ms), on both paths; no closure.
local refresh = 0
if short then
	local prev = tonumber(redis.call('HGET', state, 'refresh_ms') or '')
	if not (prev and now >= prev and now - prev < 100) then
		redis.call('HSET', state, 'refresh_ms', string.format('%d', now))
		redis.call('PUBLISH', 'dsp:v1:refresh', string.match(state, '{o:([^}]*)}'))
		refresh = 1
	end
end
return {1, c, ag, taken, now, woken, passed, receivers, last, refresh}
