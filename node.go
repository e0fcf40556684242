package redlock

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A node is one master: its lane (lane.go) with its transport
// (transport.go), and the requests' encoding (request.go). Everything above
// it speaks in requests and rounds.

type node struct {
	rdb  redis.UniversalClient
	addr string
	inl  bool        // requests may run on the caller's goroutine (one master, bounded reads)
	one  bool        // the Client's only master
	reqs *sync.Pool  // the client's pool of requests
	lane *lane       // every request to the master, so a lock's requests keep their order
	down atomic.Bool // the master stopped answering (kept with an Observer only)
	wg   *sync.WaitGroup

	// A Cluster master's lanes, one per shard, once its slot map is
	// loaded (shards.go).
	cluster    *redis.ClusterClient
	slotsKnown atomic.Bool
	shards     shardLanes

	resends bool // the client may send a command more than once itself (resending)

	// WithReplicaAcks: replicas that must acknowledge a grant (0: none, no
	// WAIT is ever sent), boxed once for the WAIT's argument, and how long
	// the master waits for them.
	acks    int
	acksArg any
	ackWait time.Duration

	// What the transport learnt of the master.
	loaded    atomic.Bool  // every script is in the master's cache, as far as we know
	killKnown atomic.Int32 // 0 not asked yet, 1 CLIENT KILL allowed, 2 not
	// runID is the master process's run_id (INFO server), to tell a
	// restart from a connection merely closed: nil until asked, "" when
	// the master does not say.
	runID atomic.Pointer[string]
	// restarted is when a lane first saw runID change (a restart), in ns
	// since epoch; 0 if never.
	epoch     time.Time
	restarted atomic.Int64
	// clock is the master's clock offset, in ms: its wall clock minus the
	// client's, as the last fresh connection to it measured (sawClock);
	// 0 where none did. An Extend's bounds reach the master in its own
	// clock: request.build adds it.
	clock atomic.Int64
	// clockKnown says the last fresh connection measured clock.
	clockKnown atomic.Bool
	// budget bounds a tick's (and Close's) sending of kept Releases.
	budget time.Duration
	// told says the master answered the run_id question (with one, or by
	// denying INFO), or never will (a Cluster master): a lock obtained
	// before then cannot tell a restart since (op.known).
	told atomic.Bool
	// changed, if set, runs when a lane sees the master's run_id change:
	// a restart, or a failover to another process.
	changed func()
	// taken is closed once a lane of a standalone master has taken a
	// connection of its own (transport.take): the waker's subscriptions
	// wait for it (wake.go, waker.run).
	taken     chan struct{}
	takenOnce sync.Once
}

// sawRunID records the run_id a fresh connection read, and notes a
// restart when it differs from the one known before.
func (n *node) sawRunID(run string) {
	n.told.Store(true)
	if run == "" {
		return // not allowed to ask: restarts go unseen
	}
	if was := n.runID.Swap(&run); was != nil && *was != run {
		n.restarted.Store(int64(max(time.Since(n.epoch), 1)))
		if n.changed != nil {
			n.changed() // the Client's subscriptions may be on the old process (waker.probe)
		}
	}
}

// sawClock records the master's clock offset as a fresh connection
// measured it (transport.identify): the master's wall clock (usec, the
// server_time_usec of its INFO server reply) minus the client's when the
// reply arrived (at). ok false, a master that did not say (INFO denied, a
// Redis without the field), records 0: the client's clock is taken for
// the master's, the assumption that the clocks agree.
//
// The master read its clock somewhere within the round trip, so the
// client's reading at the middle of it is the best guess, off by up to
// half the round trip either way: the two legs need not take as long, and
// a master that is busy, or was frozen, runs the command late in it,
// which makes the middle's offset too high, the unsafe way. Taken at the
// round trip's end instead (the master read its clock before then), the
// offset can only be low, by at most the round trip: the bounds reach the
// master early, never late. Early costs at most this: a renewal that
// reaches that master within the round trip of its bound does nothing
// there (errPastValidity: a failure of that master's, never a loss), and
// a re-take then finds the key gone, as it is; late would let a straggler
// run past the validity. It is floored to the millisecond for the same
// reason. (TestClockOffsetIsMeasuredOnEveryFreshConnection)
//
// The offset holds until the lane's next fresh connection (see connTurn
// and connIdle; a failure drops the connection too; a watchdog's renewals
// may keep one for long): a clock that jumps meanwhile, the master's or
// the client's wall clock, moves the bounds by the jump. A master's
// clock jumped ahead refuses that master's renewals (errPastValidity: a
// failure, never a loss; the other masters still make a quorum) and its
// re-takes; one jumped back may run a straggler as late as the jump, as
// it keeps every key longer by the jump: Redlock holds while the clocks'
// rates agree, not across jumps. A refusal past the validity
// (errPastValidity) where the offset was measured gives the lane's
// connection back, so that the next request measures it again: a step
// of either clock, or a rate that drifted over the connection's life,
// costs one failed renewal, not the lock
// (TestLockObtainedAfterAMasterClockStepIsRenewed,
// TestMasterClockRunningFastWithinTheDriftLosesNoWatchedLock,
// TestClientClockSteppedBackLosesNoWatchedLock,
// TestStaleClockOffsetFailsThatMasterOnly)
func (n *node) sawClock(usec int64, at time.Time, ok bool) {
	n.clockKnown.Store(ok)
	if !ok {
		n.clock.Store(0)
		return
	}
	d := usec*1000 - at.UnixNano()
	ms := d / 1e6
	if d%1e6 < 0 {
		ms-- // floored: the offset may only err low
	}
	n.clock.Store(ms)
}

// restartedAfter reports whether the master was seen to restart after t.
func (n *node) restartedAfter(t time.Time) bool {
	d := n.restarted.Load()
	return d != 0 && n.epoch.Add(time.Duration(d)).After(t)
}

func newNode(rdb redis.UniversalClient, addr string, single bool, cfg *config, reqs *sync.Pool, wg *sync.WaitGroup, changed func()) *node {
	n := &node{rdb: rdb, addr: addr, inl: single && boundedByDeadline(rdb), one: single, reqs: reqs, epoch: time.Now(), budget: tickBudget, taken: make(chan struct{}), changed: changed}
	if cfg.nodeTimeout > 0 {
		n.budget = min(tickBudget, cfg.nodeTimeout)
	}
	if cfg.acks > 0 {
		n.acks, n.acksArg, n.ackWait = cfg.acks, int64(cfg.acks), cfg.ackWait
	}
	// One lane per master, a single master too. A lane has one batch in
	// flight, and the next carries every request queued meanwhile, so one
	// lane makes the deepest batches; and a master's CPU per lock is
	// mostly per batch (a read, a write, a wake-up), each master being one
	// single-threaded process. Measured with 64 goroutines on one local
	// master (2 cores for the client and the server): one lane spent 4.5-4.7
	// us of Redis CPU per lock+release, two 5.1-5.3 and four 6.5-7.3 (0.04,
	// 0.08 and 0.16 reads per cycle), at the same cycles/s within the noise
	// of one run to the next.
	// A Cluster master gets a lane per shard besides (shards.go).
	n.cluster, _ = rdb.(*redis.ClusterClient)
	n.told.Store(n.cluster != nil) // no connection of its own asks it
	n.resends = resending(rdb)
	n.wg = wg
	n.lane = n.newLane()
	return n
}

// newLane starts a lane to the master, with its worker.
func (n *node) newLane() *lane {
	std, _ := n.rdb.(*redis.Client)
	t := &redisTransport{rdb: n.rdb, std: std, fresh: std == nil || !commandsAlias(), node: n, idle: connIdle}
	l := newLane(t, n.deliver)
	l.budget = n.budget
	// A caller of a Client of one master needs no other master's answer
	// to send its next request: the lane may wait for them (lane.gather).
	// Not on a Cluster, whose callers' next keys go to other shards.
	l.waitCallers = n.one && std != nil
	n.wg.Add(1)
	go l.work(n.wg)
	return l
}

// killAllowed reports whether the master lets this client kill
// connections (the barrier; see transport.go).
func (n *node) killAllowed() bool { return n.killKnown.Load() == 1 }

// resending reports whether rdb may send a command again by itself after a
// failure: go-redis retries and, on a Cluster, follows redirects and retries
// on another node. (Options holds them as go-redis set them up: -1, "none",
// is 0 there, and a Cluster's MaxRetries none is -1.)
func resending(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().MaxRetries > 0
	case *redis.ClusterClient:
		o := c.Options()
		return o.MaxRetries > 0 || o.MaxRedirects > 0
	}
	return true
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
	for {
		l := n.laneFor(r)
		if l.trySend(r, n.inl && r.inline) {
			return
		}
		if l == n.lane { // the Client is closing
			l.fail(r, ErrClosed)
			return
		}
		// a shard lane that ended (shards.go): take the shard's lane again
	}
}

func (n *node) close() {
	n.lane.close()
	n.closeShards()
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
		if rd.undoing.Load() && n.undoNeeded(r.err, true) && rd.claim(r.idx) {
			n.sendUndo(rd, r.idx) // its caller has given up on this answer
		}
		rd.unref()
	}
	r.op, r.cmd, r.rd, r.val, r.err = op{}, nil, nil, 0, nil
	r.acked, r.ackMs, r.ackErr, r.skew = 0, 0, nil, 0
	clear(r.argv[:]) // the commands keep r.argv as their arguments
	n.reqs.Put(r)
}

// undoNeeded reports whether a failed attempt's acquire that got err may
// have left its key on the master: not when the master refused (another
// owner holds the key), and not when the acquire was never sent. A late
// refusal (after the round decided) from a client that may send a command
// more than once itself (go-redis retries after a timeout, Cluster
// redirects) may be our own first SET refusing the second, so it gets the
// undo. A prompt one gets none, as before answers came late: a retry that
// answers within the deadline needs a connection broken mid-command, and
// the clients' settings the package documents (MaxRetries -1) rule it out;
// sending a Release for every refusal would double a contended master's
// work.
func (n *node) undoNeeded(err error, late bool) bool {
	switch err {
	case ErrTaken:
		return late && n.resends
	case errStalled, errQueued, errSkipped, ErrClosed:
		return false
	}
	return true
}

// sendUndo sends rd's undo to master i, on a deadline of its own.
func (n *node) sendUndo(rd *round, i int) {
	r := n.reqs.Get().(*request)
	r.op, r.idx = rd.undoOp, i
	r.deadline = time.Now().Add(rd.undoTimeout)
	n.send(r)
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
