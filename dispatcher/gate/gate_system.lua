-- gate_system.lua: installs the system limit (C1 global cap, C4), fenced by version
-- (system_settings.limits_version) (dispatcher/gate/README.md). The running count is untouched.
-- KEYS: gen_key sys
-- ARGV: gen version limit
-- Reply: {applied, version}: applied 0 when version is not newer (version: the stored one)

local SF = '<I4I4d'
local v, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
if not string.match(ARGV[2], '^%d+$') or not string.match(ARGV[3], '^%d+$') or v < 1 or
	v > 9007199254740991 or limit < 1 or limit > 1073741824 then
	return redis.error_reply('GATE ARGS version or limit')
end
local raw = redis.call('HGET', KEYS[2], 'v')
if not raw then
	return redis.error_reply('GATE NOSYSTEM')
end
local _, running, stored = struct.unpack(SF, raw)
if v <= stored then
	return {0, stored}
end
redis.call('HSET', KEYS[2], 'v', struct.pack(SF, limit, running, v))
return {1, v}
