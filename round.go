package redlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// A round is one Op sent to several masters, and what they answered: the
// lock logic's side of the wire (internal/wire). Each master's wire hands
// its reply to the round (Deliver: a round is a wire.Sink), which puts it on
// one channel buffered to N, so no master ever blocks on a caller that has
// decided and gone. Rounds are pooled: a round goes back to the pool when
// its caller is done with it and every request sent with it has been
// answered (a straggler may answer long after the caller decided).
type round struct {
	c       *Client
	replies chan reply
	refs    atomic.Int32 // the caller's, plus one per request not yet answered
	pool    *sync.Pool

	// The outcome, read and written by the caller only.
	nodes               []NodeError // Err nil: agreed; errNoReply: not answered (yet)
	vals                []int64     // fence counters of a fenced acquire
	ok, refused, failed int
	answered            uint64 // bit i: master i's reply was read
	// ended is what ended the round before its answers decided it: the
	// caller's context (callerEnded) or Close (ErrClosed); nil when the
	// answers or the node timeout did.
	ended error
	// since is about when the round's requests went out (zero: none
	// did): the failures of its masters seen since are their causes.
	since time.Time

	// A failed attempt's undo (Client.undo), for the masters that had not
	// answered when its caller decided: the delivery of such a master's
	// reply (Deliver) sends undoOp (a Release) there, unless the reply says
	// another owner holds the key. claimed has bit i once master i's undo
	// is someone's to send: the caller's or the delivery's, never both.
	undoing     atomic.Bool
	claimed     atomic.Uint64
	undoOp      wire.Op
	undoTimeout time.Duration
}

type reply struct {
	idx int
	val int64 // the fence counter of a fenced acquire; what the kind answers
	err error // nil: agreed; ErrTaken or errAbsent: refused; else failed
}

// round takes a round from the pool, every master marked not answered.
func (c *Client) round() *round {
	rd := c.rounds.Get().(*round)
	rd.refs.Store(1)
	rd.ok, rd.refused, rd.failed, rd.answered, rd.ended, rd.since = 0, 0, 0, 0, nil, time.Time{}
	for i, n := range c.nodes {
		rd.nodes[i] = NodeError{Addr: n.addr, Err: errNoReply}
		rd.vals[i] = 0
	}
	return rd
}

func (c *Client) newRound() any {
	n := len(c.nodes)
	return &round{c: c, replies: make(chan reply, n), pool: &c.rounds, nodes: make([]NodeError, n), vals: make([]int64, n)}
}

// Deliver takes master rep.Idx's reply to a request sent with rd, on the
// goroutine that ran the request's lane. When rd's caller has given up on
// the answer of a failed attempt (rd.undoing), it sends the undo the reply
// calls for (TestUndoWaitsForTheLateAnswer).
func (rd *round) Deliver(rep wire.Reply) {
	c := rd.c
	err := c.replyErr(&rep)
	rd.replies <- reply{idx: rep.Idx, val: rep.Val, err: err}
	if rd.undoing.Load() && c.nodes[rep.Idx].undoNeeded(err, true) && rd.claim(rep.Idx) {
		c.sendUndo(rd, rep.Idx) // its caller has given up on this answer
	}
	rd.unref()
}

// replyErr is a master's reply as the lock logic reports it: the wire's
// refusal and closing are this package's ErrTaken and ErrClosed, and a
// grant too few replicas acknowledged is a *ReplicaError.
func (c *Client) replyErr(rep *wire.Reply) error {
	switch rep.Err {
	case nil:
		if rep.Acks.Asked {
			return ackResult(&rep.Acks, c.cfg.acks)
		}
		return nil
	case wire.ErrTaken:
		return ErrTaken
	case wire.ErrClosed:
		return ErrClosed
	}
	if errors.Is(rep.Err, os.ErrDeadlineExceeded) && !errors.Is(rep.Err, context.DeadlineExceeded) {
		return socketTimeout{rep.Err}
	}
	return rep.Err
}

// socketTimeout is a request whose read or write on the socket ran past its
// deadline (go-redis's "i/o timeout", on a client that bounds reads by the
// request's deadline): a timeout like any other, so it also matches
// context.DeadlineExceeded, as QuorumError's doc says of timeouts
// (TestSingleFrozenIsBounded).
type socketTimeout struct{ error }

func (e socketTimeout) Is(target error) bool { return target == context.DeadlineExceeded }
func (e socketTimeout) Unwrap() error        { return e.error }

// ackResult is the error of a grant whose WAIT answered a: nil when at
// least want replicas acknowledged it.
func ackResult(a *wire.Acks, want int) error {
	switch {
	case a.Err != nil:
		return &ReplicaError{Want: want, Timeout: a.Timeout, Err: a.Err}
	case a.Acked < int64(want):
		return &ReplicaError{Acked: int(a.Acked), Want: want, Timeout: a.Timeout}
	}
	return nil
}

// ranWithoutAcks reports whether err is a master's grant that too few
// replicas acknowledged, with a count from WAIT: the master ran the write
// and answered, so it is alive, and holds the key.
func ranWithoutAcks(err error) bool {
	var re *ReplicaError
	return errors.As(err, &re) && re.Err == nil // a fence raise wraps it
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
			rd.undoOp = wire.Op{} // it holds the caller's context
		}
		rd.pool.Put(rd)
	}
}

// send sends o to master i on behalf of rd (nil: nobody waits).
func (c *Client) send(i int, o *wire.Op, rd *round) {
	if rd == nil {
		c.nodes[i].Send(o, i, nil) // a nil *round would be a Sink that is not nil
		return
	}
	rd.refs.Add(1)
	c.nodes[i].Send(o, i, rd)
}

// sendUndo sends rd's undo to master i, on a deadline of its own.
func (c *Client) sendUndo(rd *round, i int) {
	o := rd.undoOp
	o.Deadline = time.Now().Add(rd.undoTimeout)
	c.nodes[i].Send(&o, i, nil)
}

// fanout sends o to every master at once and collects replies until the
// outcome is decided: a quorum agreed, or refusals and failures leave too
// few masters to reach one, or the deadline (capped at ctx's) passed, or
// ctx ended. Requests still in flight then finish in the background. The
// caller calls rd.done. timeout is the node timeout, for error messages.
func (c *Client) fanout(ctx context.Context, o wire.Op, deadline time.Time, timeout time.Duration) *round {
	return c.fanoutGated(ctx, o, deadline, timeout, -1)
}

// fanoutGated is fanout that, with gate >= 0, asks master gate first and
// the others only once it did not refuse; when it refuses, the others are
// marked errNotAsked. Contenders that all ask the same master first are
// told apart there, at the cost of a round trip: at N > 1 contenders that
// ask every master at once split the masters between them and nobody gets
// a quorum. Waiters woken by the same release use it (wait.go).
func (c *Client) fanoutGated(ctx context.Context, o wire.Op, deadline time.Time, timeout time.Duration, gate int) *round {
	if gate < 0 {
		rd := c.sendAll(ctx, o, deadline, true)
		c.readAll(ctx, rd, deadline, timeout)
		return rd
	}
	rd := c.open(ctx, &o, deadline, true)
	c.send(gate, &o, rd)
	c.collect(ctx, rd, 1, o.Deadline, timeout, false)
	if rd.nodes[gate].Err == ErrTaken {
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
		c.collect(ctx, rd, len(c.nodes)-1, o.Deadline, timeout, true)
	}
	if c.cfg.obs != nil {
		c.health(ctx, rd)
	}
	return rd
}

// open takes a round for o and sets o's deadline (capped at ctx's) and
// context.
func (c *Client) open(ctx context.Context, o *wire.Op, deadline time.Time, inline bool) *round {
	rd := c.round()
	// Read here, not derived from a deadline: a caller's deadline caps
	// o.Deadline, and an Extend's is the validity's end, either of which
	// would put since before the requests went out and blame a failure of
	// an earlier round (TestAnEarlierRefusalIsNotBlamedOnACallersShortDeadline).
	rd.since = time.Now()
	o.Deadline = capDeadline(ctx, deadline)
	if o.Kind() != wire.KindRelease { // a Release goes out even when the caller gives up
		o.Done = ctx.Done()
	}
	// With inline, on a single master whose client bounds reads by the
	// deadline, the request goes out on the caller's goroutine when the
	// lane is idle, a cancellable ctx too: a cancellation before it is
	// sent drops it, and one during its round trip is seen when the master
	// answers or the deadline (the node timeout at most) ends the read, as
	// with a plain go-redis call. Handing it to the lane's worker instead
	// would cost two goroutine wake-ups per round trip on every call made
	// with a request's context, to return sooner only from a master that
	// stalls. Without inline, the lane's worker sends it: for a caller
	// that sends many rounds before it reads any (the renewer's batches),
	// so that they leave in one batch per master.
	o.Inline = inline
	o.Vals = ctx
	if rc, ok := ctx.(*renewCtx); ok {
		o.Vals = rc.values // a straggler's request outlives the worker's use of rc
	}
	return rd
}

// sendAll sends o to every master at once, for readAll to read the
// answers.
func (c *Client) sendAll(ctx context.Context, o wire.Op, deadline time.Time, inline bool) *round {
	rd := c.open(ctx, &o, deadline, inline)
	for i := range c.nodes {
		c.send(i, &o, rd)
	}
	return rd
}

// readAll reads the answers to sendAll's round rd until the outcome is
// decided, as fanout does.
func (c *Client) readAll(ctx context.Context, rd *round, deadline time.Time, timeout time.Duration) {
	c.collect(ctx, rd, len(c.nodes), capDeadline(ctx, deadline), timeout, true)
	if c.cfg.obs != nil {
		c.health(ctx, rd)
	}
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
	if rd.since.IsZero() {
		// About when its requests went out, for a round fanoutGated did
		// not send (see quorumError); never later than that.
		rd.since = deadline.Add(-timeout)
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
			c.timers.Put(t)
		}
	}()
	for ; pending > 0; pending-- {
		if decided && c.decided(rd, pending) {
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
					rd.endedBy(ctx)
					rd.expire(context.Cause(ctx))
				} else {
					rd.expire(fmt.Errorf("timed out after %v: %w", timeout, context.DeadlineExceeded))
				}
				return
			case <-ctx.Done():
				rd.endedBy(ctx)
				rd.expire(context.Cause(ctx))
				return
			}
		}
		c.take(ctx, rd, r, deadline)
	}
}

// decided reports whether rd's outcome is known with pending masters not
// read yet: a quorum agreed; or other owners' refusals alone rule one out
// (the lock is taken); or failures rule one out and the masters still
// silent could not make it "taken" any more.
func (c *Client) decided(rd *round, pending int) bool {
	n, q := len(c.nodes), c.quorum
	return rd.ok >= q || rd.refused > n-q || (rd.refused+rd.failed > n-q && rd.refused+pending <= n-q)
}

// take records the reply r in rd.
func (c *Client) take(ctx context.Context, rd *round, r reply, deadline time.Time) {
	switch {
	case r.err == errSkipped: // dropped because ctx ended: say why
		r.err = fmt.Errorf("%w (%w)", errNoReply, context.Cause(ctx))
		rd.endedBy(ctx)
	case r.err != nil && rd.ended == nil && errors.Is(r.err, context.DeadlineExceeded): // a socket timeout too (replyErr)
		// A master's timeout at the caller's own deadline (shorter than
		// the node timeout) is the caller's doing, not the master's
		// (TestCallerDeadlineShorterThanTheNodeTimeoutIsTheCallers).
		if d, ok := ctx.Deadline(); ok && !d.After(deadline) && !time.Now().Before(d) {
			<-ctx.Done() // the caller's deadline has passed: its own timer fires now
			rd.endedBy(ctx)
		}
	}
	rd.record(r)
}

// poll is collect (decided set) that never waits, for a worker of the
// renewer reading the rounds of a batch of renewals as their answers come
// (renewer.go): it reads the replies that have arrived, and reports
// whether rd's outcome is decided, by them, by ctx's end (ctx has no
// deadline: a renewCtx), or by the deadline having passed at now.
// *pending counts the masters not read yet.
func (c *Client) poll(ctx context.Context, rd *round, pending *int, deadline time.Time, timeout time.Duration, now time.Time) bool {
	for ; *pending > 0; *pending-- {
		if c.decided(rd, *pending) {
			return true
		}
		select {
		case r := <-rd.replies:
			c.take(ctx, rd, r, deadline)
			continue
		default:
		}
		switch {
		case ctx.Err() != nil:
			rd.endedBy(ctx)
			rd.expire(context.Cause(ctx))
		case !now.Before(deadline):
			rd.expire(fmt.Errorf("timed out after %v: %w", timeout, context.DeadlineExceeded))
		default:
			return false
		}
		return true
	}
	return true
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
	case ErrClosed: // the Client is closing: Close ended the round, not the masters
		rd.failed++
		if rd.ended == nil {
			rd.ended = ErrClosed
		}
	default:
		rd.failed++
	}
}

// endedBy notes that ctx, which has ended, ended rd before its answers
// decided it: the caller's doing, not the masters'
// (TestCallerDeadlineShorterThanTheNodeTimeoutIsTheCallers).
func (rd *round) endedBy(ctx context.Context) {
	if rd.ended == nil {
		rd.ended = endedBy(ctx)
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
//
// A master that failed to answer in time (a timeout, no reply before the
// round decided, a request dropped in its queue) is named with the last
// failure its wire saw since the round's requests went out (a refused
// connection, a TLS handshake, WRONGPASS, LOADING: wire.Master.WithCause),
// so that the error says why, and errors.Is and errors.As reach the cause;
// only one seen since then, so that a failure of an earlier outage is not
// blamed. The round's own answers keep their identity: the undo and the
// waiters compare them. (TestRefusedMastersNameTheirCause)
func (c *Client) quorumError(op string, rd *round, kind error) *QuorumError {
	nodes := slices.Clone(rd.nodes)
	if !rd.since.IsZero() {
		for i := range nodes {
			if err := nodes[i].Err; err != nil && err != errLapsed && err != ErrTaken && err != errAbsent && err != errNotAsked {
				nodes[i].Err = c.nodes[i].WithCause(err, rd.since)
			}
		}
	}
	return &QuorumError{Op: op, Quorum: c.quorum, Nodes: nodes, kind: kind, ended: rd.ended}
}

func (c *Client) initPools() {
	c.rounds.New = c.newRound
	c.timers.New = func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}
}
