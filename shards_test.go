package redlock_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// frozenColdCluster starts a one-shard Redis Cluster and freezes it before
// any client has loaded its slot map: a Cluster that is down (frozen,
// partitioned) when the application starts.
func frozenColdCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	cl := redistest.StartCluster(t, 1)
	for _, s := range cl.Servers {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Cont() })
	}
	return cl
}

// TestColdFrozenClusterDoesNotTakeTheQuorumDown: New over a Cluster and two
// standalone masters, the Cluster frozen before its client ever loaded its
// slot map. Two of three masters answer, so Obtain must succeed within
// about its node timeout. Were the shard of a key looked up on the
// caller's goroutine (ClusterClient.MasterForKey) before the slot map is
// loaded, go-redis would load it there, with CLUSTER SLOTS, and wait out
// the request's whole deadline, inside fanout's loop over the masters: the
// masters after the Cluster would get requests whose deadline has passed
// (the lane drops them, errQueued) and the quorum would be lost although
// two masters are healthy.
func TestColdFrozenClusterDoesNotTakeTheQuorumDown(t *testing.T) {
	ctx := context.Background()
	cl := frozenColdCluster(t)
	cc := cl.Client(func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
	t.Cleanup(func() { cc.Close() })
	std := redistest.Clients(t, redistest.Start(t, 2))
	c, err := redlock.New([]redis.UniversalClient{cc, std[0], std[1]}, redlock.WithNodeTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		start := time.Now()
		l, err := c.Obtain(ctx, "cold", 10*time.Second)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("attempt %d: Obtain with two of three masters healthy, the Cluster frozen and cold: %v (after %v), want the lock", i, err, took.Round(time.Millisecond))
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestColdFrozenClusterHoldsNoCallerPastItsContext: the same Cluster, its
// client with go-redis's default ContextTimeoutEnabled false (a read is
// bounded by ReadTimeout, 1s here, not by the request's deadline). The
// caller's context ends after 300ms; Obtain must return about then (the
// requests run on lane workers and the caller waits on its own timer). A
// slot-map load on the caller's goroutine would hold it for the
// ReadTimeout.
func TestColdFrozenClusterHoldsNoCallerPastItsContext(t *testing.T) {
	cl := frozenColdCluster(t)
	cc := cl.Client()
	t.Cleanup(func() { cc.Close() })
	std := redistest.Clients(t, redistest.Start(t, 2))
	c, err := redlock.New([]redis.UniversalClient{std[0], std[1], cc}, redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := c.Obtain(ctx, "cold", 10*time.Second)
	took := time.Since(start)
	if err == nil {
		l.Release(context.Background())
	}
	if took > 600*time.Millisecond {
		t.Fatalf("Obtain with a 300ms context returned after %v (%v): the caller was held past its context", took.Round(time.Millisecond), err)
	}
}

// laneWorkers counts the running lane workers of every Client.
func laneWorkers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "redlock.(*lane).work(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestShardLanesOfGoneAddressesEnd: a Cluster whose shard moves from one
// address to another (a failover promotes a replica; in Kubernetes every
// restarted pod has a new IP). Here a one-shard Cluster is reached through
// proxies, and its slot map (ClusterSlots) names a new proxy each time it is
// reloaded. A lane, with its worker goroutine, per shard address ever
// seen, ended only at Close, would leave a long-lived Client one goroutine
// per address the Cluster ever had; go-redis itself drops the node clients
// of addresses gone from the slot map.
func TestShardLanesOfGoneAddressesEnd(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 1)
	const moves = 20
	var proxies []*redistest.Proxy
	for range moves {
		p, err := redistest.NewProxy(cl.Servers[0].Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies = append(proxies, p)
	}
	var cur atomic.Int32
	cc := cl.Client(func(o *redis.ClusterOptions) {
		o.ContextTimeoutEnabled = true
		o.ClusterSlots = func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: proxies[cur.Load()].Addr()}}}}, nil
		}
	})
	t.Cleanup(func() { cc.Close() })
	c, err := redlock.NewSingle(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := laneWorkers()
	for i := range moves {
		cur.Store(int32(i))
		redistest.Eventually(t, func() error { // go-redis reloads in the background, 200ms apart
			cc.ReloadState(ctx)
			m, err := cc.MasterForKey(ctx, "x")
			if err != nil {
				return err
			}
			_, port, _ := strings.Cut(proxies[i].Addr(), ":")
			if a := m.Options().Addr; !strings.HasSuffix(a, ":"+port) {
				return fmt.Errorf("move %d: the slot map still names %s", i, a)
			}
			return nil
		})
		l, err := c.Obtain(ctx, fmt.Sprint("moving-", i), time.Minute)
		if err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // any idle lane had its ticks
	if grew := laneWorkers() - before; grew > 2 {
		t.Fatalf("after the shard moved %d times, %d more lane workers run than before: a lane per address ever seen, none ever ended", moves, grew)
	}
}

// panicOnce is a go-redis hook that panics in the first command it sees
// (a tracing hook with a bug, say); later commands pass.
type panicOnce struct{ done *atomic.Bool }

func (h panicOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h panicOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.done.CompareAndSwap(false, true) {
			panic("hook: " + cmd.Name())
		}
		return next(ctx, cmd)
	}
}
func (h panicOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.done.CompareAndSwap(false, true) {
			panic("hook: pipeline")
		}
		return next(ctx, cmds)
	}
}

// TestPanickingHookOnAColdClusterDoesNotPanicTheCaller: the lane survives a
// go-redis hook that panics (lane.go run/exec: the batch fails with
// errPanicked, TestLaneSurvivesTransportPanic). On a Cluster master whose
// client has not loaded its slot map yet, a load on the caller's goroutine
// would run the node clients' hooks (ClusterClient.OnNewNode) there, and a
// panicking hook would escape into the caller's Obtain, with its round's
// other requests already sent; in the lane's batch, it fails the batch.
func TestPanickingHookOnAColdClusterDoesNotPanicTheCaller(t *testing.T) {
	cl := redistest.StartCluster(t, 1)
	var fired atomic.Bool
	cc := cl.Client(func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
	cc.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(panicOnce{&fired}) })
	t.Cleanup(func() { cc.Close() })
	std := redistest.Clients(t, redistest.Start(t, 2))
	c, err := redlock.New([]redis.UniversalClient{std[0], std[1], cc}, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var l *redlock.Lock
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Errorf("Obtain panicked in the caller: %v", v)
			}
		}()
		l, err = c.Obtain(context.Background(), "hooked", time.Minute)
	}()
	// The round decides at quorum: the two standalone masters may answer
	// before the Cluster's lane has run its first command, so the hook may
	// fire after Obtain returned. It fires in the lane either way; an
	// unrecovered panic there would end the test binary.
	deadline := time.Now().Add(5 * time.Second)
	for !fired.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !fired.Load() {
		t.Fatal("the hook never ran: the test proves nothing")
	}
	if err == nil && l != nil {
		l.Release(context.Background())
	}
	// The Cluster master still serves after the panic.
	l, err = c.Obtain(context.Background(), "hooked-after", time.Minute)
	if err != nil {
		t.Fatalf("Obtain after the hook's panic: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release after the hook's panic: %v", err)
	}
}
