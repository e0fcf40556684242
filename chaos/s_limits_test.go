package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// splitView makes client A reach only masters 0, 1 and 2 (its requests to
// 3 and 4 vanish), while B reaches all five directly: the documented
// counterexamples' setup.
func splitView(t *testing.T, e *env, fenced bool) (a, b Locker) {
	t.Helper()
	ams := e.masters("A")
	warm(t, ams, 2)
	for _, i := range []int{3, 4} {
		if err := e.group("A")[i].BlackholeUp(); err != nil {
			t.Fatal(err)
		}
	}
	bms := e.direct()
	warm(t, bms, 2)
	cfg := LockConfig{Fencing: fenced}
	return e.locker(ams, cfg), e.locker(bms, cfg)
}

// holdRace: A obtains key; fault runs (told when A's validity ends); then B
// tries until bWait has passed, again after about bRetry each time. The
// ledger gets A's interval (A works through its whole validity) and B's.
type raceResult struct {
	aValid   time.Duration // A's validity at Obtain
	bAfter   time.Duration // B obtained this long after A (-1: never)
	overlap  time.Duration // how long before A's validity ended B got in
	bErr     error
	ledger   *Ledger
	aFence   int64
	bFence   int64
	aToken   string
	bToken   string
	resource *FencedResource
}

func holdRace(t *testing.T, a, b Locker, key string, ttl, bWait, bRetry time.Duration, fault func(aUntil time.Time)) raceResult {
	t.Helper()
	rr, err := tryHoldRace(a, b, key, ttl, bWait, bRetry, fault)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}

// tryHoldRace is holdRace, safe outside the test's goroutine.
func tryHoldRace(a, b Locker, key string, ttl, bWait, bRetry time.Duration, fault func(aUntil time.Time)) (raceResult, error) {
	rr := raceResult{ledger: &Ledger{}, bAfter: -1, resource: &FencedResource{}}
	// A retries for up to a TTL: a request of an earlier holder that
	// reached a master late (its caller had timed out; an unguarded lock
	// sends no barrier) can leave a key there for one TTL, and on a busy
	// machine one of A's three masters can miss a node timeout.
	actx, acancel := context.WithTimeout(context.Background(), ttl)
	defer acancel()
	lockA, err := a.Obtain(actx, key, ttl, RetryEvery(20*time.Millisecond))
	if err != nil {
		return rr, fmt.Errorf("A could not obtain with 3/5 reachable: %w", err)
	}
	a0 := time.Now()
	rr.aValid = lockA.Validity()
	aUntil := a0.Add(rr.aValid)
	rr.aFence, rr.aToken = lockA.Fence(), lockA.Token()
	rr.ledger.Record(Interval{Key: key, Holder: lockA.Token(), Fence: rr.aFence, Start: a0, End: aUntil, ValidUntil: aUntil})
	fault(aUntil)
	ctx, cancel := context.WithTimeout(context.Background(), bWait)
	defer cancel()
	lockB, err := b.Obtain(ctx, key, ttl, RetryEvery(bRetry))
	rr.bErr = err
	if err == nil {
		b0 := time.Now()
		rr.bAfter = b0.Sub(a0)
		rr.overlap = aUntil.Sub(b0)
		rr.bFence, rr.bToken = lockB.Fence(), lockB.Token()
		rr.ledger.Record(Interval{Key: key, Holder: lockB.Token(), Fence: rr.bFence, Start: b0, End: b0.Add(time.Millisecond), ValidUntil: b0.Add(lockB.Validity())})
		// Both write to a fenced resource: A's write is due now (it still
		// believes it holds the lock), B's too.
		rr.resource.Write(key, rr.bToken, rr.bFence)
		rr.resource.Write(key, rr.aToken, rr.aFence)
		lockB.Release(context.Background())
	}
	return rr, nil
}

func (rr raceResult) report(r *row) LedgerStats {
	r.set("a_validity", rr.aValid)
	if rr.bAfter < 0 {
		r.set("b_obtained_after_ms", "never")
	} else {
		r.set("b_obtained_after", rr.bAfter)
		r.set("b_inside_a_validity_by", rr.overlap)
	}
	st := rr.ledger.Stats()
	r.set("promised_overlaps", st.PromisedOverlaps)
	return st
}

// S8: master 2 restarts empty while A holds {0,1,2}; mitigations: a
// restart delayed past the TTL, and AOF (appendfsync always).
func TestS08RestartNoPersistence(t *testing.T) {
	admit(t, light)
	restartNoPersistence(t, library)
}

func restartNoPersistence(t *testing.T, sub *subject) {
	const ttl = 1500 * time.Millisecond
	for _, v := range []struct{ name, kind, fault, expected string }{
		{"immediate", "DOCUMENTS", "A holds {0,1,2}; SIGKILL master 2, restart empty at once", "B obtains while A valid"},
		{"delayed-restart", "MUST", "same, master 2 restarted after TTL+100ms", "0 promised overlaps; B after A"},
		{"aof-always", "MUST", "same, master 2 on AOF appendfsync always", "0 promised overlaps; B after A"},
	} {
		if !sub.runs(v.name) {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			r := newRow(t, sub, "S8 restart-no-persistence/"+v.name, v.kind, v.fault, v.expected)
			e := newEnv(t, sub, 5, func(i int, o *redistest.Options) { o.Persist = i == 2 && v.name == "aof-always" })
			a, b := splitView(t, e, false)
			m2 := e.servers[2]
			rr := holdRace(t, a, b, "k", ttl, ttl+redialProbe+time.Second, 20*time.Millisecond, func(time.Time) {
				switch v.name {
				case "immediate":
					if err := m2.Restart(false); err != nil {
						t.Fatal(err)
					}
				case "delayed-restart":
					m2.RestartAfter(ttl+100*time.Millisecond, false)
				case "aof-always":
					if err := m2.Restart(true); err != nil {
						t.Fatal(err)
					}
				}
			})
			st := rr.report(r)
			if v.kind == "DOCUMENTS" {
				r.documents(st.PromisedOverlaps >= 1, "B obtained after %v, A valid for %v (err %v)", rr.bAfter, rr.aValid, rr.bErr)
			} else {
				r.must(st.PromisedOverlaps == 0, "B obtained %v inside A's validity", rr.overlap)
				r.must(rr.bErr == nil, "B never obtained after A's lock lapsed: %v", rr.bErr)
			}
			if v.name == "delayed-restart" {
				if err := m2.WaitRestart(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// S10: one master's wall clock jumps or runs fast (LD_PRELOAD shim).
func TestS10ClockOneMaster(t *testing.T) {
	admit(t, light)
	clockOneMaster(t, library)
}

func clockOneMaster(t *testing.T, sub *subject) {
	t.Run("jump", func(t *testing.T) {
		if !sub.runs("jump") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S10 clock-jump-one-master", "DOCUMENTS", "A holds {0,1,2}; master 2 clock +2xTTL", "B obtains while A valid (control: jump 0 => no)")
		clock := newClock(t)
		e := newEnv(t, sub, 5, func(i int, o *redistest.Options) {
			if i == 2 {
				o.Env = clock.Env()
			}
		})
		a, b := splitView(t, e, false)
		const ttl = 2 * time.Second
		control := holdRace(t, a, b, "control", ttl, 400*time.Millisecond, 20*time.Millisecond, func(time.Time) {})
		cst := control.ledger.Stats()
		if control.bAfter < 0 {
			r.set("control_b_obtained", "never")
		} else {
			r.set("control_b_obtained_after", control.bAfter)
		}
		rr := holdRace(t, a, b, "k", ttl, 400*time.Millisecond, 20*time.Millisecond, func(time.Time) {
			if err := clock.Jump(2 * ttl); err != nil {
				t.Fatal(err)
			}
		})
		st := rr.report(r)
		r.must(cst.PromisedOverlaps == 0 && control.bErr != nil, "control (no jump): B obtained after %v", control.bAfter)
		r.documents(st.PromisedOverlaps >= 1, "B obtained after %v, A valid for %v (err %v)", rr.bAfter, rr.aValid, rr.bErr)
	})
	for _, v := range []struct {
		rate     float64
		kind     string
		expected string
		ttl      time.Duration
		rounds   int
		lead     time.Duration // B starts polling this long before A's validity ends
		poll     time.Duration
	}{
		{1.009, "MUST", "0 promised overlaps (inside the 1% drift factor)", 2 * time.Second, 4, 30 * time.Millisecond, time.Millisecond},
		{1.5, "DOCUMENTS", "promised overlaps >= 1 (drift far past the factor)", 300 * time.Millisecond, 3, 300 * time.Millisecond, 20 * time.Millisecond},
	} {
		name := fmt.Sprintf("rate-%v", v.rate)
		if !sub.runs(name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			r := newRow(t, sub, fmt.Sprintf("S10 clock-drift/x%v", v.rate), v.kind,
				fmt.Sprintf("master 2 clock at x%v; A holds {0,1,2} to validity end (TTL %v), B polls from %v before", v.rate, v.ttl, v.lead), v.expected)
			clock := newClock(t)
			e := newEnv(t, sub, 5, func(i int, o *redistest.Options) {
				if i == 2 {
					o.Env = clock.Env()
				}
			})
			a, b := splitView(t, e, false)
			if err := clock.Rate(v.rate); err != nil {
				t.Fatal(err)
			}
			// At x1.009 B starts polling 30ms before A's validity ends, every
			// 1ms or so. With TTL 2s, master 2 at x1.009 drops A's key 17.8ms early,
			// still 4ms after A's validity (drift allowance 22ms) ended; a
			// lock without the allowance claims about 17ms more than it has.
			ttl, rounds := v.ttl, v.rounds
			ledger := &Ledger{}
			var minGap time.Duration = time.Hour
			// The rounds overlap, each on a key of its own, 100ms apart so
			// that only one B polls at a time.
			rrs := make([]raceResult, rounds)
			errs := make([]error, rounds)
			var wg sync.WaitGroup
			for i := range rounds {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * 100 * time.Millisecond)
					rrs[i], errs[i] = tryHoldRace(a, b, fmt.Sprintf("k%d", i), ttl, v.lead+200*time.Millisecond, v.poll, func(aUntil time.Time) {
						time.Sleep(time.Until(aUntil.Add(-v.lead)))
					})
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for i, rr := range rrs {
				for _, iv := range rr.ledger.Intervals() {
					ledger.Record(iv)
				}
				if rr.bAfter >= 0 {
					minGap = min(minGap, -rr.overlap)
					r.note("round %d: B obtained %v after A, %v before A's validity ended", i, rr.bAfter, rr.overlap)
				}
			}
			st := ledger.Stats()
			r.set("holds", rounds)
			r.set("promised_overlaps", st.PromisedOverlaps)
			r.set("min_gap_b_after_a_validity", minGap)
			if v.kind == "MUST" {
				r.must(st.PromisedOverlaps == 0, "promised_overlaps=%d at rate %v", st.PromisedOverlaps, v.rate)
			} else {
				r.documents(st.PromisedOverlaps >= 1, "no overlap at rate %v over %d holds", v.rate, rounds)
			}
		})
	}
}

// S13: NewSingle under a stalled server, latency, and a restart without
// persistence.
func TestS13SingleInstance(t *testing.T) {
	admit(t, light)
	singleInstance(t, library)
}

func singleInstance(t *testing.T, sub *subject) {
	const ttl = time.Second
	for _, v := range []struct {
		name   string
		adjust func(*redis.Options)
	}{{"sigstop", nil}, {"sigstop-default-clients", defaultClient}} {
		if !sub.runs(v.name) {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			fault := "NewSingle; SIGSTOP the master 1s"
			if v.adjust != nil {
				fault += "; user-default go-redis client (1s timeouts)"
			}
			r := newRow(t, sub, "S13 single-instance/"+v.name, "MUST", fault, "0 acquisitions; probe <= 2x node timeout; recovers")
			e := newEnv(t, sub, 1, nil)
			ms := e.mastersWith("", v.adjust)
			warm(t, ms, 4)
			c := e.lockClient(ms)
			e.stop(0)
			p := probe(c, ttl, 20*time.Millisecond)
			time.Sleep(time.Second)
			stalled := p.Stats(time.Time{}, time.Now())
			e.cont(0)
			p.Healed()
			time.Sleep(redialProbe + 300*time.Millisecond)
			p.Stop()
			all := p.Stats(time.Time{}, time.Time{})
			probeFigures(r, "stalled_", stalled)
			r.set("stalled_successes", stalled.Successes)
			r.set("recovery", time.Duration(all.RecoveryMS*1e6))
			r.must(stalled.Successes == 0, "%d probes succeeded on a stopped master", stalled.Successes)
			// A failed Obtain waits the node timeout; Release, on a master that
			// does not answer, one more.
			r.must(stalled.Max <= 2*nodeTimeout+slack, "probe max %v, want <= %v", stalled.Max, 2*nodeTimeout+slack)
			r.must(all.RecoveryMS >= 0 && time.Duration(all.RecoveryMS*1e6) <= redialProbe+slack, "recovery %.0fms", all.RecoveryMS)
		})
	}
	t.Run("latency", func(t *testing.T) {
		if !sub.runs("latency") {
			t.SkipNow()
		}
		const L = 20 * time.Millisecond
		r := newRow(t, sub, "S13 single-instance/latency", "MUST", "NewSingle; latency 20ms (node timeout 50ms)",
			"Obtain, Extend, Release ok; validity <= ttl-L-drift")
		if sub.mutant == "" {
			// The first Obtain takes two round trips (the lane learns its
			// connection's ID first), a few ms inside the node timeout, and
			// when it misses, every later Obtain of this Client misses too:
			// nothing runs beside this row (schedule_test.go).
			t.Cleanup(sched.own())
		}
		e := newEnv(t, sub, 1, nil)
		ms := e.masters("w")
		warm(t, ms, 4)
		c := e.lockClient(ms)
		if err := e.group("w")[0].Latency(L, 0); err != nil {
			t.Fatal(err)
		}
		drift := time.Duration(float64(ttl)*redlock.DefaultDriftFactor) + 2*time.Millisecond
		var lats []time.Duration
		var maxV time.Duration
		ok, extended, released := 0, 0, 0
		var extErr, relErr error
		for i := range 10 {
			t0 := time.Now()
			lock, err := c.Obtain(context.Background(), fmt.Sprintf("l%d", i), ttl)
			lats = append(lats, time.Since(t0))
			if err == nil {
				ok++
				maxV = max(maxV, lock.Validity())
				if err := lock.Extend(context.Background(), ttl); err == nil {
					extended++
				} else {
					extErr = err
				}
				if err := lock.Release(context.Background()); err == nil {
					released++
				} else {
					relErr = err
				}
			}
		}
		p50, _, mx := Quantiles(lats)
		r.set("obtained", ok)
		r.set("extended", extended)
		r.set("released", released)
		if extErr != nil {
			r.note("an Extend error: %v", extErr)
		}
		if relErr != nil {
			r.note("a Release error: %v", relErr)
		}
		// One round trip of 20 ms fits the 50 ms node timeout many times over.
		r.must(mostly(extended, ok) && mostly(released, ok), "of %d locks, %d extended and %d released with one master 20 ms away", ok, extended, released)
		r.set("obtain_p50", p50)
		r.set("obtain_max", mx)
		r.set("max_validity", maxV)
		r.must(mostly(ok, 10), "obtained %d of 10", ok)
		r.must(maxV <= ttl-L-drift, "validity %v, want <= ttl-L-drift = %v", maxV, ttl-L-drift)
	})
	t.Run("restart", func(t *testing.T) {
		if !sub.runs("restart") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S13 single-instance/restart", "DOCUMENTS", "NewSingle; A holds; master restarts empty", "B obtains while A valid")
		e := newEnv(t, sub, 1, nil)
		a := e.lockClient(e.masters("A"))
		b := e.lockClient(e.direct())
		rr := holdRace(t, a, b, "k", ttl, time.Second, 20*time.Millisecond, func(time.Time) {
			if err := e.servers[0].Restart(false); err != nil {
				t.Fatal(err)
			}
		})
		st := rr.report(r)
		r.documents(st.PromisedOverlaps >= 1, "B obtained after %v, A valid for %v (err %v)", rr.bAfter, rr.aValid, rr.bErr)
	})
}

// tokenCount is how many masters hold key with token.
func (e *env) tokenCount(key, token string) int {
	n := 0
	for _, m := range e.direct() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if v, err := m.Get(ctx, e.prefix+key).Result(); err == nil && v == token {
			n++
		}
		cancel()
	}
	return n
}

// TestS08Extend: Extend after masters restarted empty re-takes the vanished
// keys (the library's Extend promises it), and a lapsed lock is never
// revived.
func TestS08Extend(t *testing.T) {
	admit(t, light)
	extendAfterRestart(t, library)
}

func extendAfterRestart(t *testing.T, sub *subject) {
	t.Run("retakes-vanished", func(t *testing.T) {
		if !sub.runs("retakes-vanished") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S8 restart/extend-retakes", "MUST", "A holds 5/5; masters 1,2 restart empty; A extends",
			"Extend ok, both vanished keys re-taken; B not obtained in A's validity")
		e := newEnv(t, sub, 5, nil)
		ams := e.direct()
		a := e.lockClient(ams)
		b := e.lockClient(e.direct())
		const ttl = time.Second
		lock, err := a.Obtain(context.Background(), "k", ttl)
		if err != nil {
			t.Fatal(err)
		}
		e.restart(false, 1, 2)
		settle(t, ams)
		before := e.tokenCount("k", lock.Token())
		// A caller retries an Extend that failed without ErrLockLost (masters
		// that did not answer): the lock is still its own until Validity ends.
		attempts := 0
		for attempts < 3 {
			attempts++
			if err = lock.Extend(context.Background(), ttl); err == nil || errors.Is(err, redlock.ErrLockLost) {
				break
			}
		}
		r.set("extend_attempts", attempts)
		returned := e.tokenCount("k", lock.Token())
		// Extend returns at quorum; a slower master's re-take finishes in the
		// background.
		time.Sleep(2 * nodeTimeout)
		after := e.tokenCount("k", lock.Token())
		r.set("holders_when_extend_returned", returned)
		r.set("holders_before_extend", before)
		r.set("holders_after_extend", after)
		r.set("validity_after_extend", lock.Validity())
		ctx, cancel := context.WithTimeout(context.Background(), lock.Validity()-50*time.Millisecond)
		_, bErr := b.Obtain(ctx, "k", ttl, RetryEvery(20*time.Millisecond))
		cancel()
		r.set("b_obtained_in_validity", bErr == nil)
		r.must(err == nil, "Extend after 2/5 restarted empty: %v", err)
		r.must(after == 5, "A's token on %d of 5 masters when Extend returned, %d shortly after (%d before): want both vanished keys re-taken by the first Extend, the restarted masters answer PING", returned, after, before)
		r.must(bErr != nil, "B obtained within A's extended validity")
		lock.Release(context.Background())
	})
	t.Run("watchdog-hears", func(t *testing.T) {
		if !sub.runs("watchdog-hears") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S8 restart/watchdog-hears", "MUST",
			"one master; A holds under KeepAlive (TTL 6s, renewed every 2s); the master restarts empty; B polls every 1ms",
			"A's watchdog re-takes the key before B gets it, or tells A's work within 500ms of B's grant, not at its next renewal (up to 2s)")
		e := newEnv(t, sub, 1, nil)
		ms := e.direct()
		a := e.lockClient(ms)
		b := e.lockClient(e.direct())
		const ttl = 6 * time.Second
		lock, err := a.Obtain(context.Background(), "k", ttl)
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop, err := lock.KeepAlive(context.Background(), RenewEvery(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		toldAt := make(chan time.Time, 1)
		go func() {
			<-wctx.Done()
			toldAt <- time.Now()
		}()
		for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
			n, err := ms[0].PubSubNumSub(context.Background(), "redlock:wake").Result()
			if err == nil && n["redlock:wake"] > 0 {
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("A's watchdog keeps no subscription to the master: %v", err)
			}
		}
		e.restart(false, 0)
		restarted := time.Now()
		bctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		lb, bErr := b.Obtain(bctx, "k", ttl, RetryEvery(time.Millisecond))
		cancel()
		bAt := time.Now()
		if bErr != nil {
			n := e.tokenCount("k", lock.Token())
			r.set("outcome", "a-retook")
			r.set("a_token_on_master", n == 1)
			r.must(n == 1, "B never obtained, yet A's token is not on the restarted master (B: %v)", bErr)
			r.must(wctx.Err() == nil, "A's work was told the lock is lost although its watchdog holds the key: %v", context.Cause(wctx))
			return
		}
		defer lb.Release(context.Background())
		r.set("outcome", "b-took")
		r.set("b_obtained_after_restart", bAt.Sub(restarted))
		select {
		case at := <-toldAt:
			r.set("a_told_after_b_returned", at.Sub(bAt))
			r.must(at.Sub(bAt) <= 500*time.Millisecond, "A's work told %v after B's grant, want within 500ms", at.Sub(bAt))
			r.must(errors.Is(context.Cause(wctx), redlock.ErrLockLost), "cause %v, want ErrLockLost", context.Cause(wctx))
		case <-time.After(3 * time.Second):
			r.must(false, "A's work not told within 3s of B's grant")
		}
	})
	t.Run("never-revived", func(t *testing.T) {
		if !sub.runs("never-revived") {
			t.SkipNow()
		}
		r := newRow(t, sub, "S8 restart/extend-after-lapse", "MUST", "A's lock lapses (TTL 200ms, waits 300ms); A extends",
			"ErrLockLost; nothing re-created")
		e := newEnv(t, sub, 5, nil)
		a := e.lockClient(e.direct())
		lock, err := a.Obtain(context.Background(), "k", 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		err = lock.Extend(context.Background(), time.Second)
		n := e.tokenCount("k", lock.Token())
		r.set("holders_after_extend", n)
		r.must(errors.Is(err, redlock.ErrLockLost), "Extend of a lapsed lock: %v, want ErrLockLost", err)
		r.must(n == 0, "a lapsed lock was revived on %d masters", n)
	})
}
