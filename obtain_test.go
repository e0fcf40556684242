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

// Obtain on real redis-servers: one holder at a time, the outcome a caller
// branches on (ErrTaken or ErrUnavailable), strangers' keys, and retries.

// TestExclusivity: workers contending for one key over 1, 3 and 5
// masters never hold it two at a time, and every one of them gets it.
func TestExclusivity(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			_, _, c := cluster(t, n)
			const workers, rounds = 12, 15
			var holders, maxHolders, held atomic.Int32
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for r := range rounds {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						l, err := c.Obtain(ctx, "hot", time.Second, redlock.WithRetry(redlock.LinearBackoff(2*time.Millisecond)))
						if err != nil {
							cancel()
							t.Errorf("worker %d round %d: %v", w, r, err)
							return
						}
						h := holders.Add(1)
						if h > maxHolders.Load() {
							maxHolders.Store(h)
						}
						held.Add(1)
						work(100 * time.Microsecond) // a window for another holder to overlap
						holders.Add(-1)
						if err := l.Release(ctx); err != nil {
							t.Errorf("release: %v", err)
						}
						cancel()
					}
				})
			}
			wg.Wait()
			if got := maxHolders.Load(); got != 1 {
				t.Fatalf("at most %d holders at once, want 1", got)
			}
			if got := held.Load(); got != workers*rounds {
				t.Fatalf("%d holds, want %d", got, workers*rounds)
			}
		})
	}
}

// TestStranger: a stranger's key (not a lock of ours) on a minority of
// masters leaves the quorum to the others; on a majority, Obtain says
// ErrTaken and leaves nothing of its own behind; the stranger's keys stay.
func TestStranger(t *testing.T) {
	t.Parallel()
	for _, held := range []int{2, 3} {
		t.Run(fmt.Sprintf("held on %d of 5", held), func(t *testing.T) {
			ctx := context.Background()
			_, clients, c := cluster(t, 5)
			for _, rdb := range clients[:held] {
				rdb.Set(ctx, "k", "stranger", time.Minute)
			}
			l, err := c.Obtain(ctx, "k", time.Minute)
			if held < 3 {
				if err != nil {
					t.Fatal(err)
				}
				redistest.Eventually(t, func() error {
					if got := count(holdersOf(t, clients, "k"), l.Token()); got != 5-held {
						return fmt.Errorf("our token on %d masters, want %d", got, 5-held)
					}
					return nil
				})
			} else {
				if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrTaken) {
					t.Fatalf("Obtain: %v, want ErrNotObtained with ErrTaken", err)
				}
				redistest.Eventually(t, func() error { // nothing of ours left behind
					if vs := holdersOf(t, clients, "k"); count(vs, "") != 5-held {
						return fmt.Errorf("masters hold %q after a failed Obtain", vs)
					}
					return nil
				})
			}
			if got := count(holdersOf(t, clients, "k"), "stranger"); got != held {
				t.Fatalf("stranger's key left on %d masters, want %d", got, held)
			}
		})
	}
}

// TestOutcomeTakenOrUnavailable: a failed Obtain matches ErrNotObtained
// and exactly one of ErrTaken (another owner holds the lock: skip) and
// ErrUnavailable (the masters did not answer: an outage), the branch a
// caller takes.
func TestOutcomeTakenOrUnavailable(t *testing.T) {
	ctx := context.Background()
	servers, clients, c := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	holder := newClient(t, clients)
	if _, err := holder.Obtain(ctx, "held", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := c.Obtain(ctx, "held", time.Minute)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrTaken) || errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Obtain of a held lock: %v, want ErrNotObtained and ErrTaken only", err)
	}
	takeDown(t, "killed", servers[:2]...)
	_, err = c.Obtain(ctx, "free", time.Minute)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrUnavailable) || errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain with a majority down: %v, want ErrNotObtained and ErrUnavailable only", err)
	}
}

// TestRetry: a retry strategy bounds the attempts; a deadline or a
// cancellation ends the retries promptly; retries obtain once the holder's
// TTL ends; a strategy shared by calls gives each its whole budget.
func TestRetry(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	holder := obtain(t, c, "k", 300*time.Millisecond)

	redistest.Eventually(t, func() error { // the holder's own SETs have all landed
		if got := count(holdersOf(t, clients, "k"), holder.Token()); got != 3 {
			return fmt.Errorf("holder on %d masters", got)
		}
		return nil
	})

	t.Run("LimitRetry counts attempts", func(t *testing.T) {
		before := calls(t, clients[0], "set")
		_, err := c.Obtain(ctx, "k", time.Second, redlock.WithRetry(redlock.LimitRetry(redlock.LinearBackoff(time.Millisecond), 4)))
		if !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatalf("Obtain: %v", err)
		}
		settled(t, clients[0], before+4)
	})

	t.Run("deadline stops retries", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Obtain(dctx, "k", time.Second, redlock.WithRetry(redlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
		if !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatalf("Obtain: %v", err)
		}
		if took := time.Since(start); took > 50*time.Millisecond+100*time.Millisecond {
			t.Fatalf("Obtain returned %v after a 50ms deadline", took)
		}
	})

	t.Run("cancel stops retries", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(30*time.Millisecond, cancel)
		_, err := c.Obtain(cctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(5*time.Millisecond)))
		if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Obtain: %v, want ErrNotObtained and context.Canceled", err)
		}
	})

	t.Run("retries until the holder's TTL ends", func(t *testing.T) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := c.Obtain(rctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() == holder.Token() {
			t.Fatal("same token for two Obtains")
		}
		l.Release(ctx)
	})

	t.Run("shared strategy keeps no state", func(t *testing.T) {
		s := redlock.LimitRetry(redlock.LinearBackoff(time.Millisecond), 2)
		h := obtain(t, c, "shared", time.Minute)
		defer h.Release(ctx)
		redistest.Eventually(t, func() error { // h's own SETs have all landed
			if got := count(holdersOf(t, clients, "shared"), h.Token()); got != 3 {
				return fmt.Errorf("holder on %d masters", got)
			}
			return nil
		})
		for range 3 { // each call gets the whole budget
			before := calls(t, clients[0], "set")
			c.Obtain(ctx, "shared", time.Second, redlock.WithRetry(s))
			settled(t, clients[0], before+2)
		}
	})
}

// TestUsersOwnRetryStrategy: a RetryStrategy of the user's own is asked
// after every failed attempt, with its error: here it waits while the lock
// is taken and gives up at once when the masters are unavailable.
func TestUsersOwnRetryStrategy(t *testing.T) {
	ctx := context.Background()
	servers, clients, c := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	holder, err := newClient(t, clients).Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { holder.Release(ctx) })
	s := retryWhileTaken{new(atomic.Int32)}
	l, err := c.Obtain(ctx, "k", time.Minute, redlock.WithRetry(s))
	if err != nil {
		t.Fatalf("Obtain retrying while taken: %v", err)
	}
	l.Release(ctx)
	if s.calls.Load() < 2 {
		t.Fatalf("strategy asked %d times, want several", s.calls.Load())
	}
	takeDown(t, "killed", servers[:2]...)
	s.calls.Store(0)
	if _, err := c.Obtain(ctx, "k", time.Minute, redlock.WithRetry(s)); !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Obtain with a majority down: %v, want ErrUnavailable", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("strategy asked %d times while the masters were unavailable, want once", n)
	}
}

// TestOptionsACallDoesNotTakeAreRefused: an option that means nothing to a
// call (a renewal interval for Obtain, a retry for KeepAlive) is an
// ErrInvalidArgument, not silently ignored.
func TestOptionsACallDoesNotTakeAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	if _, err := c.Obtain(ctx, "k", time.Second, redlock.WithRenewEvery(100*time.Millisecond)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Obtain WithRenewEvery: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Obtain(ctx, "k", time.Second, redlock.WithMaxHold(time.Minute)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Obtain WithMaxHold: %v, want ErrInvalidArgument", err)
	}
	l := obtain(t, c, "k", time.Second)
	defer l.Release(ctx)
	if _, _, err := l.KeepAlive(ctx, redlock.WithRetry(redlock.NoRetry())); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("KeepAlive WithRetry: %v, want ErrInvalidArgument", err)
	}
	if err := l.Do(ctx, func(context.Context) error { return nil }, redlock.WithRetry(redlock.NoRetry())); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Lock.Do WithRetry: %v, want ErrInvalidArgument", err)
	}
}

// TestErrorsSayRedlockOnce: an error that wraps another of the package's
// does not repeat "redlock: " in the middle of its message.
func TestErrorsSayRedlockOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	if _, err := newClient(t, clients).Obtain(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	var errs []error
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := c.Obtain(dctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(5*time.Millisecond)))
	cancel()
	errs = append(errs, err)
	errs = append(errs, c.Do(ctx, "k2", time.Second, func(ctx context.Context) error {
		clients[0].Set(ctx, "k2", "thief", time.Minute)
		clients[1].Set(ctx, "k2", "thief", time.Minute)
		<-ctx.Done()
		return context.Cause(ctx)
	}, redlock.WithRenewEvery(50*time.Millisecond)))
	closing := newClient(t, clients)
	done := make(chan error, 1)
	sets := calls(t, clients[0], "set")
	go func() {
		_, err := closing.Obtain(ctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(5*time.Millisecond)))
		done <- err
	}()
	redistest.Eventually(t, func() error { // the Obtain is retrying
		if calls(t, clients[0], "set") == sets {
			return errors.New("the Obtain has made no attempt")
		}
		return nil
	})
	closing.Close()
	errs = append(errs, <-done)
	for _, err := range errs {
		if err == nil || strings.Contains(err.Error(), ": redlock: ") || strings.Contains(err.Error(), "(redlock: ") {
			t.Errorf("%v", err)
		}
	}
}
