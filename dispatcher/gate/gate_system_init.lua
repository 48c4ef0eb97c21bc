-- gate_system_init.lua: starts a new gate generation G for the system level
-- (dispatcher/gate/README.md). Only the state's builder calls it (the reconciler, holding the
-- locks of C11, then rebuilds every org under G with gate_org_rebuild.lua; tests). Every org
-- built under another generation is refused (STALEGEN) until it is rebuilt under G.
-- Not guarded: it writes the system generation key.
-- KEYS: sys_gen sys
-- ARGV: gen version limit
-- Reply: "OK"; error GATE SAMEGEN when the system generation already is gen (nothing changed)

local SF = '<I4I4d'
local v, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
if #ARGV[1] < 1 or #ARGV[1] > 64 or not string.match(ARGV[2], '^%d+$') or
	not string.match(ARGV[3], '^%d+$') or v < 1 or v > 9007199254740991 or limit < 1 or
	limit > 1073741824 then
	return redis.error_reply('GATE ARGS gen, version or limit')
end
-- The generation in force again would reset the system count under orgs still built under it
-- (their calls would no longer count at the system level): a new state needs a new G.
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.error_reply('GATE SAMEGEN the system state is already built under this generation')
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'v', struct.pack(SF, limit, 0, v))
redis.call('SET', KEYS[1], ARGV[1])
return redis.status_reply('OK')
