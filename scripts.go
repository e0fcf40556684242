package redlock

// Every Lua script of the package. Each touches only the keys it is given in
// KEYS, so it runs on a Redis Cluster (all KEYS of one call share a slot).
//
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT. Their SHA1
// digests are written out here (and checked by a test) so that no SHA1 code
// runs on the hot path and FIPS builds need none.

// scripts lists every script, for loading them all at once.
var scripts = [...]*script{&releaseScript, &keepScript, &extendScript, &acquireFencedScript, &raiseScript, &extendFencedScript, &fencedWriteScript, &inspectScript, &acquireAgainScript, &acquireFencedAgainScript, &waitScript, &watchScript}

// A script is a Lua source and its SHA1 digest as Redis names it, each also
// boxed once as a command argument, so that building a command allocates
// neither.
type script struct {
	src, sha       string
	srcArg, shaArg any
}

func newScript(src, sha string) script { return script{src: src, sha: sha, srcArg: src, shaArg: sha} }

// releaseScript deletes the lock only if we still own it, or hands it to
// the waiters queued on the key (see wake.go): when the wait queue holds a
// Client, the key is kept for that Client's waiter, its value the Client's
// queue token, for a grace period (the waiter then takes it with
// waitScript), and the Client is told on the wake channel. Watchers
// (Client.WaitReleased) queued with score 0 are popped first and told once
// that the holder released. A release with nobody queued costs one ZPOPMIN
// of an absent key more than a bare compare-and-delete.
//
//	KEYS[1]  lock key
//	KEYS[2]  wait queue (same hash slot)
//	ARGV[1]  owner token
//	ARGV[2]  grace in milliseconds
//	ARGV[3]  publish command: PUBLISH, or SPUBLISH on a Redis Cluster
//	ARGV[4]  wake channel
//	returns  1 deleted or handed over, 0 held by another owner, -1 key absent
var releaseScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	local told = false
	while true do
		local h = redis.call('ZPOPMIN', KEYS[2])
		if #h == 0 then
			break
		end
		if string.sub(h[1], 1, 1) ~= '~' then
			redis.call('SET', KEYS[1], h[1], 'PX', ARGV[2])
			redis.call(ARGV[3], ARGV[4], h[1] .. KEYS[1])
			return 1
		end
		if not told then
			redis.call(ARGV[3], ARGV[4], '~' .. KEYS[1])
			told = true
		end
	end
	redis.call('DEL', KEYS[1])
	return 1
end
if v == false then
	return -1
end
return 0
`,
	"5cdf583ac1adc050cc518a0520d29920a44c56f3")

// keepScript is the Release of a lock held at least for a while
// (WithHoldAtLeast) that is released early: if we still own it, its key
// stays for what remains of that while, then expires, instead of being
// deleted.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	ARGV[2]  the rest of the minimum hold, in milliseconds
//	returns  1 kept, 0 held by another owner, -1 key absent
var keepScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
if v == false then
	return -1
end
return 0
`,
	"dc50fe3b1878f211f0561a0a9ffa037104d2ef97")

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
// The re-take is refused past the re-take deadline, by the master's clock:
// the lock's validity end, or the request's own deadline if sooner. A
// request that arrives later finds its caller gone, and the lock maybe
// lapsed and held and released by another owner since: it must not revive
// it. The deadline is the client's wall clock, so the guard assumes the two
// clocks agree within the validity; when they do not, re-takes are refused
// early or late, and the client, which never counts a reply that came after
// its deadline, is not misled either way.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	ARGV[3]  re-take deadline, Unix time in milliseconds
//	returns  1 extended, 2 re-taken (key was absent), 0 held by another owner,
//	         -1 absent and past the re-take deadline
var extendScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
	return 1
end
if v == false then
	local t = redis.call('TIME')
	if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) >= tonumber(ARGV[3]) then
		return -1
	end
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	return 2
end
return 0
`,
	"adc66aa7ad3f81ddefc6629017a70f5c836c8ebf")

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
var raiseScript = newScript(`if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
local f = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < f then
	redis.call('SET', KEYS[2], ARGV[2])
end
return 1
`,
	"8ff51a7d171fbdba5f0a0cae09e480ea864da3cd")

// extendFencedScript is extendScript for fenced locks: re-taking a vanished
// key also raises that master's counter to the lock's fence.
//
//	KEYS[1]  lock key
//	KEYS[2]  fence counter
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	ARGV[3]  the lock's fence
//	ARGV[4]  re-take deadline, Unix time in milliseconds
//	returns  1 extended, 2 re-taken (key was absent), 0 held by another owner,
//	         -1 absent and past the re-take deadline
var extendFencedScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
	return 1
end
if v == false then
	local t = redis.call('TIME')
	if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) >= tonumber(ARGV[4]) then
		return -1
	end
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[3]) then
		redis.call('SET', KEYS[2], ARGV[3])
	end
	return 2
end
return 0
`,
	"eacf8c64b14d6aad2b05e5c75879b46f08c50854")

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
local t = redis.call('PTTL', KEYS[1])
local f = false
if #KEYS > 1 then
	f = redis.call('GET', KEYS[2])
end
return {v or '', t, f or ''}
`,
	"29915d682139757f9be199c26e3756657bdb621c")

// acquireAgainScript is the acquire sent a second time after the master
// closed the connection of the first: the first may have run, and its key
// holds the lock.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	returns  1 taken (now or by the first run), 0 held by another owner
var acquireAgainScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	return 1
end
if v then
	return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`,
	"b644e531f669c4bf4cfc2170431f2b8e9980d031")

// acquireFencedAgainScript is acquireFencedScript sent a second time: when
// the first run took the lock, the counter it raised is the fence.
//
//	KEYS[1]  lock key
//	KEYS[2]  fence counter
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	returns  the fence (> 0) when taken, 0 when held by another owner
var acquireFencedAgainScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	return tonumber(redis.call('GET', KEYS[2]) or '0')
end
if v then
	return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('INCR', KEYS[2])
`,
	"d32de811abdaa137bf95adb193be8f994fbfccde")

// waitScript is the acquire of a waiting Obtain (WithWait). It takes the
// key when it is free or kept for this Client by a release (the value is
// the Client's queue token); otherwise it queues the Client on the key
// (once: a Client already queued keeps its place) and returns the key's
// remaining TTL, so the waiter sleeps no longer than that. The queue is
// ordered by the Client's clock at queueing (ARGV[4]): one Client queues
// with one score on every master, so the masters agree on the order. The
// queue expires when nobody queued for twice the key's TTL and a second.
//
//	KEYS[1]  lock key
//	KEYS[2]  wait queue (same hash slot)
//	KEYS[3]  fence counter, with fencing (same hash slot)
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	ARGV[3]  the Client's queue token
//	ARGV[4]  queue score: the Client's Unix time in milliseconds
//	returns  {1, fence or 0} taken, {0, PTTL} held by another owner
var waitScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[3] or v == ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	if v == false then
		redis.call('ZREM', KEYS[2], ARGV[3])
	end
	if #KEYS > 2 then
		return {1, redis.call('INCR', KEYS[3])}
	end
	return {1, 0}
end
redis.call('ZADD', KEYS[2], 'NX', ARGV[4], ARGV[3])
local t = redis.call('PTTL', KEYS[1])
redis.call('PEXPIRE', KEYS[2], 2 * math.max(t, 0) + 1000)
return {0, t}
`,
	"70ccef9f91e0dd0d9e49fb78c578d9c37f79947f")

// watchScript queues a watcher (Client.WaitReleased) on a held key: the
// release that frees it tells the watchers on the wake channel.
//
//	KEYS[1]  lock key
//	KEYS[2]  wait queue (same hash slot)
//	ARGV[1]  the Client's watcher entry: '~' and its queue token
//	returns  {holder, PTTL} when held, {'', -2} when absent
var watchScript = newScript(`local v = redis.call('GET', KEYS[1])
if v == false then
	return {'', -2}
end
redis.call('ZADD', KEYS[2], 'NX', 0, ARGV[1])
local t = redis.call('PTTL', KEYS[1])
redis.call('PEXPIRE', KEYS[2], 2 * math.max(t, 0) + 1000)
return {v, t}
`,
	"8108a08651724fbdb4258f95690898bbdc695bfb")
