-- generation_guard.lua: put in front of every script registered with REDIS_SCRIPT_GUARDED
-- (common/redis_script.h). The script runs only when the generation key holds the generation its
-- caller built its state under; otherwise that state is gone (FLUSHALL, a restart, a failover to
-- a lagging replica) and the script answers "STALEGEN <found>" without touching anything.
-- A fragment, not a script of its own: its keys and arguments come first in the guarded script's.
-- KEYS: gen_key (then the guarded script's own keys)
-- ARGV: gen (then the guarded script's own arguments)
do
	local found = redis.call('GET', KEYS[1])
	if found ~= ARGV[1] then
		return redis.error_reply('STALEGEN ' .. (found or '(none)'))
	end
end
