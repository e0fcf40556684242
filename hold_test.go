package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// WithHoldAtLeast: a lock released early keeps its keys for the rest of its
// minimum hold.

// TestHoldAtLeast: a lock released before its minimum hold keeps its key
// for the rest of it, so a replica whose timer fires late does not run the
// job again; after the hold, it is free. A lock released after its hold is
// deleted at once.
func TestHoldAtLeast(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	other := newClient(t, clients)
	const hold = 600 * time.Millisecond
	start := time.Now()
	err := c.Do(ctx, "job:slot-1", 10*time.Second, func(context.Context) error { return nil }, redlock.WithHoldAtLeast(hold))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Obtain(ctx, "job:slot-1", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("a late replica right after the run: %v, want ErrTaken (the hold)", err)
	}
	held := 0 // a quorum: a master may be slow, its requests dropped past their deadline
	var ttls []time.Duration
	for _, rdb := range clients {
		pttl := rdb.PTTL(ctx, "job:slot-1").Val()
		if pttl > hold {
			t.Fatalf("the key's TTL %v after the release, want at most the rest of the %v hold", pttl, hold)
		}
		if pttl > 0 {
			held++
		}
		ttls = append(ttls, pttl)
	}
	if held < 2 {
		t.Fatalf("the key's TTLs %v after the release: want the rest of the %v hold on a quorum", ttls, hold)
	}
	var l *redlock.Lock
	redistest.Within(t, time.Until(start.Add(3*hold)), func() error {
		var err error
		if l, err = other.Obtain(ctx, "job:slot-1", time.Minute); err != nil {
			return fmt.Errorf("the key outlived the hold: %v", err)
		}
		return nil
	})
	if since := time.Since(start); since < hold {
		t.Fatalf("free again %v after the run started, before the %v hold", since, hold)
	}
	if err := l.Release(ctx); err != nil || !l.KeptUntil().IsZero() {
		t.Fatalf("a lock without a hold: Release %v, kept until %v", err, l.KeptUntil())
	}

	// Obtain + Release with a hold, and KeptUntil.
	l, err = c.Obtain(ctx, "job:slot-2", time.Minute, redlock.WithHoldAtLeast(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if until := time.Until(l.KeptUntil()); until <= 0 || until > time.Second {
		t.Fatalf("KeptUntil in %v, want within the 1s hold", until)
	}
	// A hold already over: Release deletes.
	l, err = c.Obtain(ctx, "job:slot-3", time.Minute, redlock.WithHoldAtLeast(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	work(5 * time.Millisecond) // past the hold (1ms)
	if err := l.Release(ctx); err != nil || !l.KeptUntil().IsZero() {
		t.Fatalf("Release after the hold: %v, kept until %v", err, l.KeptUntil())
	}
	// Release returns at quorum: the last master's delete may still be on
	// its way.
	redistest.Eventually(t, func() error {
		if vs := holdersOf(t, clients, "job:slot-3"); count(vs, "") != 3 {
			return fmt.Errorf("masters hold %q after a release past the hold", vs)
		}
		return nil
	})
	if _, _, err := l.KeepAlive(ctx, redlock.WithHoldAtLeast(time.Second)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("KeepAlive WithHoldAtLeast: %v, want ErrInvalidArgument", err)
	}
}

// TestKeptUntilSaysTheHoldOfALapsedLock: a lock obtained WithHoldAtLeast
// whose validity ended before its Release (its keys stayed: an Extend to a
// shorter TTL shrinks the validity, never a key) and before the end of its
// minimum hold. Release reports it lost, as it must, and keeps its keys on
// the masters for the rest of the hold (keepScript), as for a lock still
// valid. KeptUntil must then say until when, not the zero Time, whose
// documented meaning is that the key was deleted: a caller that reads
// KeptUntil after ErrLockLost would believe the job's slot free while the
// masters still refuse every other replica.
func TestKeptUntilSaysTheHoldOfALapsedLock(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	lock := obtain(t, c, "job", time.Minute, redlock.WithHoldAtLeast(time.Minute))
	_ = lock.Extend(ctx, 100*time.Millisecond) // the validity ends soon, the keys stay
	lapsed(t, lock)
	if err := lock.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release after the validity ended: %v, want ErrLockLost", err)
	}
	held := 0
	for _, rdb := range clients {
		if get(t, rdb, "job") == lock.Token() && rdb.PTTL(ctx, "job").Val() > 30*time.Second {
			held++
		}
	}
	if held < 2 {
		t.Fatalf("setup: %d masters keep the key for the rest of the hold, want a quorum", held)
	}
	if k := lock.KeptUntil(); k.IsZero() {
		t.Fatalf("KeptUntil after the Release of a lapsed lock: the zero Time (\"the key was deleted\"), while %d masters keep its key for about a minute", held)
	}
}
