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

// A go-redis hook that panics fails the requests it was sending and nothing
// else: not the caller, not the lane, not another master's requests.

// TestPanickingHookFailsItsBatchOnly: a go-redis hook that panics while
// the library sends fails those requests with a clear error, on the
// caller's goroutine (inline) and on the lane's worker alike; the lane goes
// on working and Close returns.
func TestPanickingHookFailsItsBatchOnly(t *testing.T) {
	t.Parallel()
	for _, inline := range []bool{true, false} {
		t.Run(fmt.Sprint("inline=", inline), func(t *testing.T) {
			servers := redistest.Start(t, 1)
			rdb := clientOf(t, servers[0], func(o *redis.Options) { o.ContextTimeoutEnabled = inline })
			hook := &faulty{panics: true}
			rdb.AddHook(hook)
			c, err := redlock.NewSingle(rdb, redlock.AnyClientOptions())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			hook.armed.Store(true)
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("Obtain panicked: %v", p)
					}
				}()
				if _, err := c.Obtain(ctx, "k", time.Minute); err == nil {
					t.Error("Obtain succeeded through a panicking hook")
				} else if !errors.Is(err, redlock.ErrUnavailable) {
					t.Errorf("Obtain through a panicking hook: %v, want ErrUnavailable", err)
				}
			}()
			hook.armed.Store(false)
			done := make(chan error, 1)
			go func() {
				l, err := c.Obtain(ctx, "k2", time.Minute)
				if err == nil {
					err = l.Release(ctx)
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("after the panic: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the lane is wedged after a panicking hook")
			}
			closed := make(chan struct{})
			go func() { c.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatal("Close hangs after a panicking hook")
			}
		})
	}
}

// TestPanickedBatchIsNotResent: the commands of a batch whose pipeline a
// hook panicked on are never sent again with a later batch: they alias the
// arguments of pooled requests that have since been delivered and reused,
// and the master would run whatever they now hold (a second copy of the
// next Release, whose "absent" answer the caller would read).
func TestPanickedBatchIsNotResent(t *testing.T) {
	t.Parallel()
	for _, inline := range []bool{true, false} {
		t.Run(fmt.Sprint("inline=", inline), func(t *testing.T) {
			ctx := context.Background()
			servers := redistest.Start(t, 1)
			rdb := clientOf(t, servers[0], oneLane, func(o *redis.Options) { o.ContextTimeoutEnabled = inline })
			hook := &pipeRecorder{}
			rdb.AddHook(hook)
			c := newClient(t, []redis.UniversalClient{rdb})
			a, b := obtain(t, c, "a", time.Minute), obtain(t, c, "b", time.Minute)
			hook.mu.Lock()
			hook.armed = true
			hook.mu.Unlock()
			// The scripts are not loaded yet: the Release goes out as a
			// pipeline (SCRIPT LOAD..., EVALSHA), and the hook panics.
			if err := a.Release(ctx); err == nil {
				t.Fatal("Release through a panicking hook succeeded")
			}
			errB := b.Release(ctx)
			hook.mu.Lock()
			defer hook.mu.Unlock()
			panicked := map[redis.Cmder]bool{}
			for _, c := range hook.panicked {
				panicked[c] = true
			}
			for _, pipe := range hook.sent {
				var again []string
				for _, c := range pipe {
					if panicked[c] {
						again = append(again, describe(c))
					}
				}
				if len(again) > 0 {
					t.Errorf("a later pipeline of %d commands re-sends %d commands of the batch that panicked: %v", len(pipe), len(again), again)
				}
			}
			if errB != nil {
				t.Errorf("Release of a held lock after the panic: %v, want nil", errB)
			}
		})
	}
}

// TestPanickedBatchSharesNoCommandAcrossMasters: a pipeline a hook
// panicked on leaves no command of the pooled requests behind in its lane:
// the pool hands those requests to other masters' lanes, and two go-redis
// pipelines writing replies into one Cmd (the race detector fails this
// test) could count a reply of one master for another, a "granted" for a
// master that refused.
func TestPanickedBatchSharesNoCommandAcrossMasters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	hooks := make([]*pipeRecorder, 3)
	for i, s := range servers {
		rdb := clientOf(t, s)
		hooks[i] = &pipeRecorder{}
		rdb.AddHook(hooks[i])
		clients[i] = rdb
	}
	c := newClient(t, clients)
	for round := range 20 {
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 50 {
					if g == 0 && i == 10 {
						h := hooks[round%3]
						h.mu.Lock()
						h.armed = true
						h.mu.Unlock()
					}
					l, err := c.Obtain(ctx, fmt.Sprint(g, "-", i), time.Minute)
					if err == nil {
						_ = l.Extend(ctx, time.Minute)
						_ = l.Release(ctx)
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestPanicWhileTakingAConnectionLeaksNone: a hook that panics while a lane
// takes its connection (the CLIENT INFO pipeline of a fresh connection)
// leaks no pooled connection: after four such panics on a pool of four,
// the application's own commands and the locks work again once the hook
// stops panicking.
func TestPanicWhileTakingAConnectionLeaksNone(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := clientOf(t, servers[0], oneLane, func(o *redis.Options) { o.PoolTimeout = 300 * time.Millisecond })
	h := &lateSpanHook{}
	rdb.AddHook(h)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(200*time.Millisecond))
	h.left.Store(1 << 20) // every take panics, the background ones (an undo, a tick) too
	for i := range 4 {
		if _, err := c.Obtain(ctx, "k", time.Minute); err == nil {
			t.Fatalf("Obtain %d succeeded while the hook panics", i)
		}
	}
	h.left.Store(0) // The hook panics no more.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("the application's PING after the hook's panics: %v (pool: %+v)", err, *rdb.PoolStats())
	}
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("Obtain after the hook's panics: %v (pool: %+v)", err, *rdb.PoolStats())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPanickingHookOnAColdClusterDoesNotPanicTheCaller: a go-redis hook of
// a Cluster master's node clients (ClusterClient.OnNewNode) that panics
// while the slot map is first loaded panics in the lane's batch, which
// fails, never in the caller's Obtain (with its round's other requests
// already sent); the Cluster master serves again after it.
func TestPanickingHookOnAColdClusterDoesNotPanicTheCaller(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 1)
	hook := &faulty{once: true, panics: true} // the first command of any node client
	hook.armed.Store(true)
	cc := clusterClient(t, cl, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
	cc.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(hook) })
	std := redistest.Clients(t, redistest.Start(t, 2))
	c := newClient(t, []redis.UniversalClient{std[0], std[1], cc}, redlock.WithNodeTimeout(time.Second))
	var l *redlock.Lock
	var err error
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Errorf("Obtain panicked in the caller: %v", v)
			}
		}()
		l, err = c.Obtain(context.Background(), "hooked", time.Minute)
	}()
	// The round decides at quorum: the two standalone masters may answer
	// before the Cluster's lane has run its first command, so the hook may
	// fire after Obtain returned. It fires in the lane either way; an
	// unrecovered panic there would end the test binary.
	redistest.Eventually(t, func() error {
		if hook.armed.Load() {
			return errors.New("the hook never ran: the test proves nothing")
		}
		return nil
	})
	if err == nil && l != nil {
		l.Release(context.Background())
	}
	// The Cluster master still serves after the panic.
	l, err = c.Obtain(context.Background(), "hooked-after", time.Minute)
	if err != nil {
		t.Fatalf("Obtain after the hook's panic: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release after the hook's panic: %v", err)
	}
}
