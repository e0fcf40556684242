package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TestWaitThroughSentinel: through go-redis's Sentinel failover client a
// waiter is woken by the release, as on a plain master; and when the
// master fails over to its replica while the key is held and waited for,
// the waiter's subscription follows the new master, whose release of the
// key (marked and queued on the replica before the failover) wakes it,
// long before the holder's 20s TTL.
func TestWaitThroughSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover takes seconds")
	}
	master := redistest.Start(t, 1)[0]
	replica := redistest.StartReplica(t, master)
	const name = "m"
	sentinel := redistest.Start(t, 1, redistest.Options{Sentinel: []string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", name, master.Port()),
		fmt.Sprintf("sentinel down-after-milliseconds %s 200", name),
		fmt.Sprintf("sentinel failover-timeout %s 5000", name),
	}})[0]
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	t.Cleanup(func() { sc.Close() })
	ctx := t.Context()
	// sentinelSays waits until the Sentinel names port as the master and
	// knows of a replica whose link is up (none after the failover: the
	// old master is dead).
	sentinelSays := func(port int, replicaUp bool) {
		t.Helper()
		redistest.Eventually(t, func() error {
			addr, err := sc.GetMasterAddrByName(ctx, name).Result()
			if err != nil || len(addr) != 2 || addr[1] != strconv.Itoa(port) {
				return fmt.Errorf("the Sentinel names %v as the master (%v), want port %d", addr, err, port)
			}
			if !replicaUp {
				return nil
			}
			rs, err := sc.Replicas(ctx, name).Result()
			for _, r := range rs {
				if r["port"] == strconv.Itoa(replica.Port()) && r["master-link-status"] == "ok" {
					return nil
				}
			}
			return fmt.Errorf("the Sentinel knows no replica with its link up: %v (%v)", rs, err)
		})
	}
	sentinelSays(master.Port(), true)
	failover := func() *redis.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            name,
			SentinelAddrs:         []string{sentinel.Addr()},
			MaxRetries:            -1,
			ContextTimeoutEnabled: true,
		})
		t.Cleanup(func() { c.Close() })
		return c
	}
	fa, fb := failover(), failover()
	a := newClient(t, []redis.UniversalClient{fa}, redlock.WithNodeTimeout(500*time.Millisecond))
	b := newClient(t, []redis.UniversalClient{fb}, redlock.WithNodeTimeout(500*time.Millisecond))
	mc, rc := master.Client(), replica.Client()
	t.Cleanup(func() { mc.Close(); rc.Close() })

	held, ch := holdAndWait(t, a, b)
	marked(t, mc, "k")
	subscribed(t, mc)
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wokenBy(t, ch, released, time.Second).Release(ctx); err != nil {
		t.Fatal(err)
	}

	held, ch = holdAndWait(t, a, b)
	marked(t, mc, "k")
	subscribed(t, mc)
	if n, err := mc.Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged (%v), want the key and its mark on the replica", n, err)
	}
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	sentinelSays(replica.Port(), false)
	subscribed(t, rc) // the waiter's subscription followed the master
	// The holder's client reaches the new master too before it releases:
	// its connections to the dead one fail until go-redis dials again.
	redistest.Eventually(t, func() error { return fa.Ping(ctx).Err() })
	released = time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release on the new master: %v", err)
	}
	if err := wokenBy(t, ch, released, time.Second).Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestConnectionClosedUnderTheLane: at a failover go-redis's Sentinel
// client closes its connections to the old master, the one a lane keeps
// between batches included. A request that then finds its connection
// closed goes again on a fresh one, as after a master closed it, instead
// of failing: a failed Release would leave the key, and its waiters, for
// a whole TTL. Here the client's connections are closed as the Sentinel
// client closes them, before each operation.
func TestConnectionClosedUnderTheLane(t *testing.T) {
	srv := redistest.Start(t, 1)[0]
	var mu sync.Mutex
	var conns []net.Conn
	rdb := srv.Client(func(o *redis.Options) {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
			return c, err
		}
	})
	t.Cleanup(func() { rdb.Close() })
	check := srv.Client()
	t.Cleanup(func() { check.Close() })
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond))
	closeAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}
	ctx := t.Context()
	if _, err := c.Obtain(ctx, "warm", time.Minute); err != nil { // the lane takes its connection
		t.Fatal(err)
	}
	closeAll()
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("Obtain on a closed connection: %v", err)
	}
	closeAll()
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend on a closed connection: %v", err)
	}
	closeAll()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release on a closed connection: %v", err)
	}
	if v := get(t, check, "k"); v != "" {
		t.Fatalf("k holds %q after its Release, want it gone", v)
	}
}

// TestApplicationClosedItsClient: the application closes its go-redis
// client while the lane keeps a connection of it (net.ErrClosed under the
// lane, then "redis: client is closed" for a fresh one): Extend and
// Release fail at once as unavailable, nothing loops, and Close returns.
func TestApplicationClosedItsClient(t *testing.T) {
	srv := redistest.Start(t, 1)[0]
	rdb := srv.Client()
	c, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	start := time.Now()
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrUnavailable) {
		t.Errorf("Extend after the client closed: %v, want ErrUnavailable", err)
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrUnavailable) {
		t.Errorf("Release after the client closed: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Extend and Release took %v", d)
	}
	start = time.Now()
	c.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
}
