package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TestQuorumOverIndependentClusters: New over three independent Redis
// Clusters of three shards each, the way a deployment outgrows one machine
// per master. A lock is granted on every cluster, on the shard of its
// key's slot, and lock keys spread over every shard; fences rise; another
// client is refused; with a whole cluster frozen the other two still make
// the quorum (Obtain, Extend, Release); with one shard of a second cluster
// frozen too, exactly the keys of that shard's slots are unavailable.
func TestQuorumOverIndependentClusters(t *testing.T) {
	ctx := context.Background()
	clusters := make([]*redistest.Cluster, 3)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Go(func() { clusters[i] = redistest.StartCluster(t, 3) })
	}
	wg.Wait()
	var ccs []*redis.ClusterClient
	var masters []redis.UniversalClient
	for _, rc := range clusters {
		cc := rc.Client(func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
		t.Cleanup(func() { cc.Close() })
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

// lowestSlots returns the slot range that starts at slot 0, as the
// cluster reports it: redistest gives it to a cluster's first server.
func lowestSlots(t *testing.T, cc *redis.ClusterClient) (lo, hi int64) {
	t.Helper()
	slots, err := cc.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if s.Start == 0 {
			return 0, int64(s.End)
		}
	}
	t.Fatalf("no shard serves slot 0: %v", slots)
	return 0, 0
}
