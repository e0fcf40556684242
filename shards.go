package redlock

import (
	"sync"
)

// A Cluster master sends each request on the lane of the shard that serves
// its key. One lane for the whole Cluster would carry the requests of every
// shard in one batch at a time: a shard that stops answering would hold
// every other shard's requests behind it until the batch's deadline, and
// then the lane would fail them as stalled, so one frozen shard would make
// the whole Cluster unavailable to the lock. (TestQuorumOverIndependentClusters)
//
// The shard of a key comes from go-redis's slot map, and only once the
// node's own lane has had an answer, so the map is loaded: loading it runs
// commands (CLUSTER SLOTS, with their hooks and their timeouts), which must
// not run on the caller's goroutine, where they would hold the caller past
// its deadline and its other masters' requests behind it, and a hook's panic
// would escape. Until then every request takes the node's lane, where a
// batch loads the map under the lane's rules. (TestColdFrozenClusterDoesNotTakeTheQuorumDown,
// TestColdFrozenClusterHoldsNoCallerPastItsContext,
// TestPanickingHookOnAColdClusterDoesNotPanicTheCaller)
//
// A shard's address changes (a failover, a restarted pod): when a lane is
// made for a new address, the lanes whose first key is now served
// elsewhere end, once they have nothing to send (a lane ended too early is
// made again by its next request). (TestShardLanesOfGoneAddressesEnd)
//
// A key's requests keep their order as long as its slot stays on its
// shard. While a slot moves, a request may take the new shard's lane while
// an earlier one is still in the old one's batch; a Cluster master has no
// barrier either (transport.go), and the same rules bound what a straggler
// can do: an Extend never shortens a key, a late re-take is refused past
// its deadline, a late acquire keeps a released key until its TTL.
type shardLanes struct {
	mu     sync.RWMutex
	lanes  map[string]*shardLane // by the shard's address
	closed bool
}

type shardLane struct {
	*lane
	key string // the key it was made for
}

// laneFor returns the lane of r: the shard's on a Cluster master whose slot
// map is loaded, else the node's.
func (n *node) laneFor(r *request) *lane {
	if n.cluster == nil || !n.slotsKnown.Load() {
		return n.lane
	}
	key := r.key.(string)
	m, err := n.cluster.MasterForKey(&deadlineCtx{at: r.deadline}, key) // the map is loaded: no command runs
	if err != nil {
		return n.lane
	}
	return n.shardLane(m.Options().Addr, key)
}

// shardLane returns the lane of the shard at addr, made for key if there is
// none yet.
func (n *node) shardLane(addr, key string) *lane {
	s := &n.shards
	s.mu.RLock()
	sl, closed := s.lanes[addr], s.closed
	s.mu.RUnlock()
	switch {
	case closed:
		return n.lane // closed: the request fails with ErrClosed
	case sl != nil:
		return sl.lane
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return n.lane
	}
	if sl = s.lanes[addr]; sl == nil {
		n.retireGoneShards()
		if s.lanes == nil {
			s.lanes = map[string]*shardLane{}
		}
		sl = &shardLane{lane: n.newLane(), key: key}
		s.lanes[addr] = sl
	}
	return sl.lane
}

// retireGoneShards ends the lanes whose first key another address serves
// now, if they have nothing to send; with n.shards.mu held.
func (n *node) retireGoneShards() {
	for addr, sl := range n.shards.lanes {
		m, err := n.cluster.MasterForKey(&deadlineCtx{}, sl.key)
		if err == nil && m.Options().Addr != addr && sl.retire() {
			delete(n.shards.lanes, addr)
		}
	}
}

func (n *node) closeShards() {
	s := &n.shards
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, sl := range s.lanes {
		sl.close()
	}
}
