package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// cmdHook is a go-redis hook that shows before the commands about to go
// out, and after the same commands once answered (either may be nil).
type cmdHook struct{ before, after func([]redis.Cmder) }

func (h cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.around([]redis.Cmder{cmd})
		defer h.done([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.around(cmds)
		defer h.done(cmds)
		return next(ctx, cmds)
	}
}
func (h cmdHook) around(cmds []redis.Cmder) {
	if h.before != nil {
		h.before(cmds)
	}
}
func (h cmdHook) done(cmds []redis.Cmder) {
	if h.after != nil {
		h.after(cmds)
	}
}

// onPlainAsk, once armed, runs do just before the first plain SET NX
// carrying the wait mark (a woken head's plain ask) goes out (cmdHook).
type onPlainAsk struct {
	bare  bool // any SET NX, the token alone too
	armed atomic.Bool
	fired atomic.Bool
	do    func()
}

func (o *onPlainAsk) check(cmds []redis.Cmder) {
	for _, c := range cmds {
		a := c.Args()
		if len(a) > 3 && fmt.Sprint(a[0]) == "set" && (o.bare || strings.Contains(fmt.Sprint(a[2]), "!")) && fmt.Sprint(a[3]) == "nx" && o.armed.CompareAndSwap(true, false) {
			o.do()
			o.fired.Store(true)
		}
	}
}

// TestWaitResentPlainAskKeepsTheQueue: the master closes the connection
// under a woken head's plain SET NX (before running it); the transport
// sends it again in a form safe to run twice (acquireAgainScript), which
// must set the same value: the token, the mark and the queue (here the
// Client's own id, for its second waiter). Were it to set the token alone,
// the lock's release would not be announced, and the Client's second
// waiter, which sleeps until that release (the lock's TTL), would sleep
// the whole TTL.
func TestWaitResentPlainAskKeepsTheQueue(t *testing.T) {
	servers := redistest.Start(t, 1)
	hooked := servers[0].Client()
	t.Cleanup(func() { hooked.Close() })
	plain := servers[0].Client()
	t.Cleanup(func() { plain.Close() })
	if err := hooked.Ping(context.Background()).Err(); err != nil { // go-redis sets its options up at its first connection
		t.Fatal(err)
	}
	ctx := t.Context()
	holder := newClient(t, []redis.UniversalClient{plain})
	held, err := holder.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o := &onPlainAsk{do: func() {
		// The master closes every other connection (a CLIENT KILL, a
		// proxy's reset): the waiter's lane's among them.
		if err := plain.Do(context.Background(), "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
			t.Errorf("CLIENT KILL: %v", err)
		}
	}}
	hooked.AddHook(cmdHook{before: o.check})
	w := newClient(t, []redis.UniversalClient{hooked}, redlock.WithNodeTimeout(500*time.Millisecond))
	first := waitFor(ctx, w, "k", 20*time.Second)
	ids := queuedN(t, plain, "k", 1)
	second := waitFor(ctx, w, "k", 20*time.Second)
	subscribed(t, plain)
	time.Sleep(700 * time.Millisecond) // confirmed: the waiters rely on the wake-up
	o.armed.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := wokenBy(t, first, time.Now(), 5*time.Second)
	if !o.fired.Load() {
		t.Fatal("no plain SET NX with the mark went out")
	}
	if q := queueOf(t, plain, "k"); fmt.Sprint(q) != fmt.Sprint(ids) {
		t.Errorf("the first waiter holds the key as %q: queue %q, want %q (its Client again, for the second waiter)", get(t, plain, "k"), q, ids)
	}
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := wokenBy(t, second, released, 5*time.Second)
	l2.Release(ctx)
}

// TestWaitSplitPlainAskDoesNotSpin: N=3. A woken head's plain ask meets a
// split: the gate is free (the other owner's key there lost, as in a
// restart), the other two masters hold the key for another owner. The
// grant at the gate is undone, and the undo, a release of a value with
// the turn queue (this Client first: it has a second waiter), announces
// the key on the gate with the turn this Client's. The head takes that
// announcement of its own undo for a release of the key and asks with a
// plain SET NX again (and again after each sleep), never marking the two
// masters that refuse it: it asks over and over while the other owner
// holds the lock, where the script's ask would mark them, sleep, and ask
// once more at their release.
func TestWaitSplitPlainAskDoesNotSpin(t *testing.T) {
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	o := &onPlainAsk{}
	var late atomic.Bool
	var hooked []redis.UniversalClient
	var arms []*sharedArm
	for i, s := range servers {
		rdb := s.Client()
		t.Cleanup(func() { rdb.Close() })
		if err := rdb.Ping(context.Background()).Err(); err != nil { // go-redis sets its options up at its first connection
			t.Fatal(err)
		}
		h := &onPlainAsk{do: func() {
			// The first master to see the plain ask is the gate: the
			// other owner takes the other two.
			for j, d := range direct {
				if j != i {
					if ok, err := d.SetNX(context.Background(), "k", "other-owner-token", 3*time.Second).Result(); err != nil {
						t.Errorf("SET on master %d: %v", j, err)
					} else if !ok {
						late.Store(true) // the ask was not gated: it reached master j first
					}
				}
			}
		}}
		h.armed.Store(false)
		arm := &sharedArm{shared: o, own: h}
		arms = append(arms, arm)
		rdb.AddHook(cmdHook{before: arm.check, after: arm.slowRelease})
		hooked = append(hooked, rdb)
	}
	ctx := t.Context()
	holder := newClient(t, direct, redlock.WithNodeTimeout(500*time.Millisecond))
	held := heldOnAll(t, holder, direct)
	w := newClient(t, hooked, redlock.WithNodeTimeout(500*time.Millisecond))
	gate := redlock.GateOf(w, "k")
	first := waitFor(ctx, w, "k", 20*time.Second)
	for _, d := range direct {
		queuedN(t, d, "k", 1)
	}
	second := waitFor(ctx, w, "k", 20*time.Second)
	subscribedAll(t, direct)
	o.armed.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if !o.fired.Load() {
			return fmt.Errorf("no plain ask yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second) // the other owner holds the key on a majority
	if late.Load() {
		t.Skip("the plain ask was not gated this time: it reached the other masters before the other owner")
	}
	asks := arms[gate].asks.Load()
	t.Logf("gate %d: %d plain SETs in 2s while another owner held a majority", gate, asks)
	if asks > 2 { // the first, and one at late announcements of the release
		t.Errorf("the head asked the gate %d times in 2s with a plain SET NX while another owner held the key on the other two masters: it takes its own undo's announcement for a release", asks)
	}
	for _, ch := range []<-chan waited{first, second} {
		if l := wokenBy(t, ch, time.Now(), 5*time.Second); l != nil {
			l.Release(ctx)
		}
	}
}

// sharedArm arms a master's onPlainAsk from one switch shared by the
// masters: the first master to see the plain ask runs its hook's do.
type sharedArm struct {
	shared, own *onPlainAsk
	asks        atomic.Int64 // plain asks this master saw
}

// slowRelease, once the plain ask went out, holds a release's reply (the
// undo's) for a few milliseconds: its announcement, on the subscription's
// connection, comes first, as it may on a loaded machine.
func (s *sharedArm) slowRelease(cmds []redis.Cmder) {
	if !s.shared.fired.Load() {
		return
	}
	for _, c := range cmds {
		if a := c.Args(); len(a) > 1 && fmt.Sprint(a[0]) == "evalsha" && fmt.Sprint(a[1]) == "6b2baaef7dfd2366277cc90b3dd99138e87ba0c1" { // releaseScript
			time.Sleep(5 * time.Millisecond)
			return
		}
	}
}
func (s *sharedArm) check(cmds []redis.Cmder) {
	for _, c := range cmds {
		a := c.Args()
		if len(a) < 4 || fmt.Sprint(a[0]) != "set" || !strings.Contains(fmt.Sprint(a[2]), "!") || fmt.Sprint(a[3]) != "nx" {
			continue
		}
		s.asks.Add(1)
		if s.shared.armed.CompareAndSwap(true, false) {
			s.own.do()
			s.shared.fired.Store(true)
		}
	}
}

// TestWaitEndedAfterARefusedPlainAskSaysTaken: a head's first ask is the
// plain one (it slept behind its own Client's lock, whose release gave it
// the turn), another Client takes the key first, and the waiter's context
// ends during the script's ask that follows. The plain ask's refusal is
// this Obtain's only answer from the master, and it said "held": the wait
// must end matching ErrTaken, not ErrUnavailable (too few masters
// answered), as it did when the first ask was the script.
func TestWaitEndedAfterARefusedPlainAskSaysTaken(t *testing.T) {
	servers := redistest.Start(t, 1)
	hooked := servers[0].Client()
	t.Cleanup(func() { hooked.Close() })
	plain := servers[0].Client()
	t.Cleanup(func() { plain.Close() })
	if err := hooked.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	holder := newClient(t, []redis.UniversalClient{plain})
	taker := newClient(t, []redis.UniversalClient{plain})
	held, err := holder.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var taken atomic.Pointer[redlock.Lock]
	var scriptAfter atomic.Bool
	o := &onPlainAsk{bare: true, do: func() {
		l, err := taker.Obtain(context.Background(), "k", 20*time.Second)
		if err != nil {
			t.Errorf("the taker: %v", err)
			return
		}
		taken.Store(l)
		scriptAfter.Store(true)
	}}
	hooked.AddHook(cmdHook{before: o.check})
	hooked.AddHook(cmdHook{before: (&onScript{armed: &scriptAfter, do: func() {
		cancel()
		time.Sleep(50 * time.Millisecond) // the ask's reply comes after the context ended
	}}).check})
	w := newClient(t, []redis.UniversalClient{hooked})
	first := waitFor(ctx, w, "k", 20*time.Second)
	queuedN(t, plain, "k", 1)
	second := waitFor(bctx, w, "k", 20*time.Second)
	subscribed(t, plain)
	time.Sleep(700 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := wokenBy(t, first, time.Now(), 5*time.Second) // its value queues its Client again: the second sleeps behind it
	o.armed.Store(true)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w2 := outcome(t, second, 5*time.Second)
	if tl := taken.Load(); tl != nil {
		defer tl.Release(ctx)
	} else {
		t.Fatalf("the second waiter sent no plain ask: %v, %v", w2.err, w2.took)
	}
	if w2.err == nil {
		t.Fatal("the second waiter obtained a key another Client holds")
	}
	if !errors.Is(w2.err, redlock.ErrTaken) {
		t.Errorf("the wait ended after the master answered \"held\": %v; want it to match ErrTaken, not ErrUnavailable", w2.err)
	}
}

// onScript, once armed, runs do just before the
// next EVALSHA goes out.
type onScript struct {
	armed *atomic.Bool
	do    func()
}

func (o *onScript) check(cmds []redis.Cmder) {
	for _, c := range cmds {
		if fmt.Sprint(c.Args()[0]) == "evalsha" && o.armed.CompareAndSwap(true, false) {
			o.do()
		}
	}
}
