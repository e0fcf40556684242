package redlocktest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlocktest"
)

// Third adversarial review: each test here fails on the code it was
// written against (9db8361), and names the defect it shows.

type masterEvents struct {
	mu   sync.Mutex
	down map[string]bool
}

func (o *masterEvents) Observe(_ context.Context, e redlock.Event) {
	if e, ok := e.(*redlock.MasterEvent); ok && !e.Up {
		o.mu.Lock()
		o.down[e.Addr] = true
		o.mu.Unlock()
	}
}

// TestDownMastersLookDown: Down's doc: the masters "fail every request, as
// masters that are down would". They answer every request with an error
// reply (LOADING), and the library takes an error reply for an answer: an
// Observer hears of no master that stopped answering (observe.go health),
// and a Release that met them is not kept to be sent when they are Up
// (internal/wire/kept.go): a user's test of the alerting, or of the keys a
// Release leaves behind an outage, passes against the kit and not against
// Redis.
func TestDownMastersLookDown(t *testing.T) {
	ctx := context.Background()
	m := redlocktest.New(t, 3)
	obs := &masterEvents{down: map[string]bool{}}
	c := m.Client(redlock.WithObserver(obs), redlock.WithNodeTimeout(100*time.Millisecond))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for i, rdb := range m.Redis() { // every master ran the acquire
		for rdb.Get(ctx, "k").Val() != l.Token() {
			if time.Now().After(deadline) {
				t.Fatalf("master %d never got the lock's key", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	m.Down(1, 2)
	if _, err := c.Obtain(ctx, "other", time.Minute); err == nil {
		t.Fatal("Obtain with two of three masters down succeeded")
	}
	obs.mu.Lock()
	down := len(obs.down)
	obs.mu.Unlock()
	if down != 2 {
		t.Errorf("Obtain with two masters down: the Observer heard of %d masters that stopped answering, want 2", down)
	}
	m.Up(1)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with two of three masters up: %v", err)
	}
	m.Up(2)
	time.Sleep(500 * time.Millisecond) // the kept Release goes out
	if v, err := m.Redis()[2].Get(ctx, "k").Result(); err == nil {
		t.Errorf("after master 2 is Up again, it holds the released lock's key %q", v)
	}
}
