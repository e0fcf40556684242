package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// libraryFrames and mutantFrames are the function-name prefixes of the
// locks under test: the library, and the suite's broken locks
// (mutant_test.go).
var (
	libraryFrames = []string{"github.com/redlock-go/redlock."}
	mutantFrames  = []string{"github.com/redlock-go/redlock/chaos.(*mutant", "github.com/redlock-go/redlock/chaos.mutant"}
)

// frames are the function-name prefixes of sub's code.
func (s *subject) frames() []string {
	if s.mutant == "" {
		return libraryFrames
	}
	return mutantFrames
}

// lockGoroutines counts goroutines running code of the lock sub: a
// mutation check runs beside a scenario of the library (schedule_test.go),
// whose goroutines are not its own.
func lockGoroutines(sub *subject) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if slices.ContainsFunc(strings.Split(g, "\n"), func(line string) bool {
			return slices.ContainsFunc(sub.frames(), func(p string) bool { return strings.HasPrefix(line, p) })
		}) {
			n++
		}
	}
	return n
}

// lockGoroutinesAtMost waits (up to 200 ms) until at most n goroutines of
// the lock sub run and returns the last count: a goroutine that has
// signalled its owner (wg.Done in a defer) still shows its frames until it
// returns.
func lockGoroutinesAtMost(sub *subject, n int) int {
	return lockGoroutinesWithin(sub, n, 200*time.Millisecond)
}

// lockGoroutinesWithin is lockGoroutinesAtMost waiting up to d.
func lockGoroutinesWithin(sub *subject, n int, d time.Duration) int {
	got := lockGoroutines(sub)
	for i := 0; i < int(d/(10*time.Millisecond)) && got > n; i++ {
		time.Sleep(10 * time.Millisecond)
		got = lockGoroutines(sub)
	}
	return got
}

// S9: S8's restart with fencing on: the fence counter is lost with the
// key, so the next holder's fence can equal (or trail) the previous one's.
func TestS09RestartFencing(t *testing.T) {
	admit(t, light)
	restartFencing(t, library)
}

func restartFencing(t *testing.T, sub *subject) {
	for _, v := range []struct{ name, kind, expected string }{
		{"immediate", "DOCUMENTS", "fence regression (B's fence <= A's); equal fences reach the resource"},
		{"aof-always", "MUST", "B after A with a higher fence; 0 regressions"},
	} {
		if !sub.runs(v.name) {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			r := newRow(t, sub, "S9 restart-fencing/"+v.name, v.kind, "S8 with WithFencing: master 2 restarts while A holds {0,1,2}", v.expected)
			const ttl = 1500 * time.Millisecond
			e := newEnv(t, sub, 5, func(i int, o *redistest.Options) { o.Persist = i == 2 && v.name == "aof-always" })
			// Prime the counters on all five masters.
			primer := e.fencedClient(e.direct())
			for i := range 3 {
				l, err := primer.Obtain(context.Background(), "k", ttl)
				if err != nil {
					t.Fatalf("priming %d: %v", i, err)
				}
				l.Release(context.Background())
			}
			// A Release may return at a quorum of deletions: wait until the
			// key is gone from every master, so that A, with three masters
			// in view, does not find the primer's key on one of them.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for m, c := range e.direct() {
				for c.Exists(ctx, e.prefix+"k").Val() != 0 && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				if ctx.Err() != nil {
					t.Fatalf("master %d still holds the primer's key", m)
				}
			}
			a, b := splitView(t, e, true)
			rr := holdRace(t, a, b, "k", ttl, ttl+redialProbe+time.Second, 20*time.Millisecond, func(time.Time) {
				if err := e.servers[2].Restart(v.name == "aof-always"); err != nil {
					t.Fatal(err)
				}
			})
			st := rr.report(r)
			fs := rr.resource.Stats()
			r.set("a_fence", rr.aFence)
			r.set("b_fence", rr.bFence)
			r.set("fence_regressions", st.FenceRegressions)
			r.set("stale_rejected", fs.StaleRejected)
			r.set("equal_fence_conflicts", fs.EqualConflicts)
			r.must(rr.aFence > 0, "A's fence is 0 with WithFencing")
			bOK, aOK := libFencedReplay(t, e, rr.bFence, rr.aFence)
			r.set("lib_fencedwrite_b_then_a_accepted", fmt.Sprintf("%v,%v", bOK, aOK))
			if v.kind == "DOCUMENTS" {
				r.documents(rr.bErr == nil && st.FenceRegressions >= 1, "B obtained=%v with fence %d after A's %d", rr.bErr == nil, rr.bFence, rr.aFence)
				r.note("the library's FencedWrite admits equal fences, so after this restart both holders' writes pass")
			} else {
				r.must(bOK && !aOK, "FencedWrite accepted B=%v then A=%v, want B only", bOK, aOK)
				r.must(rr.bErr == nil, "B never obtained: %v", rr.bErr)
				r.must(st.PromisedOverlaps == 0 && st.FenceRegressions == 0 && rr.bFence > rr.aFence,
					"promised=%d regressions=%d fences A=%d B=%d", st.PromisedOverlaps, st.FenceRegressions, rr.aFence, rr.bFence)
			}
		})
	}
}

// libFencedReplay offers B's write, then A's, to the library's FencedWrite
// on a resource key of its own (on master 0, outside the lock prefix) and
// reports which it accepted.
func libFencedReplay(t *testing.T, e *env, bFence, aFence int64) (bOK, aOK bool) {
	t.Helper()
	if bFence < 1 || aFence < 1 {
		return false, false
	}
	rdb := e.direct()[0]
	key := fmt.Sprintf("resource:%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	errB := redlock.FencedWrite(ctx, rdb, key, bFence, "B")
	errA := redlock.FencedWrite(ctx, rdb, key, aFence, "A")
	for _, err := range []error{errB, errA} {
		if err != nil && !errors.Is(err, redlock.ErrStaleFence) {
			t.Fatalf("FencedWrite: %v", err)
		}
	}
	return errB == nil, errA == nil
}

// S11: the holder pauses past its TTL inside the critical section.
func TestS11ClientPause(t *testing.T) {
	admit(t, light)
	clientPause(t, library)
}

func clientPause(t *testing.T, sub *subject) {
	const ttl = 300 * time.Millisecond
	// pauseRace: A obtains, pauses 2xTTL, then "writes"; B polls from the
	// start and writes as soon as it holds the lock.
	pauseRace := func(t *testing.T, c Locker, res *FencedResource) *Ledger {
		ledger := &Ledger{}
		lockA, err := c.Obtain(context.Background(), "k", ttl)
		if err != nil {
			t.Fatal(err)
		}
		a0 := time.Now()
		aUntil := a0.Add(lockA.Validity())
		done := make(chan Interval)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*ttl)
			defer cancel()
			lockB, err := c.Obtain(ctx, "k", ttl, RetryEvery(20*time.Millisecond))
			if err != nil {
				done <- Interval{}
				return
			}
			b0 := time.Now()
			if res != nil {
				res.Write("k", lockB.Token(), lockB.Fence())
			}
			b1 := time.Now()
			iv := Interval{Key: "k", Holder: lockB.Token(), Fence: lockB.Fence(), Start: b0, End: b1, ValidUntil: b0.Add(lockB.Validity())}
			lockB.Release(context.Background())
			done <- iv
		}()
		time.Sleep(2 * ttl) // the pause: GC, a frozen VM, a slow disk
		if res != nil {
			res.Write("k", lockA.Token(), lockA.Fence())
		}
		ledger.Record(Interval{Key: "k", Holder: lockA.Token(), Fence: lockA.Fence(), Start: a0, End: time.Now(), ValidUntil: aUntil})
		lockA.Release(context.Background())
		if iv := <-done; iv.Holder != "" {
			ledger.Record(iv)
		}
		return ledger
	}

	t.Run("naive", func(t *testing.T) {
		if !sub.runs("naive") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S11 client-pause/naive", "DOCUMENTS", "A sleeps 2xTTL inside its critical section", "cs_overlaps>=1, promised=0")
		e := newEnv(t, sub, 5, nil)
		c := e.lockClient(e.direct())
		st := safety(r, pauseRace(t, c, nil), nil, nil)
		r.documents(st.CSOverlaps >= 1, "no critical-section overlap although A paused 2xTTL")
		r.must(st.PromisedOverlaps == 0, "promised_overlaps=%d, want 0", st.PromisedOverlaps)
	})
	t.Run("fenced", func(t *testing.T) {
		if !sub.runs("fenced") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S11 client-pause/fenced", "MUST", "same, writes go through a fenced resource", "stale_rejected>=1, resource overlap 0")
		e := newEnv(t, sub, 5, nil)
		c := e.fencedClient(e.direct())
		res := &FencedResource{}
		ledger := pauseRace(t, c, res)
		st := safety(r, ledger, nil, res)
		fs := res.Stats()
		r.set("interleaved_writes", fs.Interleaved)
		if ivs := ledger.Intervals(); len(ivs) == 2 {
			slices.SortFunc(ivs, func(x, y Interval) int { return x.Start.Compare(y.Start) })
			bOK, aOK := libFencedReplay(t, e, ivs[1].Fence, ivs[0].Fence)
			r.set("lib_fencedwrite_b_then_a_accepted", fmt.Sprintf("%v,%v", bOK, aOK))
			r.must(bOK && !aOK, "the library's FencedWrite accepted B=%v then paused A=%v, want B only", bOK, aOK)
		}
		r.must(fs.StaleRejected >= 1, "the paused holder's write was not rejected (stale_rejected=%d)", fs.StaleRejected)
		r.must(fs.Interleaved == 0 && fs.EqualConflicts == 0, "interleaved=%d equal=%d at the resource", fs.Interleaved, fs.EqualConflicts)
		r.must(st.FenceRegressions == 0, "fence_regressions=%d", st.FenceRegressions)
	})
	t.Run("do-partitioned", func(t *testing.T) {
		if !sub.runs("do-partitioned") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S11 client-pause/do-partitioned", "MUST",
			"Do; A's network to all 5 blackholed while fn works", "ctx cancelled (ErrLockLost) by validity end; cs_overlaps=0")
		e := newEnv(t, sub, 5, nil)
		ams := e.masters("A")
		warm(t, ams, 4)
		a := e.lockClient(ams)
		b := e.lockClient(e.direct())
		const ttl = 600 * time.Millisecond
		ledger := &Ledger{}
		var cutAt, cancelAt, fnStart time.Time
		var cause error
		bDone := make(chan Interval, 1)
		doErr := a.Do(context.Background(), "k", ttl, func(ctx context.Context) error {
			fnStart = time.Now()
			time.Sleep(ttl / 2) // a renewal or so happens normally
			cutAt = time.Now()
			for _, p := range e.group("A") {
				p.BlackholeUp()
			}
			go func() { // B polls while A is cut off
				bctx, cancel := context.WithTimeout(context.Background(), 3*ttl)
				defer cancel()
				l, err := b.Obtain(bctx, "k", ttl, RetryEvery(20*time.Millisecond))
				if err != nil {
					bDone <- Interval{}
					return
				}
				b0 := time.Now()
				bDone <- Interval{Key: "k", Holder: l.Token(), Start: b0, End: b0.Add(time.Millisecond), ValidUntil: b0.Add(l.Validity())}
				l.Release(context.Background())
			}()
			select {
			case <-ctx.Done():
			case <-time.After(4 * ttl):
			}
			cancelAt = time.Now()
			cause = context.Cause(ctx)
			return nil
		})
		ledger.Record(Interval{Key: "k", Holder: "A", Start: fnStart, End: cancelAt, ValidUntil: cancelAt})
		for _, p := range e.group("A") {
			p.Heal()
		}
		if iv := <-bDone; iv.Holder != "" {
			ledger.Record(iv)
			r.set("b_obtained_after_cut", iv.Start.Sub(cutAt))
		}
		r.set("cancelled_after_cut", cancelAt.Sub(cutAt))
		st := safety(r, ledger, nil, nil)
		r.must(!cancelAt.IsZero() && cancelAt.Before(cutAt.Add(ttl+slack)), "fn's ctx ended %v after the cut, want <= TTL %v", cancelAt.Sub(cutAt), ttl)
		r.must(errors.Is(cause, redlock.ErrLockLost), "context.Cause = %v, want ErrLockLost", cause)
		r.must(errors.Is(doErr, redlock.ErrLockLost), "Do returned %v, want an error matching ErrLockLost", doErr)
		r.must(st.CSOverlaps == 0, "cs_overlaps=%d: B got in before A's fn was told", st.CSOverlaps)
	})
	t.Run("sigstop-subprocess", func(t *testing.T) {
		if !sub.runs("sigstop-subprocess") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S11 client-pause/sigstop-worker", "DOCUMENTS",
			"worker process under Do frozen (SIGSTOP) 2xTTL", "B obtains while frozen; on SIGCONT the worker learns ErrLockLost at once")
		e := newEnv(t, sub, 5, nil)
		b := e.lockClient(e.direct())
		const ttl = 600 * time.Millisecond
		w := startHolder(t, e, "k", ttl)
		held := w.wait(t, "HELD", 5*time.Second)
		time.Sleep(100 * time.Millisecond)
		if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopAt := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*ttl)
		lockB, err := b.Obtain(ctx, "k", ttl, RetryEvery(20*time.Millisecond))
		cancel()
		var bAt time.Time
		if err == nil {
			bAt = time.Now()
			r.set("b_obtained_after_stop", bAt.Sub(stopAt))
			lockB.Release(context.Background())
		}
		time.Sleep(time.Until(stopAt.Add(2 * ttl)))
		w.cmd.Process.Signal(syscall.SIGCONT)
		contAt := time.Now()
		lost, ok := w.next("LOST", 3*time.Second)
		r.set("worker_held_before_stop", stopAt.Sub(held.at))
		r.documents(err == nil && bAt.Before(contAt), "B did not obtain while the worker was frozen: %v", err)
		if !r.must(ok, "worker never learned it lost the lock (3s after SIGCONT)") {
			return
		}
		r.set("lost_signal_after_cont", lost.at.Sub(contAt))
		r.note("worker: %s", lost.text)
		r.must(lost.at.Sub(contAt) <= slack && strings.Contains(lost.text, "lock lost"),
			"worker learned %q %v after SIGCONT, want ErrLockLost within %v", lost.text, lost.at.Sub(contAt), slack)
	})
}

// S12: Do's watchdog while a majority stalls mid-lock.
func TestS12WatchdogUnderFaults(t *testing.T) {
	admit(t, light)
	watchdogs(t, library)
}

func watchdogs(t *testing.T, sub *subject) {
	t.Run("suite-clients", func(t *testing.T) {
		if !sub.runs("suite-clients") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S12 watchdog-under-faults", "MUST", "Do TTL 1s; SIGSTOP 3/5 at 0.5s",
			"ctx cancelled (ErrLockLost) by validity end; Do err ErrLockLost; goroutines back (the wake subscriptions after their 2s linger)")
		watchdogUnderFaults(t, r, nil)
	})
	t.Run("default-clients", func(t *testing.T) {
		if !sub.runs("default-clients") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S12 watchdog-under-faults/default-clients", "MUST",
			"same, user-default go-redis clients: a renewal hangs up to 1s", "same, on time although the renewal hangs")
		watchdogUnderFaults(t, r, defaultClient)
	})
	t.Run("slow-network", func(t *testing.T) {
		if !sub.runs("slow-network") {
			t.SkipNow()
		}
		const L = 15 * time.Millisecond
		r := newRow(t, sub, "S12 watchdog/slow-network", "MUST", "Do TTL 600ms for 1.5s; every master 15ms away (node timeout 50ms)",
			"renewals succeed: fn not cancelled, Do returns nil")
		e := newEnv(t, sub, 5, nil)
		ms := e.masters("w")
		warm(t, ms, 4)
		c := e.lockClient(ms)
		for _, p := range e.group("w") {
			if err := p.Latency(L, 0); err != nil {
				t.Fatal(err)
			}
		}
		var cause error
		var ran time.Duration
		start := time.Now()
		// Bounded: a lock that never gets the masters fails the row, it does
		// not retry forever.
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		doErr := c.Do(dctx, "k", 600*time.Millisecond, func(ctx context.Context) error {
			t0 := time.Now()
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
			case <-time.After(1500 * time.Millisecond):
			}
			ran = time.Since(t0)
			return nil
		}, RetryEvery(20*time.Millisecond))
		r.set("fn_ran", ran)
		r.set("do_took", time.Since(start))
		if cause != nil {
			r.note("fn's context ended: %v", cause)
		}
		r.must(cause == nil && doErr == nil, "the lock was lost with every master %v away: fn ran %v, cause %v, Do err %v", L, ran, cause, doErr)
	})
	t.Run("close-during-do", func(t *testing.T) {
		if !sub.runs("close-during-do") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S12 watchdog/close-during-do", "MUST", "Client.Close while Do's fn runs",
			"fn ctx cancelled (cause ErrClosed); Close waits for Do; lock released")
		e := newEnv(t, sub, 5, nil)
		c := e.lockClient(e.direct())
		type ending struct {
			cause error
			at    time.Time
		}
		fnEnded := make(chan ending, 1)
		doDone := make(chan error, 1)
		held := make(chan struct{})
		// Do again while an attempt ends before fn runs (a first Obtain
		// slowed by a busy machine): the row is about Close, not Obtain.
		// A failed attempt may leave a key on a master whose undo timed
		// out: the next waits until none is left (at most its TTL), so
		// that it is not refused there, nor counted as a key Close left.
		type tries struct {
			n    int
			errs []error
		}
		tried := make(chan tries, 1)
		inspect := e.direct()
		keysLeft := func() int {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return ScanResidual(ctx, inspect, e.prefix+"*").Keys
		}
		go func() {
			var tr tries
			for {
				tr.n++
				ran := false
				err := c.Do(context.Background(), "k", time.Second, func(ctx context.Context) error {
					ran = true
					close(held)
					select {
					case <-ctx.Done():
					case <-time.After(3 * time.Second):
					}
					cause := context.Cause(ctx)
					time.Sleep(20 * time.Millisecond) // fn winds down; Close must wait
					fnEnded <- ending{cause, time.Now()}
					return nil
				})
				if !ran {
					tr.errs = append(tr.errs, err)
				}
				if ran || tr.n == 3 {
					tried <- tr
					doDone <- err
					return
				}
				for end := time.Now().Add(1200 * time.Millisecond); keysLeft() > 0 && time.Now().Before(end); {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
		select {
		case <-held:
		case <-time.After(8 * time.Second):
			t.Fatal("Do never ran fn")
		case tr := <-tried:
			select {
			case <-held: // fn ran at the last attempt
				tried <- tr
			default:
				t.Fatalf("Do never ran fn in %d attempts: %v", tr.n, tr.errs)
			}
		}
		closeAt := time.Now()
		c.Close()
		closeDone := time.Now()
		var end ending
		select {
		case end = <-fnEnded:
		default: // fn still runs: Close did not wait for it
		}
		r.must(!end.at.IsZero() && !closeDone.Before(end.at), "Close returned before Do's fn ended")
		if end.at.IsZero() {
			end = <-fnEnded
		}
		doErr := <-doDone
		tr := <-tried
		r.set("do_attempts", tr.n)
		if len(tr.errs) > 0 {
			r.note("Do's attempts before fn ran failed: %v", tr.errs)
		}
		res := e.residual()
		r.set("close_took", closeDone.Sub(closeAt))
		r.set("residual_keys", res.Keys)
		r.must(errors.Is(end.cause, redlock.ErrClosed), "fn's cause %v, want ErrClosed", end.cause)
		r.must(res.Keys == 0, "%d lock keys left after Close during Do (Do err %v)", res.Keys, doErr)
	})
}

func watchdogUnderFaults(t *testing.T, r *row, adjust func(*redis.Options)) {
	e := newEnv(t, r.sub, 5, nil)
	ms := e.mastersWith("", adjust)
	warm(t, ms, 4)
	before := lockGoroutines(r.sub)
	c := e.lockClient(ms)
	const ttl = time.Second
	idle := lockGoroutines(r.sub)
	var stopAt, cancelAt time.Time
	var cause error
	start := time.Now()
	doErr := c.Do(context.Background(), "k", ttl, func(ctx context.Context) error {
		time.Sleep(ttl / 2)
		e.stop(0, 1, 2)
		stopAt = time.Now()
		select {
		case <-ctx.Done():
		case <-time.After(3 * ttl):
		}
		cancelAt = time.Now()
		cause = context.Cause(ctx)
		return nil
	})
	returned := time.Now()
	e.cont(0, 1, 2)
	// The Client's wake subscriptions, which a watchdog keeps, linger 2s
	// after its last use.
	afterDo := lockGoroutinesWithin(r.sub, idle, 2500*time.Millisecond)
	c.Close()
	afterClose := lockGoroutinesAtMost(r.sub, before)
	r.set("cancelled_after_stop", cancelAt.Sub(stopAt))
	r.set("do_returned_after_cancel", returned.Sub(cancelAt))
	r.set("fn_ran", cancelAt.Sub(start))
	r.set("lib_goroutines_before_do", idle)
	r.set("lib_goroutines_after_do", afterDo)
	r.set("lib_goroutines_before_new", before)
	r.set("lib_goroutines_after_close", afterClose)
	r.must(!stopAt.IsZero() && cancelAt.Sub(stopAt) <= ttl+20*time.Millisecond,
		"fn's ctx ended %v after the stall began, want <= TTL (the last renewal started before it)", cancelAt.Sub(stopAt))
	r.must(errors.Is(cause, redlock.ErrLockLost), "context.Cause = %v, want ErrLockLost", cause)
	r.must(errors.Is(doErr, redlock.ErrLockLost), "Do returned %v, want an error matching ErrLockLost", doErr)
	r.must(returned.Sub(cancelAt) <= 2*nodeTimeout+slack, "Do returned %v after fn", returned.Sub(cancelAt))
	r.must(afterDo <= idle, "library goroutines: %d idle, %d after Do returned", idle, afterDo)
	r.must(afterClose <= before, "library goroutines: %d before New, %d after Close", before, afterClose)
}

// S14: the holder's process dies (SIGKILL) mid-work under Do.
func TestS14HolderCrash(t *testing.T) {
	admit(t, light)
	holderCrash(t, library)
}

func holderCrash(t *testing.T, sub *subject) {
	r := newRow(t, sub, "S14 holder-crash", "MUST", "worker process under Do SIGKILLed mid-work",
		"another worker obtains within TTL + one retry delay; nothing else locked")
	e := newEnv(t, sub, 5, nil)
	b := e.lockClient(e.direct())
	const ttl = time.Second
	const retry = 100 * time.Millisecond
	w := startHolder(t, e, "k", ttl)
	w.wait(t, "HELD", 5*time.Second)
	time.Sleep(ttl / 2) // a renewal has run
	if err := w.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killAt := time.Now()
	w.cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 3*ttl)
	defer cancel()
	lock, err := b.Obtain(ctx, "k", ttl, RetryEvery(retry))
	after := time.Since(killAt)
	r.set("obtained_after_kill", after)
	if err == nil {
		lock.Release(context.Background())
	}
	time.Sleep(50 * time.Millisecond)
	res := e.residual()
	r.set("residual_keys", res.Keys)
	bound := ttl + retry*3/2 + slack // LinearBackoff waits up to 1.5x its delay
	r.must(err == nil && after <= bound, "obtained=%v after %v, want within %v (err %v)", err == nil, after, bound, err)
	r.must(res.Keys == 0 && res.NoExpiry == 0, "%d lock keys (%d without expiry) left after the release", res.Keys, res.NoExpiry)
}

// holder is a worker subprocess (the test binary in helper mode).
type holder struct {
	cmd   *exec.Cmd
	lines chan line
}

type line struct {
	text string
	at   time.Time
}

func startHolder(t *testing.T, e *env, key string, ttl time.Duration) *holder {
	t.Helper()
	var addrs []string
	for _, s := range e.servers {
		addrs = append(addrs, s.Addr())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=holder", "CHAOS_ADDRS="+strings.Join(addrs, ","),
		"CHAOS_KEY="+key, "CHAOS_PREFIX="+e.prefix, "CHAOS_TTL="+ttl.String(), "CHAOS_MUTANT="+e.sub.mutant)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, lines: make(chan line, 16)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- line{sc.Text(), time.Now()}
		}
		io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	return h
}

// wait returns the first line starting with prefix, or fails the test.
func (h *holder) wait(t *testing.T, prefix string, d time.Duration) line {
	t.Helper()
	l, ok := h.next(prefix, d)
	if !ok {
		t.Fatalf("no %s from the worker within %v", prefix, d)
	}
	return l
}

// next returns the first line starting with prefix within d; the line's
// own timestamp (the worker's wall clock) is used when it has one.
func (h *holder) next(prefix string, d time.Duration) (line, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				return line{}, false
			}
			if !strings.HasPrefix(l.text, prefix) {
				continue
			}
			if f := strings.Fields(l.text); len(f) > 1 {
				if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					l.at = time.Unix(0, ns)
				}
			}
			return l, true
		case <-timer.C:
			return line{}, false
		}
	}
}

// S1 with Do: workers take the hot key through Do (watchdog on), each
// critical section a lost-update increment.
func TestS01HotKeyDo(t *testing.T) {
	admit(t, alone)
	hotKeyDo(t, library)
}

func hotKeyDo(t *testing.T, sub *subject) {
	r := newRow(t, sub, "S1 hot-key/do-32", "MUST", "none; N=5, 32 workers, one key, through Do, each holds 1ms", "cs=lost=0")
	e := newEnv(t, sub, 5, nil)
	c := e.lockClient(e.direct())
	ledger, counter := &Ledger{}, &Counter{}
	var mu sync.Mutex
	var tries, done, notObtained int
	var other []string
	deadline := time.Now().Add(2 * time.Second)
	run, stop := untilOverlap(r, ledger)
	defer stop()
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := 0; i < 1000 && time.Now().Before(deadline) && run.Err() == nil; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := c.Do(ctx, "hot", time.Second, func(ctx context.Context) error {
					start := time.Now()
					counter.Increment(time.Millisecond)
					end := time.Now()
					ledger.Record(Interval{Key: "hot", Holder: fmt.Sprintf("w%d-%d", w, i), Start: start, End: end, ValidUntil: end})
					return nil
				}, RetryEvery(5*time.Millisecond))
				cancel()
				mu.Lock()
				tries++
				switch {
				case err == nil:
					done++
				case errors.Is(err, redlock.ErrNotObtained):
					notObtained++
				default:
					other = append(other, err.Error())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.set("do_calls", tries)
	r.set("completed", done)
	r.set("not_obtained", notObtained)
	if len(other) > 0 {
		r.note("other Do errors (%d), e.g. %s", len(other), other[0])
	}
	st := safety(r, ledger, counter, nil)
	mustSafe(r, st, counter)
	r.must(done >= 10, "only %d Do calls completed", done)
	r.must(len(other) == 0, "%d Do calls failed otherwise than ErrNotObtained", len(other))
}
