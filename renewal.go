package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// A watchdog's turn, run by a worker of the Client's renewer when its
// renewal is due: it renews the lock, or tells the work that the lock can
// no longer be trusted, and arms the next turn. It never lets a renewal
// run past the point where the validity is down to the cancel margin,
// follows a validity that the caller's own Extend shortened, and tells the
// work when the validity is down to the margin (at its end for a margin of
// 0) whatever else holds the lock.
//
// A turn is two halves, so that a worker sends the renewals of a batch of
// watchdogs before it reads their answers, and they leave in one batch per
// master: begin sends the renewal (holding l.mu until complete), or ends
// the turn at once when there is none to send.
type turn struct {
	w    *watchdog
	x    extension
	rc   renewCtx
	owed bool // the renewal is a reset's
}

// begin starts w's turn at now: sends its renewal into t and reports true,
// for poll and complete to read; or ends the turn and reports false.
func (t *turn) begin(now time.Time) bool {
	w := t.w
	l, r := w.l, w.l.c.renewerOf()
	if w.work.Err() != nil { // the work ended, or was told of a loss
		r.finish(w)
		return false
	}
	if !w.capAt.IsZero() && !now.Before(w.capAt) {
		w.lose(MaxHold, fmt.Errorf("%w: held for the maximum of %v", ErrLockLost, w.capAt.Sub(l.obtained)))
		r.finish(w)
		return false
	}
	if l.c.closed.Load() {
		w.closed()
		r.finish(w)
		return false
	}
	t.owed, w.byReset = w.byReset, false
	if w.refresh.Swap(false) {
		w.fresh = true
	}
	if !l.mu.TryLock() {
		// An Extend or a Release of the caller's holds the lock: look
		// again soon, and at the validity's end at the latest, so the
		// work is told on time whatever that call does.
		if !w.check(l.releasing.Load(), l.Validity()) {
			r.finish(w)
			return false
		}
		// A reset's renewal stays owed: the caller's Extend may have
		// run before the reset, so its change of the validity does not
		// cover it.
		w.again(l.Validity(), t.owed)
		r.rearm(w)
		return false
	}
	// Decided under l.mu: a Release cannot be half done.
	v := l.validityAt(now)
	if !w.check(l.releasing.Load(), v) {
		l.mu.Unlock()
		r.finish(w)
		return false
	}
	// The renewal may not outlast the validity's way down to the cancel
	// margin (to its end while fresh): if it hangs, the work is told then,
	// not when the renewal gives up
	// (TestWorkIsToldTheMarginBeforeTheValidityEnds).
	limit := v - w.tell
	if limit <= 0 {
		limit = v
	}
	w.fresh = false
	l.sendExtend(&t.rc, now, w.ttl, w, now.Add(limit), &t.x)
	return true
}

// poll reads the answers to t's renewal that have arrived, and reports
// whether complete may run without waiting.
func (t *turn) poll(now time.Time) bool { return t.w.l.pollExtend(&t.rc, &t.x, now) }

// read records rep, an answer to t's renewal its worker waited for.
func (t *turn) read(rep reply) {
	t.w.l.c.take(&t.rc, t.x.rd, rep, t.x.dl)
	t.x.pending--
}

// complete ends the turn begin sent a renewal for: reads its answers, and
// arms w's next turn, for its worker to put it back to wait (reports
// true), or ends it.
func (t *turn) complete() bool {
	w := t.w
	l, r := w.l, w.l.c.renewerOf()
	err := l.readExtend(&t.rc, &t.x)
	l.mu.Unlock()
	switch {
	case l.releasing.Load(): // a Release cut the renewal short, or followed it
		w.lost(errReleased)
		r.finish(w)
		return false
	case err == nil:
		now := t.x.end
		w.last, w.renewed = nil, now
		w.arm(now, w.wait(now, w.following(now, w.every)))
	case errors.Is(err, ErrLockLost):
		w.lose(lostReason(err), err)
		r.finish(w)
		return false
	default:
		// Masters did not answer: retry sooner, and wake at the validity's
		// end at the latest. A renewal owed to a reset is tried again soon,
		// still owed: the master answered its subscription again, and what
		// failed now (a connection that died with the old process) passes.
		w.last = err
		w.again(l.Validity(), t.owed)
	}
	return true
}

// check tells the work, and reports false, when the lock is released
// (releasing), its validity v is 0, or v is down to the cancel margin
// after a renewal of the watchdog's failed.
func (w *watchdog) check(releasing bool, v time.Duration) bool {
	switch {
	case releasing:
		w.lost(errReleased)
	case v == 0:
		w.loseAtZero()
	case v <= w.tell && !w.fresh:
		w.lose(RanOut, expiring(v, w.tell, w.last))
	default:
		return true
	}
	return false
}

// arm sets w's next renewal due d after now.
func (w *watchdog) arm(now time.Time, d time.Duration) { w.due = now.Add(d) }

// lateAt returns how long past its time w's renewal is at now, for the
// backlog (BacklogEvent, WithRenewalBacklogLimit): past its due time, or,
// when due is on the grid (its time on the schedule rounded down to the
// grid step g), past due + g, before which its time on the schedule is,
// but no later than the last moment the renewal can begin with its whole
// margin (wait's cap). The renewals of many locks due at one grid point go
// out over the time the Client takes to send them all: they are on time
// while that ends before the next grid point, the Client keeping up with
// them (TestARenewalBurstWithinItsGridStepIsNotABacklog); and a renewal
// that waits into its margin is late, whatever the grid step, so a
// backlog is told before its lock is given up
// (TestABacklogIsToldBeforeALockIsGivenUp). The first renewal is on the
// grid as the others are (TestTheFirstRenewalAfterKeepAliveIsOnTheGrid).
func (w *watchdog) lateAt(now time.Time) time.Duration {
	due := w.due
	if g := renewGrid(w.every); g > 0 && due.Sub(w.l.c.epoch) == w.sched/g*g {
		due = due.Add(max(0, min(g, w.leeway(due))))
	}
	return now.Sub(due)
}

// wakeAt is when w's next turn is: its renewal, or WithMaxHold's end.
func (w *watchdog) wakeAt() time.Time {
	if !w.capAt.IsZero() && w.capAt.Before(w.due) {
		return w.capAt
	}
	return w.due
}

// again arms w after a renewal that could not run or failed: every/4 later,
// and within 4 x resetGap for one owed to a reset, which stays owed; when
// the validity v is down to the cancel margin at the latest (at its end
// while fresh).
func (w *watchdog) again(v time.Duration, owed bool) {
	d := w.every/4 + time.Millisecond
	if owed {
		d, w.folded = min(d, 4*resetGap), true
	}
	if v > w.tell || !w.fresh {
		v -= w.tell
	}
	w.arm(time.Now(), max(0, min(d, v)))
}

// wait caps d so that the renewal then still has its margin (a node
// timeout, a third of the validity at most) before the validity is down
// to the cancel margin.
func (w *watchdog) wait(now time.Time, d time.Duration) time.Duration {
	return max(0, min(d, w.leeway(now)))
}

// leeway is the time from at to the last moment a renewal can begin with
// its whole margin before the validity is down to the cancel margin;
// negative past it.
func (w *watchdog) leeway(at time.Time) time.Duration {
	return w.l.validityAt(at) - w.tell - w.margin
}

// The renewal grid. A watchdog's renewals fall on a grid of times (since
// the Client's epoch) so that those of many locks due at about the same
// time go out together, one pipeline per master, and the Client's renewals
// come in few bursts: each burst has a fixed cost (the timer, waking
// workers and threads), so fewer, larger ones cost less per renewal. A
// lock renewed every d uses the grid of renewGrid(d): a power of two
// milliseconds, the largest not over d/8, so that the grids of locks with
// different TTLs nest and their renewals share bursts
// (TestRenewalsOfLocksWithDifferentTTLsShareTheGrid). A renewal is never
// later than its time on the lock's schedule (rounded down to the grid),
// and the schedule advances by d from the last renewal's time on it, not
// from when that renewal ended: rounding down does not make renewals more
// frequent than every d (TestRenewalsKeepTheirPeriodOnTheGrid).

// renewGrid returns the grid step of renewals every d; 0 (no grid) below
// 8ms.
func renewGrid(d time.Duration) time.Duration {
	n := d / 8 / time.Millisecond
	if n <= 0 {
		return 0
	}
	return time.Millisecond << (bits.Len64(uint64(n)) - 1)
}

// next returns the wait from now before a renewal due in d, rounded down
// to the grid, and starts w's schedule there.
func (w *watchdog) next(now time.Time, d time.Duration) time.Duration {
	since := now.Sub(w.l.c.epoch)
	w.sched = plus(since, d)
	return w.onGrid(since, renewGrid(d))
}

// following returns the wait from now, when a renewal ended, before the
// next: d after the last one's time on w's schedule. It starts the
// schedule again from now (next) when the renewal ended more than a grid
// step after its time on it (renewals fall behind: they do not catch up
// by coming sooner) or before it (the schedule is not the last renewal's).
func (w *watchdog) following(now time.Time, d time.Duration) time.Duration {
	since, g := now.Sub(w.l.c.epoch), renewGrid(d)
	if w.sched < since-g || w.sched > since+g {
		return w.next(now, d)
	}
	w.sched = plus(w.sched, d)
	return w.onGrid(since, g)
}

// onGrid returns the wait from since (ns since the epoch) before w.sched,
// rounded down to the grid step g.
func (w *watchdog) onGrid(since, g time.Duration) time.Duration {
	if g == 0 {
		return w.sched - since
	}
	return w.sched/g*g - since
}

// plus returns a + d, a and d not negative, or the largest Duration when
// the sum is past it (a WithRenewEvery of centuries): a schedule's time
// that wrapped around would make the renewal due at once, every time
// (TestARenewalPeriodOfCenturiesWaits).
func plus(a, d time.Duration) time.Duration {
	if d > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + d
}

// lose cancels the work of a lock lost with cause, and tells the Observer.
func (w *watchdog) lose(why LostReason, cause error) {
	if c := w.l.c; c.cfg.obs != nil {
		now := time.Now()
		c.observe(context.WithoutCancel(w.work), &LostEvent{Key: w.l.key, Reason: why, Cause: cause, Held: now.Sub(w.l.obtained), SinceRenewal: now.Sub(w.renewed)})
	}
	w.lost(cause)
}

// loseAtZero tells the work that the validity is 0: refused, when the
// holder's own Extend found the lock taken, else run out.
func (w *watchdog) loseAtZero() {
	if err := w.l.refusal.Load(); err != nil {
		w.lose(Refused, *err)
		return
	}
	w.lose(RanOut, ranOut(w.last))
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
