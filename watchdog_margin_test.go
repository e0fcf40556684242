package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// The cancel margin (WithCancelMargin): while renewals fail, the work is
// told when the lock's validity is down to the margin, so that it has that
// long to stop before another owner can take the lock; healthy renewals
// never get there.

// toldAt runs fn's part of a margin test under l.Do: it takes a majority
// down how, waits for fn's context, and returns the validity left when fn
// saw it cancelled, the context's cause, and Do's error.
func toldAt(t *testing.T, l *redlock.Lock, down func(), opts ...redlock.ObtainOption) (left time.Duration, cause, err error) {
	t.Helper()
	err = l.Do(context.Background(), func(ctx context.Context) error {
		down()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			return errors.New("fn's context was never cancelled while a majority was down")
		}
		left, cause = l.Validity(), context.Cause(ctx)
		return ctx.Err()
	}, opts...)
	return left, cause, err
}

// TestWorkIsToldTheMarginBeforeTheValidityEnds: with a majority killed
// (renewals fail at once) or frozen (a renewal hangs, the node timeout
// being far longer than the TTL), fn's context is cancelled when the
// validity left is down to the margin: never above it (renewals keep
// being tried until then), and not much below it (a hanging renewal is
// given until the margin only). The cause and Do's error match
// ErrLockExpiring and ErrLockLost.
func TestWorkIsToldTheMarginBeforeTheValidityEnds(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	const margin = 300 * time.Millisecond
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(10*time.Second))
			l := obtain(t, c, "job", ttl)
			left, cause, err := toldAt(t, l, func() { takeDown(t, how, servers[:2]...) }, redlock.WithCancelMargin(margin))
			t.Logf("%s: margin %v, validity left when fn was told %v", how, margin, left)
			if !errors.Is(cause, redlock.ErrLockExpiring) || !errors.Is(cause, redlock.ErrLockLost) {
				t.Fatalf("cause %v, want ErrLockExpiring and ErrLockLost", cause)
			}
			if !errors.Is(err, redlock.ErrLockExpiring) || !errors.Is(err, context.Canceled) {
				t.Fatalf("Do: %v, want fn's context.Canceled and ErrLockExpiring", err)
			}
			// Bounds relative to the TTL: fn is told within a tenth of it
			// after the validity reached the margin (scheduling on a busy
			// machine), and never before.
			if left > margin {
				t.Fatalf("told with %v of the validity left, before it was down to the margin %v", left, margin)
			}
			if left < margin-ttl/10 {
				t.Fatalf("told with %v of the validity left, want about the margin %v (at least %v)", left, margin, margin-ttl/10)
			}
		})
	}
}

// TestWorkIsToldTheDefaultMarginBeforeTheValidityEnds: without the option,
// KeepAlive's context is cancelled when the validity left is down to
// ttl/10 (renewals every ttl/3 and a node timeout of ttl/10 leave room for
// it) while a majority is killed.
func TestWorkIsToldTheDefaultMarginBeforeTheValidityEnds(t *testing.T) {
	const ttl = 2 * time.Second
	const margin = ttl / 10
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(ttl/10))
	l := obtain(t, c, "job", ttl)
	wctx, stop, err := l.KeepAlive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "killed", servers[:2]...)
	select {
	case <-wctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("KeepAlive's context was never cancelled while a majority was killed")
	}
	left := l.Validity()
	t.Logf("default margin %v, validity left when the work was told %v", margin, left)
	if cause := context.Cause(wctx); !errors.Is(cause, redlock.ErrLockExpiring) || !errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockExpiring and ErrLockLost", cause)
	}
	if left > margin || left < margin-ttl/20 {
		t.Fatalf("told with %v of the validity left, want the default margin %v (at least %v)", left, margin, margin-ttl/20)
	}
}

// TestHealthyRenewalsNeverCancelTheWorkEarly: on healthy masters, Do's
// work runs for several TTLs with the default margin and with one just
// under the largest allowed: renewals keep the validity above the margin.
func TestHealthyRenewalsNeverCancelTheWorkEarly(t *testing.T) {
	const ttl = 1200 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts []redlock.ObtainOption
	}{
		{"default", nil},
		// The largest allowed with the cluster's 500ms node timeout (a
		// renewal may take a third of the validity, 395ms): 1186ms
		// validity - 400ms interval - 395ms = 391ms.
		{"large", []redlock.ObtainOption{redlock.WithCancelMargin(300 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, c := cluster(t, 3)
			err := c.Do(context.Background(), "job", ttl, func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return fmt.Errorf("fn cancelled on healthy masters: %w", context.Cause(ctx))
				case <-time.After(4 * ttl):
					return nil
				}
			}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCancelMarginOutsideItsRangeIsRefused: a margin below 0, of the TTL
// or more, or leaving a renewal no time before it, is refused by Do,
// Lock.Do and KeepAlive with ErrInvalidArgument, fn not called; Obtain,
// which does not use it, refuses any; 0 and one in range are taken.
func TestCancelMarginOutsideItsRangeIsRefused(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Second
	_, _, c := cluster(t, 1, redlock.WithNodeTimeout(100*time.Millisecond))
	l := obtain(t, c, "held", time.Minute)
	defer l.Release(ctx)
	called := func(context.Context) error { return errors.New("fn called") }
	// With a 1s TTL: validity 988ms, renewals every 333ms taking 100ms at
	// most: a margin of 555ms or more leaves a renewal no time.
	for _, d := range []time.Duration{-time.Nanosecond, -time.Second, ttl, ttl + time.Second, 555 * time.Millisecond} {
		if err := c.Do(ctx, "k", ttl, called, redlock.WithCancelMargin(d)); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("Do with a cancel margin of %v for a %v TTL: %v, want ErrInvalidArgument", d, ttl, err)
		}
		lk := obtain(t, c, "k", ttl)
		if err := lk.Do(ctx, called, redlock.WithCancelMargin(d)); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("Lock.Do with a cancel margin of %v for a %v TTL: %v, want ErrInvalidArgument", d, ttl, err)
		}
		if _, _, err := lk.KeepAlive(ctx, redlock.WithCancelMargin(d)); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("KeepAlive with a cancel margin of %v for a %v TTL: %v, want ErrInvalidArgument", d, ttl, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Obtain(ctx, "k", ttl, redlock.WithCancelMargin(100*time.Millisecond)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("Obtain with a cancel margin, which it does not use: %v, want ErrInvalidArgument", err)
	}
	for _, d := range []time.Duration{0, 100 * time.Millisecond, 550 * time.Millisecond} {
		if err := c.Do(ctx, "k", ttl, func(context.Context) error { return nil }, redlock.WithCancelMargin(d)); err != nil {
			t.Errorf("Do with a cancel margin of %v for a %v TTL: %v, want it taken", d, ttl, err)
		}
	}
}

// TestALostLockIsNotToldAsExpiring: a renewal refused (another owner on
// two of three masters) cancels the work at once, well before the
// validity is down to the margin, with ErrLockLost and not
// ErrLockExpiring.
func TestALostLockIsNotToldAsExpiring(t *testing.T) {
	const ttl = 3 * time.Second
	servers, _, c := cluster(t, 3)
	l := obtain(t, c, "job", ttl)
	wctx, stop, err := l.KeepAlive(context.Background(), redlock.WithRenewEvery(100*time.Millisecond), redlock.WithCancelMargin(ttl/10))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	take(t, servers, "job", 0, 1) // the next renewal finds another owner
	select {
	case <-wctx.Done():
	case <-time.After(ttl / 2):
		t.Fatal("the work was not told at once of a lock another owner took")
	}
	cause := context.Cause(wctx)
	if !errors.Is(cause, redlock.ErrLockLost) || errors.Is(cause, redlock.ErrLockExpiring) {
		t.Fatalf("cause %v, want ErrLockLost and not ErrLockExpiring", cause)
	}
}

// TestEveryWatchdogOfALockIsToldAtTheMargin: with two KeepAlives on one
// lock, a watchdog's own failed renewal is no change of the caller's to
// itself: while a majority is killed, both works are told at the cancel
// margin (ErrLockExpiring), not only once the validity has ended.
func TestEveryWatchdogOfALockIsToldAtTheMargin(t *testing.T) {
	const ttl = 2 * time.Second
	const margin = 400 * time.Millisecond
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(ttl/10))
	l := obtain(t, c, "job", ttl)
	var works []context.Context
	for range 2 {
		wctx, stop, err := l.KeepAlive(context.Background(), redlock.WithCancelMargin(margin))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		works = append(works, wctx)
	}
	takeDown(t, "killed", servers[:2]...)
	for i, wctx := range works {
		select {
		case <-wctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("work %d was never told while a majority was killed", i)
		}
		if cause := context.Cause(wctx); !errors.Is(cause, redlock.ErrLockExpiring) {
			t.Fatalf("work %d told with %v, want ErrLockExpiring (at the margin, not at the validity's end)", i, cause)
		}
	}
}
