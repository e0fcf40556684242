package redlock

import (
	"context"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A node is one master: its lanes (lane.go), each with a transport
// (transport.go), and the requests' encoding (request.go). Everything above
// it speaks in requests and rounds.

type node struct {
	rdb   redis.UniversalClient
	addr  string
	inl   bool         // requests may run on the caller's goroutine (one master, bounded reads)
	reqs  *sync.Pool   // the client's pool of requests
	lanes []*lane      // a lock's requests all take the lane its key hashes to
	seed  maphash.Seed // for that hash
	down  atomic.Bool  // the master stopped answering (kept with an Observer only)

	// WithReplicaAcks: replicas that must acknowledge a grant (0: none, no
	// WAIT is ever sent), boxed once for the WAIT's argument, and how long
	// the master waits for them.
	acks    int
	acksArg any
	ackWait time.Duration

	// Shared by the node's transports.
	loaded    atomic.Bool   // every script is in the master's cache, as far as we know
	killKnown atomic.Int32  // 0 not asked yet, 1 CLIENT KILL allowed, 2 not
	dialed    atomic.Bool   // a connection was set up: no more dial turns
	takes     chan struct{} // the dial turn (see dialTurn)
	// runID is the master process's run_id (INFO server), to tell a
	// restart from a connection merely closed: nil until asked, "" when
	// the master does not say.
	runID atomic.Pointer[string]
	// restarted is when a lane first saw runID change (a restart), in ns
	// since epoch; 0 if never.
	epoch     time.Time
	restarted atomic.Int64
	// budget bounds a tick's (and Close's) sending of kept Releases.
	budget time.Duration
}

// sawRunID records the run_id a fresh connection read, and notes a
// restart when it differs from the one known before.
func (n *node) sawRunID(run string) {
	if run == "" {
		return // not allowed to ask: restarts go unseen
	}
	if was := n.runID.Swap(&run); was != nil && *was != run {
		n.restarted.Store(int64(max(time.Since(n.epoch), 1)))
	}
}

// restartedAfter reports whether the master was seen to restart after t.
func (n *node) restartedAfter(t time.Time) bool {
	d := n.restarted.Load()
	return d != 0 && n.epoch.Add(time.Duration(d)).After(t)
}

func newNode(rdb redis.UniversalClient, addr string, single bool, cfg *config, reqs *sync.Pool, wg *sync.WaitGroup) *node {
	std, _ := rdb.(*redis.Client)
	n := &node{rdb: rdb, addr: addr, inl: single && boundedByDeadline(rdb), reqs: reqs, takes: make(chan struct{}, 1), epoch: time.Now(), budget: tickBudget}
	if cfg.nodeTimeout > 0 {
		n.budget = min(tickBudget, cfg.nodeTimeout)
	}
	if cfg.acks > 0 {
		n.acks, n.acksArg, n.ackWait = cfg.acks, int64(cfg.acks), cfg.ackWait
	}
	n.seed = maphash.MakeSeed()
	for range lanesFor(rdb, single) {
		t := &redisTransport{rdb: rdb, std: std, fresh: std == nil || !commandsAlias(), node: n, idle: connIdle}
		l := newLane(t, n.deliver)
		l.budget = n.budget
		n.lanes = append(n.lanes, l)
		wg.Add(1)
		go l.work(wg)
	}
	return n
}

// killAllowed reports whether the master lets this client kill
// connections (the barrier; see transport.go).
func (n *node) killAllowed() bool { return n.killKnown.Load() == 1 }

// dialTurn waits, no longer than ctx's deadline, for the node's dial turn,
// until a first connection is set up: go-redis v9.23 races with itself when
// connections of one client dial at once through Conn (a handshake that
// falls back writes the client's shared options under a lock of its own),
// and once one has, the others do not. It reports whether it took the turn.
func (n *node) dialTurn(ctx context.Context) (bool, error) {
	if n.dialed.Load() {
		return false, nil
	}
	select {
	case n.takes <- struct{}{}:
		return true, nil
	default:
	}
	at, _ := ctx.Deadline()
	w := time.NewTimer(time.Until(at))
	defer w.Stop()
	select {
	case n.takes <- struct{}{}:
		return true, nil
	case <-w.C:
		return false, errQueued
	}
}

func (n *node) dialDone() { <-n.takes }

// lanesFor is how many lanes a node has: one per master of several, and
// up to four (a connection each) for a single master, fewer when the
// client's pool is small, so the lanes keep most of it free for the
// application.
//
// A lane has one batch in flight, so on one lane the client and the master
// take turns: the master waits while the client reads a batch's replies and
// hands them out, and the client waits while the master runs the next
// batch. Over several masters the turns of one master overlap the others';
// over one master only more lanes overlap them. Measured with 64 goroutines
// on a 2-core machine running the client and the masters: one master made
// about 100k lock+release cycles/s with one lane, 125k with two, 145k with
// three or four and 110k with six; three and five masters ran slower with a
// second lane per master (N=5: 40k cycles/s with one lane, 29k with two),
// their servers' CPU being spent then on smaller batches.
func lanesFor(rdb redis.UniversalClient, single bool) int {
	if !single {
		return 1
	}
	if c, ok := rdb.(*redis.Client); ok {
		return min(4, max(1, c.Options().PoolSize/4))
	}
	return 4
}

// boundedByDeadline reports whether rdb bounds a socket read by the
// request's deadline (ContextTimeoutEnabled). Only then may a request run on
// its caller's goroutine: otherwise a master that does not answer would hold
// the caller for the client's ReadTimeout, past its node timeout. Sent by a
// worker, the caller waits on its own timer instead.
func boundedByDeadline(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// send hands r to the lane of its key. It runs on the caller's goroutine
// when the op allows it (the caller waits for it and has no context that
// could end sooner than its deadline) and the node's client bounds reads by
// that deadline.
func (n *node) send(r *request) {
	n.laneOf(r.key).send(r, n.inl && r.inline)
}

// laneOf returns the lane of every request on key (a boxed string).
func (n *node) laneOf(key any) *lane {
	if len(n.lanes) == 1 {
		return n.lanes[0]
	}
	return n.lanes[maphash.String(n.seed, key.(string))%uint64(len(n.lanes))]
}

func (n *node) close() {
	for _, l := range n.lanes {
		l.close()
	}
}

// errSkipped and errQueued mark requests dropped before they were sent.
var (
	errSkipped = fmt.Errorf("%w: the caller gave up before it was sent", errNoReply)
	errQueued  = fmt.Errorf("%w: waited in the queue past its deadline: %w", errNoReply, context.DeadlineExceeded)
	// errReleasing marks an Extend's request not sent because a Release
	// of its lock has begun.
	errReleasing = fmt.Errorf("%w: not sent, the lock is being released", errNoReply)
)

// deliver hands r's reply to its round and r back to the pool.
func (n *node) deliver(r *request) {
	if rd := r.rd; rd != nil {
		rd.replies <- reply{idx: r.idx, val: r.val, err: r.err}
		rd.unref()
	}
	r.op, r.cmd, r.rd, r.val, r.err = op{}, nil, nil, 0, nil
	r.acked, r.ackMs, r.ackErr = 0, 0, nil
	clear(r.argv[:]) // the commands keep r.argv as their arguments
	n.reqs.Put(r)
}

// addrOf names a master in errors by the address its client knows.
func addrOf(rdb redis.UniversalClient, i int) string {
	switch c := rdb.(type) {
	case *redis.Client:
		if a := c.Options().Addr; a != "" && a != "FailoverClient" {
			return a
		}
	case *redis.ClusterClient:
		if a := c.Options().Addrs; len(a) > 0 {
			return strings.Join(a, ",")
		}
	case *redis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		if len(addrs) > 0 {
			return strings.Join(addrs, ",")
		}
	}
	return fmt.Sprintf("master[%d]", i)
}
