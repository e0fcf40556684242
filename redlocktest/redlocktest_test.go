package redlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rebuild is the code under test, as a user would write it: rebuild a cache
// entry under a lock, skip when another replica is doing it, fail loudly
// when Redis is down, stop writing when the lock is lost.
func rebuild(ctx context.Context, locks *redlock.Client, entry string, work func(context.Context) error) (skipped bool, err error) {
	err = locks.Do(ctx, "rebuild:"+entry, time.Second, work, redlock.WithRenewEvery(50*time.Millisecond))
	if errors.Is(err, redlock.ErrTaken) {
		return true, nil
	}
	return false, err
}

func noWork(context.Context) error { return nil }

func TestSkipsWhenAnotherOwnerHoldsIt(t *testing.T) {
	m := redlocktest.New(t, 3)
	m.Prefix = "lock:"
	other := m.Take("rebuild:home", time.Minute)
	skipped, err := rebuild(t.Context(), m.Client(redlock.WithKeyPrefix("lock:")), "home", noWork)
	if err != nil || !skipped {
		t.Fatalf("skipped %v, err %v; want a quiet skip", skipped, err)
	}
	if got := m.Holder("rebuild:home"); got != other {
		t.Fatalf("holder %q, want the other owner's %q untouched", got, other)
	}
}

func TestFailsLoudlyWhenMastersAreDown(t *testing.T) {
	m := redlocktest.New(t, 3)
	m.Down(0, 2)
	skipped, err := rebuild(t.Context(), m.Client(), "home", noWork)
	if skipped || !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("skipped %v, err %v; want ErrUnavailable, not a skip", skipped, err)
	}
	m.Up(0, 2)
	if skipped, err := rebuild(t.Context(), m.Client(), "home", noWork); skipped || err != nil {
		t.Fatalf("after the masters came back: skipped %v, err %v", skipped, err)
	}
	if h := m.Holder("rebuild:home"); h != "" {
		t.Fatalf("lock still held by %q after rebuild returned", h)
	}
}

func TestWorkHearsItsLockIsLost(t *testing.T) {
	m := redlocktest.New(t, 3)
	var cause error
	_, err := rebuild(t.Context(), m.Client(), "home", func(ctx context.Context) error {
		m.Steal("rebuild:home", time.Minute)
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return cause
		case <-time.After(5 * time.Second):
			return errors.New("never told")
		}
	})
	if !errors.Is(cause, redlock.ErrLockLost) || !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("cause %v, err %v; want ErrLockLost", cause, err)
	}
}

func TestTimePassesOnTheMasters(t *testing.T) {
	m := redlocktest.New(t, 1) // a single instance
	ctx := t.Context()
	a, b := m.Client(), m.Client()
	l, err := a.Obtain(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Obtain(ctx, "job", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("second owner: %v, want ErrTaken", err)
	}
	m.FastForward(2 * time.Minute) // the key's TTL ran out
	if h := m.Holder("job"); h != "" {
		t.Fatalf("key still held by %q after its TTL", h)
	}
	lb, err := b.Obtain(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("after the TTL ran out: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release by the first owner: %v, want ErrLockLost", err)
	}
	if m.Holder("job") != lb.Token() {
		t.Fatal("the first owner's Release touched the second owner's key")
	}
}

// TestHolderWhileOthersWait: another process waits for the lock
// (WithWait), which queues its Client in the key's value after the wait
// mark; Holder still names the owner's token.
func TestHolderWhileOthersWait(t *testing.T) {
	m := redlocktest.New(t, 3)
	ctx := t.Context()
	l, err := m.Client().Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// On every master before the waiter asks: Obtain returns at a quorum,
	// and a waiter that overtook the third master's SET there would hold
	// it, undo it, and never queue on it.
	deadline := time.Now().Add(5 * time.Second)
	for _, rdb := range m.Redis() {
		for v, _ := rdb.Get(ctx, "k").Result(); v != l.Token(); v, _ = rdb.Get(ctx, "k").Result() {
			if time.Now().After(deadline) {
				t.Fatalf("k holds %q on a master, want the owner's token", v)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Client().Obtain(wctx, "k", time.Minute, redlock.WithWait())
	}()
	defer func() { cancel(); <-done }()
	deadline = time.Now().Add(5 * time.Second)
	for _, rdb := range m.Redis() {
		for {
			v, _ := rdb.Get(ctx, "k").Result()
			if len(v) > len(l.Token())+1 {
				break // marked, and queued
			}
			if time.Now().After(deadline) {
				t.Fatalf("k holds %q: the waiter did not queue", v)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if got := m.Holder("k"); got != l.Token() {
		t.Fatalf("Holder %q while another Client waits, want the owner's token %q", got, l.Token())
	}
}
