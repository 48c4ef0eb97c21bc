-- gate_admit.lua: one admission decision for a call id, and its slots (dispatcher/gate/README.md).
-- Transcribes fairshare_gate_try() of dispatcher/core/fairshare_gate.c over the aggregates kept
-- in the org's state hash: the candidates, in the selector's order, are decided one after the
-- other; the first admitted takes its slots at every level; a refusal that holds for every
-- campaign (system, organisation, direct reserve: fairshare_gate_blocks_org()) ends the walk.
-- O(1) in the number of campaigns: one org record, one record per candidate and per agent.
-- Written for speed (every µs here is paid per decision): locals rather than tables, no
-- closures, binary records (struct) rather than text.
-- KEYS: gen_key state slots wait sys bwait wq wc wdl sys_gen
-- ARGV: gen call flags agent worker ...
--   call    the call id (the slot id at every level)
--   flags   "" or "w": a refused call registers as a waiter (C9/C10): a direct dial as a
--           waiting direct dial (k + 1), a batch call under each of its candidates (all were
--           refused); a waiter refused again (woken or not) goes back to its places in the
--           queue with its first since: a direct dial as before, a batch call under this
--           admission's candidates (those it will offer when woken; its record rewritten when
--           they changed)
--   agent   a direct dial's agent ("" for none); ignored for batch candidates
--   worker  the worker holding the waiter (its wake channel); "" for none: a direct dial
--           then counts in k but is never woken, and its registration expires (gate_wc.lua.inc
--           WAIT_TTL_MS, renewed by each refusal; a batch waiter needs a worker)
--   ...     1..16 candidate campaign ids, or "*" alone (a direct dial)
-- Reply: {outcome, campaign, now_ms, k, waiter, n, level_1, reason_1, fcfs_1, ...}
--   outcome 1 admitted (campaign: the admitted one), 0 refused (campaign ""),
--           2 held: the call already holds a slot, nothing taken and no decision counted:
--           {2, campaign, now_ms, k, 0, 0, agent, taken_ms}
--   waiter  1 registered as waiting, -1 its registration withdrawn, 0 unchanged
--   n       decisions that follow, one per evaluated candidate, in order
--   level   0 none, 1 system, 2 organisation, 3 agent, 4 campaign, 5 fair_share
--   reason  0 none, 1 full, 2 direct_reserve, 3 floors, 4 agent_floors, 5 unknown campaign
--           (no limits installed for it; enforcement on only: off, C3, it is admitted like any
--           campaign, counted on its record's agent, none when it has none)
-- sys_gen: the system's generation key ({sys}:gen). The guard in front checks the org's; the
--   system count this admission adds to must be of the same generation too, so an org a stale
--   rebuild has not reached yet cannot admit against another build's system count: STALEGEN.
-- Errors: GATE NOLIMITS, GATE NOSYSTEM, GATE OVERFLOW, GATE ARGS <what>, STALEGEN sys.
-- Records (README.md "Records"): org OF, campaign CF + agent id, agent AF, system SF, one second
-- of the rolling minute RF, totals TF.

-- @include gate_wc.lua.inc
-- @include gate_acquire.lua.inc

local OF = '<I4I4BI4dI4dddddI4I4I4I4I4I4I4'
local CF, AF, SF = '<I4I4I4B', '<I4d', '<I4I4d'
local RF, TF = '<dI4I4I4I4I4I4I4', '<ddddddd'
local COUNT_MAX = 1073741824

if redis.call('GET', KEYS[10]) ~= ARGV[1] then
	return redis.error_reply('STALEGEN sys')
end

local state, slots, sys = KEYS[2], KEYS[3], KEYS[5]
local call, dagent = ARGV[2], ARGV[4]
local ncand = #ARGV - 5
if ncand < 1 or ncand > 16 then
	return redis.error_reply('GATE ARGS candidates')
end
local direct = ARGV[6] == '*'
if direct and ncand ~= 1 then
	return redis.error_reply('GATE ARGS a direct dial is its only candidate')
end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local v = redis.call('HMGET', state, 'org', 'c:' .. ARGV[6])
if not v[1] then
	return redis.error_reply('GATE NOLIMITS')
end
local L, pa, en, orun, S, k, lver, fver, fexp, clock, sec, n1, n2, n3, n4, n5, n6, n7 =
	struct.unpack(OF, v[1])
if L == 0 then
	return redis.error_reply('GATE NOLIMITS')
end
if clock >= 0 then -- a pinned clock (tests only)
	now = clock
end
local enforced = en == 1
local valid = fver > 0 and now < fexp
local fcfs = enforced and not valid
local cap = pa > 0 and pa < L -- C2: per_agent gates below org_limit

local sv = redis.call('HGET', sys, 'v')
if not sv then
	return redis.error_reply('GATE NOSYSTEM')
end
local slim, srun, sver = struct.unpack(SF, sv)

local held = redis.call('HGET', slots, call)
if held then
	local hc, ha, ht = string.match(held, '^([^|]*)|([^|]*)|(%d+)$')
	return {2, hc, now, k, 0, 0, ha, tonumber(ht)}
end

-- Each candidate, fairshare_gate_admit()'s checks 1..6 in order.
local reply = {0, '', now, k, 0, 0, 0, 0, 0} -- sized for one decision (a table's growth costs)
local d1, d2, d3, d4, d5, d6, d7 = 0, 0, 0, 0, 0, 0, 0 -- admitted, fcfs, refused by level
local R -- min(k, max(1, floor(direct))) with valid floors, min(k, 1) without (R6, R9)
local c, r, f, ceil, known, sag, ag, agr, ags
local last, lastr, lasts -- the agent record read last (candidates often share an agent)
local admitted = false
for i = 1, ncand do
	c = ARGV[5 + i]
	local raw = v[2]
	if i > 1 then
		raw = redis.call('HGET', state, 'c:' .. c)
	end
	r, f, ceil, known, sag = 0, 0, 0, 0, ''
	if raw then
		r, f, ceil, known = struct.unpack(CF, raw)
		sag = string.sub(raw, 14)
	end
	local batch = not direct
	ag = batch and sag or dagent
	agr, ags = 0, 0
	local level, reason = 0, 0
	if srun + 1 > slim then
		level, reason = 1, 1
	elseif batch and known ~= 1 and enforced then
		level, reason = 4, 5 -- no limits installed for this campaign (C3 off: admitted below)
	else
		if ag ~= '' and ag == last then -- nothing was written since it was read
			agr, ags = lastr, lasts
		elseif ag ~= '' then
			local araw = redis.call('HGET', state, 'a:' .. ag)
			if araw then
				agr, ags = struct.unpack(AF, araw)
			end
			last, lastr, lasts = ag, agr, ags
		end
		local O1 = orun + 1
		if not enforced then
			level = 0
		elseif O1 > L then
			level, reason = 2, 1
		elseif cap and ag ~= '' and agr + 1 > pa then
			level, reason = 3, 1
		elseif batch and ceil > 0 and r + 1 > ceil then
			level, reason = 4, 1
		else
			if batch and not R then
				local fd = 1
				if k > 0 and valid then
					local draw = redis.call('HGET', state, 'c:*')
					local fdir = draw and select(2, struct.unpack(CF, draw)) or 0
					if fdir > 1 then
						fd = fdir
					end
				end
				R = math.min(k, fd)
			end
			if not valid then -- R9: first come first served, waiting direct dials keep min(k, 1)
				if batch and O1 + R > L then
					level, reason = 5, 2
				end
			elseif not batch then -- R8
				if r >= math.max(1, f) and O1 + S > L then
					level, reason = 5, 3
				end
			elseif O1 + R > L then
				level, reason = 5, 2
			elseif r >= f then -- at or above its floor: S is the others' shortfall
				if O1 + R + S > L then
					level, reason = 5, 3
				elseif cap and ag ~= '' and agr + 1 + ags > pa then -- R7
					level, reason = 5, 4
				end
			end
		end
	end
	reply[6 + 3 * i - 2] = level
	reply[6 + 3 * i - 1] = reason
	reply[6 + 3 * i] = fcfs and 1 or 0
	reply[6] = i
	if fcfs then
		d2 = d2 + 1
	end
	if level == 0 then
		d1 = d1 + 1
		admitted = true
		break
	elseif level == 1 then
		d3 = d3 + 1
	elseif level == 2 then
		d4 = d4 + 1
	elseif level == 3 then
		d5 = d5 + 1
	elseif level == 4 then
		d6 = d6 + 1
	else
		d7 = d7 + 1
	end
	if level <= 2 or reason == 2 then
		break -- holds for every campaign
	end
end

-- The counters of this second (n1..n7 belong to second `sec`); a new second first moves the
-- previous one to the rolling minute (m:<s mod 60>) and to the totals (tot).
local m, mrec, trec -- the rolling minute's field and record, the totals (nil: no new second)
local s_now = math.floor(now / 1000)
if s_now ~= sec then
	if n1 + n2 + n3 + n4 + n5 + n6 + n7 > 0 then
		local tr = redis.call('HGET', state, 'tot')
		local t1, t2, t3, t4, t5, t6, t7 = 0, 0, 0, 0, 0, 0, 0
		if tr then
			t1, t2, t3, t4, t5, t6, t7 = struct.unpack(TF, tr)
		end
		m = 'm:' .. (sec % 60)
		mrec = struct.pack(RF, sec, n1, n2, n3, n4, n5, n6, n7)
		trec = struct.pack(TF, t1 + n1, t2 + n2, t3 + n3, t4 + n4, t5 + n5, t6 + n6, t7 + n7)
	end
	sec, n1, n2, n3, n4, n5, n6, n7 = s_now, 0, 0, 0, 0, 0, 0, 0
end
n1, n2, n3, n4, n5, n6, n7 = n1 + d1, n2 + d2, n3 + d3, n4 + d4, n5 + d5, n6 + d6, n7 + d7

if not admitted then
	if ARGV[3] == 'w' then -- register (hand-off, README.md "Hand-off"; gate_wc.lua.inc)
		local wk = ARGV[5]
		local rec = redis.call('HGET', direct and KEYS[4] or KEYS[6], call)
		if rec then -- already waiting (woken or not): back to its places, its wake consumed
			local rc, since, rwk = string.match(rec, '^([^|]*)|(%d+)|?(.*)$')
			redis.call('ZREM', KEYS[9], call)
			if not direct then -- a batch waiter waits under its latest candidates
				local seen, nc = {}, ARGV[6]
				seen[nc] = true
				for i = 7, #ARGV do
					if not seen[ARGV[i]] then
						seen[ARGV[i]] = true
						nc = nc .. ',' .. ARGV[i]
					end
				end
				if nc ~= rc then
					if not wx_none(rwk) then
						wc_unqueue(KEYS[7], KEYS[8], rc, tonumber(since), call)
					end
					redis.call('HSET', KEYS[6], call, nc .. '|' .. since .. '|' .. rwk)
					rc = nc
				end
			end
			if not wx_none(rwk) then -- it has a worker: queued
				wc_queue(state, KEYS[7], KEYS[8], direct and '*' or rc, tonumber(since), call)
			elseif direct then -- none: its registration's expiry renewed (gate_wc.lua.inc)
				wx_unset(KEYS[7], call, rec)
				redis.call('HSET', KEYS[4], call, rc .. '|' .. since .. '|' ..
					wx_set(KEYS[7], call, now))
			end
		else
			local cands = '*'
			if direct then
				redis.call('HSET', KEYS[4], call, dagent .. '|' .. string.format('%d', now) ..
					'|' .. (wk ~= '' and wk or wx_set(KEYS[7], call, now)))
				k = k + 1
				reply[4] = k
			else
				local seen = {}
				cands = ARGV[6]
				seen[cands] = true
				for i = 7, #ARGV do
					if not seen[ARGV[i]] then
						seen[ARGV[i]] = true
						cands = cands .. ',' .. ARGV[i]
					end
				end
				redis.call('HSET', KEYS[6], call, cands .. '|' .. string.format('%d', now) ..
					'|' .. wk)
			end
			if wk ~= '' then
				wc_queue(state, KEYS[7], KEYS[8], cands, now, call)
			end
			reply[5] = 1
		end
	end
	local orec = struct.pack(OF, L, pa, en, orun, S, k, lver, fver, fexp, clock, sec, n1, n2, n3,
		n4, n5, n6, n7)
	if m then
		redis.call('HSET', state, 'org', orec, m, mrec, 'tot', trec)
	else
		redis.call('HSET', state, 'org', orec)
	end
	return reply
end

-- fairshare_gate_acquire(): every level, and the shortfall by the stored floor.
if srun >= COUNT_MAX or orun >= COUNT_MAX or r >= COUNT_MAX or agr >= COUNT_MAX then
	-- As the model: the admission is counted, then the acquire fails and nothing is taken.
	local orec = struct.pack(OF, L, pa, en, orun, S, k, lver, fver, fexp, clock, sec, n1, n2, n3,
		n4, n5, n6, n7)
	if m then
		redis.call('HSET', state, 'org', orec, m, mrec, 'tot', trec)
	else
		redis.call('HSET', state, 'org', orec)
	end
	return redis.error_reply('GATE OVERFLOW')
end
-- A batch admission with no batch waiter registered and no campaign in the waking order (:bwait
-- and :wc absent) has no registration to withdraw and no score to keep: one EXISTS instead of
-- the HGET below and the acquire's ZADD XX. Exact: a batch call's registration (queued, woken
-- or without a worker) is its :bwait record, a campaign's score is in :wc (README.md "Hand-off").
local queued = direct or redis.call('EXISTS', KEYS[6], KEYS[8]) > 0
local wrec = queued and redis.call('HGET', direct and KEYS[4] or KEYS[6], call)
if wrec then -- a waiter admitted: its registration withdrawn, its wake (if any) consumed
	local wcands, since = string.match(wrec, '^([^|]*)|(%d+)')
	redis.call('HDEL', direct and KEYS[4] or KEYS[6], call)
	wc_unqueue(KEYS[7], KEYS[8], direct and '*' or wcands, tonumber(since), call)
	redis.call('ZREM', KEYS[9], call)
	if direct then
		wx_unset(KEYS[7], call, wrec)
		k = math.max(k - 1, 0)
		reply[4] = k
	end
	reply[5] = -1
end
ga_take(state, slots, sys, queued and KEYS[8], call, c, ag, now, r, f, ceil, known, sag, agr,
	ags, slim, srun, sver, L, pa, en, orun, S, k, lver, fver, fexp, clock, sec, n1, n2, n3, n4,
	n5, n6, n7, m, mrec, trec)
reply[1] = 1
reply[2] = c
return reply
