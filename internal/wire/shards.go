package wire

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
// master's own lane has had an answer, so the map is loaded: loading it runs
// commands (CLUSTER SLOTS, with their hooks and their timeouts), which must
// not run on the caller's goroutine, where they would hold the caller past
// its deadline and its other masters' requests behind it, and a hook's panic
// would escape. Until then every request takes the master's lane, where a
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
// barrier either (barrier.go), and the same rules bound what a straggler
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
// map is loaded, else the master's.
func (m *Master) laneFor(r *request) *lane {
	if m.cluster == nil || !m.st.slotsKnown.Load() {
		return m.lane
	}
	key := r.op.target.Key()
	c, err := m.cluster.MasterForKey(&deadlineCtx{at: r.op.Deadline}, key) // the map is loaded: no command runs
	if err != nil {
		return m.lane
	}
	return m.shardLane(c.Options().Addr, key)
}

// shardLane returns the lane of the shard at addr, made for key if there is
// none yet.
func (m *Master) shardLane(addr, key string) *lane {
	s := &m.shards
	s.mu.RLock()
	sl, closed := s.lanes[addr], s.closed
	s.mu.RUnlock()
	switch {
	case closed:
		return m.lane // closed: the request fails with ErrClosed
	case sl != nil:
		return sl.lane
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return m.lane
	}
	if sl = s.lanes[addr]; sl == nil {
		m.retireGoneShards()
		if s.lanes == nil {
			s.lanes = map[string]*shardLane{}
		}
		sl = &shardLane{lane: m.newLane(), key: key}
		s.lanes[addr] = sl
	}
	return sl.lane
}

// retireGoneShards ends the lanes whose first key another address serves
// now, if they have nothing to send; with m.shards.mu held.
func (m *Master) retireGoneShards() {
	for addr, sl := range m.shards.lanes {
		c, err := m.cluster.MasterForKey(&deadlineCtx{}, sl.key)
		if err == nil && c.Options().Addr != addr && sl.retire() {
			delete(m.shards.lanes, addr)
		}
	}
}

func (m *Master) closeShards() {
	s := &m.shards
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, sl := range s.lanes {
		sl.close()
	}
}
