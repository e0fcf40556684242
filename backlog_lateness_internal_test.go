package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
// grid is late once the next grid point is past, by the time since then,
// or once it can no longer begin with its whole margin, if that is
// sooner; one due off it (a retry) once its due time is past.
func TestARenewalOnTheGridIsLatePastTheNextGridPoint(t *testing.T) {
	c := &Client{epoch: time.Now()}
	l := &Lock{c: c}
	w := &watchdog{l: l, every: 10 * time.Second / 3, tell: time.Second, margin: 300 * time.Millisecond}
	now := c.epoch.Add(time.Second)
	l.until.Store(int64(now.Add(10 * time.Second).Sub(c.epoch)))
	w.arm(now, w.next(now, w.every))
	g := renewGrid(w.every)
	if late := w.lateAt(w.due.Add(g - time.Millisecond)); late >= 0 {
		t.Errorf("a renewal on the grid, %v after it fell due, is late by %v, want not late before the next grid point (%v)", g-time.Millisecond, late, g)
	}
	if late := w.lateAt(w.due.Add(g + 150*time.Millisecond)); late != 150*time.Millisecond {
		t.Errorf("a renewal on the grid, %v after it fell due, is late by %v, want 150ms", g+150*time.Millisecond, late)
	}
	// The validity down to its cancel margin and the renewal's margin
	// 50ms after the renewal fell due: late from then.
	l.until.Store(int64(w.due.Add(50*time.Millisecond + w.tell + w.margin).Sub(c.epoch)))
	if late := w.lateAt(w.due.Add(60 * time.Millisecond)); late != 10*time.Millisecond {
		t.Errorf("a renewal on the grid, 60ms after it fell due and 10ms into its margin, is late by %v, want 10ms", late)
	}
	w.again(time.Hour, false) // off the grid
	if late := w.lateAt(w.due.Add(150 * time.Millisecond)); late != 150*time.Millisecond {
		t.Errorf("a retry, 150ms after it fell due, is late by %v, want 150ms", late)
	}
}

// TestTheFirstRenewalAfterKeepAliveIsOnTheGrid: on the real clock, the
// first renewal of a watchdog is due on its grid point, as the later ones
// are, so lateAt counts it late only past the next one: its wait and its
// due time come from one clock reading.
func TestTheFirstRenewalAfterKeepAliveIsOnTheGrid(t *testing.T) {
	c := inMemory(t, onSend(func(...redis.Cmder) {}))
	l, err := c.Obtain(t.Context(), "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := l.KeepAlive(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r := c.renewerOf()
	r.mu.Lock()
	w := l.dog
	g := renewGrid(w.every)
	off := w.due.Sub(c.epoch) - w.sched/g*g
	late := w.lateAt(w.due.Add(g - time.Millisecond))
	r.mu.Unlock()
	if late >= 0 {
		t.Errorf("the first renewal after KeepAlive, %v after it fell due, is late by %v: due is %v past its grid point", g-time.Millisecond, late, off)
	}
}

// TestABacklogIsToldBeforeALockIsGivenUp: a lock of a 10s TTL renewed
// every 8.3s (WithRenewEvery: a grid step of 1,024ms, more than the time
// between its due time and the validity's cap) is renewed once; then every
// worker is kept busy (16 batches of 64 renewals held up in the Observer)
// when its second renewal falls due on the grid. A backlog is told, and
// WithRenewalBacklogLimit(100ms) would refuse an Obtain, before its
// validity comes down to the cancel margin and it is given up. It runs in
// a synctest bubble, on virtual time.
func TestABacklogIsToldBeforeALockIsGivenUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &lossOrder{hold: make(chan struct{})}
		c := inMemory(t, onSend(func(...redis.Cmder) {}), WithObserver(obs))
		const ttl, every = 10 * time.Second, 8300 * time.Millisecond
		g := renewGrid(every)
		// Its first renewal's time on the schedule on a grid point: its
		// second is then due on the grid point 108ms before its time,
		// 8.192s on, and the validity's cap is 8.398s on.
		time.Sleep(g - (time.Since(c.epoch)+every)%g)
		l, err := c.Obtain(t.Context(), "T", ttl)
		if err != nil {
			t.Fatal(err)
		}
		_, stop, err := l.KeepAlive(t.Context(), WithRenewEvery(every))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		t0 := time.Now()
		time.Sleep(every + 100*time.Millisecond) // its first renewal made
		synctest.Wait()
		obs.block.Store(true)
		defer close(obs.hold)
		for i := range renewWorkers * renewBatch {
			keptAlive(t, c, fmt.Sprint("f", i), ttl) // their renewals, 3.3s on, hold every worker
		}
		r := c.renewerOf()
		var late time.Duration
		for time.Since(t0) < 2*every+1500*time.Millisecond {
			time.Sleep(10 * time.Millisecond)
			late = max(late, time.Duration(r.late.Load()))
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if !obs.lost {
			t.Fatal("the lock was not given up")
		}
		if !obs.toldBefore {
			t.Error("the lock was given up for want of a worker with no backlog told before")
		}
		if late <= renewalsLateAfter {
			t.Errorf("renewals at most %v late while no worker was free", late)
		}
	})
}

// lossOrder records whether a BacklogEvent (Behind) came before the first
// LostEvent, and, once block is set, holds up every renewal's ExtendEvent
// until hold is closed, so that the workers running them stay busy.
type lossOrder struct {
	mu               sync.Mutex
	lost, toldBefore bool
	block            atomic.Bool
	hold             chan struct{}
}

func (o *lossOrder) Observe(_ context.Context, e Event) {
	switch e := e.(type) {
	case *BacklogEvent:
		o.mu.Lock()
		o.toldBefore = o.toldBefore || (e.Behind && !o.lost)
		o.mu.Unlock()
	case *LostEvent:
		o.mu.Lock()
		o.lost = true
		o.mu.Unlock()
	case *ExtendEvent:
		if e.Renewal && o.block.Load() {
			<-o.hold
		}
	}
}
