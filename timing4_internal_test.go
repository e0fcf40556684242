package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestRestartSeenFirstByAnotherLaneIsStillALoss: a batch whose connection
// the master closed goes again on a fresh connection, which asks the
// master's run_id; a Release counts a missing key as its own first run's
// doing only when the run_id is the one from before (transport.go exec:
// t.same; TestReleaseAfterARestartReportsTheLoss). But the run_id it
// compares with is the node's, shared by the node's lanes and overwritten
// by whichever lane asks first (transport.go take: node.runID.Swap). A
// single master has up to four lanes: after a restart without persistence,
// the first lane to find its connection closed (here another lock's Obtain)
// records the new run_id; the lane of A's key, asking next, finds the
// run_id unchanged, takes the master for the same process, and A's Release
// counts the key the restart lost as deleted by its own first run. Release
// returns nil, though B held the lock while A did.
//
// Suggested fix: compare with the run_id the lane's own connection was
// taken under (keep it in the transport, or in the victim), not the node's
// latest.
func TestRestartSeenFirstByAnotherLaneIsStillALoss(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.PoolSize = 16 // four lanes
		o.ContextTimeoutEnabled = true
	})
	defer rdb.Close()
	c, err := New([]redis.UniversalClient{rdb}, WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.nodes[0].lanes) < 2 {
		t.Fatalf("%d lanes", len(c.nodes[0].lanes))
	}
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("other%d", i); c.nodes[0].laneOf(c.cfg.keyPrefix+k) != c.nodes[0].laneOf(c.cfg.keyPrefix+"k") {
			other = k
		}
	}
	l, err := c.Obtain(ctx, "k", time.Minute) // A holds the lock; its lane keeps its connection
	if err != nil {
		t.Fatal(err)
	}
	if o, err := c.Obtain(ctx, other, time.Minute); err != nil { // another lane keeps one too
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
	if o, err := c.Obtain(ctx, other, time.Minute); err != nil { // the other lane sees the restart first
		t.Fatalf("Obtain on the other lane after the restart: %v", err)
	} else if err := o.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("A's Release after the master restarted without persistence and B held the lock in between: %v; want ErrLockLost", err)
	}
}
