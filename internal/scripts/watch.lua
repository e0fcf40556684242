-- watch.lua is the look of Client.WaitReleased at a key: when held, it
-- marks it as waited for, like wait.lua, so that its release is
-- announced.
--
--	KEYS[1]  lock key
--	returns  the key's PTTL when held, -2 when absent

local v = redis.call('GET', KEYS[1])
if v == false then
	return -2
end
if not string.find(v, '!', 1, true) then
	redis.call('APPEND', KEYS[1], '!')
end
return redis.call('PTTL', KEYS[1])
