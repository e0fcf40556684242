-- fenced_write.lua stores a resource's value only if the writer's fence is
-- not lower than the highest fence the resource has seen. Fences are
-- compared as decimal strings (by length, then digit by digit), never as Lua
-- numbers, which are doubles: above 2^53 those would take a lower fence for
-- an equal one. A stored fence that is not a decimal int64 ("nan", "1e3",
-- "0x10", "-1", leading zeros) is an error, never a pass.
--
--	KEYS[1]  the resource: a hash with fields "value" and "fence"
--	ARGV[1]  the writer's fence, a decimal int64 >= 1 without leading zeros
--	ARGV[2]  the value
--	returns  {1, fence} written, {0, highest fence seen} refused as stale
--	         (both as decimal strings); an error reply for a malformed
--	         stored fence

local high = redis.call('HGET', KEYS[1], 'fence')
local f = ARGV[1]
if high then
	if not (high == '0' or (string.match(high, '^[1-9][0-9]*$') and (#high < 19 or (#high == 19 and high <= '9223372036854775807')))) then
		return redis.error_reply('redlock: the resource holds fence "' .. high .. '", which is not a decimal int64')
	end
	if #f < #high or (#f == #high and f < high) then
		return {0, high}
	end
end
redis.call('HSET', KEYS[1], 'fence', f, 'value', ARGV[2])
return {1, f}
