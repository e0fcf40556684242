-- extend_batch.lua is extend.lua for several locks at once: the renewals
-- and Extends of plain lock keys that a connection sends one after another
-- run in one call, which costs the master and the client less than as
-- many calls of extend.lua. Each key is checked and extended
-- as extend.lua does it, with its own arguments, and answered apart: an
-- error on one key (a key that is not a string, a write the master
-- refuses) is that key's answer alone, sent as a string, not as an error
-- reply: a client may stop reading an array at an error in it.
-- (TestExtendBatchAnswersAsExtendDoes) But READONLY (the master is now a
-- replica, which takes no write at all) is the answer of the whole call,
-- as it is of a lone call's, so that the client gives that connection up
-- (TestAJoinOnADemotedMasterIsRefusedWhole). One difference: Redis checks
-- its memory limit at a script's first write only, so under maxmemory a
-- re-take after another key's renewal in the same call is made where
-- extend.lua alone is refused with OOM; the key is the caller's either way.
--
--	KEYS[i]      lock key i
--	ARGV[4i-3]   its owner token
--	ARGV[4i-2]   its TTL in milliseconds
--	ARGV[4i-1]   its re-take deadline, Unix time in milliseconds by the master's clock
--	ARGV[4i]     its validity's end, the same way; "" when not sent
--	returns      an array: for key i what extend.lua returns, or its error
--	             as a string

local out = {}

-- wrote returns a write's answer: ok, or its error as a string; it ends
-- the call with a READONLY.
local function wrote(e, ok)
	if type(e) ~= 'table' or not e.err then
		return ok
	end
	if string.sub(e.err, 1, 8) == 'READONLY' then
		error(e)
	end
	return e.err
end

for i = 1, #KEYS do
	local k, token, ttl, retake, valid = KEYS[i], ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i]
	local v = redis.pcall('GET', k)
	if type(v) == 'table' and v.err then
		out[i] = v.err
	else
		local mine = v == token or (type(v) == 'string' and string.sub(v, 1, #token + 1) == token .. '!')
		if v and not mine then
			out[i] = 0
		else
			local t = redis.call('TIME')
			local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
			if mine then
				if valid == '' then
					valid = retake
				end
				if now >= tonumber(valid) then
					out[i] = -2
				else
					out[i] = wrote(redis.pcall('PEXPIRE', k, ttl, 'GT'), 1)
				end
			elseif now >= tonumber(retake) then
				out[i] = -1
			else
				out[i] = wrote(redis.pcall('SET', k, token, 'PX', ttl), 2)
			end
		end
	end
end
return out
