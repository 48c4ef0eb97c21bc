-- bench_incr.lua: the trivial script of bench/conn/redis_bench.c (EVALSHA beside INCR).
-- KEYS: counter
-- ARGV:
return redis.call('INCR', KEYS[1])
