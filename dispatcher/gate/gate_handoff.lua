-- gate_handoff.lua: a worker's heartbeat, the deadline sweep, and the wake after an install
-- (issue 8, SPEC C9; dispatcher/gate/README.md "Hand-off").
--   beat   the worker's registrations live while Redis time < now + ttl_ms (a waiter of a
--          worker whose heartbeat expired is dropped when met); then the sweep: every woken
--          record past its deadline is dropped and its line passed to the next waiter
--   wake   the sweep, then up to max waiters woken, each the one the rule would admit on a line
--          not promised yet (after floors or limits are installed: newly admissible waiters)
--   leave  the worker's heartbeat removed (its waiters are dropped when met)
--   unwait the waiter whose call id is in the worker argument gives up (C9's wait is over, a
--          direct dial's 5 s): its registration withdrawn (a direct one with k - 1); if it had
--          been woken, its promised line goes to the next waiter at once
-- KEYS: gen_key state sys wait bwait wq wc wdl workers
-- ARGV: gen op worker ttl_ms deadline_ms max
-- Reply: {woken, passed, dropped, receivers, now_ms, k}

-- @include gate_wc.lua.inc
-- @include gate_wake.lua.inc

local OF = '<I4I4BI4dI4ddddd' .. string.rep('I4', 7)
local state, op, worker = KEYS[2], ARGV[2], ARGV[3]
local raw = redis.call('HGET', state, 'org')
if not raw then
	return redis.error_reply('GATE NOLIMITS')
end
local o = {struct.unpack(OF, raw)}
local now = o[10]
if now < 0 then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local n = 0
if op == 'beat' then
	if worker == '' then
		return redis.error_reply('GATE ARGS worker')
	end
	redis.call('HSET', KEYS[9], worker, string.format('%d', now + (tonumber(ARGV[4]) or 0)))
elseif op == 'leave' then
	redis.call('HDEL', KEYS[9], worker)
elseif op == 'wake' then
	n = math.min(tonumber(ARGV[6]) or 0, 16)
elseif op ~= 'unwait' then
	return redis.error_reply('GATE ARGS op')
end
local sv = redis.call('HGET', KEYS[3], 'v')
if not sv then
	return redis.error_reply('GATE NOSYSTEM')
end
local slim, srun = struct.unpack('<I4I4d', sv)
local x = {state = state, wait = KEYS[4], bwait = KEYS[5], wq = KEYS[6], wc = KEYS[7],
	wdl = KEYS[8], workers = KEYS[9], org = string.match(state, '{o:([^}]*)}'), now = now,
	deadline = tonumber(ARGV[5]) or 300, L = o[1], pa = o[2], en = o[3] == 1,
	cap = o[2] > 0 and o[2] < o[1], orun = o[4], S = o[5], k = o[6],
	valid = o[8] > 0 and now < o[9], slim = slim, srun = srun, woken = 0, passed = 0,
	dropped = 0, receivers = 0, alive = {}, last = ''}
if op == 'unwait' then
	local direct, rec = true, redis.call('HGET', KEYS[4], worker)
	if not rec then
		direct, rec = false, redis.call('HGET', KEYS[5], worker)
	end
	if rec then
		if redis.call('ZSCORE', KEYS[8], worker) then
			n = 1 -- it had been woken: its line goes to the next waiter
		end
		hw_drop(x, direct, worker, rec) -- every queue it waits in (gate_wc.lua.inc)
		x.dropped = 1
	end
end
handoff_wake(x, n)
if x.k ~= o[6] then
	o[6] = x.k
	redis.call('HSET', state, 'org', struct.pack(OF, unpack(o, 1, 18)))
end
return {x.woken, x.passed, x.dropped, x.receivers, now, x.k}
