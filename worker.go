package redlock

import (
	"context"
	"sync/atomic"
	"time"
)

// The renewer's workers (renewer.go) and the context of a renewal.

// work runs the turns of ready watchdogs, a batch at a time, until none
// is ready.
func (r *renewer) work() {
	defer r.c.wg.Done()
	ws := r.spare.Get().(*workerState)
	defer r.spare.Put(ws)
	r.mu.Lock()
	for {
		late := r.take(ws)
		if len(ws.batch) == 0 {
			r.workers--
			r.late.Store(0)
			cleared := r.behind
			r.behind = false
			r.mu.Unlock()
			if cleared {
				r.tellBacklog(0, 0)
			}
			return
		}
		told := r.noteLate(late)
		backlog := len(r.ready)
		r.mu.Unlock()
		if told {
			r.tellBacklog(backlog+len(ws.batch), late)
		}
		ws.run()
		r.mu.Lock()
	}
}

// take fills ws's batch with up to renewBatch ready watchdogs, and returns
// how late the first was. r.mu is held.
func (r *renewer) take(ws *workerState) (late time.Duration) {
	for len(ws.batch) < renewBatch {
		e, ok := r.ready.first()
		if !ok {
			r.promote(int64(time.Since(r.c.epoch)))
			if e, ok = r.ready.first(); !ok {
				break
			}
		}
		r.ready.pop()
		e.w.state = dogTurn
		if len(ws.batch) == 0 {
			late = max(0, e.w.lateAt(time.Now()))
		}
		ws.batch = ws.batch[:len(ws.batch)+1]
		t := &ws.batch[len(ws.batch)-1]
		t.w, t.rc.values, t.rc.wake, e.w.slot = e.w, e.w.vals, ws.wake, t
		if t.rc.done == nil || t.rc.cut.Load() {
			t.rc.done = make(chan struct{})
			t.rc.cut.Store(false)
		}
	}
	return late
}

// run runs the turns of the batch: it begins them all (sending their
// renewals), then completes each as its answers come, its renewal is cut,
// or its deadline passes, whichever is first: one renewal that hangs holds
// up no other's.
func (ws *workerState) run() {
	pend := ws.pend[:0]
	for i := range ws.batch {
		// A clock reading of each turn's own: a begin before it may have
		// taken long (it told an Observer of a loss), and each renewal
		// has its node timeout from when it is sent
		// (TestEachRenewalOfABatchHasItsNodeTimeout).
		if t := &ws.batch[i]; t.begin(time.Now()) {
			pend = append(pend, t)
		}
	}
	for len(pend) > 0 {
		var next time.Time
		n := 0
		now := time.Now()
		back := ws.back[:0]
		for _, t := range pend {
			if t.poll(now) {
				// Decided with masters still to answer (a quorum did, or
				// the deadline passed): their requests still queued are
				// of no use any more.
				straggles := t.x.rd != nil && t.x.pending > 0
				if t.complete() {
					back = append(back, t.w)
				}
				if straggles {
					t.rc.shed()
				}
				continue
			}
			pend[n] = t
			n++
			if next.IsZero() || t.x.dl.Before(next) {
				next = t.x.dl
			}
		}
		clear(pend[n:])
		ws.r.rearmAll(back)
		clear(back)
		if pend = pend[:n]; n > 0 {
			ws.await(pend[n-1], next, now)
		}
	}
	for i := range ws.batch {
		t := &ws.batch[i]
		t.w, t.x, t.rc.values, t.owed = nil, extension{}, nil, false
	}
	ws.batch = ws.batch[:0]
}

// await waits for an answer to last, the last renewal sent and not
// decided (the others' come before it, on the same pipelines), a cut, or
// next, the first deadline of those not decided.
func (ws *workerState) await(last *turn, next, now time.Time) {
	ws.timer.Reset(next.Sub(now))
	select {
	case rep := <-last.x.rd.replies:
		last.read(rep)
	case <-ws.wake: // a renewal was cut
	case <-ws.timer.C:
	}
	ws.timer.Stop()
}

// A workerState is what a worker needs, kept for the next (renewer.spare).
type workerState struct {
	r     *renewer
	batch []turn
	pend  []*turn
	back  []*watchdog   // turns completed, to put back to wait at once
	wake  chan struct{} // a cut of a renewal of its batch wakes it
	timer *time.Timer   // the first deadline of its batch
}

func newWorkerState(r *renewer) *workerState {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &workerState{r: r, batch: make([]turn, 0, renewBatch), pend: make([]*turn, 0, renewBatch), back: make([]*watchdog, 0, renewBatch), wake: make(chan struct{}, 1), timer: t}
}

// cut aborts the renewals of l in flight: a call of the caller's needs
// l.mu (lockFor).
func (r *renewer) cut(l *Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := l.dog; w != nil; w = w.sibling {
		if w.slot != nil {
			w.slot.rc.abort()
		}
	}
}

// abort cuts c, once, and wakes its worker. The renewer's mu is held.
func (c *renewCtx) abort() {
	if c.cut.CompareAndSwap(false, true) {
		close(c.done)
		select {
		case c.wake <- struct{}{}:
		default: // the worker has a wake-up pending already
		}
	}
}

// shed cuts c, once, when its renewal was decided before every master
// answered: its requests still queued on a master's lane are dropped there
// (ErrSkipped), not sent for nobody. Without it the slowest master's lane
// is sent every renewal however far behind it is: its batches grow until
// their reads time out, and the Releases that follow wait behind them
// (TestRenewalsDecidedAtAQuorumAreNotSentToASlowMaster). The worker calls
// it after complete, without the renewer's mu: an abort may race it until
// the watchdog is back to wait, so either cuts, once.
func (c *renewCtx) shed() {
	if c.cut.CompareAndSwap(false, true) {
		close(c.done)
	}
}

// A renewCtx is a renewal's context: the work's values (a span), not its
// cancellation. Cutting it (renewer.cut: stop, or a call of the caller's
// that needs l.mu, lockFor) aborts the renewal in flight. Each slot of a
// worker's batch has one, used by renewal after renewal until one is cut,
// so that a renewal allocates no context. cut is set once, by abort or
// shed; take gives a cut slot a new done, under the renewer's mu.
type renewCtx struct {
	values context.Context
	done   chan struct{}
	wake   chan struct{} // its worker's: a cut wakes it
	cut    atomic.Bool
}

func (c *renewCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *renewCtx) Done() <-chan struct{}       { return c.done }
func (c *renewCtx) Value(key any) any           { return c.values.Value(key) }
func (c *renewCtx) Err() error {
	if c.cut.Load() {
		return context.Canceled
	}
	return nil
}
