package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Waiting on keys held by locks on several keys (ObtainMulti).

// TestWaitWokenBySetRelease: a waiter on a key that a set holds marks it
// there, and the set's Release announces it: the waiter obtains soon after
// the Release, not at the set's 10s TTL; WaitReleased on another key of
// the set returns too. Over one master and over three.
func TestWaitWokenBySetRelease(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			_, clients, a := cluster(t, n)
			b := newClient(t, clients)
			ctx := t.Context()
			set, err := a.ObtainMulti(ctx, []string{"a", "b", "c"}, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// On every master before the waiters ask: ObtainMulti returns at
			// a quorum, and a waiter that overtook the last master's acquire
			// would hold the key there, undo it, and never mark it.
			held(t, clients, "b", set.Token(), n)
			held(t, clients, "c", set.Token(), n)
			ch := waitFor(ctx, b, "b", 10*time.Second)
			watch := make(chan error, 1)
			go func() { watch <- b.WaitReleased(ctx, "c") }()
			for _, c := range clients {
				marked(t, c, "b")
				marked(t, c, "c")
			}
			subscribedAll(t, clients)
			released := time.Now()
			if err := set.Release(ctx); err != nil {
				t.Fatalf("Release of a set with marked keys: %v", err)
			}
			l := wokenBy(t, ch, released, 3*time.Second)
			select {
			case err := <-watch:
				if err != nil {
					t.Errorf("WaitReleased: %v", err)
				}
				if d := time.Since(released); d > 3*time.Second {
					t.Errorf("WaitReleased returned %v after the set's release, want well before the 10s TTL", d)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("WaitReleased did not return")
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSetWithMarkedKeysExtendsAndReleases: keys of a set marked by waiters
// are still the set's own: Extend, KeepAlive's renewals and AttachMulti
// confirm them and keep the mark (the waiters still wait), and Release
// deletes them all (and wakes the waiter); AttachMulti with the marked value as token is refused.
func TestSetWithMarkedKeysExtendsAndReleases(t *testing.T) {
	t.Parallel()
	for _, fencing := range []bool{false, true} {
		t.Run(fmt.Sprint("fencing=", fencing), func(t *testing.T) {
			var opts []redlock.Option
			if fencing {
				opts = append(opts, redlock.WithFencing())
			}
			_, clients, a := cluster(t, 3, opts...)
			b := newClient(t, clients, opts...)
			ctx := t.Context()
			keys := []string{"x", "y"}
			set, err := a.ObtainMulti(ctx, keys, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			held(t, clients, "y", set.Token(), len(clients)) // on every master before the waiter asks (see TestWaitWokenBySetRelease)
			ch := waitFor(ctx, b, "y", 10*time.Second)
			for _, c := range clients {
				marked(t, c, "y")
			}
			if err := set.Extend(ctx, 10*time.Second); err != nil {
				t.Fatalf("Extend of a set with a marked key: %v", err)
			}
			redistest.Eventually(t, func() error { // Extend returns at a quorum
				for i, c := range clients {
					if v := get(t, c, "y"); !strings.HasPrefix(v, set.Token()+"!") {
						return fmt.Errorf("master %d: y holds %q after Extend, want the token and the mark", i, v)
					}
					if ttl := c.PTTL(ctx, "y").Val(); ttl < 5*time.Second {
						return fmt.Errorf("master %d: y has %v left after Extend to 10s", i, ttl)
					}
				}
				return nil
			})
			again, err := a.AttachMulti(ctx, keys, set.Token(), 10*time.Second, set.Fence())
			if err != nil {
				t.Fatalf("AttachMulti of a set with a marked key: %v", err)
			}
			if _, err := a.AttachMulti(ctx, keys, set.Token()+"!", 10*time.Second, set.Fence()); !errors.Is(err, redlock.ErrLockLost) || !errors.Is(err, redlock.ErrInvalidArgument) {
				t.Errorf("AttachMulti with the marked value as token: %v, want ErrLockLost and ErrInvalidArgument", err)
			}
			select {
			case w := <-ch:
				t.Fatalf("the waiter returned while the set holds y: %v", w.err)
			default:
			}
			if err := again.Release(ctx); err != nil {
				t.Fatalf("Release of a set with a marked key: %v", err)
			}
			// Release returns at a quorum: the last master may run it
			// just after. y may be the waiter's already: the Release woke
			// it.
			redistest.Eventually(t, func() error {
				for i, c := range clients {
					for _, k := range keys {
						if v := get(t, c, k); strings.HasPrefix(v, set.Token()) {
							return fmt.Errorf("master %d: %s holds %q after the Release", i, k, v)
						}
					}
				}
				return nil
			})
			w := outcome(t, ch, 15*time.Second)
			if w.err != nil {
				t.Fatalf("waiting Obtain: %v", w.err)
			}
			if err := w.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWaitSetHeldAtLeast: the early Release of a set held at least for a
// while keeps its keys for the rest of that while; a waiter on one of them
// is told (the Release announces it), asks, is refused and sleeps until
// the key expires: it obtains soon after the minimum hold, not at the
// set's 10s TTL.
func TestWaitSetHeldAtLeast(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	set, err := a.ObtainMulti(ctx, []string{"p", "q"}, 10*time.Second, redlock.WithHoldAtLeast(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ch := waitFor(ctx, b, "q", 10*time.Second)
	marked(t, clients[0], "q")
	subscribedAll(t, clients)
	released := time.Now()
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := get(t, clients[0], "q"); !strings.HasPrefix(v, set.Token()) {
		t.Fatalf("q holds %q right after the early Release, want the set's token for the rest of the hold", v)
	}
	// Woken by the announcement, refused, then asking at the 1s hold's end.
	if err := wokenBy(t, ch, released, 4*time.Second).Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaitRefusedForSets: ObtainMulti and DoMulti refuse WithWait before
// any request (a set waits with WithRetry).
func TestWaitRefusedForSets(t *testing.T) {
	t.Parallel()
	_, clients, c := cluster(t, 1)
	ctx := t.Context()
	if _, err := c.ObtainMulti(ctx, []string{"a", "b"}, time.Second, redlock.WithWait()); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("ObtainMulti WithWait: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.ObtainMulti(ctx, []string{"a"}, time.Second, redlock.WithWait()); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("ObtainMulti of one key WithWait: %v, want ErrInvalidArgument", err)
	}
	ran := false
	err := c.DoMulti(ctx, []string{"a", "b"}, time.Second, func(ctx context.Context) error { ran = true; return nil }, redlock.WithWait())
	if !errors.Is(err, redlock.ErrInvalidArgument) || ran {
		t.Errorf("DoMulti WithWait: %v (fn ran: %v), want ErrInvalidArgument", err, ran)
	}
	if n := clients[0].DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys on the master after refused calls", n)
	}
}
