package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestBarrierKillsNoStranger: client IDs are a per-process counter, so
// after a master restarts the ID of the lane's old connection names some
// other client of the new process. The transport still sends CLIENT KILL ID
// <old> as its barrier (transport.go drop and send), and kills whoever has
// that ID now: another application's connection, a replica's link, a
// monitoring tool, another process's lock lane mid-batch.
func TestBarrierKillsNoStranger(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) { o.PoolSize = 4 }) // one lane
	defer rdb.Close()
	c, err := New([]redis.UniversalClient{rdb}, WithNodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ln := c.nodes[0].lane
	ln.mu.Lock()
	old := ln.t.(*redisTransport).id
	ln.mu.Unlock()
	if old == 0 {
		t.Fatal("the lane does not know its connection's ID")
	}

	if err := servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	// Another application connects to the restarted master; one of its
	// connections gets the ID the lane's old connection had.
	other := servers[0].Client(func(o *redis.Options) { o.PoolSize = 100 })
	defer other.Close()
	var victim *redis.Conn
	for victim == nil {
		cn := other.Conn()
		defer cn.Close()
		id, err := cn.ClientID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case id == old:
			victim = cn
		case id > old:
			t.Skipf("the restarted master's IDs passed %d already", old)
		}
	}

	// The lock client's next request finds its connection closed and
	// replaces it.
	l, err = c.Obtain(ctx, "k2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if err := victim.Ping(ctx).Err(); err != nil {
		t.Fatalf("the other application's connection (ID %d on the restarted master) was killed by the lock client's barrier: %v", old, err)
	}
}

// TestTakeWaitsNoLongerThanItsOwnDeadline: a request that finds its lane
// without a connection takes one (transport.go take: a round trip on a
// fresh connection); on a frozen master, run inline (no context Done
// channel, ContextTimeoutEnabled), that take must end at the request's own
// deadline, so the caller returns at its node timeout.
func TestTakeWaitsNoLongerThanItsOwnDeadline(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
	})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil { // a connection in the pool, not yet the lane's
		t.Fatal(err)
	}
	c, err := NewSingle(rdb) // node timeout ttl/10, at most 500ms
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer servers[0].Cont()
	start := time.Now()
	_, err = c.Obtain(ctx, "short", 100*time.Millisecond) // node timeout 10ms
	if took := time.Since(start); took > 100*time.Millisecond || err == nil {
		t.Fatalf("Obtain with a 10ms node timeout on a frozen master returned after %v: %v", took.Round(time.Millisecond), err)
	}
}

// TestIdleClientGivesItsConnectionsBack: the Client holds a connection of
// each master's pool while it uses it, and gives it back after connIdle
// without requests (shortened here). A lane that kept its connection for
// ever would hold it from the user's pool while the Client sits idle.
func TestIdleClientGivesItsConnectionsBack(t *testing.T) {
	defer func(d time.Duration) { connIdle = d }(connIdle)
	connIdle = 300 * time.Millisecond
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) { o.PoolSize = 16 })
	defer rdb.Close()
	c, err := New([]redis.UniversalClient{rdb})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 20 {
		l, err := c.Obtain(ctx, fmt.Sprint("k", i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s := rdb.PoolStats(); s.IdleConns == s.TotalConns {
		t.Fatalf("right after its calls, the lock client holds none of the %d connections of the user's pool", s.TotalConns)
	}
	time.Sleep(connIdle + 200*time.Millisecond)
	if s := rdb.PoolStats(); s.IdleConns < s.TotalConns {
		t.Fatalf("idle for longer than %v, the lock client still holds %d of the %d connections of the user's pool", connIdle, s.TotalConns-s.IdleConns, s.TotalConns)
	}
}

// TestLanesOfASlowMasterDoNotQueueForConnections: after a pause in which
// the lane gave its connection back, a burst of requests on a master 40ms
// away must not miss a 250ms node timeout: a fresh connection (dialed
// through the slow proxy, identified, put back once and identified again)
// and a batch cost about 160ms, which leaves no room for taking
// connections one after another. The lane keeps an idle connection for
// connIdle (15s): the test sets it to 20ms to give it back during the
// pause.
func TestLanesOfASlowMasterDoNotQueueForConnections(t *testing.T) {
	defer func(d time.Duration) { connIdle = d }(connIdle)
	connIdle = 20 * time.Millisecond
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	p, err := redistest.NewProxy(servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rdb := servers[0].Client(func(o *redis.Options) {
		o.Addr = p.Addr()
		o.ContextTimeoutEnabled = true
	})
	defer rdb.Close()
	c, err := NewSingle(rdb, WithNodeTimeout(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	burst := func() (failed []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				l, err := c.Obtain(ctx, fmt.Sprint("k", i), time.Minute)
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return failed
	}
	if failed := burst(); len(failed) > 0 { // the lane has dialed a connection
		t.Fatal(failed[0])
	}
	p.DelayOpen(20*time.Millisecond, 20*time.Millisecond) // a 40ms round trip
	time.Sleep(100 * time.Millisecond)                    // a pause: the lane gives its connection back
	if failed := burst(); len(failed) > 0 {
		t.Fatalf("%d of 16 Obtain+Release with a 250ms node timeout failed on a healthy master 40ms away; the first: %v", len(failed), failed[0])
	}
}
