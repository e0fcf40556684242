package redlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestLateRenewalsGoNearestEndFirst: renewals that fall due together go in
// the order their locks' validity ends, whatever the order they fell due
// in; and a watchdog whose validity is down to its cancel margin when its
// turn comes tells its work at once, without sending a renewal.
func TestLateRenewalsGoNearestEndFirst(t *testing.T) {
	c := &Client{epoch: time.Now()}
	r := &renewer{c: c}
	now := time.Now()
	ends := []time.Duration{5 * time.Second, time.Second, 3 * time.Second, 2 * time.Second, 4 * time.Second}
	for i, end := range ends {
		l := &Lock{c: c}
		l.until.Store(int64(now.Add(end).Sub(c.epoch)))
		w := &watchdog{l: l}
		w.arm(now, -time.Duration(len(ends)-i)*time.Millisecond) // due in the order of ends
		r.waiting.push(w, r.ns(w.wakeAt()))
	}
	r.promote(r.ns(now))
	var got []time.Duration
	for {
		e, ok := r.ready.first()
		if !ok {
			break
		}
		r.ready.pop()
		got = append(got, time.Duration(e.w.l.until.Load())-now.Sub(c.epoch))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("%d ready, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ready in the order %v, want %v", got, want)
		}
	}

	// The turn of a watchdog whose validity came down to its margin
	// since its last renewal.
	obs := &backlogs{}
	_, lc := oneMaster(t, WithObserver(obs))
	l := obtainOn(t, lc, "k", 10*time.Second)
	work, stop, err := l.KeepAlive(t.Context(), WithRenewEvery(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	lateTurn(lc, l, 0)
	redistest.Eventually(t, func() error {
		if obs.renewed() == 0 {
			return errors.New("no renewal yet")
		}
		return nil
	})
	l.until.Store(int64(time.Now().Add(500 * time.Millisecond).Sub(lc.epoch))) // below the 1s margin
	lateTurn(lc, l, 0)
	<-work.Done()
	if cause := context.Cause(work); !errors.Is(cause, ErrLockExpiring) {
		t.Fatalf("work's cause %v, want ErrLockExpiring", cause)
	}
	if n := obs.renewed(); n != 1 {
		t.Fatalf("%d renewals, want the first alone", n)
	}
}

// backlogs records the BacklogEvents of a Client, and counts its
// renewals.
type backlogs struct {
	mu      sync.Mutex
	events  []BacklogEvent
	renewal int
	// hold, when set, blocks each renewal's ExtendEvent until it is
	// closed; held is closed at the first of them.
	hold, held chan struct{}
	once       sync.Once
}

func (b *backlogs) Observe(_ context.Context, e Event) {
	switch e := e.(type) {
	case *BacklogEvent:
		b.mu.Lock()
		b.events = append(b.events, *e)
		b.mu.Unlock()
	case *ExtendEvent:
		if e.Renewal {
			b.mu.Lock()
			b.renewal++
			b.mu.Unlock()
		}
		if e.Renewal && b.hold != nil {
			b.once.Do(func() { close(b.held) })
			<-b.hold
		}
	}
}

func (b *backlogs) renewed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.renewal
}

func (b *backlogs) seen() []BacklogEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]BacklogEvent(nil), b.events...)
}

// lateTurn makes l's watchdog due late ago and starts its turn: it puts
// the watchdog in the ready heap itself, not in the waiting heap, whose
// timer would fire a second tick beside this one, and the second could
// start a worker of its own that finds nothing ready and clears the
// lateness the first noted.
func lateTurn(c *Client, l *Lock, late time.Duration) {
	r := c.renewerOf()
	r.mu.Lock()
	w := l.dog
	w.arm(time.Now().Add(-late), 0)
	w.state = dogReady
	r.ready.push(w, r.readyKey(w))
	r.mu.Unlock()
	r.tick()
}

// TestABacklogIsToldAndCleared: a renewal that waited past
// renewalsLateAfter for its turn is told (a BacklogEvent, Behind), and so
// is the end of the backlog once nothing due waits.
func TestABacklogIsToldAndCleared(t *testing.T) {
	obs := &backlogs{}
	_, c := oneMaster(t, WithObserver(obs))
	l := obtainOn(t, c, "k", 10*time.Second)
	_, stop, err := l.KeepAlive(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if got := obs.seen(); len(got) != 0 {
		t.Fatalf("backlog told before any renewal was late: %+v", got)
	}
	lateTurn(c, l, 3*renewalsLateAfter)
	redistest.Eventually(t, func() error {
		if got := obs.seen(); len(got) < 2 {
			return errors.New("backlog not told and cleared yet")
		}
		return nil
	})
	got := obs.seen()
	if len(got) != 2 || !got[0].Behind || got[0].Due < 1 || got[0].Late < 3*renewalsLateAfter || got[1].Behind {
		t.Fatalf("backlog events %+v, want one Behind (Due >= 1, Late >= %v) then one caught up", got, 3*renewalsLateAfter)
	}
	if v := l.Validity(); v < 9*time.Second {
		t.Fatalf("the late renewal did not renew: validity %v", v)
	}
}

// TestObtainFailsFastWhileRenewalsAreLate: with WithRenewalBacklogLimit,
// an Obtain while the renewals are late past the limit fails at once,
// without asking the masters, with an error matching ErrRenewalsLate and
// ErrNotObtained but neither ErrUnavailable nor ErrTaken; and succeeds
// again once they caught up. A Client without the option is not refused.
func TestObtainFailsFastWhileRenewalsAreLate(t *testing.T) {
	srv := redistest.Start(t, 1)[0]
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	for _, limited := range []bool{true, false} {
		obs := &backlogs{hold: make(chan struct{}), held: make(chan struct{})}
		var unhold sync.Once
		release := func() { unhold.Do(func() { close(obs.hold) }) }
		defer release() // a failure ends the test, not holds its renewal (and Close) forever
		opts := []Option{WithObserver(obs)}
		if limited {
			opts = append(opts, WithRenewalBacklogLimit(renewalsLateAfter))
		}
		c := newClient(t, []redis.UniversalClient{rdb}, opts...)
		l, err := c.Obtain(t.Context(), "held", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, stop, err := l.KeepAlive(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		lateTurn(c, l, 3*renewalsLateAfter)
		<-obs.held // the late renewal is in its turn
		before := get(t, rdb, "other")
		_, err = c.Obtain(t.Context(), "other", 10*time.Second)
		switch {
		case !limited && err != nil:
			t.Fatalf("without a limit: %v", err)
		case limited && (!errors.Is(err, ErrRenewalsLate) || !errors.Is(err, ErrNotObtained) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTaken)):
			t.Fatalf("while late: %v, want ErrRenewalsLate and ErrNotObtained, not ErrUnavailable nor ErrTaken", err)
		case limited && get(t, rdb, "other") != before:
			t.Fatal("the refused Obtain reached the master")
		}
		if limited {
			t.Log(err)
		}
		release()
		redistest.Eventually(t, func() error {
			if c.renewalsLate() != nil {
				return errors.New("still late")
			}
			return nil
		})
		if _, err := c.Obtain(t.Context(), "again", 10*time.Second); err != nil {
			t.Fatalf("once caught up: %v", err)
		}
		stop()
		c.Close()
		rdb.FlushAll(t.Context())
	}
	if _, err := New([]redis.UniversalClient{rdb}, AnyClientOptions(), WithRenewalBacklogLimit(0)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a limit of 0: %v, want ErrInvalidArgument", err)
	}
}

// get returns key's value on rdb, "" when absent.
func get(t *testing.T, rdb *redis.Client, key string) string {
	t.Helper()
	v, err := rdb.Get(t.Context(), key).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

// flight: two KeepAlives per lock, the caller's Extend (a shorter TTL) and
// Release, stops, KeepAlive on a cancelled context, master resets and a
// parent context cancelled while waiting; then Close. Every work context
// must end, every stop return, with no race.
func TestRenewerStress(t *testing.T) {
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	for i, s := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		clients[i] = rdb
	}
	c, err := New(clients, AnyClientOptions(), WithObserver(&renewalSeen{}))
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	var wg sync.WaitGroup
	var works []context.Context
	var mu sync.Mutex
	stopResets := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopResets:
				return
			case <-time.After(3 * time.Millisecond):
				c.masterReset()
			}
		}
	}()
	for i := range n {
		l, err := c.Obtain(t.Context(), "s"+string(rune('a'+i%26))+string(rune('a'+i/26)), 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		parent, cancel := context.WithCancel(t.Context())
		if i%7 == 0 {
			cancel()
		}
		w1, stop1, err := l.KeepAlive(parent, WithRenewEvery(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		w2, stop2, err := l.KeepAlive(t.Context(), WithRenewEvery(30*time.Millisecond), WithMaxHold(time.Duration(200+i*10)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		works = append(works, w1, w2)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			for j := 0; j < 5; j++ {
				time.Sleep(time.Duration(5+i%11) * time.Millisecond)
				switch (i + j) % 4 {
				case 0:
					l.Extend(t.Context(), 100*time.Millisecond)
				case 1:
					cancel()
				case 2:
					l.Extend(t.Context(), 400*time.Millisecond)
				}
			}
			switch i % 3 {
			case 0:
				l.Release(t.Context())
				stop1()
			case 1:
				stop1()
				stop2()
				l.Release(t.Context())
			case 2:
				// left to Close
			}
		}()
	}
	wg.Wait()
	close(stopResets)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i, w := range works {
		select {
		case <-w.Done():
		default:
			t.Fatalf("work %d not ended after Close", i)
		}
	}
	if r := c.renew.Load(); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.workers != 0 {
			t.Fatalf("%d workers after Close", r.workers)
		}
	}
}

// lostGate blocks the first LostEvent of key until open is closed; held is
// closed when it is reached.
type lostGate struct {
	key        string
	open, held chan struct{}
	once       sync.Once
}

func (g *lostGate) Observe(_ context.Context, e Event) {
	if e, ok := e.(*LostEvent); ok && e.Key == g.key {
		g.once.Do(func() {
			close(g.held)
			<-g.open
		})
	}
}

// TestAShortenedValidityBeforeTheTurnBeginsIsFollowed: the caller's Extend
// that shortens the validity below the cancel margin makes the watchdog
// fresh (it renews first rather than give up: the rule of
// TestWatchdogFollowsAShortenedValidity), also when it comes while the
// watchdog's turn is taken into a batch and has not begun. (The window is
// a batch's begins; a's LostEvent, blocked by the Observer, holds it open.)
func TestAShortenedValidityBeforeTheTurnBeginsIsFollowed(t *testing.T) {
	c, a, b, work, g := gatedPair(t, true)
	go dueNow(c, a, b)
	<-g.held // a's turn tells its loss; b's turn is taken, not begun
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err := b.Extend(ctx, 200*time.Millisecond)
	close(g.open)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if work.Err() != nil {
		t.Fatalf("b given up after the caller's own Extend shortened it: %v", context.Cause(work))
	}
	if v := b.Validity(); v < time.Second {
		t.Fatalf("b not renewed after its shortened validity: %v", v)
	}
}

// gatedPair holds a and b (3s, one master) under KeepAlives, b renewed
// once (no longer fresh), a too with bothRenewed; a's next turn ends its
// max hold, and its LostEvent waits for g.open.
func gatedPair(t *testing.T, bothRenewed bool) (*Client, *Lock, *Lock, context.Context, *lostGate) {
	t.Helper()
	srv := redistest.Start(t, 1)[0]
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	g := &lostGate{key: "a", open: make(chan struct{}), held: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
	})
	c := newClient(t, []redis.UniversalClient{rdb}, WithObserver(g))
	a := obtainOn(t, c, "a", 3*time.Second)
	b := obtainOn(t, c, "b", 3*time.Second)
	keep(t, a, WithMaxHold(time.Minute))
	work := keep(t, b)
	locks := []*Lock{b}
	if bothRenewed {
		locks = []*Lock{a, b}
	}
	for _, l := range locks {
		before := l.until.Load()
		dueNow(c, l)
		redistest.Eventually(t, func() error {
			r := c.renewerOf()
			r.mu.Lock()
			defer r.mu.Unlock()
			if l.until.Load() == before || l.dog.state != dogWaiting {
				return errors.New("not renewed yet")
			}
			return nil
		})
	}
	r := c.renewerOf()
	r.mu.Lock()
	a.dog.capAt = time.Now() // a's max hold ends at its next turn
	r.mu.Unlock()
	return c, a, b, work, g
}

// slowLost is an Observer that takes 300ms over a LostEvent (it writes to a
// slow sink, say) and keeps the renewals' outcomes.
type slowLost struct {
	mu   sync.Mutex
	ok   int
	fail []error
}

func (o *slowLost) Observe(_ context.Context, e Event) {
	switch e := e.(type) {
	case *LostEvent:
		time.Sleep(300 * time.Millisecond)
	case *ExtendEvent:
		if !e.Renewal {
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if e.Err != nil {
			o.fail = append(o.fail, e.Err)
		} else {
			o.ok++
		}
	}
}

// TestEachRenewalOfABatchHasItsNodeTimeout: one batch holds a watchdog that ends at
// its WithMaxHold (its begin tells the Observer, which takes 300ms) before
// ten healthy locks' renewals; each of those should still get its node
// timeout (100ms) to be answered, counted from when it is sent.
func TestEachRenewalOfABatchHasItsNodeTimeout(t *testing.T) {
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	for i, s := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { rdb.Close() })
		clients[i] = rdb
	}
	obs := &slowLost{}
	c, err := New(clients, AnyClientOptions(), WithObserver(obs), WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	first, err := c.Obtain(ctx, "first", 3*time.Second) // the earliest validity's end: first in the batch
	if err != nil {
		t.Fatal(err)
	}
	w0, stop0, err := first.KeepAlive(ctx, WithRenewEvery(2*time.Second), WithMaxHold(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer stop0()
	for i := range 10 {
		l, err := c.Obtain(ctx, "k"+strconv.Itoa(i), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, stop, err := l.KeepAlive(ctx, WithRenewEvery(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	r := c.renewerOf()
	r.mu.Lock()
	first.dog.capAt = time.Now().Add(-time.Millisecond) // its hold is over
	r.mu.Unlock()
	c.masterReset() // every watchdog due at once: one batch
	<-w0.Done()
	time.Sleep(time.Second)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	t.Logf("renewals ok %d, failed %d", obs.ok, len(obs.fail))
	if len(obs.fail) > 0 {
		t.Errorf("%d renewals of healthy locks failed behind a slow Observer in their batch: %v", len(obs.fail), obs.fail[0])
	}
}
