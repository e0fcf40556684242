package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

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
	lock, err := c.Obtain(ctx, "job", time.Minute, redlock.WithHoldAtLeast(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_ = lock.Extend(ctx, 100*time.Millisecond) // the validity ends soon, the keys stay
	for lock.Validity() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
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
