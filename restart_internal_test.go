package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// A master that restarts without persistence loses its keys: a Release
// tried again must tell that loss from its own earlier doing.

// TestRestartSeenFirstByAnotherLockIsStillALoss: a batch whose connection
// the master closed goes again on a fresh connection, which asks the
// master's run_id; a Release counts a missing key as its own first run's
// doing only when the master was not seen to restart since the lock was
// obtained (the wire's request.deletedBefore;
// TestReleaseAfterARestartReportsTheLoss).
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

// TestRestartBehindABusyMasterIsStillALoss: a Release tried again counts a
// key found gone as its own earlier doing unless the master is seen to
// have restarted since the lock was obtained: each fresh connection reads
// the run_id with INFO server (the wire's conn.go identify,
// state.sawRunID). A master that restarts without persistence and is busy
// in a script when the lane reconnects answers INFO with -BUSY, which is
// no answer: the take fails and the next one asks again, so the new
// run_id is read once the script ends. Only a refusal (an ACL that denies
// INFO) leaves restarts unseen, as the README says. A's first Release gets
// -BUSY (no answer: reached), B takes the lock on the restarted master,
// and A's retried Release must report the loss (ErrLockLost): the restart
// lost A's key while A held the lock, and B held it after.
func TestRestartBehindABusyMasterIsStillALoss(t *testing.T) {
	defer func(d time.Duration) { connIdle = d }(connIdle)
	connIdle = 300 * time.Millisecond
	ctx := context.Background()
	servers := redistest.Start(t, 1, redistest.Options{Args: []string{"--busy-reply-threshold", "10"}})
	admin := redistest.Clients(t, servers)[0]
	rdb := servers[0].Client(func(o *redis.Options) {
		o.PoolSize = 4 // one lane
		o.ContextTimeoutEnabled = true
	})
	defer rdb.Close()
	scripts := &scriptCounter{}
	rdb.AddHook(scripts)
	c, err := New([]redis.UniversalClient{rdb}, WithNodeTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	laneIdle(t, rdb)
	if err := servers[0].Restart(false); err != nil { // A's key is lost
		t.Fatal(err)
	}
	ran := scripts.ran.Load()
	stop := busyMaster(t, servers[0])
	first := l.Release(ctx)
	stop()
	if first == nil || errors.Is(first, ErrLockLost) {
		t.Fatalf("A's Release on the busy master: %v, want a failure that is not ErrLockLost", first)
	}
	scripts.past(t, ran)                                                // the kept Release went out, and the master ran it
	if err := admin.Set(ctx, "k", "B", time.Minute).Err(); err != nil { // B takes the lock
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("A's Release tried again after the master restarted without persistence (unseen: it was busy when the lane reconnected) and B took the lock: %v; want ErrLockLost (the first: %v)", err, first)
	}
}
