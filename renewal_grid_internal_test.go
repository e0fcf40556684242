package redlock

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRenewalsKeepTheirPeriodOnTheGrid: a lock renewed every 666.67ms (a
// 2s TTL), on a 64ms grid, is renewed once per period over 120 periods,
// not once per 640ms (the period rounded down to the grid, each renewal
// counted from the last one's end): 120 renewals, not 125. It runs in a
// synctest bubble, on virtual time, where the count is exact.
func TestRenewalsKeepTheirPeriodOnTheGrid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &scriptCounter{}
		watched(t, h, 2*time.Second, 100*time.Millisecond)
		synctest.Wait()
		before := h.n.Load()
		const periods = 120
		time.Sleep(periods * 2 * time.Second / 3)
		if n := h.n.Load() - before; n < periods-1 || n > periods+1 {
			t.Errorf("%d renewals in %d renewal periods, want %d±1", n, periods, periods)
		}
	})
}

// TestRenewalsOfLocksWithDifferentTTLsShareTheGrid: the renewals of locks
// with 20 TTLs, from 2s to 2.19s, and of one with a 10s TTL (whose grid
// is 256ms), are all sent on the grid of the shortest period (64ms since
// the Client's epoch), so that those due at about the same time share a
// burst, not at times of each TTL's own.
func TestRenewalsOfLocksWithDifferentTTLsShareTheGrid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu sync.Mutex
			at []time.Time // when each script was sent
		)
		c := inMemory(t, onSend(func(cmds ...redis.Cmder) {
			mu.Lock()
			defer mu.Unlock()
			for _, cmd := range cmds {
				if isScript(cmd) {
					at = append(at, time.Now())
				}
			}
		}), WithNodeTimeout(100*time.Millisecond))
		for i := range 20 {
			keptAlive(t, c, fmt.Sprint("k", i), 2*time.Second+time.Duration(i)*10*time.Millisecond)
		}
		keptAlive(t, c, "long", 10*time.Second) // a grid of its own, 256ms
		synctest.Wait()
		mu.Lock()
		at = nil
		mu.Unlock()
		time.Sleep(10 * time.Second)
		g := renewGrid(2 * time.Second / 3)
		mu.Lock()
		defer mu.Unlock()
		slots, off := map[time.Duration]bool{}, 0
		for _, a := range at {
			since := a.Sub(c.epoch)
			if since%g != 0 {
				off++
			}
			slots[since] = true
		}
		if off > 0 {
			t.Errorf("%d of %d renewals sent off the %v grid", off, len(at), g)
		}
		if len(at) < 20*13+2 || len(slots) > int(10*time.Second/g)+1 {
			t.Errorf("%d renewals at %d times in 10s, want at least %d renewals at no more times than the grid has (%d)", len(at), len(slots), 20*13+2, int(10*time.Second/g)+1)
		}
	})
}

// TestARenewalPeriodOfCenturiesWaits: a renewal period so long that its
// time on the schedule is past the largest Duration (here a Client 3s
// old, and WithRenewEvery of the largest Duration less a second) waits
// rather than renewing at once, again and again: the schedule's time
// stops at the largest Duration.
func TestARenewalPeriodOfCenturiesWaits(t *testing.T) {
	c := &Client{epoch: time.Now().Add(-3 * time.Second)}
	w := &watchdog{l: &Lock{c: c}}
	d := time.Duration(math.MaxInt64) - time.Second
	if got := w.next(time.Now(), d); got <= 0 {
		t.Errorf("the first renewal of a period of %v waits %v, want a wait", d, got)
	}
	if got := w.following(time.Now(), d); got <= 0 {
		t.Errorf("the renewal after one of a period of %v waits %v, want a wait", d, got)
	}
}
