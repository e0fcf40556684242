package redlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wake"
	"github.com/redlock-go/redlock/internal/wire"
)

// Obtain takes the lock on key for ttl and returns it, or an error matching
// [ErrNotObtained] with each master's answer in a [*QuorumError], and one
// of the outcomes [ErrNotObtained] lists: taken ([ErrTaken]: other owners'
// refusals alone rule out a quorum), unavailable ([ErrUnavailable]: too
// few masters answered within the node timeout), ended by the caller (ctx
// ended first: the error matches its cause) or closed ([ErrClosed]).
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
// empty key, a TTL too short to keep validity past one request to a master
// (under 23ms with the default drift factor: the error names the least
// that works), a nil context, an option Obtain does not take) returns an
// error matching
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
	lock, n, rec, err := c.obtainLoop(ctx, key, ttl, oc)
	if lock != nil {
		lock.holdAtLeast = oc.holdAtLeast
	}
	if rec == nil { // no try succeeded: the answers are the error's
		rec = c.newObtainRec(nil)
		rec.ev.Masters = nodesOf(err)
	}
	e := &rec.ev
	e.Key, e.Attempts, e.Wait, e.Outcome, e.Err = key, n, time.Since(start), outcome(ctx, err, Obtained), err
	if lock != nil {
		e.Fence = lock.fence
	}
	c.observe(ctx, e)
	c.recycleObtain(rec)
	return lock, err
}

// obtainLoop makes the attempts; it returns the lock, how many attempts it
// made, and, with an Observer, the event to fill, with the winning
// attempt's answers.
func (c *Client) obtainLoop(ctx context.Context, key string, ttl time.Duration, oc obtainConfig) (_ *Lock, n int, _ *obtainRec, _ error) {
	if err := c.renewalsLate(); err != nil {
		return nil, 0, nil, err
	}
	if oc.wait {
		return c.obtainWait(ctx, key, ttl, oc.tokenTail)
	}
	var timer *time.Timer
	var last error
	for n = 1; ; n++ {
		lock, rec, err := c.attempt(ctx, key, ttl, oc.set, oc.tokenTail)
		if err == nil {
			return lock, n, rec, nil
		}
		// No wait follows the last attempt: its answers decided its one
		// outcome, which a cancel or a Close that came after them leaves
		// as it is (TestOneAttemptTakenStaysTakenWhenTheCallerEndsAfterTheAnswer).
		wait, ok := oc.retry.NextWait(n, err)
		if !ok {
			return nil, n, nil, err
		}
		if err := c.cutShort(ctx, err, last); err != nil {
			return nil, n, nil, err
		}
		last = err
		if d, has := ctx.Deadline(); has && time.Until(d) < wait {
			// The next attempt could not start before the deadline: the
			// wait ends with the context, whose cause is known only then.
			select {
			case <-ctx.Done():
				return nil, n, nil, wrapCause(err, endedBy(ctx))
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
			return nil, n, nil, wrapCause(err, endedBy(ctx))
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

// ended returns why ctx ended (endedBy), or nil. A deadline that has
// passed counts even before ctx's own timer has fired.
func ended(ctx context.Context) error {
	if ctx.Err() != nil {
		return endedBy(ctx)
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		<-ctx.Done() // its own timer fires now; its cause may be the caller's
		return endedBy(ctx)
	}
	return nil
}

// closedObtain turns ErrClosed, for an Obtain or a Do, into a failed
// Obtain that Close ended: it matches ErrNotObtained and ErrClosed, not
// ErrUnavailable (the masters did not fail; TestClosedObtainIsNotAnOutage).
func (c *Client) closedObtain(err error) error {
	if err != ErrClosed {
		return err
	}
	return c.unanswered("obtain", nil, ErrClosed, ErrNotObtained)
}

// unanswered is the error of a call that awaits no master's answer because
// its caller's context (cause: endedBy's, or an error wrapping the
// context's cause) or Close (ErrClosed) ended it: each master's is cause,
// and so is what ended the call, so the error matches neither ErrTaken nor
// ErrUnavailable. With o set, o still goes to every master first, nobody
// waiting for its replies (a Release's cleanup).
func (c *Client) unanswered(what string, o *wire.Op, cause, kind error) error {
	rd := c.round()
	defer rd.done()
	if o != nil {
		for i := range c.nodes {
			c.send(i, o, nil)
		}
	}
	rd.expire(cause)
	rd.ended = cause
	return c.quorumError(what, rd, kind)
}

// wrapCause adds to err, the last attempt's error, why the wait for the
// lock ended (the caller's context, or Close: ErrClosed), unless err
// already says it.
func wrapCause(err, cause error) error {
	said := cause
	if ce, ok := cause.(*callerEnded); ok {
		said = ce.cause
	}
	if errors.Is(err, said) {
		return err
	}
	if cause == ErrClosed {
		return fmt.Errorf("%w; then the %w", err, unprefixed{cause})
	}
	return fmt.Errorf("%w; then ended by the caller: %w", err, unprefixed{cause})
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
	return ttl, c.cfg.checkTTLFloor(ttl)
}

// attempt makes one try at the lock: on key, or, with set, on every key of
// the set at once (key is then its first), under a new token that ends
// with tail (newToken).
func (c *Client) attempt(ctx context.Context, key string, ttl time.Duration, set *keySet, tail string) (*Lock, *obtainRec, error) {
	l, res, err := c.try(ctx, tryArgs{key: key, ttl: ttl, set: set, token: newToken(tail), gate: -1})
	return l, res.rec, err
}

// tryArgs is what one try at a lock takes.
type tryArgs struct {
	key   string
	ttl   time.Duration
	set   *keySet // the keys of a lock on several (key is then its first); nil for one
	token string
	// turn, for one key only, is the Client's id and the turn queue to
	// carry (see wait.lua): the try also marks the key as waited for on
	// the masters that refuse and queues the Client there (internal/wake/turn.go). With
	// plain too (a waiter woken by its key's release, without fencing), it
	// sends a plain SET NX with the value wait.lua would set instead, one
	// command on the master where the script runs three, and queues
	// nobody when refused.
	turn  string
	plain bool
	gate  int // >= 0: ask that master first (fanoutGated); -1: all at once
}

// tried is what a failed try says beside its error: which masters it did
// not get (blocked, bit i for master i: refused, or no answer before the
// outcome was decided, which may be a refusal too), and how long until a
// quorum of the masters could be free (their keys' PTTL; see quorumFree),
// or about a node timeout when they did not say. With an Observer, a
// successful try's answers are in rec, its event to be.
type tried struct {
	rec     *obtainRec
	wait    time.Duration
	blocked uint64
}

// try makes one try at the lock with a.token, on a.key or a.set as attempt
// does, and as a.turn and a.gate say.
func (c *Client) try(ctx context.Context, a tryArgs) (*Lock, tried, error) {
	if ctx.Err() != nil {
		return nil, tried{}, c.unanswered("obtain", nil, endedBy(ctx), ErrNotObtained)
	}
	start := time.Now()
	ttl := a.ttl
	timeout := c.cfg.timeout(ttl)
	l := &Lock{c: c, key: a.key, token: a.token, obtained: start, set: a.set}
	l.ttl.Store(int64(ttl))
	var o wire.Op
	if a.set != nil {
		l.target = a.set.wire.Target(l.token)
		o = wire.Acquire(l.target, c.boxTTL(ttl), nil)
	} else {
		full, ckey := c.cfg.keyPrefix+a.key, ""
		if c.cfg.fencing {
			ckey = counterKey(full)
		}
		l.target = wire.NewTarget(full, ckey, l.token)
		switch {
		case a.turn != "" && !a.plain:
			o = wire.AcquireWait(l.target, c.boxTTL(ttl), a.turn)
		case len(a.turn) > wake.IDLen: // the value wait.lua would set
			o = wire.Acquire(l.target, c.boxTTL(ttl), l.token+wake.Mark+a.turn[wake.IDLen:])
		default:
			o = wire.Acquire(l.target, c.boxTTL(ttl), nil)
		}
	}
	gate := a.gate
	rd := c.fanoutGated(ctx, o, start.Add(timeout), timeout, gate)
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
			var res tried
			if c.cfg.obs != nil {
				res.rec = c.newObtainRec(rd.nodes)
			}
			return l, res, nil
		}
		lapsed = true
	}
	var res tried
	if gate >= 0 && rd.nodes[gate].Err == ErrTaken { // nobody else asked
		res.blocked = bit(gate)
		if pttl := rd.vals[gate]; pttl >= 0 {
			res.wait = time.Duration(pttl) * time.Millisecond
		} else { // a key without expiry (PTTL -1) says nothing of when it is free
			res.wait = jitter(timeout/2, timeout)
		}
	} else {
		var ok bool
		if res.wait, ok = c.quorumFree(rd); !ok {
			res.wait = jitter(timeout/2, timeout)
		}
		for i, n := range rd.nodes {
			if n.Err != nil && n.Err != errAbsent {
				res.blocked |= bit(i)
			}
		}
	}
	c.undo(ctx, rd, l.target, ttl, timeout)
	if lapsed {
		for i := range rd.nodes {
			if rd.nodes[i].Err == nil {
				rd.nodes[i].Err = errLapsed
			}
		}
	}
	if a.set != nil {
		a.set.blocked(rd)
	}
	return nil, res, c.quorumError("obtain", rd, ErrNotObtained)
}

var errLapsed = fmt.Errorf("redlock: acquired, but the attempt took longer than the validity: %w", context.DeadlineExceeded)

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

// undo releases a failed attempt's key, t acquired for ttl, on every
// master that did not answer "held by another owner": those that agreed,
// and those whose fate is unknown (a timeout, an error), whose SET may have
// landed or may land late. It waits only for the masters that agreed,
// which are alive; the others' releases finish in the background.
//
// A master that had not answered when the caller decided (a round decides
// at its quorum) gets its Release when its answer comes, from the round's
// delivery of it (round.Deliver), and none when that answer is a refusal:
// in a contended round most late answers are refusals, and a Release sent
// blindly to each would cost those masters a script per refused attempt.
// (TestUndoWaitsForTheLateAnswer)
func (c *Client) undo(ctx context.Context, rd *round, t wire.Target, ttl, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	// A kept undo is pointless once the key expired.
	o := wire.Release(t, nil, wire.ReleaseFacts{Stale: deadline.Add(2 * ttl)})
	o.Deadline, o.Vals = deadline, ctx
	rd.undoOp, rd.undoTimeout = o, timeout
	rd.undoing.Store(true) // from here on, a delivery of an answer may send its undo
	wait := c.round()
	defer wait.done()
	n := 0
	for len(rd.replies) > 0 { // answers that came after the decision: the caller's, not in its outcome
		r := <-rd.replies
		n += c.undoOn(rd, r.idx, r.err, true, &o, wait)
	}
	for i := range c.nodes {
		if rd.answered&bit(i) == 0 {
			continue // its delivery sends the undo when the answer comes, if needed
		}
		n += c.undoOn(rd, i, rd.nodes[i].Err, false, &o, wait)
	}
	c.collect(ctx, wait, n, o.Deadline, timeout, false)
}

// undoOn sends the undo o to master i, whose answer to the attempt was err
// (late: after the round decided), unless it is not needed or someone else
// sends it; it returns 1 when the caller waits for it on wait.
func (c *Client) undoOn(rd *round, i int, err error, late bool, o *wire.Op, wait *round) int {
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

// newToken returns a lock's token: 128 random bits from crypto/rand,
// URL-safe base64 (22 characters), followed by tail: "" or, with
// WithHolderInfo, the separator and the escaped info (holderTail).
func newToken(tail string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read aborts the program instead
	return base64.RawURLEncoding.EncodeToString(b[:]) + tail
}
