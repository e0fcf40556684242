-- acquire_fenced.lua takes the lock like SET NX PX and, when it did,
-- increments the key's fence counter.
--
--	KEYS[1]  lock key
--	KEYS[2]  fence counter (same hash slot as the lock key)
--	ARGV[1]  owner token
--	ARGV[2]  TTL in milliseconds
--	returns  the counter's new value (> 0) when taken, 0 when held by another owner

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return redis.call('INCR', KEYS[2])
end
return 0
