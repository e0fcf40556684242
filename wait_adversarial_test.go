package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// attempts is an Observer that keeps the attempts of the last Obtain.
type attempts struct {
	mu sync.Mutex
	n  int
}

func (a *attempts) Observe(_ context.Context, e redlock.Event) {
	if o, ok := e.(*redlock.ObtainEvent); ok {
		a.mu.Lock()
		a.n = o.Attempts
		a.mu.Unlock()
	}
}

// TestWaitGatedKeyWithoutExpiryDoesNotSpin: at N>1 a woken waiter asks the
// gate master alone while it refuses, and sleeps for the PTTL the gate
// reports. A key without expiry (PTTL -1: set by hand, or PERSISTed) says
// nothing of when it is free; it must be read as "the master did not say"
// (a wait of about a node timeout), not as "free now", which makes the
// waiter ask the gate again every millisecond for as long as it waits.
func TestWaitGatedKeyWithoutExpiryDoesNotSpin(t *testing.T) {
	_, clients, _ := cluster(t, 3)
	ctx := t.Context()
	for _, c := range clients {
		if err := c.Set(ctx, "k", "someone", 0).Err(); err != nil { // no expiry
			t.Fatal(err)
		}
	}
	obs := &attempts{}
	b := newClient(t, clients, redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithObserver(obs))
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	_, err := b.Obtain(wctx, "k", 5*time.Second, redlock.WithWait())
	if !errors.Is(err, redlock.ErrTaken) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting Obtain of a key held without expiry: %v, want ErrTaken and the deadline", err)
	}
	obs.mu.Lock()
	n := obs.n
	obs.mu.Unlock()
	// About one attempt per node timeout (100-300ms) in 1.5s.
	if n > 20 {
		t.Errorf("%d attempts in 1.5s on a key without expiry: the waiter polls the gate master in a loop", n)
	}
}

// dialHook runs f (when set) in every dial of the client it is added to.
type dialHook struct {
	f atomic.Pointer[func()]
}

func (h *dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if f := h.f.Load(); f != nil {
			(*f)()
		}
		return next(ctx, network, addr)
	}
}
func (h *dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// waitingClient returns a Client over a fresh client of servers[0] with
// hook added, and a Client a over the test's clients that holds "k" for
// 20s, while b waits for it (subscribed and marked).
func waitingClient(t *testing.T, hook *dialHook) (clients []redis.UniversalClient, b *redlock.Client, held *redlock.Lock, ch <-chan waited, cancel context.CancelFunc) {
	servers, clients, a := cluster(t, 1)
	rdb := servers[0].Client()
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil { // see TestWaitSubscriptionSurvivesPanickingHook
		t.Fatal(err)
	}
	rdb.AddHook(hook)
	b, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	held, err = a.Obtain(t.Context(), "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(t.Context())
	ch = waitFor(wctx, b, "k", 20*time.Second)
	marked(t, clients[0], "k")
	subscribed(t, clients[0])
	return clients, b, held, ch, cancel
}

// TestWaitCloseAfterPanickedReconnect: when a subscription's connection
// breaks, go-redis's PubSub dials again inside Receive under its own mutex,
// without a defer; a dial hook that panics there leaves that mutex locked
// for good. The waker drops such a PubSub (waker.run), but it stayed the
// subscription's current one until the next was made (after a retry delay),
// and a Close (or the end of a linger) meanwhile closed it: Close blocked for
// ever on the dead mutex, holding the waker's lock.
func TestWaitCloseAfterPanickedReconnect(t *testing.T) {
	hook := &dialHook{}
	clients, b, _, ch, cancel := waitingClient(t, hook)
	defer cancel()
	var panics atomic.Int32
	once := func() {
		if panics.Add(1) == 1 {
			panic("dial hook panics")
		}
	}
	hook.f.Store(&once)
	if err := clients[0].ClientKillByFilter(t.Context(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for panics.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if panics.Load() == 0 {
		t.Fatal("the subscription did not dial again after its connection was killed")
	}
	time.Sleep(10 * time.Millisecond) // within the first retry delay (50ms)
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
// The waker's lock, which every waiter takes to begin and end a wait, must
// not be held meanwhile: a waiting Obtain with a 300ms deadline blocked for
// the rest of the dial.
func TestWaitDialingSubscriptionHoldsNoWaiter(t *testing.T) {
	hook := &dialHook{}
	clients, b, _, ch, cancel := waitingClient(t, hook)
	defer b.Close()
	var slow atomic.Bool
	slow.Store(true)
	defer slow.Store(false)
	stall := func() { // a dial that takes 6s, unless the test ends first
		for i := 0; i < 600 && slow.Load(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	hook.f.Store(&stall)
	// The subscription's connection breaks: go-redis dials again, slowly.
	if err := clients[0].ClientKillByFilter(t.Context(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	cancel() // the only waiter leaves: the subscription lingers 2s, then ends
	if w := outcome(t, ch, 5*time.Second); w.err == nil {
		t.Fatal("the waiter got the lock")
	}
	time.Sleep(2300 * time.Millisecond) // the linger has ended: closing the PubSub waits for the dial
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

// TestWaitResubscribesWhenTheMasterDropsTheChannel: a Redis Cluster master
// drops its clients' subscriptions to the sharded channels of a slot it
// stops serving (the slot migrated away, CLUSTER DELSLOTS), and tells them
// with an "sunsubscribe" message; the connection stays open. A
// subscription that took no notice stayed "confirmed" while it heard
// nothing: every waiter of the key then slept out the holder's TTL (20s
// here) instead of being woken by the release.
func TestWaitResubscribesWhenTheMasterDropsTheChannel(t *testing.T) {
	rc := startCluster(t, 3)
	ctx := t.Context()
	var cs []*redlock.Client
	for range 2 {
		cc := rc.Client()
		t.Cleanup(func() { cc.Close() })
		c := newClient(t, []redis.UniversalClient{cc}, redlock.WithKeyPrefix("lock:"), redlock.WithNodeTimeout(500*time.Millisecond))
		cs = append(cs, c)
	}
	cc := rc.Client()
	defer cc.Close()
	held, err := cs[0].Obtain(ctx, "a", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch := waitFor(ctx, cs[1], "a", 20*time.Second)
	subscribedTo := func(want bool) error {
		n, err := cc.PubSubShardNumSub(ctx, "lock:a").Result()
		if err != nil {
			return err
		}
		if got := n["lock:a"] > 0; got != want {
			return fmt.Errorf("subscribed to lock:a: %v, want %v", got, want)
		}
		return nil
	}
	redistest.Eventually(t, func() error {
		if v := get(t, cc, "lock:a"); !strings.Contains(v, "!") {
			return fmt.Errorf("lock:a holds %q, not marked", v)
		}
		return subscribedTo(true)
	})
	time.Sleep(700 * time.Millisecond) // the waiter relies on the wake-up
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
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wokenBy(t, ch, released, 3*time.Second).Release(ctx)
}

// TestWaitQueuedWaiterTimesOutAsTaken: a waiter queued behind its Client's
// head asks no master; when its context ends, the key is held by another
// owner (the head was refused), and the error says so: ErrTaken, as the
// head's own would. It said ErrUnavailable ("an outage, not a reason to
// skip quietly"), with every master "not answered".
func TestWaitQueuedWaiterTimesOutAsTaken(t *testing.T) {
	_, clients, a := cluster(t, 3)
	b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := t.Context()
	// On every master before the head asks: Obtain returns at a quorum,
	// and a head that overtook the third master's SET there would hold
	// it, then undo it, and never mark it.
	held := heldOnAll(t, a, clients)
	defer held.Release(ctx)
	head := waitFor(ctx, b, "k", 20*time.Second)
	for _, c := range clients {
		marked(t, c, "k") // the head was refused
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := b.Obtain(wctx, "k", 20*time.Second, redlock.WithWait())
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrTaken) || errors.Is(err, redlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued waiter at its deadline: %v, want ErrNotObtained, ErrTaken (not ErrUnavailable) and the deadline", err)
	}
	select {
	case w := <-head:
		t.Fatalf("the head returned: %v", w.err)
	default:
	}
}

// TestWaitReleasedNeedsNoReplicaAcks: WaitReleased's look at a key takes
// nothing (it marks a held key as waited for, a hint that needs no
// durability); WithReplicaAcks is about grants. With the replica frozen,
// the master's answer "held" counted as no answer (its WAIT got 0 acks),
// and WaitReleased returned ErrUnavailable at once, the key still held,
// instead of waiting for the release.
func TestWaitReleasedNeedsNoReplicaAcks(t *testing.T) {
	_, replica, rdb, _ := replicated(t)
	ctx := t.Context()
	a := newClient(t, []redis.UniversalClient{rdb})
	held, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(ackNodeTimeout), redlock.WithReplicaAcks(1, ackWait))
	if err := replica.Stop(); err != nil {
		t.Fatal(err)
	}
	defer replica.Cont()
	done := make(chan error, 1)
	go func() { done <- c.WaitReleased(ctx, "k") }()
	select {
	case err := <-done:
		t.Fatalf("WaitReleased returned %v with the key held: it waits for the release", err)
	case <-time.After(time.Second):
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitReleased after the release: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitReleased did not return after the release")
	}
}
