package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestBarrierComesBackAfterABusyMaster: a master busy in a slow script (an
// application's, a FUNCTION's) answers -BUSY to every command but a few.
// When that happens to a lane's first batch on a connection, CLIENT INFO
// (and, on a new Client, the CLIENT KILL probe) gets that error reply, and
// settle takes any reply error for "this master denies it" (transport.go
// settle: noKill = true, and for the probe "an older Redis"). The flag is
// never cleared: from a BUSY blip on, the lane has no barrier for the
// Client's lifetime, so order across replaced connections rests on the
// clocks (extendScript's late deadline) and every give-up holds the lane,
// on a master that allows CLIENT KILL.
func TestBarrierComesBackAfterABusyMaster(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.PoolSize = 4 // one lane
	})
	defer rdb.Close()
	admin := servers[0].Client()
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "10").Err(); err != nil {
		t.Fatal(err)
	}
	c, err := New([]redis.UniversalClient{rdb}, WithNodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	barrier := func() bool {
		time.Sleep(100 * time.Millisecond) // idle: no tick runs
		ln := c.nodes[0].lane
		ln.mu.Lock()
		defer ln.mu.Unlock()
		tr := ln.t.(*redisTransport)
		return tr.node.killAllowed() // the next connection will have the barrier
	}
	cycle := func(key string) error {
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	if err := cycle("warm"); err != nil {
		t.Fatal(err)
	}
	if !barrier() {
		t.Fatal("no barrier on a healthy master")
	}
	// Another application's slow script keeps the master busy for a moment.
	busy := make(chan error, 1)
	go func() {
		busy <- admin.Eval(ctx, "local n = 0 for i = 1, 60000000 do n = n + i end return 0", nil).Err()
	}()
	time.Sleep(50 * time.Millisecond)
	err = cycle("during") // the lane's first batch on a connection: CLIENT INFO gets -BUSY
	t.Logf("Obtain while the master is busy: %v", err)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cycle("after"); err != nil {
			t.Fatalf("cycle %d after the script: %v", i, err)
		}
	}
	if !barrier() {
		t.Fatal("the master is healthy again and allows CLIENT KILL, but the lane never uses the barrier again")
	}
}

// TestKeptReleasesStayBoundedWhileAMasterIsFrozen: a Release refused by a
// stalled lane is kept (lane.go send appends it to l.kept, for the
// transport) with no bound; only the transport's list is capped
// (maxPending, 4096), and the lane hands its kept Releases over only when
// it runs again, once the batch in flight has given up. Behind a client
// whose reads are bounded by a long ReadTimeout (ContextTimeoutEnabled
// off, go-redis's default; New accepts any positive ReadTimeout), one
// frozen master of three keeps every Release of every lock the two others
// grant, for the whole ReadTimeout, and then drops all but 4096. Memory
// must stay flat while a master is frozen.
func TestKeptReleasesStayBoundedWhileAMasterIsFrozen(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	for i, s := range servers {
		rdb := s.Client(func(o *redis.Options) { o.ReadTimeout = 30 * time.Second })
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clients[i] = rdb
	}
	c, err := New(clients, WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		servers[2].Cont()
		c.Close()
	}()
	if err := servers[2].Stop(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var cycles atomic.Int64
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l, err := c.Obtain(ctx, fmt.Sprint(g, "-", i), time.Minute)
				if err != nil {
					continue
				}
				_ = l.Release(ctx)
				cycles.Add(1)
			}
		})
	}
	most := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ln := c.nodes[2].lane
		ln.mu.Lock()
		most = max(most, len(ln.kept))
		ln.mu.Unlock()
	}
	close(stop)
	wg.Wait()
	if most > maxPending {
		t.Fatalf("a lane kept %d Releases for a frozen master (%d lock cycles in 3s on the two others); the transport keeps at most %d", most, cycles.Load(), maxPending)
	}
}

// TestClusterMasterSendsItsKeptReleases: on a Redis Cluster master the
// transport keeps a Release the lane could not send, like on a standalone
// one (lane.go send, transport.go keep), but its send only ever sends a
// batch (transport.go send: the std == nil branch ignores t.pending): the
// kept Release is never sent, the released lock's key stays for its whole
// TTL, and the idle lane ticks every 20ms for as long as the Client lives,
// doing nothing.
func TestClusterMasterSendsItsKeptReleases(t *testing.T) {
	ctx := context.Background()
	rc := redistest.StartCluster(t, 1)
	cc := rc.Client(func(o *redis.ClusterOptions) { o.MaxRedirects = -1 })
	defer cc.Close()
	if err := cc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	direct := rc.Client()
	defer direct.Close()
	c, err := NewSingle(cc, WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	n := c.nodes[0]
	other := "other" // one shard: the same lane
	if err := rc.Servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer rc.Servers[0].Cont()
	go c.Obtain(ctx, other, time.Minute) // in flight on the frozen master: the lane stalls
	time.Sleep(150 * time.Millisecond)
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release on a stalled lane succeeded")
	}
	if err := rc.Servers[0].Cont(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)                                                                 // the master answers again; the lane is idle
	ln := n.laneFor(&request{op: op{key: l.op.key, deadline: time.Now().Add(time.Second)}}) // the shard's
	if ln == n.lane {
		t.Fatal("the key's requests take the node's lane, not its shard's")
	}
	ln.mu.Lock()
	ticking := ln.ticking != nil
	ln.mu.Unlock()
	if v, err := direct.Get(ctx, "k").Result(); err == nil && v == l.Token() {
		t.Fatalf("a second after the master answered again, the released lock's key is there for %v more (the lane still ticks: %v)",
			direct.PTTL(ctx, "k").Val().Round(time.Second), ticking)
	}
	if ticking {
		t.Fatal("an idle lane with nothing to send still ticks")
	}
}
