package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

func TestDoHoldsPastItsTTL(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	other := newClient(t, clients)
	const ttl = 300 * time.Millisecond
	var refused atomic.Int32
	err := c.Do(ctx, "job", ttl, func(ctx context.Context) error {
		end := time.Now().Add(3 * ttl)
		for time.Now().Before(end) {
			if _, err := other.Obtain(ctx, "job", ttl); !errors.Is(err, redlock.ErrNotObtained) {
				return fmt.Errorf("another client's Obtain during Do: %v", err)
			}
			refused.Add(1)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(20 * time.Millisecond):
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if refused.Load() < 5 {
		t.Fatalf("only %d refused attempts", refused.Load())
	}
	l, err := other.Obtain(ctx, "job", ttl) // Do released it
	if err != nil {
		t.Fatalf("Obtain after Do: %v", err)
	}
	l.Release(ctx)
}

func TestDoNotObtained(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	l, err := c.Obtain(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	called := false
	err = c.Do(ctx, "job", time.Second, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, redlock.ErrNotObtained) || called {
		t.Fatalf("Do on a held key: err %v, fn called %v", err, called)
	}
}

func TestDoLostByTakeover(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	const ttl, every = 600 * time.Millisecond, 100 * time.Millisecond
	var tookOver, cancelled time.Time
	var cause error
	err := c.Do(ctx, "job", ttl, func(wctx context.Context) error {
		for _, rdb := range clients {
			rdb.Set(ctx, "job", "intruder", time.Minute)
		}
		tookOver = time.Now()
		select {
		case <-wctx.Done():
			cancelled = time.Now()
			cause = context.Cause(wctx)
			return errors.New("work abandoned")
		case <-time.After(5 * time.Second):
			return errors.New("work context never cancelled")
		}
	}, redlock.WithRenewEvery(every))
	if !errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if d := cancelled.Sub(tookOver); d > every+200*time.Millisecond {
		t.Fatalf("work cancelled %v after the takeover, want within about one renewal interval (%v)", d, every)
	}
	if !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "work abandoned") {
		t.Fatalf("Do returned %v, want fn's error matching ErrLockLost", err)
	}
	if vs := holdersOf(t, clients, "job"); count(vs, "intruder") != 3 {
		t.Fatalf("intruder's keys became %q", vs)
	}
}

func TestWatchdogCancelsAtValidityEndWhileRenewalHangs(t *testing.T) {
	ctx := context.Background()
	// Long node timeouts: a renewal to a frozen master would hang for 10s.
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(10*time.Second))
	const ttl = 800 * time.Millisecond
	l, err := c.Obtain(ctx, "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, s := range servers[:2] {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		defer s.Cont()
	}
	// The validity can only shrink from here: renewals get no quorum.
	validUntil := time.Now().Add(l.Validity())
	select {
	case <-wctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("work context not cancelled while a majority was frozen")
	}
	late := time.Since(validUntil)
	if !errors.Is(context.Cause(wctx), redlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(wctx))
	}
	if late > 150*time.Millisecond {
		t.Fatalf("cancelled %v after the validity ended", late)
	}
	if l.Validity() > 0 && late < 0 {
		t.Fatalf("cancelled %v before the validity ended", -late)
	}
}

func TestDoPanicReleases(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	defer func() {
		p := recover()
		if p != "boom" {
			t.Fatalf("recovered %v, want the fn's panic value", p)
		}
		redistest.Eventually(t, func() error {
			if vs := holdersOf(t, clients, "job"); count(vs, "") != 3 {
				return fmt.Errorf("lock left after a panic: %q", vs)
			}
			return nil
		})
	}()
	c.Do(ctx, "job", time.Second, func(context.Context) error { panic("boom") })
	t.Fatal("Do returned after fn panicked")
}

func TestDoReturnsFnError(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	want := errors.New("rebuild failed")
	err := c.Do(ctx, "job", time.Second, func(context.Context) error { return want })
	if err != want {
		t.Fatalf("Do returned %v, want fn's error itself", err)
	}
	redistest.Eventually(t, func() error {
		if vs := holdersOf(t, clients, "job"); count(vs, "") != 3 {
			return fmt.Errorf("lock left after Do: %q", vs)
		}
		return nil
	})
}

func TestCloseDuringDo(t *testing.T) {
	ctx := context.Background()
	servers := startServers(t, 3)
	clients := clientsOf(t, servers)
	c, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var cause error
	var doErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		doErr = c.Do(ctx, "job", time.Second, func(wctx context.Context) error {
			close(started)
			<-wctx.Done()
			cause = context.Cause(wctx)
			return wctx.Err()
		})
	})
	<-started
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returned: fn has returned and the lock is released.
	if !errors.Is(cause, redlock.ErrClosed) {
		t.Fatalf("work context's cause %v, want ErrClosed", cause)
	}
	if vs := holdersOf(t, clients, "job"); count(vs, "") < 2 {
		t.Fatalf("lock still held on a quorum after Close: %q", vs)
	}
	wg.Wait()
	if !errors.Is(doErr, redlock.ErrClosed) {
		t.Fatalf("Do returned %v, want ErrClosed", doErr)
	}
	if err := c.Do(ctx, "job", time.Second, func(context.Context) error { return nil }); !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
}

func TestMaxHold(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 1)
	start := time.Now()
	err := c.Do(ctx, "job", 300*time.Millisecond, func(wctx context.Context) error {
		<-wctx.Done()
		return nil
	}, redlock.WithMaxHold(500*time.Millisecond))
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do past its max hold: %v, want ErrLockLost", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond || took > 2*time.Second {
		t.Fatalf("Do ended after %v with a 500ms cap", took)
	}
}

// pipelineCounter counts the round trips a go-redis client makes.
type pipelineCounter struct{ trips atomic.Int64 }

func (p *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { p.trips.Add(1); return next(ctx, cmd) }
}
func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { p.trips.Add(1); return next(ctx, cmds) }
}

func TestManyRenewalsSharePipelines(t *testing.T) {
	ctx := context.Background()
	servers := startServers(t, 3)
	clients := clientsOf(t, servers)
	counters := make([]*pipelineCounter, len(clients))
	for i, rdb := range clients {
		counters[i] = &pipelineCounter{}
		rdb.AddHook(counters[i])
	}
	c := newClient(t, clients, redlock.WithNodeTimeout(time.Second))
	const locks = 300
	var stops []func()
	for i := range locks {
		l, err := c.Obtain(ctx, fmt.Sprint("job-", i), 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, stop, err := l.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
		defer l.Release(ctx)
	}
	before := counters[0].trips.Load()
	calls := evalshaCalls(t, clients[0])
	time.Sleep(2500 * time.Millisecond) // more than one renewal interval (1s) for every lock
	for _, stop := range stops {
		stop()
	}
	renewals := evalshaCalls(t, clients[0]) - calls
	trips := int(counters[0].trips.Load() - before)
	if renewals < locks {
		t.Fatalf("%d renewals reached master 0, want at least one per lock (%d)", renewals, locks)
	}
	if trips*10 > renewals {
		t.Fatalf("%d renewals took %d round trips to master 0: they did not share pipelines", renewals, trips)
	}
	t.Logf("%d renewals in %d round trips to one master", renewals, trips)
}

func evalshaCalls(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	return cmdCalls(t, rdb, "evalsha") + cmdCalls(t, rdb, "eval")
}
