-- extend_set.lua is extend.lua for a set: if no key holds another
-- owner's token, it makes each key still ours last at least TTL more
-- (PEXPIRE ... GT, never shortening one) and re-takes the vanished ones;
-- with fencing a re-taken key's counter is raised to the lock's fence. It
-- changes nothing when a key is another owner's, when a key has vanished
-- past the re-take deadline, or past the validity's end, both in the
-- master's clock, as extend.lua (whose clock offset it shares). The
-- validity's end is the last argument; without it the re-take deadline
-- bounds the PEXPIRE too.
--
--	KEYS[1..n]     lock keys
--	KEYS[n+1..2n]  their fence counters, with fencing
--	ARGV[1]        owner token
--	ARGV[2]        n
--	ARGV[3]        TTL in milliseconds
--	ARGV[4]        re-take deadline, Unix time in milliseconds by the master's clock
--	ARGV[5]        the lock's fence, with fencing
--	ARGV[5 or 6]   the validity's end, likewise (6 with fencing)
--	returns        1 extended, 2 extended and re-took a vanished key,
--	               0 a key holds another owner's token,
--	               -1 a key is absent and past the re-take deadline,
--	               -2 past the validity's end (nothing done)

local n = tonumber(ARGV[2])
local gone = {}
for i = 1, n do
	local v = redis.pcall('GET', KEYS[i]) -- a key of another type: another owner's (an error table), as SET NX finds it
	if v == false then
		gone[i] = true
	elseif v ~= ARGV[1] and not (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
		return 0
	end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if next(gone) and now >= tonumber(ARGV[4]) then
	return -1
end
if now >= tonumber(ARGV[#KEYS > n and 6 or 5] or ARGV[4]) then
	return -2
end
for i = 1, n do
	if gone[i] then
		redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[3])
		if #KEYS > n and tonumber(redis.call('GET', KEYS[n + i]) or '0') < tonumber(ARGV[5]) then
			redis.call('SET', KEYS[n + i], ARGV[5])
		end
	else
		redis.call('PEXPIRE', KEYS[i], ARGV[3], 'GT')
	end
end
if next(gone) then
	return 2
end
return 1
