package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// floorTTL is the shortest TTL every call takes at the default drift
// factor: the least whole millisecond whose validity after the drift
// allowance (ttl/100 + 2ms) exceeds redlock.MinNodeTimeout.
const floorTTL = 23 * time.Millisecond

// TestTTLBelowTheFloorIsRefused: a TTL whose validity after the drift
// allowance cannot outlast the first request to a master (which dials it)
// is refused before any request, naming the least TTL that works; a
// node timeout below the floor is refused by New.
func TestTTLBelowTheFloorIsRefused(t *testing.T) {
	t.Parallel()
	masters, err := redlock.NewMasters("127.0.0.1:1") // never dialed: the checks come first
	if err != nil {
		t.Fatal(err)
	}
	defer masters[0].Close()
	c, err := redlock.NewSingle(masters[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, ttl := range []time.Duration{3 * time.Millisecond, 5 * time.Millisecond, floorTTL - time.Millisecond} {
		_, err := c.Obtain(ctx, "k", ttl)
		if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "use a TTL of at least "+floorTTL.String()) {
			t.Fatalf("Obtain with a %v TTL: %v, want ErrInvalidArgument naming the least TTL, %v", ttl, err, floorTTL)
		}
		t.Logf("%v: %v", ttl, err)
	}
	if _, err := c.Obtain(ctx, "k", floorTTL); errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Obtain with the floor's TTL, %v: %v", floorTTL, err)
	}
	_, err = redlock.NewSingle(masters[0], redlock.WithNodeTimeout(redlock.MinNodeTimeout-time.Millisecond))
	if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "below the floor") {
		t.Fatalf("NewSingle with a node timeout below the floor: %v, want ErrInvalidArgument", err)
	}
	t.Log(err)
}

// TestTTLAtTheFloorObtainsOnAFreshClient: a lock of the floor's TTL is
// obtained by a Client's first call on a fresh go-redis client, whose
// first request dials the master within its node timeout, 20 times out of
// 20. A run that failed once the node timeout had passed says nothing of
// the floor: on an idle machine the dial and the SET take well under a
// millisecond of the 20ms, and a busy one stalls the test process for
// longer (a CI run: an i/o timeout after 22.6ms). It is run again, at most
// 10 times in all; an Obtain that fails within the node timeout, or 10
// that time out, fail the test (a floor too low for a dial would).
func TestTTLAtTheFloorObtainsOnAFreshClient(t *testing.T) {
	srv := redistest.Start(t, 1)[0]
	ctx := context.Background()
	stalled := 0
	for ok := 0; ok < 20; {
		masters, err := redlock.NewMasters(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c, err := redlock.NewSingle(masters[0])
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := c.Obtain(ctx, "k", floorTTL)
		took := time.Since(start)
		if err == nil {
			// The key may expire before the Release reaches it on a loaded
			// machine (the TTL is 23ms): a lost lock is the Release's due.
			if rerr := l.Release(ctx); rerr != nil && !errors.Is(rerr, redlock.ErrLockLost) {
				err = rerr
			}
		}
		c.Close()
		masters[0].Close()
		switch {
		case err == nil:
			ok++
		case took >= redlock.MinNodeTimeout && stalled < 10:
			stalled++
			t.Logf("run %d: the Obtain failed %v after it began, past the node timeout: the process stalled; again: %v", ok, took, err)
		default:
			t.Fatalf("run %d: a %v lock on a fresh client: %v (the Obtain took %v)", ok, floorTTL, err, took)
		}
	}
}
