-- inspect.lua reads a lock key's holder, its TTL left and its fence
-- counter at one instant.
--
--	KEYS[1]  lock key
--	KEYS[2]  fence counter, if any
--	returns  {token or "", PTTL in ms (-2 absent, -1 no expiry), counter or ""}

local v = redis.call('GET', KEYS[1])
local i = v and string.find(v, '!', 1, true)
if i then
	v = string.sub(v, 1, i - 1)
end
local t = redis.call('PTTL', KEYS[1])
local f = false
if #KEYS > 1 then
	f = redis.call('GET', KEYS[2])
end
return {v or '', t, f or ''}
