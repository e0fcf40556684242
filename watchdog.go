package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// Cluster, where it would take a connection per lock. Renewals of many locks held by one
// Client that fall due together share one pipeline per master.
// [WithMaxHold] caps the total hold time. Renewals are scheduled to end
// before the validity is down to the cancel margin.
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
	wctx, stop := l.keepAlive(ctx, ttl, oc, nil)
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
// [WithRenewEvery], [WithMaxHold] and [WithCancelMargin]. stop ends the renewals and returns
// once the watchdog's goroutine has ended; it does not release the lock,
// cancels the returned context, and is safe to call more than once. Call
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
	wctx, stop := l.keepAlive(ctx, ttl, oc, l.c.dos.Done)
	var once sync.Once
	return wctx, func() { once.Do(stop) }, nil
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
// no longer be trusted.
type watchdog struct {
	l       *Lock
	ttl     time.Duration
	every   time.Duration
	maxHold time.Duration
	margin  time.Duration // a renewal's time before the validity is down to tell
	tell    time.Duration // the cancel margin: the validity left when the work is told
	renewed time.Time     // the last good renewal, or the Obtain
	changed chan struct{} // the lock's validity changed
	lost    context.CancelCauseFunc
	base    context.Context // cancelled by stop: aborts a renewal in flight
	abort   context.CancelFunc
	done    chan struct{}
	unhold  func() // ends the Client's subscriptions for it (resets.go)
}

// keepAlive starts a watchdog that renews l for ttl at a time and tells
// the work when the validity is down to the cancel margin (oc.tell); exit, if not nil, runs when
// its goroutine ends.
func (l *Lock) keepAlive(ctx context.Context, ttl time.Duration, oc obtainConfig, exit func()) (context.Context, func()) {
	wctx, lost := context.WithCancelCause(ctx)
	w := &watchdog{l: l, ttl: ttl, every: oc.renewEvery, maxHold: oc.maxHold, tell: oc.tell, lost: lost, done: make(chan struct{}), renewed: l.obtained}
	if w.every == 0 {
		w.every = ttl / 3
	}
	w.margin = renewMargin(ttl, &l.c.cfg)
	ch := make(chan struct{}, 1)
	if !l.changed.CompareAndSwap(nil, &ch) {
		ch = *l.changed.Load() // another watchdog's: both follow it
	}
	w.changed = ch
	// Renewals carry the work's context values (a span), not its
	// cancellation: stop alone aborts one in flight.
	w.base, w.abort = context.WithCancel(context.WithoutCancel(ctx))
	w.unhold = l.c.hold(l.c.cfg.keyPrefix + l.key)
	go func() {
		if exit != nil {
			defer exit()
		}
		w.run(wctx.Done())
	}()
	return wctx, func() {
		w.abort()
		<-w.done
		lost(context.Canceled) // releases wctx's resources; a no-op if already cancelled
	}
}

// run renews until stop is called, the work context ends, or the lock can
// no longer be trusted. It never sleeps past the point where a renewal
// could still complete before the validity is down to the cancel margin,
// follows a validity that the caller's own Extend shortened, and tells the
// work when the validity is down to the margin (at its end for a margin of
// 0) whatever else holds the lock.
func (w *watchdog) run(workDone <-chan struct{}) {
	defer close(w.done)
	defer w.unhold()
	l, c := w.l, w.l.c
	d0 := w.wait(w.next(w.every))
	t := time.NewTimer(d0)
	defer t.Stop()
	due := time.Now().Add(d0) // when t fires, about
	arm := func(d time.Duration) {
		t.Reset(d)
		due = time.Now().Add(d)
	}
	// A master's connection reset renews at once, once per resetGap at
	// most (resets.go): kicked is when the last such renewal began, and
	// folded says that t now fires for one put off to the gap's end.
	reset := c.resetSignal()
	var kicked time.Time
	folded := false
	// fresh says that the validity came down to where it is without a
	// renewal of the watchdog's failing: at the start, and after the
	// caller's own Extend changed it (shorter, say). A validity down to the
	// cancel margin tells the work at once only when not fresh; a fresh one
	// gets a renewal first, given what is left of the validity
	// (TestWatchdogFollowsAShortenedValidity).
	fresh := true
	// again arms t after a renewal that could not run or failed: every/4
	// later, and within 4 x resetGap for one owed to a reset, which stays
	// owed; when the validity v is down to the cancel margin at the latest
	// (at its end while fresh).
	again := func(v time.Duration, owed bool) {
		d := w.every/4 + time.Millisecond
		if owed {
			d, folded = min(d, 4*resetGap), true
		}
		if v > w.tell || !fresh {
			v -= w.tell
		}
		arm(max(0, min(d, v)))
	}
	var capped <-chan time.Time
	if w.maxHold > 0 {
		ct := time.NewTimer(time.Until(l.obtained.Add(w.maxHold)))
		defer ct.Stop()
		capped = ct.C
	}
	var last error // the last renewal's error, while renewals fail
	for {
		byReset := false // this renewal is a reset's
		select {
		case <-w.base.Done():
			return
		case <-workDone:
			return
		case <-c.closing:
			w.lost(fmt.Errorf("%w: Close called while the lock was held", ErrClosed))
			return
		case <-capped:
			w.lose(MaxHold, fmt.Errorf("%w: held for the maximum of %v", ErrLockLost, w.maxHold))
			return
		case <-w.changed:
			// The validity changed under us: renew in time for the new
			// one, or for a reset's renewal put off, if that comes first.
			fresh = true
			if d := w.wait(w.next(w.every)); !folded || time.Until(due) > d {
				arm(d)
				folded = false
			}
			continue
		case <-reset:
			reset = c.resetSignal()
			if d := resetGap - time.Since(kicked); d > 0 {
				if time.Until(due) > d {
					arm(d)
					folded = true
				}
				continue
			}
			kicked, byReset, folded = time.Now(), true, false
		case <-t.C:
			if folded {
				kicked, folded, byReset = time.Now(), false, true
			}
		}
		if !l.mu.TryLock() {
			// An Extend or a Release of the caller's holds the lock: look
			// again soon, and at the validity's end at the latest, so the
			// work is told on time whatever that call does.
			if l.releasing.Load() {
				w.lost(errReleased)
				return
			}
			v := l.Validity()
			if v == 0 {
				w.loseAtZero(last)
				return
			}
			if v <= w.tell && !fresh {
				w.lose(RanOut, expiring(v, w.tell, last))
				return
			}
			// A reset's renewal stays owed: the caller's Extend may have
			// run before the reset, so its change of the validity does
			// not cover it.
			again(v, byReset)
			continue
		}
		// Decided under l.mu: a Release cannot be half done.
		if l.releasing.Load() {
			l.mu.Unlock()
			w.lost(errReleased)
			return
		}
		v := l.Validity()
		if v == 0 {
			l.mu.Unlock()
			w.loseAtZero(last)
			return
		}
		if v <= w.tell && !fresh {
			l.mu.Unlock()
			w.lose(RanOut, expiring(v, w.tell, last))
			return
		}
		// The renewal may not outlast the validity's way down to the
		// cancel margin (to its end while fresh): if it hangs, the work is
		// told then, not when the renewal gives up
		// (TestWorkIsToldTheMarginBeforeTheValidityEnds).
		limit := v - w.tell
		if limit <= 0 {
			limit = v
		}
		fresh = false
		rctx, cancel := context.WithTimeout(w.base, limit)
		l.renewing.Store(&cancel)
		err := l.extendLocked(rctx, w.ttl, true)
		l.renewing.Store(nil)
		l.mu.Unlock()
		cancel()
		select { // our own Extend's signal: no news
		case <-w.changed:
		default:
		}
		switch {
		case l.releasing.Load(): // a Release cut the renewal short, or followed it
			w.lost(errReleased)
			return
		case err == nil:
			last, w.renewed = nil, time.Now()
			arm(w.wait(w.next(w.every)))
		case errors.Is(err, ErrLockLost):
			w.lose(lostReason(err), err)
			return
		default:
			// Masters did not answer: retry sooner, and wake at the
			// validity's end at the latest. A renewal owed to a reset is
			// tried again soon, still owed: the master answered its
			// subscription again, and what failed now (a connection that
			// died with the old process) passes.
			last = err
			again(l.Validity(), byReset)
		}
	}
}

// wait caps d so that the renewal then still has its margin (a node
// timeout, a third of the validity at most) before the validity is down
// to the cancel margin.
func (w *watchdog) wait(d time.Duration) time.Duration {
	return max(0, min(d, w.l.Validity()-w.tell-w.margin))
}

// lose cancels the work of a lock lost with cause, and tells the Observer.
func (w *watchdog) lose(why LostReason, cause error) {
	if c := w.l.c; c.cfg.obs != nil {
		now := time.Now()
		c.observe(w.base, &LostEvent{Key: w.l.key, Reason: why, Cause: cause, Held: now.Sub(w.l.obtained), SinceRenewal: now.Sub(w.renewed)})
	}
	w.lost(cause)
}

// loseAtZero tells the work that the validity is 0: refused, when the
// holder's own Extend found the lock taken, else run out (last is the last
// failed renewal's error).
func (w *watchdog) loseAtZero(last error) {
	if err := w.l.refusal.Load(); err != nil {
		w.lose(Refused, *err)
		return
	}
	w.lose(RanOut, ranOut(last))
}

// lostReason tells a renewal refused by the masters (another owner, or the
// key gone from too many) from one that ran out of validity waiting for
// masters that did not answer.
func lostReason(err error) LostReason {
	var qe *QuorumError
	if errors.As(err, &qe) && qe.why == "" {
		return Refused
	}
	return RanOut
}

// errReleased is the cause of a watchdog's context when the caller released
// the lock before stopping the watchdog.
var errReleased = errors.New("redlock: lock released")

// ranOut says why the watchdog let the validity run out: renewals that
// failed with last, or none that completed in time.
func ranOut(last error) error {
	if last != nil {
		return fmt.Errorf("%w: renewals failed until the validity ran out: %w", ErrLockLost, unprefixed{last})
	}
	return fmt.Errorf("%w: the validity ran out before a renewal completed (was the process paused?)", ErrLockLost)
}

// next returns the wait before a renewal due in d, rounded down to a grid
// shared by every lock of the client, so renewals due at about the same time
// go out together and share one pipeline per master.
func (w *watchdog) next(d time.Duration) time.Duration {
	grid := min(d/8, 50*time.Millisecond)
	if grid <= 0 {
		return d
	}
	at := time.Since(w.l.c.epoch) + d
	return max(d-grid, at/grid*grid-time.Since(w.l.c.epoch))
}
