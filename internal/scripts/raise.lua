-- raise.lua raises a master's fence counter to the lock's fence, if the
-- lock there is still ours, so that every master counted in the quorum
-- carries at least the lock's fence.
--
--	KEYS[1]  lock key
--	KEYS[2]  fence counter
--	ARGV[1]  owner token
--	ARGV[2]  the lock's fence
--	returns  1 raised (or already at least the fence), 0 the lock is not ours there

local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and not (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
	return 0
end
local f = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < f then
	redis.call('SET', KEYS[2], ARGV[2])
end
return 1
