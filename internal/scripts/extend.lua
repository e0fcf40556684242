-- extend.lua makes the lock's key on this master last at least TTL more
-- if we still own it, and re-takes the key where it has vanished (a restart
-- or an eviction), so the quorum does not erode.
--
-- It never shortens a key (PEXPIRE ... GT): an Extend with a shorter TTL
-- shortens only the validity its holder counts on, and a straggling Extend
-- (delayed on the network, left on a connection the client gave up) cannot
-- cut a lock a later Extend renewed. A key held longer than its holder
-- counts on costs others only a longer wait.
--
-- Nothing of it runs once the validity it served has ended, by the
-- master's clock: the lock's validity end as the client counted it when it
-- sent the Extend (ARGV[4]). A request held up past it (a master frozen
-- with the request in its socket, a late network) finds its caller gone
-- and the lock counted lost; had an earlier renewal whose success the
-- client never counted kept the key, a PEXPIRE would revive the lapsed
-- lock there for a whole TTL. (TestExtendHeldUpByAFrozenMasterDoesNotReviveALapsedLock)
-- The re-take has a tighter bound, the re-take deadline: the validity end,
-- or the request's own deadline if sooner. A re-take that arrives later
-- finds its caller gone, and the key maybe deleted by the Release that
-- followed, or the lock lapsed and held and released by another owner
-- since: it must not revive it.
--
-- Both bounds are read against the master's TIME, so they come in the
-- master's own clock: the client counts them on its wall clock and adds
-- the master's clock offset, measured on every fresh connection
-- (internal/wire: request.bounds, state.sawClock), so that Redlock needs
-- the clocks to agree in rate only, not in reading. The offset may err low only (by up
-- to that connection's round trip): the bounds reach the master early,
-- never late. Where no offset is known (INFO denied, a Cluster master)
-- it is 0, and the guard assumes the clocks agree: within the time the
-- lock has left when the Extend is sent for the PEXPIRE (two thirds of
-- the TTL for a watchdog's renewal at ttl/3), within the node timeout for
-- the re-take. A master whose clock reads ahead of its bounds (offset
-- unknown, or its clock jumped since it was measured) refuses early (-2
-- counts as that master's failure, not as a loss; a re-take refused reads
-- as the key gone); one that reads behind runs a straggler late by as
-- much. The client never counts a reply that came after its deadline, so
-- it is not misled either way. (TestExtendOnAMasterWhoseClockIsAhead,
-- TestMasterClockBehindRunsNoStragglerPastTheValidity) Without ARGV[4] the
-- re-take deadline bounds the PEXPIRE too.
--
--	KEYS[1]  lock key
--	ARGV[1]  owner token
--	ARGV[2]  TTL in milliseconds
--	ARGV[3]  re-take deadline, Unix time in milliseconds by the master's clock
--	ARGV[4]  the validity's end, Unix time in milliseconds by the master's clock
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
	if now >= tonumber(ARGV[4] or ARGV[3]) then
		return -2
	end
	redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
	return 1
end
if now >= tonumber(ARGV[3]) then
	return -1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 2
