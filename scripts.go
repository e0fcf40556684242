package redlock

// Every Lua script of the package. Each touches only the keys it is given in
// KEYS, so it runs on a Redis Cluster (all KEYS of one call share a slot).
//
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT. Their SHA1
// digests are written out here (and checked by a test) so that no SHA1 code
// runs on the hot path and FIPS builds need none.

// A script is a Lua source and its SHA1 digest as Redis names it.
type script struct {
	src string
	sha string
}

// releaseScript deletes the lock only if we still own it.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	returns  1 deleted, 0 held by another owner, -1 key absent
var releaseScript = script{
	src: `local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
if v == false then
	return -1
end
return 0
`,
	sha: "12bbe2660b1ddffae4cd5513562a030b74e9c337",
}

// extendScript resets the lock's TTL if we still own it, and re-takes the key
// where it has vanished (a restart or an eviction), so the quorum does not
// erode. The caller never extends a lock whose validity has run out, so a
// lapsed lock is not revived.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	ARGV[2]  TTL in milliseconds
//	returns  1 extended, 2 re-taken (key was absent), 0 held by another owner
var extendScript = script{
	src: `local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
if v == false then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	return 2
end
return 0
`,
	sha: "818145b6935858b8e3292869f97640e08a749a20",
}
