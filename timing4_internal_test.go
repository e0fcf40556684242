package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestRestartSeenFirstByAnotherLockIsStillALoss: a batch whose connection
// the master closed goes again on a fresh connection, which asks the
// master's run_id; a Release counts a missing key as its own first run's
// doing only when the master was not seen to restart since the lock was
// obtained (request.deletedBefore; TestReleaseAfterARestartReportsTheLoss).
// The first request after a restart without persistence (here another
// lock's Obtain) is the one that sees the new run_id; A's Release, sent
// next on the connection that request set up, finds the run_id unchanged
// since then, and must still count the key the restart lost as lost, not
// as deleted by its own first run: B held the lock while A did.
func TestRestartSeenFirstByAnotherLockIsStillALoss(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
	})
	defer rdb.Close()
	c, err := New([]redis.UniversalClient{rdb}, WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other := "other"
	l, err := c.Obtain(ctx, "k", time.Minute) // A holds the lock; its lane keeps its connection
	if err != nil {
		t.Fatal(err)
	}
	if o, err := c.Obtain(ctx, other, time.Minute); err != nil {
		t.Fatal(err)
	} else if err := o.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Restart(false); err != nil { // A's key is lost
		t.Fatal(err)
	}
	rdbB := servers[0].Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	defer rdbB.Close()
	b, err := New([]redis.UniversalClient{rdbB}, WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lb, err := b.Obtain(ctx, "k", time.Minute) // B holds it too
	if err != nil {
		t.Fatalf("B's Obtain after the restart: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if o, err := c.Obtain(ctx, other, time.Minute); err != nil { // sees the restart first
		t.Fatalf("Obtain of another lock after the restart: %v", err)
	} else if err := o.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("A's Release after the master restarted without persistence and B held the lock in between: %v; want ErrLockLost", err)
	}
}
