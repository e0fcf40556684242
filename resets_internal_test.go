package redlock

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestWatchdogFoldsResetSignals: a subscription that flaps (here about 400
// resets in half a second) renews a watchdog's lock at most once per
// resetGap, the resets in between folded into one renewal at the gap's
// end, not once per reset. Its master is in memory (watched): it runs in
// a synctest bubble, on virtual time, where the counts are exact.
func TestWatchdogFoldsResetSignals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &scriptCounter{}
		c, l := watched(t, h, 30*time.Second, 500*time.Millisecond)
		before := h.n.Load()
		start := time.Now()
		for time.Since(start) < 10*resetGap {
			c.masterReset()
			time.Sleep(time.Millisecond)
		}
		elapsed := time.Since(start)
		time.Sleep(3 * resetGap) // the renewal folded into the last gap's end
		n := h.n.Load() - before
		if most := int64(elapsed/resetGap) + 2; n < 2 || n > most {
			t.Errorf("%d renewals over %v of resets, want from 2 to %d: one per %v, not one per reset",
				n, elapsed.Round(time.Millisecond), most, resetGap)
		}
		if v := l.Validity(); v < 25*time.Second {
			t.Errorf("validity %v after the renewals, want them to have renewed the 30s TTL", v)
		}
	})
}

// TestWatchdogResetRetryNoSlowerThanARenewalsRetry: a renewal
// owed to a reset that fails is retried within 4 x resetGap (200ms); a
// renewal that fails otherwise is retried every/4 later. With a short TTL
// (600ms, renewals every 200ms: retries every 51ms) the reset's retries
// must not be slower than the watchdog's own: fewer would fit before the
// validity ends, and the reset would make the watchdog worse at keeping
// the lock through a short outage. It runs in a synctest bubble, as
// TestWatchdogFoldsResetSignals does.
func TestWatchdogResetRetryNoSlowerThanARenewalsRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &failHook{}
		c, _ := watched(t, h, 600*time.Millisecond, 100*time.Millisecond)
		synctest.Wait() // the watchdog waits for its renewal, and hears resets
		h.on.Store(true)
		c.masterReset()
		time.Sleep(300 * time.Millisecond)
		h.on.Store(false)
		if n := h.n.Load(); n < 4 {
			t.Errorf("%d renewal attempts in the 300ms after a reset whose renewal failed, want at least 4 (a failed renewal's retry is every/4 = 51ms; the reset's, 200ms)", n)
		}
	})
}
