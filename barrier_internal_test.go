package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// The barrier (the wire's barrier.go) under the lock logic: a failed
// Obtain's undo must not be overtaken by its own straggling acquire.

// TestConnectionTakenWhileBusyKeepsTheBarrier: a lane that takes a fresh
// connection learns its client ID with CLIENT INFO, in the round trip that
// runs the barrier (the wire's conn.go identify). A master busy in a slow
// script (an application's, or a FUNCTION's) answers that with -BUSY,
// which is no answer: the take fails, and no lock request goes out on a
// connection whose ID the lane does not know (without one, a connection
// given up later would not be killed by the next). Only a refusal (NOPERM,
// an unknown command or option) means "no barrier here". Here the script
// ends, and the lane's next batch, an acquire, is delayed on the way (a
// slow network, a proxy): it times out, the connection is given up as a
// victim, and the failed attempt's undo goes out on a fresh connection
// only after the barrier killed it; no straggling SET NX lands after the
// undo to keep the key of an Obtain that failed for its whole TTL (a
// minute here). (TestStallLeavesNoKeyOfAFailedObtain, on a healthy
// master.)
func TestConnectionTakenWhileBusyKeepsTheBarrier(t *testing.T) {
	defer func(d time.Duration) { connIdle = d }(connIdle)
	connIdle = 300 * time.Millisecond // the lane gives its connection back soon
	ctx := context.Background()
	servers := redistest.Start(t, 1, redistest.Options{Args: []string{"--busy-reply-threshold", "10"}})
	admin := redistest.Clients(t, servers)[0]
	p, err := redistest.NewProxy(servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rdb := servers[0].Client(func(o *redis.Options) {
		o.Addr = p.Addr()
		o.PoolSize = 4 // one lane
		o.ContextTimeoutEnabled = true
	})
	defer rdb.Close()
	scripts := &scriptCounter{}
	rdb.AddHook(scripts)
	c, err := New([]redis.UniversalClient{rdb}, WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if l, err := c.Obtain(ctx, "warm", time.Minute); err != nil { // CLIENT KILL is allowed
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.nodes[0].KillAllowed() {
		t.Fatal("the master allows CLIENT KILL, but the node does not know")
	}
	laneIdle(t, rdb)
	ran := scripts.ran.Load()
	stop := busyMaster(t, servers[0])
	_, err = c.Obtain(ctx, "x", time.Minute) // the lane takes a connection: CLIENT INFO gets -BUSY
	stop()
	if err == nil {
		t.Fatal("obtained a lock on a busy master")
	}
	scripts.past(t, ran) // the kept undo of "x" went out, and the master ran it
	if s := rdb.PoolStats(); s.TotalConns != 1 {
		t.Fatalf("%d connections in the pool, want the lane's only", s.TotalConns)
	}
	// The script is over; the lane's connection is delayed on the way.
	p.DelayOpen(500*time.Millisecond, 0)
	if l, err := c.Obtain(ctx, "k", time.Minute); err == nil {
		t.Fatalf("obtained %q through a connection delayed past the node timeout", l.Token())
	}
	redistest.Eventually(t, func() error { // the straggling SET has arrived, or died with its connection
		if n := p.Pending(); n > 0 {
			return fmt.Errorf("the proxy still holds %d chunks back", n)
		}
		return nil
	})
	admin.Get(ctx, "k") // ends the event loop turn in which the master reads what was delivered
	redistest.Within(t, time.Second, func() error {
		if v, err := admin.Get(ctx, "k").Result(); err != redis.Nil {
			return fmt.Errorf("after a failed Obtain (its undo sent), the master holds its key %q (TTL %v, err %v): the lane's connection, taken while the master was busy, had no barrier",
				v, admin.PTTL(ctx, "k").Val().Round(time.Second), err)
		}
		return nil
	})
}
