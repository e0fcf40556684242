package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// redialProbe is go-redis's own recovery delay: after PoolSize failed dials
// to a master its pool fails fast and re-dials once a second
// (internal/pool tryDial), so a master that comes back is seen up to 1 s
// later whatever the lock library does.
const redialProbe = time.Second

// probe starts a Prober that obtains and releases a fresh key every
// interval on c, without retry. A probe counts the Obtain: a failed
// Release only leaves a key to expire.
func probe(c Locker, ttl, every time.Duration) *Prober {
	return StartProber(every, 500*time.Millisecond, 5000, func(ctx context.Context, n int) error {
		lock, err := c.Obtain(ctx, fmt.Sprintf("probe:%d", n), ttl)
		if err != nil {
			return err
		}
		_ = lock.Release(ctx)
		return nil
	})
}

// hotLoad runs, on ms, 8 workers contending for one key ("hot", TTL ttl)
// for dur, beside a probe every 20ms: the background of the minority
// faults (S2, S4). Receive the workers' stats from the channel.
func hotLoad(t *testing.T, e *env, ms []redis.UniversalClient, ttl, dur time.Duration) (Locker, *load, *Prober, <-chan *loadStats) {
	warm(t, ms, 4)
	c := e.lockClient(ms)
	p := probe(c, ttl, 20*time.Millisecond)
	l := &load{c: c, key: "hot", ttl: ttl, workers: 8, dur: dur,
		retry: 20 * time.Millisecond, obtainTimeout: 300 * time.Millisecond, hold: 2 * time.Millisecond}
	done := make(chan *loadStats)
	go func() { done <- l.run(context.Background()) }()
	return c, l, p, done
}

func probeFigures(r *row, prefix string, s ProbeStats) {
	r.set(prefix+"availability", s.Availability)
	r.set(prefix+"probes", s.Attempts)
	r.set(prefix+"probe_p50", s.P50)
	r.set(prefix+"probe_p90", s.P90)
	r.set(prefix+"probe_p99", s.P99)
	r.set(prefix+"probe_max", s.Max)
}

// S1: no fault, one hot key, 64 workers. Each holder holds the lock for 1
// ms between reading and writing the counter: long enough that a second
// holder is seen (the mutation check without NX counts overlaps).
func TestS01HotKey64(t *testing.T) {
	admit(t, alone)
	hotKey64(t, library)
}

func hotKey64(t *testing.T, sub *subject) {
	for _, v := range []struct {
		name    string
		n       int
		workers int
		dur     time.Duration
	}{{"redlock-5", 5, 64, 2500 * time.Millisecond}, {"single", 1, 64, 1500 * time.Millisecond}} {
		if !sub.runs(v.name) {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			r := newRow(t, sub, "S1 hot-key-64/"+v.name, "MUST", fmt.Sprintf("none; N=%d, %d workers, one key, each holds 1ms", v.n, v.workers),
				"cs=promised=lost=stale=0, fences increase")
			e := newEnv(t, sub, v.n, nil)
			c := e.fencedClient(e.direct())
			l := &load{c: c, key: "hot", ttl: time.Second, workers: v.workers, dur: v.dur,
				retry: 5 * time.Millisecond, obtainTimeout: time.Second, hold: time.Millisecond,
				counter: &Counter{}, ledger: &Ledger{}, fenced: true, res: &FencedResource{}}
			ctx, stop := untilOverlap(r, l.ledger)
			s := l.run(ctx)
			stop()
			s.report(r)
			r.set("max_wait", s.maxWait)
			st := safety(r, l.ledger, l.counter, l.res)
			mustSafe(r, st, l.counter)
			fs := l.res.Stats()
			r.must(fs.StaleRejected == 0 && fs.EqualConflicts == 0, "stale=%d equal=%d, want 0", fs.StaleRejected, fs.EqualConflicts)
			r.must(st.FenceRegressions == 0, "fence_regressions=%d, want 0", st.FenceRegressions)
			r.must(s.acquired >= 10, "acquisitions=%d in %v, want >= 10 (liveness)", s.acquired, v.dur)
			r.must(s.pastCtx <= slack, "an Obtain returned %v after its context's deadline", s.pastCtx)
			r.must(len(s.otherErrs) == 0, "unexpected errors: %v", s.otherErrs)
		})
	}
}

// S2: a minority of masters dies (SIGKILL, or refused connections), then
// comes back empty.
func TestS02MinorityDown(t *testing.T) {
	admit(t, light)
	minorityDown(t, library)
}

func minorityDown(t *testing.T, sub *subject) {
	for _, mode := range []string{"sigkill", "refused"} {
		if !sub.runs(mode) {
			continue
		}
		t.Run(mode, func(t *testing.T) {
			fault := "SIGKILL 2/5 for 1s, restart empty"
			if mode == "refused" {
				fault = "toxiproxy Stop 2/5 for 1s (refused)"
			}
			fault += "; 8 workers hold one key 2ms each"
			r := newRow(t, sub, "S2 minority-down/"+mode, "MUST", fault, "safety 0; availability>=99%; probe<=2*node timeout")
			e := newEnv(t, sub, 5, nil)
			group := ""
			if mode == "refused" {
				group = "w"
			}
			_, l, p, done := hotLoad(t, e, e.masters(group), 500*time.Millisecond, 2500*time.Millisecond)
			time.Sleep(500 * time.Millisecond)
			faultAt := time.Now()
			if mode == "sigkill" {
				e.kill(3, 4)
			} else {
				e.group("w")[3].Refuse()
				e.group("w")[4].Refuse()
			}
			time.Sleep(time.Second)
			healAt := time.Now()
			if mode == "sigkill" {
				e.restart(false, 3, 4)
			} else {
				for _, i := range []int{3, 4} {
					if err := e.group("w")[i].Accept(); err != nil {
						t.Fatal(err)
					}
				}
			}
			p.Healed()
			s := <-done
			p.Stop()
			s.report(r)
			all := p.Stats(time.Time{}, time.Time{})
			during := p.Stats(faultAt, healAt)
			probeFigures(r, "", all)
			r.set("fault_availability", during.Availability)
			r.set("fault_probe_max", during.Max)
			st := safety(r, l.ledger, l.counter, nil)
			mustSafe(r, st, l.counter)
			// 99 %; through the in-process toxiproxy (refused variant)
			// replies of healthy masters are jittery, so 95 % there.
			want := 0.99
			if mode == "refused" {
				want = 0.95
			}
			r.must(all.Availability >= want, "availability %.3f, want >= %v", all.Availability, want)
			r.must(during.Max <= 2*nodeTimeout+slack, "probe (obtain+release) max %v during the fault, want <= %v", during.Max, 2*nodeTimeout+slack)
			r.must(s.acquired > 0, "no acquisitions")
		})
	}
}

// S3: a majority dies: nothing is granted, every call is bounded and says
// why, and locking resumes once they are back.
func TestS03MajorityDown(t *testing.T) {
	admit(t, light)
	majorityDown(t, library)
}

func majorityDown(t *testing.T, sub *subject) {
	r := newRow(t, sub, "S3 majority-down", "MUST", "SIGKILL 3/5 for 1s, restart empty (node timeout 50ms)",
		"0 acquisitions; ErrNotObtained+detail; bounded; recovers")
	e := newEnv(t, sub, 5, nil)
	ms := e.direct()
	warm(t, ms, 4)
	c := e.lockClient(ms)
	const ttl = 500 * time.Millisecond
	e.kill(0, 1, 2)

	// One call, inspected: the error names every master.
	t0 := time.Now()
	_, err := c.Obtain(context.Background(), "one", ttl)
	one := time.Since(t0)
	r.set("single_obtain", one)
	var qe *redlock.QuorumError
	r.must(errors.Is(err, redlock.ErrNotObtained), "Obtain err=%v, want ErrNotObtained", err)
	if r.must(errors.As(err, &qe), "Obtain err=%v carries no *QuorumError", err); qe != nil {
		failed := 0
		for _, n := range qe.Nodes {
			if n.Err != nil {
				failed++
			}
		}
		r.set("detail_nodes", len(qe.Nodes))
		r.must(len(qe.Nodes) == 5 && failed >= 3, "QuorumError has %d nodes, %d failed; want 5 and >= 3", len(qe.Nodes), failed)
	}
	r.must(one <= nodeTimeout+slack, "Obtain took %v with 3/5 refusing, want <= %v", one, nodeTimeout+slack)

	p := probe(c, ttl, 20*time.Millisecond)
	l := &load{c: c, key: "hot", ttl: ttl, workers: 8, dur: time.Second,
		retry: 20 * time.Millisecond, obtainTimeout: 200 * time.Millisecond}
	s := l.run(context.Background())
	down := p.Stats(time.Time{}, time.Time{})
	e.restart(false, 0, 1, 2)
	p.Healed()
	// Until a probe succeeds after the restart, for as long as recovery
	// may take and a probe more (a recovery past the bound below is
	// measured, and fails the row).
	for end := time.Now().Add(redialProbe + 500*time.Millisecond); time.Now().Before(end) && p.Stats(time.Time{}, time.Time{}).RecoveryMS < 0; {
		time.Sleep(20 * time.Millisecond)
	}
	p.Stop()
	all := p.Stats(time.Time{}, time.Time{})
	s.report(r)
	r.set("past_ctx_deadline", s.pastCtx)
	r.set("down_probe_successes", down.Successes)
	r.set("down_probe_max", down.Max)
	r.set("recovery", time.Duration(all.RecoveryMS*1e6))
	r.must(s.acquired == 0 && down.Successes == 0, "acquisitions=%d probe successes=%d with 3/5 down, want 0", s.acquired, down.Successes)
	r.must(len(s.otherErrs) == 0, "errors other than ErrNotObtained: %v", s.otherErrs)
	r.must(s.pastCtx <= slack, "an Obtain returned %v after its context's deadline", s.pastCtx)
	r.must(down.Max <= 2*nodeTimeout+slack, "probe max %v, want <= %v", down.Max, 2*nodeTimeout+slack)
	bound := redialProbe + 20*time.Millisecond + 2*nodeTimeout + slack
	r.must(all.RecoveryMS >= 0 && time.Duration(all.RecoveryMS*1e6) <= bound, "recovery %.0fms after restart, want <= %v", all.RecoveryMS, bound)
	if all.RecoveryMS > 200 {
		r.note("recovery is bounded by go-redis's 1 s re-dial probe after PoolSize failed dials, not by the lock")
	}
}

// S4: a minority stalls (SIGSTOP) for 3 TTLs: locking goes on at quorum
// speed; zombie SETs run after SIGCONT and expire within a TTL.
func TestS04StalledMinority(t *testing.T) {
	admit(t, light)
	stalledMinorities(t, library)
}

func stalledMinorities(t *testing.T, sub *subject) {
	if sub.runs("suite-clients") {
		t.Run("suite-clients", func(t *testing.T) {
			r := newRow(t, sub, "S4 stalled-minority", "MUST", "SIGSTOP 2/5 for 3xTTL (1.5s), SIGCONT; node timeout 50ms; 8 workers hold one key 2ms each",
				"safety 0; availability~baseline; probe p50<=nt/4, p90<nt (returns at quorum); no key a TTL after SIGCONT")
			stalledMinority(t, r, nil)
		})
	}
	if sub.runs("default-clients") {
		t.Run("default-clients", func(t *testing.T) {
			r := newRow(t, sub, "S4 stalled-minority/default-clients", "MUST",
				"same, go-redis clients as users make them (1s socket timeouts, and the two settings New requires)",
				"same: the node timeout, not the client's, bounds each call; Close bounded")
			stalledMinority(t, r, defaultClient)
		})
	}
}

// defaultClient makes a go-redis client as a user would, with the two
// settings redlock.New requires (MaxRetries -1, ContextTimeoutEnabled): 1 s
// socket timeouts (redistest's Client defaults), no pool timeout of its own.
func defaultClient(o *redis.Options) {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = time.Second, time.Second, time.Second, 0
}

func stalledMinority(t *testing.T, r *row, adjust func(*redis.Options)) {
	e := newEnv(t, r.sub, 5, nil)
	const ttl = 500 * time.Millisecond
	c, l, p, done := hotLoad(t, e, e.mastersWith("", adjust), ttl, 2*time.Second)
	time.Sleep(400 * time.Millisecond)
	baseEnd := time.Now()
	e.stop(3, 4)
	stallAt := time.Now()
	time.Sleep(3 * ttl)
	s := <-done
	p.Stop()
	e.cont(3, 4)
	contAt := time.Now()
	time.Sleep(100 * time.Millisecond) // the queued SETs run
	res := e.residual()
	time.Sleep(ttl + 100*time.Millisecond - time.Since(contAt))
	later := e.residual()

	s.report(r)
	base := p.Stats(time.Time{}, baseEnd)
	stall := p.Stats(stallAt, contAt)
	r.set("baseline_availability", base.Availability)
	probeFigures(r, "stall_", stall)
	r.set("residual_keys", res.Keys)
	r.set("max_residual_pttl", res.MaxPTTL)
	r.set("residual_after_ttl", later.Keys)
	st := safety(r, l.ledger, l.counter, nil)
	mustSafe(r, st, l.counter)
	r.must(stall.Availability >= 0.95, "availability %.3f while 2/5 stalled, want >= 0.95", stall.Availability)
	// Returns at quorum: a probe (Obtain and Release) that waited for the
	// stalled masters would take the node timeout twice, every time.
	r.must(stall.P50 <= nodeTimeout/4 && stall.P90 < nodeTimeout, "probe p50 %v, p90 %v while 2/5 stalled, want <= %v and < %v (returns at quorum)",
		stall.P50, stall.P90, nodeTimeout/4, nodeTimeout)
	// The zombie SETs that ran on SIGCONT expire within a TTL; a key without
	// an expiry never would.
	r.must(later.Keys == 0 && later.NoExpiry+res.NoExpiry == 0, "lock keys a TTL after SIGCONT: %d (without expiry: %d then, %d at SIGCONT)", later.Keys, later.NoExpiry, res.NoExpiry)
	t0 := time.Now()
	c.Close()
	closed := time.Since(t0)
	r.set("close", closed)
	bound := nodeTimeout + slack
	if adjust != nil {
		bound += time.Second // a request in flight may wait for the client's own read timeout
	}
	r.must(closed <= bound, "Close took %v, want <= %v", closed, bound)
	r.set("lib_goroutines_after_close", lockGoroutinesAtMost(r.sub, 0))
}

// S5: a majority stalls: nothing is granted, calls are bounded, and after
// SIGCONT the zombies clear within a TTL. Variant: CLIENT PAUSE WRITE.
func TestS05StalledMajority(t *testing.T) {
	admit(t, light)
	stalledMajority(t, library)
}

func stalledMajority(t *testing.T, sub *subject) {
	for _, mode := range []string{"sigstop", "sigstop-default-clients", "client-pause-write"} {
		if !sub.runs(mode) {
			continue
		}
		t.Run(mode, func(t *testing.T) {
			fault := "SIGSTOP 3/5 for 1.5s, SIGCONT"
			var adjust func(*redis.Options)
			switch mode {
			case "client-pause-write":
				fault = "CLIENT PAUSE 1500 WRITE on 3/5"
			case "sigstop-default-clients":
				fault += "; user-default go-redis clients (1s timeouts)"
				adjust = defaultClient
			}
			r := newRow(t, sub, "S5 stalled-majority/"+mode, "MUST", fault, "0 acquisitions; bounded; recovery<=TTL(+redial)")
			e := newEnv(t, sub, 5, nil)
			ms := e.mastersWith("", adjust)
			warm(t, ms, 4)
			c := e.lockClient(ms)
			const ttl = 500 * time.Millisecond
			admin := e.direct()
			faultAt := time.Now()
			if mode != "client-pause-write" {
				e.stop(0, 1, 2)
			} else {
				for _, i := range []int{0, 1, 2} {
					if err := admin[i].Do(context.Background(), "CLIENT", "PAUSE", "1500", "WRITE").Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			p := probe(c, ttl, 20*time.Millisecond)
			l := &load{c: c, key: "hot", ttl: ttl, workers: 4, dur: time.Second,
				retry: 20 * time.Millisecond, obtainTimeout: 200 * time.Millisecond}
			s := l.run(context.Background())
			// The fault lasts 1.5 s from faultAt; a CLIENT PAUSE runs out by itself.
			// The stalled window's probes are the ones recorded while the fault
			// still holds: a probe in flight when it ends may be answered after
			// the resume, and a lock granted then is granted by live masters.
			time.Sleep(time.Until(faultAt.Add(1490 * time.Millisecond)))
			stalled := p.Stats(time.Time{}, time.Now())
			time.Sleep(time.Until(faultAt.Add(1500 * time.Millisecond)))
			if mode != "client-pause-write" {
				e.cont(0, 1, 2)
			}
			healAt := time.Now()
			p.Healed()
			// After the heal: one worker on the hot key measures when the zombie
			// SETs (if any) stop blocking it.
			var hot time.Duration = -1
			hctx, cancel := context.WithTimeout(context.Background(), ttl+redialProbe+time.Second)
			lock, err := c.Obtain(hctx, "hot", ttl, RetryEvery(20*time.Millisecond))
			cancel()
			if err == nil {
				hot = time.Since(healAt)
				lock.Release(context.Background())
			}
			time.Sleep(100 * time.Millisecond)
			p.Stop()
			all := p.Stats(time.Time{}, time.Time{})
			s.report(r)
			r.set("stalled_probe_successes", stalled.Successes)
			r.set("stalled_probe_max", stalled.Max)
			r.set("past_ctx_deadline", s.pastCtx)
			r.set("recovery", time.Duration(all.RecoveryMS*1e6))
			r.set("hot_key_recovery", hot)
			r.must(s.acquired == 0 && stalled.Successes == 0, "acquisitions=%d probe successes=%d while 3/5 stalled, want 0", s.acquired, stalled.Successes)
			r.must(stalled.Max <= 2*nodeTimeout+slack, "probe max %v, want <= %v", stalled.Max, 2*nodeTimeout+slack)
			r.must(s.pastCtx <= slack, "an Obtain returned %v after its context's deadline", s.pastCtx)
			bound := ttl + redialProbe + slack
			r.must(hot >= 0 && hot <= bound, "hot key obtainable %v after the heal, want <= %v", hot, bound)
			r.must(all.RecoveryMS >= 0 && time.Duration(all.RecoveryMS*1e6) <= bound, "probe recovery %.0fms, want <= %v", all.RecoveryMS, bound)
		})
	}
}
