-- acquire_fenced_again.lua is acquire_fenced.lua sent a second time: when
-- the first run took the lock, the counter it raised is the fence.
--
--	KEYS[1]  lock key
--	KEYS[2]  fence counter
--	ARGV[1]  owner token
--	ARGV[2]  TTL in milliseconds
--	returns  the fence (> 0) when taken, 0 when held by another owner

local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
	return tonumber(redis.call('GET', KEYS[2]) or '0')
end
if v then
	return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('INCR', KEYS[2])
