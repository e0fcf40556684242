package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
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
