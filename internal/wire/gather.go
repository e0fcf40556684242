package wire

import (
	"runtime"
	"time"
)

// This file is the lane's gather: how the callers of a batch get their
// next requests into the next batch. Its rules, each with the test that
// fails when it breaks:
//
//   - The callers of a batch just delivered queue their next requests before
//     the worker takes the queue, so they go out together (gather); the
//     lane is not stalled meanwhile. On a lane whose callers come back
//     (a Client of one master), the worker waits for them, for at most a
//     quarter of the batch's round trip and never past a queued request's
//     deadline; once most are back the rest get an eighth of that, and once
//     many did not come back in time it stops waiting for a while.
//     (TestLaneGathersTheNextWave, TestLaneWaitsForItsCallers,
//     TestLaneStopsWaitingForCallersThatDoNotReturn,
//     TestGatherThreeBackOfFourDoNotHoldEveryBatch,
//     TestGatherDoesNotHoldAQueuedRequestPastItsDeadline,
//     TestLaneDoesNotStallWhileGathering, TestLaneDoesNotStallWhileDelivering)
//   - A wait ends when its callers are back, when a request could not
//     wait for them, or when the lane closes, never later.
//     (TestGatherEndsOnceItsCallersAreBack, TestGatherWakesOnClose,
//     TestGatherCloseAtAnyMoment, TestGatherShortDeadlinesRaceTheTimer)

// gather lets the callers of the batch just delivered queue their next
// requests before the worker takes the queue. Callers that share a master
// come back together (a lock, then its release), and the ones not back yet
// would otherwise miss the next batch and wait a whole round trip for the
// one after: two half-full batches where one full one would do, and the
// master's CPU per lock is mostly per batch (a read, a write, a wake-up).
// The lane stays running meanwhile, so a caller queues rather than sending
// a batch of its own, and is not stalled: the master has just answered.
//
// A yield is enough when the worker's own core runs the callers, but with
// two cores or more the worker resumes at once on another and takes the
// queue before most callers are back (measured with 64 goroutines on one
// master 500us away: half the callers missed each batch, and a lock call
// took two round trips). So a lane whose callers come back for their next
// request (waitCallers: a Client of one master that is a *redis.Client,
// where a call needs no other master's answer) parks until they are all
// back, for at most a quarter of the batch's round trip (and gatherMax),
// and less when a queued request's deadline is near. Callers that work
// between their requests (a lock held, a handler that releases and
// leaves) would make every batch wait that long for nobody: once three
// quarters are back the rest get an eighth of the wait, and after a wait
// that ran out with fewer than three quarters back the next noWaitBatches
// batches go out after a yield only.
func (l *lane) gather(delivered int, took time.Duration) {
	l.mu.Lock()
	wait, capped := l.gatherWait(delivered, took)
	if wait <= 0 {
		l.noWait = max(0, l.noWait-1)
		l.mu.Unlock()
		runtime.Gosched()
		return
	}
	l.delivered, l.gathering = delivered, true
	l.tail, l.capped = false, capped
	l.until, l.slack = time.Now().Add(wait), wait
	l.gatherGen++
	gen := l.gatherGen
	// A timer of its own: a late one of an earlier wait must not end it.
	l.gatherEnd = time.AfterFunc(wait, func() {
		l.mu.Lock()
		if l.gathering && l.gatherGen == gen {
			l.gathering = false
			if !l.tail {
				l.ranOut++
				// Judged only on a wait of its full length: one a deadline
				// cut short says nothing of the callers.
				if back := len(l.queue) - l.missed; back*4 < delivered*3 && !l.capped {
					l.noWait = noWaitBatches // many do other work first
				}
			}
			l.cond.Signal()
		}
		l.mu.Unlock()
	})
	for l.gathering && !l.closed {
		l.cond.Wait()
	}
	l.gathering = false
	l.gatherEnd.Stop()
	l.mu.Unlock()
}

// gatherWait returns how long gather waits for the callers of a batch of
// delivered requests that took took (0: it does not), and whether a queued
// request's deadline shortened it; with l.mu held.
func (l *lane) gatherWait(delivered int, took time.Duration) (wait time.Duration, capped bool) {
	if !l.waitCallers || l.closed || l.noWait > 0 || len(l.queue) >= l.missed+delivered {
		return 0, false
	}
	full := min(took/4, l.waitMax)
	wait, now := full, time.Now()
	for _, r := range l.queue { // a queued request must still go out in time
		wait = min(wait, r.op.Deadline.Sub(now)/2)
	}
	return wait, wait < full
}

// gatherMax bounds a gather's wait; noWaitBatches is how many batches go
// out without one after a wait ran out.
const (
	gatherMax     = 400 * time.Microsecond
	noWaitBatches = 8
)
