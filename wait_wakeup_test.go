package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The wake-up subscriptions: a quorum of announcements, a master down, a
// subscription killed or dialled through a panicking hook, a Redis Cluster's
// sharded channels.

// TestWaitQuorumOfWakes: over three masters, a waiter refused by all three
// asks again only once two of them announced a release (one more refusal
// would rule out the quorum), not at the first announcement.
func TestWaitQuorumOfWakes(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 3)
	b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := t.Context()
	held := heldOnAll(t, a, clients)
	ch := waitFor(ctx, b, "k", 20*time.Second)
	for _, m := range clients {
		marked(t, m, "k")
	}
	subscribedAll(t, clients) // the ask at the subscriptions' confirmation is over
	asks := func() int64 { return scriptsRun(t, clients...) }
	before := asks()
	// A master other than the gate announces a release (the key stays held
	// on the other two): a waiter refused at the gate alone, at the ask
	// that followed its subscriptions' confirmation, rightly asks again at
	// the gate's announcement.
	other := (redlock.GateOf(b, "k") + 1) % len(clients)
	if err := clients[other].Publish(ctx, "redlock:wake", "k").Err(); err != nil {
		t.Fatal(err)
	}
	never(t, 200*time.Millisecond, func() error { // an ask at that announcement would come now
		if n := asks() - before; n != 0 {
			return fmt.Errorf("the waiter asked the masters %d times after one announcement of three", n)
		}
		return nil
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := outcome(t, ch, 5*time.Second)
	if w.err != nil {
		t.Fatal(w.err)
	}
	w.l.Release(ctx)
}

// TestWaitWithAMasterDown: at N=3 with one master down for good (frozen),
// its wake subscription never confirms; the two that refused the waiter, both
// subscribed, are enough to tell it a quorum is free, so it sleeps on
// them instead of asking again every node timeout, and their releases
// wake it.
func TestWaitWithAMasterDown(t *testing.T) {
	t.Parallel()
	servers, clients, a := cluster(t, 3)
	ctx := t.Context()
	held := heldOnAll(t, a, clients)
	takeDown(t, "frozen", servers[2]) // its subscription never confirms
	b := newClient(t, clients, redlock.WithNodeTimeout(200*time.Millisecond))
	ch := waitFor(ctx, b, "k", 20*time.Second)
	live := clients[:2]
	for _, m := range live {
		marked(t, m, "k")
	}
	subscribedAll(t, live) // the ask at the subscriptions' confirmation is over
	asks := func() int64 { return scriptsRun(t, live...) }
	before := asks()
	never(t, time.Second, func() error { // five node timeouts
		if n := asks() - before; n != 0 {
			return fmt.Errorf("the waiter asked the live masters %d times within five node timeouts with the key held", n)
		}
		return nil
	})
	l := wakes(t, held, ch, 5*time.Second)
	l.Release(ctx)
}

// TestWaitUncontendedSubscribesNothing: a WithWait Obtain that gets the
// key at its first attempt opens no subscription (on a Redis Cluster that
// would be a connection per key): subscriptions start when a waiter first
// sleeps.
func TestWaitUncontendedSubscribesNothing(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 1)
	ctx := t.Context()
	for i := range 20 {
		l := obtain(t, a, fmt.Sprint("free:", i), 10*time.Second, redlock.WithWait())
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	never(t, 100*time.Millisecond, func() error { // a subscription would be made by now
		if n := subscribers(t, clients[0], "redlock:wake", false); n != 0 {
			return fmt.Errorf("%d subscriptions to the wake channel after uncontended waits, want none", n)
		}
		return nil
	})
	// A waiter that sleeps subscribes, and is woken by the release.
	held, ch := holdAndWait(t, a, newClient(t, clients))
	marked(t, clients[0], "k")
	subscribedAll(t, clients)
	wakes(t, held, ch, 5*time.Second).Release(ctx)
}

// TestWaitSubscriptionKilled: the subscription connection killed while a
// waiter waits; the release right after is published to nobody. The
// re-established subscription makes the waiter ask again, long before the
// holder's 20s TTL.
func TestWaitSubscriptionKilled(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	held, ch := holdAndWait(t, a, b)
	marked(t, clients[0], "k")
	subscribedAll(t, clients) // the waiter relies on the wake-up, and sleeps on the 20s TTL
	if err := clients[0].ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := outcome(t, ch, 10*time.Second)
	if w.err != nil {
		t.Fatalf("waiting Obtain: %v", w.err)
	}
	if w.took > 3*time.Second {
		t.Errorf("obtained after %v, want soon after the subscription came back", w.took)
	}
}

// TestWaitSubscriptionSurvivesPanickingHook: a go-redis dial hook that
// panics while the subscription is made is a lost subscription, not a
// crash: once the hook stops panicking, the subscription is made again
// within its bounded retry delay, and the release wakes the waiter long
// before the holder's 20s TTL.
func TestWaitSubscriptionSurvivesPanickingHook(t *testing.T) {
	servers, clients, a := cluster(t, 1)
	// A first connection before the hook panics: go-redis's first one
	// turns its maintenance notifications off (Redis < 8) under a lock
	// its PubSub's option clone does not take, a race of go-redis's own.
	rdb := pinged(t, servers[0])
	hook := &dialHook{}
	rdb.AddHook(hook)
	var panics atomic.Int32
	hook.set(func() { panics.Add(1); dialPanics() })
	b := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(200*time.Millisecond))
	ctx := t.Context()
	held, ch := holdAndWait(t, a, b)
	redistest.Eventually(t, func() error { // several subscriptions panic meanwhile
		if n := panics.Load(); n < 3 {
			return fmt.Errorf("%d dials panicked, want 3", n)
		}
		return nil
	})
	hook.set(nil)
	marked(t, clients[0], "k")
	subscribedAll(t, clients) // the waiter relies on the wake-up
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wokenBy(t, ch, released, 3*time.Second).Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaitSurvivesAPanickingDialHook: a go-redis hook that panics while
// the library sends fails its requests and nothing else
// (TestPanickingHookFailsItsBatchOnly,
// TestPanickingHookOnAColdClusterDoesNotPanicTheCaller). The subscription
// of a waiting Obtain dials on its own goroutine, through the client's
// dial hook; a panic there is recovered and counts as a lost subscription,
// never as the end of the process. Run in a child process: an unrecovered
// panic would take the test binary with it.
func TestWaitSurvivesAPanickingDialHook(t *testing.T) {
	t.Parallel()
	if os.Getenv("REDLOCK_TEST_CHILD") == "1" {
		panickingDialHookChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWaitSurvivesAPanickingDialHook$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDLOCK_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tail := out
		if len(tail) > 1500 {
			tail = tail[:1500]
		}
		t.Errorf("a waiting Obtain through a panicking dial hook crashed the process (%v):\n%s", err, tail)
	}
}

// panickingDialHookChild is TestWaitSurvivesAPanickingDialHook's child:
// a waiting Obtain whose subscription dials through a panicking hook.
func panickingDialHookChild(t *testing.T) {
	servers := redistest.Start(t, 1)
	holder := clientOf(t, servers[0])
	rdb := clientOf(t, servers[0])
	hook := &dialHook{}
	rdb.AddHook(hook)
	a, b := newSingle(t, holder), newSingle(t, rdb)
	ctx := context.Background()
	obtain(t, a, "k", 5*time.Second)
	hook.set(dialPanics)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Obtain panicked: %v", p)
			}
		}()
		_, err = b.Obtain(wctx, "k", 5*time.Second, redlock.WithWait())
	}()
	if err == nil || !errors.Is(err, redlock.ErrNotObtained) {
		t.Logf("waiting Obtain: %v", err)
	}
	hook.set(nil)
}

// TestWaitCloseAfterPanickedReconnect: when a subscription's connection
// breaks, go-redis's PubSub dials again inside Receive under its own mutex,
// without a defer; a dial hook that panics there leaves that mutex locked
// for good. The waker drops such a PubSub; a Close (or the end of a
// linger) before the next subscription is made must not close it, and
// block for ever on the dead mutex, holding the waker's lock.
func TestWaitCloseAfterPanickedReconnect(t *testing.T) {
	hook := &dialHook{}
	clients, b, ch, cancel := waitingClient(t, hook)
	defer cancel()
	var panics atomic.Int32
	hook.set(func() {
		if panics.Add(1) == 1 {
			dialPanics()
		}
	})
	cutSubscriptions(t, clients[0])
	redistest.Eventually(t, func() error {
		if panics.Load() == 0 {
			return errors.New("the subscription did not dial again after its connection was killed")
		}
		return nil
	})
	time.Sleep(10 * time.Millisecond) // Close comes within the first retry delay (50ms)
	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs after a dial hook panicked in a subscription's reconnect")
	}
	if w := outcome(t, ch, 5*time.Second); !errors.Is(w.err, redlock.ErrClosed) {
		t.Errorf("waiting Obtain after Close: %v, want ErrClosed", w.err)
	}
}

// TestWaitDialingSubscriptionHoldsNoWaiter: a subscription's PubSub may be
// dialling (a master that is slow to accept, a hook) when the waker ends it
// (the end of a linger, Close); closing the PubSub waits for that dial.
// The waker's lock, which every waiter takes to begin and end a wait, is
// not held meanwhile: a waiting Obtain with a 300ms deadline returns by it,
// not at the end of the dial.
func TestWaitDialingSubscriptionHoldsNoWaiter(t *testing.T) {
	t.Parallel()
	hook := &dialHook{}
	clients, b, ch, cancel := waitingClient(t, hook)
	defer b.Close()
	stop := make(chan struct{})
	defer close(stop)
	hook.set(func() { // a dial that takes 6s, unless the test ends first
		select {
		case <-stop:
		case <-time.After(6 * time.Second):
		}
	})
	// The subscription's connection breaks: go-redis dials again, slowly.
	cutSubscriptions(t, clients[0])
	cancel() // the only waiter leaves: the subscription lingers 2s, then ends
	if w := outcome(t, ch, 5*time.Second); w.err == nil {
		t.Fatal("the waiter got the lock")
	}
	time.Sleep(2300 * time.Millisecond) // the linger (2s) ends: closing the PubSub waits for the dial
	start := time.Now()
	wctx, wcancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer wcancel()
	_, err := b.Obtain(wctx, "k", 20*time.Second, redlock.WithWait())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting Obtain: %v, want its deadline", err)
	}
	if d := time.Since(start); d > 1200*time.Millisecond {
		t.Errorf("a waiting Obtain with a 300ms deadline returned after %v: it waited for a subscription's dial", d)
	}
}

// TestWaitOnRedisCluster: on a Redis Cluster master a waiter marks the
// key, and the release announces it on the key's own sharded channel
// (SPUBLISH, in the key's slot); the waiter is woken by it, not by the
// holder's 20s TTL, for keys on every shard, and for a key of a set.
func TestWaitOnRedisCluster(t *testing.T) {
	t.Parallel()
	rc := redistest.StartCluster(t, 3)
	ctx := t.Context()
	var cs []*redlock.Client
	for range 2 {
		cs = append(cs, newSingle(t, clusterClient(t, rc), redlock.WithKeyPrefix("lock:"), redlock.WithNodeTimeout(500*time.Millisecond)))
	}
	// woken checks that a waiter of key k marks it, and that release,
	// once the waiter is subscribed, wakes it.
	woken := func(k string, release func(context.Context) error) {
		t.Helper()
		ch := waitFor(ctx, cs[1], k, 20*time.Second)
		cc := clusterClient(t, rc)
		marked(t, cc, "lock:"+k)
		redistest.Eventually(t, func() error {
			if subscribers(t, cc, "lock:"+k, true) == 0 {
				return fmt.Errorf("nobody subscribed to %s", k)
			}
			return nil
		})
		released := time.Now()
		if err := release(ctx); err != nil {
			t.Fatalf("%s: release of a marked key: %v", k, err)
		}
		wokenBy(t, ch, released, time.Second).Release(ctx)
	}
	for _, k := range []string{"a", "b", "c", "user:{42}"} {
		woken(k, obtain(t, cs[0], k, 20*time.Second).Release)
	}
	// A key held by a set (one slot: one hash tag) is announced the same
	// way by the set's Release.
	set, err := cs[0].ObtainMulti(ctx, []string{"{s}:a", "{s}:b"}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	woken("{s}:b", set.Release)
}

// TestWaitResubscribesWhenTheMasterDropsTheChannel: a Redis Cluster master
// drops its clients' subscriptions to the sharded channels of a slot it
// stops serving (the slot migrated away, CLUSTER DELSLOTS), and tells them
// with an "sunsubscribe" message; the connection stays open. The
// subscription takes notice and is made again: a subscription that stayed
// "confirmed" while it heard nothing would have every waiter of the key
// sleep out the holder's TTL (20s here) instead of being woken by the
// release.
func TestWaitResubscribesWhenTheMasterDropsTheChannel(t *testing.T) {
	t.Parallel()
	rc := redistest.StartCluster(t, 3)
	ctx := t.Context()
	var cs []*redlock.Client
	for range 2 {
		cs = append(cs, newClient(t, []redis.UniversalClient{clusterClient(t, rc)}, redlock.WithKeyPrefix("lock:"), redlock.WithNodeTimeout(500*time.Millisecond)))
	}
	cc := clusterClient(t, rc)
	held := obtain(t, cs[0], "a", 20*time.Second)
	ch := waitFor(ctx, cs[1], "a", 20*time.Second)
	subscribedTo := func(want bool) error {
		if got := subscribers(t, cc, "lock:a", true) > 0; got != want {
			return fmt.Errorf("subscribed to lock:a: %v, want %v", got, want)
		}
		return nil
	}
	marked(t, cc, "lock:a")
	redistest.Eventually(t, func() error { return subscribedTo(true) })
	wakeUpOnly()
	owner, err := cc.MasterForKey(ctx, "lock:a")
	if err != nil {
		t.Fatal(err)
	}
	slot := cc.ClusterKeySlot(ctx, "lock:a").Val()
	// The master stops serving the slot, and serves it again: it drops the
	// slot's shard channels' subscribers (sunsubscribe) on the way.
	if err := owner.Do(ctx, "cluster", "delslots", slot).Err(); err != nil {
		t.Fatal(err)
	}
	if err := owner.Do(ctx, "cluster", "addslots", slot).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.WaitOK(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error { return subscribedTo(true) })
	wakes(t, held, ch, 3*time.Second).Release(ctx)
}
