package wire

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The lane's rules (lane.go), against a fake transport in a synctest
// bubble: no Redis, and every wait in virtual time.

func TestLaneKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newTestLane(t)
		const n = 2000
		for i := range n {
			tl.send(tl.req(fmt.Sprint(i), time.Minute), i%3 == 0)
		}
		tl.await(t, n)
		tl.t.mu.Lock()
		defer tl.t.mu.Unlock()
		for i, k := range tl.t.seen {
			if k != fmt.Sprint(i) {
				t.Fatalf("request %s ran in position %d", k, i)
			}
		}
	})
}

func TestLaneDeliversEachRequestOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newTestLane(t)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 500 {
					tl.send(tl.req(fmt.Sprint(g, "-", i), time.Minute), i%2 == 0)
				}
			}()
		}
		wg.Wait()
		tl.await(t, 8*500)
		tl.mu.Lock()
		defer tl.mu.Unlock()
		for k, errs := range tl.delivered {
			if len(errs) != 1 || errs[0] != nil {
				t.Fatalf("request %s delivered %d times: %v", k, len(errs), errs)
			}
		}
	})
}

// TestLaneGathersTheNextWave: callers handed their replies at once come
// back at once with their next requests, and those go out together in one
// batch, not one caller's alone and the rest a round trip later. With one
// P the callers woken while the worker delivers wait in its run queue:
// without the worker's yield it takes the queue before they ran (the first
// to send wakes it, and it runs next). The scheduler now and then runs a
// goroutine of its global queue first, the yielding worker among them, so
// a wave may be split with the yield too: most waves must go out whole.
func TestLaneGathersTheNextWave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		tl := newTestLane(t)
		const callers, waves = 8, 50
		var wg sync.WaitGroup
		tl.lane.deliver = func(r *request) {
			if k := r.op.target.Key(); strings.HasPrefix(k, "first") {
				wg.Go(func() { // a caller woken by its reply
					tl.send(tl.req("second"+k[len("first"):], time.Minute), false)
				})
			}
		}
		whole := 0
		var split [][]int
		for w := range waves {
			tl.t.mu.Lock()
			from := len(tl.t.sizes)
			tl.t.mu.Unlock()
			entered, release := tl.t.blockNext()
			tl.send(tl.req(fmt.Sprint("block", w), time.Minute), false)
			<-entered
			for i := range callers {
				tl.send(tl.req(fmt.Sprint("first", w, "-", i), time.Minute), false)
			}
			release()
			wg.Wait()
			var sizes []int
			for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
				tl.t.mu.Lock()
				sizes = slices.Clone(tl.t.sizes[from:])
				tl.t.mu.Unlock()
				n := 0
				for _, z := range sizes {
					n += z
				}
				if n == 1+2*callers {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("wave %d: batches %v, %d of %d requests sent", w, sizes, n, 1+2*callers)
				}
			}
			if len(sizes) == 3 && sizes[2] == callers {
				whole++
			} else {
				split = append(split, sizes)
			}
		}
		if whole < waves*3/4 {
			t.Fatalf("%d of %d waves went out whole; the others' batches: %v (want [1 %d %d])", whole, waves, split, callers, callers)
		}
	})
}

// TestLaneDoesNotStallWhileGathering: a batch that overran its stall point
// has come back; the master answered, so the requests its callers send
// while the worker yields are queued, not failed as stalled.
func TestLaneDoesNotStallWhileGathering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		tl := newTestLane(t)
		var wg sync.WaitGroup
		tl.lane.deliver = func(r *request) {
			tl.record(r)
			k := r.op.target.Key()
			if strings.HasPrefix(k, "slow") {
				wg.Go(func() { tl.send(tl.req("after"+k, time.Minute), false) })
			}
		}
		entered, release := tl.t.blockNext()
		tl.send(tl.req("slow1", 20*time.Millisecond), false)
		tl.send(tl.req("slow2", 20*time.Millisecond), false)
		<-entered
		time.Sleep(60 * time.Millisecond) // past the batch's stall point: twice its 20ms
		release()
		wg.Wait()
		tl.await(t, 4)
		tl.mu.Lock()
		defer tl.mu.Unlock()
		for _, k := range []string{"afterslow1", "afterslow2"} {
			if errs := tl.delivered[k]; len(errs) != 1 || errs[0] != nil {
				t.Errorf("%s, sent as the overdue batch came back: %v, want one success", k, errs)
			}
		}
	})
}

func TestLaneSurvivesTransportPanic(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprint("inline=", inline), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tl := newTestLane(t)
				tl.t.panics = 1
				tl.send(tl.req("a", time.Minute), inline)
				tl.await(t, 1)
				tl.send(tl.req("b", time.Minute), inline)
				tl.await(t, 2)
				tl.mu.Lock()
				defer tl.mu.Unlock()
				var p Panicked
				if errs := tl.delivered["a"]; len(errs) != 1 || !errors.As(errs[0], &p) {
					t.Fatalf("the panicking batch's request got %v, want one Panicked", errs)
				}
				if errs := tl.delivered["b"]; len(errs) != 1 || errs[0] != nil {
					t.Fatalf("the next request got %v, want one success", errs)
				}
				if tl.t.resets != 1 {
					t.Fatalf("transport reset %d times after its panic, want 1", tl.t.resets)
				}
			})
		})
	}
}

func TestLaneInlineAndWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newTestLane(t)
		entered, release := tl.t.blockNext()
		go tl.send(tl.req("inline", time.Minute), true)
		<-entered
		// The lane is busy: these queue, and the worker must not run them
		// beside the inline caller (the fake transport panics on two execs).
		for i := range 10 {
			tl.send(tl.req(fmt.Sprint("queued-", i), time.Minute), i%2 == 0)
		}
		release()
		tl.await(t, 11)
		tl.mu.Lock()
		defer tl.mu.Unlock()
		for k, errs := range tl.delivered {
			if len(errs) != 1 || errs[0] != nil {
				t.Fatalf("%s: %v", k, errs)
			}
		}
	})
}

// TestLaneQueuesBehindAMasterNotAnswering: a request sent while the batch
// in flight is overdue queues, since its own deadline allows it to wait,
// and goes out once the master answers; it does not fail at once.
func TestLaneQueuesBehindAMasterNotAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl, release := stallLane(t)
		tl.send(tl.req("next", time.Minute), false)
		tl.send(tl.req("inline", time.Minute), true)
		if errs := tl.errsOf("next"); len(errs) != 0 {
			t.Fatalf("a request with a minute to wait, sent behind an overdue batch: %v at once, want it queued", errs)
		}
		if n := queueLen(tl.lane); n != 2 {
			t.Fatalf("%d requests queued behind the overdue batch, want 2", n)
		}
		release()
		tl.await(t, 3)
		for _, k := range []string{"next", "inline"} {
			if errs := tl.errsOf(k); len(errs) != 1 || errs[0] != nil {
				t.Fatalf("%s, queued behind a batch whose master answered late: %v, want one success", k, errs)
			}
		}
	})
}

// TestLaneQueueStaysBoundedWhileItsMasterIsNotAnswering: a frozen master
// holds its batch, and callers keep sending; their requests queue, but at
// most StalledQueue of them: beyond, a new request fails at once, so a
// frozen master holds no growing queue. Once the master answers, the
// queued ones go out.
func TestLaneQueueStaysBoundedWhileItsMasterIsNotAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl, release := stallLane(t)
		const n = 1000
		for i := range n {
			tl.send(tl.req(fmt.Sprint("late-", i), time.Minute), i%2 == 0)
		}
		for i := range n {
			errs := tl.errsOf(fmt.Sprint("late-", i))
			switch {
			case i < StalledQueue && len(errs) != 0:
				t.Fatalf("request %d, sent while fewer than %d waited: %v before the master answered, want it queued", i, StalledQueue, errs)
			case i >= StalledQueue && (len(errs) != 1 || !errors.Is(errs[0], ErrStalled) || !errors.Is(errs[0], context.DeadlineExceeded)):
				t.Fatalf("request %d, sent while %d waited for a master not answering: %v, want ErrStalled at once", i, StalledQueue, errs)
			}
		}
		if q := queueLen(tl.lane); q != StalledQueue {
			t.Fatalf("%d requests queued behind a master not answering, want %d", q, StalledQueue)
		}
		release()
		tl.await(t, n+1)
		for i := range StalledQueue {
			if errs := tl.errsOf(fmt.Sprint("late-", i)); len(errs) != 1 || errs[0] != nil {
				t.Fatalf("queued request %d once the master answered: %v, want one success", i, errs)
			}
		}
	})
}

// TestLaneMarksItsMasterByItsRequestsTimeouts: a request that waited most
// of its timeout in the queue (behind a slow batch) goes out with little
// of it left; its master has just been sent it, and is marked not
// answering only after twice the request's whole timeout, counted from
// when it was queued, not twice what was left of it.
func TestLaneMarksItsMasterByItsRequestsTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newTestLane(t)
		entered, release := tl.t.blockNext()
		defer release()
		tl.send(tl.req("slow", time.Minute), false)
		<-entered
		const timeout = 100 * time.Millisecond
		queuedAt := time.Now()
		tl.send(tl.req("late", timeout), false)
		time.Sleep(timeout * 4 / 5)
		entered, release2 := tl.t.blockNext()
		defer release2()
		release()
		<-entered // "late" is out, with a fifth of its timeout left or less
		tl.lane.mu.Lock()
		stalled := tl.stalled
		tl.lane.mu.Unlock()
		if got := stalled.Sub(queuedAt); got < 2*timeout {
			t.Fatalf("a request of a %v timeout queued, then sent after %v: its master is marked not answering %v after it was queued, want at least twice its timeout", timeout, timeout*4/5, got)
		}
		release2()
		tl.await(t, 2)
	})
}

// TestLaneDropsARequestWhoseDeadlinePassesBehindAStalledBatch: a request
// queued behind a batch whose master does not answer, and whose deadline
// passes before the master answers, is dropped (ErrQueued), never sent. When
// the queue is full, such requests are taken out at once to make room, a
// Release among them kept for the transport.
func TestLaneDropsARequestWhoseDeadlinePassesBehindAStalledBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl, release := stallLane(t)
		tl.send(tl.req("short", 5*time.Millisecond), false)
		for i := range StalledQueue - 1 {
			r := tl.req(fmt.Sprint("fill-", i), 5*time.Millisecond)
			if i == 0 {
				r.op.kind = KindRelease
			}
			tl.send(r, false)
		}
		time.Sleep(20 * time.Millisecond) // their deadlines have passed
		if errs := tl.errsOf("short"); len(errs) != 0 {
			t.Fatalf("a queued request: %v before the queue was full or the master answered", errs)
		}
		tl.send(tl.req("long", time.Minute), false) // the queue is full: the expired ones make room
		if errs := tl.errsOf("short"); len(errs) != 1 || !errors.Is(errs[0], ErrQueued) {
			t.Fatalf("a request whose deadline passed in a full queue: %v, want ErrQueued at once", errs)
		}
		if errs := tl.errsOf("long"); len(errs) != 0 {
			t.Fatalf("a request sent when expired ones filled the queue: %v, want it queued", errs)
		}
		if q := queueLen(tl.lane); q != 1 {
			t.Fatalf("%d requests queued, want the one still wanted", q)
		}
		tl.send(tl.req("expiring", 5*time.Millisecond), false)
		time.Sleep(20 * time.Millisecond)
		release()
		tl.await(t, StalledQueue+3)
		if errs := tl.errsOf("expiring"); len(errs) != 1 || !errors.Is(errs[0], ErrQueued) || !errors.Is(errs[0], context.DeadlineExceeded) {
			t.Fatalf("a request whose deadline passed while queued: %v, want ErrQueued", errs)
		}
		if errs := tl.errsOf("long"); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("the request still wanted: %v, want one success", errs)
		}
		tl.t.mu.Lock()
		defer tl.t.mu.Unlock()
		for _, k := range tl.t.seen {
			if k != "stuck" && k != "long" {
				t.Fatalf("%s was sent after its deadline passed in the queue (sent: %v)", k, tl.t.seen)
			}
		}
		tl.lane.mu.Lock() // the Release taken out is kept, for the transport's next tick
		kept := len(tl.kept) + len(tl.t.kept)
		tl.lane.mu.Unlock()
		if kept != 1 {
			t.Fatalf("%d Releases kept, want the one taken out of the queue", kept)
		}
	})
}

// TestLaneRefusesAGoneCallerWithItsCauseWhileStalled: on a lane whose
// master is not answering, a request whose caller has given up is not
// queued: it fails at once as skipped (its round reports the context's
// cause), not as the master's timeout, with room in the queue or not.
func TestLaneRefusesAGoneCallerWithItsCauseWhileStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl, release := stallLane(t)
		gone := make(chan struct{})
		close(gone)
		r := tl.req("gone", time.Minute)
		r.op.Done = gone
		tl.send(r, false)
		for i := range StalledQueue {
			tl.send(tl.req(fmt.Sprint("fill-", i), time.Minute), false)
		}
		r = tl.req("gone-full", time.Minute)
		r.op.Done = gone
		tl.send(r, false)
		for _, k := range []string{"gone", "gone-full"} {
			if errs := tl.errsOf(k); len(errs) != 1 || errs[0] != ErrSkipped {
				t.Fatalf("%s: a request whose caller gave up, on a lane whose master is not answering: %v, want ErrSkipped at once", k, errs)
			}
		}
		release()
		tl.await(t, StalledQueue+3)
	})
}

// TestLaneClosedWhileItsMasterIsNotAnswering: Close while the batch in
// flight is overdue refuses new requests (ErrClosed), keeps a Release
// nobody waits for, and once the master answers sends what was queued
// before, drops what expired meanwhile (never sent), and exits, closing
// its transport.
func TestLaneClosedWhileItsMasterIsNotAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &testLane{t: &fakeTransport{}, delivered: map[string][]error{}}
		tl.lane = newLane(tl.t, tl.record)
		var wg sync.WaitGroup
		wg.Add(1)
		go tl.work(&wg)
		entered, release := tl.t.blockNext()
		defer release()
		tl.send(tl.req("stuck", 10*time.Millisecond), false)
		<-entered
		time.Sleep(30 * time.Millisecond) // the master is not answering
		tl.send(tl.req("queued", time.Minute), false)
		tl.send(tl.req("expiring", 5*time.Millisecond), false)
		tl.close()
		tl.send(tl.req("after", time.Minute), false)
		undo := tl.req("undo", time.Minute)
		undo.op.kind = KindRelease
		tl.send(undo, false)
		time.Sleep(20 * time.Millisecond) // "expiring" has expired
		release()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the worker of a lane closed while its master was not answering did not exit once it answered")
		}
		want := map[string]error{"stuck": nil, "queued": nil, "expiring": ErrQueued, "after": ErrClosed, "undo": ErrClosed}
		for k, w := range want {
			if errs := tl.errsOf(k); len(errs) != 1 || !errors.Is(errs[0], w) || (w == nil && errs[0] != nil) {
				t.Errorf("%s: %v, want one %v", k, errs, w)
			}
		}
		tl.t.mu.Lock()
		defer tl.t.mu.Unlock()
		if !slices.Equal(tl.t.seen, []string{"stuck", "queued"}) {
			t.Errorf("sent %v, want [stuck queued]: what was queued before Close, and still wanted", tl.t.seen)
		}
		if !slices.Equal(tl.t.kept, []string{"undo"}) || !tl.t.closed {
			t.Errorf("kept Releases %v, transport closed %v: want [undo], handed over before it closed", tl.t.kept, tl.t.closed)
		}
	})
}

func TestLaneClosesAfterInline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &testLane{t: &fakeTransport{}, delivered: map[string][]error{}}
		tl.lane = newLane(tl.t, func(*request) {})
		var wg sync.WaitGroup
		wg.Add(1)
		go tl.work(&wg)
		parked(tl.lane)
		entered, release := tl.t.blockNext()
		sent := make(chan struct{})
		go func() {
			tl.send(tl.req("inline", time.Minute), true)
			close(sent)
		}()
		<-entered
		tl.close() // wakes the worker, which waits again for the inline caller to clear running
		parked(tl.lane)
		release()
		<-sent
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the worker sleeps on after Close: the inline caller did not wake it")
		}
		if !tl.t.closed {
			t.Fatal("the worker exited without closing its transport")
		}
	})
}

// TestLaneWaitsForItsCallers: callers that work a moment between their
// requests come back after each reply. With two cores the worker resumes
// on the other at once after a yield, before most of them are back, and
// their requests go out in two half batches a round trip apart; a lane
// whose callers come back waits for them.
func TestLaneWaitsForItsCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
		tl := newTestLane(t)
		tl.t.delay = 2 * time.Millisecond // a round trip: a quarter of it is plenty for the callers
		tl.lane.mu.Lock()
		tl.waitCallers = true
		tl.lane.mu.Unlock()
		const callers, rounds = 8, 80
		wait := loopCallers(tl, callers, rounds, func() { // a caller works a moment first
			for range 10 {
				runtime.Gosched()
			}
		})
		for c := range callers {
			tl.send(tl.req(fmt.Sprintf("c%d-0", c), time.Minute), false)
		}
		wait()
		tl.t.mu.Lock()
		sizes := slices.Clone(tl.t.sizes)
		tl.t.mu.Unlock()
		// Ideally one batch per round; a yield alone takes about two (measured:
		// 74-79 of 40 rounds). A straggler (this machine is busy, -race) makes
		// a wait run out now and then, and the lane pauses its waits.
		if len(sizes) > rounds*3/2 {
			t.Fatalf("%d callers' %d rounds took %d batches, want at most %d: %v", callers, rounds, len(sizes), rounds*3/2, sizes)
		}
	})
}

// TestLaneStopsWaitingForCallersThatDoNotReturn: callers that do not come
// back make a wait run out; the lane then expects fewer back, sends the next
// batches without waiting, and tries again later.
func TestLaneStopsWaitingForCallersThatDoNotReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := newTestLane(t)
		tl.t.delay = time.Millisecond
		tl.lane.mu.Lock()
		tl.waitCallers = true
		tl.lane.mu.Unlock()
		const waves = 34
		for w := range waves {
			entered, release := tl.t.blockNext()
			tl.send(tl.req(fmt.Sprint("block", w), time.Minute), false)
			<-entered
			tl.send(tl.req(fmt.Sprint("a", w), time.Minute), false)
			tl.send(tl.req(fmt.Sprint("b", w), time.Minute), false)
			release()
			tl.await(t, 3*(w+1))
			parked(tl.lane)
		}
		ranOut := tl.ranOutSoFar()
		// Without expecting fewer back after a wait ran out, every wave's
		// batch of two would wait out its timer.
		if ranOut < 2 || ranOut > waves/4 {
			t.Fatalf("%d of %d waves' batches whose callers did not come back waited out the timer, want 2 to %d: once, then none until the lane tries again", ranOut, waves, waves/4)
		}
	})
}
