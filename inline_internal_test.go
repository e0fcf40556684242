package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestCancellableContextSendsInline: on one master whose client bounds
// reads by the deadline, an Obtain and a Release made with a cancellable
// context (a request's context, as most calls are) run on the caller's
// goroutine when the lane is idle, not through the lane's worker: two
// goroutine wake-ups fewer per round trip. A cancellation before the send
// still drops the request (TestQueuedRequestsHonourDeadlineAndContext).
func TestCancellableContextSendsInline(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	seen := &workerSeen{}
	rdb.AddHook(seen)
	c := newClient(t, []redis.UniversalClient{rdb})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		l, err := c.Obtain(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.worker) < 6 {
		t.Fatalf("the hook saw %d commands, want at least 6", len(seen.worker))
	}
	for i, w := range seen.worker {
		if w {
			t.Errorf("command %d of %d ran on the lane's worker", i, len(seen.worker))
		}
	}
}
