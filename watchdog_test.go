package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// KeepAlive's watchdog: it tells the work when the validity ends, whatever
// holds the lock meanwhile, and says why.

// TestWatchdogCancelsAtValidityEndWhileRenewalHangs: with a majority
// frozen and node timeouts far longer than the lock's validity, a watchdog
// without a cancel margin tells the work (ErrLockLost) when the validity
// ends, not when the hanging renewal gives up, and never before.
func TestWatchdogCancelsAtValidityEndWhileRenewalHangs(t *testing.T) {
	ctx := context.Background()
	// Long node timeouts: a renewal to a frozen master would hang for 10s.
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(10*time.Second))
	const ttl = 800 * time.Millisecond
	l := obtain(t, c, "job", ttl)
	wctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(200*time.Millisecond), redlock.WithCancelMargin(0))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "frozen", servers[:2]...)
	// The validity can only shrink from here: renewals get no quorum.
	validUntil := time.Now().Add(l.Validity())
	select {
	case <-wctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("work context not cancelled while a majority was frozen")
	}
	late := time.Since(validUntil)
	if !errors.Is(context.Cause(wctx), redlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(wctx))
	}
	if late > 150*time.Millisecond {
		t.Fatalf("cancelled %v after the validity ended", late)
	}
	if l.Validity() > 0 && late < 0 {
		t.Fatalf("cancelled %v before the validity ended", -late)
	}
}

// TestWatchdogCancelsOnTimeBehindAnExtend: the watchdog tells the work at
// the validity's end even while the caller's own Extend holds the lock and
// waits on frozen masters.
func TestWatchdogCancelsOnTimeBehindAnExtend(t *testing.T) {
	ctx := context.Background()
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(4*time.Second))
	const ttl = 900 * time.Millisecond
	l := obtain(t, c, "job", ttl)
	wctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "frozen", servers[:2]...)
	validUntil := time.Now().Add(l.Validity())
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, ttl) }() // hangs on the frozen masters
	select {
	case <-wctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("work context not cancelled")
	}
	if late := time.Since(validUntil); late > 150*time.Millisecond {
		t.Fatalf("work told %v after the validity ended", late)
	}
	if !errors.Is(context.Cause(wctx), redlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(wctx))
	}
	<-extended
}

// TestWatchdogFollowsAShortenedValidity: an Extend with a shorter TTL (or a
// failed Extend, which shortens the validity) moves the validity's end
// before the watchdog's next renewal: the watchdog renews before the new
// end, or tells the work; the work context is never live while another
// owner holds the lock.
func TestWatchdogFollowsAShortenedValidity(t *testing.T) {
	ctx := context.Background()
	_, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	l := obtain(t, a, "job", 3*time.Second)
	wctx, stop, err := l.KeepAlive(ctx) // renews every second
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// 800ms: under the renewal interval (1s), so a watchdog that did not
	// follow the new end would renew after it; above the cancel margin
	// (300ms), so the renewal has about 490ms to complete on a loaded
	// machine rather than the ~190ms a 200ms Extend would leave it.
	if err := l.Extend(ctx, 800*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	validUntil := time.Now().Add(l.Validity())
	bctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	bl, err := b.Obtain(bctx, "job", time.Minute, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	if err == nil {
		defer bl.Release(ctx)
		if wctx.Err() == nil {
			t.Fatalf("B holds the lock (A's validity ended %v ago, A's Validity() = %v) while A's work context is still live",
				time.Since(validUntil).Round(time.Millisecond), l.Validity())
		}
		return
	}
	// B never got it: the watchdog renewed A's lock before the shorter
	// validity ended, as it should.
	if !errors.Is(err, redlock.ErrTaken) || wctx.Err() != nil || l.Validity() < time.Second {
		t.Fatalf("B: %v; A's work context %v, validity %v: want A renewed in time", err, wctx.Err(), l.Validity())
	}
}

// TestKeepAliveStartedLateRenewsInTime: a lock kept past part of its TTL
// before KeepAlive starts (set-up work, then "keep it while I finish") has
// less validity left than the renewal interval: the watchdog's first
// renewal comes before the validity ends, not a whole interval later, and
// on healthy masters the lock is kept.
func TestKeepAliveStartedLateRenewsInTime(t *testing.T) {
	ctx := context.Background()
	_, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	l := obtain(t, a, "job", 1500*time.Millisecond)
	work(1100 * time.Millisecond) // set-up work: about 385ms of validity left
	left := l.Validity()
	wctx, stop, err := l.KeepAlive(ctx) // renews every 500ms
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	bctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	bl, err := b.Obtain(bctx, "job", time.Minute, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	if err != nil {
		return // the watchdog kept the lock: fine
	}
	defer bl.Release(ctx)
	if wctx.Err() == nil {
		t.Fatalf("KeepAlive started with %v of validity left: B obtained the lock while A's work context is still live (A's Validity() = %v)", left.Round(time.Millisecond), l.Validity())
	}
	t.Errorf("KeepAlive started with %v of validity left on healthy masters: lock lost (%v) before its first renewal", left.Round(time.Millisecond), context.Cause(wctx))
}

// TestReleaseBeforeStopIsNoLoss: KeepAlive's user releases the lock, then
// stops the watchdog: the watchdog ends, and its cause is no ErrLockLost.
func TestReleaseBeforeStopIsNoLoss(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	l := obtain(t, c, "k", time.Second)
	wctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the watchdog went on after Release")
	}
	if cause := context.Cause(wctx); errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("Release before stop reported as a loss: %v", cause)
	}
}

// TestReleaseBeforeStopIsNoLossMidRelease: TestReleaseBeforeStopIsNoLoss
// with a watchdog that wakes while the Release is in flight on slow
// masters (the Release has zeroed the validity, and not returned yet): it
// does not take the zero for a validity that ran out, and cancels the work
// of a lock its owner released with no ErrLockLost.
func TestReleaseBeforeStopIsNoLossMidRelease(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers, true)
	c := newClient(t, viaProxy, redlock.WithNodeTimeout(time.Second))
	l := obtain(t, c, "k", 3*time.Second)
	scripts := scriptsRun(t, direct...)
	wctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(30*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error { // the watchdog renews
		if scriptsRun(t, direct...) == scripts {
			return errors.New("no renewal yet")
		}
		return nil
	})
	for _, p := range proxies {
		p.DelayOpen(150*time.Millisecond, 0) // the masters answer slowly, well within the node timeout
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	stop()
	if cause := context.Cause(wctx); errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("work context of a lock its owner released: cause %v", cause)
	}
}
