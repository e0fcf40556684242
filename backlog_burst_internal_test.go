package redlock

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestARenewalBurstWithinItsGridStepIsNotABacklog: 1,100 locks of a 30s
// TTL obtained at one moment fall due at one point of their grid (a step
// of 1s or more), more than the Client's 16 workers take at once (64
// each). The master takes 150ms a batch, so the burst's last renewals
// begin 150ms or more after the grid point: past renewalsLateAfter, but
// before the next grid point, which each one's time on its schedule is
// before. No backlog is told. It runs in a synctest bubble, on virtual
// time.
func TestARenewalBurstWithinItsGridStepIsNotABacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu   sync.Mutex
			sent []time.Time // when each batch of renewals was sent
		)
		slow := onSend(func(cmds ...redis.Cmder) {
			if !slices.ContainsFunc(cmds, isScript) {
				return
			}
			mu.Lock()
			sent = append(sent, time.Now())
			mu.Unlock()
			time.Sleep(150 * time.Millisecond)
		})
		obs := &backlogs{}
		c := inMemory(t, slow, WithObserver(obs))
		const locks, ttl = 1100, 30 * time.Second
		g := renewGrid(ttl / 3)
		for i := range locks {
			keptAlive(t, c, fmt.Sprint("k", i), ttl)
		}
		time.Sleep(ttl/3 + time.Second) // one burst: the renewals due at one grid point
		synctest.Wait()
		mu.Lock()
		spread := sent[len(sent)-1].Sub(sent[0])
		mu.Unlock()
		if spread <= renewalsLateAfter || spread >= g-renewalsLateAfter {
			t.Fatalf("the burst's batches went out over %v, want more than %v and less than the grid step (%v) less that", spread, renewalsLateAfter, g)
		}
		if got := obs.seen(); len(got) > 0 {
			t.Errorf("a burst sent over %v told backlog events %+v, want none", spread, got)
		}
	})
}

// TestARenewalOnTheGridIsLatePastTheNextGridPoint: a renewal due on the
// grid is late once the next grid point is past, by the time since then;
// one due off it (a retry) once its due time is past.
func TestARenewalOnTheGridIsLatePastTheNextGridPoint(t *testing.T) {
	c := &Client{epoch: time.Now()}
	w := &watchdog{l: &Lock{c: c}, every: 10 * time.Second / 3}
	now := c.epoch.Add(time.Second)
	w.arm(now, w.next(now, w.every))
	g := renewGrid(w.every)
	if late := w.lateAt(w.due.Add(g - time.Millisecond)); late >= 0 {
		t.Errorf("a renewal on the grid, %v after it fell due, is late by %v, want not late before the next grid point (%v)", g-time.Millisecond, late, g)
	}
	if late := w.lateAt(w.due.Add(g + 150*time.Millisecond)); late != 150*time.Millisecond {
		t.Errorf("a renewal on the grid, %v after it fell due, is late by %v, want 150ms", g+150*time.Millisecond, late)
	}
	w.again(time.Hour, false) // off the grid
	if late := w.lateAt(w.due.Add(150 * time.Millisecond)); late != 150*time.Millisecond {
		t.Errorf("a retry, 150ms after it fell due, is late by %v, want 150ms", late)
	}
}
