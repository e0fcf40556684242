package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestClientClockSteppedBackLosesNoWatchedLock: the client's wall clock
// steps back by 5s (an NTP step on the application's host) after its
// lanes measured the masters' offsets. Each master's offset then reads 5s
// low until that lane's next fresh connection, and every Extend's bounds
// reach every master 5s early: past, for a lock of a 1.5s TTL. The masters
// and their keys are untouched (their clocks did not move). A Go test
// cannot step its own wall clock, so the step is made where it lands: the
// offsets the lanes keep, lowered by 5s. A watched lock on three healthy
// masters must not be lost to it.
func TestClientClockSteppedBackLosesNoWatchedLock(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	rdbs := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		rdb := s.Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		t.Cleanup(func() { rdb.Close() })
		rdbs[i] = rdb
	}
	c := newClient(t, rdbs, WithNodeTimeout(200*time.Millisecond))
	const ttl = 1500 * time.Millisecond
	l, err := c.Obtain(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, ttl); err != nil { // every lane has its connection, its offset measured
		t.Fatal(err)
	}
	work, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, n := range c.nodes {
		n.ShiftClock(-5000) // the client's clock stepped back 5s
	}
	select {
	case <-work.Done():
		t.Fatalf("a lock on three healthy masters was lost after the client's clock stepped back 5s: %v", context.Cause(work))
	case <-time.After(3 * ttl):
	}
}
