package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// renewalSeen records the renewals' ExtendEvents of a Client, by key.
type renewalSeen struct {
	mu   sync.Mutex
	keys []string
}

func (o *renewalSeen) Observe(_ context.Context, e Event) {
	if e, ok := e.(*ExtendEvent); ok && e.Renewal {
		o.mu.Lock()
		o.keys = append(o.keys, e.Key)
		o.mu.Unlock()
	}
}

func (o *renewalSeen) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.keys...)
}

// frozenOne starts one master and a Client on it (node timeout 2s, so a
// renewal sent to the frozen master hangs for up to 2s), and returns the
// server to freeze.
func frozenOne(t *testing.T, opts ...Option) (*redistest.Server, *Client) {
	t.Helper()
	return frozenOneWithin(t, 2*time.Second, opts...)
}

func frozenOneWithin(t *testing.T, nodeTimeout time.Duration, opts ...Option) (*redistest.Server, *Client) {
	t.Helper()
	return oneMaster(t, append([]Option{WithNodeTimeout(nodeTimeout)}, opts...)...)
}

// keep keeps l alive until the test ends, and returns the work's context.
func keep(t *testing.T, l *Lock, opts ...ObtainOption) context.Context {
	t.Helper()
	work, stop, err := l.KeepAlive(t.Context(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return work
}

// oneMaster starts one master and a Client on it, closed when the test
// ends.
func oneMaster(t *testing.T, opts ...Option) (*redistest.Server, *Client) {
	t.Helper()
	srv := redistest.Start(t, 1)[0]
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return srv, newClient(t, []redis.UniversalClient{rdb}, opts...)
}

// freeze SIGSTOPs srv until the test ends.
func freeze(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Cont() })
}

// TestAHangingRenewalDoesNotStarveAnotherLocksWatchdog: while a worker
// waits on a renewal sent to a master that does not answer (for up to its
// node timeout), another lock whose validity runs out meanwhile still has
// its work told before the validity ends: it gets a worker of its own, and
// the timer tells it at its margin when none is free.
func TestAHangingRenewalDoesNotStarveAnotherLocksWatchdog(t *testing.T) {
	srv, c := frozenOne(t)
	long := obtainOn(t, c, "long", 30*time.Second)
	short := obtainOn(t, c, "short", time.Second)
	keep(t, long, WithRenewEvery(50*time.Millisecond))
	work := keep(t, short)
	freeze(t, srv) // long's first renewal (in ~50ms) hangs for 2s

	for short.Validity() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // grace
	if work.Err() == nil {
		t.Fatal("the short lock's validity ended 200ms ago and its work was not told: its watchdog waits for the worker hanging on the long lock's renewal")
	}
	if cause := context.Cause(work); !errors.Is(cause, ErrLockExpiring) {
		t.Logf("work told, but with %v (want ErrLockExpiring: told at the margin)", cause)
	}
}

// TestAHangingRenewalDoesNotStarveAnotherLocksWatchdogByDefault is the
// test above with the default node timeout (ttl/10, at most 500ms): a
// renewal of a 30s lock on a frozen master waits 500ms, longer than a
// 400ms lock's whole validity.
func TestAHangingRenewalDoesNotStarveAnotherLocksWatchdogByDefault(t *testing.T) {
	srv := redistest.Start(t, 1)[0]
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, []redis.UniversalClient{rdb})
	long := obtainOn(t, c, "long", 30*time.Second)
	keep(t, long)
	short := obtainOn(t, c, "short", 400*time.Millisecond)
	work := keep(t, short)
	freeze(t, srv)
	dueNow(c, long) // its renewal hangs for the node timeout, 500ms
	for short.Validity() > 0 {
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
	if work.Err() == nil {
		t.Fatal("the 400ms lock's validity ended and its work was not told: its watchdog waits for the worker hanging on the 30s lock's renewal")
	}
}

// TestStopDoesNotWaitForAnotherLocksRenewal: stop aborts its own renewal
// in flight and returns without waiting for a master, also when its turn
// shares a worker's batch with another lock's renewal that hangs: the
// worker completes each turn as its answers come, or its renewal is cut.
func TestStopDoesNotWaitForAnotherLocksRenewal(t *testing.T) {
	obs := &renewalSeen{}
	srv, c := frozenOne(t, WithObserver(obs))
	a := obtainOn(t, c, "a", 30*time.Second) // its validity ends first: slot 0
	b := obtainOn(t, c, "b", 30*time.Second)
	keep(t, a)
	_, stopB, err := b.KeepAlive(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	freeze(t, srv)
	dueNow(c, a, b) // in one batch
	r := c.renewerOf()
	redistest.Eventually(t, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if a.dog.state != dogTurn || b.dog.state != dogTurn {
			return errors.New("not both in their turn yet")
		}
		return nil
	})
	time.Sleep(50 * time.Millisecond) // both renewals sent
	stopB()
	if got := obs.seen(); slices.Contains(got, "a") {
		t.Fatalf("stop of b returned only after the renewals %v ended: it waited for a's renewal hanging on the frozen master", got)
	}
}

// dueNow makes the watchdogs of locks due now, and runs the tick: their
// turns share one batch, in the order their validity ends.
func dueNow(c *Client, locks ...*Lock) {
	r := c.renewerOf()
	r.mu.Lock()
	for _, l := range locks {
		w := l.dog
		w.arm(time.Now(), 0)
		r.wait(w)
	}
	r.mu.Unlock()
	r.tick()
}

// TestWorkIsToldAtItsMarginWhenItsBatchHangs: two locks whose renewals
// share a batch while the master hangs; a's renewal may run until a's
// (small) margin, b's only until b's (large) one. b's work is told when
// b's validity is down to b's margin, whatever a's renewal waits for.
func TestWorkIsToldAtItsMarginWhenItsBatchHangs(t *testing.T) {
	srv, c := frozenOneWithin(t, 2500*time.Millisecond)
	a := obtainOn(t, c, "a", 3*time.Second) // its validity ends first: slot 0
	b := obtainOn(t, c, "b", 3*time.Second)
	keep(t, a, WithRenewEvery(300*time.Millisecond), WithCancelMargin(10*time.Millisecond))
	const margin = 1200 * time.Millisecond
	work := keep(t, b, WithRenewEvery(300*time.Millisecond), WithCancelMargin(margin))
	freeze(t, srv)
	dueNow(c, a, b)
	<-work.Done()
	left := b.Validity()
	if left < margin-200*time.Millisecond {
		t.Fatalf("b's work told with %v of validity left, want about its cancel margin %v (cause %v)", left, margin, context.Cause(work))
	}
}

// obtainOn obtains key on c for ttl.
func obtainOn(t *testing.T, c *Client, key string, ttl time.Duration) *Lock {
	t.Helper()
	l, err := c.Obtain(t.Context(), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
