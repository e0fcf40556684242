package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The CLIENT KILL barrier: a connection given up with requests that may
// still run on the master is killed, by a fresh connection, before the
// next batch goes out; it kills nobody else's connection and never drains
// the pool.

// TestFailedObtainAfterAPauseLeavesNoKey: the SET of a failed Obtain,
// still on its way on a slow connection, never lands after the attempt's
// undo: the barrier kills that connection first, also when it is the first
// batch on a connection after a pause (its client ID learnt in the same
// batch). Otherwise the failed attempt's key stays for its whole TTL, and
// the caller's own next Obtain says ErrTaken ("another owner holds it").
func TestFailedObtainAfterAPauseLeavesNoKey(t *testing.T) {
	t.Parallel()
	for _, pause := range []time.Duration{0, 100 * time.Millisecond} {
		t.Run(fmt.Sprint("pause ", pause), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			servers := redistest.Start(t, 1)
			viaProxy, proxies := proxied(t, servers, true)
			direct := redistest.Clients(t, servers)
			c := newSingle(t, viaProxy[0], redlock.WithNodeTimeout(100*time.Millisecond))
			warm(t, c)
			time.Sleep(pause) // the lane idles
			proxies[0].DelayOpen(300*time.Millisecond, 0)
			if _, err := c.Obtain(ctx, "k", time.Minute); !errors.Is(err, redlock.ErrUnavailable) {
				t.Fatalf("Obtain through a connection 300ms slow: %v, want ErrUnavailable", err)
			}
			delivered(t, proxies[0]) // the SET has landed, or died with its connection
			redistest.Within(t, time.Second, func() error {
				if v := landed(t, direct[0], "k"); v != "" {
					return fmt.Errorf("after the failed Obtain, its key %q is on the master for %v more", v, direct[0].PTTL(ctx, "k").Val().Round(time.Second))
				}
				return nil
			})
		})
	}
}

// TestBarrierKillsNoStrangerAfterARefusal: a batch that a hook or a
// limiter refused (or panicked on) without sending anything leaves its
// connection healthy; once the lane gives it back, the application sharing
// the client may take it, and the lane's barrier must never kill it
// mid-use.
func TestBarrierKillsNoStrangerAfterARefusal(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprint("panics=", panics), func(t *testing.T) {
			ctx := context.Background()
			servers := redistest.Start(t, 1)
			rdb := clientOf(t, servers[0], oneLane)
			hook := &faulty{once: true, panics: panics}
			rdb.AddHook(hook)
			c := newClient(t, []redis.UniversalClient{rdb})
			l := obtain(t, c, "warm", time.Minute)
			hook.armed.Store(true)
			if err := l.Release(ctx); err == nil {
				t.Fatal("Release through a refusing hook succeeded")
			}
			// The application takes a connection of its client: the one
			// the lane just gave back.
			app := rdb.Conn()
			defer app.Close()
			id, err := app.ClientID(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			l, err = c.Obtain(ctx, "k", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Release(ctx)
			if err := app.Ping(ctx).Err(); err != nil {
				t.Fatalf("the application's connection (client ID %d), which the lane had given back to the pool healthy after its hook refused a batch, was killed by the lane's barrier: %v", id, err)
			}
		})
	}
}

// TestDryPoolGivesTheApplicationNoVictim: "the application never gets a
// connection the lane will kill", also when the pool is dry: a connection
// the lane gave up for a reason other than a socket error (a hook's
// refusal) is healthy to go-redis, and is never handed to an application
// goroutine waiting for a connection while it is still to be killed. Here
// a pool of two: the application holds one connection and waits for the
// other, which the lane held when a hook refused its batch.
func TestDryPoolGivesTheApplicationNoVictim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := clientOf(t, servers[0], bounded, func(o *redis.Options) {
		o.PoolSize = 2 // one lane
		o.PoolTimeout = 5 * time.Second
	})
	hook := &faulty{once: true}
	rdb.AddHook(hook)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(300*time.Millisecond))
	l, err := c.Obtain(ctx, "k", time.Minute) // the lane holds a connection
	if err != nil {
		t.Fatal(err)
	}
	admin := redistest.Clients(t, servers)[0]
	var laneID int64
	for _, line := range strings.Split(admin.ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, "cmd=set") {
			fmt.Sscanf(line[strings.Index(line, "id="):], "id=%d", &laneID)
		}
	}
	hook.armed.Store(true)
	if err := l.Release(ctx); err == nil { // the lane keeps its connection out of the pool
		t.Fatal("Release through a refusing hook succeeded")
	}
	app1 := rdb.Conn() // the application takes the pool's other connection
	defer app1.Close()
	if err := app1.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	app2 := rdb.Conn() // and waits for another
	defer app2.Close()
	got := make(chan error, 1)
	go func() { got <- app2.Ping(ctx).Err() }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiting application's PING: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the application waited 3s for a connection")
	}
	id, err := app2.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if id != laneID {
		return // the application got a connection of its own: the victim was killed before it went back
	}
	app1.Close()                                  // a connection is free again: the lane takes it and runs its barrier
	never(t, 500*time.Millisecond, func() error { // the lane's ticks: a barrier would run now
		if err := app2.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("the application's connection (client ID %d: the lane's, given up after its hook refused a batch, and handed to the application when the pool ran dry) was killed by the lane's barrier while the application used it: %v", id, err)
		}
		return nil
	})
}

// TestBarrierSparesStrangersOnAUnixSocket: the barrier kills a connection
// given up by its ID and address, so that a restarted master's new client
// that reuses the ID is spared. On a Unix socket (MasterOptions takes
// unix:// URLs) every client's address is the socket's path: after a
// restart, client IDs start again from 1, and the application's connection
// that got the ID of the lane's old connection must survive the lane's
// first batch.
func TestBarrierSparesStrangersOnAUnixSocket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "r.sock")
	servers := redistest.Start(t, 1, redistest.Options{Args: []string{"--unixsocket", sock, "--unixsocketperm", "700"}})
	opts, err := redlock.MasterOptions("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	opts.PoolSize, opts.ReadTimeout = 4, time.Second // one lane
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond))
	warm(t, c)
	direct := redistest.Clients(t, servers)
	var laneID int64
	for _, line := range strings.Split(direct[0].ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, "cmd=evalsha") || strings.Contains(line, "cmd=set") {
			fmt.Sscanf(line[strings.Index(line, "id="):], "id=%d", &laneID)
		}
	}
	if laneID == 0 {
		t.Fatalf("no lane connection in CLIENT LIST:\n%s", direct[0].ClientList(ctx).Val())
	}
	if err := servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	// The application reconnects: one of its connections gets the lane's old ID.
	app := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1, PoolSize: 1})
	defer app.Close()
	var pinned []*redis.Conn
	defer func() {
		for _, cn := range pinned {
			cn.Close()
		}
	}()
	var stranger *redis.Conn
	for stranger == nil {
		cn := app.Conn()
		id, err := cn.ClientID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if id > laneID {
			t.Skipf("the restarted master gave IDs past %d", laneID)
		}
		if id == laneID {
			stranger = cn
		} else {
			pinned = append(pinned, cn)
			app = redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1, PoolSize: 1})
			defer app.Close()
		}
	}
	defer stranger.Close()
	if err := stranger.Ping(ctx).Err(); err != nil {
		t.Fatalf("the application's connection before the lane's first batch: %v", err)
	}
	if _, err := c.Obtain(ctx, "k", time.Minute); err != nil {
		t.Fatalf("Obtain after the restart: %v", err)
	}
	if err := stranger.Ping(ctx).Err(); err != nil {
		t.Fatalf("the application's connection (ID %d, the lane's before the restart) after the lane's first batch: %v", laneID, err)
	}
}

// TestVictimOnAPoolOfOneIsKilledAfterTheStall: with PoolSize 1 (a client
// kept for locks only), a connection whose request timed out is the pool's
// only one, and no fresh connection can be taken to kill it: the master
// must still serve the Client, and the application, soon after it answers
// again (here a CLIENT PAUSE WRITE of 300ms), not be lost to both for good.
func TestVictimOnAPoolOfOneIsKilledAfterTheStall(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	admin := redistest.Clients(t, servers)[0]
	rdb := clientOf(t, servers[0], bounded, func(o *redis.Options) {
		o.PoolSize = 1
		o.PoolTimeout = 200 * time.Millisecond
	})
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(100*time.Millisecond))
	warm(t, c)
	const pause = 300 * time.Millisecond
	if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Obtain(ctx, "k", time.Minute); err == nil {
		t.Fatal("obtained a lock while the master ran no write")
	}
	writable(t, admin) // the master's pause ends
	redistest.Within(t, 3*time.Second, func() error {
		l, err := c.Obtain(ctx, "after", time.Minute)
		if err != nil {
			return fmt.Errorf("after a pause of %v ended, Obtain still fails: %v; the application's PING: %v (pool %+v)", pause, err, rdb.Ping(ctx).Err(), *rdb.PoolStats())
		}
		return l.Release(ctx)
	})
}

// TestPausedWritesDoNotDrainThePool: a master that reads but runs no write
// (CLIENT PAUSE WRITE), or that is stopped, makes every batch time out, on
// fresh connections too; the connections to kill (and the fresh ones whose
// barrier went unanswered) must not pile up out of the pool: the
// application's own commands still get a connection during the stall, and
// the Client obtains again soon after it ends.
func TestPausedWritesDoNotDrainThePool(t *testing.T) {
	for _, stall := range []string{"client pause write", "sigstop"} {
		t.Run(stall, func(t *testing.T) {
			ctx := context.Background()
			servers := redistest.Start(t, 1)
			admin := redistest.Clients(t, servers)[0]
			rdb := redis.NewClient(&redis.Options{
				Addr: servers[0].Addr(), PoolSize: 8, PoolTimeout: 200 * time.Millisecond,
				ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: 2,
			})
			defer rdb.Close()
			c := newSingle(t, rdb, redlock.WithNodeTimeout(30*time.Millisecond))
			warm(t, c)
			const pause = 1200 * time.Millisecond
			if stall == "sigstop" {
				if err := servers[0].Stop(); err != nil {
					t.Fatal(err)
				}
				time.AfterFunc(pause, func() { servers[0].Cont() })
			} else if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			pausedAt := time.Now()
			var wg sync.WaitGroup
			for w := range 4 { // keys on every lane
				wg.Go(func() {
					for i := 0; time.Since(pausedAt) < pause-200*time.Millisecond; i++ {
						if l, err := c.Obtain(ctx, fmt.Sprintf("k%d-%d", w, i), time.Second); err == nil {
							l.Release(ctx)
							t.Errorf("obtained a lock while the master ran no write")
						}
					}
				})
			}
			wg.Wait()
			if stall != "sigstop" {
				// Still paused: the application's own read goes through its pool.
				if err := rdb.Ping(ctx).Err(); err != nil {
					t.Errorf("the application's PING while the master is paused: %v (pool %+v)", err, *rdb.PoolStats())
				}
			}
			writable(t, admin) // the stall ends
			redistest.Within(t, 2*time.Second, func() error {
				l, err := c.Obtain(ctx, "after", time.Second)
				if err != nil {
					return fmt.Errorf("after the stall ended, Obtain still fails: %v (pool %+v)", err, *rdb.PoolStats())
				}
				return l.Release(ctx)
			})
		})
	}
}
