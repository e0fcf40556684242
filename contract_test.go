package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The contract as users meet it: outcomes they branch on, options a call
// does not take, a lock handed to the work or to another process.

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

func TestWaitEndedByDeadlineWrapsIt(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	if _, err := newClient(t, clients).Obtain(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("the request's budget ran out")
	for _, tc := range []struct {
		name  string
		retry time.Duration
	}{
		// The next attempt cannot start before the deadline.
		{"wait longer than the deadline", time.Second},
		// The deadline passes while waiting or attempting.
		{"short waits", 5 * time.Millisecond},
	} {
		dctx, cancel := context.WithDeadlineCause(ctx, time.Now().Add(100*time.Millisecond), cause)
		_, err := c.Obtain(dctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(tc.retry)))
		cancel()
		if !errors.Is(err, redlock.ErrTaken) || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, cause) {
			t.Errorf("%s: %v, want ErrTaken and the deadline or its cause", tc.name, err)
		}
	}
}

func TestOptionsACallDoesNotTakeAreRefused(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	if _, err := c.Obtain(ctx, "k", time.Second, redlock.WithRenewEvery(100*time.Millisecond)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Obtain WithRenewEvery: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Obtain(ctx, "k", time.Second, redlock.WithMaxHold(time.Minute)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Obtain WithMaxHold: %v, want ErrInvalidArgument", err)
	}
	l, err := c.Obtain(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, _, err := l.KeepAlive(ctx, redlock.WithRetry(redlock.NoRetry())); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("KeepAlive WithRetry: %v, want ErrInvalidArgument", err)
	}
	if err := l.Do(ctx, func(context.Context) error { return nil }, redlock.WithRetry(redlock.NoRetry())); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Lock.Do WithRetry: %v, want ErrInvalidArgument", err)
	}
}

// retryWhileTaken is a user's own strategy: wait while another owner holds
// the lock, give up at once when the masters are unavailable.
type retryWhileTaken struct{ calls *atomic.Int32 }

func (s retryWhileTaken) NextWait(n int, last error) (time.Duration, bool) {
	s.calls.Add(1)
	return 5 * time.Millisecond, errors.Is(last, redlock.ErrTaken)
}

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

// TestLockDoGivesTheWorkItsLock: fencing and renewal without assembling
// Obtain, KeepAlive, stop and Release by hand.
func TestLockDoGivesTheWorkItsLock(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3, redlock.WithFencing())
	l, err := c.Obtain(ctx, "account", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Do(ctx, func(ctx context.Context) error {
		time.Sleep(500 * time.Millisecond) // past the TTL: renewed
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

func TestReleaseBeforeStopIsNoLoss(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	l, err := c.Obtain(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the watchdog went on after Release")
	}
	if cause := context.Cause(wctx); errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("Release before stop reported as a loss: %v", cause)
	}
}

func TestAttachConfirmsOnTheMasters(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3, redlock.WithFencing())
	l, err := c.Obtain(ctx, "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Obtain returns at a quorum: the third master's SET may still be on
	// its way, and an Attach that overtook it would find no key there.
	redistest.Eventually(t, func() error {
		if n := count(holdersOf(t, clients, "job"), l.Token()); n != 3 {
			return fmt.Errorf("%d masters hold the key, want 3", n)
		}
		return nil
	})
	other := newClient(t, clients, redlock.WithFencing()) // another process
	a, err := other.Attach(ctx, "job", l.Token(), time.Minute, l.Fence())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if a.Token() != l.Token() || a.Fence() != l.Fence() || a.Validity() < 50*time.Second {
		t.Fatalf("attached token %q fence %d validity %v", a.Token(), a.Fence(), a.Validity())
	}
	var st *redlock.KeyState
	redistest.Eventually(t, func() error { // Attach returns at quorum; the third master follows
		st, err = other.Inspect(ctx, "job")
		if err != nil {
			return err
		}
		for i, m := range st.Masters {
			if m.Token != l.Token() || m.TTL < 50*time.Second || m.Fence != l.Fence() {
				return fmt.Errorf("master %d: %+v after Attach(1m), want our token, the new TTL and the fence", i, m)
			}
		}
		return nil
	})
	if tok, n := st.Holder(); tok != l.Token() || n != 3 {
		t.Fatalf("Holder %q on %d", tok, n)
	}
	// A vanished key is not re-taken by Attach: that could revive a lock.
	clients[0].Del(ctx, "job")
	clients[1].Del(ctx, "job")
	if _, err := other.Attach(ctx, "job", l.Token(), time.Minute, l.Fence()); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Attach with the token gone from a majority: %v, want ErrLockLost", err)
	}
	if vs := holdersOf(t, clients, "job"); vs[0] != "" || vs[1] != "" {
		t.Fatalf("Attach re-took vanished keys: %q", vs)
	}
	if _, err := other.Attach(ctx, "job", "someone-else", time.Minute, 0); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Attach with a wrong token: %v, want ErrLockLost", err)
	}
}

func TestInspectShowsEveryMaster(t *testing.T) {
	ctx := context.Background()
	servers, clients, c := cluster(t, 3, redlock.WithKeyPrefix("lock:"), redlock.WithNodeTimeout(100*time.Millisecond))
	st, err := c.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if tok, n := st.Holder(); tok != "" || n != 0 {
		t.Fatalf("free key: holder %q on %d", tok, n)
	}
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		st, err = c.Inspect(ctx, "k")
		if tok, n := st.Holder(); err != nil || tok != l.Token() || n != 3 {
			return errors.New("not on every master yet")
		}
		return nil
	})
	clients[2].Set(ctx, "lock:k", "stranger", 0)
	takeDown(t, "frozen", servers[1])
	st, err = c.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	m := st.Masters
	if m[0].Token != l.Token() || m[0].TTL <= 0 || m[0].TTL > time.Minute || m[1].Err == nil || m[2].Token != "stranger" || m[2].TTL != -1 {
		t.Fatalf("masters %+v", m)
	}
	if tok, n := st.Holder(); tok != "" || n != 1 {
		t.Fatalf("no token on a quorum: holder %q on %d", tok, n)
	}
}

// TestErrorsSayRedlockOnce: an error that wraps another of the package's
// does not repeat "redlock: " in the middle of its message.
func TestErrorsSayRedlockOnce(t *testing.T) {
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
	go func() {
		_, err := closing.Obtain(ctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(5*time.Millisecond)))
		done <- err
	}()
	time.Sleep(30 * time.Millisecond)
	closing.Close()
	errs = append(errs, <-done)
	for _, err := range errs {
		if err == nil || strings.Contains(err.Error(), ": redlock: ") || strings.Contains(err.Error(), "(redlock: ") {
			t.Errorf("%v", err)
		}
	}
}
