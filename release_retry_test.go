package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// A Release tried again after one that got no answer: a key found gone
// counts as the first try's doing only where that try could have deleted
// it, so a retry neither invents a loss nor hides one.

// TestRetriedReleaseIsNoFalseLoss: "after a Release that merely failed to
// reach the masters, another call tries again" (Release's doc). A Release
// refused by a stalled lane is kept and sent again by the lane once the
// master answers, so the caller's retry finds the key already gone: that
// is the library's own doing, and the retry returns nil, not ErrLockLost
// ("work done under the lock may have overlapped") for a lock held to the
// end.
func TestRetriedReleaseIsNoFalseLoss(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	rdb := clientOf(t, servers[0], oneLane) // reads bounded by ReadTimeout (1s)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(50*time.Millisecond))
	l := obtain(t, c, "k", time.Minute)
	if err := l.Extend(ctx, time.Minute); err != nil { // scripts loaded
		t.Fatal(err)
	}
	stalledLane(t, servers[0], func() { c.Obtain(ctx, "other", time.Minute) })
	first := l.Release(ctx)
	if first == nil || errors.Is(first, redlock.ErrLockLost) {
		t.Fatalf("Release on a stalled lane: %v, want a failure that is not ErrLockLost", first)
	}
	resume(t, servers[0])
	freed(t, 5*time.Second, direct, "k", l.Token()) // the master answers again, and runs the kept Release
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release tried again, as its doc says, once the master answers: %v (the first: %v)", err, first)
	}
}

// TestRetriedReleaseAfterALapseReportsTheLoss: A's work overran its TTL
// and B held the lock in between, so A's work may have overlapped with
// B's: A's Release must report the loss, even when the masters cannot
// tell (a Release after one that got no answer counts a key found gone as
// its own doing). A Release that begins after the validity ended returns
// ErrLockLost saying so, whatever the masters answer (here two of them are
// frozen: a moment of slowness), and a Release after it returns nil: the
// overlap is reported once, never lost to a retry.
func TestRetriedReleaseAfterALapseReportsTheLoss(t *testing.T) {
	ctx := context.Background()
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	l := obtain(t, a, "k", 300*time.Millisecond)
	lapsed(t, l) // A's work overruns its TTL
	var lb *redlock.Lock
	redistest.Within(t, time.Second, func() error { // once A's keys expire
		var err error
		lb, err = b.Obtain(ctx, "k", time.Minute)
		if err != nil {
			return fmt.Errorf("B's Obtain after A's lock lapsed: %v", err)
		}
		return nil
	})
	if err := lb.Release(ctx); err != nil { // B's work is done
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[1], servers[2]) // a moment of slowness
	first := l.Release(ctx)
	if !errors.Is(first, redlock.ErrLockLost) || !strings.Contains(first.Error(), "the validity had ended before Release began") {
		t.Fatalf("A's Release of its lapsed lock with two masters frozen: %v; want ErrLockLost saying the validity had ended: A's lock lapsed and B held it while A's work ran", first)
	}
	resume(t, servers[1:]...)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("A's Release after the one that reported the loss: %v, want nil (the first: %v)", err, first)
	}
}

// TestRetriedReleaseAfterAnotherTookItIsNoFalseLoss: the other side of
// TestRetriedReleaseIsNoFalseLoss. A's first Release reaches one master in
// time; the two frozen ones run it when they resume (or the lane sends it
// again, kept): the lock is free, and B takes it. A's second Release, as
// Release's doc invites after a failure to reach the masters, finds B's
// token everywhere: A's work ended before its first Release, and B took the
// lock only after A's own Release freed it, so it reports no ErrLockLost.
func TestRetriedReleaseAfterAnotherTookItIsNoFalseLoss(t *testing.T) {
	ctx := context.Background()
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
	l := obtain(t, a, "k", time.Minute)
	first := releaseThroughAFreeze(t, l, servers[1:]...)
	var lb *redlock.Lock
	redistest.Eventually(t, func() error { // A's first Release lands: the lock is free
		var err error
		lb, err = b.Obtain(ctx, "k", time.Minute)
		return err
	})
	defer lb.Release(ctx)
	if err := l.Release(ctx); errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release tried again after its first freed the lock and B took it: %v; A's work never overlapped B's (the first Release: %v)", err, first)
	}
}

// TestRetriedReleaseAfterTheValidityIsNoFalseLoss: a Release that got no
// answer from two frozen masters, which run it when they resume (the
// lane's kept copy too): the key is gone from every master well before its
// TTL. The caller tries Release again, as its doc invites, after the end of
// the validity the lock had when the first Release began: the keys found
// gone are the first Release's doing (it was sent while the key could
// still live, so whatever removed it came after the work), and the retry
// returns no ErrLockLost. Nobody else ever held the lock, and the work
// ended while the lock was valid: what counts is when the first Release
// was sent, not when the retry runs.
func TestRetriedReleaseAfterTheValidityIsNoFalseLoss(t *testing.T) {
	ctx := context.Background()
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	const ttl = 1200 * time.Millisecond
	start := time.Now()
	l := obtain(t, a, "k", ttl)
	first := releaseThroughAFreeze(t, l, servers[1:]...)
	redistest.Eventually(t, func() error { // the first Release lands
		if vs := holdersOf(t, clients, "k"); count(vs, l.Token()) > 0 {
			return errors.New("the key is still held")
		}
		return nil
	})
	if gone := time.Since(start); gone > ttl-300*time.Millisecond {
		t.Skipf("too slow: the key was gone only %v after Obtain, near its TTL", gone)
	}
	time.Sleep(time.Until(start.Add(ttl + 100*time.Millisecond))) // the caller retries after the lock's TTL
	if err := l.Release(ctx); errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release tried again after its first one deleted the key on every master (before its TTL), nobody else near the lock: %v (the first Release: %v)", err, first)
	}
}

// TestReleaseUnansweredAfterARestartReportsTheLoss: masters 1 and 2
// restart without persistence while A holds the lock, and B obtains and
// releases it: the two holders overlapped. A's Release then finds its
// lane's connections closed, and the fresh ones get no answer (the two
// masters are frozen a moment). A second Release, as Release's doc
// invites, finds no key there: the key vanished before the first Release
// was sent (with another process of the master), so its loss is not that
// Release's doing, and the retry reports ErrLockLost, as a single Release
// on answering masters does (TestReleaseAfterARestartReportsTheLoss).
func TestReleaseUnansweredAfterARestartReportsTheLoss(t *testing.T) {
	ctx := context.Background()
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(200*time.Millisecond))
	scripts := scriptsRanOn(clients[1:]...)
	l := obtain(t, a, "k", time.Minute)
	onEvery(t, clients, "k", l.Token())                   // no grant on its way to a master that restarts
	overlapAfterRestarts(t, servers, "k", servers[1:]...) // A's key is lost on two masters
	ran := ranNow(scripts)
	first := releaseThroughAFreeze(t, l, servers[1:]...)
	ranPast(t, scripts, ran) // the first Release, kept, ran on masters 1 and 2: its requests are over
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release tried again: %v; want ErrLockLost: two masters lost A's key to a restart and B held the lock while A did (the first Release: %v)", err, first)
	}
}

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
	const timeout = 200 * time.Millisecond
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(timeout))
	scripts := scriptsRanOn(clients[1:]...)
	takeDown(t, "frozen", servers[2])
	sent := time.Now()
	l := obtain(t, a, "k", time.Minute)
	// A's request to master 2 waits in its socket until its node timeout:
	// a restart before then closes the connection, and A's lane sends the
	// request again to the new process (safe to run twice), which then
	// holds A's key.
	time.Sleep(time.Until(sent.Add(timeout + 50*time.Millisecond)))
	overlapAfterRestarts(t, servers, "k", servers[1:]...) // A's key is lost on master 1; master 2 never had it
	ran := ranNow(scripts)
	first := releaseThroughAFreeze(t, l, servers[1:]...)
	ranPast(t, scripts, ran) // the first Release, kept, ran on masters 1 and 2: its requests are over
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release tried again: %v; want ErrLockLost: master 1 lost A's key to a restart, master 2 never answered A, and B held the lock while A did (the first Release: %v)", err, first)
	}
}
