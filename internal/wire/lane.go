package wire

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A lane carries requests to one master: callers queue them, and whoever
// runs the lane (its worker, or a caller sending inline) hands everything
// queued so far to the transport as one batch (one pipeline: one write and
// one read for many requests). The lane knows nothing of Redis; the
// transport knows nothing of queues.
//
// The lane's rules, each with the test that fails when it breaks:
//
//   - A key's requests keep their order: a master has one lane, a lane has
//     one batch in flight at a time, and a batch keeps queue order.
//     (TestLaneKeepsOrder; across connections, see barrier.go.)
//   - The callers of a batch just delivered queue their next requests before
//     the worker takes the queue, so they go out together: see gather.go.
//   - Each request is delivered exactly once, by the lane, after the
//     transport returned or panicked; the transport only sets replies.
//     (TestLaneDeliversEachRequestOnce, TestLaneSurvivesTransportPanic)
//   - Whoever set running owns the transport until it clears running: the
//     worker or one inline caller, never both. (TestLaneInlineAndWorker)
//   - A master that does not answer holds a bounded queue, and no caller
//     past its own deadline. The lane marks its master not answering once
//     the work in flight (a batch; a tick, which sends kept Releases) has
//     been out for twice the longest timeout it was sent with: a request's
//     timeout runs from when it was queued to its deadline (not from when
//     its batch went out: a request that waited most of its timeout in the
//     queue must not mark a master that has only just been sent it), a
//     tick's is the master's budget. The margin keeps a moment of slowness
//     (a busy machine) from marking it. The mark ends when that work comes
//     back: the master's answer, or a failure (a read its deadline bounds).
//     While marked, a new request still queues, and goes out with the next
//     batch, or is dropped (ErrQueued) once its deadline passes while
//     queued: its caller waits for the lane as long as its own deadline
//     allows, and no longer. Only a frozen master's pile is refused: once
//     StalledQueue requests wait on a marked lane, those that will not be
//     sent (deadline passed, caller gone) are taken out and delivered,
//     and if StalledQueue still wait, a new request fails at once
//     (ErrStalled). On a marked lane a request whose caller has given up
//     is not queued: it fails at once with ErrSkipped, which its round
//     reports as the context's cause. A Release that fails or is dropped
//     so is kept for the transport, not lost (up to MaxPending).
//     (TestLaneQueuesBehindAMasterNotAnswering,
//     TestLaneQueueStaysBoundedWhileItsMasterIsNotAnswering,
//     TestLaneMarksItsMasterByItsRequestsTimeouts,
//     TestLaneDropsARequestWhoseDeadlinePassesBehindAStalledBatch,
//     TestLaneRefusesAGoneCallerWithItsCauseWhileStalled,
//     TestLaneClosedWhileItsMasterIsNotAnswering,
//     TestSlowBatchDoesNotFailTheNextObtainAtOnce,
//     TestShortTimeoutCallDoesNotMarkAHealthyMaster,
//     TestFrozenMasterQueueStaysBounded)
//   - Whoever clears running wakes a parked worker that has work or must
//     exit, so Close never waits on a sleeping worker. (TestLaneClosesAfterInline)
//   - A lane with nothing queued still gives its transport a tick now and
//     then while the transport asks for it (to give an unused connection
//     back, to send kept Releases again), and a Release the lane could not
//     send is kept, not lost. (TestIdleClientGivesItsConnectionsBack,
//     TestReleasedLockLeavesNoKeyAfterAStall)

// A transport sends batches to one master: the lane's only view of the
// network, and the seam where another implementation (another client
// library, a test's fake) plugs in without the lane or the lock logic
// changing. One goroutine at a time uses it: whoever runs the lane. It
// never delivers a request, and never blocks past the deadlines of the
// requests it was handed (or, for a tick or close, past the master's
// budget).
type transport interface {
	// exec sends batch and sets every request's reply (r.val, r.err, and
	// with replica acks r.acked, r.ackMs, r.ackErr). now is about when the
	// batch started.
	exec(batch []*request, now time.Time)
	// reset drops the connection after exec panicked on batch: what it
	// carries is unknown.
	reset(batch []*request)
	// keepOp keeps a Release the lane could not send, to send it later.
	keepOp(o Op)
	// tick runs when the lane is idle; it reports whether the transport
	// wants another tick later.
	tick(now time.Time) bool
	// close gives back what the transport holds, after one last sending
	// of the kept Releases; the lane is done with it.
	close()
}

type lane struct {
	t       transport
	deliver func(*request) // hands a reply to its sink and the request back to its pool

	mu      sync.Mutex
	cond    sync.Cond
	queue   []*request
	running bool          // a batch is in flight, run by the worker or an inline caller
	stalled time.Time     // from then on the master is not answering: the work in flight is out for twice its timeout
	span    time.Duration // the longest timeout of the requests queued, each from when it was queued
	waiting bool          // the worker is parked
	closed  bool
	exited  bool        // the worker took the kept Releases for the last time
	kept    []Op        // Releases failed before they were sent, for the transport
	ticking *time.Timer // the next tick, while the transport wants ticks
	poked   bool        // a tick is due

	live   []*request    // scratch, owned by whoever runs the lane
	budget time.Duration // what a tick may take (Master.budget): its stall point

	// Gathering by waiting (see gather).
	waitCallers bool
	waitMax     time.Duration // gatherMax; longer in tests
	missed      int           // requests queued while the last batch was out
	noWait      int           // batches to send before the lane waits again
	delivered   int           // of the batch the worker waits after: it waits until missed+delivered are queued
	gathering   bool          // the worker waits
	tail        bool          // three quarters are back: the wait was cut to its tail
	capped      bool          // a queued request's deadline shortened the wait
	until       time.Time     // when the wait ends at the latest
	slack       time.Duration // a request due before until+slack ends it
	gatherEnd   *time.Timer
	gatherGen   int // which wait gatherEnd ends
	ranOut      int // waits that ran out, for the tests
}

func newLane(t transport, deliver func(*request)) *lane {
	l := &lane{t: t, deliver: deliver, budget: tickBudget, waitMax: gatherMax}
	l.cond.L = &l.mu
	return l
}

// ErrStalled marks a request not sent because the master has not answered
// the lane's work in flight within twice its timeout, and StalledQueue
// requests already wait for it.
var ErrStalled = fmt.Errorf("%w: not sent, the master has not answered an earlier request within twice its timeout, and too many requests wait for it: %w", ErrNoReply, context.DeadlineExceeded)

// StalledQueue is how many requests a lane whose master is not answering
// holds in its queue; beyond, a new one fails at once (ErrStalled).
const StalledQueue = 256

// send queues r, or sends it at once on the caller's goroutine when inline
// is set and the lane is idle. The lane owns r from here on.
func (l *lane) send(r *request, inline bool) {
	if !l.trySend(r, inline) {
		l.fail(r, ErrClosed)
	}
}

// trySend is send, but leaves r to the caller when the lane is closed;
// except a Release nobody waits for (a failed attempt's undo, sent when a
// late answer came), which a closing lane keeps for the last sending of
// its kept Releases, as it sends what was queued before it closed.
func (l *lane) trySend(r *request, inline bool) bool {
	l.mu.Lock()
	switch {
	case l.closed && r.sink == nil && r.kind() == KindRelease && !l.exited && len(l.kept) < MaxPending:
		l.kept = append(l.kept, r.op)
		l.mu.Unlock()
		l.fail(r, ErrClosed)
		return true
	case l.closed:
		l.mu.Unlock()
		return false
	}
	now := time.Now()
	var gone []*request
	if l.running && !now.Before(l.stalled) {
		// The master is not answering: r queues, unless it would not be
		// sent anyway, or the queue is full of requests that will be.
		err := r.dropped(now)
		if err == nil && len(l.queue) >= StalledQueue {
			gone = l.sweep(now)
			if len(l.queue) >= StalledQueue {
				err = ErrStalled
			}
		}
		if err != nil {
			if r.kind() == KindRelease && len(l.kept) < MaxPending {
				l.kept = append(l.kept, r.op)
			}
			l.mu.Unlock()
			l.deliverAll(gone)
			l.fail(r, err)
			return true
		}
	} else if inline && !l.running && len(l.queue) == 0 {
		l.running, l.stalled = true, stallAt(now, r.op.Deadline.Sub(now))
		l.mu.Unlock()
		one := [1]*request{r}
		l.run(one[:])
		l.mu.Lock()
		l.running = false
		l.armTick()
		if l.waiting && (len(l.queue) > 0 || l.closed || l.poked) {
			l.cond.Signal()
		}
		l.mu.Unlock()
		return true
	}
	l.queue = append(l.queue, r)
	l.span = max(l.span, r.op.Deadline.Sub(now))
	switch {
	case !l.running && l.waiting:
		l.cond.Signal()
	case l.gathering && (len(l.queue) >= l.missed+l.delivered || r.op.Deadline.Sub(l.until) < l.slack):
		// Its callers are back, or a request could not wait for them.
		l.gathering = false
		l.cond.Signal()
	case l.gathering && !l.tail && (len(l.queue)-l.missed)*4 >= l.delivered*3:
		// Most are back: the rest, if they come, have an eighth of the
		// wait (a request nobody sends again after must not hold every
		// batch for the whole of it).
		l.tail = true
		if tail := l.slack / 8; time.Until(l.until) > tail {
			l.until = time.Now().Add(tail)
			l.gatherEnd.Reset(tail)
		}
	}
	l.mu.Unlock()
	l.deliverAll(gone)
	return true
}

// sweep takes out of the queue the requests that will not be sent (their
// caller gave up, their deadline passed, their lock is being released),
// keeping the Releases among them for the transport as run does, and
// returns them with their error set, to deliver once l.mu is released;
// with l.mu held. The others keep their order.
func (l *lane) sweep(now time.Time) (gone []*request) {
	live := l.queue[:0]
	for _, q := range l.queue {
		err := q.dropped(now)
		if err == nil {
			live = append(live, q)
			continue
		}
		q.val, q.err = 0, err
		if q.kind() == KindRelease && len(l.kept) < MaxPending {
			l.kept = append(l.kept, q.op)
		}
		gone = append(gone, q)
	}
	clear(l.queue[len(live):])
	l.queue = live
	return gone
}

// deliverAll delivers requests whose replies are set; without l.mu.
func (l *lane) deliverAll(rs []*request) {
	for _, r := range rs {
		l.deliver(r)
	}
}

func (l *lane) fail(r *request, err error) {
	r.val, r.err = 0, err
	l.deliver(r)
}

// retire closes the lane if it has nothing to send: nothing queued or in
// flight, no kept Release. It reports whether the lane is closed.
func (l *lane) retire() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed && (l.running || len(l.queue) > 0 || len(l.kept) > 0) {
		return false
	}
	l.closeLocked()
	return true
}

// close makes the worker exit once the queue is empty.
func (l *lane) close() {
	l.mu.Lock()
	l.closeLocked()
	l.mu.Unlock()
}

func (l *lane) closeLocked() {
	l.closed = true
	if l.ticking != nil {
		l.ticking.Stop()
	}
	if l.gatherEnd != nil {
		l.gatherEnd.Stop()
	}
	l.cond.Broadcast()
}

// armTick schedules a tick, unless one is scheduled; with l.mu held.
func (l *lane) armTick() {
	if l.ticking != nil || l.closed {
		return
	}
	l.ticking = time.AfterFunc(tickEvery, func() {
		l.mu.Lock()
		l.ticking, l.poked = nil, true
		if l.waiting {
			l.cond.Signal()
		}
		l.mu.Unlock()
	})
}

// work runs the lane: whatever is queued goes out as one batch, one batch
// at a time, until the lane closes and its queue is empty.
func (l *lane) work(wg *sync.WaitGroup) {
	defer wg.Done()
	var batch []*request
	l.mu.Lock()
	for {
		for (len(l.queue) == 0 && !l.closed && !l.poked) || l.running {
			l.waiting = true
			l.cond.Wait()
			l.waiting = false
		}
		if len(l.queue) == 0 && l.closed {
			kept := l.takeKept()
			l.exited = true
			l.mu.Unlock()
			l.shut(kept)
			return
		}
		if len(l.queue) == 0 { // a tick
			now := time.Now()
			l.poked, l.running, l.stalled = false, true, stallAt(now, l.budget)
			kept := l.takeKept()
			l.mu.Unlock()
			again := l.tick(kept)
			l.mu.Lock()
			l.running = false
			if again {
				l.armTick()
			}
			continue
		}
		batch, l.queue = l.queue, batch[:0]
		start := time.Now()
		l.running, l.stalled, l.span = true, stallAt(start, l.span), 0
		l.mu.Unlock()
		l.run(batch)
		if len(batch) > 1 {
			l.gather(len(batch), time.Since(start))
		}
		clear(batch)
		l.mu.Lock()
		l.running = false
		l.armTick()
	}
}

// notStalled is a stall point no lane reaches.
var notStalled = time.Unix(1<<40, 0)

// takeKept returns the Releases kept for the transport; with l.mu held.
func (l *lane) takeKept() []Op {
	kept := l.kept
	l.kept = nil
	return kept
}

// tick hands kept Releases to the transport and ticks it, surviving a
// panic as exec does.
func (l *lane) tick(kept []Op) (again bool) {
	defer func() {
		if v := recover(); v != nil {
			func() {
				defer func() { _ = recover() }()
				l.t.reset(nil)
			}()
			again = true
		}
	}()
	for _, o := range kept {
		l.t.keepOp(o)
	}
	return l.t.tick(time.Now())
}

// shut hands the kept Releases to the transport and closes it, surviving a
// panic as exec does: close sends them one last time.
func (l *lane) shut(kept []Op) {
	defer func() { _ = recover() }()
	for _, o := range kept {
		l.t.keepOp(o)
	}
	l.t.close()
}

// run sends the requests of batch that are still wanted and delivers every
// request of it, once, also when the transport panics (a go-redis hook may):
// the panic fails the batch and the transport drops its connection, and the
// lane goes on.
func (l *lane) run(batch []*request) {
	now := time.Now()
	l.mu.Lock()
	kept := l.takeKept()
	l.mu.Unlock()
	for _, o := range kept {
		l.t.keepOp(o)
	}
	live := l.live[:0]
	for _, r := range batch {
		if err := r.dropped(now); err != nil {
			r.val, r.err = 0, err
			if r.kind() == KindRelease {
				l.t.keepOp(r.op)
			}
			continue
		}
		live = append(live, r)
	}
	if len(live) > 0 {
		l.exec(live, now)
	}
	clear(live)
	l.live = live[:0]
	// The master has answered: a caller answered first may send its next
	// request before the rest are delivered, and must not find the lane
	// stalled.
	l.mu.Lock()
	l.stalled = notStalled
	l.missed = len(l.queue) // before the callers of this batch are back
	l.mu.Unlock()
	for _, r := range batch {
		l.deliver(r)
	}
}

func (l *lane) exec(batch []*request, now time.Time) {
	defer func() {
		if v := recover(); v != nil {
			for _, r := range batch {
				r.val, r.err = 0, Panicked{v}
				r.forget() // go-redis may still hold its commands
			}
			func() {
				defer func() { _ = recover() }() // dropping the connection may run the same hook
				l.t.reset(batch)
			}()
		}
	}()
	l.t.exec(batch, now)
}

// stallAt is when the master of work sent at start with timeout span is
// marked not answering: twice span later.
func stallAt(start time.Time, span time.Duration) time.Time { return start.Add(2 * max(0, span)) }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
