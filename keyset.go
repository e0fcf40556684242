package redlock

import "github.com/redlock-go/redlock/internal/wire"

// A keySet is the keys of a lock on several keys ([Client.ObtainMulti]): as
// the caller named them, and as every request of the lock sends them (the
// wire's KeySet: each request is one script on the whole set, so a master
// holds all of a set's keys for one owner, or none of them). It is made
// once per Obtain and never changed after.
type keySet struct {
	names []string // as the caller named them, duplicates dropped, first occurrence first
	wire  wire.KeySet
}

// newKeySet makes the set of names, distinct and valid, for c's requests.
func (c *Client) newKeySet(names []string) *keySet {
	keys := make([]string, len(names))
	var ckeys []string
	if c.cfg.fencing {
		ckeys = make([]string, len(names))
	}
	for i, name := range names {
		keys[i] = c.cfg.keyPrefix + name
		if ckeys != nil {
			ckeys[i] = counterKey(keys[i])
		}
	}
	return &keySet{names: names, wire: wire.NewKeySet(keys, ckeys)}
}

// blocked names, on each master of rd that refused the set, the key it
// found held by another owner: the acquire's reply left its position in
// rd.vals.
func (s *keySet) blocked(rd *round) {
	for i := range rd.nodes {
		if k := rd.vals[i]; rd.nodes[i].Err == ErrTaken && k >= 1 && k <= int64(len(s.names)) {
			rd.nodes[i].Key = s.names[k-1]
		}
	}
}
