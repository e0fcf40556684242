package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TestRetriedReleaseReportsALossOnAMasterNeverHeardFrom: a Release tried
// again counts a key found gone on a master as its first try's doing only
// where the Client knew the master's process when the lock was obtained:
// here master 2 never answered A (frozen while A obtained on the other
// two), then restarted empty, as master 1 did, and B held and released
// the lock meanwhile. A's first Release gets no answer from the two
// (frozen a moment); its second must say ErrLockLost, not count master
// 2's empty key as deleted by the first.
func TestRetriedReleaseReportsALossOnAMasterNeverHeardFrom(t *testing.T) {
	ctx := context.Background()
	servers, _, a := cluster(t, 3, redlock.WithNodeTimeout(200*time.Millisecond))
	takeDown(t, "frozen", servers[2])
	l, err := a.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[1:] {
		if err := s.Restart(false); err != nil { // A's key is lost on master 1; master 2 never had it
			t.Fatal(err)
		}
	}
	b := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(500*time.Millisecond))
	lb, err := b.Obtain(ctx, "k", time.Minute) // B holds the lock while A does
	if err != nil {
		t.Fatalf("B's Obtain after the restarts: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[1], servers[2]) // a moment of slowness
	first := l.Release(ctx)
	if first == nil || errors.Is(first, redlock.ErrLockLost) {
		t.Fatalf("A's Release with two masters frozen: %v, want a failure that is not ErrLockLost", first)
	}
	for _, s := range servers[1:] {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release tried again: %v; want ErrLockLost: master 1 lost A's key to a restart, master 2 never answered A, and B held the lock while A did (the first Release: %v)", err, first)
	}
}
