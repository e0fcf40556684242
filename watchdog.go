package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Do obtains the lock on key (retrying per opts), runs fn while a watchdog
// renews the lock, and releases it when fn returns, also when fn panics
// (then Do panics again with the same value). It is [Client.Obtain]
// followed by [Lock.Do]; use those two when fn needs the lock itself (its
// fence, token or validity).
//
// fn's context is cancelled, with a [context.Cause] matching [ErrLockLost],
// the moment the lock can no longer be trusted: a renewal is refused
// (another owner, or our token gone from more than N - quorum masters), or
// renewals keep failing until the validity left is down to the cancel
// margin ([WithCancelMargin]; default ttl/10, at most 10s), the time fn
// has to stop before another owner can take the lock; the cause then
// matches [ErrLockExpiring] as well. That cancellation
// happens on time even while a renewal hangs on a frozen master. fn should
// stop its work when its context is done, and check it before any write
// that must not overlap with another holder (and fence that write when
// correctness matters: a pause between the check and the write is not
// covered).
//
// The lock is renewed every ttl/3 ([WithRenewEvery] changes it), sooner
// after a failed renewal, and at once when a master's connection comes
// back after it broke (a restart, a failover: the master may have lost the
// key, and the renewal re-takes it or tells fn that another owner has it);
// for that the Client keeps a subscription to every master while a
// watchdog runs, the one its waiters use ([WithWait]); not to a Redis
// Cluster, where it would take a connection per lock. [WithMaxHold] caps
// the total hold time. Renewals are scheduled to end before the validity
// is down to the cancel margin.
//
// A held lock costs no goroutine: the Client runs the renewals of all its
// watchdogs from one timer, and those that fall due together share one
// pipeline per master. When more fall due than the Client can make in
// time, it renews in the order the locks' validity ends, tells an Observer
// ([BacklogEvent]), and with [WithRenewalBacklogLimit] refuses new locks
// meanwhile.
//
// Do returns fn's error. When the lock was lost while fn ran, or Release
// found it lost, the error also matches ErrLockLost. If the lock is not
// obtained, fn is not called and the error matches [ErrNotObtained] (and
// [ErrTaken] or [ErrUnavailable]). When [Client.Close] runs during Do, a
// wait for the lock ends and fn's context is cancelled, with errors
// matching [ErrClosed], and Close waits for Do to finish. No goroutine of
// Do outlives it but the Client's subscriptions to the masters, which
// linger 2s after their last user and end at Close at the latest.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...ObtainOption) error {
	ttl, err := c.check(ctx, key, ttl)
	if err != nil {
		return c.closedObtain(err)
	}
	return c.doOn(ctx, key, nil, 0, ttl, fn, opts)
}

// doOn is Do after the key's validation (with set, DoMulti after the set's:
// key is its first); use adds to what the options may apply to (forSet for
// DoMulti).
func (c *Client) doOn(ctx context.Context, key string, set *keySet, use optionUse, ttl time.Duration, fn func(ctx context.Context) error, opts []ObtainOption) error {
	if fn == nil {
		return invalid("nil fn")
	}
	oc, err := obtainOptions(opts, forObtain|forWatchdog|use)
	if err != nil {
		return err
	}
	oc.set = set
	if err := oc.checkWatchdog(ttl, &c.cfg); err != nil {
		return err
	}
	if !c.enter() {
		return c.closedObtain(ErrClosed)
	}
	defer c.dos.Done()
	lock, err := c.obtain(ctx, key, ttl, oc)
	if err != nil {
		return err
	}
	return lock.do(ctx, ttl, oc, fn)
}

// Do runs fn while a watchdog renews l, and releases l when fn returns,
// also when fn panics (then Do panics again with the same value): what
// [Client.Do] does once it holds the lock, for a lock from
// [Client.Obtain], so that fn can use it (pass [Lock.Fence] to the
// resource, say). fn's context, the renewals, [WithRenewEvery],
// [WithMaxHold], [WithCancelMargin], Close and the error returned are as
// for [Client.Do].
//
// Call it once per lock, from the goroutine that obtained it. When l's
// validity has already run out, or l was released, fn is not called and
// the error matches [ErrLockLost].
func (l *Lock) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...ObtainOption) error {
	if l == nil {
		return errNilLock("Do")
	}
	if ctx == nil {
		return invalid("nil context")
	}
	if fn == nil {
		return invalid("nil fn")
	}
	oc, err := obtainOptions(opts, forWatchdog)
	if err != nil {
		return err
	}
	ttl := time.Duration(l.ttl.Load())
	if err := oc.checkWatchdog(ttl, &l.c.cfg); err != nil {
		return err
	}
	if !l.c.enter() {
		return ErrClosed
	}
	defer l.c.dos.Done()
	if l.released.Load() || l.Validity() == 0 {
		return fmt.Errorf("%w: the lock was released or its validity ran out before Do", ErrLockLost)
	}
	return l.do(ctx, ttl, oc, fn)
}

// do runs fn under a watchdog renewing l for ttl at a time, that tells fn
// when the validity is down to the cancel margin (oc.tell), and releases l.
func (l *Lock) do(ctx context.Context, ttl time.Duration, oc obtainConfig, fn func(ctx context.Context) error) (err error) {
	wctx, stop := l.keepAlive(ctx, ttl, oc, false)
	defer func() {
		p := recover()
		stop()
		// The Release goes out even when ctx is done, and is waited for
		// no longer than ctx.
		rerr := l.release(ctx)
		if cause := context.Cause(wctx); errors.Is(cause, ErrLockLost) || errors.Is(cause, ErrClosed) {
			err = join(err, cause)
			if !errors.Is(err, ErrLockLost) && errors.Is(rerr, ErrLockLost) {
				err = join(err, rerr) // closed, and lost too (TestDoSaysLostWhenTheValidityEndedAfterClose)
			}
		} else if errors.Is(rerr, ErrLockLost) {
			// A release that merely failed to reach the masters is not
			// reported: fn succeeded and the keys expire with their TTL.
			err = join(err, rerr)
		}
		if p != nil {
			panic(p)
		}
	}()
	return fn(wctx)
}

func join(err, also error) error {
	if err == nil || errors.Is(err, also) {
		return also
	}
	return fmt.Errorf("%w (%w)", err, unprefixed{also})
}

// KeepAlive renews l in the background until stop is called, and returns a
// context derived from ctx that is cancelled, with a [context.Cause]
// matching [ErrLockLost], the moment the lock can no longer be trusted (see
// [Client.Do]). Use it when the lock outlives a function call; otherwise
// [Lock.Do] does the same and releases the lock for you. It takes
// [WithRenewEvery], [WithMaxHold] and [WithCancelMargin]. stop ends the
// renewals, aborting one in flight, and returns once the watchdog has
// ended; it does not release the lock, cancels the returned context, and is
// safe to call more than once. When ctx ends, the renewals end too, at the
// latest when the next falls due. Call
// stop, then [Lock.Release]; a Release while the watchdog runs also ends
// it, with a cause that does not match ErrLockLost. [Client.Close] ends the
// watchdog too (the context's cause then matches [ErrClosed]). Options that
// are not valid return an error matching [ErrInvalidArgument].
func (l *Lock) KeepAlive(ctx context.Context, opts ...ObtainOption) (context.Context, func(), error) {
	if l == nil {
		return nil, nil, errNilLock("KeepAlive")
	}
	if ctx == nil {
		return nil, nil, invalid("nil context")
	}
	oc, err := obtainOptions(opts, forWatchdog)
	if err != nil {
		return nil, nil, err
	}
	ttl := time.Duration(l.ttl.Load())
	if err := oc.checkWatchdog(ttl, &l.c.cfg); err != nil {
		return nil, nil, err
	}
	if !l.c.enter() {
		return nil, nil, ErrClosed
	}
	wctx, stop := l.keepAlive(ctx, ttl, oc, true)
	return wctx, stop, nil
}

// enter registers a Do or a watchdog, unless the client is closing.
func (c *Client) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.dos.Add(1)
	return true
}

// A watchdog renews one lock and cancels its work context when the lock can
// no longer be trusted. It has no goroutine: the Client's renewer runs its
// turns (renewer.go, renewal.go).
type watchdog struct {
	l       *Lock
	ttl     time.Duration
	every   time.Duration
	margin  time.Duration // a renewal's time before the validity is down to tell
	tell    time.Duration // the cancel margin: the validity left when the work is told
	capAt   time.Time     // when WithMaxHold ends the hold; zero without
	lost    context.CancelCauseFunc
	work    context.Context // the work's: once it is done, the watchdog ends at its next turn
	vals    context.Context // the work's values, without its cancellation: its renewals'
	done    sync.WaitGroup  // done once it has ended
	held    *waker          // its use of the Client's subscriptions (resets.go)
	sibling *watchdog       // the lock's next watchdog (Lock.dog)

	// Guarded by the renewer's mu, but for what the worker running its
	// turn owns (the schedule and the renewal's outcome: every field below
	// but slot, state, stopping, resetLate and gen).
	slot    *turn         // the worker's slot running its turn, in one
	due     time.Time     // when its next renewal is due
	sched   time.Duration // its next renewal's time on its schedule, ns since the epoch, before the grid (renewal.go)
	renewed time.Time     // the last good renewal, or the Obtain
	kicked  time.Time     // when the last renewal a reset made began
	last    error         // the last renewal's error, while renewals fail
	gen     uint32        // its live entry's in the heap that holds it (dogheap.go)
	refresh atomic.Bool   // the caller's Extend came during its turn: the next begins fresh
	state   dogState
	// stopping: stop came during its turn; resetLate: a master's reset
	// did; folded: due is a reset's renewal put off to the gap's end;
	// byReset: the renewal of its next turn is a reset's; keep: a
	// KeepAlive's, whose end is the Client's dos.Done.
	stopping, resetLate, folded, byReset, keep bool
	// fresh says that the validity came down to where it is without a
	// renewal of the watchdog's failing: at the start, and after the
	// caller's own Extend changed it (shorter, say). A validity down to the
	// cancel margin tells the work at once only when not fresh; a fresh one
	// gets a renewal first, given what is left of the validity
	// (TestWatchdogFollowsAShortenedValidity).
	fresh bool
}

// keepAlive starts a watchdog that renews l for ttl at a time and tells
// the work when the validity is down to the cancel margin (oc.tell); with
// keep (a KeepAlive's), its end is a call of the Client's dos.Done.
func (l *Lock) keepAlive(ctx context.Context, ttl time.Duration, oc obtainConfig, keep bool) (context.Context, func()) {
	wctx, lost := context.WithCancelCause(ctx)
	r := l.c.renewerOf()
	w := &watchdog{l: l, ttl: ttl, every: oc.renewEvery, tell: oc.tell, lost: lost, keep: keep, renewed: l.obtained, fresh: true}
	if w.every == 0 {
		w.every = ttl / 3
	}
	if oc.maxHold > 0 {
		w.capAt = l.obtained.Add(oc.maxHold)
	}
	w.margin = renewMargin(ttl, &l.c.cfg)
	w.work, w.vals = wctx, context.WithoutCancel(wctx)
	w.held = l.c.hold(l.c.cfg.keyPrefix + l.key)
	w.done.Add(1)
	now := time.Now()
	r.add(w, now, w.wait(now, w.next(now, w.every)))
	return wctx, func() {
		r.end(w)
		w.done.Wait()
		lost(context.Canceled) // releases wctx's resources; a no-op if already cancelled
	}
}

// ended runs once w has ended, outside the renewer's lock.
func (w *watchdog) ended() {
	w.l.c.unhold(w.held, w.l.c.cfg.keyPrefix+w.l.key)
	w.done.Done()
	if w.keep {
		w.l.c.dos.Done()
	}
}

// closed tells w's work that Close ended it.
func (w *watchdog) closed() {
	w.lost(fmt.Errorf("%w: Close called while the lock was held", ErrClosed))
}
