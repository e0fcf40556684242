package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// A watchdog's subscriptions to the masters: a master's reset (a restart, a
// connection cut) renews the lock at once, instead of at its next renewal;
// the subscriptions end with the watchdogs, and cost little where they are
// refused.

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
	retaken(t, clientOf(t, servers[0]), "k", l.Token(), 3*time.Second)
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
	reset := takeOverAndReset(t, clients[0], b)
	toldWithin(t, wctx, reset, time.Second)
}

// TestWatchdogHearsARestartDuringItsFirstSubscribe: a master that goes
// down before the watchdog's subscription is first confirmed, and comes
// back empty, is heard like any restart: the failed attempts before the
// first confirmation count as a break, and that confirmation renews the
// watchdog at once, which finds another owner and tells the work, not at
// its next renewal 10s later.
func TestWatchdogHearsARestartDuringItsFirstSubscribe(t *testing.T) {
	servers := redistest.Start(t, 1)
	var w written
	a := newClient(t, []redis.UniversalClient{pinged(t, servers[0], w.dialer)}, redlock.WithNodeTimeout(500*time.Millisecond))
	b := newClient(t, redistest.Clients(t, servers))
	l := obtain(t, a, "k", 30*time.Second)
	if err := servers[0].Kill(); err != nil { // before any subscription: none was made yet
		t.Fatal(err)
	}
	dials := w.dials.Load()
	wctx, stop, err := l.KeepAlive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	redistest.Eventually(t, func() error { // the subscription's first attempts fail
		if w.dials.Load() < dials+2 {
			return errors.New("the subscription has not tried twice")
		}
		return nil
	})
	if err := servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	lb := obtain(t, b, "k", 30*time.Second)
	t.Cleanup(func() { lb.Release(context.Background()) })
	toldWithin(t, wctx, time.Now(), 2*time.Second)
}

// TestWatchdogHearsALongerOutageSoon: a master down for 1.6s, restarted
// empty: the subscription comes back at its next retry, 250ms apart at
// most, and the watchdog re-takes the key soon after the master answers
// again, not at its next renewal.
func TestWatchdogHearsALongerOutageSoon(t *testing.T) {
	servers, clients, c := cluster(t, 1)
	l, wctx := holdWithWatchdog(t, c, "k")
	subscribed(t, clients[0])
	servers[0].RestartAfter(1600*time.Millisecond, false)
	if err := servers[0].WaitRestart(); err != nil {
		t.Fatal(err)
	}
	if d := retaken(t, clientOf(t, servers[0]), "k", l.Token(), 5*time.Second); d > 500*time.Millisecond {
		t.Errorf("the watchdog re-took the key %v after the restarted master answered (empty), want within 500ms (cause %v)", d.Round(time.Millisecond), context.Cause(wctx))
	}
}

// TestWatchdogHearsASecondResetSoonAfterTheFirst: the master's
// connections reset once (the watchdog renews, the key is there), and
// soon after the master loses the key and another Client takes it, and
// the connections reset again (a second restart, a failover right after a
// restart). The second break falls within resetEvery (1s) of the first: its
// renewal is put off to the end of that second, not dropped, and the work
// is told then, not at the next regular renewal (10s).
func TestWatchdogHearsASecondResetSoonAfterTheFirst(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	_, wctx := holdWithWatchdog(t, a, "k")
	subscribed(t, clients[0])
	renewals := scriptsRun(t, clients[0])
	cutSubscriptions(t, clients[0])        // the first reset: nothing lost
	redistest.Eventually(t, func() error { // the watchdog renewed at it
		if scriptsRun(t, clients[0]) == renewals {
			return errors.New("no renewal after the first reset")
		}
		return nil
	})
	subscribed(t, clients[0])
	// The second, put off to a second after the first.
	reset := takeOverAndReset(t, clients[0], b)
	toldWithin(t, wctx, reset, 2*time.Second)
}

// TestWatchdogFlappingSubscription: a master that cuts the subscription
// every 100ms, as soon as it is made, for 2s: its breaks count once a
// second, so the watchdog renews a few times, not twice per cut.
func TestWatchdogFlappingSubscription(t *testing.T) {
	t.Parallel()
	_, clients, c := cluster(t, 1)
	h := &counts{match: isScript}
	clients[0].AddHook(h)
	_, wctx := holdWithWatchdog(t, c, "k")
	subscribed(t, clients[0])
	before := h.sent.Load()
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		cutSubscriptions(t, clients[0])
		time.Sleep(100 * time.Millisecond) // the master cuts the subscription every 100ms
	}
	// A cut counts when the last one that counted is at least a second
	// old: at 0s, 1s and (at the edge) 2s, each renewing once at the
	// confirmation that follows it (and once more should that fail).
	if n := h.sent.Load() - before; n > 6 {
		t.Errorf("%d renewals over 2s of cuts every 100ms, want at most 6: one or two for each cut a second apart", n)
	}
	if err := context.Cause(wctx); err != nil {
		t.Fatalf("the watchdog gave up: %v", err)
	}
}

// TestWatchdogResetDuringACallersExtendIsNotLost: the master loses the key
// and its subscription breaks and comes back while a caller's own Extend,
// already run by the master, still holds the lock. The watchdog cannot
// renew then; the renewal it owes the reset must not be dropped when the
// Extend's new validity re-arms its schedule (10s away).
func TestWatchdogResetDuringACallersExtendIsNotLost(t *testing.T) {
	servers, clients, c := cluster(t, 1)
	h := &gateHook{inside: make(chan struct{}), open: make(chan struct{})}
	clients[0].AddHook(h)
	l, wctx := holdWithWatchdog(t, c, "k")
	subscribed(t, clients[0])
	ctx := t.Context()
	check := clientOf(t, servers[0])
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, 30*time.Second) }()
	<-h.inside
	if err := check.Del(ctx, "k").Err(); err != nil {
		t.Fatal(err)
	}
	cutSubscriptions(t, check)
	subscribed(t, check) // broken, and made again
	close(h.open)
	if err := <-extended; err != nil {
		t.Fatalf("Extend: %v", err)
	}
	redistest.Within(t, 2*time.Second, func() error {
		if v := get(t, check, "k"); v != l.Token() {
			return fmt.Errorf("the master holds %q after the caller's Extend returned, though its subscription broke and came back meanwhile: the reset's renewal was lost (cause %v)", v, context.Cause(wctx))
		}
		return nil
	})
}

// TestWatchdogSubscribesAfterTheLanesFirstConnection: a watchdog started
// the moment Obtain returns at a quorum, while the slowest master's lane is
// still setting up its first connection (its dial held 100ms): the
// subscription to that master waits for the lane's connection, or go-redis
// races with itself under -race (Redis 7 refuses its maintenance
// notifications handshake, and the first connection to fail it rewrites
// the client's options under a lock the PubSub's connection does not take).
func TestWatchdogSubscribesAfterTheLanesFirstConnection(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	var rdbs []redis.UniversalClient
	for i, s := range servers {
		rdbs = append(rdbs, clientOf(t, s, func(o *redis.Options) {
			if i == 2 {
				o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
					time.Sleep(100 * time.Millisecond) // a slow dial
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}
			}
		}))
	}
	c := newClient(t, rdbs, redlock.WithNodeTimeout(time.Second))
	_, wctx := holdWithWatchdog(t, c, "k")
	subscribed(t, rdbs[2])
	if err := context.Cause(wctx); err != nil {
		t.Fatal(err)
	}
}

// TestWatchdogNoSubscribePermissionRetriesEverySecond: where the masters'
// user may not SUBSCRIBE, the Client tries the subscription again once a
// second while watchdogs run (each try a new connection), not at the
// 250ms of a master that is down.
func TestWatchdogNoSubscribePermissionRetriesEverySecond(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 1)
	admin := clientOf(t, servers[0])
	u := aclUser(t, servers[0], "nosub", []string{"~*", "&*", "+@all", "-subscribe", "-ssubscribe", "-psubscribe"}, func(o *redis.Options) { o.ContextTimeoutEnabled = false })
	c := newClient(t, []redis.UniversalClient{u}, redlock.WithNodeTimeout(500*time.Millisecond))
	_, wctx := holdWithWatchdog(t, c, "k")
	time.Sleep(500 * time.Millisecond) // the retry delay grows to its cap
	before := connsReceived(t, admin)
	never(t, 3*time.Second, func() error { // the retries of three seconds
		if n := connsReceived(t, admin) - before; n > 4 {
			return fmt.Errorf("%d connections within 3s from a watchdog whose user may not SUBSCRIBE, want about 3 (a try a second, as the README says)", n)
		}
		return nil
	})
	if err := context.Cause(wctx); err != nil {
		t.Fatalf("the watchdog gave up: %v", err)
	}
}

// TestWatchdogLeavesNoSubscription: the subscriptions a watchdog keeps end
// once it stops and their linger has passed.
func TestWatchdogLeavesNoSubscription(t *testing.T) {
	t.Parallel()
	_, clients, c := cluster(t, 1)
	ctx := t.Context()
	if err := c.Do(ctx, "k", 30*time.Second, func(context.Context) error {
		subscribed(t, clients[0])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if n := subscribers(t, clients[0], "redlock:wake", false); n != 0 {
			return fmt.Errorf("%d subscribers to redlock:wake after the watchdog ended", n)
		}
		return nil
	})
}

// TestWatchdogKeepsNoSubscriptionOnACluster: a Redis Cluster master
// announces each key on a channel of its own, so a watchdog there keeps no
// subscription (one per lock held would be a connection per lock), and its
// lock is renewed on its schedule.
func TestWatchdogKeepsNoSubscriptionOnACluster(t *testing.T) {
	t.Parallel()
	rc := redistest.StartCluster(t, 3)
	cc := clusterClient(t, rc)
	c := newSingle(t, cc, redlock.WithNodeTimeout(500*time.Millisecond))
	for _, k := range []string{"a", "b", "c"} {
		holdWithWatchdog(t, c, k)
	}
	never(t, 300*time.Millisecond, func() error { // a subscription would be up by now
		for _, k := range []string{"a", "b", "c"} {
			if n := subscribers(t, cc, k, true); n != 0 {
				return fmt.Errorf("%d subscribers to %s's sharded channel under a watchdog, want none", n, k)
			}
		}
		return nil
	})
}

// TestWatchdogIgnoresTheEndOfAnUnusedSubscription: on a Redis Cluster each
// key has a sharded wake channel of its own, so a waiter of another key
// has a subscription the watchdog does not use; its end, once the waiter
// left and its linger (2s) passed, is no reset of the master.
func TestWatchdogIgnoresTheEndOfAnUnusedSubscription(t *testing.T) {
	t.Parallel()
	rc := redistest.StartCluster(t, 3)
	cc := clusterClient(t, rc)
	h := &counts{match: isScript}
	cc.AddHook(h)
	c := newSingle(t, cc, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := t.Context()
	holdWithWatchdog(t, c, "k") // renewed every 10s
	lj := obtain(t, c, "j", 30*time.Second)
	defer lj.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- c.WaitReleased(wctx, "j") }()
	redistest.Eventually(t, func() error {
		if subscribers(t, cc, "j", true) == 0 {
			return errors.New("nobody subscribed to j's sharded channel")
		}
		return nil
	})
	cancel()
	<-waited
	before := h.sent.Load()
	redistest.Eventually(t, func() error { // the subscription's linger (2s) ends
		if subscribers(t, cc, "j", true) != 0 {
			return errors.New("j's sharded channel is still subscribed")
		}
		return nil
	})
	never(t, 300*time.Millisecond, func() error { // a renewal at that end would go out now
		if n := h.sent.Load() - before; n != 0 {
			return fmt.Errorf("%d scripts sent after the waiter of j left and its subscription ended (k's watchdog is due 10s after its Obtain): the end of j's subscription renewed it as a master's reset", n)
		}
		return nil
	})
}
