package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Masters behind go-redis's Sentinel failover client: waiting and watchdogs
// follow a failover.

// TestWaitThroughSentinel: through go-redis's Sentinel failover client a
// waiter is woken by the release, as on a plain master; and when the
// master fails over to its replica while the key is held and waited for,
// the waiter's subscription follows the new master, whose release of the
// key (marked and queued on the replica before the failover) wakes it,
// long before the holder's 20s TTL.
func TestWaitThroughSentinel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a Sentinel failover takes seconds")
	}
	master, replica, sentinel, says := sentinelPair(t)
	ctx := t.Context()
	fa, fb := failoverClient(t, sentinel), failoverClient(t, sentinel)
	a := newClient(t, []redis.UniversalClient{fa}, redlock.WithNodeTimeout(500*time.Millisecond))
	b := newClient(t, []redis.UniversalClient{fb}, redlock.WithNodeTimeout(500*time.Millisecond))
	mc, rc := clientOf(t, master), clientOf(t, replica)

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
	says(replica.Port())
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

// TestWatchdogFollowsASentinelFailoverThatLeavesTheOldMasterUp: a
// Sentinel failover that demotes the old master instead of killing it
// (SENTINEL FAILOVER, a partition healed) breaks no subscription: go-redis
// moves its commands to the new master, and the old one keeps its
// subscribers. The Client's probe finds its subscription missing on the
// master its requests reach, makes it again there, and renews every
// watchdog at once, as after a restart: the lock's key is renewed on the
// new master within about a second, not at the next renewal 10s later.
func TestWatchdogFollowsASentinelFailoverThatLeavesTheOldMasterUp(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a Sentinel failover takes seconds")
	}
	master, replica, sentinel, says := sentinelPair(t)
	c := newClient(t, []redis.UniversalClient{failoverClient(t, sentinel)}, redlock.WithNodeTimeout(500*time.Millisecond))
	mc, rc := clientOf(t, master), clientOf(t, replica)
	l, wctx := holdWithWatchdog(t, c, "k")
	subscribed(t, mc)
	if n, err := mc.Wait(t.Context(), 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged (%v), want the key on the replica", n, err)
	}
	before := scriptsRun(t, rc)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	t.Cleanup(func() { sc.Close() })
	if err := sc.Failover(t.Context(), "m").Err(); err != nil {
		t.Fatal(err)
	}
	says(replica.Port())
	promoted := time.Now()
	redistest.Within(t, 2*time.Second, func() error {
		if scriptsRun(t, rc) == before {
			return fmt.Errorf("no renewal reached the new master %v after the Sentinel named it (its subscribers: %d); want one within a second, not at the next renewal 10s later",
				time.Since(promoted).Round(time.Millisecond), subscribers(t, rc, "redlock:wake", false))
		}
		return nil
	})
	t.Logf("a renewal reached the new master %v after the Sentinel named it", time.Since(promoted).Round(time.Millisecond))
	subscribed(t, rc)
	if got := get(t, rc, "k"); got != l.Token() {
		t.Errorf("the new master holds %q, want the lock's token", got)
	}
	if err := context.Cause(wctx); err != nil {
		t.Errorf("the watchdog gave up the lock: %v", err)
	}
}
