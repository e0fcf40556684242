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

// Release: it deletes only its own keys, and reports a lock that may have
// overlapped another holder's as lost.

// TestReleaseNeverDeletesAnotherOwnersKey: the Release of a lock whose
// keys expired, and that another owner took since, says ErrLockLost and
// leaves the new owner's keys where they are.
func TestReleaseNeverDeletesAnotherOwnersKey(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			ctx := context.Background()
			_, clients, c := cluster(t, n)
			old := obtain(t, c, "k", 30*time.Millisecond)
			var cur *redlock.Lock
			redistest.Eventually(t, func() error { // once old's keys expire
				var err error
				cur, err = c.Obtain(ctx, "k", time.Minute)
				return err
			})
			freed(t, time.Second, clients, "k", old.Token()) // every master expired old's key
			before := holdersOf(t, clients, "k")
			if held := count(before, cur.Token()); held < n/2+1 {
				t.Fatalf("new owner holds %d of %d masters", held, n)
			}
			err := old.Release(ctx)
			if !errors.Is(err, redlock.ErrLockLost) {
				t.Fatalf("Release of an expired lock: %v, want ErrLockLost", err)
			}
			after := holdersOf(t, clients, "k")
			for i := range before {
				if before[i] == cur.Token() && after[i] != cur.Token() {
					t.Fatalf("master %d held the new owner's key before the old owner's Release, and holds %q after it", i, after[i])
				}
			}
		})
	}
}

// TestReleaseAfterTheValidityEndedSaysLost: a lock whose validity ended
// while its keys stayed (an Extend to a shorter TTL shrinks the validity,
// never a key) is released on every master, and Release reports the lock
// lost, saying why: the work may have overlapped with another holder's. A
// Release after it returns nil.
func TestReleaseAfterTheValidityEndedSaysLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	lock := obtain(t, c, "k", time.Minute)
	// Obtain returns at a quorum: the last master's grant may still be on its way.
	held(t, clients, "k", lock.Token(), 3)
	_ = lock.Extend(ctx, 100*time.Millisecond) // its outcome does not matter: the validity ends soon
	lapsed(t, lock)
	if n := count(holdersOf(t, clients, "k"), lock.Token()); n != 3 {
		t.Fatalf("setup: %d masters hold the key, want 3", n)
	}
	err := lock.Release(ctx)
	if !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "validity had ended") {
		t.Fatalf("Release after the validity ended: %v, want ErrLockLost saying the validity had ended", err)
	}
	redistest.Eventually(t, func() error { // Release returns at a quorum
		if n := count(holdersOf(t, clients, "k"), lock.Token()); n != 0 {
			return fmt.Errorf("%d masters still hold the key after the Release", n)
		}
		return nil
	})
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("a second Release: %v, want nil", err)
	}
}

// TestReleaseAfterTheWatchdogLostTheLockSaysLost: renewals on masters 0
// and 1 ran whose replies the holder never counted (here: their keys made
// to last a minute by hand), then those two froze; the watchdog counted
// the lock lost when its validity ran out. Once they answer again, every
// master still holds our key, and a Release deletes them all: it must
// still report the lock lost (the work may have overlapped with another
// holder's), not released.
func TestReleaseAfterTheWatchdogLostTheLockSaysLost(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	c := newClient(t, boundedClients(t, servers), redlock.WithNodeTimeout(100*time.Millisecond))
	lock := obtain(t, c, "k", 600*time.Millisecond)
	// Obtain returns at a quorum: a grant landing after the PExpire below would expire.
	held(t, direct, "k", lock.Token(), 3)
	work, stop, err := lock.KeepAlive(ctx, redlock.WithCancelMargin(0)) // until the validity has run out
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for i, s := range servers[:2] {
		if err := direct[i].PExpire(ctx, "k", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		takeDown(t, "frozen", s)
	}
	select {
	case <-work.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog never counted the lock lost")
	}
	if cause := context.Cause(work); !errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("watchdog's cause %v, want ErrLockLost", cause)
	}
	stop()
	resume(t, servers[:2]...)
	if n := count(holdersOf(t, direct, "k"), lock.Token()); n < 2 {
		t.Fatalf("setup: %d masters hold the key, want at least 2", n)
	}
	if err := lock.Release(ctx); !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "validity had ended") {
		t.Fatalf("Release after the watchdog lost the lock: %v, want ErrLockLost saying the validity had ended", err)
	}
	redistest.Eventually(t, func() error { // Release returns at a quorum
		if n := count(holdersOf(t, direct, "k"), lock.Token()); n != 0 {
			return fmt.Errorf("%d masters still hold the key after the Release", n)
		}
		return nil
	})
}

// TestReleaseAfterARestartReportsTheLoss: masters 0 and 1 restart without
// persistence while A holds the lock; B obtains it (A's key is gone from a
// majority) and releases it. A's Release then finds no key on those two
// masters: ErrLockLost, as Release's doc says, also while the lane still
// keeps the connection the restart closed (a request that fails with EOF
// there and is sent again counts no key found gone as its own doing). The
// same faults give the same answer however long ago the lane last sent
// something. (The test skips if the machine is so slow that the lane gave
// its connection back before A's Release.)
func TestReleaseAfterARestartReportsTheLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers, clients, a := cluster(t, 3)
	l := obtain(t, a, "k", time.Minute)
	// Obtain returns at a quorum: a grant still on its way to a master
	// that restarts would land on its new process and refuse B there.
	onEvery(t, clients, "k", l.Token())
	start := time.Now()
	overlapAfterRestarts(t, servers, "k", servers[:2]...)
	err := l.Release(ctx)
	took := time.Since(start)
	if took > 10*time.Second {
		t.Skipf("too slow to stay within the lane's idle time (%v): %v", took, err)
	}
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release %v after two of three masters restarted (and B held the lock in between): %v; want ErrLockLost", took.Round(time.Millisecond), err)
	}
}

// TestReleaseAfterAReleaseIsNilWhileAnExtendHoldsTheMutex: "once a
// Release has returned nil or ErrLockLost, later calls return nil at once:
// a deferred Release after an explicit one is no alarm" (Release's doc),
// also when its context has ended and an Extend of another goroutine holds
// the lock's mutex (a released lock's Extend returns ErrLockLost at once,
// holding the mutex meanwhile): no ErrUnavailable, and no second Release
// round to the masters.
func TestReleaseAfterAReleaseIsNilWhileAnExtendHoldsTheMutex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	l := obtain(t, c, "k", time.Minute)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel() // the request's context, ended by the time the deferred Release runs
	stop := make(chan struct{})
	extended := make(chan struct{})
	go func() {
		defer close(extended)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = l.Extend(ctx, time.Minute) // ErrLockLost at once, the mutex held meanwhile
		}
	}()
	defer func() { close(stop); <-extended }()
	for i := 0; i < 20000; i++ {
		if err := l.Release(done); err != nil {
			t.Fatalf("Release #%d after a Release that returned nil: %v", i+2, err)
		}
	}
}

// TestReleaseThatGaveUpWaitingStillReleases: a Release that waited for
// the lock's mutex as long as its context allowed (the caller's own
// Extend holds it, on slow masters) still releases: it returns nil,
// ErrLockLost, or an error that says "ended by the caller" and matches
// ctx's cause, not ErrUnavailable (Release's doc: "when ctx ends first,
// the Release still goes out behind that Extend"; "Validity is 0 after
// Release, whatever it returns"), the validity is 0, and the watchdog ends
// ("a Release while the watchdog runs also ends it", KeepAlive's doc)
// instead of renewing a released lock for ever.
func TestReleaseThatGaveUpWaitingStillReleases(t *testing.T) {
	ctx := context.Background()
	servers, clients, c := cluster(t, 3, redlock.WithNodeTimeout(time.Second))
	l := obtain(t, c, "k", 3*time.Second)
	wctx, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "frozen", servers[1], servers[2])
	scripts := scriptsRun(t, clients[0])
	go l.Extend(ctx, 3*time.Second)        // the caller's own Extend, on the frozen majority
	redistest.Eventually(t, func() error { // the Extend reached master 0: it holds the mutex, waiting on the others
		if scriptsRun(t, clients[0]) == scripts {
			return errors.New("the Extend has not reached master 0")
		}
		return nil
	})
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = l.Release(rctx)
	callers := errors.Is(err, context.DeadlineExceeded) && strings.Contains(err.Error(), "ended by the caller") && !errors.Is(err, redlock.ErrUnavailable)
	if err != nil && !callers && !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Release behind an Extend in flight: %v; want nil, ErrLockLost, or ended by the caller (its context's deadline), not ErrUnavailable", err)
	}
	if v := l.Validity(); v != 0 {
		t.Errorf("Validity after Release: %v, want 0", v)
	}
	resume(t, servers[1:]...)
	select {
	case <-wctx.Done():
	case <-time.After(4 * time.Second):
		t.Errorf("4s after Release (TTL 3s), the watchdog still renews the lock: masters hold %q", holdersOf(t, clients, "k"))
	}
}

// TestReleaseThatGaveUpIsNotUndoneByTheExtendItWaitedFor: a Release whose
// context ends while the caller's Extend holds the lock's mutex "still goes
// out behind that Extend" (Release's doc), and the Extend's requests, not
// sent yet, must not reach the masters after it: they would find the key
// gone before their re-take deadline and take it again for a whole TTL,
// and nobody could take the lock meanwhile. Here an Extend and a Release
// with an ended context (a deferred Release) start together, at varying
// offsets: the race is a few percent of the runs.
func TestReleaseThatGaveUpIsNotUndoneByTheExtendItWaitedFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	done, cancel := context.WithCancel(ctx)
	cancel() // the deferred Release's context has ended
	spin := 0
	for i := range 150 {
		key := fmt.Sprintf("k%d", i)
		l := obtain(t, c, key, time.Minute)
		extended := make(chan error, 1)
		started := make(chan struct{})
		go func() { close(started); extended <- l.Extend(ctx, time.Minute) }()
		<-started
		for j := range (i % 30) * 20 { // start the two at varying offsets
			spin += j
		}
		rerr := l.Release(done)
		eerr := <-extended
		redistest.Within(t, 500*time.Millisecond, func() error { // a Release still in flight lands
			if vs := holdersOf(t, clients, key); count(vs, l.Token()) > 0 {
				var left time.Duration
				for _, m := range clients {
					left = max(left, m.PTTL(ctx, key).Val())
				}
				return fmt.Errorf("run %d: after Release (%v) and the Extend it waited for (%v), %d masters hold the released lock's key, for up to %v more",
					i, rerr, eerr, count(vs, l.Token()), left.Round(time.Second))
			}
			return nil
		})
	}
	t.Logf("spin %d", spin)
}
