-- gate_wait.lua: registers or withdraws one waiting direct dial (k, C5/C10), idempotent per call
-- id (dispatcher/gate/README.md). gate_admit.lua does the same in the admission's own step
-- (flag "w", and the withdrawal at admission); this script serves a dial that gives up, or one
-- that registers without an admission attempt.
-- A registration here has no worker: it expires WAIT_TTL_MS after its last "wait"
-- (gate_wc.lua.inc; dropped by the hand-off's sweep, gate_wake.lua.inc).
-- KEYS: gen_key state wait wq
-- ARGV: gen op call agent
--   op "wait" registers call (agent "" for none), "unwait" withdraws it
-- Reply: {changed, k}: changed 1 when the registry changed, 0 when it already was so

-- @include gate_wc.lua.inc

local OF = '<I4I4BI4dI4ddddd' .. string.rep('I4', 7)
local state, wait, wq = KEYS[2], KEYS[3], KEYS[4]
local op, call, agent = ARGV[2], ARGV[3], ARGV[4] or ''
local raw = redis.call('HGET', state, 'org')
local o = raw and {struct.unpack(OF, raw)} or
	{0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0}
local k = o[6]

if op == 'wait' then
	if k >= 1073741824 then
		return redis.error_reply('GATE OVERFLOW')
	end
	local now = o[10]
	if now < 0 then
		local t = redis.call('TIME')
		now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	end
	local rec = redis.call('HGET', wait, call)
	if rec then -- already waiting; without a worker, its expiry renewed
		local ra, rs, rw = string.match(rec, '^([^|]*)|(%d+)|?(.*)$')
		if wx_none(rw) then
			wx_unset(wq, call, rec)
			redis.call('HSET', wait, call, ra .. '|' .. rs .. '|' .. wx_set(wq, call, now))
		end
		return {0, k}
	end
	redis.call('HSET', wait, call, agent .. '|' .. string.format('%d', now) .. '|' ..
		wx_set(wq, call, now))
	k = k + 1
elseif op == 'unwait' then
	local rec = redis.call('HGET', wait, call)
	if not rec then
		return {0, k}
	end
	redis.call('HDEL', wait, call)
	wx_unset(wq, call, rec)
	k = math.max(k - 1, 0)
else
	return redis.error_reply('GATE ARGS op')
end
o[6] = k
redis.call('HSET', state, 'org', struct.pack(OF, unpack(o, 1, 18)))
return {1, k}
