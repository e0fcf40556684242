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

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Do and Lock.Do: the lock held while fn runs, renewed past its TTL,
// released after.

// TestDoHoldsPastItsTTL: Do's watchdog renews the lock while fn runs past
// its TTL (another Client is refused all along), and Do releases it after.
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

// TestDoNotObtained: Do on a held key fails with ErrNotObtained and never
// runs fn.
func TestDoNotObtained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	l := obtain(t, c, "job", time.Minute)
	defer l.Release(ctx)
	called := false
	err := c.Do(ctx, "job", time.Second, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, redlock.ErrNotObtained) || called {
		t.Fatalf("Do on a held key: err %v, fn called %v", err, called)
	}
}

// TestDoLostByTakeover: when another owner takes the key, fn's context is
// cancelled with ErrLockLost within about a renewal interval, Do returns
// fn's error matching ErrLockLost, and the other owner's keys stay.
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

// TestDoPanicReleases: fn's panic goes on up through Do, after the lock is
// released.
func TestDoPanicReleases(t *testing.T) {
	t.Parallel()
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

// TestDoReturnsFnError: Do returns fn's error itself, unwrapped, and
// releases the lock.
func TestDoReturnsFnError(t *testing.T) {
	t.Parallel()
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

// TestMaxHold: WithMaxHold ends fn's context once the lock has been held
// that long, renewals or not, and Do says ErrLockLost.
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

// TestLockDoGivesTheWorkItsLock: fencing and renewal without assembling
// Obtain, KeepAlive, stop and Release by hand.
func TestLockDoGivesTheWorkItsLock(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3, redlock.WithFencing())
	l := obtain(t, c, "account", 300*time.Millisecond)
	err := l.Do(ctx, func(ctx context.Context) error {
		work(500 * time.Millisecond) // past the TTL (300ms): renewed
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return redlock.FencedWrite(ctx, clients[0], "balance", l.Fence(), "42")
	}, redlock.WithRenewEvery(80*time.Millisecond))
	if err != nil {
		t.Fatalf("Lock.Do: %v", err)
	}
	if v, f, err := redlock.FencedRead(ctx, clients[0], "balance"); err != nil || v != "42" || f != l.Fence() {
		t.Fatalf("resource holds %q fence %d (%v), want 42 with fence %d", v, f, err, l.Fence())
	}
	redistest.Eventually(t, func() error { // the release returns at quorum
		if vs := holdersOf(t, clients, "account"); count(vs, "") != 3 {
			return fmt.Errorf("masters hold %q after Lock.Do returned, want the lock released", vs)
		}
		return nil
	})
	if err := l.Do(ctx, func(context.Context) error { t.Error("fn ran on a released lock"); return nil }); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Lock.Do on a released lock: %v, want ErrLockLost", err)
	}
}

// TestRenewIntervalMustLeaveTimeToRenew: an interval that leaves a renewal
// no time before the validity ends is refused; one that does keeps locks on
// healthy masters.
func TestRenewIntervalMustLeaveTimeToRenew(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	fn := func(context.Context) error { work(1500 * time.Millisecond); return nil } // past the TTL
	err := c.Do(ctx, "k", time.Second, fn, redlock.WithRenewEvery(999*time.Millisecond))
	if !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Do with a 999ms renewal of a 1s lock: %v, want ErrInvalidArgument", err)
	}
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Do(ctx, fmt.Sprint("k", i), time.Second, fn, redlock.WithRenewEvery(700*time.Millisecond)); err != nil {
				t.Errorf("Do %d with a 700ms renewal of a 1s lock on healthy masters: %v", i, err)
			}
		}()
	}
	wg.Wait()
}

// TestDefaultRenewalFitsTheValidity: the default renewal interval fits the
// validity as an explicit WithRenewEvery must: with a drift factor the
// docs allow ([0, 1)) above 2/3, the validity is shorter than ttl/3, and a
// first renewal at ttl/3 would come after the lock lapsed: Do on healthy
// masters keeps its lock.
func TestDefaultRenewalFitsTheValidity(t *testing.T) {
	_, _, c := cluster(t, 3, redlock.WithDriftFactor(0.7), redlock.WithNodeTimeout(50*time.Millisecond))
	err := c.Do(context.Background(), "k", time.Second, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(600 * time.Millisecond):
			return nil
		}
	})
	if err != nil {
		t.Fatalf("Do with the default renewal on healthy masters: %v (want nil, or ErrInvalidArgument before it starts)", err)
	}
}
