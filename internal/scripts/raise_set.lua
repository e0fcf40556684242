-- raise_set.lua is raise.lua for a set: it raises every key's counter to
-- the lock's fence, if every key of the set is still ours on this master.
--
--	KEYS[1..n]     lock keys
--	KEYS[n+1..2n]  their fence counters
--	ARGV[1]        owner token
--	ARGV[2]        the lock's fence
--	returns        1 raised (or already at least the fence), 0 a key is not ours there

local n = #KEYS / 2
for i = 1, n do
	local v = redis.call('GET', KEYS[i])
	if v ~= ARGV[1] and not (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
		return 0
	end
end
local f = tonumber(ARGV[2])
for i = n + 1, 2 * n do
	if tonumber(redis.call('GET', KEYS[i]) or '0') < f then
		redis.call('SET', KEYS[i], ARGV[2])
	end
end
return 1
