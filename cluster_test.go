package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Redis Cluster masters: NewSingle over a Cluster, New over independent
// Clusters, a Cluster frozen before its slot map was loaded, and shards
// that move.

// TestRedisClusterBehindNewSingle: NewSingle over a Redis Cluster locks
// keys on every shard: one holder per key, Extend and Release on each, no
// key left after.
func TestRedisClusterBehindNewSingle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rc := redistest.StartCluster(t, 3)
	cc := clusterClient(t, rc)
	c := newSingle(t, cc, redlock.WithKeyPrefix("lock:"))
	var locks []*redlock.Lock
	for i := range 100 { // keys in slots of all three masters
		l, err := c.Obtain(ctx, fmt.Sprint("job-", i), time.Minute)
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		locks = append(locks, l)
	}
	if _, err := c.Obtain(ctx, "job-7", time.Minute); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("second Obtain of a held key: %v", err)
	}
	for _, l := range locks {
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend %s: %v", l.Key(), err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %s: %v", l.Key(), err)
		}
	}
	for i := range 100 {
		if v, err := cc.Exists(ctx, fmt.Sprint("lock:job-", i)).Result(); err != nil || v != 0 {
			t.Fatalf("lock:job-%d left after Release (%d, %v)", i, v, err)
		}
	}
}

// TestQuorumOverIndependentClusters: New over three independent Redis
// Clusters of three shards each, the way a deployment outgrows one machine
// per master. A lock is granted on every cluster, on the shard of its
// key's slot, and lock keys spread over every shard; fences rise; another
// client is refused; with a whole cluster frozen the other two still make
// the quorum (Obtain, Extend, Release); with one shard of a second cluster
// frozen too, exactly the keys of that shard's slots are unavailable.
func TestQuorumOverIndependentClusters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	redistest.Require(t)
	clusters := make([]*redistest.Cluster, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Go(func() { clusters[i], errs[i] = redistest.NewCluster(3) })
	}
	wg.Wait()
	for _, rc := range clusters {
		if rc != nil {
			t.Cleanup(func() { rc.Close() })
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var ccs []*redis.ClusterClient
	var masters []redis.UniversalClient
	for _, rc := range clusters {
		cc := clusterClient(t, rc, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
		ccs, masters = append(ccs, cc), append(masters, cc)
	}
	const prefix = "lock:"
	c, err := redlock.New(masters, redlock.WithFencing(), redlock.WithKeyPrefix(prefix), redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := redlock.New(masters, redlock.WithFencing(), redlock.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	// Every cluster holds every lock, on the shard that owns its slot.
	var locks []*redlock.Lock
	for i := range 60 {
		k := fmt.Sprint("job-", i)
		l, err := c.Obtain(ctx, k, time.Minute)
		if err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		if l.Fence() != 1 {
			t.Fatalf("key %q: fence %d, want 1", k, l.Fence())
		}
		redistest.Eventually(t, func() error { // Obtain decides at a quorum: the third may answer later
			for j, cc := range ccs {
				if v, err := cc.Get(ctx, prefix+k).Result(); err != nil || v != l.Token() {
					return fmt.Errorf("key %q on cluster %d: %q, %v; want the lock's token", k, j, v, err)
				}
			}
			return nil
		})
		if _, err := other.Obtain(ctx, k, time.Minute); !errors.Is(err, redlock.ErrTaken) {
			t.Fatalf("key %q held: another client's Obtain: %v, want ErrTaken", k, err)
		}
		locks = append(locks, l)
	}
	for j, rc := range clusters {
		for s, srv := range rc.Servers {
			rdb := srv.Client()
			n, err := rdb.DBSize(ctx).Result()
			rdb.Close()
			if err != nil || n == 0 { // 60 locks and their counters over 3 shards: about 40 keys each
				t.Errorf("cluster %d shard %d holds %d keys (%v): the locks did not spread over the shards", j, s, n, err)
			}
		}
	}
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %q: %v", l.Key(), err)
		}
	}
	if l, err := c.Obtain(ctx, "job-0", time.Minute); err != nil || l.Fence() != 2 {
		t.Fatalf("job-0 again: fence %v, %v; want 2", l, err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A whole cluster down: the other two make the quorum.
	for _, srv := range clusters[0].Servers {
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Cont() })
	}
	for i := range 10 {
		k := fmt.Sprint("down-", i)
		l, err := c.Obtain(ctx, k, time.Minute)
		if err != nil {
			t.Fatalf("key %q with cluster 0 frozen: %v", k, err)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("key %q with cluster 0 frozen: Extend: %v", k, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("key %q with cluster 0 frozen: Release: %v", k, err)
		}
	}

	// And one shard of cluster 1: only its slots lose the quorum.
	down := clusters[1].Servers[0]
	if err := down.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { down.Cont() })
	lo, hi := lowestSlots(t, ccs[2]) // the clusters split their slots alike
	failed, granted := 0, 0
	for i := range 30 {
		k := fmt.Sprint("shard-", i)
		slot, err := ccs[2].ClusterKeySlot(ctx, prefix+k).Result()
		if err != nil {
			t.Fatal(err)
		}
		onDown := slot >= lo && slot <= hi
		l, err := c.Obtain(ctx, k, time.Minute)
		switch {
		case onDown && !errors.Is(err, redlock.ErrUnavailable):
			t.Fatalf("key %q (slot %d) on the frozen shard of cluster 1, cluster 0 frozen: %v, want ErrUnavailable", k, slot, err)
		case !onDown && err != nil:
			t.Fatalf("key %q (slot %d) off the frozen shard: %v", k, slot, err)
		case onDown:
			failed++
		default:
			granted++
			if err := l.Release(ctx); err != nil {
				t.Fatalf("key %q: Release: %v", k, err)
			}
		}
	}
	if failed == 0 || granted == 0 {
		t.Fatalf("%d keys on the frozen shard, %d off it: the test proves nothing", failed, granted)
	}
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
	t.Parallel()
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
		p := proxyTo(t, cl.Servers[0].Addr())
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
	redistest.Eventually(t, func() error { // the lanes of the addresses gone end at their ticks
		if grew := laneWorkers() - before; grew > 2 {
			return fmt.Errorf("after the shard moved %d times, %d more lane workers run than before: a lane per address ever seen, none ever ended", moves, grew)
		}
		return nil
	})
}
