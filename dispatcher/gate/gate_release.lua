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
local v = redis.call('HMGET', state, 'org', 'c:' .. c, 'a:' .. ag)
local o = v[1] and {struct.unpack(OF, v[1])}
local now
if o and o[10] >= 0 then
	now = o[10]
else
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
if not o or sys_running == 0 or o[4] == 0 or r == 0 or (ag ~= '' and ar == 0) then
	return {-1, c, ag, taken, now}
end

local set, del = {'org', ''}, {}
local function put(field, keep, value)
	if keep then
		set[#set + 1] = field
		set[#set + 1] = value
	else
		del[#del + 1] = field
	end
end
r = r - 1
o[4] = o[4] - 1
if ag ~= '' then
	ar = ar - 1
end
if c ~= '*' and r < f then
	o[5] = o[5] + 1
	if sag ~= '' then
		if sag == ag then
			as = as + 1
		else
			local raw = redis.call('HGET', state, 'a:' .. sag)
			local sr, ss = 0, 0
			if raw then
				sr, ss = struct.unpack(AF, raw)
			end
			put('a:' .. sag, true, struct.pack(AF, sr, ss + 1))
		end
	end
end
put('c:' .. c, r > 0 or f > 0 or known == 1, struct.pack(CF, r, f, ceil, known) .. sag)
-- Anyone queued or woken in this org? (one EXISTS: a release without waiters pays only this)
local waiting = redis.call('EXISTS', KEYS[7], KEYS[9]) > 0
if waiting and c ~= '*' then
	redis.call('ZADD', KEYS[8], 'XX', wc_score(r, f, ceil, known), c) -- its place in C9's order
end
if ag ~= '' then
	put('a:' .. ag, ar > 0 or as > 0, struct.pack(AF, ar, as))
end
if #del > 0 then
	redis.call('HDEL', state, unpack(del))
end
redis.call('HDEL', slots, call)
redis.call('HSET', sys, 'v', struct.pack(SF, sys_limit, sys_running - 1, sys_version))
-- Demand below floor: this campaign is short, and (checked after the wake) nobody of it waits.
local short = c ~= '*' and r < f and o[8] > 0 and now < o[9]
local function refresh()
	local last = tonumber(redis.call('HGET', state, 'refresh_ms') or '')
	if last and now >= last and now - last < 100 then
		return 0
	end
	redis.call('HSET', state, 'refresh_ms', string.format('%d', now))
	redis.call('PUBLISH', 'dsp:v1:refresh', string.match(state, '{o:([^}]*)}'))
	return 1
end
if not waiting then
	set[2] = struct.pack(OF, unpack(o, 1, 18))
	redis.call('HSET', state, unpack(set))
	return {1, c, ag, taken, now, 0, 0, 0, '', short and refresh() or 0}
end
if #set > 2 then
	redis.call('HSET', state, unpack(set, 3))
end
local x = {state = state, wait = KEYS[5], bwait = KEYS[6], wq = KEYS[7], wc = KEYS[8],
	wdl = KEYS[9], workers = KEYS[10], org = string.match(state, '{o:([^}]*)}'), now = now,
	deadline = tonumber(ARGV[3]) or 300, L = o[1], pa = o[2], en = o[3] == 1,
	cap = o[2] > 0 and o[2] < o[1], orun = o[4], S = o[5], k = o[6],
	valid = o[8] > 0 and now < o[9], slim = sys_limit, srun = sys_running - 1, woken = 0,
	passed = 0, dropped = 0, receivers = 0, alive = {}, last = ''}
handoff_wake(x, 1)
o[6] = x.k
redis.call('HSET', state, 'org', struct.pack(OF, unpack(o, 1, 18)))
short = short and x.last_c ~= c and not redis.call('ZSCORE', KEYS[8], c)
return {1, c, ag, taken, now, x.woken, x.passed, x.receivers, x.last, short and refresh() or 0}
