package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// Waiting for a lock (redlock.WithWait): many waiters of one key, spread
// over Clients that stand for processes, while the wake-ups are cut.

const (
	waitClients    = 5
	waitersPerCl   = 10
	waiterTTL      = time.Second
	waiterHold     = 2 * time.Millisecond
	waitObtainTime = 5 * time.Second
)

// waiters runs waitClients x waitersPerCl waiting Obtains of key, each
// holding the lock waiterHold once; every hold goes to the ledger.
type waiters struct {
	ledger Ledger
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func startWaiters(e *env, key string) *waiters {
	w := &waiters{}
	for range waitClients {
		c := e.lockClient(e.masters(""))
		for range waitersPerCl {
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), waitObtainTime)
				defer cancel()
				h, err := c.Obtain(ctx, key, waiterTTL, Wait())
				if err != nil {
					w.mu.Lock()
					w.errs = append(w.errs, err)
					w.mu.Unlock()
					return
				}
				start := time.Now()
				valid := start.Add(h.Validity())
				time.Sleep(waiterHold)
				end := time.Now()
				w.ledger.Record(Interval{Key: key, Holder: h.Token(), Start: start, End: end, ValidUntil: valid})
				h.Release(context.Background())
			}()
		}
	}
	return w
}

// waitedFor waits until key is marked as waited for ("!" after the token,
// then the turn queue) on every master that holds it, a quorum at least,
// and every master has that many wake subscribers. The holder's Obtain
// returns at a quorum: a master whose SET failed or comes late (a loaded
// machine) has no key to mark.
func (e *env) waitedFor(t *testing.T, key string, subscribers int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	ms := e.direct()
	marked := 0
	for _, m := range ms {
		for {
			v, _ := m.Get(context.Background(), e.prefix+key).Result()
			n, _ := m.PubSubNumSub(context.Background(), "redlock:wake").Result()
			if (v == "" || strings.Contains(v, "!")) && n["redlock:wake"] >= subscribers {
				if v != "" {
					marked++
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: value %q, %d wake subscribers: the waiters are not waiting", key, v, n["redlock:wake"])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if marked < len(ms)/2+1 {
		t.Fatalf("%s is marked on %d of %d masters, want a quorum: the holder's lock is not held", key, marked, len(ms))
	}
}

// gaps returns the holds in order and the largest time from one hold's
// end (its Release call) to the next one's start, the first measured from
// from.
func gaps(l *Ledger, from time.Time) (first, largest time.Duration, n int) {
	iv := l.Intervals()
	slices.SortFunc(iv, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	prev := from
	for i, v := range iv {
		g := v.Start.Sub(prev)
		if i == 0 {
			first = g
		}
		largest = max(largest, g)
		prev = v.End
	}
	return first, largest, len(iv)
}

// killPubSub closes every wake subscription on every master.
func (e *env) killPubSub(ms []redis.UniversalClient) error {
	var errs []error
	for _, m := range ms {
		if err := m.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// queueWaiters starts the waiters of key and returns once they wait on
// every master (a mutant marks nothing: then after a while).
func (e *env) queueWaiters(t *testing.T, key string) *waiters {
	w := startWaiters(e, key)
	if e.sub.mutant == "" {
		e.waitedFor(t, key, waitClients)
	} else {
		time.Sleep(200 * time.Millisecond)
	}
	return w
}

// waitRows runs a scenario of waiters woken by a release, as rows for N=5
// and a single master: masters started with opt, A holding "w" (TTL 10s)
// and 50 waiters of it; release stages the fault, releases A's lock and
// returns when the release began, and what to do once every waiter is
// done (nil: nothing).
func waitRows(t *testing.T, sub *subject, scenario, fault string, opt func(int, *redistest.Options),
	release func(t *testing.T, r *row, e *env, held Held) (time.Time, func())) {
	for _, n := range []int{5, 1} {
		name := fmt.Sprintf("redlock-%d", n)
		if n == 1 {
			name = "single"
		}
		if !sub.runs(name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			r := newRow(t, sub, scenario+"/"+name, "MUST",
				fmt.Sprintf("N=%d; %d waiters over %d Clients (WithWait); %s", n, waitClients*waitersPerCl, waitClients, fault),
				"every waiter obtains; each hand-over within one TTL; cs=promised=0")
			e := newEnv(t, sub, n, opt)
			held, err := e.lockClient(e.masters("")).Obtain(context.Background(), "w", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			w := e.queueWaiters(t, "w")
			released, after := release(t, r, e, held)
			w.wg.Wait()
			if after != nil {
				after()
			}
			reportWaiters(r, w, released)
			e.noKeysLeft(r)
		})
	}
}

// noKeysLeft checks that no lock key is left once every waiter released.
func (e *env) noKeysLeft(r *row) {
	time.Sleep(2*nodeTimeout + slack) // a Release returns at quorum; the last masters follow
	res := e.residual()
	r.must(res.Keys == 0, "%d lock keys left after every waiter released (the longest for %v more)", res.Keys, res.MaxPTTL)
}

// S18: the wake subscriptions are killed (CLIENT KILL TYPE pubsub) just
// before the holder releases, so that release is published to nobody, and
// again every 100ms while 50 waiters hand the lock on.
func TestS18WaitSubscriptionKilled(t *testing.T) {
	admit(t, light)
	waitSubscriptionKilled(t, library)
}

func waitSubscriptionKilled(t *testing.T, sub *subject) {
	waitRows(t, sub, "S18 wait-pubsub-killed", "CLIENT KILL TYPE pubsub on every master before the holder's release, then every 100ms", nil,
		func(t *testing.T, r *row, e *env, held Held) (time.Time, func()) {
			admin := e.direct()
			if err := e.killPubSub(admin); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			err := held.Release(context.Background())
			r.must(err == nil, "the holder's release: %v", err)
			stop, killed := make(chan struct{}), make(chan int)
			go func() {
				kills := 1
				defer func() { killed <- kills }()
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if e.killPubSub(admin) == nil {
							kills++
						}
					}
				}
			}()
			return released, func() {
				close(stop)
				r.set("kills", <-killed)
			}
		})
}

// reportWaiters checks and reports what every waiter got.
func reportWaiters(r *row, w *waiters, from time.Time) {
	first, largest, holds := gaps(&w.ledger, from)
	r.set("holds", holds)
	r.set("first_grant_after", first)
	r.set("max_handover_gap", largest)
	if holds > 0 {
		iv := w.ledger.Intervals()
		var last time.Time
		for _, v := range iv {
			if v.End.After(last) {
				last = v.End
			}
		}
		r.set("all_done_after", last.Sub(from))
	}
	st := w.ledger.Stats()
	r.set("cs_overlaps", st.CSOverlaps)
	r.set("promised_overlaps", st.PromisedOverlaps)
	r.must(st.CSOverlaps == 0 && st.PromisedOverlaps == 0, "cs_overlaps=%d promised_overlaps=%d, want 0", st.CSOverlaps, st.PromisedOverlaps)
	r.must(len(w.errs) == 0 && holds == waitClients*waitersPerCl, "%d of %d waiters obtained (first error: %v)", holds, waitClients*waitersPerCl, firstErr(w.errs))
	r.must(holds > 0 && largest <= waiterTTL+slack, "a hand-over took %v, want within one TTL (%v)", largest, waiterTTL)
}

func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

// S19: a holder process is SIGKILLed while 50 waiters wait: no release
// announces the key's end, it expires. The waiters never sleep past the
// key's expiry.
func TestS19WaitHolderCrash(t *testing.T) {
	admit(t, light)
	waitHolderCrash(t, library)
}

func waitHolderCrash(t *testing.T, sub *subject) {
	r := newRow(t, sub, "S19 wait-holder-crash", "MUST",
		fmt.Sprintf("worker process under Do (TTL 1s) SIGKILLed while %d waiters over %d Clients wait (WithWait); N=5", waitClients*waitersPerCl, waitClients),
		"the first waiter obtains within the TTL of the kill; every waiter obtains; each hand-over within one TTL; cs=promised=0")
	e := newEnv(t, sub, 5, nil)
	const ttl = time.Second
	h := startHolder(t, e, "w", ttl)
	h.wait(t, "HELD", 5*time.Second)
	w := e.queueWaiters(t, "w")
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killAt := time.Now()
	h.cmd.Wait()
	w.wg.Wait()
	reportWaiters(r, w, killAt)
	first, _, _ := gaps(&w.ledger, killAt)
	r.must(w.ledger.Len() > 0 && first <= ttl+slack, "the first waiter obtained %v after the kill, want within the TTL (%v)", first, ttl)
	e.noKeysLeft(r)
}

// S20: every master restarts (AOF, so the holder's key and its mark
// survive) while 50 waiters wait, and the holder releases as soon as the
// masters are back: before the waiters' subscriptions are, so its release
// is published to nobody.
func TestS20WaitMasterRestart(t *testing.T) {
	admit(t, light)
	waitMasterRestart(t, library)
}

func waitMasterRestart(t *testing.T, sub *subject) {
	waitRows(t, sub, "S20 wait-master-restart", "AOF; every master SIGKILLed and restarted, the holder releases as soon as they answer",
		func(_ int, o *redistest.Options) { o.Persist = true },
		func(t *testing.T, r *row, e *env, held Held) (time.Time, func()) {
			all := make([]int, len(e.servers))
			for i := range all {
				all[i] = i
			}
			e.restart(true, all...)
			var released time.Time
			var err error
			for range 100 { // the holder's connections were cut too
				released = time.Now()
				if err = held.Release(context.Background()); err == nil {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			r.must(err == nil, "the holder's release: %v", err)
			return released, nil
		})
}

// gateOf returns the master waiters of the key full ask first, as the
// library picks it (redlock's Client.gateOf): the highest FNV-1a hash of
// the master's address, a zero byte and the key.
func gateOf(addrs []string, full string) int {
	best, top := 0, uint64(0)
	for i, a := range addrs {
		h := uint64(14695981039346656037)
		for _, s := range [...]string{a, "\x00", full} {
			for j := 0; j < len(s); j++ {
				h = (h ^ uint64(s[j])) * 1099511628211
			}
		}
		if i == 0 || h > top {
			best, top = i, h
		}
	}
	return best
}

// S22: a stray value of the key on one master only (another owner's, 60s
// TTL), where the holder A (on the other two of three masters) releases
// while waiters on other Clients wait. A quorum is free at the release:
// the waiters must get the key within a round trip or so, whichever
// master holds the stray; the one the waiters ask first (the gate) must
// not hold them off for the stray's TTL. The stray goes on each master in
// turn, one key each.
func TestS22WaitStrayMinorityKey(t *testing.T) {
	admit(t, light)
	waitStrayMinorityKey(t, library)
}

func waitStrayMinorityKey(t *testing.T, sub *subject) {
	const (
		clients, per = 3, 3
		strayTTL     = 60 * time.Second
		waitFor      = 4 * time.Second
		bound        = 2*nodeTimeout + slack
	)
	r := newRow(t, sub, "S22 wait-stray-minority", "MUST",
		fmt.Sprintf("N=3; another owner's value of the key on one master (%v TTL), on each master in turn; A holds the other two, %d waiters over %d Clients (WithWait) wait, A releases", strayTTL, clients*per, clients),
		fmt.Sprintf("the first waiter obtains within %v of A's release (a quorum is free), every waiter obtains, each hand-over within one TTL; cs=promised=0", bound))
	e := newEnv(t, sub, 3, nil)
	direct := e.direct()
	var addrs []string
	for _, s := range e.servers {
		addrs = append(addrs, s.Addr())
	}
	a := e.lockClient(e.masters(""))
	ctx := context.Background()
	for stray := range 3 {
		key := fmt.Sprintf("g%d", stray)
		gate := gateOf(addrs, e.prefix+key)
		if err := direct[stray].Set(ctx, e.prefix+key, "stray-owner", strayTTL).Err(); err != nil {
			t.Fatal(err)
		}
		held, err := a.Obtain(ctx, key, waiterTTL)
		if err != nil {
			t.Fatal(err)
		}
		w := &waiters{}
		for range clients {
			c := e.lockClient(e.masters(""))
			for range per {
				w.wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), waitFor)
					defer cancel()
					h, err := c.Obtain(ctx, key, waiterTTL, Wait())
					if err != nil {
						w.mu.Lock()
						w.errs = append(w.errs, err)
						w.mu.Unlock()
						return
					}
					start := time.Now()
					valid := start.Add(h.Validity())
					time.Sleep(waiterHold)
					w.ledger.Record(Interval{Key: key, Holder: h.Token(), Start: start, End: time.Now(), ValidUntil: valid})
					h.Release(context.Background())
				})
			}
		}
		if sub.mutant == "" {
			e.waitedFor(t, key, clients)
		} else {
			time.Sleep(200 * time.Millisecond)
		}
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w.wg.Wait()
		first, largest, holds := gaps(&w.ledger, released)
		st := w.ledger.Stats()
		name := fmt.Sprintf("stray_on_%d", stray)
		if stray == gate {
			name += "_gate"
		}
		r.set(name+"_holds", holds)
		if holds > 0 {
			r.set(name+"_first_grant_after", first)
			r.set(name+"_max_handover_gap", largest)
		}
		r.must(len(w.errs) == 0 && holds == clients*per, "stray on master %d (gate %d): %d of %d waiters obtained (first error: %v)", stray, gate, holds, clients*per, firstErr(w.errs))
		if holds == 0 {
			r.must(false, "stray on master %d (gate %d): no waiter obtained within %v of A's release, want the first within %v (a quorum was free)", stray, gate, waitFor, bound)
		} else {
			r.must(first <= bound, "stray on master %d (gate %d): the first waiter obtained %v after A's release, want within %v (a quorum was free)", stray, gate, first, bound)
		}
		r.must(holds == 0 || largest <= waiterTTL+slack, "stray on master %d (gate %d): a hand-over took %v, want within one TTL (%v)", stray, gate, largest, waiterTTL)
		r.must(st.CSOverlaps == 0 && st.PromisedOverlaps == 0, "stray on master %d: cs_overlaps=%d promised_overlaps=%d, want 0", stray, st.CSOverlaps, st.PromisedOverlaps)
		direct[stray].Del(ctx, e.prefix+key)
	}
}
