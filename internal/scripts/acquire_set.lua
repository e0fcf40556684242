-- acquire_set.lua takes every lock key of a set, or none: it sets them all
-- (PX) only if none holds another owner's token. With fencing it also
-- increments every key's counter and raises them all to the largest, which
-- is the fence it returns: above every earlier holder's fence of each key.
-- Keys already holding our token are a second run of the same request (a
-- connection closed under the first; tokens are fresh per attempt): taken
-- by the first, whose fence stands. So it is safe to run twice.
--
--	KEYS[1..n]     lock keys
--	KEYS[n+1..2n]  their fence counters, with fencing
--	ARGV[1]        owner token
--	ARGV[2]        n
--	ARGV[3]        TTL in milliseconds
--	returns        1 taken (without fencing), the fence (> 0) taken (with),
--	               -i when the i-th lock key holds another owner's token
--	               (nothing changed)

local n = tonumber(ARGV[2])
local mine = 0
for i = 1, n do
	local v = redis.pcall('GET', KEYS[i]) -- a key of another type: another owner's (an error table), as SET NX finds it
	if v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then -- a waiter may have marked it since the first run
		mine = mine + 1
	elseif v then
		return -i
	end
end
local fenced = #KEYS > n
if mine == n then
	if not fenced then
		return 1
	end
	local top = 0
	for i = n + 1, 2 * n do
		top = math.max(top, tonumber(redis.call('GET', KEYS[i]) or '0'))
	end
	return top
end
for i = 1, n do
	redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[3])
end
if not fenced then
	return 1
end
local fs, top, at = {}, 0, 0
for i = 1, n do
	fs[i] = redis.call('INCR', KEYS[n + i])
	if fs[i] > top then
		top, at = fs[i], i
	end
end
local s = redis.call('GET', KEYS[n + at])
for i = 1, n do
	if fs[i] < top then
		redis.call('SET', KEYS[n + i], s)
	end
end
return top
