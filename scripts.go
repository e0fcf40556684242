package redlock

// Every Lua script of the package. Each touches only the keys it is given in
// KEYS, so it runs on a Redis Cluster (all KEYS of one call share a slot).
//
// A lock key's value is its owner's token, followed by the wait mark "!" (which
// no token contains) once a waiter found the key held, and after the mark
// by the turn queue: the ids of the Clients waiting for the key, in the
// order they came, each turnIDLen characters (wake.go). Every script that
// checks ownership accepts the token alone or followed by the mark, and
// only a marked key's release is announced to waiters. A waiter of the
// version before turn queues appends a second "!" after a queue (it marks
// a value unless it ends in "!"): the scripts that read the queue skip
// every "!" in it, so that the ids after it stay whole.
//
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT. Their SHA1
// digests are written out here (and checked by a test) so that no SHA1 code
// runs on the hot path and FIPS builds need none.

// scripts lists every script, for loading them all at once.
var scripts = [...]*script{&releaseScript, &keepScript, &extendScript, &acquireFencedScript, &raiseScript, &extendFencedScript, &fencedWriteScript, &inspectScript, &acquireAgainScript, &acquireFencedAgainScript,
	&acquireSetScript, &raiseSetScript, &extendSetScript, &releaseSetScript, &waitScript, &watchScript}

// A script is a Lua source and its SHA1 digest as Redis names it, each also
// boxed once as a command argument, so that building a command allocates
// neither.
type script struct {
	src, sha       string
	srcArg, shaArg any
}

func newScript(src, sha string) script { return script{src: src, sha: sha, srcArg: src, shaArg: sha} }

// releaseScript deletes the lock only if we still own it. A key marked as
// waited for (its value the token and the wait mark "!", set by waitScript or
// watchScript when they found it held) is also announced on the wake
// channel (see wake.go): the channel "redlock:wake", or, on a Redis Cluster
// master (ARGV[2] set), the key's own sharded channel, named like the key
// so it shares its slot. The message is the key, followed, when Clients
// queued for their turn, by a zero byte and the queue: its first Client
// has the turn. An unmarked key, the case with nobody waiting, costs what
// a bare compare-and-delete does: the mark is in the value the script
// reads anyway.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	ARGV[2]  present on a Redis Cluster master: publish with SPUBLISH
//	returns  1 deleted (2: and the turn given to the queue's first Client),
//	         0 held by another owner, -1 key absent
var releaseScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
if v == false then
	return -1
end
local m = #ARGV[1] + 1
if string.sub(v, 1, m) == ARGV[1] .. '!' then
	redis.call('DEL', KEYS[1])
	local msg, r = KEYS[1], 1
	local q = string.gsub(string.sub(v, m + 1), '!', '') -- an older waiter's stray mark
	if q ~= '' then
		msg, r = msg .. '\0' .. q, 2
	end
	if ARGV[2] then
		redis.call('SPUBLISH', KEYS[1], msg)
	else
		redis.call('PUBLISH', 'redlock:wake', msg)
	end
	return r
end
return 0
`,
	"6b2baaef7dfd2366277cc90b3dd99138e87ba0c1")

// keepScript is the Release of a lock held at least for a while
// (WithHoldAtLeast) that is released early: if we still own it, its key
// stays for what remains of that while, then expires, instead of being
// deleted. A key marked as waited for is announced like a release
// (releaseScript): the waiters learn its shorter expiry.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	ARGV[2]  the rest of the minimum hold, in milliseconds
//	ARGV[3]  present on a Redis Cluster master: publish with SPUBLISH
//	returns  1 kept, 0 held by another owner, -1 key absent
var keepScript = newScript(`local v = redis.call('GET', KEYS[1])
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
`,
	"279f1d30a98884ddccd82a6a3296c3ee33ba17ac")

// extendScript makes the lock's key on this master last at least TTL more
// if we still own it, and re-takes the key where it has vanished (a restart
// or an eviction), so the quorum does not erode.
//
// It never shortens a key (PEXPIRE ... GT): an Extend with a shorter TTL
// shortens only the validity its holder counts on, and a straggling Extend
// (delayed on the network, left on a connection the client gave up) cannot
// cut a lock a later Extend renewed. A key held longer than its holder
// counts on costs others only a longer wait.
//
// Nothing of it runs once the validity it served has ended, by the
// master's clock: the lock's validity end as the client counted it when it
// sent the Extend (ARGV[4]). A request held up past it (a master frozen
// with the request in its socket, a late network) finds its caller gone
// and the lock counted lost; had an earlier renewal whose success the
// client never counted kept the key, a PEXPIRE would revive the lapsed
// lock there for a whole TTL. (TestExtendHeldUpByAFrozenMasterDoesNotReviveALapsedLock)
// The re-take has a tighter bound, the re-take deadline: the validity end,
// or the request's own deadline if sooner. A re-take that arrives later
// finds its caller gone, and the key maybe deleted by the Release that
// followed, or the lock lapsed and held and released by another owner
// since: it must not revive it.
//
// Both bounds are read against the master's TIME, so they come in the
// master's own clock: the client counts them on its wall clock and adds
// the master's clock offset, measured on every fresh connection
// (request.bounds, node.sawClock), so that Redlock needs the clocks to
// agree in rate only, not in reading. The offset may err low only (by up
// to that connection's round trip): the bounds reach the master early,
// never late. Where no offset is known (INFO denied, a Cluster master)
// it is 0, and the guard assumes the clocks agree: within the time the
// lock has left when the Extend is sent for the PEXPIRE (two thirds of
// the TTL for a watchdog's renewal at ttl/3), within the node timeout for
// the re-take. A master whose clock reads ahead of its bounds (offset
// unknown, or its clock jumped since it was measured) refuses early (-2
// counts as that master's failure, not as a loss; a re-take refused reads
// as the key gone); one that reads behind runs a straggler late by as
// much. The client never counts a reply that came after its deadline, so
// it is not misled either way. (TestExtendOnAMasterWhoseClockIsAhead,
// TestMasterClockBehindRunsNoStragglerPastTheValidity) Without ARGV[4] the
// re-take deadline bounds the PEXPIRE too.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	ARGV[3]  re-take deadline, Unix time in milliseconds by the master's clock
//	ARGV[4]  the validity's end, Unix time in milliseconds by the master's clock
//	returns  1 extended, 2 re-taken (key was absent), 0 held by another owner,
//	         -1 absent and past the re-take deadline, -2 ours and past the
//	         validity's end (nothing done)
var extendScript = newScript(`local v = redis.call('GET', KEYS[1])
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
`,
	"50ba4fffa95c7bdc1906a11a8f9f075a7deae60c")

// acquireFencedScript takes the lock like SET NX PX and, when it did,
// increments the key's fence counter.
//
//	KEYS[1]  lock key
//	KEYS[2]  fence counter (same hash slot as the lock key)
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	returns  the counter's new value (> 0) when taken, 0 when held by another owner
var acquireFencedScript = newScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return redis.call('INCR', KEYS[2])
end
return 0
`,
	"c5f2f8f95724c9915a2539a9fab35a59c4b36672")

// raiseScript raises a master's fence counter to the lock's fence, if the
// lock there is still ours, so that every master counted in the quorum
// carries at least the lock's fence.
//
//	KEYS[1]  lock key
//	KEYS[2]  fence counter
//	ARGV[1]  owner token
//	ARGV[2]  the lock's fence
//	returns  1 raised (or already at least the fence), 0 the lock is not ours there
var raiseScript = newScript(`local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and not (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
	return 0
end
local f = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < f then
	redis.call('SET', KEYS[2], ARGV[2])
end
return 1
`,
	"2146193a430b154a35465017df7475d61c8cfea4")

// extendFencedScript is extendScript for fenced locks: re-taking a vanished
// key also raises that master's counter to the lock's fence. The same two
// bounds hold, in the master's clock.
//
//	KEYS[1]  lock key
//	KEYS[2]  fence counter
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	ARGV[3]  the lock's fence
//	ARGV[4]  re-take deadline, Unix time in milliseconds by the master's clock
//	ARGV[5]  the validity's end, Unix time in milliseconds by the master's clock
//	returns  1 extended, 2 re-taken (key was absent), 0 held by another owner,
//	         -1 absent and past the re-take deadline, -2 ours and past the
//	         validity's end (nothing done)
var extendFencedScript = newScript(`local v = redis.call('GET', KEYS[1])
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
`,
	"0cf23e15536f2482ec6939d21315dfd59787a806")

// fencedWriteScript stores a resource's value only if the writer's fence is
// not lower than the highest fence the resource has seen. Fences are
// compared as decimal strings (by length, then digit by digit), never as Lua
// numbers, which are doubles: above 2^53 those would take a lower fence for
// an equal one. A stored fence that is not a decimal int64 ("nan", "1e3",
// "0x10", "-1", leading zeros) is an error, never a pass.
//
//	KEYS[1]  the resource: a hash with fields "value" and "fence"
//	ARGV[1]  the writer's fence, a decimal int64 >= 1 without leading zeros
//	ARGV[2]  the value
//	returns  {1, fence} written, {0, highest fence seen} refused as stale
//	         (both as decimal strings); an error reply for a malformed
//	         stored fence
var fencedWriteScript = newScript(`local high = redis.call('HGET', KEYS[1], 'fence')
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
`,
	"3c70713baab2d309524435f329015c9532e4b5ce")

// inspectScript reads a lock key's holder, its TTL left and its fence
// counter at one instant.
//
//	KEYS[1]  lock key
//	KEYS[2]  fence counter, if any
//	returns  {token or "", PTTL in ms (-2 absent, -1 no expiry), counter or ""}
var inspectScript = newScript(`local v = redis.call('GET', KEYS[1])
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
`,
	"cf95411ae0ea02f1e2c2966b63bc004d040f72aa")

// acquireAgainScript is the acquire sent a second time after the master
// closed the connection of the first: the first may have run, and its key
// holds the lock.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	ARGV[3]  the value to set, when not the token alone: a waiter's plain
//	         acquire carries the wait mark and the turn queue (op.turn)
//	returns  1 taken (now or by the first run), 0 held by another owner
var acquireAgainScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
	return 1
end
if v then
	return 0
end
redis.call('SET', KEYS[1], ARGV[3] or ARGV[1], 'PX', ARGV[2])
return 1
`,
	"ed7c084d51354b3a332dd378aaabfd25b8df9d31")

// acquireFencedAgainScript is acquireFencedScript sent a second time: when
// the first run took the lock, the counter it raised is the fence.
//
//	KEYS[1]  lock key
//	KEYS[2]  fence counter
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	returns  the fence (> 0) when taken, 0 when held by another owner
var acquireFencedAgainScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
	return tonumber(redis.call('GET', KEYS[2]) or '0')
end
if v then
	return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('INCR', KEYS[2])
`,
	"83e8813784c0683d5f9db2fe8371f4c638e827f0")

// waitScript is the acquire of a waiting Obtain (WithWait). It takes the
// key when it is free, with the turn queue the caller carries over from the
// release it heard (the Clients after it, and itself again when it has more
// waiters of the key). When the key is held, it marks it as waited for and
// queues the caller's Client for its turn, unless queued already (APPEND
// keeps the key's expiry), so that the release announces it on the wake
// channel (releaseScript), and returns the key's remaining TTL, so that the
// waiter sleeps no longer than that. A key that already holds our token is
// ours from this same request sent a second time (the master closed the
// connection of the first).
//
//	KEYS[1]  lock key
//	KEYS[2]  fence counter, with fencing (same hash slot)
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	ARGV[3]  the caller's Client id (turnIDLen characters), then the queue
//	         to carry over (whole ids, maybe none)
//	returns  {1, fence or 0} taken, {0, PTTL} held by another owner
var waitScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == false then
	local q = string.sub(ARGV[3], 9)
	if q ~= '' then
		q = '!' .. q
	end
	redis.call('SET', KEYS[1], ARGV[1] .. q, 'PX', ARGV[2])
	if #KEYS > 1 then
		return {1, redis.call('INCR', KEYS[2])}
	end
	return {1, 0}
end
if v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '!') then
	if #KEYS > 1 then
		return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
	end
	return {1, 0}
end
local me = string.sub(ARGV[3], 1, 8)
local i = string.find(v, '!', 1, true)
if not i then
	redis.call('APPEND', KEYS[1], '!' .. me)
else
	local q = string.gsub(string.sub(v, i + 1), '!', '') -- an older waiter's stray mark
	local j = 1
	while j <= #q and string.sub(q, j, j + 7) ~= me do
		j = j + 8
	end
	if j > #q then
		redis.call('APPEND', KEYS[1], me)
	end
end
return {0, redis.call('PTTL', KEYS[1])}
`,
	"afe5bb3aa775a9dadff8484e92753a09a4c357d0")

// watchScript is the look of Client.WaitReleased at a key: when held, it
// marks it as waited for, like waitScript, so that its release is
// announced.
//
//	KEYS[1]  lock key
//	returns  the key's PTTL when held, -2 when absent
var watchScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == false then
	return -2
end
if not string.find(v, '!', 1, true) then
	redis.call('APPEND', KEYS[1], '!')
end
return redis.call('PTTL', KEYS[1])
`,
	"443b1c9fec41bd0efea19e984b136041e7617eaa")

// The scripts of a lock on several keys ([Client.ObtainMulti]). Each takes
// the set's lock keys first in KEYS, then, where it needs them, their fence
// counters in the same order (all in one Redis Cluster hash slot: the
// caller checks it), and runs on the whole set at once: a master holds all
// of a set's keys for one owner, or none of them.

// acquireSetScript takes every lock key of a set, or none: it sets them all
// (PX) only if none holds another owner's token. With fencing it also
// increments every key's counter and raises them all to the largest, which
// is the fence it returns: above every earlier holder's fence of each key.
// Keys already holding our token are a second run of the same request (a
// connection closed under the first; tokens are fresh per attempt): taken
// by the first, whose fence stands. So it is safe to run twice.
//
//	KEYS[1..n]     lock keys
//	KEYS[n+1..2n]  their fence counters, with fencing
//	ARGV[1]        owner token
//	ARGV[2]        n
//	ARGV[3]        TTL in milliseconds
//	returns        1 taken (without fencing), the fence (> 0) taken (with),
//	               -i when the i-th lock key holds another owner's token
//	               (nothing changed)
var acquireSetScript = newScript(`local n = tonumber(ARGV[2])
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
`,
	"57b2f6d39e963ddd4ebdbae819d79488daa2f756")

// raiseSetScript is raiseScript for a set: it raises every key's counter to
// the lock's fence, if every key of the set is still ours on this master.
//
//	KEYS[1..n]     lock keys
//	KEYS[n+1..2n]  their fence counters
//	ARGV[1]        owner token
//	ARGV[2]        the lock's fence
//	returns        1 raised (or already at least the fence), 0 a key is not ours there
var raiseSetScript = newScript(`local n = #KEYS / 2
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
`,
	"0bca0742cce56ea544bfaf984895301f947ca273")

// extendSetScript is extendScript for a set: if no key holds another
// owner's token, it makes each key still ours last at least TTL more
// (PEXPIRE ... GT, never shortening one) and re-takes the vanished ones;
// with fencing a re-taken key's counter is raised to the lock's fence. It
// changes nothing when a key is another owner's, when a key has vanished
// past the re-take deadline, or past the validity's end, both in the
// master's clock, as extendScript (whose clock offset it shares). The
// validity's end is the last argument; without it the re-take deadline
// bounds the PEXPIRE too.
//
//	KEYS[1..n]     lock keys
//	KEYS[n+1..2n]  their fence counters, with fencing
//	ARGV[1]        owner token
//	ARGV[2]        n
//	ARGV[3]        TTL in milliseconds
//	ARGV[4]        re-take deadline, Unix time in milliseconds by the master's clock
//	ARGV[5]        the lock's fence, with fencing
//	ARGV[5 or 6]   the validity's end, likewise (6 with fencing)
//	returns        1 extended, 2 extended and re-took a vanished key,
//	               0 a key holds another owner's token,
//	               -1 a key is absent and past the re-take deadline,
//	               -2 past the validity's end (nothing done)
var extendSetScript = newScript(`local n = tonumber(ARGV[2])
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
`,
	"81bb9227a595220fbcdc255ff684c6a4f9245f1c")

// releaseSetScript is releaseScript (and keepScript) for a set: it deletes
// every key that still holds our token, and never another owner's; with
// the rest of a minimum hold (WithHoldAtLeast) it keeps each of ours for
// that long instead. Each of ours that a waiter marked (our token and the
// wait mark) is announced on the wake channel as releaseScript announces
// a single key: PUBLISH on "redlock:wake", or, on a Redis Cluster master
// (ARGV[3] set), SPUBLISH on the key's own channel.
//
//	KEYS[1..n]  lock keys
//	ARGV[1]     owner token
//	ARGV[2]     the rest of the minimum hold in milliseconds, or "" (delete)
//	ARGV[3]     present on a Redis Cluster master: publish with SPUBLISH
//	returns     1 every key was ours (deleted or kept), 0 a key held
//	            another owner's token, -1 a key was absent (ours deleted
//	            or kept either way)
var releaseSetScript = newScript(`local other, gone = false, false
local marked = ARGV[1] .. '!'
local m = #marked
for i = 1, #KEYS do
	local v = redis.pcall('GET', KEYS[i]) -- a key of another type: another owner's (an error table), as SET NX finds it
	local mine = v == ARGV[1] or (type(v) == 'string' and string.sub(v, 1, m) == marked)
	if mine then
		if ARGV[2] ~= '' then
			redis.call('PEXPIRE', KEYS[i], ARGV[2])
		else
			redis.call('DEL', KEYS[i])
		end
		if v ~= ARGV[1] then
			local msg = KEYS[i]
			local q = string.gsub(string.sub(v, m + 1), '!', '') -- an older waiter's stray mark
			if ARGV[2] == '' and q ~= '' then -- freed: the queue's first has the turn
				msg = msg .. '\0' .. q
			end
			if ARGV[3] then
				redis.call('SPUBLISH', KEYS[i], msg)
			else
				redis.call('PUBLISH', 'redlock:wake', msg)
			end
		end
	elseif v then
		other = true
	else
		gone = true
	end
end
if other then
	return 0
end
if gone then
	return -1
end
return 1
`,
	"878d730952e568ab5ddadf53245c5ef2838671af")
