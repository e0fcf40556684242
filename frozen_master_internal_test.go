package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/wire"
)

// A frozen master holds what is sent to it; the Client must not pile
// requests or kept Releases up for it.

// TestFrozenMasterQueueStaysBounded: a frozen master behind a client with
// no read timeout holds its batch forever; callers that keep asking wait
// for it no longer than their own deadline, and their requests must not
// pile up in the lane's queue.
func TestFrozenMasterQueueStaysBounded(t *testing.T) {
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) { o.ReadTimeout = 3 * time.Second })
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := NewSingle(rdb, WithNodeTimeout(20*time.Millisecond), AnyClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var calls atomic.Int64
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := c.Obtain(ctx, fmt.Sprint(g, "-", i), time.Minute)
				cancel()
				if err == nil {
					t.Error("obtained a lock on a frozen master")
				}
				calls.Add(1)
			}
		}()
	}
	most := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		most = max(most, c.nodes[0].Queued())
	}
	close(stop)
	wg.Wait()
	if err := servers[0].Cont(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	// 32 callers for a second: every call failed, at its node timeout or
	// at once, and at most wire.StalledQueue requests waited in the queue (a
	// tick that sends kept Releases to the frozen master marks it not
	// answering after twice the node timeout, as a batch does); without
	// the bound, 32 callers queue about 90k requests in 3s.
	if most > wire.StalledQueue {
		t.Fatalf("%d requests queued for a frozen master (%d calls), want at most %d", most, calls.Load(), wire.StalledQueue)
	}
	if calls.Load() < 64 {
		t.Fatalf("only %d calls in a second: callers were held", calls.Load())
	}
}

// TestKeptReleasesStayBoundedWhileAMasterIsFrozen: a Release refused by a
// stalled lane is kept, for the transport, which sends it again once the
// master answers; the lane hands its kept Releases over only when it runs
// again, once the batch in flight has given up. Behind a client whose
// reads are bounded by a long ReadTimeout (ContextTimeoutEnabled off,
// go-redis's default; New accepts any positive ReadTimeout), one frozen
// master of three is sent a Release of every lock the two others grant,
// for the whole ReadTimeout: the lane must keep no more of them than the
// transport would (wire.MaxPending, 4096). Memory must stay flat while a
// master is frozen.
func TestKeptReleasesStayBoundedWhileAMasterIsFrozen(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	for i, s := range servers {
		rdb := s.Client(func(o *redis.Options) { o.ReadTimeout = 30 * time.Second })
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clients[i] = rdb
	}
	c, err := New(clients, WithNodeTimeout(50*time.Millisecond), AnyClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		servers[2].Cont()
		c.Close()
	}()
	if err := servers[2].Stop(); err != nil {
		t.Fatal(err)
	}
	// The locks go on until the frozen master was sent twice as many
	// Releases as the lane may keep; the lane's count is read after each.
	const enough = 2 * wire.MaxPending
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var cycles, most atomic.Int64
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l, err := c.Obtain(ctx, fmt.Sprint(g, "-", i), time.Minute)
				if err != nil {
					continue
				}
				_ = l.Release(ctx)
				n := int64(c.nodes[2].KeptInLane())
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if cycles.Add(1) == enough {
					close(stop)
				}
			}
		})
	}
	select {
	case <-stop:
	case <-time.After(time.Minute):
		close(stop)
		wg.Wait()
		t.Fatalf("only %d lock cycles in a minute on the two masters that answer", cycles.Load())
	}
	wg.Wait()
	if most := most.Load(); most > wire.MaxPending {
		t.Fatalf("a lane kept %d Releases for a frozen master (%d lock cycles on the two others); the transport keeps at most %d", most, cycles.Load(), wire.MaxPending)
	}
}
