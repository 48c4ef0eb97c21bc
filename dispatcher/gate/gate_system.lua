-- gate_system.lua: installs the system limit (C1 global cap, C4), fenced by version
-- (system_settings.limits_version) (dispatcher/gate/README.md). The running count is untouched.
-- KEYS: gen_key sys
-- ARGV: gen version limit
-- Reply: {applied, version}: applied 0 when version is not newer (version: the stored one)

local sys = KEYS[2]
local v, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
if not v or v < 1 or v > 9007199254740991 or v % 1 ~= 0 or not limit or limit < 1 or
	limit > 1073741824 or limit % 1 ~= 0 then
	return redis.error_reply('GATE ARGS version or limit')
end
local stored = tonumber(redis.call('HGET', sys, 'limit_version')) or 0
if v <= stored then
	return {0, stored}
end
redis.call('HSET', sys, 'limit', ARGV[3], 'limit_version', ARGV[2])
return {1, v}
