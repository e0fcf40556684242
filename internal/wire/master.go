// Package wire carries one request to one Redis master and its reply back:
// the requests and their encoding (op.go, request.go, result.go,
// keyset.go), the lane that queues them and sends them in batches
// (lane.go, gather.go), and the transport over go-redis that sends a batch
// (transport.go, with conn.go, barrier.go, kept.go, acks.go, shared.go),
// with a Cluster master's shards (shards.go, slot.go).
//
// It knows nothing of quorums or locks. The root package makes an Op per
// round, sends it to each Master with a Sink (its round), and reads the
// replies there; what a reply means for the lock is the root's to decide.
package wire

import (
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Sink takes the replies of the requests sent with it (the root's
// round). Deliver runs once per request, after the request has left the
// wire, on whichever goroutine ran the request's lane (its worker, or an
// inline caller): it must not block, and may send more requests.
type Sink interface {
	Deliver(Reply)
}

// A Reply is one master's answer to one request.
type Reply struct {
	Idx int   // the master's position, as given to Send
	Val int64 // the fence counter of a fenced acquire, a PTTL, a set's blocked key: what the kind answers
	// Err is nil (granted), ErrTaken or ErrAbsent (refused), or why there
	// is no answer.
	Err error
	// Acks, for a grant (Err nil) on a master that wants replica acks
	// (Config.Acks), is what the WAIT after it answered.
	Acks Acks
}

// Acks is the answer of the WAIT that followed a grant.
type Acks struct {
	Asked   bool  // a WAIT was wanted: the other fields tell its answer
	Acked   int64 // replicas that acknowledged the write
	Timeout time.Duration
	Err     error // why WAIT gave no count; nil when it did
}

// Config is what a Master needs to know of its Client.
type Config struct {
	// Single says the master is its Client's only one: a request may run
	// on its caller's goroutine (when the go-redis client bounds reads by
	// the request's deadline), and its lane may wait for its callers
	// (lane.gather).
	Single bool
	// NodeTimeout, when shorter than tickBudget, bounds what a tick (and
	// Close) sends of the kept Releases.
	NodeTimeout time.Duration
	// Acks replicas must acknowledge each grant (0: no WAIT is ever
	// sent), within AckWait.
	Acks    int
	AckWait time.Duration
	// ConnIdle is how long a lane keeps its connection without using it
	// (0: DefaultConnIdle).
	ConnIdle time.Duration
	// Changed, if set, runs when a lane sees the master's run_id change:
	// a restart, or a failover to another process.
	Changed func()
	// Workers counts the lanes' workers: Close's caller waits on it.
	Workers *sync.WaitGroup
}

// A Master is one master's wire: its lane (lane.go) with its transport
// (transport.go), a Cluster master's lanes per shard (shards.go), and the
// requests' pool. Everything above it speaks in Ops and Replies.
type Master struct {
	rdb    redis.UniversalClient
	inline bool // requests may run on the caller's goroutine (one master, bounded reads)
	one    bool // the Client's only master
	reqs   sync.Pool
	lane   *lane // every request to the master, so a lock's requests keep their order
	wg     *sync.WaitGroup
	st     state

	// A Cluster master's lanes, one per shard, once its slot map is
	// loaded (shards.go).
	cluster *redis.ClusterClient
	shards  shardLanes

	// Replica acks: how many, boxed once for the WAIT's argument, and how
	// long the master waits for them.
	acks    int
	acksArg any
	ackWait time.Duration
	budget  time.Duration // bounds a tick's (and Close's) sending of kept Releases
	idle    time.Duration // Config.ConnIdle
	dials   *dialWatch    // the hook that sees a standalone client's dials fail; nil on a Cluster
}

// NewMaster starts the wire to the master behind rdb, with its lane's
// worker.
func NewMaster(rdb redis.UniversalClient, cfg Config) *Master {
	m := &Master{rdb: rdb, inline: cfg.Single && boundedByDeadline(rdb), one: cfg.Single, wg: cfg.Workers, budget: tickBudget, idle: cfg.ConnIdle}
	m.reqs.New = func() any { return new(request) }
	m.st.epoch, m.st.taken, m.st.changed = time.Now(), make(chan struct{}), cfg.Changed
	if m.idle <= 0 {
		m.idle = DefaultConnIdle
	}
	if cfg.NodeTimeout > 0 {
		m.budget = min(tickBudget, cfg.NodeTimeout)
	}
	if cfg.Acks > 0 {
		m.acks, m.acksArg, m.ackWait = cfg.Acks, int64(cfg.Acks), cfg.AckWait
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
	m.cluster, _ = rdb.(*redis.ClusterClient)
	m.st.told.Store(m.cluster != nil) // no connection of its own asks it
	if std, ok := rdb.(*redis.Client); ok {
		// The one hook this package adds to the application's client,
		// once per client: dial failures (dialWatch).
		m.dials = watchDials(std, &m.st)
	}
	m.lane = m.newLane()
	return m
}

// newLane starts a lane to the master, with its worker.
func (m *Master) newLane() *lane {
	std, _ := m.rdb.(*redis.Client)
	t := &redisTransport{rdb: m.rdb, std: std, fresh: std == nil || !commandsAlias(), st: &m.st, cluster: m.cluster != nil,
		acks: m.acks, acksArg: m.acksArg, ackWait: m.ackWait, budget: m.budget, idle: m.idle}
	l := newLane(t, m.deliver)
	l.budget = m.budget
	// A caller of a Client of one master needs no other master's answer
	// to send its next request: the lane may wait for them (lane.gather).
	// Not on a Cluster, whose callers' next keys go to other shards.
	l.waitCallers = m.one && std != nil
	m.wg.Add(1)
	go l.work(m.wg)
	return l
}

// Send sends o to the master, on the lane of its key; the reply goes to
// sink as master idx's (none with sink nil: nobody waits for it). The
// request runs on the caller's goroutine when o allows it (o.Inline: the
// caller waits for it and has no context that could end sooner than its
// deadline), the master is the Client's only one, its lane is idle, and
// its client bounds reads by that deadline.
func (m *Master) Send(o *Op, idx int, sink Sink) {
	r := m.reqs.Get().(*request)
	r.op, r.idx, r.sink, r.cluster = *o, idx, sink, m.cluster != nil
	for {
		l := m.laneFor(r)
		if l.trySend(r, m.inline && r.op.Inline) {
			return
		}
		if l == m.lane { // the Client is closing
			l.fail(r, ErrClosed)
			return
		}
		// a shard lane that ended (shards.go): take the shard's lane again
	}
}

// Close makes the master's lanes exit once they have sent what is queued;
// their workers end after one last sending of the kept Releases.
func (m *Master) Close() {
	if m.dials != nil {
		m.dials.unwatch(&m.st)
	}
	m.lane.close()
	m.closeShards()
}

// deliver hands r's reply to its sink and r back to the pool.
func (m *Master) deliver(r *request) {
	if r.sink != nil {
		rep := Reply{Idx: r.idx, Val: r.val, Err: r.err}
		if r.err == nil && m.acks > 0 && r.wantsAcks() {
			rep.Acks = Acks{Asked: true, Acked: r.acked, Timeout: time.Duration(r.ackMs) * time.Millisecond, Err: r.ackErr}
		}
		r.sink.Deliver(rep)
	}
	r.op, r.cmd, r.sink, r.val, r.err, r.again = Op{}, nil, nil, 0, nil, false
	r.acked, r.ackMs, r.ackErr, r.skew = 0, 0, nil, 0
	clear(r.argv[:]) // the commands keep r.argv as their arguments
	m.reqs.Put(r)
}

// Redis returns the master's go-redis client.
func (m *Master) Redis() redis.UniversalClient { return m.rdb }

// Cluster reports whether the master is a Redis Cluster.
func (m *Master) Cluster() bool { return m.cluster != nil }

// Taken is closed once a lane of a standalone master has taken a
// connection of its own (never on a Cluster master): the root's
// subscriptions wait for it, since go-redis v9.23 races with itself when a
// PubSub's first connection is made while a lane's is set up (its
// waker.run).
func (m *Master) Taken() <-chan struct{} { return m.st.taken }

// Told reports whether the master answered the run_id question (with one,
// or by denying INFO), or never will (a Cluster master): a lock obtained
// before then cannot tell a restart since (ReleaseFacts.Known).
func (m *Master) Told() bool { return m.st.told.Load() }

// The root package's tests of the lock logic over real masters look at, or
// move, what a master's wire holds through these; nothing else uses them.

// Queued returns how many requests wait in the master's lane.
func (m *Master) Queued() int {
	m.lane.mu.Lock()
	defer m.lane.mu.Unlock()
	return len(m.lane.queue)
}

// KeptInLane returns how many Releases the master's lane keeps that it has
// not handed to its transport yet.
func (m *Master) KeptInLane() int {
	m.lane.mu.Lock()
	defer m.lane.mu.Unlock()
	return len(m.lane.kept)
}

// KillAllowed reports whether the master lets this client kill
// connections: the barrier's permission (barrier.go).
func (m *Master) KillAllowed() bool { return m.st.killAllowed() }

// ShiftClock moves the master's clock offset by ms, as a step of the
// client's wall clock by -ms would: until the lane's next fresh
// connection, every Extend's bounds reach the master that far off.
func (m *Master) ShiftClock(ms int64) { m.st.clock.Add(ms) }

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
