-- release.lua deletes the lock only if we still own it. A key marked as
-- waited for (its value the token and the wait mark "!", set by wait.lua or
-- watch.lua when they found it held) is also announced on the wake
-- channel (the root package's wake.go): the channel "redlock:wake", or,
-- on a Redis Cluster master (ARGV[2] set), the key's own sharded channel,
-- named like the key so it shares its slot. The message is the key, followed, when Clients
-- queued for their turn, by a zero byte and the queue: its first Client
-- has the turn. An unmarked key, the case with nobody waiting, costs what
-- a bare compare-and-delete does: the mark is in the value the script
-- reads anyway.
--
--	KEYS[1]  lock key
--	ARGV[1]  owner token
--	ARGV[2]  present on a Redis Cluster master: publish with SPUBLISH
--	returns  1 deleted (2: and the turn given to the queue's first Client),
--	         0 held by another owner, -1 key absent

local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
if v == false then
	return -1
end
local m = #ARGV[1] + 1
if string.sub(v, 1, m) == ARGV[1] .. '!' then
	redis.call('DEL', KEYS[1])
	local msg, r = KEYS[1], 1
	local q = string.gsub(string.sub(v, m + 1), '!', '') -- an older waiter's stray mark
	if q ~= '' then
		msg, r = msg .. '\0' .. q, 2
	end
	if ARGV[2] then
		redis.call('SPUBLISH', KEYS[1], msg)
	else
		redis.call('PUBLISH', 'redlock:wake', msg)
	end
	return r
end
return 0
