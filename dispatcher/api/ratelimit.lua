-- ratelimit.lua: one /v2 request through the API rate limiter (SPEC R1-R3), on Redis's clock:
-- rolls the organisation's bucket to now, decides, and counts the request when it is allowed.
-- Exactly core/ratelimit.c's ratelimit_check() (the readings L1-L9 head core/ratelimit.h; the
-- client is dispatcher/api/ratelimit_redis.c).
-- KEYS: state
-- ARGV: limit
--   state  dsp:v1:{o:<org>}:rl:<bucket>, a hash: w (the current window, floor(ms / 60000)),
--          c (requests allowed in w), p (requests allowed in w - 1), clock_ms (tests only: a
--          pinned clock in ms, absent in production). A hash whose w, c or p is missing or not
--          a decimal integer in range (w 0..2^50 / 60000, counts >= 0) is read as empty.
--   limit  the bucket's requests per minute, 1..2147483647 (the organisation's row)
-- Reply: {allowed (1/0), estimated, remaining, reset_s, retry_after_s, now_ms}
-- Writes only when the request is allowed (L2: a refusal changes nothing): w, c, p, then
-- PEXPIRE 120 s (two windows: past them the state weighs nothing, L7).
-- Every number stays an integer below 2^53, so Lua's doubles compute what C's uint64 do: the
-- previous count is split by the window (p = ph x W + pl) before it is weighted.
local W = 60000
local CAP = 140737488355328 -- 2^47, RATELIMIT_COUNT_CAP (L8)
local NOW_MAX = 1125899906842624 -- 2^50 ms: far beyond any TIME, keeps every product exact
local TTL_MS = 120000

local limit = tonumber(ARGV[1])
if not limit or limit % 1 ~= 0 or limit < 1 or limit > 2147483647 then
	return redis.error_reply('RATELIMIT ARGS limit')
end

-- floor(a / b) for integers 0 <= a < 2^51, 0 < b: the quotient of two doubles may round up
-- across an integer; the loops put it right.
local function idiv(a, b)
	local q = math.floor(a / b)
	while q * b > a do
		q = q - 1
	end
	while (q + 1) * b <= a do
		q = q + 1
	end
	return q
end

-- A stored decimal integer >= 0 (at most max), or nil.
local function int(s, max)
	local n = s and string.match(s, '^%d+$') and tonumber(s)
	if not n or (max and n > max) then
		return nil
	end
	return n
end

local f = redis.call('HMGET', KEYS[1], 'w', 'c', 'p', 'clock_ms')
local now
if f[4] then
	now = tonumber(f[4])
	if not now or now % 1 ~= 0 or now > NOW_MAX then
		return redis.error_reply('RATELIMIT clock_ms')
	end
else
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if now < 0 then -- L7
	now = 0
end

local win = idiv(now, W)
local e = now - win * W
-- cs, ps: the counts as stored (written back unchanged); c, p: their values
local sw, cs, ps = int(f[1], idiv(NOW_MAX, W)), f[2], f[3]
local c, p = int(cs), int(ps)
if not sw or not c or not p then
	sw, cs, ps, c, p = win, '0', '0', 0, 0
end
-- ratelimit_roll()
if win < sw then
	e = 0 -- time went back before the stored window: its start (weight 1); counts kept
elseif win == sw + 1 then
	ps, p, cs, c = cs, c, '0', 0
elseif win > sw then
	ps, p, cs, c = '0', 0, '0', 0
end
if win > sw then
	sw = win
end

-- ratelimit_decide(): estimated = ceil((p x (W - e) + (c + 1) x W) / W)
--                               = c + 1 + ph x (W - e) + ceil(pl x (W - e) / W)
local pc, cc = math.min(p, CAP), math.min(c, CAP)
local left = W - e
local ph = idiv(pc, W)
local t = (pc - ph * W) * left
local tq = idiv(t, W)
local est = cc + 1 + ph * left + tq
if t > tq * W then
	est = est + 1
end
local reset = idiv(left + 999, 1000)
if est > limit then
	-- Retry-After (L6): ms until the estimate fits, rounded up to whole seconds
	local wait
	if cc + 1 <= limit then
		wait = W - idiv((limit - cc - 1) * W, pc) - e
	else
		wait = (W - e) + (W - idiv((limit - 1) * W, cc))
	end
	return {0, est, 0, reset, idiv(wait + 999, 1000), now}
end
-- allowed: c + 1 <= limit, so c is exact and small
redis.call('HSET', KEYS[1], 'w', string.format('%d', sw), 'c', string.format('%d', c + 1),
	'p', ps)
redis.call('PEXPIRE', KEYS[1], TTL_MS)
return {1, est, limit - est, reset, 0, now}
