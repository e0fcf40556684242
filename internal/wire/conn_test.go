package wire

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// The lane's own connection (conn.go), on real servers. A lock cycle here
// is what a Client of one master sends for an Obtain and its Release.

// TestTransportKnowsItsConnection: a standalone master's lane keeps a
// connection of its own and knows its client ID on the server, so that it
// can kill it once given up.
func TestTransportKnowsItsConnection(t *testing.T) {
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client()
	t.Cleanup(func() { rdb.Close() }) // after the master's cleanup
	m := newMaster(t, rdb, Config{})
	ctx := context.Background()
	if err := cycle(m, "k", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	id := connID(m)
	if id == 0 {
		t.Fatal("the lane does not know its connection's client ID")
	}
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("id=%d ", id); !strings.HasPrefix(list, want) && !strings.Contains(list, "\n"+want) {
		t.Fatalf("no client %q on the server:\n%s", want, list)
	}
}

// TestTakeWaitsNoLongerThanItsOwnDeadline: a request that finds its lane
// without a connection takes one (conn.go take: a round trip on a fresh
// connection); on a frozen master, run inline (no context Done channel,
// ContextTimeoutEnabled), that take must end at the request's own
// deadline, so the caller returns at its node timeout.
func TestTakeWaitsNoLongerThanItsOwnDeadline(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
	})
	t.Cleanup(func() { rdb.Close() }) // after the master's cleanup
	// A connection in the pool, not yet the lane's.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	m := newMaster(t, rdb, Config{})
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer servers[0].Cont()
	start := time.Now()
	err := lock(m, "short", "tok", 10*time.Millisecond) // the node timeout of a 100ms TTL
	if took := time.Since(start); took > 100*time.Millisecond || err == nil {
		t.Fatalf("an acquire with a 10ms node timeout on a frozen master returned after %v: %v", took.Round(time.Millisecond), err)
	}
}

// TestIdleClientGivesItsConnectionsBack: the lane holds a connection of
// its master's pool while it is used, and gives it back after connIdle
// without requests (shortened here). A lane that kept its connection for
// ever would hold it from the user's pool while the Client sits idle.
func TestIdleClientGivesItsConnectionsBack(t *testing.T) {
	const idle = 300 * time.Millisecond
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) { o.PoolSize = 16 })
	t.Cleanup(func() { rdb.Close() }) // after the master's cleanup
	m := newMaster(t, rdb, Config{ConnIdle: idle})
	for i := range 20 {
		if err := cycle(m, fmt.Sprint("k", i), 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if s := rdb.PoolStats(); s.IdleConns == s.TotalConns {
		t.Fatalf("right after its calls, the lock client holds none of the %d connections of the user's pool", s.TotalConns)
	}
	time.Sleep(idle + 200*time.Millisecond)
	if s := rdb.PoolStats(); s.IdleConns < s.TotalConns {
		t.Fatalf("idle for longer than %v, the lock client still holds %d of the %d connections of the user's pool", idle, s.TotalConns-s.IdleConns, s.TotalConns)
	}
}

// TestLanesOfASlowMasterDoNotQueueForConnections: after a pause in which
// the lane gave its connection back, a burst of requests on a master 40ms
// away must not miss a 250ms node timeout: a fresh connection (dialed
// through the slow proxy, identified, put back once and identified again)
// and a batch cost about 160ms, which leaves no room for taking
// connections one after another. The lane keeps an idle connection for
// DefaultConnIdle (15s): the test sets 20ms to give it back during the
// pause.
func TestLanesOfASlowMasterDoNotQueueForConnections(t *testing.T) {
	servers := redistest.Start(t, 1)
	p, err := redistest.NewProxy(servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rdb := servers[0].Client(func(o *redis.Options) {
		o.Addr = p.Addr()
		o.ContextTimeoutEnabled = true
	})
	t.Cleanup(func() { rdb.Close() }) // after the master's cleanup
	const timeout = 250 * time.Millisecond
	m := newMaster(t, rdb, Config{NodeTimeout: timeout, ConnIdle: 20 * time.Millisecond})
	burst := func() (failed []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				if err := cycle(m, fmt.Sprint("k", i), timeout); err != nil {
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
		t.Fatalf("%d of 16 acquire+release with a 250ms node timeout failed on a healthy master 40ms away; the first: %v", len(failed), failed[0])
	}
}
