package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/wake"
)

// TestWaitAfterCloseStartsNoSubscription: obtainWait (and WaitReleased)
// take the waker (wakerFor, which checks c.closed under c.mu) and only then
// join it (w.join, under w.mu), so Close can run to its end in between. A
// join after the waker stopped must start nothing: a subscription started
// then would be a goroutine Close no longer waits for, with its SUBSCRIBE
// connection, for the life of the process (the masters' clients are the
// application's, never closed by Close). The interleaving is forced here by
// calling the two halves in that order.
func TestWaitAfterCloseStartsNoSubscription(t *testing.T) {
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client()
	defer rdb.Close()
	c, err := NewSingle(rdb, AnyClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()

	w := c.wakerFor() // a WithWait Obtain begins: the Client is open
	if w == nil {
		t.Fatal("no waker")
	}
	if err := c.Close(); err != nil { // Close runs to its end meanwhile
		t.Fatal(err)
	}
	x := w.join("k", false) // the Obtain goes on: join, ask (ErrClosed), leave
	w.leave(x, 0)

	time.Sleep(wake.Linger + 500*time.Millisecond) // longer than a subscription lingers
	n, err := rdb.PubSubNumSub(context.Background(), wake.WakeChannel).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n[wake.WakeChannel] != 0 {
		t.Errorf("a closed Client is still subscribed to %s on the master (%d subscribers)", wake.WakeChannel, n[wake.WakeChannel])
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("a closed Client left goroutines: %v", err)
	}
	w.subs.Stop() // ends what a wrong join would have started, for the process's goleak
}

// TestWaitGateFrozenAfterRefusing: a waiter refused at the gate sleeps on
// the gate's announcement. When the gate freezes after refusing it (its
// subscription still looks confirmed: the connection stays open), the
// holder's release runs on the other masters only, a quorum, which announce
// it: the key is free, and the waiter must not sleep until the gate's key
// expires (the holder's whole TTL).
func TestWaitGateFrozenAfterRefusing(t *testing.T) {
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	scripts := make([]*scriptCounter, len(clients))
	for i, rdb := range clients {
		scripts[i] = &scriptCounter{}
		rdb.AddHook(scripts[i])
	}
	ctx := t.Context()
	a := newClient(t, clients, WithNodeTimeout(300*time.Millisecond))
	held, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	onEvery(t, clients, "k", held.Token()) // before the waiter asks: see onEvery
	b := newClient(t, clients, WithNodeTimeout(200*time.Millisecond))
	gate := b.gateOf("k")
	if gate < 0 {
		t.Fatal("no gate at N=3")
	}
	done := make(chan error, 1)
	go func() {
		l, err := b.Obtain(ctx, "k", 20*time.Second, WithWait())
		if err == nil {
			_ = l.Release(context.Background())
		}
		done <- err
	}()
	// Its subscriptions confirmed, the waiter asks again at the gate, is
	// refused there and sleeps on the gate's announcement.
	redistest.Eventually(t, func() error {
		for _, rdb := range clients {
			n, err := rdb.PubSubNumSub(ctx, wake.WakeChannel).Result()
			if err != nil || n[wake.WakeChannel] == 0 {
				return fmt.Errorf("not subscribed (%v)", err)
			}
		}
		return nil
	})
	redistest.Eventually(t, func() error { // and confirmed
		w := b.wakerFor()
		w.mu.Lock()
		defer w.mu.Unlock()
		x := w.keys["k"].queue[0]
		if m := w.subscribed(x); m != 7 {
			return fmt.Errorf("confirmed subscriptions %b", m)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // its asks at the confirmations
	// One more ask, as at a subscription made again: at the gate.
	asked := scripts[gate].ran.Load()
	w := b.wakerFor()
	w.mu.Lock()
	x := w.keys["k"].queue[0]
	x.retry = true
	x.signal()
	w.mu.Unlock()
	scripts[gate].past(t, asked) // the gate refused it: the waiter sleeps on the gate's announcement
	if err := servers[gate].Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { servers[gate].Cont() })
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiting Obtain: %v", err)
		}
		if d := time.Since(released); d > 3*time.Second {
			t.Errorf("obtained %v after the release", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the waiter still sleeps 5s after a release on a quorum (gate %d frozen): until the holder's TTL", gate)
	}
}
