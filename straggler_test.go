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

// Requests that reach a master late (held up in a frozen master's socket,
// delayed on a slow connection, left on a connection that was replaced)
// never revive a lapsed lock, undo a Release or shorten a held lock.

// TestLapsedLockIsNeverRevivedByLateRequests: A's Extend starts with a few
// milliseconds of validity left and its requests reach the masters 100ms
// late. Meanwhile A's keys expire and B obtains and releases the lock. A's
// late requests must not re-take the keys: Extend reports the lock lost,
// and no key of A's is left on any master.
func TestLapsedLockIsNeverRevivedByLateRequests(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers, true)
	// Node timeouts far above the delay: only the validity bounds A's Extend.
	a := newClient(t, viaProxy, redlock.WithNodeTimeout(2*time.Second))
	b := newClient(t, direct, redlock.WithNodeTimeout(2*time.Second))
	lock := obtain(t, a, "k", 300*time.Millisecond)
	lapsing(t, lock, 3*time.Millisecond)
	for _, p := range proxies {
		p.DelayOpen(100*time.Millisecond, 0)
	}
	extended := make(chan error, 1)
	go func() { extended <- lock.Extend(ctx, time.Minute) }()
	// B obtains as soon as A's keys expire, and releases at once.
	var bl *redlock.Lock
	redistest.Within(t, time.Second, func() error {
		var err error
		bl, err = b.Obtain(ctx, "k", time.Minute)
		if err != nil {
			return fmt.Errorf("B never obtained the lock after A's keys expired: %v", err)
		}
		return nil
	})
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-extended
	if !errors.Is(err, redlock.ErrLockLost) || lock.Validity() != 0 {
		t.Fatalf("Extend of a lock that lapsed while it was in flight: %v (validity %v), want ErrLockLost", err, lock.Validity())
	}
	delivered(t, proxies...) // A's late requests have all arrived
	for _, d := range direct {
		landed(t, d, "k")
	}
	if vs := holdersOf(t, direct, "k"); count(vs, lock.Token()) > 0 {
		t.Fatalf("masters hold %q: A's late Extend revived its lapsed lock", vs)
	}
}

// TestExtendHeldUpByAFrozenMasterDoesNotReviveALapsedLock: an Extend held
// up in a frozen master's socket until the lock's validity has ended runs,
// when the master resumes, on a key still ours there (a renewal the master
// ran before it froze, which outlives the validity the holder counts on):
// it must not revive the lapsed lock there for a whole TTL. The key expires
// when that earlier renewal says, and a Release of the lock reports it
// lost. For a key, and for a fenced set (its own scripts).
func TestExtendHeldUpByAFrozenMasterDoesNotReviveALapsedLock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  bool
	}{{"key", false}, {"fenced set", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			servers := redistest.Start(t, 3)
			direct := redistest.Clients(t, servers)
			var opts []redlock.Option
			if tc.set {
				opts = append(opts, redlock.WithFencing())
			}
			c := newClient(t, boundedClients(t, servers), append(opts, redlock.WithNodeTimeout(200*time.Millisecond))...)
			const ttl = 1500 * time.Millisecond
			keys := []string{"k"}
			var lock *redlock.Lock
			var err error
			if tc.set {
				keys = []string{"{k}:a", "{k}:b"}
				lock, err = c.ObtainMulti(ctx, keys, ttl)
			} else {
				lock, err = c.Obtain(ctx, "k", ttl)
			}
			if err != nil {
				t.Fatal(err)
			}
			ran := heldUpExtend(t, lock, servers, direct[0], keys[0], ttl)
			after := direct[0].PTTL(ctx, keys[0]).Val()
			if err := lock.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
				t.Fatalf("Release of the lapsed lock: %v, want ErrLockLost", err)
			}
			// Release deleted master 0's key; a revival is seen in the TTL
			// it had (and, without the Release, it would have outlived
			// the renewal master 0 ran before it froze).
			left := time.Until(ran.Add(ttl))
			t.Logf("master 0's key after it resumed: %v left; its last renewal before the freeze left %v", after.Round(time.Millisecond), left.Round(time.Millisecond))
			if after > left+100*time.Millisecond {
				t.Fatalf("master 0's key had %v left after it resumed, past the %v its last renewal before the freeze left: a held-up Extend revived the lapsed lock", after.Round(time.Millisecond), left.Round(time.Millisecond))
			}
		})
	}
}

// TestHeldUpExtendLeavesNoKeyPastItsRenewal is the revival of
// TestExtendHeldUpByAFrozenMasterDoesNotReviveALapsedLock seen from the
// masters alone, with no Release to clean up: once the renewal that master
// 0 ran before it froze has expired, no master holds the lapsed lock's key.
func TestHeldUpExtendLeavesNoKeyPastItsRenewal(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	c := newClient(t, boundedClients(t, servers), redlock.WithNodeTimeout(200*time.Millisecond))
	const ttl = 1500 * time.Millisecond
	lock := obtain(t, c, "k", ttl)
	ran := heldUpExtend(t, lock, servers, direct[0], "k", ttl)
	freed(t, time.Until(ran.Add(ttl+200*time.Millisecond)), direct, "k", lock.Token()) // the key expires with that renewal
	never(t, 300*time.Millisecond, func() error {                                      // and nothing revives it after
		if vs := holdersOf(t, direct, "k"); count(vs, lock.Token()) > 0 {
			return fmt.Errorf("masters hold k = %q after the key expired: a held-up Extend revived the lapsed lock", vs)
		}
		return nil
	})
}

// TestReleaseIsNotUndoneByStraggler: A's key vanished from a master, and
// A's Extend to it goes out on a connection whose bytes are delayed, which
// is then cut mid-stream (the client sees a reset, the server still gets
// the bytes later). The lane replaces the connection and the Release that
// follows goes out first. The straggling Extend must not re-take the key
// after the Release returned.
func TestReleaseIsNotUndoneByStraggler(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers, false)
	c := newClient(t, viaProxy, redlock.WithNodeTimeout(2*time.Second))
	lock := obtain(t, c, "k", time.Minute)
	if err := direct[0].Del(ctx, "k").Err(); err != nil { // evicted
		t.Fatal(err)
	}
	proxies[0].DelayOpen(300*time.Millisecond, 0)
	cut := make(chan int, 1)
	time.AfterFunc(30*time.Millisecond, func() { cut <- proxies[0].CutOpen() }) // the Extend is out: cut its connection
	_ = lock.Extend(ctx, time.Minute)                                           // its fate does not matter; the Release's does
	if n := <-cut; n == 0 {
		t.Fatal("no connection to cut")
	}
	if err := lock.Release(ctx); err != nil && !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release: %v", err)
	}
	delivered(t, proxies[0]) // the straggler has arrived
	if v := landed(t, direct[0], "k"); v != "" {
		t.Fatalf("the master holds %q after Release returned: a straggling Extend re-took the key", v)
	}
}

// TestShorterStragglerCannotShortenAHeldLock: where the CLIENT KILL barrier
// cannot run (an ACL that denies CLIENT KILL; Cluster masters), a
// straggling Extend with a shorter TTL must not land after a later,
// successful Extend and cut the key on its master below the validity that
// later Extend reported. With a stranger's key on the third master, B
// would obtain while A's Validity() still says seconds: two holders.
func TestShorterStragglerCannotShortenAHeldLock(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	clients, proxies := noKillUser(t, servers)
	a := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, direct, redlock.WithNodeTimeout(100*time.Millisecond))
	// A stranger holds master 2 for a while: A's quorum is masters 0 and 1.
	const stranger = 900 * time.Millisecond
	if err := direct[2].Set(ctx, "k", "stranger", stranger).Err(); err != nil {
		t.Fatal(err)
	}
	strangerEnds := time.Now().Add(stranger)
	l := obtain(t, a, "k", 10*time.Second)
	// Master 1's connection turns slow one way: A's Extend to 200ms
	// reaches it 300ms late, after its caller gave up.
	proxies[1].DelayOpen(300*time.Millisecond, 0)
	if err := l.Extend(ctx, 200*time.Millisecond); err == nil {
		t.Fatal("Extend with master 1 slow succeeded")
	}
	extendAgain(t, l, 10*time.Second)
	// Were master 1's key cut, B would obtain as soon as the stranger's key
	// expires.
	noSecondHolder(t, b, l, "k", strangerEnds.Add(time.Second),
		fmt.Sprintf("master 1 holds %q, its key was cut by A's straggling Extend(200ms)", get(t, direct[1], "k")))
}

// TestShorterStragglerOnAClusterMaster: TestShorterStragglerCannotShortenAHeldLock
// on a Redis Cluster master, which the transport reaches through
// go-redis's pooled connections with no barrier at all. One master
// (NewSingle over a one-node cluster): A's Extend(200ms) times out on a
// slow connection, A's Extend(10s) then succeeds on a fresh one, and the
// straggler must not land after it and cut the key while A's Validity()
// says ten seconds.
func TestShorterStragglerOnAClusterMaster(t *testing.T) {
	ctx := context.Background()
	rc := redistest.StartCluster(t, 1)
	p := proxyTo(t, rc.Servers[0].Addr())
	cc := clusterClient(t, rc, func(o *redis.ClusterOptions) {
		o.ContextTimeoutEnabled = true
		o.MaxRedirects = -1 // no go-redis retries: see TestClusterRetriesOutlastTheNodeTimeout
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, p.Addr()) // every node connection through the proxy
		}
	})
	if err := cc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	a := newSingle(t, cc, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newSingle(t, clusterClient(t, rc), redlock.WithNodeTimeout(100*time.Millisecond))
	l := obtain(t, a, "k", 10*time.Second)
	if err := l.Extend(ctx, 10*time.Second); err != nil { // scripts loaded
		t.Fatal(err)
	}
	p.DelayOpen(300*time.Millisecond, 0)
	if err := l.Extend(ctx, 200*time.Millisecond); err == nil {
		t.Fatal("Extend through a slow connection succeeded")
	}
	sent := time.Now()
	extendAgain(t, l, 10*time.Second)
	// Were the key cut, it would expire about 500ms after the straggler
	// was sent.
	noSecondHolder(t, b, l, "k", sent.Add(1200*time.Millisecond), "A's straggling Extend(200ms) cut the key")
}

// TestStragglerWithAClockWithinANodeTimeout: without the CLIENT KILL
// barrier (an ACL that denies it; every Cluster master), a straggling
// shorter Extend must not run after a later, successful one on a master
// whose clock is behind the client's by less than a node timeout: the key
// would expire on that master while A's Validity() says seconds, and B
// would take the lock. Order there cannot rest on the clocks agreeing
// within a node timeout; it must hold with a clock 380ms behind as in step.
func TestStragglerWithAClockWithinANodeTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 400 * time.Millisecond
	for _, tc := range []struct {
		name string
		lag  time.Duration
	}{{"in step", 0}, {"master 1 380ms behind", 380 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			two := redistest.Start(t, 2)
			lagging := redistest.Start(t, 1, redistest.Options{Env: clockShim(t, -tc.lag)})
			servers := []*redistest.Server{two[0], lagging[0], two[1]}
			direct := redistest.Clients(t, servers)
			if off := masterOffset(t, direct[1]); off > -tc.lag+30*time.Millisecond || off < -tc.lag-30*time.Millisecond {
				t.Fatalf("master 1's clock is %v off, want %v", off, -tc.lag)
			}
			clients, proxies := noKillUser(t, servers)
			a := newClient(t, clients, redlock.WithNodeTimeout(timeout))
			b := newClient(t, direct, redlock.WithNodeTimeout(timeout))
			// A stranger holds master 2 for a while: A's quorum is masters 0 and 1.
			const stranger = 4 * time.Second
			if err := direct[2].Set(ctx, "k", "stranger", stranger).Err(); err != nil {
				t.Fatal(err)
			}
			strangerEnds := time.Now().Add(stranger)
			l := obtain(t, a, "k", 10*time.Second)
			if err := l.Extend(ctx, 10*time.Second); err != nil { // scripts loaded
				t.Fatal(err)
			}
			// A's Extend(2s) reaches master 1 a second late: past its late
			// deadline (start + 2 node timeouts) by the client's clock, not
			// by master 1's. The lane holds its next batch until then, so
			// A's next Extend reaches master 1 first.
			proxies[1].DelayOpen(time.Second, 0)
			if err := l.Extend(ctx, 2*time.Second); err == nil {
				t.Fatal("Extend with master 1 slow succeeded")
			}
			// A retries a little later (its validity is now about 2s); by
			// then the lane no longer holds its batches back.
			time.Sleep(timeout + timeout/8)
			extendAgain(t, l, 10*time.Second)
			// Were master 1's key cut (about 3s after the straggler was
			// sent), B would obtain as soon as the stranger's key expires.
			noSecondHolder(t, b, l, "k", strangerEnds.Add(time.Second),
				fmt.Sprintf("A's straggling Extend(2s) ran on master 1 (clock %v behind, node timeout %v) after A's Extend(10s)", tc.lag, timeout))
		})
	}
}
