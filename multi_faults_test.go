package redlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestAttachOfASetKeepsEveryKey: a handle attached to a lock on several
// keys (the other process of a hand-over) renews every key of the set:
// were it to renew the first key only, the others would expire while the
// handle's Extend kept succeeding, and another owner would take them.
func TestAttachOfASetKeepsEveryKey(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	other := newClient(t, clients)
	const ttl = 400 * time.Millisecond
	l, err := c.ObtainMulti(ctx, []string{"from", "to"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.AttachMulti(ctx, l.Keys(), l.Token(), ttl, l.Fence())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.Keys(), l.Keys()) {
		t.Fatalf("the attached handle holds %q, the lock %q", h.Keys(), l.Keys())
	}
	for range 4 { // the attached handle renews "the lock" past its TTL
		time.Sleep(ttl / 3)
		if err := h.Extend(ctx, ttl); err != nil {
			t.Fatalf("Extend of the attached handle: %v", err)
		}
	}
	if h.Validity() == 0 {
		t.Fatal("the attached handle lost the lock")
	}
	// The handle still holds the lock by its own account; the set's other
	// key must still be ours.
	if o, err := other.Obtain(ctx, "to", time.Minute); err == nil {
		o.Release(ctx)
		t.Fatalf("another owner obtained %q while the attached handle of the set {from, to} held the lock (validity %v, Keys %q)", "to", h.Validity(), h.Keys())
	} else if !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain of to: %v", err)
	}
}

// TestWrongTypeKeyIsTakenAsForObtain: a key of the set that holds a
// value of another type (not a lock) is refused by Obtain as "held"
// (SET NX finds the key); the set's script fails on it with WRONGTYPE.
func TestWrongTypeKeyIsTakenAsForObtain(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	for _, rdb := range clients {
		rdb.HSet(ctx, "h", "f", "v")
	}
	_, err1 := c.Obtain(ctx, "h", time.Minute)
	_, err2 := c.ObtainMulti(ctx, []string{"a", "h"}, time.Minute)
	t.Logf("Obtain: %v", err1)
	t.Logf("ObtainMulti: %v", err2)
	if errors.Is(err1, redlock.ErrTaken) != errors.Is(err2, redlock.ErrTaken) {
		t.Errorf("a key of another type: Obtain %v, ObtainMulti %v: want the same kind", err1, err2)
	}
}
