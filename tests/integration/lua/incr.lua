-- incr.lua: adds one to a counter and answers its new value (tests).
-- KEYS: counter
-- ARGV:
return redis.call('INCR', KEYS[1])
