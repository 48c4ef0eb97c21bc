-- lane_take.lua: one fleet-wide lane (provider, organisation; SPEC D3) on Redis's clock: takes
-- up to n tokens of its token bucket unless the lane is stopped, parked or its circuit open
-- (dispatcher/worker/README.md, "Fleet-wide lanes"; the client is lane_fleet.c).
-- KEYS: lane
-- ARGV: rate burst n probe_ms
--   lane      dsp:v1:{o:<org>}:lane:<provider>, a hash: milli, last_ms (the bucket),
--             stopped_until_ms, parked_until_ms, open_until_ms (Redis time, ms), clock_ms (tests
--             only: a pinned clock, absent in production)
--   rate      tokens per second, 0 = unpaced; burst: the bucket's depth (0 is taken as 1)
--   n         tokens wanted (1..1000); one when the take is a probe
--   probe_ms  a probe's answer is awaited this long; past it another take may probe
-- Reply: {granted, wait_ms, what, now_ms, probe_until_ms}
--   what: 'go' (granted = n), 'bucket' (granted < n; wait_ms until the next token), 'stopped',
--   'parked', 'open' (granted 0; wait_ms until the gate ends), 'probe_stop' / 'probe_open' (one
--   token granted as the probe of a stop / an open circuit that has run out; probe_until_ms is
--   the value lane_mark.lua's `clear` expects).
-- The bucket is core/token_bucket.c's arithmetic, integer thousandths of a token: refill
-- elapsed × rate thousandths (saturating at burst × 1000 once elapsed > cap / rate), take 1000
-- per token, wait ceil((1000 − milli) / rate) ms; time that goes backwards refills nothing.
local rate, burst, n, probe_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
	tonumber(ARGV[4])
if not rate or rate < 0 or rate % 1 ~= 0 or rate > 4294967295 or not burst or burst < 0 or
	burst % 1 ~= 0 or burst > 4294967295 or not n or n < 1 or n > 1000 or n % 1 ~= 0 or
	not probe_ms or probe_ms < 1 or probe_ms % 1 ~= 0 then
	return redis.error_reply('LANE ARGS')
end
if burst == 0 then
	burst = 1
end
local f = redis.call('HMGET', KEYS[1], 'milli', 'last_ms', 'stopped_until_ms',
	'parked_until_ms', 'open_until_ms', 'clock_ms')
local now = tonumber(f[6])
if not now then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local st, pk, op = tonumber(f[3]), tonumber(f[4]), tonumber(f[5])
if st and now < st then
	return {0, st - now, 'stopped', now, 0}
end
if pk and now < pk then
	return {0, pk - now, 'parked', now, 0}
end
if op and now < op then
	return {0, op - now, 'open', now, 0}
end
-- A stop or an open circuit whose time has run out is kept until its probe's answer clears it.
local probe = (st and 'stopped_until_ms') or (op and 'open_until_ms') or nil
if probe then
	n = 1
end
local granted, wait = n, 0
if rate > 0 then
	local cap = burst * 1000
	local milli, last = tonumber(f[1]), tonumber(f[2])
	if not milli or not last then
		milli, last = cap, now -- a new lane starts full
	end
	if milli > cap then
		milli = cap -- the depth was lowered
	end
	if now > last then
		local elapsed = now - last
		last = now
		if elapsed > math.floor(cap / rate) then
			milli = cap
		else
			milli = milli + elapsed * rate
			if milli > cap then
				milli = cap
			end
		end
	end
	granted = 0
	while granted < n and milli >= 1000 do
		milli = milli - 1000
		granted = granted + 1
	end
	if granted < n then
		wait = math.floor((1000 - milli + rate - 1) / rate)
	end
	redis.call('HSET', KEYS[1], 'milli', milli, 'last_ms', last)
end
if granted > 0 and probe then
	local due = now + probe_ms
	redis.call('HSET', KEYS[1], probe, due)
	return {granted, 0, probe == 'stopped_until_ms' and 'probe_stop' or 'probe_open', now, due}
end
return {granted, wait, granted == n and 'go' or 'bucket', now, 0}
