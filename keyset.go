package redlock

// A keySet is the keys of a lock on several keys ([Client.ObtainMulti]),
// as every request of the lock sends them. It is made once per Obtain,
// never changed after, and shared by the lock's requests: its keys and
// numbers are boxed once, so that encoding a request boxes nothing.
//
// Each request of such a lock is one script on the whole set (scripts.go:
// acquireSetScript, raiseSetScript, extendSetScript, releaseSetScript), so a
// master holds all of a set's keys for one owner, or none of them. The
// lock's op keeps the set's first key as its key, which picks a Cluster
// master's shard (shards.go): one lock's requests keep their order, as a
// single key's do.
type keySet struct {
	names   []string // as the caller named them, duplicates dropped, first occurrence first
	keys    []any    // the lock keys in Redis (prefix applied), strings
	ckeys   []any    // their fence counters (counterKey), with fencing; nil without
	n, n2   any      // len(names) and 2*len(names), boxed int64s
	sharded uint64   // the Client's Redis Cluster masters (op.sharded)
}

// newKeySet boxes names, distinct and valid, for c's requests.
func (c *Client) newKeySet(names []string) *keySet {
	s := &keySet{names: names, keys: make([]any, len(names)), n: int64(len(names)), n2: int64(2 * len(names)), sharded: c.shardedMask}
	if c.cfg.fencing {
		s.ckeys = make([]any, len(names))
	}
	for i, name := range names {
		full := c.cfg.keyPrefix + name
		s.keys[i] = full
		if s.ckeys != nil {
			s.ckeys[i] = counterKey(full)
		}
	}
	return s
}

// acquire is the op of an attempt at the set under token: its key and
// counter key are the first key's, for the lane and for op.with (which
// sends a fence to an Extend when the lock has a counter).
func (s *keySet) acquire(token string, ttl any) op {
	o := op{kind: opAcquireSet, key: s.keys[0], token: token, ttl: ttl, set: s, sharded: s.sharded}
	if s.ckeys != nil {
		o.ckey = s.ckeys[0]
	}
	return o
}

// args appends to a (which holds nothing yet) the arguments of o's script
// after its first two (EVALSHA or EVAL, and the script), which it leaves
// nil, and returns the script. cluster says the master is a Redis Cluster,
// where a Release announces a marked key on the key's sharded channel.
func (s *keySet) args(o *op, a []any, cluster bool) (*script, []any) {
	switch o.kind {
	case opAcquireSet:
		a = s.keysArgs(a, s.ckeys != nil)
		return &acquireSetScript, append(a, o.token, s.n, o.ttl)
	case opRaise:
		a = s.keysArgs(a, true)
		return &raiseSetScript, append(a, o.token, o.fence)
	case opExtend:
		a = append(s.keysArgs(a, s.ckeys != nil), o.token, s.n, o.ttl, o.retakeBy)
		if s.ckeys != nil {
			a = append(a, o.fence)
		}
		return &extendSetScript, a
	default: // opRelease
		a = append(s.keysArgs(a, false), o.token)
		if o.ttl != nil { // kept for the rest of a minimum hold
			a = append(a, o.ttl)
		} else {
			a = append(a, "")
		}
		if cluster {
			a = append(a, "s") // announce marked keys on their sharded channels
		}
		return &releaseSetScript, a
	}
}

// keysArgs appends the two leading nils, numkeys and the keys: the lock
// keys, then their counters when counters is set.
func (s *keySet) keysArgs(a []any, counters bool) []any {
	if !counters {
		return append(append(a, nil, nil, s.n), s.keys...)
	}
	return append(append(append(a, nil, nil, s.n2), s.keys...), s.ckeys...)
}

// blocked names, on each master of rd that refused the set, the key it
// found held by another owner: the acquire's reply (see request.result)
// left its position in rd.vals.
func (s *keySet) blocked(rd *round) {
	for i := range rd.nodes {
		if k := rd.vals[i]; rd.nodes[i].Err == ErrTaken && k >= 1 && k <= int64(len(s.names)) {
			rd.nodes[i].Key = s.names[k-1]
		}
	}
}
