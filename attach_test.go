package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Attach and AttachMulti: another process takes over a lock by its token.

// TestAttachConfirmsOnTheMasters: Attach, in another process, confirms the
// lock on the masters (token, new TTL, fence) and returns a handle to it;
// it never re-takes a key gone from a majority (that could revive a lock),
// and refuses a wrong token.
func TestAttachConfirmsOnTheMasters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3, redlock.WithFencing())
	l := obtain(t, c, "job", time.Second)
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

// TestAttachOfASetKeepsEveryKey: a handle attached to a lock on several
// keys (the other process of a hand-over) renews every key of the set:
// were it to renew the first key only, the others would expire while the
// handle's Extend kept succeeding, and another owner would take them.
func TestAttachOfASetKeepsEveryKey(t *testing.T) {
	t.Parallel()
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
		work(ttl / 3)
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

// TestAttachRefusesAMarkedToken: Attach confirms a lock held under token,
// and refuses a token with the wait mark: every ownership script takes a
// key whose value is the token, or the token and the mark "!", as ours, so
// once a waiter marked the key (value T!), a handle attached with T+"!"
// would match the value itself, and its Release would delete the key
// without the announcement (the waiter would sleep to the holder's TTL).
func TestAttachRefusesAMarkedToken(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	l := obtain(t, a, "k", 20*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := waitFor(wctx, b, "k", 20*time.Second)
	marked(t, clients[0], "k")
	bogus, err := a.Attach(ctx, "k", l.Token()+"!", 20*time.Second, 0)
	if err == nil {
		t.Errorf("Attach with token %q (the holder's is %q) confirmed the lock", bogus.Token(), l.Token())
		start := time.Now()
		if err := bogus.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case w := <-ch:
			if w.err == nil {
				w.l.Release(ctx)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("the bogus handle's Release deleted k unannounced: the waiter still sleeps %v later", time.Since(start).Round(time.Millisecond))
		}
	} else if !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Attach with the marked value as token: %v, want ErrLockLost", err)
	}
	cancel()
	<-ch
}
