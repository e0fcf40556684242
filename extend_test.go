package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Extend and the validity it reports.

// TestExtendAndValidity: a lock's validity is at most its TTL less the
// drift, shrinks with time, and grows with an Extend, which every master
// runs.
func TestExtendAndValidity(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			ctx := context.Background()
			_, clients, c := cluster(t, n)
			l := obtain(t, c, "k", 300*time.Millisecond)
			v1 := l.Validity()
			if v1 <= 0 || v1 > 300*time.Millisecond-5*time.Millisecond {
				t.Fatalf("validity %v, want in (0, ttl - drift]", v1)
			}
			work(20 * time.Millisecond) // time passes
			if v2 := l.Validity(); v2 >= v1 {
				t.Fatalf("validity did not shrink: %v then %v", v1, v2)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if v := l.Validity(); v <= 300*time.Millisecond {
				t.Fatalf("validity after Extend(1m) is %v", v)
			}
			redistest.Eventually(t, func() error { // Extend returns at a quorum; the last master follows
				for i, rdb := range clients {
					pttl, err := rdb.PTTL(ctx, "k").Result()
					if err != nil {
						return err
					}
					if pttl < 30*time.Second {
						return fmt.Errorf("master %d: PTTL %v after Extend(1m)", i, pttl)
					}
				}
				return nil
			})
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLapsedLockIsNeverRevived: an Extend of a lock whose validity has
// ended says ErrLockLost, and takes no key on any master.
func TestLapsedLockIsNeverRevived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	l := obtain(t, c, "k", 50*time.Millisecond)
	freed(t, time.Second, clients, "k", l.Token()) // its keys expired
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend of a lapsed lock: %v, want ErrLockLost", err)
	}
	if got := count(holdersOf(t, clients, "k"), l.Token()); got != 0 {
		t.Fatalf("lapsed lock revived on %d masters", got)
	}
}

// TestExtendRetakesVanishedKey: an Extend re-takes the key a restarted
// master lost, at the first try: the connection that went dead with the old
// process is not reused.
func TestExtendRetakesVanishedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers, clients, c := cluster(t, 3)
	l := obtain(t, c, "k", time.Minute)
	// Obtain returns at a quorum: no grant on its way to the master that restarts.
	onEvery(t, clients, "k", l.Token())
	if err := servers[0].Restart(false); err != nil { // forgets the key
		t.Fatal(err)
	}
	if got := get(t, clients[0], "k"); got != "" {
		t.Fatalf("restarted master still has %q", got)
	}
	// The first Extend after the restart re-takes the key: the connection
	// that went dead with the old process is not reused.
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if got := get(t, clients[0], "k"); got != l.Token() {
			return fmt.Errorf("restarted master holds %q after Extend, want our token", got)
		}
		return nil
	})
}

// TestExtendAndReleaseAfterTakeover: once an intruder holds the key on a
// majority, Extend and Release say ErrLockLost, the validity is 0, and the
// intruder's keys stay while ours go.
func TestExtendAndReleaseAfterTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	l := obtain(t, c, "k", time.Minute)
	for _, rdb := range clients[:2] { // an intruder overwrites a majority
		rdb.Set(ctx, "k", "intruder", time.Minute)
	}
	err := l.Extend(ctx, time.Minute)
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after takeover: %v, want ErrLockLost", err)
	}
	if l.Validity() != 0 {
		t.Fatal("validity of a lost lock is not 0")
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release after takeover: %v, want ErrLockLost", err)
	}
	redistest.Eventually(t, func() error {
		vs := holdersOf(t, clients, "k")
		if count(vs, "intruder") != 2 || vs[2] != "" {
			return fmt.Errorf("masters hold %q, want the intruder's keys untouched and ours gone", vs)
		}
		return nil
	})
}

// TestExtendWithoutAnswersIsNotLost: an Extend a frozen majority does not
// answer fails with the timeouts, not ErrLockLost, and keeps the validity.
func TestExtendWithoutAnswersIsNotLost(t *testing.T) {
	ctx := context.Background()
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	l := obtain(t, c, "k", time.Minute)
	takeDown(t, "frozen", servers[:2]...)
	err := l.Extend(ctx, time.Minute)
	resume(t, servers[:2]...)
	if err == nil || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with a frozen majority: %v, want an error that is not ErrLockLost", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Extend error %v does not report the timeouts", err)
	}
	if l.Validity() == 0 {
		t.Fatal("an unanswered Extend dropped the validity")
	}
}

// TestFailedExtendNeverLengthensValidity: a stranger's key lingers on master
// 2, so A's quorum is masters 0 and 1. A shortens its lock to 300ms while
// master 1 is frozen: the Extend reaches master 0 only and fails. A's
// validity must shrink to what a successful Extend would have left it (a
// master never shortens a key, but A may not count on more than it asked
// for), and whenever B obtains the lock, A no longer believes it holds it.
func TestFailedExtendNeverLengthensValidity(t *testing.T) {
	ctx := context.Background()
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	if err := clients[2].Set(ctx, "k", "stranger", 600*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	lock := obtain(t, a, "k", 10*time.Second)
	takeDown(t, "frozen", servers[1])
	const short = 300 * time.Millisecond
	start := time.Now()
	err := lock.Extend(ctx, short)
	if err == nil || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend reaching one of three masters: %v, want a failure that is not ErrLockLost", err)
	}
	if v, most := lock.Validity(), short-time.Since(start); v > most {
		t.Fatalf("validity %v after a failed Extend(%v), want at most %v", v, short, most)
	}
	if pttl := clients[0].PTTL(ctx, "k").Val(); pttl < 5*time.Second {
		t.Fatalf("master 0's key was cut to %v: a master never shortens a key", pttl)
	}
	redistest.Within(t, 1500*time.Millisecond, func() error { // B tries until A's validity has ended
		if bl, err := b.Obtain(ctx, "k", 10*time.Second); err == nil {
			if v := lock.Validity(); v > 0 {
				t.Fatalf("B holds the lock while A's validity is still %v", v)
			}
			_ = bl.Release(ctx)
			return nil
		}
		if lock.Validity() > 0 {
			return errors.New("A's validity outlived the shorter TTL it asked for")
		}
		return nil
	})
}

// TestScriptCacheFlushed: Extend and Release work after the masters'
// script caches were flushed (SCRIPT FLUSH, a restart, a failover).
func TestScriptCacheFlushed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	l := obtain(t, c, "k", time.Minute)
	for _, rdb := range clients {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	for _, rdb := range clients {
		rdb.ScriptFlush(ctx)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
}

// TestConcurrentExtendAndRelease: Extends racing a Release of the same lock
// either succeed or say ErrLockLost, and none brings the key back after
// the Release.
func TestConcurrentExtendAndRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	for round := range 20 {
		key := fmt.Sprint("k", round)
		l := obtain(t, c, key, time.Minute)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 5 {
					if err := l.Extend(ctx, time.Minute); err != nil && !errors.Is(err, redlock.ErrLockLost) {
						t.Errorf("Extend: %v", err)
					}
				}
			})
		}
		wg.Go(func() {
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
		wg.Wait()
		// No Extend after the Release may bring the key back.
		redistest.Eventually(t, func() error {
			if vs := holdersOf(t, clients, key); count(vs, "") != 3 {
				return fmt.Errorf("masters hold %q after Release", vs)
			}
			return nil
		})
	}
}
