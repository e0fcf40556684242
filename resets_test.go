package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// holdWithWatchdog obtains key for 30s (renewed every 10s) and runs a
// watchdog on it until the test ends; the channel gets the watchdog's
// context, whose cause says why the lock can no longer be trusted.
func holdWithWatchdog(t *testing.T, c *redlock.Client, key string) (*redlock.Lock, context.Context) {
	t.Helper()
	l, err := c.Obtain(t.Context(), key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop, err := l.KeepAlive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return l, wctx
}

// TestWatchdogRenewsAtOnceAfterARestart: a master restarted without
// persistence has lost the key; the watchdog hears its subscription break
// and come back, and renews at once, re-taking the key, instead of at its
// next renewal 10s later, while another Client could take it.
func TestWatchdogRenewsAtOnceAfterARestart(t *testing.T) {
	servers, clients, c := cluster(t, 1)
	l, wctx := holdWithWatchdog(t, c, "k")
	subscribed(t, clients[0])
	if err := servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	check := servers[0].Client()
	t.Cleanup(func() { check.Close() })
	for get(t, check, "k") != l.Token() {
		if time.Since(restarted) > 3*time.Second {
			t.Fatalf("the restarted master holds %q %v after the restart, want the watchdog to have re-taken the key (its next renewal is 10s away)",
				get(t, check, "k"), time.Since(restarted).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := context.Cause(wctx); err != nil {
		t.Fatalf("the watchdog gave up the lock it re-took: %v", err)
	}
}

// TestWatchdogTellsAtOnceWhenARestartLostTheLock: the key gone from the
// master and taken by another Client, as after a restart that another
// Client's acquire reached first; when the master's connections reset, the
// watchdog renews at once, is refused, and tells the work within a second,
// not at its next renewal 10s later.
func TestWatchdogTellsAtOnceWhenARestartLostTheLock(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	_, wctx := holdWithWatchdog(t, a, "k")
	subscribed(t, clients[0])
	ctx := t.Context()
	if err := clients[0].Del(ctx, "k").Err(); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Obtain(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	reset := time.Now()
	if err := clients[0].ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wctx.Done():
		if d := time.Since(reset); d > time.Second {
			t.Errorf("told %v after the reset, want within a second", d.Round(time.Millisecond))
		}
		if cause := context.Cause(wctx); !errors.Is(cause, redlock.ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog did not tell the work within 5s of the reset (its next renewal is 10s away)")
	}
}

// TestWatchdogLeavesNoSubscription: the subscriptions a watchdog keeps end
// once it stops and their linger has passed.
func TestWatchdogLeavesNoSubscription(t *testing.T) {
	_, clients, c := cluster(t, 1)
	ctx := t.Context()
	if err := c.Do(ctx, "k", 30*time.Second, func(context.Context) error {
		subscribed(t, clients[0])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		n, err := clients[0].PubSubNumSub(ctx, "redlock:wake").Result()
		if err != nil || n["redlock:wake"] != 0 {
			return fmt.Errorf("%d subscribers to redlock:wake after the watchdog ended (%v)", n["redlock:wake"], err)
		}
		return nil
	})
}

// TestWatchdogRenewsAtOnceOnACluster: on a Redis Cluster the watchdog keeps
// the key's own sharded channel, on the key's shard: its connections
// reset, and the watchdog renews at once.
func TestWatchdogRenewsAtOnceOnACluster(t *testing.T) {
	rc := startCluster(t, 3)
	cc := rc.Client()
	t.Cleanup(func() { cc.Close() })
	c, err := redlock.NewSingle(cc, redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, wctx := holdWithWatchdog(t, c, "k")
	ctx := t.Context()
	redistest.Eventually(t, func() error {
		n, err := cc.PubSubShardNumSub(ctx, "k").Result()
		if err != nil || n["k"] == 0 {
			return fmt.Errorf("nobody subscribed to k's sharded channel (%v)", err)
		}
		return nil
	})
	var shard *redis.Client
	for _, addr := range rc.Addrs() {
		m := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { m.Close() })
		if m.Exists(ctx, "k").Val() == 1 {
			shard = m
		}
	}
	if shard == nil {
		t.Fatal("no shard holds k")
	}
	before := calls(t, shard, "evalsha") + calls(t, shard, "eval")
	if err := shard.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if n := calls(t, shard, "evalsha") + calls(t, shard, "eval"); n <= before {
			return errors.New("no renewal reached the key's shard since its connections reset")
		}
		return nil
	})
	if err := context.Cause(wctx); err != nil {
		t.Fatalf("the watchdog gave up: %v", err)
	}
}
