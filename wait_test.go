package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// Waiting for a held key (WithWait, WaitReleased): woken by the release,
// not by the holder's TTL; ended by its context or Close.

// TestWaitWokenByRelease: a waiter is woken by the release, not by its
// timer (the holder's TTL is 20s), over one master and over three.
func TestWaitWokenByRelease(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "one master", 3: "three masters"}[n], func(t *testing.T) {
			_, clients, a := cluster(t, n)
			b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
			ctx := t.Context()
			held := heldOnAll(t, a, clients) // on every master before the waiter asks: see TestWaitQueuedWaiterTimesOutAsTaken
			ch := waitFor(ctx, b, "k", 20*time.Second)
			marked(t, clients[0], "k")
			released := time.Now()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w := outcome(t, ch, 5*time.Second)
			if w.err != nil {
				t.Fatalf("waiting Obtain: %v", w.err)
			}
			if d := time.Since(released); d > time.Second {
				t.Errorf("obtained %v after the release, want it woken at once", d)
			}
			if err := w.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWaitLostNotification: a key deleted behind the library's back (no
// release, so no wake-up) costs a waiter at most the key's remaining TTL.
func TestWaitLostNotification(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	if _, err := a.Obtain(ctx, "k", 800*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ch := waitFor(ctx, b, "k", time.Second)
	marked(t, clients[0], "k")
	clients[0].Del(ctx, "k") // gone without a word
	w := outcome(t, ch, 5*time.Second)
	if w.err != nil {
		t.Fatalf("waiting Obtain: %v", w.err)
	}
	if w.took > 1500*time.Millisecond {
		t.Errorf("obtained after %v, want within the holder's TTL (800ms) and a little", w.took)
	}
}

// TestWaitNothingReserved: a release keeps nothing for the waiters. A
// waiter marks the key, then its Client closes; a try-once Obtain is
// refused while the key is held and takes it at once after the release.
func TestWaitNothingReserved(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 1)
	b, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	held, ch := holdAndWait(t, a, b)
	marked(t, clients[0], "k")
	if _, err := a.Obtain(ctx, "k", time.Second); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("try-once Obtain of a held key waited for: %v, want ErrTaken", err)
	}
	b.Close()
	if w := outcome(t, ch, 5*time.Second); !errors.Is(w.err, redlock.ErrClosed) {
		t.Fatalf("waiter after Close: %v, want ErrClosed", w.err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Obtain(ctx, "k", time.Second); err != nil {
		t.Fatalf("try-once Obtain right after the release: %v, want the lock", err)
	}
}

// TestWaitQueuedWaiterTimesOutAsTaken: a waiter queued behind its Client's
// head asks no master; when its context ends, the key is held by another
// owner (the head was refused), and the error says so: ErrTaken, as the
// head's own would, not ErrUnavailable ("an outage, not a reason to skip
// quietly") with every master "not answered".
func TestWaitQueuedWaiterTimesOutAsTaken(t *testing.T) {
	_, clients, a := cluster(t, 3)
	b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := t.Context()
	// On every master before the head asks: Obtain returns at a quorum,
	// and a head that overtook the third master's SET there would hold
	// it, then undo it, and never mark it.
	held := heldOnAll(t, a, clients)
	defer held.Release(ctx)
	head := waitFor(ctx, b, "k", 20*time.Second)
	for _, c := range clients {
		marked(t, c, "k") // the head was refused
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := b.Obtain(wctx, "k", 20*time.Second, redlock.WithWait())
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrTaken) || errors.Is(err, redlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued waiter at its deadline: %v, want ErrNotObtained, ErrTaken (not ErrUnavailable) and the deadline", err)
	}
	select {
	case w := <-head:
		t.Fatalf("the head returned: %v", w.err)
	default:
	}
}

// TestWaitClose: Close ends a wait at once with ErrClosed (and TestMain's
// goleak finds no goroutine left).
func TestWaitClose(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := a.Obtain(ctx, "k", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ch := waitFor(ctx, b, "k", 20*time.Second)
	watch := make(chan error, 1)
	go func() { watch <- b.WaitReleased(ctx, "k") }()
	marked(t, clients[0], "k")
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	w := outcome(t, ch, 5*time.Second)
	if !errors.Is(w.err, redlock.ErrClosed) {
		t.Errorf("waiting Obtain after Close: %v, want ErrClosed", w.err)
	}
	if err := <-watch; !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("WaitReleased after Close: %v, want ErrClosed", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v with waiters", d)
	}
}

// TestWaitReleased: it returns at once for a free key, at the release for
// a held one (not at its 20s TTL), and with ctx's cause when ctx ends.
func TestWaitReleased(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	if err := b.WaitReleased(ctx, "free"); err != nil {
		t.Fatalf("free key: %v", err)
	}
	held := obtain(t, a, "k", 20*time.Second)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := b.WaitReleased(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held key, short ctx: %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	var returnedAt time.Time
	go func() {
		err := b.WaitReleased(ctx, "k")
		returnedAt = time.Now()
		done <- err
	}()
	marked(t, clients[0], "k")
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := returned(t, done, 5*time.Second, "WaitReleased after the release"); err != nil {
		t.Fatal(err)
	}
	if returnedAt.Before(released) {
		t.Fatalf("WaitReleased returned %v before the release, while the key was held", released.Sub(returnedAt))
	}
	if d := returnedAt.Sub(released); d > time.Second {
		t.Errorf("returned %v after the release", d)
	}
}

// TestWaitReleasedOnAFreeKeyAtEveryMasterCount: WaitReleased of a key no
// master holds returns nil at once whatever the number of masters; at an
// even count a round stops at N - quorum + 1 "absent" answers, one short
// of the quorum WaitReleased needs, and must hear the rest.
func TestWaitReleasedOnAFreeKeyAtEveryMasterCount(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			_, _, c := cluster(t, n)
			for range 5 {
				if err := c.WaitReleased(t.Context(), "free"); err != nil {
					t.Fatalf("free key: %v", err)
				}
			}
		})
	}
}

// TestWaitReleasedWaitsOutAHoldAtLeast: WaitReleased returns once the key
// is free on a quorum. The early Release of a WithHoldAtLeast lock
// announces the release of a marked key but keeps the key for the rest of
// the minimum hold; a wait that trusted the announcement would return
// while the key is still held on every master, and an Obtain made right
// after it would be refused for the rest of the hold. Every wake-up is
// followed by a look at the key.
func TestWaitReleasedWaitsOutAHoldAtLeast(t *testing.T) {
	t.Parallel()
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	l := obtain(t, a, "k", 20*time.Second, redlock.WithHoldAtLeast(2*time.Second))
	watch := make(chan error, 1)
	go func() { watch <- b.WaitReleased(ctx, "k") }()
	marked(t, clients[0], "k")
	subscribedAll(t, clients) // the release is announced to a waiter asleep
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-watch:
		if err != nil {
			t.Fatalf("WaitReleased: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitReleased did not return")
	}
	st, err := b.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if tok, n := st.Holder(); n >= st.Quorum {
		t.Errorf("WaitReleased returned nil while %q still holds k on %d of %d masters for %v", tok, n, len(st.Masters), st.Masters[0].TTL)
	}
	if l2, err := b.Obtain(ctx, "k", time.Second); err == nil {
		l2.Release(ctx)
	} else {
		t.Errorf("Obtain right after WaitReleased returned: %v", err)
	}
}

// TestWaitReleasedNeedsNoReplicaAcks: WaitReleased's look at a key takes
// nothing (it marks a held key as waited for, a hint that needs no
// durability); WithReplicaAcks is about grants. With the replica frozen,
// the master's answer "held" is an answer (whatever its WAIT got), and
// WaitReleased waits for the release instead of failing at once.
func TestWaitReleasedNeedsNoReplicaAcks(t *testing.T) {
	t.Parallel()
	_, replica, rdb, _ := replicated(t)
	ctx := t.Context()
	a := newClient(t, []redis.UniversalClient{rdb})
	held := obtain(t, a, "k", 20*time.Second)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(ackNodeTimeout), redlock.WithReplicaAcks(1, ackWait))
	if err := replica.Stop(); err != nil {
		t.Fatal(err)
	}
	defer replica.Cont()
	done := make(chan error, 1)
	go func() { done <- c.WaitReleased(ctx, "k") }()
	select {
	case err := <-done:
		t.Fatalf("WaitReleased returned %v with the key held: it waits for the release", err)
	case <-time.After(time.Second):
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitReleased after the release: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitReleased did not return after the release")
	}
}

func TestWaitOptionChecks(t *testing.T) {
	t.Parallel()
	_, _, c := cluster(t, 1)
	ctx := t.Context()
	if _, err := c.Obtain(ctx, "k", time.Second, redlock.WithWait(), redlock.WithRetry(redlock.LinearBackoff(time.Millisecond))); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("WithWait and WithRetry: %v, want ErrInvalidArgument", err)
	}
	l := obtain(t, c, "k", time.Second)
	if _, _, err := l.KeepAlive(ctx, redlock.WithWait()); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("KeepAlive WithWait: %v, want ErrInvalidArgument", err)
	}
}
