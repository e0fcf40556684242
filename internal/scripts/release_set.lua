-- release_set.lua is release.lua (and keep.lua) for a set: it deletes
-- every key that still holds our token, and never another owner's; with
-- the rest of a minimum hold (WithHoldAtLeast) it keeps each of ours for
-- that long instead. Each of ours that a waiter marked (our token and the
-- wait mark) is announced on the wake channel as release.lua announces
-- a single key: PUBLISH on "redlock:wake", or, on a Redis Cluster master
-- (ARGV[3] set), SPUBLISH on the key's own channel.
--
--	KEYS[1..n]  lock keys
--	ARGV[1]     owner token
--	ARGV[2]     the rest of the minimum hold in milliseconds, or "" (delete)
--	ARGV[3]     present on a Redis Cluster master: publish with SPUBLISH
--	returns     1 every key was ours (deleted or kept), 0 a key held
--	            another owner's token, -1 a key was absent (ours deleted
--	            or kept either way)

local other, gone = false, false
local marked = ARGV[1] .. '!'
local m = #marked
for i = 1, #KEYS do
	local v = redis.pcall('GET', KEYS[i]) -- a key of another type: another owner's (an error table), as SET NX finds it
	local mine = v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, m) == marked)
	if mine then
		if ARGV[2] ~= '' then
			redis.call('PEXPIRE', KEYS[i], ARGV[2])
		else
			redis.call('DEL', KEYS[i])
		end
		if v ~= ARGV[1] then
			local msg = KEYS[i]
			local q = string.gsub(string.sub(v, m + 1), '!', '') -- an older waiter's stray mark
			if ARGV[2] == '' and q ~= '' then -- freed: the queue's first has the turn
				msg = msg .. '\0' .. q
			end
			if ARGV[3] then
				redis.call('SPUBLISH', KEYS[i], msg)
			else
				redis.call('PUBLISH', 'redlock:wake', msg)
			end
		end
	elseif v then
		other = true
	else
		gone = true
	end
end
if other then
	return 0
end
if gone then
	return -1
end
return 1
