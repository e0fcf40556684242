package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
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
	reset := takeOverAndReset(t, clients[0], b)
	toldWithin(t, wctx, reset, time.Second)
}

// takeOverAndReset deletes "k" on the master and has b take it, as a
// restart that another Client's acquire reached first leaves it, then
// cuts the master's subscriptions; it returns when it cut them.
func takeOverAndReset(t *testing.T, master redis.UniversalClient, b *redlock.Client) time.Time {
	t.Helper()
	ctx := t.Context()
	if err := master.Del(ctx, "k").Err(); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Obtain(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Release(context.Background()) })
	reset := time.Now()
	cutSubscriptions(t, master)
	return reset
}

func cutSubscriptions(t *testing.T, master redis.UniversalClient) {
	t.Helper()
	if err := master.ClientKillByFilter(t.Context(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
}

// toldWithin waits for the watchdog's context, which must end with
// ErrLockLost within bound of reset, not at its next renewal (10s away).
func toldWithin(t *testing.T, wctx context.Context, reset time.Time, bound time.Duration) {
	t.Helper()
	select {
	case <-wctx.Done():
		t.Logf("the work was told %v after the reset", time.Since(reset).Round(time.Millisecond))
		if d := time.Since(reset); d > bound {
			t.Errorf("told %v after the reset, want within %v", d.Round(time.Millisecond), bound)
		}
		if cause := context.Cause(wctx); !errors.Is(cause, redlock.ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", cause)
		}
	case <-time.After(bound + 5*time.Second):
		t.Fatalf("the watchdog did not tell the work within %v of the reset (its next renewal is 10s away)", bound+5*time.Second)
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

// TestWatchdogKeepsNoSubscriptionOnACluster: a Redis Cluster master
// announces each key on a channel of its own, so a watchdog there keeps no
// subscription (one per lock held would be a connection per lock), and its
// lock is renewed on its schedule.
func TestWatchdogKeepsNoSubscriptionOnACluster(t *testing.T) {
	rc := startCluster(t, 3)
	cc := rc.Client()
	t.Cleanup(func() { cc.Close() })
	c, err := redlock.NewSingle(cc, redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	for _, k := range []string{"a", "b", "c"} {
		holdWithWatchdog(t, c, k)
	}
	time.Sleep(300 * time.Millisecond) // a subscription would be up by now
	n, err := cc.PubSubShardNumSub(ctx, "a", "b", "c").Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range n {
		if v != 0 {
			t.Errorf("%d subscribers to %s's sharded channel under a watchdog, want none", v, k)
		}
	}
}

// gateHook, once armed, holds the first script it sees, after the master
// answered it, until open is closed: a caller's Extend that the master ran,
// its call still holding the lock.
type gateHook struct {
	mu     sync.Mutex
	armed  bool
	inside chan struct{}
	open   chan struct{}
}

func (h *gateHook) hold(cmds []redis.Cmder) {
	h.mu.Lock()
	hit := false
	for _, c := range cmds {
		if n := c.Name(); h.armed && (n == "evalsha" || n == "eval") {
			hit = true
		}
	}
	if hit {
		h.armed = false
	}
	h.mu.Unlock()
	if hit {
		close(h.inside)
		<-h.open
	}
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.hold([]redis.Cmder{cmd})
		return err
	}
}
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.hold(cmds)
		return err
	}
}

// TestWatchdogResetDuringACallersExtendIsNotLost: the master loses the key
// and its subscription breaks and comes back while a caller's own Extend,
// already run by the master, still holds the lock. The watchdog cannot
// renew then; the renewal it owes the reset must not be dropped when the
// Extend's new validity re-arms its schedule (10s away).
func TestWatchdogResetDuringACallersExtendIsNotLost(t *testing.T) {
	_, clients, c := cluster(t, 1)
	h := &gateHook{inside: make(chan struct{}), open: make(chan struct{})}
	clients[0].(*redis.Client).AddHook(h)
	l, wctx := holdWithWatchdog(t, c, "k")
	subscribed(t, clients[0])
	ctx := t.Context()
	check := redis.NewClient(&redis.Options{Addr: clients[0].(*redis.Client).Options().Addr})
	t.Cleanup(func() { check.Close() })
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
	time.Sleep(300 * time.Millisecond) // broken, and confirmed again
	subscribed(t, check)
	close(h.open)
	if err := <-extended; err != nil {
		t.Fatalf("Extend: %v", err)
	}
	back := time.Now()
	for get(t, check, "k") != l.Token() {
		if time.Since(back) > 2*time.Second {
			t.Fatalf("no key on the master %v after the caller's Extend returned, though its subscription broke and came back meanwhile: the reset's renewal was lost (cause %v)",
				time.Since(back).Round(time.Millisecond), context.Cause(wctx))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scriptCount counts the scripts a client sends.
type scriptCount struct {
	mu sync.Mutex
	n  int
}

func (h *scriptCount) add(cmds []redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if n := c.Name(); n == "evalsha" || n == "eval" {
			h.n++
		}
	}
}

func (h *scriptCount) get() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *scriptCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h *scriptCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds)
		return next(ctx, cmds)
	}
}

// TestWatchdogIgnoresTheEndOfAnUnusedSubscription: on a Redis Cluster each
// key has a sharded wake channel of its own, so a waiter of another key
// has a subscription the watchdog does not use; its end, once the waiter
// left and its linger (2s) passed, is no reset of the master.
func TestWatchdogIgnoresTheEndOfAnUnusedSubscription(t *testing.T) {
	rc := startCluster(t, 3)
	cc := rc.Client()
	t.Cleanup(func() { cc.Close() })
	h := &scriptCount{}
	cc.AddHook(h)
	c, err := redlock.NewSingle(cc, redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	holdWithWatchdog(t, c, "k") // renewed every 10s
	lj, err := c.Obtain(ctx, "j", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lj.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- c.WaitReleased(wctx, "j") }()
	redistest.Eventually(t, func() error {
		n, err := cc.PubSubShardNumSub(ctx, "j").Result()
		if err != nil || n["j"] == 0 {
			return fmt.Errorf("nobody subscribed to j's sharded channel (%v)", err)
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-waited
	before := h.get()
	time.Sleep(3 * time.Second) // the subscription's linger (2s) ends
	if n := h.get() - before; n != 0 {
		t.Errorf("%d scripts sent in the 3s after the waiter of j left (k's watchdog is due 10s after its Obtain): the end of j's subscription renewed it as a master's reset", n)
	}
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
	up := time.Now()
	check := servers[0].Client()
	t.Cleanup(func() { check.Close() })
	for get(t, check, "k") != l.Token() {
		if time.Since(up) > 5*time.Second {
			t.Fatalf("not re-taken 5s after the master answered again (cause %v)", context.Cause(wctx))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(up); d > 500*time.Millisecond {
		t.Errorf("the watchdog re-took the key %v after the restarted master answered (empty), want within 500ms", d.Round(time.Millisecond))
	}
}

// TestWatchdogFlappingSubscription: a master that cuts the subscription
// every 100ms, as soon as it is made, for 2s: its breaks count once a
// second, so the watchdog renews a few times, not twice per cut.
func TestWatchdogFlappingSubscription(t *testing.T) {
	_, clients, c := cluster(t, 1)
	h := &scriptCount{}
	clients[0].(*redis.Client).AddHook(h)
	_, wctx := holdWithWatchdog(t, c, "k")
	subscribed(t, clients[0])
	before := h.get()
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		cutSubscriptions(t, clients[0])
		time.Sleep(100 * time.Millisecond)
	}
	// A cut counts when the last one that counted is at least a second
	// old: at 0s, 1s and (at the edge) 2s, each renewing once at the
	// confirmation that follows it (and once more should that fail).
	if n := h.get() - before; n > 6 {
		t.Errorf("%d renewals over 2s of cuts every 100ms, want at most 6: one or two for each cut a second apart", n)
	}
	if err := context.Cause(wctx); err != nil {
		t.Fatalf("the watchdog gave up: %v", err)
	}
}

// TestCloseRacesStartingWatchdogs: Close while watchdogs start (the first
// makes the Client's waker, and its subscription) leaves no goroutine
// (goleak in TestMain) and panics nowhere.
func TestCloseRacesStartingWatchdogs(t *testing.T) {
	srv := redistest.Start(t, 1)[0]
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	for i := range 40 {
		c, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var locks []*redlock.Lock
		for j := range 4 {
			l, err := c.Obtain(ctx, fmt.Sprint("k", i, "-", j), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, l)
		}
		done := make(chan struct{})
		for _, l := range locks {
			go func() {
				defer func() { done <- struct{}{} }()
				if _, stop, err := l.KeepAlive(ctx); err == nil {
					time.Sleep(time.Duration(i%5) * time.Millisecond)
					stop()
				}
			}()
		}
		time.Sleep(time.Duration(i%3) * time.Millisecond)
		c.Close()
		for range locks {
			<-done
		}
	}
}

// TestWatchdogHearsASecondResetSoonAfterTheFirst: the master's
// connections reset once (the watchdog renews, the key is there), and
// 300ms later the master loses the key and another Client takes it, and
// the connections reset again (a second restart, a failover right after a
// restart). The second break falls within resetEvery of the first: its
// renewal is put off to the end of that second, not dropped, and the work
// is told then, not at the next regular renewal (10s).
func TestWatchdogHearsASecondResetSoonAfterTheFirst(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	_, wctx := holdWithWatchdog(t, a, "k")
	subscribed(t, clients[0])
	cutSubscriptions(t, clients[0]) // the first reset: nothing lost
	time.Sleep(300 * time.Millisecond)
	subscribed(t, clients[0])
	// The second, put off to a second after the first.
	reset := takeOverAndReset(t, clients[0], b)
	toldWithin(t, wctx, reset, 2*time.Second)
}

// TestWatchdogNoSubscribePermissionRetriesEverySecond: where the masters'
// user may not SUBSCRIBE, the Client tries the subscription again once a
// second while watchdogs run (each try a new connection), not at the
// 250ms of a master that is down.
func TestWatchdogNoSubscribePermissionRetriesEverySecond(t *testing.T) {
	servers, clients, _ := cluster(t, 1)
	ctx := t.Context()
	if err := clients[0].Do(ctx, "ACL", "SETUSER", "nosub", "on", ">pw", "~*", "&*", "+@all", "-subscribe", "-ssubscribe", "-psubscribe").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := servers[0].Client()
	opt := *rdb.Options()
	rdb.Close()
	opt.Username, opt.Password = "nosub", "pw"
	u := redis.NewClient(&opt)
	t.Cleanup(func() { u.Close() })
	c := newClient(t, []redis.UniversalClient{u}, redlock.WithNodeTimeout(500*time.Millisecond))
	_, wctx := holdWithWatchdog(t, c, "k")
	time.Sleep(500 * time.Millisecond) // the retry delay grows to its cap
	before := connsReceived(t, clients[0])
	time.Sleep(3 * time.Second)
	n := connsReceived(t, clients[0]) - before
	if n > 4 {
		t.Errorf("%d connections in 3s from a watchdog whose user may not SUBSCRIBE, want about 3 (a try a second, as the README says)", n)
	}
	if err := context.Cause(wctx); err != nil {
		t.Fatalf("the watchdog gave up: %v", err)
	}
}

func connsReceived(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n
		}
	}
	t.Fatal("no total_connections_received")
	return 0
}

// TestWatchdogSubscribesAfterTheLanesFirstConnection: a watchdog started
// the moment Obtain returns at a quorum, while the slowest master's lane is
// still setting up its first connection (its dial held 100ms): the
// subscription to that master waits for the lane's connection, or go-redis
// races with itself under -race (a Redis before 8 refuses its maintenance
// notifications handshake, and the first connection to fail it rewrites
// the client's options under a lock the PubSub's connection does not take).
func TestWatchdogSubscribesAfterTheLanesFirstConnection(t *testing.T) {
	servers := startServers(t, 3)
	var rdbs []redis.UniversalClient
	for i, s := range servers {
		rdb := s.Client(func(o *redis.Options) {
			if i == 2 {
				o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
					time.Sleep(100 * time.Millisecond)
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}
			}
		})
		t.Cleanup(func() { rdb.Close() })
		rdbs = append(rdbs, rdb)
	}
	c := newClient(t, rdbs, redlock.WithNodeTimeout(time.Second))
	ctx := t.Context()
	_, wctx := holdWithWatchdog(t, c, "k")
	redistest.Eventually(t, func() error {
		n, err := rdbs[2].PubSubNumSub(ctx, "redlock:wake").Result()
		if err != nil || n["redlock:wake"] == 0 {
			return fmt.Errorf("no subscription to the slow master yet (%v)", err)
		}
		return nil
	})
	if err := context.Cause(wctx); err != nil {
		t.Fatal(err)
	}
}
