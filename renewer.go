package redlock

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The renewer runs every watchdog of a Client: one timer and a few workers
// for all of them, so that a held lock costs no goroutine of its own and a
// renewal costs about what the lock's own requests do.
//
// A watchdog waits in the waiting heap, ordered by when its next turn is
// due (its renewal, or its WithMaxHold's end). The timer fires at the
// first of them and moves every watchdog then due to the ready heap,
// ordered by when its lock's validity comes down to its cancel margin: when
// renewals fall behind, the lock nearest to that is renewed first. Up to
// renewWorkers goroutines take up to renewBatch ready watchdogs at a time,
// begin their turns (renewal.go: checks, then the renewal sent without
// waiting, so that a batch's renewals leave in one batch per master), and
// complete each as its answers come, its renewal is cut (stop, or the
// caller's Extend or Release), or its deadline passes; they end when
// nothing is ready. The timer also fires when the first ready watchdog's
// validity comes down to its margin, and tells that work itself when no
// worker took it by then.
//
// Rules, each with the test that fails when it breaks:
//   - A held lock under KeepAlive costs no goroutine between its renewals
//     (TestHeldLocksCostNoGoroutine).
//   - Renewals that fall behind go in order of the validity's end, and a
//     lock whose validity is down to its cancel margin before its turn is
//     told at once, without a renewal (TestLateRenewalsGoNearestEndFirst).
//   - A renewal that waits on a master holds up no other lock's: another
//     lock's work is told at its margin (TestAHangingRenewalDoesNotStarveAnotherLocksWatchdog,
//     TestWorkIsToldAtItsMarginWhenItsBatchHangs), and stop returns at
//     once (TestStopDoesNotWaitForAnotherLocksRenewal).
//   - The backlog is told: a BacklogEvent when a renewal waits more than
//     renewalsLateAfter past its time (watchdog.lateAt) for its turn, and
//     one when none waits (TestABacklogIsToldAndCleared); with
//     WithRenewalBacklogLimit, Obtain then fails at once with
//     ErrRenewalsLate (TestObtainFailsFastWhileRenewalsAreLate). A burst
//     of renewals the Client sends within a grid step is not a backlog
//     (TestARenewalBurstWithinItsGridStepIsNotABacklog), and one is told
//     before a lock is given up for want of a worker
//     (TestABacklogIsToldBeforeALockIsGivenUp).
//   - Close ends every watchdog, waiting or in a turn, with ErrClosed
//     (TestCloseEndsEveryWatchdog, TestCloseRacesStartingWatchdogs,
//     TestRenewerStress).
type renewer struct {
	c       *Client
	mu      sync.Mutex
	waiting dogHeap // by when each is due
	ready   dogHeap // due, by the end of its lock's validity
	workers int     // goroutines running turns
	timer   *time.Timer
	timerAt int64 // ns since c.epoch when timer fires; 0: not armed
	closed  bool
	// late is how late the renewal a worker last started was (ns), 0 once
	// nothing is ready; behind says a BacklogEvent told a backlog that has
	// not cleared yet.
	late   atomic.Int64
	behind bool
	// told is the state the Observer heard last; tellMu orders the
	// telling (tellBacklog).
	tellMu sync.Mutex
	told   bool
	spare  sync.Pool // *workerState
}

// renewWorkers x renewBatch bounds the turns a Client runs at once: the
// renewals in flight. Enough to keep the masters' pipelines full on a slow
// network (1024 renewals per round trip), few enough that renewals beyond
// what the machine can do wait in the ready heap, in order, rather than
// all slowing down together until none completes in time. A worker sends
// a batch's renewals before it reads any, so that they leave in one batch
// per master and the worker wakes once for all their answers.
const (
	renewWorkers = 16
	renewBatch   = 64
)

// renewerOf returns c's renewer, made on first use.
func (c *Client) renewerOf() *renewer {
	if r := c.renew.Load(); r != nil {
		return r
	}
	r := &renewer{c: c}
	r.spare.New = func() any { return newWorkerState(r) }
	c.renew.CompareAndSwap(nil, r)
	return c.renew.Load()
}

// ns is t in ns since the Client's epoch.
func (r *renewer) ns(t time.Time) int64 { return int64(t.Sub(r.c.epoch)) }

// add starts running w, due in d; it ends w at once (ErrClosed) when the
// Client is closing.
func (r *renewer) add(w *watchdog, now time.Time, d time.Duration) {
	r.mu.Lock()
	if r.closed {
		w.state = dogEnded
		r.mu.Unlock()
		w.closed()
		w.ended()
		return
	}
	w.sibling, w.l.dog = w.l.dog, w
	w.l.watched.Add(1)
	w.arm(now, d)
	r.wait(w)
	r.mu.Unlock()
}

// wait puts w, armed, in the waiting heap and sees that the timer fires
// for it. r.mu is held.
func (r *renewer) wait(w *watchdog) {
	w.state = dogWaiting
	r.waiting.push(w, r.ns(w.wakeAt()))
	r.armTimer()
}

// armTimer sets the timer for the first watchdog waiting. r.mu is held.
func (r *renewer) armTimer() {
	e, ok := r.waiting.first()
	if f, fok := r.ready.first(); fok && (!ok || f.key < e.key) {
		e, ok = f, true // a ready watchdog's validity comes down to its margin first
	}
	if !ok {
		return
	}
	at := e.key
	if r.timerAt != 0 && r.timerAt <= at {
		return
	}
	r.timerAt = at
	d := time.Duration(at) - time.Since(r.c.epoch)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, r.tick)
		return
	}
	r.timer.Reset(d)
}

// tick moves the watchdogs now due to the ready heap, starts workers for
// them, and tells the work of those whose validity came down to their
// cancel margin while they waited for a worker (every worker waiting on
// masters that do not answer, say): the work is told on time whatever
// holds up the renewals (TestAHangingRenewalDoesNotStarveAnotherLocksWatchdog).
func (r *renewer) tick() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.timerAt = 0
	now := time.Now()
	r.promote(r.ns(now))
	over := r.overdue(now)
	// A worker per batch ready; and one more while the first ready waited
	// past renewalsLateAfter: the workers are busy with renewals that wait
	// on masters (TestAHangingRenewalDoesNotStarveAnotherLocksWatchdog).
	need := (len(r.ready)+renewBatch-1)/renewBatch - r.workers
	e, waits := r.ready.first()
	if waits && now.Sub(e.w.due) > renewalsLateAfter {
		need = max(need, 1)
	}
	for n := min(need, renewWorkers-r.workers); n > 0; n-- {
		r.workers++
		r.c.wg.Add(1) // Close waits for it
		go r.work()
	}
	r.armTimer()
	if waits && (r.timerAt == 0 || r.timerAt > r.ns(now.Add(renewalsLateAfter))) {
		// Look again then: a worker for it, or its lateness told.
		r.timerAt = r.ns(now.Add(renewalsLateAfter))
		r.timer.Reset(renewalsLateAfter)
	}
	// Every worker busy (on masters that do not answer, say): the first
	// renewal ready tells how late they are.
	var told bool
	var late time.Duration
	if waits && r.workers == renewWorkers {
		if late = e.w.lateAt(now); late > time.Duration(r.late.Load()) {
			told = r.noteLate(late)
		}
	}
	backlog := len(r.ready)
	r.mu.Unlock()
	if told {
		r.tellBacklog(backlog, late)
	}
	for _, w := range over {
		if w.check(w.l.releasing.Load(), w.l.validityAt(now)) {
			r.rearm(w) // renewed meanwhile, by the caller's Extend
			continue
		}
		r.finish(w)
	}
}

// overdue takes from the ready heap the watchdogs whose validity is down
// to their cancel margin (to its end while fresh), for tick to tell their
// work; it puts back under their new key those whose validity grew since
// they were pushed. r.mu is held.
func (r *renewer) overdue(now time.Time) []*watchdog {
	var over []*watchdog
	for {
		e, ok := r.ready.first()
		if !ok || e.key > r.ns(now) {
			return over
		}
		r.ready.pop()
		w := e.w
		if key := r.readyKey(w); key > r.ns(now) {
			r.ready.push(w, key)
			continue
		}
		w.state = dogTurn
		over = append(over, w)
	}
}

// readyKey is w's key in the ready heap: when its validity is down to its
// cancel margin, or at its end while fresh (see watchdog.fresh).
func (r *renewer) readyKey(w *watchdog) int64 {
	until := w.l.until.Load()
	if w.fresh || until == 0 {
		return until
	}
	return until - int64(w.tell)
}

// promote moves the watchdogs due by now (ns since the epoch) from the
// waiting heap to the ready heap. r.mu is held.
func (r *renewer) promote(now int64) {
	for {
		e, ok := r.waiting.first()
		if !ok || e.key > now {
			return
		}
		r.waiting.pop()
		w := e.w
		if w.folded {
			// The renewal owed to a reset, put off to the gap's end.
			w.kicked, w.folded, w.byReset = time.Now(), false, true
		}
		w.state = dogReady
		r.ready.push(w, r.readyKey(w))
	}
}

// rearm puts w, whose turn armed it again, back to wait; it ends w instead
// when stop came during the turn (silently), or Close (ErrClosed). A reset
// heard during the turn is applied now.
func (r *renewer) rearm(w *watchdog) {
	r.mu.Lock()
	w.slot = nil
	switch {
	case w.stopping:
		r.endLocked(w)
		return
	case r.closed:
		r.mu.Unlock()
		w.closed()
		r.finish(w)
		return
	}
	r.rearmLocked(w)
	r.mu.Unlock()
}

// rearmAll is rearm of each of ws, taking r.mu once for those that go
// back to wait.
func (r *renewer) rearmAll(ws []*watchdog) {
	if len(ws) == 0 {
		return
	}
	n := 0
	r.mu.Lock()
	for _, w := range ws {
		if w.stopping || r.closed {
			ws[n] = w
			n++
			continue
		}
		w.slot = nil
		r.rearmLocked(w)
	}
	r.mu.Unlock()
	for _, w := range ws[:n] {
		r.rearm(w)
	}
}

// rearmLocked puts w back to wait. r.mu is held.
func (r *renewer) rearmLocked(w *watchdog) {
	if w.refresh.Load() {
		// The caller's Extend changed the validity during the turn: renew
		// in time for the new one, as changed does.
		now := time.Now()
		if d := w.wait(now, w.next(now, w.every)); w.due.After(now.Add(d)) {
			w.arm(now, d)
		}
	}
	r.wait(w)
	if w.resetLate {
		w.resetLate = false
		r.reset(w, time.Now())
	}
}

// end is stop's: it ends w, wherever it is, unless a worker runs its
// turn: then it aborts the renewal in flight, and the worker ends w when
// the turn is over (w.stopping). w's work is not told.
func (r *renewer) end(w *watchdog) {
	r.mu.Lock()
	if w.state == dogTurn {
		w.stopping = true
		if w.slot != nil {
			w.slot.rc.abort() // stop returns without waiting for a master
		}
		r.mu.Unlock()
		return
	}
	r.endLocked(w)
}

// finish ends w at the end of its turn (a worker's call).
func (r *renewer) finish(w *watchdog) {
	r.mu.Lock()
	r.endLocked(w)
}

// endLocked ends w unless it has ended; r.mu is held, and released.
func (r *renewer) endLocked(w *watchdog) {
	if w.state == dogEnded {
		r.mu.Unlock()
		return
	}
	r.drop(w)
	r.mu.Unlock()
	w.ended()
}

// drop marks w ended and forgets it. r.mu is held.
func (r *renewer) drop(w *watchdog) {
	w.state, w.slot = dogEnded, nil
	forget(w)
	l := w.l
	for p := &l.dog; *p != nil; p = &(*p).sibling {
		if *p == w {
			*p = w.sibling
			break
		}
	}
	l.watched.Add(-1)
	if _, ok := r.waiting.first(); !ok && r.timer != nil {
		r.timer.Stop()
		r.timerAt = 0
	}
}

// changed tells l's watchdogs but by that its validity changed under them
// (the caller's Extend, or by's renewal): each renews in time for the new
// one. One in its turn (taken into a worker's batch, its renewal not
// begun, or done) begins its turn, or its next one, fresh
// (TestAShortenedValidityBeforeTheTurnBeginsIsFollowed).
func (r *renewer) changed(l *Lock, by *watchdog) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for w := l.dog; w != nil; w = w.sibling {
		if w == by {
			continue
		}
		if w.state == dogTurn {
			w.refresh.Store(true) // its turn begins fresh, or its next one
			continue
		}
		if w.state != dogWaiting && w.state != dogReady {
			continue
		}
		w.fresh = true
		// A renewal a reset owes (folded to the gap's end, or due now and
		// ready) is never put off: the caller's Extend may have run before
		// the reset (TestWatchdogResetDuringACallersExtendIsNotLost).
		owed := w.folded || w.byReset
		if d := w.wait(now, w.next(now, w.every)); !owed || w.due.Sub(now) > d {
			w.folded = false
			r.move(w, now, d)
		}
	}
}

// resetAll tells every watchdog that a master's connection came back after
// it broke (resets.go).
func (r *renewer) resetAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, h := range []dogHeap{slices.Clone(r.waiting), slices.Clone(r.ready)} {
		h.each(func(w *watchdog) { r.reset(w, now) })
	}
}

// reset applies a master's reset to w: a renewal at once, or at the end of
// the gap since the last renewal a reset made. r.mu is held.
func (r *renewer) reset(w *watchdog, now time.Time) {
	switch w.state {
	case dogTurn:
		w.resetLate = true
		return
	case dogEnded:
		return
	}
	if d := resetGap - now.Sub(w.kicked); d > 0 {
		if w.due.Sub(now) > d {
			r.move(w, now, d)
			w.folded = true
		}
		return
	}
	w.kicked, w.byReset, w.folded = now, true, false
	r.move(w, now, 0)
}

// move arms w for a renewal due in d, in whichever heap it is. r.mu is held.
func (r *renewer) move(w *watchdog, now time.Time, d time.Duration) {
	if w.state == dogReady && d <= 0 {
		w.due = now
		return // renewed as soon as a worker is free
	}
	w.arm(now, d)
	r.wait(w)
}

// close ends every watchdog with ErrClosed: those waiting at once, those
// in a turn when it ends. New ones end as they start.
func (r *renewer) close() {
	r.mu.Lock()
	r.closed = true
	var ws []*watchdog
	for _, h := range []*dogHeap{&r.waiting, &r.ready} {
		h.each(func(w *watchdog) { ws = append(ws, w) })
		*h = nil
	}
	for _, w := range ws {
		r.drop(w)
	}
	if r.timer != nil {
		r.timer.Stop()
		r.timerAt = 0
	}
	r.mu.Unlock()
	for _, w := range ws {
		w.closed()
		w.ended()
	}
}
