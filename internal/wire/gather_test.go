package wire

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The lane's gather by waiting for its callers (gather.go), at its edges,
// against a fake transport in a synctest bubble.

// TestGatherWakesOnClose: a worker waiting for callers that do not come
// back exits at once when the lane closes, and what was queued goes out.
func TestGatherWakesOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newWaitingLane(t, time.Hour, nil)
		tl.t.delay = 40 * time.Millisecond // gather waits 10ms... unless closed
		tl.send(tl.req("a", time.Minute), false)
		tl.send(tl.req("b", time.Minute), false)
		tl.send(tl.req("c", time.Minute), false)
		tl.await(t, 3) // in one or two batches; the last of more than one gathers
		tl.send(tl.req("d", time.Minute), false)
		start := time.Now()
		tl.close()
		tl.wg.Wait()
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Fatalf("the worker took %v to exit after close", d)
		}
		if errs := tl.errsOf("d"); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("d, queued while gathering, got %v", errs)
		}
	})
}

// TestGatherManyCallersExactlyOnceInOrder: many callers, inline and not,
// each keeping its own sequence on the lane, against a gathering worker
// that sometimes panics; each request is delivered once, and each
// caller's requests run in its order.
func TestGatherManyCallersExactlyOnceInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newWaitingLane(t, 2*time.Millisecond, func(tl *testLane, b []*request) {
			if rand.IntN(50) == 0 {
				tl.t.mu.Lock()
				tl.t.panics++
				tl.t.mu.Unlock()
			}
		})
		tl.t.delay = 100 * time.Microsecond
		const callers, each = 16, 200
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for i := range each {
					tl.send(tl.req(fmt.Sprintf("c%02d-%04d", c, i), time.Minute), (c+i)%3 == 0)
					if rand.IntN(4) == 0 {
						time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					}
				}
			})
		}
		wg.Wait()
		tl.await(t, callers*each)
		tl.mu.Lock()
		for k, errs := range tl.delivered {
			if len(errs) != 1 {
				t.Errorf("%s delivered %d times", k, len(errs))
			}
		}
		tl.mu.Unlock()
		tl.t.mu.Lock()
		defer tl.t.mu.Unlock()
		last := map[string]string{}
		for _, k := range tl.t.seen {
			c := k[:3]
			if p, ok := last[c]; ok && p >= k {
				t.Fatalf("%s ran after %s", k, p)
			}
			last[c] = k
		}
	})
}

// TestGatherDoesNotHoldAQueuedRequestPastItsDeadline: a request queued
// while a slow batch was out, whose deadline leaves time to send it once
// that batch is back, must be sent, not held by the worker waiting for
// callers until its deadline passed (then dropped as ErrQueued), as a
// yield alone would send it. (Times scaled up by waitMax; with gatherMax
// 400us the same holds for a request with < 400us left after a batch of
// >= 1.6ms.)
func TestGatherDoesNotHoldAQueuedRequestPastItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var once sync.Once
		tl := newWaitingLane(t, 20*time.Millisecond, func(tl *testLane, b []*request) {
			for _, r := range b {
				if r.op.target.Key() == "p1" {
					once.Do(func() {
						// queued while the slow batch is out; 45ms leaves 5ms
						// once the 40ms batch is back
						tl.send(tl.req("q", 45*time.Millisecond), false)
					})
				}
			}
		})
		entered, release := tl.t.blockNext()
		tl.send(tl.req("p0", time.Minute), false)
		<-entered
		tl.send(tl.req("p1", time.Minute), false)
		tl.send(tl.req("p2", time.Minute), false)
		tl.t.mu.Lock()
		tl.t.delay = 40 * time.Millisecond // the batch [p1 p2]: a slow round trip
		tl.t.mu.Unlock()
		release()
		tl.await(t, 3)
		tl.t.mu.Lock()
		tl.t.delay = 0 // the master is fast again
		tl.t.mu.Unlock()
		tl.await(t, 4)
		if errs := tl.errsOf("q"); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("q, sendable in time once the slow batch was back, got %v", errs)
		}
	})
}

// TestGatherDoesNotWaitOutEveryBatch: of each batch's two callers, one
// comes back at once and the other does not (it holds its lock, or is a
// watchdog), while a third request was queued meanwhile. Every gather then
// runs out (want = missed+2 is never reached) yet counts half the callers
// back, so the lane never pauses its waits: every batch is held up by the
// full wait, a quarter of the round trip, for nobody.
func TestGatherDoesNotWaitOutEveryBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		tl := newWaitingLane(t, time.Hour, func(tl *testLane, b []*request) {
			// a request from someone else, queued while this batch is out
			go tl.send(tl.req(fmt.Sprint("other-", n.Add(1)), time.Minute), false)
		})
		tl.t.delay = 4 * time.Millisecond // a wait: 1ms
		var loop atomic.Int64
		const rounds = 40
		tl.lane.mu.Lock() // the worker reads deliver after taking it
		tl.lane.deliver = func(r *request) {
			tl.record(r)
			k := r.op.target.Key()
			if k[0] == 'A' && loop.Add(1) < rounds { // the caller that comes back at once
				go tl.send(tl.req(fmt.Sprint("A", loop.Load()), time.Minute), false)
			}
		}
		tl.lane.mu.Unlock()
		tl.send(tl.req("A0", time.Minute), false)
		tl.await(t, rounds)
		for loop.Load() < rounds {
			time.Sleep(time.Millisecond)
		}
		waits := tl.ranOutSoFar()
		// Each batch is [A, other]; A is back within microseconds, other is
		// nobody's. A wait that gains nothing should not repeat every batch.
		if waits > rounds/2 {
			t.Fatalf("the lane waited out %d of ~%d batches though only one caller in two ever came back, each time for a quarter of the round trip", waits, rounds)
		}
	})
}

// TestGatherOpenLoopHandlers: the common server pattern, one lock per
// handler: a handler arrives, obtains, releases at once, and is gone. Of a
// batch's callers those that obtained come back (with their release) and
// those that released never do: about half, never fewer than half by
// much, so the lane never pauses its waits, and each batch waits out the
// full quarter round trip for the half that has left.
func TestGatherOpenLoopHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newWaitingLane(t, time.Hour, nil)
		tl.t.delay = 4 * time.Millisecond // a wait: 1ms
		var wg sync.WaitGroup
		var began sync.Map
		var total atomic.Int64
		tl.lane.mu.Lock() // the worker reads deliver after taking it
		tl.lane.deliver = func(r *request) {
			tl.record(r)
			k := r.op.target.Key()
			if k[0] == 'R' {
				b, _ := began.Load(k[1:])
				total.Add(int64(time.Since(b.(time.Time))))
			}
			if k[0] == 'O' { // obtained: release at once
				wg.Go(func() { tl.send(tl.req("R"+k[1:], time.Minute), false) })
			}
		}
		tl.lane.mu.Unlock()
		const handlers = 400
		for i := range handlers { // one every 250us: ~16 a round trip
			began.Store(fmt.Sprint(i), time.Now())
			tl.send(tl.req(fmt.Sprint("O", i), time.Minute), false)
			time.Sleep(250 * time.Microsecond)
		}
		tl.await(t, 2*handlers) // every obtain delivered: no wg.Go after it
		wg.Wait()
		waits := tl.ranOutSoFar()
		tl.t.mu.Lock()
		batches := len(tl.t.sizes)
		tl.t.mu.Unlock()
		t.Logf("%d waits, %d batches, a handler's obtain+release took %v on average", waits, batches, time.Duration(total.Load()/handlers))
		if waits > batches/4 {
			t.Fatalf("the lane waited after %d of %d batches (each for a quarter round trip), for handlers half of which had left", waits, batches)
		}
	})
}

// TestGatherEndsOnceItsCallersAreBack: the wait ends as soon as the
// callers just answered are all back, not when its timer runs out: the
// caller whose request completes the count wakes the gathering worker
// (trySend), which no other gather test checks.
func TestGatherEndsOnceItsCallersAreBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var starts []time.Time
		tl := newWaitingLane(t, time.Hour, func(tl *testLane, b []*request) {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
		})
		const delay, rounds = 40 * time.Millisecond, 8 // a wait: 10ms
		tl.t.delay = delay
		wait := loopCallers(tl, 2, rounds, func() {})
		entered, release := tl.t.blockNext()
		tl.send(tl.req("block", time.Minute), false)
		<-entered
		tl.send(tl.req("c0-0", time.Minute), false)
		tl.send(tl.req("c1-0", time.Minute), false)
		release()
		wait()
		mu.Lock()
		defer mu.Unlock()
		var gaps []time.Duration
		for i := 2; i < len(starts); i++ { // from the batch [c0-0 c1-0] on
			gaps = append(gaps, starts[i].Sub(starts[i-1])-delay)
		}
		slices.Sort(gaps)
		if len(gaps) == 0 || gaps[len(gaps)/2] > 5*time.Millisecond {
			t.Fatalf("between batches whose callers were back at once, the lane waited %v (sorted), want well under the 10ms a wait may last", gaps)
		}
	})
}

// TestLaneDoesNotStallWhileDelivering: the master answered an overdue
// batch; a caller answered first (running on another core at once) sends
// its next request while the worker still delivers the rest of the batch,
// before gather clears the stall point: it must queue, not fail as
// stalled. (Here the caller sends from deliver itself: the same
// interleaving, made certain.)
func TestLaneDoesNotStallWhileDelivering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newTestLane(t)
		tl.lane.mu.Lock() // the worker reads deliver after taking it
		tl.lane.deliver = func(r *request) {
			tl.record(r)
			k := r.op.target.Key()
			if k == "slow1" {
				tl.send(tl.req("afterslow1", time.Minute), false)
			}
		}
		tl.lane.mu.Unlock()
		entered, release := tl.t.blockNext()
		tl.send(tl.req("slow1", 20*time.Millisecond), false)
		tl.send(tl.req("slow2", 20*time.Millisecond), false)
		<-entered
		time.Sleep(60 * time.Millisecond) // past the batch's stall point
		release()
		tl.await(t, 3)
		if errs := tl.errsOf("afterslow1"); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("afterslow1, sent as the overdue batch came back: %v, want one success", errs)
		}
	})
}

// TestGatherCloseAtAnyMoment: lanes closed at random moments while their
// workers gather, callers sending inline or not; every worker exits, and
// every request is delivered exactly once.
func TestGatherCloseAtAnyMoment(t *testing.T) {
	for i := range 200 {
		closeWhileSending(t, i, 50*time.Microsecond, 2000*time.Microsecond, 4, 30, func(tl *testLane, c, j int) {
			tl.send(tl.req(fmt.Sprint(c, "-", j), time.Minute), (c+j)%2 == 0)
			if rand.IntN(3) == 0 {
				time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
			}
		})
	}
}

// TestGatherThreeBackOfFourDoNotHoldEveryBatch: three closed-loop
// callers come back within microseconds; every batch also carries one
// request nobody comes back from (a trickle of other traffic: an open-loop
// handler's release, an undo, a refresh). Each wait then runs out (want =
// missed+4 is never reached) with 3/4 back; the rest must not hold every
// batch for the full quarter round trip.
func TestGatherThreeBackOfFourDoNotHoldEveryBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		tl := newWaitingLane(t, time.Hour, func(tl *testLane, b []*request) {
			go tl.send(tl.req(fmt.Sprint("other-", n.Add(1)), time.Minute), false)
		})
		tl.t.delay = 4 * time.Millisecond // a wait: 1ms
		const callers, rounds = 3, 40
		wait := loopCallers(tl, callers, rounds, func() {})
		for c := range callers {
			tl.send(tl.req(fmt.Sprintf("c%d-0", c), time.Minute), false)
		}
		wait()
		ranOut := tl.ranOutSoFar()
		if ranOut > rounds/2 {
			t.Fatalf("the lane waited out its timer on %d of ~%d batches whose callers were all back within microseconds", ranOut, rounds)
		}
	})
}

// TestGatherShortDeadlinesRaceTheTimer: requests whose deadlines end
// waits early (trySend) race the wait's timer and Close, on lanes whose
// callers come back; every request is delivered exactly once and every
// worker exits.
func TestGatherShortDeadlinesRaceTheTimer(t *testing.T) {
	for i := range 150 {
		delay := time.Duration(rand.IntN(400)) * time.Microsecond
		closeWhileSending(t, i, delay, 4000*time.Microsecond, 6, 25, func(tl *testLane, c, j int) {
			d := time.Minute
			if rand.IntN(2) == 0 {
				d = time.Duration(rand.IntN(2000)) * time.Microsecond
			}
			tl.send(tl.req(fmt.Sprint(c, "-", j), d), (c+j)%3 == 0)
			time.Sleep(time.Duration(rand.IntN(150)) * time.Microsecond)
		})
	}
}
