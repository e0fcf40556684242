// Package redlock provides distributed locks on Redis: the Redlock quorum
// lock over N independent masters ([New]) and a single-instance lock
// ([NewSingle]), behind one API.
//
// Both are efficiency locks. They make duplicate work rare (two replicas
// rebuilding the same cache entry, running the same job), they do not make
// it impossible: a holder that pauses past its lease (a GC pause, a frozen
// VM), a master that restarts without persistence, or a clock that jumps can
// let two holders overlap. When correctness depends on the lock, the resource
// must refuse a stale holder itself: check a fencing token ([WithFencing],
// [FencedWrite]), use a database constraint or a conditional update, or use
// a consensus store (etcd, ZooKeeper).
//
// # Which call
//
//   - [Client.Do] for most work: it obtains the lock, renews it while fn
//     runs, cancels fn's context the moment the lock can no longer be
//     trusted, and releases it when fn returns.
//   - [Client.Obtain], then [Lock.Do], when the work needs the lock itself:
//     its [Lock.Fence] for the resource, its token or validity.
//   - [Client.Obtain] and [Lock.Release] to try once and hold briefly,
//     within the TTL; [Lock.Extend] to ask for more time by hand.
//   - [Lock.KeepAlive] when the lock outlives a function call (a leader that
//     holds it until shutdown): stop it, then Release.
//   - [Client.ObtainMulti] and [Client.DoMulti] for several keys at once,
//     all or none (the two accounts of a transfer).
//   - [Client.Attach] to take over a lock held under a token elsewhere;
//     [Client.Inspect] to see who holds a key.
//
// A failed Obtain (or Do) matches [ErrNotObtained] and exactly one of
// [ErrTaken] (another owner holds it: skip the work) or [ErrUnavailable]
// (too few masters answered: an outage, not a reason to skip quietly). A
// lock lost while held matches [ErrLockLost]. Waits end with the context,
// whose cause the error wraps, and with [Client.Close].
//
// Locks are not reentrant: a second Obtain of a key by the same process,
// even the same goroutine, waits or fails like anyone else's. Each Obtain
// gets a fresh random token, and only the handle that holds it can extend or
// release the lock.
//
// A [Client] is safe for concurrent use by many goroutines; so is a [Lock].
// The package redlocktest runs a real Client over in-process masters, with
// the faults a test of your code needs.
package redlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Client takes locks on a set of masters. Create it with [New] or
// [NewSingle]; it is safe for concurrent use. Close it when done: it owns a
// few goroutines per master that send requests, and requests still in
// flight when a call returns finish in the background.
type Client struct {
	nodes  []*node
	quorum int
	cfg    config
	epoch  time.Time      // the monotonic origin of every Lock's validity
	wg     sync.WaitGroup // the nodes' workers

	closed   atomic.Bool
	mu       sync.Mutex     // orders Do's entry against Close
	dos      sync.WaitGroup // running Do calls and KeepAlive watchdogs
	closing  chan struct{}  // closed when Close starts
	finished chan struct{}  // closed when Close has finished

	sharded     bool   // a master shards keys by hash slot (Cluster, Ring)
	shardedMask uint64 // bit i: master i is a Redis Cluster (wake.go)

	wake   *waker // made by the first wait (wake.go); guarded by mu
	turnID string // this Client's id in the masters' turn queues (wake.go)

	resetMu sync.Mutex
	resets  chan struct{} // closed at a master's connection reset (resets.go)

	// Pools for the hot path; see round.go.
	rounds, requests, timers sync.Pool
	ttlBox                   atomic.Pointer[boxedTTL]
}

// New returns a Client for the Redlock algorithm over N independent masters:
// a lock is held when a quorum of N/2+1 masters granted it within its
// validity. Each master is any go-redis client: a standalone server, a
// Sentinel failover client or a whole Redis Cluster (not a *redis.Ring, whose
// keys move between shards). The masters must be independent (not replicas
// of each other) and distinct: two clients of one server and database are
// refused. New never closes them.
//
// What the library needs from the masters' clients:
//   - MaxRetries: -1. go-redis otherwise retries a command that timed out;
//     a retried acquire can find its own key and report the lock taken.
//   - ContextTimeoutEnabled: true, so that a request's deadline also bounds
//     its socket read. Without it the client's ReadTimeout does: calls still
//     return at their node timeout, but a frozen master holds its connection
//     that long, and requests behind it fail at once.
//   - Connections: the Client keeps one connection of each standalone
//     master's pool while it uses it: it gives it back after 15s without
//     requests (1s without the barrier below), and at once when the pool
//     has no idle connection left. A Cluster master uses its pool per
//     request. While it has waiters ([WithWait], [Client.WaitReleased]) or
//     watchdogs ([Client.Do], [Lock.KeepAlive]), the Client also keeps a
//     subscription (a connection of its own) to each master (on a Cluster,
//     one per key waited for, and none for watchdogs), and 2s after.
//   - A read timeout (go-redis's default will do): New refuses a client
//     with ReadTimeout -1 or -2, which would let a frozen master hold the
//     Client forever.
//   - Hooks run for every command the Client sends; a hook must not keep a
//     command after it returns (commands are reused).
//   - CLIENT INFO and CLIENT KILL allowed to the client's user (the
//     defaults): a connection given up with requests in flight is killed
//     before the next request of its lane goes out, so one lock's requests
//     keep their order. Without them, a late acquire can keep a released
//     key until its TTL (a late Extend can neither cut a lock nor revive
//     one; see [Lock.Extend]).
//
// The lock is an efficiency lock: it makes duplicate work rare, not
// impossible (see the package doc). Use fencing tokens checked by the
// resource, a constraint or a consensus store when correctness matters.
func New(masters []redis.UniversalClient, opts ...Option) (*Client, error) {
	if len(masters) == 0 {
		return nil, invalid("no masters")
	}
	if len(masters) > maxMasters {
		return nil, invalid("%d masters: at most %d (a quorum lock runs on 3, 5 or 7)", len(masters), maxMasters)
	}
	for i, m := range masters {
		if m == nil {
			return nil, invalid("master %d is nil", i)
		}
		if !boundedReads(m) {
			return nil, invalid("master %d: its client has no read timeout (ReadTimeout -1 or -2): a master that stops answering would hold the Client forever; give it one (go-redis's default will do)", i)
		}
		if _, ok := m.(*redis.Ring); ok {
			return nil, invalid("master %d is a *redis.Ring: a Ring moves keys between its shards when one leaves, which would hand a held lock's key to a shard that never saw it; use a Redis Cluster, or each shard as a master of its own", i)
		}
		for j := range i {
			if masters[j] == m {
				return nil, invalid("masters %d and %d are the same client", j, i)
			}
			if a, b := serverOf(masters[j]), serverOf(m); a != "" && a == b {
				return nil, invalid("masters %d and %d are clients of the same server (%s): a quorum needs independent masters", j, i, a)
			}
		}
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		o.apply(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.acks > 0 {
		for i, m := range masters {
			switch m.(type) {
			case *redis.Client:
			case *redis.ClusterClient:
				return nil, invalid("master %d is a Redis Cluster client: WithReplicaAcks needs its WAIT on the connection that carried the write, and go-redis sends a keyless WAIT of a Cluster pipeline to a shard of its own choosing, on a pooled connection", i)
			default:
				return nil, invalid("master %d: WithReplicaAcks needs a *redis.Client (standalone or Sentinel), whose connection the WAIT can share with the write; got %T", i, m)
			}
		}
	}
	c := &Client{quorum: len(masters)/2 + 1, cfg: cfg, epoch: time.Now(), closing: make(chan struct{}), finished: make(chan struct{}), turnID: newTurnID()}
	for i, m := range masters {
		if _, ok := m.(*redis.ClusterClient); ok {
			c.sharded = true
			c.shardedMask |= bit(i)
		}
		c.nodes = append(c.nodes, newNode(m, addrOf(m, i), len(masters) == 1, &c.cfg, &c.requests, &c.wg, func() { c.masterChanged(i) }))
	}
	c.initPools()
	return c, nil
}

// Close stops the client. Calls made after Close starts fail with
// [ErrClosed]. Running [Client.Do] calls and [Lock.KeepAlive] watchdogs see
// their work context cancelled with a cause matching ErrClosed; Close waits
// for each Do's fn to return and its lock to be released, then for the
// requests still in flight to finish or time out (a master that does not
// answer holds it for its client's ReadTimeout at most), and returns when
// every goroutine of the client has ended. It never closes the masters'
// clients. Close is idempotent; a Close called while another runs returns
// when that one does. Calling Close from a Do's fn deadlocks: Close waits
// for that Do.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed.Swap(true) {
		c.mu.Unlock()
		<-c.finished
		return nil
	}
	close(c.closing)
	w := c.wake
	c.mu.Unlock()
	c.dos.Wait()
	if w != nil {
		w.stop()
	}
	for _, n := range c.nodes {
		n.close()
	}
	c.wg.Wait()
	close(c.finished)
	return nil
}

// Obtain takes the lock on key for ttl and returns it, or an error matching
// [ErrNotObtained] and exactly one of [ErrTaken] (other owners' refusals
// alone rule out a quorum) or [ErrUnavailable] (too few masters answered),
// with each master's answer in a [*QuorumError].
//
// Each attempt sends the acquire to every master at once and decides as
// soon as a quorum has granted it or the outcome is otherwise known; the
// lock's validity is ttl minus the time the attempt took minus the drift
// allowance. A failed attempt releases the key on every master that did not
// answer "held by another owner". Further attempts follow [WithRetry]
// (default: one attempt); the wait ends with ctx, with its cause wrapped in
// the error, and with [Client.Close] (the error then matches [ErrClosed]).
// When ctx cut the last attempt short, the error is the one before's, which
// says more (who holds the lock).
//
// A TTL with a fraction of a millisecond is rounded up. Invalid input (an
// empty key, a TTL under 1 ms or not above the drift allowance, a nil
// context, an option Obtain does not take) returns an error matching
// [ErrInvalidArgument] before any request is sent.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...ObtainOption) (*Lock, error) {
	ttl, err := c.check(ctx, key, ttl)
	if err != nil {
		return nil, c.closedObtain(err)
	}
	oc, err := obtainOptions(opts, forObtain)
	if err != nil {
		return nil, err
	}
	return c.obtain(ctx, key, ttl, oc)
}

// obtain is Obtain after validation.
func (c *Client) obtain(ctx context.Context, key string, ttl time.Duration, oc obtainConfig) (*Lock, error) {
	if c.cfg.obs == nil {
		lock, _, _, err := c.obtainLoop(ctx, key, ttl, oc)
		if lock != nil {
			lock.holdAtLeast = oc.holdAtLeast
		}
		return lock, err
	}
	start := time.Now()
	lock, n, nodes, err := c.obtainLoop(ctx, key, ttl, oc)
	if lock != nil {
		lock.holdAtLeast = oc.holdAtLeast
	}
	e := &ObtainEvent{Key: key, Attempts: n, Wait: time.Since(start), Outcome: outcome(ctx, err, Obtained), Masters: nodes, Err: err}
	if lock != nil {
		e.Fence = lock.fence
	} else {
		e.Masters = nodesOf(err)
	}
	c.observe(ctx, e)
	return lock, err
}

// obtainLoop makes the attempts; it returns the lock, how many attempts it
// made, and, with an Observer, the winning attempt's answers.
func (c *Client) obtainLoop(ctx context.Context, key string, ttl time.Duration, oc obtainConfig) (_ *Lock, n int, _ []NodeError, _ error) {
	if oc.wait {
		return c.obtainWait(ctx, key, ttl)
	}
	var timer *time.Timer
	var last error
	for n = 1; ; n++ {
		lock, nodes, err := c.attempt(ctx, key, ttl, oc.set)
		if err == nil {
			return lock, n, nodes, nil
		}
		if err := c.cutShort(ctx, err, last); err != nil {
			return nil, n, nil, err
		}
		last = err
		wait, ok := oc.retry.NextWait(n, err)
		if !ok {
			return nil, n, nil, err
		}
		if d, has := ctx.Deadline(); has && time.Until(d) < wait {
			// The next attempt could not start before the deadline: the
			// wait ends with the context, whose cause is known only then.
			select {
			case <-ctx.Done():
				return nil, n, nil, wrapCause(err, context.Cause(ctx))
			case <-c.closing:
				return nil, n, nil, wrapCause(err, ErrClosed)
			}
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return nil, n, nil, wrapCause(err, context.Cause(ctx))
		case <-c.closing:
			return nil, n, nil, wrapCause(err, ErrClosed)
		case <-timer.C:
		}
	}
}

// cutShort returns, when ctx has ended or the Client is closing, the error
// a waiting Obtain ends with after its attempt failed with err (last: the
// attempt before's error); nil while the wait goes on.
func (c *Client) cutShort(ctx context.Context, err, last error) error {
	cause := ended(ctx)
	if cause == nil && !c.closed.Load() {
		return nil
	}
	if last != nil && !errors.Is(err, ErrTaken) {
		// The context or Close cut this attempt short: the one before
		// says more (who holds the lock).
		err = last
	}
	if cause != nil {
		return wrapCause(err, cause)
	}
	return wrapCause(err, ErrClosed)
}

// ended returns why ctx ended, or nil. A deadline that has passed counts
// even before ctx's own timer has fired.
func ended(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		<-ctx.Done() // its own timer fires now; its cause may be the caller's
		return context.Cause(ctx)
	}
	return nil
}

// closedObtain turns ErrClosed, for an Obtain or a Do, into a failed
// Obtain: the masters are not reachable through a closed Client
// (ErrUnavailable), and the error matches ErrClosed.
func (c *Client) closedObtain(err error) error {
	if err != ErrClosed {
		return err
	}
	return c.unanswered("obtain", nil, ErrClosed, ErrNotObtained)
}

// unanswered is the error of a call that awaits no master's answer: each
// master's is cause. With o set, o still goes to every master first,
// nobody waiting for its replies (a Release's cleanup).
func (c *Client) unanswered(what string, o *op, cause, kind error) error {
	rd := c.round()
	defer rd.done()
	if o != nil {
		for i := range c.nodes {
			c.send(i, o, nil)
		}
	}
	rd.expire(cause)
	return c.quorumError(what, rd, kind)
}

// wrapCause adds to err why the wait for the lock ended, unless err
// already says it.
func wrapCause(err, cause error) error {
	if errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w: %w", err, unprefixed{cause})
}

// check validates what every lock operation takes, and rounds ttl up to a
// whole millisecond.
func (c *Client) check(ctx context.Context, key string, ttl time.Duration) (time.Duration, error) {
	if ctx == nil {
		return 0, invalid("nil context")
	}
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	ttl, err := c.checkTTL(ttl)
	if err != nil {
		return 0, err
	}
	if c.cfg.acks > 0 {
		if err := c.cfg.checkAcks(ttl); err != nil {
			return 0, err
		}
	}
	if c.closed.Load() {
		return 0, ErrClosed
	}
	return ttl, nil
}

// checkKey validates one lock key.
func (c *Client) checkKey(key string) error {
	if key == "" {
		return invalid("empty key")
	}
	if c.cfg.fencing && c.sharded && !hasTag(c.cfg.keyPrefix+key) && strings.IndexByte(c.cfg.keyPrefix+key, '}') >= 0 {
		return invalid("with fencing on a Redis Cluster, key %q (prefix included) contains '}' without a hash tag, so its fence counter cannot share its slot; put a hash tag in it, like {%s}", c.cfg.keyPrefix+key, key)
	}
	return nil
}

func (c *Client) checkTTL(ttl time.Duration) (time.Duration, error) {
	if ttl < time.Millisecond {
		return 0, invalid("ttl must be at least 1ms, got %v", ttl)
	}
	if r := ttl % time.Millisecond; r != 0 {
		ttl += time.Millisecond - r
	}
	if d := c.cfg.drift(ttl); ttl <= d {
		return 0, invalid("ttl %v leaves no validity after the drift allowance of %v", ttl, d)
	}
	return ttl, nil
}

// attempt makes one try at the lock: on key, or, with set, on every key of
// the set at once (key is then its first).
func (c *Client) attempt(ctx context.Context, key string, ttl time.Duration, set *keySet) (*Lock, []NodeError, error) {
	l, nodes, _, _, err := c.try(ctx, key, ttl, set, newToken(), "", false, -1)
	return l, nodes, err
}

// try makes one try at the lock with token, on key or on set as attempt
// does; with a turn (one key only: the Client's id and the turn queue
// to carry, see waitScript), it also marks the key as waited for on the
// masters that refuse and queues the Client there (wake.go); with plain
// too (a waiter woken by its key's release, without fencing), it sends a
// plain SET NX with the value waitScript would set instead, one command on
// the master where the script runs three, and queues nobody when refused.
// A failed try says which
// masters it did not get (blocked, bit i for master i: refused, or no
// answer before the outcome was decided, which may be a refusal too) and
// how long until a quorum of the masters could be free (their keys' PTTL;
// see quorumFree), or about a node timeout when they did not say. With
// gate >= 0 it asks that master first (fanoutGated).
func (c *Client) try(ctx context.Context, key string, ttl time.Duration, set *keySet, token string, turn string, plain bool, gate int) (_ *Lock, _ []NodeError, wait time.Duration, blocked uint64, _ error) {
	if ctx.Err() != nil {
		return nil, nil, 0, 0, c.unanswered("obtain", nil, context.Cause(ctx), ErrNotObtained)
	}
	start := time.Now()
	timeout := c.cfg.timeout(ttl)
	l := &Lock{c: c, key: key, token: token, obtained: start}
	l.ttl.Store(int64(ttl))
	if set != nil {
		l.op = set.acquire(l.token, c.boxTTL(ttl))
	} else {
		full, kind, ckey := c.cfg.keyPrefix+key, opAcquire, ""
		if c.cfg.fencing {
			kind, ckey = opAcquireFenced, counterKey(full)
		}
		script := turn != "" && !plain
		if script {
			kind = opAcquireWait
		}
		l.op = c.newOp(kind, full, ckey, l.token).with(kind, c.boxTTL(ttl), 0)
		switch {
		case script:
			l.op.turn = turn
		case len(turn) > turnIDLen: // the value waitScript would set
			l.op.turn = l.token + waitMark + turn[turnIDLen:]
		}
	}
	rd := c.fanoutGated(ctx, l.op, start.Add(timeout), timeout, gate)
	defer rd.done()
	if c.cfg.fencing && rd.ok >= c.quorum {
		l.fence = c.raise(ctx, rd, l, timeout)
	}
	lapsed := false
	if rd.ok >= c.quorum {
		valid := ttl - c.cfg.drift(ttl)
		if time.Since(start) < valid { // one monotonic clock reading, where time.Now takes two
			l.until.Store(int64(start.Add(valid).Sub(c.epoch)))
			l.known = c.told()
			var nodes []NodeError
			if c.cfg.obs != nil {
				nodes = slices.Clone(rd.nodes)
			}
			return l, nodes, 0, 0, nil
		}
		lapsed = true
	}
	if gate >= 0 && rd.nodes[gate].Err == ErrTaken { // nobody else asked
		blocked = bit(gate)
		if pttl := rd.vals[gate]; pttl >= 0 {
			wait = time.Duration(pttl) * time.Millisecond
		} else { // a key without expiry (PTTL -1) says nothing of when it is free
			wait = jitter(timeout/2, timeout)
		}
	} else {
		var ok bool
		if wait, ok = c.quorumFree(rd); !ok {
			wait = jitter(timeout/2, timeout)
		}
		for i, n := range rd.nodes {
			if n.Err != nil && n.Err != errAbsent {
				blocked |= bit(i)
			}
		}
	}
	c.undo(ctx, rd, l.op, timeout)
	if lapsed {
		for i := range rd.nodes {
			if rd.nodes[i].Err == nil {
				rd.nodes[i].Err = errLapsed
			}
		}
	}
	if set != nil {
		set.blocked(rd)
	}
	return nil, nil, wait, blocked, c.quorumError("obtain", rd, ErrNotObtained)
}

var errLapsed = fmt.Errorf("redlock: acquired, but the attempt took longer than the validity: %w", context.DeadlineExceeded)

// told returns the masters (bit i) that answered the run_id question
// (node.told): a lock obtained now can tell their restarts since.
func (c *Client) told() uint64 {
	var m uint64
	for i, n := range c.nodes {
		if n.told.Load() {
			m |= bit(i)
		}
	}
	return m
}

// boxTTL returns ttl in milliseconds as a command argument. Boxing an
// int64 allocates; most callers use one TTL, so the last box is kept.
func (c *Client) boxTTL(ttl time.Duration) any {
	ms := ttl.Milliseconds()
	if b := c.ttlBox.Load(); b != nil && b.ms == ms {
		return b.arg
	}
	b := &boxedTTL{ms: ms, arg: ms}
	c.ttlBox.Store(b)
	return b.arg
}

type boxedTTL struct {
	ms  int64
	arg any
}

// undo releases a failed attempt's key on every master that did not answer
// "held by another owner": those that agreed, and those whose fate is
// unknown (a timeout, an error), whose SET may have landed or may land late.
// It waits only for the masters that agreed, which are alive; the others'
// releases finish in the background.
//
// A master that had not answered when the caller decided (a round decides
// at its quorum) gets its Release when its answer comes, from the node that
// delivers it, and none when that answer is a refusal: in a contended round
// most late answers are refusals, and a Release sent blindly to each would
// cost those masters a script per refused attempt.
// (TestUndoWaitsForTheLateAnswer)
func (c *Client) undo(ctx context.Context, rd *round, acquire op, timeout time.Duration) {
	o := acquire.with(opRelease, nil, 0)
	o.deadline, o.vals = time.Now().Add(timeout), ctx
	if ms, ok := acquire.ttl.(int64); ok { // a kept undo is pointless once the key expired
		o.stale = o.deadline.Add(2 * time.Duration(ms) * time.Millisecond)
	}
	rd.undoOp, rd.undoTimeout = o, timeout
	rd.undoing.Store(true) // from here on, a node that delivers an answer may send its undo
	wait := c.round()
	defer wait.done()
	n := 0
	for len(rd.replies) > 0 { // answers that came after the decision: the caller's, not in its outcome
		r := <-rd.replies
		n += c.undoOn(rd, r.idx, r.err, true, &o, wait)
	}
	for i := range c.nodes {
		if rd.answered&bit(i) == 0 {
			continue // its node sends the undo when the answer comes, if needed
		}
		n += c.undoOn(rd, i, rd.nodes[i].Err, false, &o, wait)
	}
	c.collect(ctx, wait, n, o.deadline, timeout, false)
}

// undoOn sends the undo o to master i, whose answer to the attempt was err
// (late: after the round decided), unless it is not needed or someone else
// sends it; it returns 1 when the caller waits for it on wait.
func (c *Client) undoOn(rd *round, i int, err error, late bool, o *op, wait *round) int {
	switch {
	case !c.nodes[i].undoNeeded(err, late):
	case !rd.claim(i):
	case err == nil || err == errAbsent || ranWithoutAcks(err): // answered promptly: alive
		c.send(i, o, wait)
		return 1
	default:
		c.send(i, o, nil)
	}
	return 0
}

// ranWithoutAcks reports whether err is a master's grant that too few
// replicas acknowledged, with a count from WAIT: the master ran the write
// and answered, so it is alive, and holds the key.
func ranWithoutAcks(err error) bool {
	var re *ReplicaError
	return errors.As(err, &re) && re.Err == nil // a fence raise wraps it
}

// boundedReads reports whether rdb's socket reads time out. go-redis keeps
// ReadTimeout 0 for "-1, no timeout" and -1 for "-2, no deadline at all".
func boundedReads(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout > 0
	case *redis.ClusterClient:
		return c.Options().ReadTimeout > 0
	}
	return true
}

// serverOf names the server behind a standalone client, by address and
// database, for telling duplicate masters apart; "" when it cannot tell (a
// Sentinel or Cluster client).
func serverOf(rdb redis.UniversalClient) string {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return ""
	}
	o := c.Options()
	if o.Addr == "" || o.Addr == "FailoverClient" {
		return ""
	}
	addr := o.Addr
	if host, port, err := net.SplitHostPort(addr); err == nil {
		// The loopback's names are one server; other aliases (DNS names,
		// several addresses of one host) New cannot see without asking.
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			addr = net.JoinHostPort("loopback", port)
		}
	}
	return fmt.Sprintf("%s %s db %d", o.Network, addr, o.DB)
}

// newToken returns 128 random bits from crypto/rand, URL-safe base64.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read aborts the program instead
	return base64.RawURLEncoding.EncodeToString(b[:])
}
