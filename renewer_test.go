package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// holdMany obtains n locks on c and keeps them alive; it returns their
// work contexts and stops.
func holdMany(t *testing.T, c *redlock.Client, prefix string, n int, ttl time.Duration, opts ...redlock.ObtainOption) ([]context.Context, []func()) {
	t.Helper()
	ctxs := make([]context.Context, n)
	stops := make([]func(), n)
	for i := range n {
		l := obtain(t, c, fmt.Sprint(prefix, i), ttl)
		wctx, stop, err := l.KeepAlive(t.Context(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctxs[i], stops[i] = wctx, stop
	}
	return ctxs, stops
}

// TestHeldLocksCostNoGoroutine: locks held under KeepAlive cost no
// goroutine each: the Client's renewer runs them all, on a few workers
// while renewals are due and none between.
func TestHeldLocksCostNoGoroutine(t *testing.T) {
	srv := redistest.Start(t, 1)[0]
	c := newClient(t, []redis.UniversalClient{clientOf(t, srv)})
	const n = 500
	_, few := holdMany(t, c, "few", 1, 2*time.Second) // the Client's own goroutines start
	before := runtime.NumGoroutine()
	_, stops := holdMany(t, c, "many", n, 2*time.Second)
	time.Sleep(time.Second) // renewals of every lock fall due (every ttl/3)
	if grew := runtime.NumGoroutine() - before; grew > n/10 {
		t.Fatalf("%d locks held cost %d goroutines", n, grew)
	}
	for _, stop := range append(stops, few...) {
		stop()
	}
}

// TestCloseEndsEveryWatchdog: Close ends every watchdog of the Client,
// those waiting for their turn and those in one, with a cause matching
// ErrClosed; their stops return at once after.
func TestCloseEndsEveryWatchdog(t *testing.T) {
	srv := redistest.Start(t, 1)[0]
	c, err := redlock.New([]redis.UniversalClient{clientOf(t, srv)}, redlock.AnyClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	// Renewals every 10ms, so that Close meets some in their turn.
	ctxs, stops := holdMany(t, c, "k", 200, 5*time.Second, redlock.WithRenewEvery(10*time.Millisecond))
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i, wctx := range ctxs {
		select {
		case <-wctx.Done():
		default:
			t.Fatalf("watchdog %d still runs after Close", i)
		}
		if cause := context.Cause(wctx); !errors.Is(cause, redlock.ErrClosed) {
			t.Fatalf("watchdog %d ended with %v, want ErrClosed", i, cause)
		}
		stops[i]()
	}
}
