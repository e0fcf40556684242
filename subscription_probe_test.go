package redlock_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// sentinelPair starts a master, its replica and a Sentinel watching them
// (name "m", quick to fail over), and returns them with a function that
// waits until the Sentinel names port as the master.
func sentinelPair(t *testing.T) (master, replica, sentinel *redistest.Server, says func(port int)) {
	t.Helper()
	master = redistest.Start(t, 1)[0]
	replica = redistest.StartReplica(t, master)
	sentinel = redistest.Start(t, 1, redistest.Options{Sentinel: []string{
		fmt.Sprintf("sentinel monitor m 127.0.0.1 %d 1", master.Port()),
		"sentinel down-after-milliseconds m 200",
		"sentinel failover-timeout m 5000",
	}})[0]
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	t.Cleanup(func() { sc.Close() })
	says = func(port int) {
		t.Helper()
		redistest.Eventually(t, func() error {
			addr, err := sc.GetMasterAddrByName(context.Background(), "m").Result()
			if err != nil || len(addr) != 2 || addr[1] != strconv.Itoa(port) {
				return fmt.Errorf("the Sentinel names %v as the master (%v), want port %d", addr, err, port)
			}
			return nil
		})
	}
	says(master.Port())
	redistest.Eventually(t, func() error { // the replica is known, its link up: it can be promoted
		rs, err := sc.Replicas(context.Background(), "m").Result()
		for _, r := range rs {
			if r["port"] == strconv.Itoa(replica.Port()) && r["master-link-status"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("the Sentinel knows no replica with its link up: %v (%v)", rs, err)
	})
	return master, replica, sentinel, says
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
	if testing.Short() {
		t.Skip("a Sentinel failover takes seconds")
	}
	master, replica, sentinel, says := sentinelPair(t)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{sentinel.Addr()}, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { fc.Close() })
	c := newClient(t, []redis.UniversalClient{fc}, redlock.WithNodeTimeout(500*time.Millisecond))
	mc, rc := master.Client(), replica.Client()
	t.Cleanup(func() { mc.Close(); rc.Close() })
	l, wctx := holdWithWatchdog(t, c, "k")
	subscribed(t, mc)
	if n, err := mc.Wait(t.Context(), 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged (%v), want the key on the replica", n, err)
	}
	before := calls(t, rc, "evalsha") + calls(t, rc, "eval")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	t.Cleanup(func() { sc.Close() })
	if err := sc.Failover(t.Context(), "m").Err(); err != nil {
		t.Fatal(err)
	}
	says(replica.Port())
	promoted := time.Now()
	for calls(t, rc, "evalsha")+calls(t, rc, "eval") == before {
		if d := time.Since(promoted); d > 2*time.Second {
			n, _ := rc.PubSubNumSub(t.Context(), "redlock:wake").Result()
			t.Fatalf("no renewal reached the new master %v after the Sentinel named it (its subscribers: %v); want one within a second, not at the next renewal 10s later",
				d.Round(time.Millisecond), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("a renewal reached the new master %v after the Sentinel named it", time.Since(promoted).Round(time.Millisecond))
	subscribed(t, rc)
	if got := get(t, rc, "k"); got != l.Token() {
		t.Errorf("the new master holds %q, want the lock's token", got)
	}
	if err := context.Cause(wctx); err != nil {
		t.Errorf("the watchdog gave up the lock: %v", err)
	}
}

// TestWatchdogHearsARestartBehindASilentCut: the Client's connections to
// a master go dark (every packet dropped, nothing closed, as behind a
// partition) while the master restarts empty and another Client takes the
// key. The subscription's connection never breaks, so only the probe,
// through a fresh connection, finds it missing on the master; the
// subscription is made again, counts as a reset, and the watchdog renews,
// is refused, and tells the work within a few seconds, not at its next
// renewal 10s later.
func TestWatchdogHearsARestartBehindASilentCut(t *testing.T) {
	server := redistest.Start(t, 1)[0]
	proxy, err := redistest.NewProxy(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	through := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, ReadTimeout: time.Second, WriteTimeout: time.Second, DialTimeout: time.Second})
	t.Cleanup(func() { through.Close() })
	a := newClient(t, []redis.UniversalClient{through}, redlock.WithNodeTimeout(200*time.Millisecond))
	direct := server.Client()
	t.Cleanup(func() { direct.Close() })
	b := newClient(t, []redis.UniversalClient{direct})
	_, wctx := holdWithWatchdog(t, a, "k")
	subscribed(t, direct)
	proxy.Silence()
	if err := server.Restart(false); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Obtain(t.Context(), "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Release(context.Background()) })
	toldWithin(t, wctx, time.Now(), 3*time.Second)
}

// TestWatchdogHearsARestartDuringItsFirstSubscribe: a master that goes
// down before the watchdog's subscription is first confirmed, and comes
// back empty, is heard like any restart: the failed attempts before the
// first confirmation count as a break, and that confirmation renews the
// watchdog at once, which finds another owner and tells the work, not at
// its next renewal 10s later.
func TestWatchdogHearsARestartDuringItsFirstSubscribe(t *testing.T) {
	servers, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	l, err := a.Obtain(t.Context(), "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Kill(); err != nil { // before any subscription: none was made yet
		t.Fatal(err)
	}
	wctx, stop, err := l.KeepAlive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	time.Sleep(300 * time.Millisecond) // the subscription's first attempts fail
	if err := servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Obtain(t.Context(), "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Release(context.Background()) })
	toldWithin(t, wctx, time.Now(), 2*time.Second)
}

// TestProbeChannelRefusedKeepsWaiting: a user allowed the wake channel but
// not the Client's own channel (an ACL that names channels) keeps its
// subscription and is woken by releases as before; only the probe is off.
func TestProbeChannelRefusedKeepsWaiting(t *testing.T) {
	servers, clients, a := cluster(t, 1)
	ctx := t.Context()
	if err := clients[0].Do(ctx, "ACL", "SETUSER", "narrow", "on", ">pw", "~*", "resetchannels", "&redlock:wake", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	narrow := servers[0].Client(func(o *redis.Options) { o.Username, o.Password = "narrow", "pw" })
	t.Cleanup(func() { narrow.Close() })
	b := newClient(t, []redis.UniversalClient{narrow})
	held, ch := holdAndWait(t, a, b)
	marked(t, clients[0], "k")
	subscribed(t, clients[0])
	time.Sleep(2 * probeEveryForTests) // probes run, or are off
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wokenBy(t, ch, released, time.Second).Release(ctx)
}

// probeEveryForTests is the probe's period (wake.go), for waits here.
const probeEveryForTests = 250 * time.Millisecond

// zeroNumSub makes every PUBSUB NUMSUB answer 0, as a proxy in front of
// several servers might.
type zeroNumSub struct{}

func (zeroNumSub) DialHook(next redis.DialHook) redis.DialHook { return next }
func (zeroNumSub) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.MapStringIntCmd); ok && cmd.Name() == "pubsub" {
			m := map[string]int64{}
			for k := range c.Val() {
				m[k] = 0
			}
			c.SetVal(m)
		}
		return err
	}
}
func (zeroNumSub) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestProbeBacksOffWhenTheMasterKeepsAnsweringZero: a master that always
// answers that the subscription is missing does not get it made again at
// every probe (4 a second), nor the watchdogs renewed once a second: the
// probe asks ever less often.
func TestProbeBacksOffWhenTheMasterKeepsAnsweringZero(t *testing.T) {
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client()
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(zeroNumSub{})
	c := newClient(t, []redis.UniversalClient{rdb})
	direct := servers[0].Client()
	t.Cleanup(func() { direct.Close() })
	holdWithWatchdog(t, c, "k")
	subscribed(t, direct)
	before := calls(t, direct, "subscribe")
	time.Sleep(3 * time.Second)
	if n := calls(t, direct, "subscribe") - before; n > 8 { // 2 commands a subscription
		t.Errorf("the subscription was made %d times in 3s (%d SUBSCRIBE), want the probe to back off", n/2, n)
	}
}
