package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A round is one op sent to several masters, and what they answered. The
// replies come back on one channel buffered to N, so no node ever blocks on
// a caller that has decided and gone. Rounds are pooled: a round goes back
// to the pool when its caller is done with it and every request sent with
// it has been answered (a straggler may answer long after the caller
// decided).
type round struct {
	replies chan reply
	refs    atomic.Int32 // the caller's, plus one per request not yet answered
	pool    *sync.Pool

	// The outcome, read and written by the caller only.
	nodes               []NodeError // Err nil: agreed; errNoReply: not answered (yet)
	vals                []int64     // fence counters of a fenced acquire
	ok, refused, failed int
	answered            uint64 // bit i: master i's reply was read

	// A failed attempt's undo (Client.undo), for the masters that had not
	// answered when its caller decided: the node that delivers such a
	// master's reply sends undoOp (a Release) there, unless the reply says
	// another owner holds the key. claimed has bit i once master i's undo
	// is someone's to send: the caller's or the delivering node's, never
	// both.
	undoing     atomic.Bool
	claimed     atomic.Uint64
	undoOp      op
	undoTimeout time.Duration
}

type reply struct {
	idx int
	val int64 // the fence counter, for opAcquireFenced
	err error // nil: agreed; ErrTaken or errAbsent: refused; else failed
}

// round takes a round from the pool, every master marked not answered.
func (c *Client) round() *round {
	rd := c.rounds.Get().(*round)
	rd.refs.Store(1)
	rd.ok, rd.refused, rd.failed, rd.answered = 0, 0, 0, 0
	for i, n := range c.nodes {
		rd.nodes[i] = NodeError{Addr: n.addr, Err: errNoReply}
		rd.vals[i] = 0
	}
	return rd
}

func (c *Client) newRound() any {
	n := len(c.nodes)
	return &round{replies: make(chan reply, n), pool: &c.rounds, nodes: make([]NodeError, n), vals: make([]int64, n)}
}

// done is the caller's release of the round.
func (rd *round) done() { rd.unref() }

func (rd *round) unref() {
	if rd.refs.Add(-1) == 0 {
		for len(rd.replies) > 0 {
			<-rd.replies
		}
		if rd.undoing.Load() { // only a failed attempt's round: the hot path resets nothing
			rd.undoing.Store(false)
			rd.claimed.Store(0)
			rd.undoOp = op{} // it holds the caller's context
		}
		rd.pool.Put(rd)
	}
}

// send sends o to master i on behalf of rd (nil: nobody waits).
func (c *Client) send(i int, o *op, rd *round) {
	r := c.requests.Get().(*request)
	r.op = *o
	r.idx, r.rd = i, rd
	if rd != nil {
		rd.refs.Add(1)
	}
	c.nodes[i].send(r)
}

// fanout sends o to every master at once and collects replies until the
// outcome is decided: a quorum agreed, or refusals and failures leave too
// few masters to reach one, or the deadline (capped at ctx's) passed, or
// ctx ended. Requests still in flight then finish in the background. The
// caller calls rd.done. timeout is the node timeout, for error messages.
func (c *Client) fanout(ctx context.Context, o op, deadline time.Time, timeout time.Duration) *round {
	return c.fanoutGated(ctx, o, deadline, timeout, -1)
}

// fanoutGated is fanout that, with gate >= 0, asks master gate first and
// the others only once it did not refuse; when it refuses, the others are
// marked errNotAsked. Contenders that all ask the same master first are
// told apart there, at the cost of a round trip: at N > 1 contenders that
// ask every master at once split the masters between them and nobody gets
// a quorum. Waiters woken by the same release use it (wake.go).
func (c *Client) fanoutGated(ctx context.Context, o op, deadline time.Time, timeout time.Duration, gate int) *round {
	rd := c.round()
	o.deadline = capDeadline(ctx, deadline)
	if o.kind != opRelease { // a Release goes out even when the caller gives up
		o.done = ctx.Done()
	}
	// On a single master whose client bounds reads by the deadline, the
	// request goes out on the caller's goroutine when the lane is idle, a
	// cancellable ctx too: a cancellation before it is sent drops it, and
	// one during its round trip is seen when the master answers or the
	// deadline (the node timeout at most) ends the read, as with a plain
	// go-redis call. Handing it to the lane's worker instead would cost
	// two goroutine wake-ups per round trip on every call made with a
	// request's context, to return sooner only from a master that stalls.
	o.inline = true
	o.vals = ctx
	pending := len(c.nodes)
	if gate >= 0 {
		c.send(gate, &o, rd)
		c.collect(ctx, rd, 1, o.deadline, timeout, false)
		pending--
	}
	if gate >= 0 && rd.nodes[gate].Err == ErrTaken {
		for i := range rd.nodes {
			if i != gate {
				rd.nodes[i].Err = errNotAsked
			}
		}
	} else {
		for i := range c.nodes {
			if i != gate {
				c.send(i, &o, rd)
			}
		}
		c.collect(ctx, rd, pending, o.deadline, timeout, true)
	}
	if c.cfg.obs != nil {
		c.health(ctx, rd)
	}
	return rd
}

// capDeadline returns the earlier of deadline and ctx's deadline.
func capDeadline(ctx context.Context, deadline time.Time) time.Time {
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		return d
	}
	return deadline
}

// collect reads up to pending replies into rd, and stops early when decided
// is set and the outcome is known (a quorum agreed, the lock is taken, or
// the masters are unavailable), or at the deadline, or when ctx ends; the
// masters still silent then get an error saying so.
func (c *Client) collect(ctx context.Context, rd *round, pending int, deadline time.Time, timeout time.Duration, decided bool) {
	n, q := len(c.nodes), c.quorum
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
			c.timers.Put(t)
		}
	}()
	for ; pending > 0; pending-- {
		// Decided: a quorum agreed; or other owners' refusals alone rule
		// one out (the lock is taken); or failures rule one out and the
		// masters still silent could not make it "taken" any more.
		if decided && (rd.ok >= q || rd.refused > n-q || (rd.refused+rd.failed > n-q && rd.refused+pending <= n-q)) {
			return
		}
		var r reply
		select {
		case r = <-rd.replies:
		default:
			if t == nil {
				t = c.timers.Get().(*time.Timer)
				t.Reset(time.Until(deadline))
			}
			select {
			case r = <-rd.replies:
			case <-t.C:
				if d, ok := ctx.Deadline(); ok && !d.After(deadline) {
					<-ctx.Done() // the caller's deadline: its own timer fires now
					rd.expire(context.Cause(ctx))
				} else {
					rd.expire(fmt.Errorf("timed out after %v: %w", timeout, context.DeadlineExceeded))
				}
				return
			case <-ctx.Done():
				rd.expire(context.Cause(ctx))
				return
			}
		}
		if r.err == errSkipped { // dropped because ctx ended: say why
			r.err = fmt.Errorf("%w (%w)", errNoReply, context.Cause(ctx))
		}
		rd.record(r)
	}
}

// record counts r in rd's outcome.
func (rd *round) record(r reply) {
	rd.nodes[r.idx].Err = r.err
	rd.vals[r.idx] = r.val
	rd.answered |= bit(r.idx)
	switch r.err {
	case nil:
		rd.ok++
	case ErrTaken, errAbsent:
		rd.refused++
	default:
		rd.failed++
	}
}

// claim reports whether the undo on master i is the caller's to send: no
// one claimed it before.
func (rd *round) claim(i int) bool {
	b := bit(i)
	for {
		c := rd.claimed.Load()
		if c&b != 0 {
			return false
		}
		if rd.claimed.CompareAndSwap(c, c|b) {
			return true
		}
	}
}

// expire marks every master that has not answered with err.
func (rd *round) expire(err error) {
	for i := range rd.nodes {
		if rd.nodes[i].Err == errNoReply {
			rd.nodes[i].Err = fmt.Errorf("%w (%w)", errNoReply, err)
		}
	}
}

// quorumError reports rd's outcome; kind is ErrNotObtained, ErrLockLost or
// nil.
func (c *Client) quorumError(op string, rd *round, kind error) *QuorumError {
	return &QuorumError{Op: op, Quorum: c.quorum, Nodes: slices.Clone(rd.nodes), kind: kind}
}

func (c *Client) initPools() {
	c.rounds.New = c.newRound
	c.requests.New = func() any { return new(request) }
	c.timers.New = func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}
}
