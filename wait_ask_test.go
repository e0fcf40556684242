package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// What a waiter sends: a plain SET NX where it can (uncontended, or woken
// with its Client's turn), the waiting script otherwise, and what a refusal
// of either means.

// TestWaitUncontendedAskIsOneCommand: a WithWait Obtain of a free key
// sends the same command as a try-once Obtain, a plain SET NX, not the
// waiting script: on the masters an uncontended wait costs what a lock
// nobody waits for does, at N=1 and N=3.
func TestWaitUncontendedAskIsOneCommand(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			_, clients, a := cluster(t, n)
			ctx := t.Context()
			var locks []*redlock.Lock
			before := scriptsRun(t, clients...)
			for i := range 20 {
				l := obtain(t, a, fmt.Sprint("free:", i), 10*time.Second, redlock.WithWait())
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
	t.Parallel()
	_, clients, a := cluster(t, 1)
	ctx := t.Context()
	held, ch := holdAndWait(t, a, newClient(t, clients))
	marked(t, clients[0], "k")
	if err := held.Release(ctx); err != nil { // gives the turn to the other Client: a yields
		t.Fatal(err)
	}
	outcome(t, ch, 5*time.Second).l.Release(ctx)
	redistest.Eventually(t, func() error { // the turn lead (at most 5ms here) lapses
		if redlock.Yields(a, "k") {
			return errors.New("a still lets the Client it gave the turn to ask first")
		}
		return nil
	})
	before := scriptsRun(t, clients...)
	l := obtain(t, a, "k", 10*time.Second, redlock.WithWait())
	if ran := scriptsRun(t, clients...) - before; ran != 0 {
		t.Errorf("a WithWait Obtain of a free key after a lapsed yield ran %d scripts, want none", ran)
	}
	l.Release(ctx)
}

// TestWaitUncontendedReleaseIsBare: a lock nobody waited for is released
// with the same commands as without waiting (GET and DEL in the script,
// no PUBLISH), and its key holds the bare token; a lock waited for is
// announced once.
func TestWaitUncontendedReleaseIsBare(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 1)
	ctx := t.Context()
	pubs := func() int64 { return calls(t, clients[0], "publish") }
	before := pubs()
	l := obtain(t, a, "k", 10*time.Second)
	if got := get(t, clients[0], "k"); got != l.Token() {
		t.Errorf("an uncontended key holds %q, want the bare token %q", got, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pubs() - before; n != 0 {
		t.Errorf("an uncontended release published %d times, want 0", n)
	}
	held := obtain(t, a, "k", 10*time.Second)
	b := newClient(t, clients)
	ch := waitFor(ctx, b, "k", 10*time.Second)
	marked(t, clients[0], "k")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w := outcome(t, ch, 5*time.Second); w.err != nil {
		t.Fatal(w.err)
	}
	if n := pubs() - before; n != 1 {
		t.Errorf("a release waited for published %d times, want 1", n)
	}
}

// TestWaitWokenAskIsOneCommand: the waiter a release wakes, its Client's
// turn, asks with a plain SET NX carrying the queue, not a script: the
// hand-over runs one script (the release).
func TestWaitWokenAskIsOneCommand(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	hooked, plain := hookedAndPlain(t)
	ctx := t.Context()
	holder := newClient(t, []redis.UniversalClient{plain})
	taker := newClient(t, []redis.UniversalClient{plain})
	held := obtain(t, holder, "k", 20*time.Second)
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
	subscribedAll(t, []redis.UniversalClient{plain})
	o.armed.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	queuedN(t, plain, "k", 1) // queued behind the taker
	if !o.fired.Load() || taken == nil {
		t.Fatal("the woken waiter sent no plain SET NX, or the taker did not take the key")
	}
	l := wakes(t, taken, ch, 5*time.Second)
	l.Release(ctx)
}

// TestWaitResentPlainAskKeepsTheQueue: the master closes the connection
// under a woken head's plain SET NX (before running it); the transport
// sends it again in a form safe to run twice, which sets the same value:
// the token, the mark and the queue (here the Client's own id, for its
// second waiter). With the token alone, the lock's release would not be
// announced, and the Client's second waiter, which sleeps until that
// release, would sleep the lock's whole TTL.
func TestWaitResentPlainAskKeepsTheQueue(t *testing.T) {
	t.Parallel()
	hooked, plain := hookedAndPlain(t)
	ctx := t.Context()
	holder := newClient(t, []redis.UniversalClient{plain})
	held := obtain(t, holder, "k", 20*time.Second)
	o := &onPlainAsk{do: func() {
		// The master closes every other connection (a CLIENT KILL, a
		// proxy's reset): the waiter's lane's among them.
		if err := plain.Do(context.Background(), "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
			t.Errorf("CLIENT KILL: %v", err)
		}
	}}
	hooked.AddHook(cmdHook{before: o.check})
	w := newClient(t, []redis.UniversalClient{hooked}, redlock.WithNodeTimeout(500*time.Millisecond))
	first := waitFor(ctx, w, "k", 20*time.Second)
	ids := queuedN(t, plain, "k", 1)
	second := waitFor(ctx, w, "k", 20*time.Second)
	subscribedAll(t, []redis.UniversalClient{plain})
	o.armed.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := wokenBy(t, first, time.Now(), 5*time.Second)
	if !o.fired.Load() {
		t.Fatal("no plain SET NX with the mark went out")
	}
	if q := queueOf(t, plain, "k"); fmt.Sprint(q) != fmt.Sprint(ids) {
		t.Errorf("the first waiter holds the key as %q: queue %q, want %q (its Client again, for the second waiter)", get(t, plain, "k"), q, ids)
	}
	l2 := wakes(t, l, second, 5*time.Second)
	l2.Release(ctx)
}

// TestWaitSplitPlainAskDoesNotSpin: N=3. A woken head's plain ask meets a
// split: the gate is free (the other owner's key there lost, as in a
// restart), the other two masters hold the key for another owner. The
// grant at the gate is undone, and the undo, a release of a value with the
// turn queue (this Client first: it has a second waiter), announces the key
// on the gate with this Client's turn. The head does not take that
// announcement of its own undo for a release of the key, asking with a
// plain SET NX again and again while the other owner holds the lock and
// never marking the two masters that refuse it: it asks with the script,
// which marks them, sleeps, and asks once more at their release.
func TestWaitSplitPlainAskDoesNotSpin(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	o := &onPlainAsk{}
	var late atomic.Bool
	var hooked []redis.UniversalClient
	var arms []*sharedArm
	for i, s := range servers {
		rdb := pinged(t, s) // go-redis sets its options up at its first connection
		h := &onPlainAsk{do: func() {
			// The first master to see the plain ask is the gate: the
			// other owner takes the other two.
			for j, d := range direct {
				if j != i {
					if ok, err := d.SetNX(context.Background(), "k", "other-owner-token", 3*time.Second).Result(); err != nil {
						t.Errorf("SET on master %d: %v", j, err)
					} else if !ok {
						late.Store(true) // the ask was not gated: it reached master j first
					}
				}
			}
		}}
		h.armed.Store(false)
		arm := &sharedArm{shared: o, own: h}
		arms = append(arms, arm)
		rdb.AddHook(cmdHook{before: arm.check, after: arm.slowRelease})
		hooked = append(hooked, rdb)
	}
	ctx := t.Context()
	holder := newClient(t, direct, redlock.WithNodeTimeout(500*time.Millisecond))
	held := heldOnAll(t, holder, direct)
	w := newClient(t, hooked, redlock.WithNodeTimeout(500*time.Millisecond))
	gate := redlock.GateOf(w, "k")
	first := waitFor(ctx, w, "k", 20*time.Second)
	for _, d := range direct {
		queuedN(t, d, "k", 1)
	}
	second := waitFor(ctx, w, "k", 20*time.Second)
	subscribedAll(t, direct)
	o.armed.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if !o.fired.Load() {
			return fmt.Errorf("no plain ask yet")
		}
		return nil
	})
	if late.Load() {
		t.Skip("the plain ask was not gated this time: it reached the other masters before the other owner")
	}
	never(t, 2*time.Second, func() error { // the other owner holds the key on a majority (3s)
		if asks := arms[gate].asks.Load(); asks > 2 { // the first, and one at late announcements of the release
			return fmt.Errorf("the head asked the gate %d times with a plain SET NX while another owner held the key on the other two masters: it takes its own undo's announcement for a release", asks)
		}
		return nil
	})
	for _, ch := range []<-chan waited{first, second} {
		if l := wokenBy(t, ch, time.Now(), 5*time.Second); l != nil {
			l.Release(ctx)
		}
	}
}

// TestWaitEndedAfterARefusedPlainAskSaysTaken: a head's first ask is the
// plain one (it slept behind its own Client's lock, whose release gave it
// the turn), another Client takes the key first, and the waiter's context
// ends during the script's ask that follows. The plain ask's refusal is
// this Obtain's only answer from the master, and it said "held": the wait
// ends matching ErrTaken, not ErrUnavailable (too few masters answered),
// as when the first ask is the script.
func TestWaitEndedAfterARefusedPlainAskSaysTaken(t *testing.T) {
	t.Parallel()
	hooked, plain := hookedAndPlain(t)
	ctx := t.Context()
	holder := newClient(t, []redis.UniversalClient{plain})
	taker := newClient(t, []redis.UniversalClient{plain})
	held := obtain(t, holder, "k", 20*time.Second)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var taken atomic.Pointer[redlock.Lock]
	var scriptAfter atomic.Bool
	o := &onPlainAsk{bare: true, do: func() {
		l, err := taker.Obtain(context.Background(), "k", 20*time.Second)
		if err != nil {
			t.Errorf("the taker: %v", err)
			return
		}
		taken.Store(l)
		scriptAfter.Store(true)
	}}
	hooked.AddHook(cmdHook{before: o.check})
	hooked.AddHook(cmdHook{before: (&onScript{armed: &scriptAfter, do: func() {
		cancel()
		time.Sleep(50 * time.Millisecond) // the ask's reply comes after the context ended
	}}).check})
	w := newClient(t, []redis.UniversalClient{hooked})
	first := waitFor(ctx, w, "k", 20*time.Second)
	queuedN(t, plain, "k", 1)
	second := waitFor(bctx, w, "k", 20*time.Second)
	subscribedAll(t, []redis.UniversalClient{plain})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := wokenBy(t, first, time.Now(), 5*time.Second) // its value queues its Client again: the second sleeps behind it
	o.armed.Store(true)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w2 := outcome(t, second, 5*time.Second)
	if tl := taken.Load(); tl != nil {
		defer tl.Release(ctx)
	} else {
		t.Fatalf("the second waiter sent no plain ask: %v, %v", w2.err, w2.took)
	}
	if w2.err == nil {
		t.Fatal("the second waiter obtained a key another Client holds")
	}
	if !errors.Is(w2.err, redlock.ErrTaken) {
		t.Errorf("the wait ended after the master answered \"held\": %v; want it to match ErrTaken, not ErrUnavailable", w2.err)
	}
}

// TestWaitGatedKeyWithoutExpiryDoesNotSpin: at N>1 a woken waiter asks the
// gate master alone while it refuses, and sleeps for the PTTL the gate
// reports. A key without expiry (PTTL -1: set by hand, or PERSISTed) says
// nothing of when it is free; it is read as "the master did not say" (a
// wait of about a node timeout), not as "free now", which would have the
// waiter ask the gate again every millisecond for as long as it waits.
func TestWaitGatedKeyWithoutExpiryDoesNotSpin(t *testing.T) {
	t.Parallel()
	_, clients, _ := cluster(t, 3)
	ctx := t.Context()
	for _, c := range clients {
		if err := c.Set(ctx, "k", "someone", 0).Err(); err != nil { // no expiry
			t.Fatal(err)
		}
	}
	obs := &recorder{}
	b := newClient(t, clients, redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithObserver(obs))
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	_, err := b.Obtain(wctx, "k", 5*time.Second, redlock.WithWait())
	if !errors.Is(err, redlock.ErrTaken) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting Obtain of a key held without expiry: %v, want ErrTaken and the deadline", err)
	}
	obtains := all[*redlock.ObtainEvent](obs)
	n := obtains[len(obtains)-1].Attempts
	// About two attempts per node timeout (100-300ms), the gate's refusal
	// and an ask of every master after it (the gate's key says nothing of
	// its end, as a stray key's would not), so 10 to 30 in 1.5s: a waiter
	// that took the key for free now would ask hundreds of times.
	if n > 40 {
		t.Errorf("%d attempts in 1.5s on a key without expiry: the waiter polls the gate master in a loop", n)
	}
}
