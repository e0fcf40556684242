package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TestWaitersPastAStrayKeyHandTheLockOn: two Clients wait, B queued
// before C, for a key held on the two masters that are not the gate,
// where a stray key without expiry sits. The holder's release gives B the
// turn; B, refused by the stray at the gate, asks every master and gets
// the lock. B's release must then reach C (B's value carries the turn
// queue, so its release is announced with C's turn), and C gets the lock
// within a few round trips, not once the first holder's 8s TTL, which C
// read when it last asked every master, has passed.
func TestWaitersPastAStrayKeyHandTheLockOn(t *testing.T) {
	_, clients, a := cluster(t, 3)
	ctx := t.Context()
	b := newClient(t, clients)
	c := newClient(t, clients)
	gate := strayOnGate(t, b, clients, "k", 0)
	held, err := a.Obtain(ctx, "k", 8*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := (gate + 1) % len(clients)
	chB := waitFor(ctx, b, "k", 20*time.Second)
	queuedN(t, clients[other], "k", 1)
	chC := waitFor(ctx, c, "k", 20*time.Second)
	ids := queuedN(t, clients[other], "k", 2)
	for _, m := range clients {
		subscribed(t, m)
	}
	time.Sleep(200 * time.Millisecond) // the asks at the subscriptions' confirmations
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := wokenBy(t, chB, released, 2*time.Second)
	if q := queueOf(t, clients[other], "k"); fmt.Sprint(q) != fmt.Sprint(ids[1:]) {
		t.Errorf("B holds %q, with the turn queue %q on master %d, want C's place carried over (%q)", holdersOf(t, clients, "k"), q, other, ids[1:])
	}
	released = time.Now()
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := outcome(t, chC, 15*time.Second)
	if w.err != nil {
		t.Fatal(w.err)
	}
	defer w.l.Release(ctx)
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("C obtained the key %v after B released it, want within 2s: B's release was not heard, and C slept out the first holder's TTL", d.Round(time.Millisecond))
	}
}

// asksOn counts what the masters ran for waiters and holders: plain SETs
// (a woken waiter's ask) and scripts (a waiter's ask, a release, an undo).
func asksOn(t *testing.T, masters []redis.UniversalClient) (n int64) {
	t.Helper()
	for _, m := range masters {
		n += calls(t, m, "set") + calls(t, m, "evalsha") + calls(t, m, "eval")
	}
	return n
}

// A herd is k Clients, each with one waiter of a key held by another.
type herd struct {
	took   time.Duration // from the release (or the holder's expiry) to the last waiter's lock
	asks   int64         // commands the masters ran meanwhile (asksOn)
	fails  int           // waiters that did not get the lock
	undone int           // Releases of tokens that never became a lock: a grant undone, the masters split
}

// releases is a go-redis hook that notes the token of every Release of
// "k" (releaseScript: EVALSHA sha 1 k token) its client sends.
type releases struct {
	mu     sync.Mutex
	tokens []string
}

func (h *releases) note(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		a := c.Args()
		if len(a) == 5 && (a[0] == "evalsha" || a[0] == "eval") && a[3] == "k" {
			h.tokens = append(h.tokens, fmt.Sprint(a[4]))
		}
	}
}

func (h *releases) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *releases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}
func (h *releases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(cmds...)
		return next(ctx, cmds)
	}
}

// drainHerd starts k Clients over 3 masters, each with one waiter of "k"
// held by another Client (for holdTTL; released at once when release is
// set, else left to expire), with, when stray, a key of another owner
// without expiry on the waiters' gate. Each waiter, once it holds the
// lock, releases it after a moment; drainHerd returns when every waiter
// did, or within.
func drainHerd(t *testing.T, k int, stray, release bool, holdTTL, within time.Duration) herd {
	t.Helper()
	servers, clients, a := cluster(t, 3)
	ctx := t.Context()
	gate := redlock.GateOf(a, "k")
	if stray {
		if err := clients[gate].Set(ctx, "k", "stray-owner", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	obtained := time.Now()
	held, err := a.Obtain(ctx, "k", holdTTL)
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error { // the holder's key on every master it can have
		for i, c := range clients {
			if (!stray || i != gate) && get(t, c, "k") == "" {
				return fmt.Errorf("master %d lacks the holder's key", i)
			}
		}
		return nil
	})
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Time
	fails := 0
	hook := &releases{}
	locks := map[string]bool{}
	for range k {
		var own []redis.UniversalClient
		for _, s := range servers {
			rdb := s.Client()
			rdb.AddHook(hook)
			t.Cleanup(func() { rdb.Close() })
			own = append(own, rdb)
		}
		c := newClient(t, own)
		wg.Go(func() {
			l, err := c.Obtain(wctx, "k", 20*time.Second, redlock.WithWait())
			mu.Lock()
			if err != nil {
				fails++
			} else {
				last = time.Now()
				locks[l.Token()] = true
			}
			mu.Unlock()
			if err == nil {
				time.Sleep(10 * time.Millisecond)
				_ = l.Release(context.Background())
			}
		})
	}
	for i, c := range clients {
		if !stray || i != gate {
			queuedN(t, c, "k", k)
		}
		subscribed(t, c)
	}
	time.Sleep(time.Second) // every waiter asked, queued and sleeps
	before := asksOn(t, clients)
	from := obtained.Add(holdTTL)
	if release {
		from = time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	h := herd{asks: asksOn(t, clients) - before, fails: fails}
	hook.mu.Lock()
	for _, tok := range hook.tokens {
		if !locks[tok] {
			h.undone++
		}
	}
	hook.mu.Unlock()
	if fails < k {
		h.took = last.Sub(from)
	}
	return h
}

// TestHerdWokenTogetherDoesNotSplitTheMasters: eight Clients wait for a
// key on three masters, with no stray key anywhere; the holder releases
// it, or lets it expire (nobody announces that: every waiter's timer,
// set to the PTTL it read, fires at about the same moment). The waiters
// ask the gate first, which serializes them: none gets a master another
// gets, so no grant is ever undone.
func TestHerdWokenTogetherDoesNotSplitTheMasters(t *testing.T) {
	const k = 8
	for name, release := range map[string]bool{"released": true, "expired": false} {
		t.Run(name, func(t *testing.T) {
			h := drainHerd(t, k, false, release, 1500*time.Millisecond, 15*time.Second)
			t.Logf("%d waiters: %d failed, the last lock %v after the release; %d commands (%.1f per lock), %d grants undone",
				k, h.fails, h.took.Round(time.Millisecond), h.asks, float64(h.asks)/float64(max(k-h.fails, 1)), h.undone)
			if h.fails > 0 {
				t.Errorf("%d of %d waiters did not get the lock within 15s", h.fails, k)
			}
			if h.undone > 0 {
				t.Errorf("%d grants undone: waiters woken together split the masters", h.undone)
			}
		})
	}
}

// TestHerdPastAStrayKeyOnTheGateDrains: four Clients woken by one release
// (or by the holder's expiry, which nobody announces) while a stray key
// without expiry sits on the master they ask first all get the lock in
// turn within seconds; the waiters' locks have a 20s TTL, which none of
// them may have to sleep out.
func TestHerdPastAStrayKeyOnTheGateDrains(t *testing.T) {
	const k = 4
	for name, release := range map[string]bool{"released": true, "expired": false} {
		t.Run(name, func(t *testing.T) {
			h := drainHerd(t, k, true, release, 1500*time.Millisecond, 15*time.Second)
			t.Logf("%d waiters: %d failed, the last lock %v after the release; %d commands (%.1f per lock), %d grants undone",
				k, h.fails, h.took.Round(time.Millisecond), h.asks, float64(h.asks)/float64(max(k-h.fails, 1)), h.undone)
			if h.fails > 0 {
				t.Errorf("%d of %d waiters did not get the lock within 15s", h.fails, k)
			}
		})
	}
}
