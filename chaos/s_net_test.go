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

// S6: the replies of 2/5 masters are lost (their SET lands, the client
// never hears back); variant: the requests are lost instead.
func TestS06ReplyLost(t *testing.T) {
	admit(t, light)
	replyLost(t, library)
}

func replyLost(t *testing.T, sub *subject) {
	for _, stream := range []string{"downstream", "upstream"} {
		if !sub.runs(stream) {
			continue
		}
		t.Run(stream, func(t *testing.T) {
			what := "replies lost: SET lands"
			if stream == "upstream" {
				what = "requests lost"
			}
			r := newRow(t, sub, "S6 reply-lost/"+stream, "MUST", "toxiproxy timeout "+stream+" on 2/5 ("+what+"); node timeout 50ms; 4 workers hold one key 2ms each",
				"obtain ok via 3, p50<=nt/4, p90<nt; no key a TTL after; safety 0")
			e := newEnv(t, sub, 5, nil)
			// One idle connection per master: a lock that takes a pooled
			// connection per request (the mutants) then has one connection
			// to each cut master that carries a request after the cut, and
			// its first request there is an acquire (a new connection's
			// handshake gets no reply). So an acquire lands there and its
			// release does not, whatever the interleaving; with spare
			// connections a release could follow each acquire that landed.
			ms := e.mastersWith("w", func(o *redis.Options) { o.MaxIdleConns = 1 })
			warm(t, ms, 1)
			c := e.lockClient(ms)
			const ttl = time.Second
			cut := e.direct()[3:]
			warmLock(t, c, e.direct(), e.prefix)
			sets0 := setCalls(t, cut)
			for _, i := range []int{3, 4} {
				p := e.group("w")[i]
				var err error
				if stream == "downstream" {
					err = p.BlackholeDown()
				} else {
					err = p.BlackholeUp()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			l := &load{c: c, key: "hot", ttl: ttl, workers: 4, dur: 1200 * time.Millisecond,
				retry: 20 * time.Millisecond, obtainTimeout: 300 * time.Millisecond, hold: 2 * time.Millisecond}
			done := make(chan *loadStats)
			go func() { done <- l.run(context.Background()) }()
			var ok, tries, relErr int
			var lats []time.Duration
			deadline := time.Now().Add(1200 * time.Millisecond)
			for i := 0; i < 200 && time.Now().Before(deadline); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				t0 := time.Now()
				lock, err := c.Obtain(ctx, fmt.Sprintf("k%d", i), ttl)
				lats = append(lats, time.Since(t0))
				tries++
				if err == nil {
					ok++
					if lock.Release(ctx) != nil {
						relErr++
					}
				}
				cancel()
				time.Sleep(10 * time.Millisecond)
			}
			lastOp := time.Now()
			s := <-done
			// The acquires the 2 cut masters ran during the cut (downstream:
			// they run, the reply is lost; upstream: never sent).
			landed := setCalls(t, cut) - sets0
			r.set("sets_landed_on_cut_masters", landed)
			for _, p := range e.group("w") {
				p.Heal()
			}
			time.Sleep(50 * time.Millisecond)
			res := e.residual()
			time.Sleep(time.Until(lastOp.Add(ttl + 100*time.Millisecond)))
			later := e.residual()
			p50, _, mx := Quantiles(lats)
			p90 := Quantile(lats, 0.9)
			r.set("obtains", tries)
			r.set("obtained", ok)
			r.set("obtain_p50", p50)
			r.set("obtain_p90", p90)
			r.set("obtain_max", mx)
			r.set("release_err", relErr)
			r.set("residual_keys", res.Keys)
			r.set("max_residual_pttl", res.MaxPTTL)
			r.set("residual_after_ttl", later.Keys)
			r.set("hot_acquisitions", s.acquired)
			st := safety(r, l.ledger, l.counter, nil)
			mustSafe(r, st, l.counter)
			r.must(mostly(ok, tries), "obtained %d of %d with 3/5 healthy, want >= 90%%", ok, tries)
			// Returns at quorum: an Obtain that waited for the silent masters
			// would take the node timeout every time.
			r.must(p50 <= nodeTimeout/4 && p90 < nodeTimeout, "obtain p50 %v, p90 %v, want <= %v and < %v (returns at quorum)", p50, p90, nodeTimeout/4, nodeTimeout)
			// Without an acquire that ran unanswered the check below would
			// find nothing to check. Each cut master's lane held a
			// connection (warmLock), so its first batch after the cut lands.
			if stream == "downstream" {
				r.must(landed > 0, "acquires run by the cut masters: %d, want > 0 (a lost reply needs a request that landed)", landed)
			}
			// Unanswered SETs that landed expire with their TTL; a key without
			// an expiry never would.
			r.must(later.Keys == 0 && later.NoExpiry+res.NoExpiry == 0, "lock keys a TTL after the last release: %d (without expiry: %d then, %d at the heal)", later.Keys, later.NoExpiry, res.NoExpiry)
		})
	}
}

// S7: latency on 2/5 or 3/5 masters, swept below and above the node timeout.
func TestS07SlowNetwork(t *testing.T) {
	admit(t, alone)
	slowNetwork(t, library)
}

func slowNetwork(t *testing.T, sub *subject) {
	e := newEnv(t, sub, 5, nil)
	ms := e.masters("w")
	warm(t, ms, 8)
	c := e.lockClient(ms)
	const ttl = 500 * time.Millisecond
	drift := time.Duration(float64(ttl)*redlock.DefaultDriftFactor) + 2*time.Millisecond

	// A hot key under contention for the whole sweep: safety throughout.
	bg, stopBg := context.WithCancel(context.Background())
	l := &load{c: c, key: "hot", ttl: ttl, workers: 4, dur: time.Minute, maxIter: 2000,
		retry: 20 * time.Millisecond, obtainTimeout: 300 * time.Millisecond, hold: 2 * time.Millisecond}
	done := make(chan *loadStats)
	go func() { done <- l.run(bg) }()

	type sample struct {
		lat, validity time.Duration
		err           error
	}
	sweep := func(n int) []sample {
		var out []sample
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			t0 := time.Now()
			lock, err := c.Obtain(ctx, fmt.Sprintf("s%d-%d", time.Now().UnixNano(), i), ttl)
			sm := sample{lat: time.Since(t0), err: err}
			if err == nil {
				sm.validity = lock.Validity()
				lock.Release(ctx)
			}
			cancel()
			out = append(out, sm)
			time.Sleep(5 * time.Millisecond)
		}
		return out
	}
	lats := func(ss []sample) []time.Duration {
		var d []time.Duration
		for _, s := range ss {
			d = append(d, s.lat)
		}
		return d
	}
	base, _, _ := Quantiles(lats(sweep(15)))

	for _, slow := range []int{2, 3} {
		for _, L := range []time.Duration{10 * time.Millisecond, nodeTimeout / 2, 2 * nodeTimeout} {
			name := fmt.Sprintf("%dof5-%dms", slow, L.Milliseconds())
			if !sub.runs(name) {
				continue
			}
			t.Run(name, func(t *testing.T) {
				var expected string
				switch {
				case slow == 2:
					expected = "p50 <= baseline + min(L, nt)/2 (returns at quorum)"
				case L < nodeTimeout:
					expected = "ok; validity <= ttl-L-drift"
				default:
					expected = "ErrNotObtained within node timeout"
				}
				r := newRow(t, sub, "S7 slow-network/"+name, "MUST",
					fmt.Sprintf("latency %v on %d/5 (node timeout %v)", L, slow, nodeTimeout), expected)
				r.sharedEnv = true
				for i := 5 - slow; i < 5; i++ {
					if err := e.group("w")[i].Latency(L, 0); err != nil {
						t.Fatal(err)
					}
				}
				ss := sweep(15)
				for _, p := range e.group("w") {
					p.Heal()
				}
				r.set("settle", settle(t, ms))
				p50, p99, mx := Quantiles(lats(ss))
				ok, notObtained := 0, 0
				var maxValidity, minShrink time.Duration = 0, time.Hour
				for _, s := range ss {
					switch {
					case s.err == nil:
						ok++
						maxValidity = max(maxValidity, s.validity)
						minShrink = min(minShrink, ttl-s.validity)
					case errors.Is(s.err, redlock.ErrNotObtained):
						notObtained++
						fallthrough
					default:
						if (slow == 2 || L < nodeTimeout) && notObtained+ok < len(ss) {
							r.note("failed obtain after %v: %v", s.lat, s.err)
						}
					}
				}
				var slowest sample
				for _, s := range ss {
					if s.lat > slowest.lat {
						slowest = s
					}
				}
				if slowest.lat > nodeTimeout+slack {
					r.note("slowest obtain %v: %v", slowest.lat, slowest.err)
				}
				r.set("baseline_p50", base)
				r.set("obtain_p50", p50)
				r.set("obtain_p99", p99)
				r.set("obtain_max", mx)
				r.set("obtained", ok)
				r.set("not_obtained", notObtained)
				if ok > 0 {
					r.set("max_validity", maxValidity)
					r.set("min_ttl_minus_validity", minShrink)
				}
				switch {
				case slow == 2:
					r.must(mostly(ok, len(ss)), "obtained %d of %d", ok, len(ss))
					// An Obtain that waited for the slow masters would take L, or
					// the node timeout when L is longer.
					w := min(L, nodeTimeout)
					r.must(p50 <= base+w/2, "p50 %v with 2/5 slow by %v, baseline %v: want <= baseline + %v (returns at quorum)", p50, L, base, w/2)
				case L < nodeTimeout:
					if L <= nodeTimeout/5 {
						r.must(mostly(ok, len(ss)), "obtained %d of %d with 3/5 slow by %v < node timeout", ok, len(ss), L)
					} else {
						// A request that needs a new connection pays the handshake
						// (HELLO) too: 2 x L = the node timeout. Liveness is then
						// marginal by construction (the rate is reported, one success
						// is required); the validity check below is not.
						r.must(ok >= 1, "obtained none of %d with 3/5 slow by %v < node timeout", len(ss), L)
					}
					r.must(maxValidity <= ttl-L-drift, "validity %v, want <= ttl-L-drift = %v", maxValidity, ttl-L-drift)
				default:
					r.must(ok == 0 && notObtained == len(ss), "obtained %d, not obtained %d of %d with 3/5 slower than the node timeout", ok, notObtained, len(ss))
					// A failed attempt costs the node timeout, then up to one more
					// while it releases the masters that said yes.
					r.must(p50 <= nodeTimeout+25*time.Millisecond, "obtain p50 %v, want <= node timeout + 25ms", p50)
					r.must(mx <= 2*nodeTimeout+slack, "obtain max %v, want <= %v", mx, 2*nodeTimeout+slack)
				}
			})
		}
	}
	if sub.only == "hot-key" {
		time.Sleep(time.Second) // the hot key alone
	}
	stopBg()
	s := <-done
	if !sub.runs("hot-key") {
		return
	}
	t.Run("hot-key-throughout", func(t *testing.T) {
		r := newRow(t, sub, "S7 slow-network/hot-key", "MUST", "the whole sweep, 4 workers on one key, each holds 2ms", "safety 0")
		r.sharedEnv = true
		s.report(r)
		mustSafe(r, safety(r, l.ledger, l.counter, nil), l.counter)
	})
}
