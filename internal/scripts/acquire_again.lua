-- acquire_again.lua is the acquire sent a second time after the master
-- closed the connection of the first: the first may have run, and its key
-- holds the lock.
--
--	KEYS[1]  lock key
--	ARGV[1]  owner token
--	ARGV[2]  TTL in milliseconds
--	ARGV[3]  the value to set, when not the token alone: a waiter's plain
--	         acquire carries the wait mark and the turn queue
--	returns  1 taken (now or by the first run), 0 held by another owner

local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
	return 1
end
if v then
	return 0
end
redis.call('SET', KEYS[1], ARGV[3] or ARGV[1], 'PX', ARGV[2])
return 1
