package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The turn queue: a refused waiter queues its Client's id after the wait
// mark; a release gives the turn to the first Client queued, whose
// acquire carries the rest of the queue into its own value.

// queueOf returns the turn queue in key's value on the master: the Client
// ids after the mark, 8 characters each.
func queueOf(t *testing.T, rdb redis.UniversalClient, key string) []string {
	t.Helper()
	v := get(t, rdb, key)
	i := strings.IndexByte(v, '!')
	if i < 0 {
		return nil
	}
	var q []string
	for s := v[i+1:]; len(s) >= 8; s = s[8:] {
		q = append(q, s[:8])
	}
	return q
}

// queuedN waits until key's turn queue on the master has n ids, and
// returns them.
func queuedN(t *testing.T, rdb redis.UniversalClient, key string, n int) []string {
	t.Helper()
	var q []string
	redistest.Eventually(t, func() error {
		if q = queueOf(t, rdb, key); len(q) != n {
			return fmt.Errorf("%s's turn queue is %q, want %d ids", key, q, n)
		}
		return nil
	})
	return q
}

// handOver releases l and returns which of the waits obtained the key
// next, with the lock; took is how long after the release it came.
func handOver(t *testing.T, l *redlock.Lock, waits map[string]<-chan waited) (who string, next *redlock.Lock, took time.Duration) {
	t.Helper()
	start := time.Now()
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		for name, ch := range waits {
			select {
			case w := <-ch:
				if w.err != nil {
					t.Fatalf("%s: %v", name, w.err)
				}
				delete(waits, name)
				return name, w.l, time.Since(start)
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatal("no waiter obtained the key within 10s of the release")
		case <-time.After(time.Millisecond):
		}
	}
}

// heldOnOne starts one master and holds "k" on it for 20s with a Client
// of its own.
func heldOnOne(t *testing.T) ([]redis.UniversalClient, *redlock.Lock) {
	t.Helper()
	_, clients, a := cluster(t, 1)
	held, err := a.Obtain(t.Context(), "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return clients, held
}

// fairWithin is how long a hand-over may take for the turn to be sure
// to hold: a Client whose turn does not come within turnWait (at least
// 50 ms with the default node timeout) is passed over, so a slower
// hand-over (a loaded machine) proves nothing either way.
const fairWithin = 40 * time.Millisecond

// TestWaitTurnsAcrossClients: three Clients' waiters queue in order B, C,
// D on a held key; the releases hand it to B, then C, then D, each
// carrying the rest of the queue.
func TestWaitTurnsAcrossClients(t *testing.T) {
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
	clients, held := heldOnOne(t)
	m := clients[0]
	ctx := t.Context()
	b := newClient(t, clients)
	c := newClient(t, clients)
	waits := map[string]<-chan waited{}
	waits["B1"] = waitFor(ctx, b, "k", 20*time.Second)
	ids := queuedN(t, m, "k", 1)
	waits["C"] = waitFor(ctx, c, "k", 20*time.Second)
	ids = queuedN(t, m, "k", 2)
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
	_, clients, a := cluster(t, 3)
	ctx := t.Context()
	held, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
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
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := wokenBy(t, ch, released, 5*time.Second)
	l.Release(ctx)
}

// oldWaitScript is the waitScript of the version before turn queues: it
// appends the mark "!" to a held key's value unless the value ends in one.
const oldWaitScript = `local v = redis.call('GET', KEYS[1])
if v == false then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	return {1, 0}
end
if v == ARGV[1] or v == ARGV[1] .. '!' then
	return {1, 0}
end
if string.byte(v, -1) ~= 33 then
	redis.call('APPEND', KEYS[1], '!')
end
return {0, redis.call('PTTL', KEYS[1])}
`

// TestWaitTurnAfterAnOlderWaitersMark: a waiter of the version before
// turn queues asks for a key a new waiter queued on, and appends a second
// "!" after the queue; the release of the key still wakes the new waiter,
// and a new waiter queued after the stray mark still gets its turn.
func TestWaitTurnAfterAnOlderWaitersMark(t *testing.T) {
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
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := wokenBy(t, ch, released, 5*time.Second)
	released = time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l = wokenBy(t, ch2, released, 5*time.Second)
	l.Release(ctx)
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
			time.Sleep(2 * time.Millisecond)
			l.Release(context.Background())
		}
	}()
	defer func() { stop(); <-done }()
	worst := int64(0)
	for range 20 {
		before := took.Load()
		l, err := c.Obtain(ctx, "k", 10*time.Second, redlock.WithWait())
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, took.Load()-before)
		time.Sleep(2 * time.Millisecond)
		l.Release(ctx)
	}
	// Round robin: B obtains once while C waits (the hold C's wait began
	// in), maybe twice; a slow machine may let C miss a turn now and then.
	if worst > 4 {
		t.Errorf("B took the key %d times in a row while C waited with its turn queued", worst)
	}
}

// TestWaitUncontendedSubscribesNothing: a WithWait Obtain that gets the
// key at its first attempt opens no subscription (on a Redis Cluster that
// would be a connection per key): subscriptions start when a waiter first
// sleeps.
func TestWaitUncontendedSubscribesNothing(t *testing.T) {
	_, clients, a := cluster(t, 1)
	ctx := t.Context()
	for i := range 20 {
		l, err := a.Obtain(ctx, fmt.Sprint("free:", i), 10*time.Second, redlock.WithWait())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // a subscription would be made by now
	n, err := clients[0].PubSubNumSub(ctx, "redlock:wake").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n["redlock:wake"] != 0 {
		t.Fatalf("%d subscriptions to the wake channel after uncontended waits, want none", n["redlock:wake"])
	}
	// A waiter that sleeps subscribes, and is woken by the release.
	held, ch := holdAndWait(t, a, newClient(t, clients))
	marked(t, clients[0], "k")
	subscribedAll(t, clients)
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wokenBy(t, ch, released, 5*time.Second).Release(ctx)
}

// TestWaitWithAMasterDown: at N=3 with one master down for good (frozen),
// its wake subscription never confirms; the two that refused the waiter, both
// subscribed, are enough to tell it a quorum is free, so it sleeps on
// them instead of asking again every node timeout, and their releases
// wake it.
func TestWaitWithAMasterDown(t *testing.T) {
	servers, clients, a := cluster(t, 3)
	ctx := t.Context()
	held := heldOnAll(t, a, clients)
	takeDown(t, "frozen", servers[2]) // its subscription never confirms
	b := newClient(t, clients, redlock.WithNodeTimeout(200*time.Millisecond))
	ch := waitFor(ctx, b, "k", 20*time.Second)
	live := clients[:2]
	for _, m := range live {
		marked(t, m, "k")
		subscribed(t, m)
	}
	time.Sleep(300 * time.Millisecond) // the ask at the subscriptions' confirmation
	asks := func() int64 { return scriptsRun(t, live...) }
	before := asks()
	time.Sleep(time.Second) // five node timeouts
	if n := asks() - before; n != 0 {
		t.Errorf("the waiter asked the live masters %d times in five node timeouts with the key held", n)
	}
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := wokenBy(t, ch, released, 5*time.Second)
	l.Release(ctx)
}

// TestWaitWokenAskIsOneCommand: the waiter a release wakes, its Client's
// turn, asks with a plain SET NX carrying the queue, not a script: the
// hand-over runs one script (the release).
func TestWaitWokenAskIsOneCommand(t *testing.T) {
	clients, held := heldOnOne(t)
	m := clients[0]
	ctx := t.Context()
	waits := map[string]<-chan waited{}
	var ids []string
	for n, name := range []string{"B", "C"} {
		waits[name] = waitFor(ctx, newClient(t, clients), "k", 20*time.Second)
		ids = queuedN(t, m, "k", n+1)
	}
	subscribedAll(t, clients)
	before := scriptsRun(t, m)
	who, l, took := handOver(t, held, waits)
	ran := scriptsRun(t, m) - before
	if who != "B" || took > fairWithin {
		t.Skipf("the hand-over went to %s after %v: too slow a machine for the turn to hold", who, took)
	}
	if ran != 1 {
		t.Errorf("%d scripts ran for the hand-over, want 1 (the release; the woken ask is a plain SET)", ran)
	}
	if q := queueOf(t, m, "k"); fmt.Sprint(q) != fmt.Sprint(ids[1:]) {
		t.Errorf("B holds the key with queue %q, want %q carried over", q, ids[1:])
	}
	l.Release(ctx)
	next := wokenBy(t, waits["C"], time.Now(), 5*time.Second)
	next.Release(ctx)
}

// TestWaitOvertakenAskQueues: the key is taken between its release and
// the woken waiter's plain SET; the waiter asks again at once with the
// script, which queues it, and the taker's release wakes it: it does not
// sleep to the taker's TTL.
func TestWaitOvertakenAskQueues(t *testing.T) {
	servers := redistest.Start(t, 1)
	hooked := servers[0].Client()
	t.Cleanup(func() { hooked.Close() })
	plain := servers[0].Client()
	t.Cleanup(func() { plain.Close() })
	ctx := t.Context()
	holder := newClient(t, []redis.UniversalClient{plain})
	taker := newClient(t, []redis.UniversalClient{plain})
	held, err := holder.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var taken *redlock.Lock
	o := &onPlainAsk{bare: true, do: func() {
		l, err := taker.Obtain(context.Background(), "k", 20*time.Second)
		if err != nil {
			t.Errorf("the taker: %v", err)
			return
		}
		taken = l
	}}
	hooked.AddHook(cmdHook{before: o.check})
	ch := waitFor(ctx, newClient(t, []redis.UniversalClient{hooked}), "k", 20*time.Second)
	queuedN(t, plain, "k", 1)
	subscribed(t, plain)
	time.Sleep(700 * time.Millisecond)
	o.armed.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	queuedN(t, plain, "k", 1) // queued behind the taker
	if !o.fired.Load() || taken == nil {
		t.Fatal("the woken waiter sent no plain SET NX, or the taker did not take the key")
	}
	released := time.Now()
	if err := taken.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := wokenBy(t, ch, released, 5*time.Second)
	l.Release(ctx)
}

// TestWaitUncontendedAskIsOneCommand: a WithWait Obtain of a free key
// sends the same command as a try-once Obtain, a plain SET NX, not the
// waiting script: on the masters an uncontended wait costs what a lock
// nobody waits for does, at N=1 and N=3.
func TestWaitUncontendedAskIsOneCommand(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			_, clients, a := cluster(t, n)
			ctx := t.Context()
			var locks []*redlock.Lock
			before := scriptsRun(t, clients...)
			for i := range 20 {
				l, err := a.Obtain(ctx, fmt.Sprint("free:", i), 10*time.Second, redlock.WithWait())
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, l)
			}
			if ran := scriptsRun(t, clients...) - before; ran != 0 {
				t.Errorf("20 uncontended WithWait Obtains ran %d scripts on %d masters, want none (a plain SET NX each)", ran, n)
			}
			for _, l := range locks {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestWaitUncontendedAskAfterALapsedYield: a Client whose release gave
// the turn to another, and that waits for the key again after its turn
// lead lapsed, asks a free key with a plain SET NX as any uncontended
// wait does.
func TestWaitUncontendedAskAfterALapsedYield(t *testing.T) {
	_, clients, a := cluster(t, 1)
	ctx := t.Context()
	held, ch := holdAndWait(t, a, newClient(t, clients))
	marked(t, clients[0], "k")
	if err := held.Release(ctx); err != nil { // gives the turn to the other Client: a yields
		t.Fatal(err)
	}
	outcome(t, ch, 5*time.Second).l.Release(ctx)
	time.Sleep(100 * time.Millisecond) // the turn lead (at most 5 ms here) lapsed
	before := scriptsRun(t, clients...)
	l, err := a.Obtain(ctx, "k", 10*time.Second, redlock.WithWait())
	if err != nil {
		t.Fatal(err)
	}
	if ran := scriptsRun(t, clients...) - before; ran != 0 {
		t.Errorf("a WithWait Obtain of a free key after a lapsed yield ran %d scripts, want none", ran)
	}
	l.Release(ctx)
}
