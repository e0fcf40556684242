package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The turn queue: a refused waiter queues its Client's id after the wait
// mark; a release gives the turn to the first Client queued, whose acquire
// carries the rest of the queue into its own value.

// TestWaitFirstComeFirstServedInClient: the waiters of one Client get the
// lock in the order they began to wait.
func TestWaitFirstComeFirstServedInClient(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := t.Context()
	held := obtain(t, a, "k", 20*time.Second)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			l, err := b.Obtain(ctx, "k", 20*time.Second, redlock.WithWait())
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		if i == 0 {
			marked(t, clients[0], "k")
		}
		redistest.Eventually(t, func() error { // in the queue before the next
			if n := redlock.QueuedInClient(b, "k"); n != i+1 {
				return fmt.Errorf("%d waiters in b's queue of k, want %d", n, i+1)
			}
			return nil
		})
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !slices.Equal(order, []int{0, 1, 2, 3, 4}) {
		t.Errorf("obtained in order %v, want [0 1 2 3 4]", order)
	}
}

// TestWaitTurnsAcrossClients: three Clients' waiters queue in order B, C,
// D on a held key; the releases hand it to B, then C, then D, each
// carrying the rest of the queue.
func TestWaitTurnsAcrossClients(t *testing.T) {
	t.Parallel()
	clients, held := heldOnOne(t)
	m := clients[0]
	ctx := t.Context()
	waits := map[string]<-chan waited{}
	var ids []string
	for n, name := range []string{"B", "C", "D"} {
		c := newClient(t, clients)
		waits[name] = waitFor(ctx, c, "k", 20*time.Second)
		ids = queuedN(t, m, "k", n+1)
	}
	subscribedAll(t, clients)
	l := held
	for i, want := range []string{"B", "C", "D"} {
		who, next, took := handOver(t, l, waits)
		if who != want && took <= fairWithin {
			t.Fatalf("hand-over %d: %s obtained the key %v after the release, want %s (first in the queue %q)", i, who, took, want, ids)
		}
		if who != want {
			t.Logf("hand-over %d took %v: %s was passed over, which a slow machine allows", i, took, want)
			next.Release(ctx)
			return
		}
		if q := queueOf(t, m, "k"); fmt.Sprint(q) != fmt.Sprint(ids[i+1:]) {
			t.Fatalf("after hand-over %d the key's queue is %q, want the rest %q carried over", i, q, ids[i+1:])
		}
		l = next
	}
	l.Release(ctx)
}

// TestWaitTurnsRoundRobin: a Client with two waiters of a key and one with
// one, queued B, C: the turns go B, C, B (round robin between Clients,
// first come first served within one), and B's second waiter, behind its
// Client's own lock, asks nobody until the turn comes back.
func TestWaitTurnsRoundRobin(t *testing.T) {
	t.Parallel()
	clients, held := heldOnOne(t)
	m := clients[0]
	ctx := t.Context()
	b := newClient(t, clients)
	c := newClient(t, clients)
	waits := map[string]<-chan waited{}
	waits["B1"] = waitFor(ctx, b, "k", 20*time.Second)
	queuedN(t, m, "k", 1)
	waits["C"] = waitFor(ctx, c, "k", 20*time.Second)
	ids := queuedN(t, m, "k", 2)
	waits["B2"] = waitFor(ctx, b, "k", 20*time.Second)
	subscribedAll(t, clients) // and B2 queued behind B1 in its Client
	who, l, took := handOver(t, held, waits)
	if who != "B1" {
		t.Fatalf("first hand-over (%v) went to %s, want B1", took, who)
	}
	// B1's value carries C, then B again for its second waiter.
	if q := queueOf(t, m, "k"); fmt.Sprint(q) != fmt.Sprint([]string{ids[1], ids[0]}) {
		t.Fatalf("B1 holds the key with queue %q, want %q", q, []string{ids[1], ids[0]})
	}
	for i, want := range []string{"C", "B2"} {
		who, next, took := handOver(t, l, waits)
		if who != want && took <= fairWithin {
			t.Fatalf("hand-over %d: %s obtained the key %v after the release, want %s", i+1, who, took, want)
		}
		l = next
		if who != want {
			t.Logf("hand-over %d took %v: %s was passed over, which a slow machine allows", i+1, took, want)
			break
		}
	}
	l.Release(ctx)
}

// TestWaitUnusedTurn: the first Client queued gives up (its waiter's
// context ends); the release gives it the turn, which nobody takes, and
// the next Client queued asks soon after (turnWait), not at the TTL the
// release left on its timer.
func TestWaitUnusedTurn(t *testing.T) {
	t.Parallel()
	clients, held := heldOnOne(t)
	m := clients[0]
	ctx := t.Context()
	b := newClient(t, clients)
	c := newClient(t, clients)
	bctx, cancel := context.WithCancel(ctx)
	gone := waitFor(bctx, b, "k", 20*time.Second)
	queuedN(t, m, "k", 1)
	ch := waitFor(ctx, c, "k", 20*time.Second)
	queuedN(t, m, "k", 2)
	subscribedAll(t, clients)
	cancel()
	if w := outcome(t, gone, 5*time.Second); w.err == nil {
		t.Fatal("B's wait obtained the key after its context ended")
	}
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The holder's TTL was 20s: C asking within a few seconds shows it
	// was not left to its timer.
	l := wokenBy(t, ch, released, 5*time.Second)
	l.Release(ctx)
}

// TestWaitTurnToAGoneProcess: a release gives the turn to a Client that
// is closed (a process gone), and the waiter queued after it, in another
// Client, still gets the key; the closed Client's id never blocks it.
func TestWaitTurnToAGoneProcess(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 3)
	ctx := t.Context()
	held := heldOnAll(t, a, clients) // on every master before the waiters ask: see TestWaitQueuedWaiterTimesOutAsTaken
	b, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, clients)
	gone := waitFor(ctx, b, "k", 20*time.Second)
	for _, m := range clients {
		marked(t, m, "k")
	}
	ch := waitFor(ctx, c, "k", 20*time.Second)
	redistest.Eventually(t, func() error {
		for i, m := range clients {
			if q := queueOf(t, m, "k"); len(q) != 2 {
				return fmt.Errorf("master %d: queue %q, want two Clients", i, q)
			}
		}
		return nil
	})
	b.Close()
	<-gone
	l := wakes(t, held, ch, 5*time.Second)
	l.Release(ctx)
}

// TestWaitTurnAfterAnOlderWaitersMark: a waiter of the version before
// turn queues asks for a key a new waiter queued on, and appends a second
// "!" after the queue; the release of the key still wakes the new waiter,
// and a new waiter queued after the stray mark still gets its turn.
func TestWaitTurnAfterAnOlderWaitersMark(t *testing.T) {
	t.Parallel()
	clients, held := heldOnOne(t)
	m := clients[0]
	ctx := t.Context()
	b := newClient(t, clients)
	ch := waitFor(ctx, b, "k", 20*time.Second)
	queuedN(t, m, "k", 1)
	if err := m.Eval(ctx, oldWaitScript, []string{"k"}, "olderwaiter", 20000).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, clients)
	ch2 := waitFor(ctx, c, "k", 20*time.Second)
	redistest.Eventually(t, func() error {
		if v := get(t, m, "k"); strings.Count(v, "!") != 2 || len(v) < 17 || strings.HasSuffix(v, "!") {
			return fmt.Errorf("k holds %q, want the older waiter's mark then C queued after it", v)
		}
		return nil
	})
	subscribedAll(t, clients)
	l := wakes(t, held, ch, 5*time.Second)
	wakes(t, l, ch2, 5*time.Second).Release(ctx)
}

// TestWaitTurnNotTakenBackByItsReleaser: a Client that holds a key in a
// loop (obtain with WithWait, work briefly, release, and wait again) does
// not take the key back ahead of the Client whose turn its release gave:
// its next waiter, which asks the moment the release returns, would
// otherwise beat the other Client's waiter, which must first hear the
// announcement, nearly every time, and the other waiter would be passed
// over again and again.
func TestWaitTurnNotTakenBackByItsReleaser(t *testing.T) {
	_, clients, _ := cluster(t, 1)
	ctx := t.Context()
	b := newClient(t, clients)
	c := newClient(t, clients)
	for _, x := range []*redlock.Client{b, c} { // subscribe both: a waiter subscribes when it sleeps
		held, ch := holdAndWait(t, newClient(t, clients), x)
		marked(t, clients[0], "k")
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		outcome(t, ch, 5*time.Second).l.Release(ctx)
	}
	subscribedAll(t, clients)
	bctx, stop := context.WithCancel(ctx)
	var took atomic.Int64 // B's obtains
	done := make(chan struct{})
	go func() {
		defer close(done)
		for bctx.Err() == nil {
			l, err := b.Obtain(bctx, "k", 10*time.Second, redlock.WithWait())
			if err != nil {
				return
			}
			took.Add(1)
			work(2 * time.Millisecond)
			l.Release(context.Background())
		}
	}()
	defer func() { stop(); <-done }()
	worst := int64(0)
	for range 20 {
		before := took.Load()
		l := obtain(t, c, "k", 10*time.Second, redlock.WithWait())
		worst = max(worst, took.Load()-before)
		work(2 * time.Millisecond)
		l.Release(ctx)
	}
	// Round robin: B obtains once while C waits (the hold C's wait began
	// in), maybe twice; a slow machine may let C miss a turn now and then.
	if worst > 4 {
		t.Errorf("B took the key %d times in a row while C waited with its turn queued", worst)
	}
}

// TestWaitNoHerd: 24 waiters of one key over 3 Clients, each holding 1ms:
// a release gives the turn to one Client, whose waiter alone asks, so the
// masters see about two requests per hand-over, the release and one
// acquire (a herd would send one per waiter; one per Client woken, without
// turns, over four).
func TestWaitNoHerd(t *testing.T) {
	_, clients, _ := cluster(t, 1)
	ctx := t.Context()
	var cs []*redlock.Client
	for range 3 {
		cs = append(cs, newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond)))
	}
	// Warm the subscriptions, so the first attempts already queue.
	for _, c := range cs {
		l := obtain(t, c, "k", 10*time.Second, redlock.WithWait())
		l.Release(ctx)
	}
	// Queued attempts and releases are scripts; a SET would count the
	// scripts' own SETs too.
	requests := func() int64 { return scriptsRun(t, clients[0]) }
	before := requests()
	const waiters = 24
	var wg sync.WaitGroup
	for i := range waiters {
		c := cs[i%len(cs)]
		wg.Go(func() {
			l, err := c.Obtain(ctx, "k", 10*time.Second, redlock.WithWait())
			if err != nil {
				t.Error(err)
				return
			}
			work(time.Millisecond)
			l.Release(ctx)
		})
	}
	wg.Wait()
	n := requests() - before
	// Per hand-over: the release, one ask per Client woken (3), and the
	// ask of the winner's next waiter, which finds the key held.
	if per := float64(n) / waiters; per > 3 {
		t.Errorf("%d scripts run for %d hand-overs: %.1f each, want at most 3", n, waiters, per)
	}
}
