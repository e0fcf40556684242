package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// waitFor runs a WithWait Obtain of key in the background; the channel
// gets its outcome and how long it took.
type waited struct {
	l    *redlock.Lock
	err  error
	took time.Duration
}

func waitFor(ctx context.Context, c *redlock.Client, key string, ttl time.Duration) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		start := time.Now()
		l, err := c.Obtain(ctx, key, ttl, redlock.WithWait())
		ch <- waited{l, err, time.Since(start)}
	}()
	return ch
}

// queued waits until the master's wait queue of key holds n entries.
func queued(t *testing.T, rdb redis.UniversalClient, key string, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := rdb.ZCard(context.Background(), "{"+key+"}:wait").Result()
		if err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("wait queue of %s holds %d entries, want %d (err %v)", key, got, n, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func outcome(t *testing.T, ch <-chan waited, within time.Duration) waited {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(within):
		t.Fatalf("the waiting Obtain did not return within %v", within)
		return waited{}
	}
}

// TestWaitWokenByRelease: a waiter is woken by the release, not by its
// timer (the holder's TTL is 20s), over one master and over three.
func TestWaitWokenByRelease(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "one master", 3: "three masters"}[n], func(t *testing.T) {
			_, clients, a := cluster(t, n)
			b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
			ctx := t.Context()
			held, err := a.Obtain(ctx, "k", 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ch := waitFor(ctx, b, "k", 20*time.Second)
			queued(t, clients[0], "k", 1)
			released := time.Now()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w := outcome(t, ch, 5*time.Second)
			if w.err != nil {
				t.Fatalf("waiting Obtain: %v", w.err)
			}
			if d := time.Since(released); d > time.Second {
				t.Errorf("obtained %v after the release, want it woken at once", d)
			}
			if err := w.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWaitLostNotification: a key deleted behind the library's back (no
// release, so no wake-up) costs a waiter at most the key's remaining TTL.
func TestWaitLostNotification(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	if _, err := a.Obtain(ctx, "k", 800*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ch := waitFor(ctx, b, "k", time.Second)
	queued(t, clients[0], "k", 1)
	clients[0].Del(ctx, "k") // gone without a word
	w := outcome(t, ch, 5*time.Second)
	if w.err != nil {
		t.Fatalf("waiting Obtain: %v", w.err)
	}
	if w.took > 1500*time.Millisecond {
		t.Errorf("obtained after %v, want within the holder's TTL (800ms) and a little", w.took)
	}
}

// TestWaitSubscriptionKilled: the subscription connection killed while a
// waiter waits; the release right after is published to nobody. The
// re-established subscription makes the waiter ask again, long before the
// holder's 20s TTL.
func TestWaitSubscriptionKilled(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	held, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch := waitFor(ctx, b, "k", 20*time.Second)
	queued(t, clients[0], "k", 1)
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

// TestWaitFirstComeFirstServedAcrossClients: waiters of three Clients (as
// three processes) queued in turn get the lock in that order.
func TestWaitFirstComeFirstServedAcrossClients(t *testing.T) {
	_, clients, a := cluster(t, 1)
	ctx := t.Context()
	held, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 3 {
		c := newClient(t, clients)
		wg.Go(func() {
			l, err := c.Obtain(ctx, "k", 20*time.Second, redlock.WithWait())
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		queued(t, clients[0], "k", int64(i+1))
		time.Sleep(5 * time.Millisecond) // distinct queue scores (ms)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Errorf("obtained in order %v, want [0 1 2]", order)
	}
}

// TestWaitHandsOnUnwanted: a Client whose waiter gave up is still queued;
// the release keeps the key for it, and it hands the key on at once to the
// next Client queued instead of letting it sit out the grace (2s here).
func TestWaitHandsOnUnwanted(t *testing.T) {
	_, clients, a := cluster(t, 1, redlock.WithNodeTimeout(time.Second))
	quitter := newClient(t, clients, redlock.WithNodeTimeout(time.Second))
	next := newClient(t, clients, redlock.WithNodeTimeout(time.Second))
	ctx := t.Context()
	held, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithCancel(ctx)
	gone := waitFor(qctx, quitter, "k", 20*time.Second)
	queued(t, clients[0], "k", 1)
	time.Sleep(5 * time.Millisecond)
	ch := waitFor(ctx, next, "k", 20*time.Second)
	queued(t, clients[0], "k", 2)
	cancel()
	if w := outcome(t, gone, 5*time.Second); !errors.Is(w.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", w.err)
	}
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := outcome(t, ch, 10*time.Second)
	if w.err != nil {
		t.Fatal(w.err)
	}
	if d := time.Since(released); d > time.Second {
		t.Errorf("the next Client obtained %v after the release, want at once (grace 2s)", d)
	}
}

// TestWaitClose: Close ends a wait at once with ErrClosed (and TestMain's
// goleak finds no goroutine left).
func TestWaitClose(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := a.Obtain(ctx, "k", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ch := waitFor(ctx, b, "k", 20*time.Second)
	watch := make(chan error, 1)
	go func() { watch <- b.WaitReleased(ctx, "k") }()
	queued(t, clients[0], "k", 2)
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	w := outcome(t, ch, 5*time.Second)
	if !errors.Is(w.err, redlock.ErrClosed) {
		t.Errorf("waiting Obtain after Close: %v, want ErrClosed", w.err)
	}
	if err := <-watch; !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("WaitReleased after Close: %v, want ErrClosed", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v with waiters", d)
	}
}

// TestWaitReleased: it returns at once for a free key, at the release for
// a held one (not at its 20s TTL), and with ctx's cause when ctx ends.
func TestWaitReleased(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	if err := b.WaitReleased(ctx, "free"); err != nil {
		t.Fatalf("free key: %v", err)
	}
	held, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := b.WaitReleased(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held key, short ctx: %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() { done <- b.WaitReleased(ctx, "k") }()
	queued(t, clients[0], "k", 1)
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("WaitReleased returned %v while the key is held", err)
	default:
	}
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(released); d > time.Second {
			t.Errorf("returned %v after the release", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitReleased did not return after the release")
	}
}

// TestWaitNoHerd: 24 waiters of one key over 3 Clients, each holding 1ms:
// a release wakes one Client's one waiter, so the masters see few
// requests per hand-over (a herd would send one per waiter).
func TestWaitNoHerd(t *testing.T) {
	_, clients, _ := cluster(t, 1)
	ctx := t.Context()
	var cs []*redlock.Client
	for range 3 {
		cs = append(cs, newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond)))
	}
	// Warm the subscriptions, so the first attempts already queue.
	for _, c := range cs {
		l, err := c.Obtain(ctx, "k", 10*time.Second, redlock.WithWait())
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	}
	// Queued attempts and releases are scripts; a SET would count the
	// scripts' own SETs too.
	requests := func() int64 { return calls(t, clients[0], "evalsha") + calls(t, clients[0], "eval") }
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
			time.Sleep(time.Millisecond)
			l.Release(ctx)
		})
	}
	wg.Wait()
	n := requests() - before
	if per := float64(n) / waiters; per > 4 {
		t.Errorf("%d scripts run for %d hand-overs: %.1f each, want at most 4 (a refused attempt that queues, the attempt the release woke, the release)", n, waiters, per)
	}
}

func TestWaitOptionChecks(t *testing.T) {
	_, _, c := cluster(t, 1)
	ctx := t.Context()
	if _, err := c.Obtain(ctx, "k", time.Second, redlock.WithWait(), redlock.WithRetry(redlock.LinearBackoff(time.Millisecond))); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("WithWait and WithRetry: %v, want ErrInvalidArgument", err)
	}
	l, err := c.Obtain(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.KeepAlive(ctx, redlock.WithWait()); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("KeepAlive WithWait: %v, want ErrInvalidArgument", err)
	}
}
