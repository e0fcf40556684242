-- keep.lua is the Release of a lock held at least for a while
-- (WithHoldAtLeast) that is released early: if we still own it, its key
-- stays for what remains of that while, then expires, instead of being
-- deleted. A key marked as waited for is announced like a release
-- (release.lua): the waiters learn its shorter expiry.
--
--	KEYS[1]  lock key
--	ARGV[1]  owner token
--	ARGV[2]  the rest of the minimum hold, in milliseconds
--	ARGV[3]  present on a Redis Cluster master: publish with SPUBLISH
--	returns  1 kept, 0 held by another owner, -1 key absent

local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
if string.sub(v or '', 1, #ARGV[1] + 1) == ARGV[1] .. '!' then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	if ARGV[3] then
		redis.call('SPUBLISH', KEYS[1], KEYS[1])
	else
		redis.call('PUBLISH', 'redlock:wake', KEYS[1])
	end
	return 1
end
if v == false then
	return -1
end
return 0
