package wire

import "github.com/redlock-go/redlock/internal/scripts"

// A KeySet is the keys of a lock on several keys (the root's
// ObtainMulti), as every request of the lock sends them. It is made once
// per Obtain, never changed after, and shared by the lock's requests: its
// keys and numbers are boxed once, so that encoding a request boxes
// nothing.
//
// Each request of such a lock is one script on the whole set
// (acquire_set.lua, raise_set.lua, extend_set.lua, release_set.lua), so a
// master holds all of a set's keys for one owner, or none of them. The
// lock's Target keeps the set's first key as its key, which picks a
// Cluster master's shard (shards.go): one lock's requests keep their
// order, as a single key's do. (TestSetRequests)
type KeySet struct {
	keys  []any // the lock keys in Redis (prefix applied), strings
	ckeys []any // their fence counters, with fencing; nil without
	n, n2 any   // len(keys) and 2*len(keys), boxed int64s
}

// NewKeySet boxes keys, distinct, and with fencing their counters (ckeys:
// nil without), for the requests of a lock on them.
func NewKeySet(keys, ckeys []string) KeySet {
	s := KeySet{keys: make([]any, len(keys)), n: int64(len(keys)), n2: int64(2 * len(keys))}
	for i, k := range keys {
		s.keys[i] = k
	}
	if ckeys != nil {
		s.ckeys = make([]any, len(ckeys))
		for i, k := range ckeys {
			s.ckeys[i] = k
		}
	}
	return s
}

// Target is the lock on s under token: its key and counter key are the
// first key's, for the lane and for Extend (which sends a fence to a
// lock with a counter).
func (s *KeySet) Target(token string) Target {
	t := Target{key: s.keys[0], token: token, set: s}
	if s.ckeys != nil {
		t.ckey = s.ckeys[0]
	}
	return t
}

// args appends to a (which holds nothing yet) the arguments of o's script
// after its first two (EVALSHA or EVAL, and the script), which it leaves
// nil, and returns the script. retake is an Extend's re-take deadline as
// the master's clock reads it (request.bounds). cluster says the master is
// a Redis Cluster, where a Release announces a marked key on the key's
// sharded channel.
func (s *KeySet) args(o *Op, retake any, a []any, cluster bool) (*scripts.Script, []any) {
	token := o.target.token
	switch o.kind {
	case KindAcquireSet:
		a = s.keysArgs(a, s.ckeys != nil)
		return &scripts.AcquireSet, append(a, token, s.n, o.ttl)
	case KindRaise:
		a = s.keysArgs(a, true)
		return &scripts.RaiseSet, append(a, token, o.fence)
	case KindExtend:
		a = append(s.keysArgs(a, s.ckeys != nil), token, s.n, o.ttl, retake)
		if s.ckeys != nil {
			a = append(a, o.fence)
		}
		return &scripts.ExtendSet, a
	default: // KindRelease
		a = append(s.keysArgs(a, false), token)
		if o.ttl != nil { // kept for the rest of a minimum hold
			a = append(a, o.ttl)
		} else {
			a = append(a, "")
		}
		if cluster {
			a = append(a, "s") // announce marked keys on their sharded channels
		}
		return &scripts.ReleaseSet, a
	}
}

// keysArgs appends the two leading nils, numkeys and the keys: the lock
// keys, then their counters when counters is set.
func (s *KeySet) keysArgs(a []any, counters bool) []any {
	if !counters {
		return append(append(a, nil, nil, s.n), s.keys...)
	}
	return append(append(append(a, nil, nil, s.n2), s.keys...), s.ckeys...)
}
