package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The lane's connection: broken, killed or closed under a request, and the
// pool it shares with the application.

// TestRetryAfterResetDoesNotMisreportObtain: the master ran the SET, and
// the connection was reset before its reply came back; the SET sent again
// on a fresh connection finds our own key. Obtain never reports ErrTaken
// ("another owner holds the lock") when nobody else holds it, and leaves no
// key of a failed attempt behind. The proxy's cut sometimes beats its
// reading of the SET (then the SET never ran and the retry is right): the
// test tries a few times.
func TestRetryAfterResetDoesNotMisreportObtain(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers, false)
	c := newClient(t, viaProxy, redlock.WithNodeTimeout(2*time.Second))
	for round := range 5 {
		key := fmt.Sprint("k", round)
		warm(t, c) // the lane has its connection
		sets := calls(t, direct[0], "set")
		cutReplies(proxies[0])
		l, err := c.Obtain(ctx, key, time.Minute)
		ran := calls(t, direct[0], "set") > sets
		if err != nil && errors.Is(err, redlock.ErrTaken) {
			t.Fatalf("Obtain with no other owner anywhere: %v, want success or ErrUnavailable", err)
		}
		if err == nil {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			// The failed attempt releases the key in the background.
			redistest.Eventually(t, func() error {
				if held := get(t, direct[0], key); held != "" {
					return fmt.Errorf("after the failed Obtain the master still holds our key %q (TTL %v)", held, direct[0].PTTL(ctx, key).Val())
				}
				return nil
			})
		}
		delivered(t, proxies[0]) // the cut's delayed bytes are gone
		if ran {
			return // the cut came after the SET ran, and the retry saw it
		}
	}
	t.Skip("the cut never came after the SET")
}

// TestRetryAfterResetDoesNotFakeALoss: the master ran the Release's
// delete, and the connection was reset before the reply came back; the
// Release sent again finds the key gone. It is this very call's doing:
// Release returns nil (or ErrUnavailable), never ErrLockLost ("work done
// under the lock may have overlapped") for a lock held to the end.
func TestRetryAfterResetDoesNotFakeALoss(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers, false)
	c := newClient(t, viaProxy, redlock.WithNodeTimeout(2*time.Second))
	for round := range 5 {
		key := fmt.Sprint("k", round)
		l := obtain(t, c, key, time.Minute)
		if err := l.Extend(ctx, time.Minute); err != nil { // scripts loaded
			t.Fatal(err)
		}
		scripts := calls(t, direct[0], "evalsha")
		cutReplies(proxies[0])
		err := l.Release(ctx)
		ran := calls(t, direct[0], "evalsha")-scripts > 1 // the first run, and the retry
		if errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("Release of a lock held until this call: %v, want nil (or ErrUnavailable), not ErrLockLost", err)
		}
		if v := get(t, direct[0], key); v != "" {
			t.Fatalf("key still held: %q (Release: %v)", v, err)
		}
		delivered(t, proxies[0])
		if ran {
			return // the cut came after the delete ran, and the retry saw it
		}
	}
	t.Skip("the cut never came after the delete")
}

// TestRetryAfterKillDoesNotMisreportObtain is
// TestRetryAfterResetDoesNotMisreportObtain without a proxy: connections
// killed (by an operator, or Redis's own client eviction) after the master
// ran the SET but before it wrote the reply. Whether the master reads the
// SET or the kill first is up to its event loop, so the test tries a few
// times.
func TestRetryAfterKillDoesNotMisreportObtain(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	var lanes, admins written
	rdb := pinged(t, servers[0], lanes.dialer)
	admin := pinged(t, servers[0], admins.dialer)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(2*time.Second))
	for round := range 10 {
		key := fmt.Sprint("k", round)
		warm(t, c)
		// Freeze the master so that the SET and the kill are read in one
		// turn of its event loop, before the SET's reply is written.
		if err := servers[0].Stop(); err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *redlock.Lock
			err error
		}
		obtained := make(chan result, 1)
		sent := lanes.n.Load()
		go func() {
			l, err := c.Obtain(ctx, key, time.Minute)
			obtained <- result{l, err}
		}()
		lanes.past(t, sent) // the SET is in the master's socket
		killed := make(chan error, 1)
		sent = admins.n.Load()
		go func() {
			killed <- admin.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err()
		}()
		admins.past(t, sent) // and the kill after it
		if err := servers[0].Cont(); err != nil {
			t.Fatal(err)
		}
		if err := <-killed; err != nil {
			t.Fatal(err)
		}
		r := <-obtained
		if r.err == nil {
			_ = r.l.Release(ctx)
			continue // the kill came first: the SET never ran
		}
		if errors.Is(r.err, redlock.ErrTaken) {
			t.Errorf("round %d: Obtain with no other owner anywhere: %v, want success or ErrUnavailable", round, r.err)
		}
		if v := get(t, admin, key); v != "" {
			t.Errorf("round %d: after the failed Obtain the master still holds our key %q", round, v)
		}
		return
	}
	t.Skip("the kill came first every time")
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
	rdb := clientOf(t, srv, func(o *redis.Options) {
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
	check := clientOf(t, srv)
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
	c, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond), redlock.AnyClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	l := obtain(t, c, "k", time.Minute)
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

// TestClientNameWithAnEqualsSign: a client name with an '=' (Redis allows
// it, go-redis's Options.ClientName sets it, and go-redis's CLIENT INFO
// parser fails on it) costs nothing: Obtain, Extend and Release succeed on
// a healthy master. That parse error is no reply: the batch sent with a
// connection's first CLIENT INFO, which the master ran, must not fail whole
// for it.
func TestClientNameWithAnEqualsSign(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	rdb := pinged(t, servers[0], func(o *redis.Options) { o.ClientName = "svc=api" })
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(200*time.Millisecond))
	for i := range 3 {
		l, err := c.Obtain(ctx, "k", time.Minute)
		if err != nil {
			t.Fatalf("Obtain %d on a healthy master: %v; the master holds %q", i, err, get(t, direct[0], "k"))
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend %d: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
	}
}

// TestIdleLaneLeavesTheUsersPoolUsable: an idle lane does not keep the
// connection the application sharing the client needs: with a pool of
// one, the application's own command, right after the last lock request,
// gets the connection within its PoolTimeout.
func TestIdleLaneLeavesTheUsersPoolUsable(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	for i, s := range servers {
		clients[i] = clientOf(t, s, func(o *redis.Options) {
			o.PoolSize = 1
			o.PoolTimeout = 200 * time.Millisecond
		})
	}
	c := newClient(t, clients)
	warm(t, c)
	if err := clients[0].Set(ctx, "data", "v", 0).Err(); err != nil {
		t.Fatalf("the application's own command on its client, after the last lock request: %v", err)
	}
}
