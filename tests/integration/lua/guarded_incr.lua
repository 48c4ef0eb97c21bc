-- guarded_incr.lua: adds one to a counter, only under the caller's generation (tests).
-- KEYS: gen_key counter
-- ARGV: gen
return redis.call('INCR', KEYS[2])
