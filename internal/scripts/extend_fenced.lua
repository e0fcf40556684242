-- extend_fenced.lua is extend.lua for fenced locks: re-taking a vanished
-- key also raises that master's counter to the lock's fence. The same two
-- bounds hold, in the master's clock.
--
--	KEYS[1]  lock key
--	KEYS[2]  fence counter
--	ARGV[1]  owner token
--	ARGV[2]  TTL in milliseconds
--	ARGV[3]  the lock's fence
--	ARGV[4]  re-take deadline, Unix time in milliseconds by the master's clock
--	ARGV[5]  the validity's end, Unix time in milliseconds by the master's clock
--	returns  1 extended, 2 re-taken (key was absent), 0 held by another owner,
--	         -1 absent and past the re-take deadline, -2 ours and past the
--	         validity's end (nothing done)

local v = redis.call('GET', KEYS[1])
local mine = v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!')
if v and not mine then
	return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if mine then
	if now >= tonumber(ARGV[5] or ARGV[4]) then
		return -2
	end
	redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
	return 1
end
if now >= tonumber(ARGV[4]) then
	return -1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[3]) then
	redis.call('SET', KEYS[2], ARGV[3])
end
return 2
