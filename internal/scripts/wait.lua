-- wait.lua is the acquire of a waiting Obtain (WithWait). It takes the
-- key when it is free, with the turn queue the caller carries over from the
-- release it heard (the Clients after it, and itself again when it has more
-- waiters of the key). When the key is held, it marks it as waited for and
-- queues the caller's Client for its turn, unless queued already (APPEND
-- keeps the key's expiry), so that the release announces it on the wake
-- channel (release.lua), and returns the key's remaining TTL, so that the
-- waiter sleeps no longer than that. A key that already holds our token is
-- ours from this same request sent a second time (the master closed the
-- connection of the first).
--
--	KEYS[1]  lock key
--	KEYS[2]  fence counter, with fencing (same hash slot)
--	ARGV[1]  owner token
--	ARGV[2]  TTL in milliseconds
--	ARGV[3]  the caller's Client id (turnIDLen characters), then the queue
--	         to carry over (whole ids, maybe none)
--	returns  {1, fence or 0} taken, {0, PTTL} held by another owner

local v = redis.call('GET', KEYS[1])
if v == false then
	local q = string.sub(ARGV[3], 9)
	if q ~= '' then
		q = '!' .. q
	end
	redis.call('SET', KEYS[1], ARGV[1] .. q, 'PX', ARGV[2])
	if #KEYS > 1 then
		return {1, redis.call('INCR', KEYS[2])}
	end
	return {1, 0}
end
if v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
	if #KEYS > 1 then
		return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
	end
	return {1, 0}
end
local me = string.sub(ARGV[3], 1, 8)
local i = string.find(v, '!', 1, true)
if not i then
	redis.call('APPEND', KEYS[1], '!' .. me)
else
	local q = string.gsub(string.sub(v, i + 1), '!', '') -- an older waiter's stray mark
	local j = 1
	while j <= #q and string.sub(q, j, j + 7) ~= me do
		j = j + 8
	end
	if j > #q then
		redis.call('APPEND', KEYS[1], me)
	end
end
return {0, redis.call('PTTL', KEYS[1])}
