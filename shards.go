package redlock

import (
	"sync"

	"github.com/redis/go-redis/v9"
)

// A Cluster master sends each request on the lane of the shard that serves
// its key. One lane for the whole Cluster would carry the requests of every
// shard in one batch at a time: a shard that stops answering would hold
// every other shard's requests behind it until the batch's deadline, and
// then the lane would fail them as stalled, so one frozen shard would make
// the whole Cluster unavailable to the lock. (TestQuorumOverIndependentClusters)
//
// A key's requests keep their order as long as its slot stays on its
// shard. While a slot moves, a request may take the new shard's lane while
// an earlier one is still in the old one's batch; a Cluster master has no
// barrier either (transport.go), and the same rules bound what a straggler
// can do: an Extend never shortens a key, a late re-take is refused past
// its deadline, a late acquire keeps a released key until its TTL.
type shardLanes struct {
	mu     sync.Mutex
	lanes  map[string]*lane // by the shard's address
	closed bool
}

// laneFor returns the lane of r: the shard's on a Cluster master, else the
// node's. A key whose shard is not known (no slot map yet, none loaded in
// time) takes the node's lane, where its request meets the same failure.
func (n *node) laneFor(r *request) *lane {
	if n.cluster == nil {
		return n.lane
	}
	m, err := n.cluster.MasterForKey(&deadlineCtx{at: r.deadline}, r.key.(string))
	if err != nil {
		return n.lane
	}
	return n.shardLane(m)
}

func (n *node) shardLane(m *redis.Client) *lane {
	addr := m.Options().Addr
	s := &n.shards
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return n.lane // closed: the request fails with ErrClosed
	}
	l := s.lanes[addr]
	if l == nil {
		if s.lanes == nil {
			s.lanes = map[string]*lane{}
		}
		l = n.newLane()
		s.lanes[addr] = l
	}
	return l
}

func (n *node) closeShards() {
	s := &n.shards
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, l := range s.lanes {
		l.close()
	}
}
