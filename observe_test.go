package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Observers, slog and go-redis hooks see every lock's life, with the right
// reasons, and never a failure that did not happen.

// TestObserverSeesEveryLocksLife: an Observer sees each obtain (with its
// attempts and every master's answer), each release (with how long the
// lock was held), the renewals that failed, the lost lock, and the masters
// that stopped answering and came back.
func TestObserverSeesEveryLocksLife(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	// A node timeout a loaded machine's healthy master keeps: the test
	// asserts that the live master is never reported down.
	servers, clients, c := cluster(t, 3, redlock.WithObserver(rec), redlock.WithNodeTimeout(250*time.Millisecond))
	other := newClient(t, clients)

	// An obtain, granted by every master.
	l := obtain(t, c, "k", time.Minute)
	obt := all[*redlock.ObtainEvent](rec)
	if len(obt) != 1 || obt[0].Outcome != redlock.Obtained || obt[0].Attempts != 1 || obt[0].Key != "k" || len(obt[0].Masters) != 3 {
		t.Fatalf("obtain events %+v", obt)
	}
	// A release, with how long the lock was held.
	work(20 * time.Millisecond) // the lock is held that long
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rel := all[*redlock.ReleaseEvent](rec)
	if len(rel) != 1 || rel[0].Outcome != redlock.Released || rel[0].Held < 20*time.Millisecond {
		t.Fatalf("release events %+v", rel)
	}

	// A contended obtain that waits and gives up: taken, several attempts,
	// each master's answer.
	if _, err := other.Obtain(ctx, "held", time.Minute); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := c.Obtain(wctx, "held", time.Minute, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	cancel()
	obt = all[*redlock.ObtainEvent](rec)
	last := obt[len(obt)-1]
	if !errors.Is(err, redlock.ErrTaken) || last.Outcome != redlock.Taken || last.Attempts < 2 || last.Wait < 90*time.Millisecond || last.Err != err {
		t.Fatalf("contended obtain: err %v, event %+v", err, last)
	}
	taken := 0
	for _, n := range last.Masters {
		if errors.Is(n.Err, redlock.ErrTaken) {
			taken++
		}
	}
	if taken < 2 {
		t.Fatalf("contended obtain's masters %v, want them held by another owner", last.Masters)
	}

	// Renewals that fail while two masters are frozen, a lost lock when the
	// validity runs out, and the masters that stopped answering.
	l, err = c.Obtain(ctx, "job", 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[:2]...)
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was never declared lost")
	}
	stop()
	renewals := all[*redlock.ExtendEvent](rec)
	failed := 0
	for _, e := range renewals {
		if e.Renewal && e.Outcome == redlock.Unavailable && e.Key == "job" {
			failed++
		}
	}
	lost := all[*redlock.LostEvent](rec)
	if failed == 0 || len(lost) != 1 || lost[0].Key != "job" || !errors.Is(lost[0].Cause, redlock.ErrLockLost) || lost[0].SinceRenewal <= 0 {
		t.Fatalf("%d failed renewals, lost events %+v", failed, lost)
	}
	down := map[string]bool{}
	for _, e := range all[*redlock.MasterEvent](rec) {
		if !e.Up {
			down[e.Addr] = true
		}
	}
	if !down[servers[0].Addr()] || !down[servers[1].Addr()] || down[servers[2].Addr()] {
		t.Fatalf("masters reported down: %v, want the two frozen", down)
	}
	// They come back: the next answers say so.
	for _, s := range servers[:2] {
		s.Cont()
	}
	redistest.Eventually(t, func() error {
		if l, err := c.Obtain(ctx, "again", time.Minute); err == nil {
			_ = l.Release(ctx)
		}
		up := 0
		for _, e := range all[*redlock.MasterEvent](rec) {
			if e.Up {
				up++
			}
		}
		if up < 2 {
			return errors.New("the masters' recovery was not reported")
		}
		return nil
	})
}

// TestObserverPanicIsContained: an Observer that panics costs the lock
// nothing: Obtain, Extend and Release go on.
func TestObserverPanicIsContained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := cluster(t, 3, redlock.WithObserver(panicker{}))
	l := obtain(t, c, "k", time.Minute)
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := redlock.New(nil, redlock.WithObserver(nil)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("New with no masters and a nil observer: %v", err)
	}
}

// TestOutageIsNoRefusal: LostReason's doc: Refused is "a renewal was
// refused: another owner, or the key gone from too many masters"; RanOut
// is "renewals failed (or none completed) until the validity ran out". A
// majority frozen, with nobody else near the lock, is RanOut (a renewal
// still waiting on the frozen masters when the validity ends), never
// reported to metrics and logs as another owner taking the lock.
func TestOutageIsNoRefusal(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	servers, _, c := cluster(t, 3, redlock.WithObserver(rec), redlock.WithNodeTimeout(300*time.Millisecond))
	l := obtain(t, c, "job", time.Second)
	lctx, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "frozen", servers[:2]...)
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was never declared lost")
	}
	stop()
	lostOnce(t, rec, redlock.RanOut, "a majority frozen, nobody else near the lock")
}

// TestLockRefusedToItsOwnExtendIsRefused: when the caller's own Extend is
// the one refused (another owner holds the key on two masters), the
// watchdog reports the loss as Refused, with the Extend's error, not as
// RanOut ("was the process paused?"): metrics and logs must not blame a
// pause or an outage for a lock another owner took.
func TestLockRefusedToItsOwnExtendIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	_, clients, c := cluster(t, 3, redlock.WithObserver(rec))
	l := obtain(t, c, "job", 3*time.Second)
	lctx, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, m := range clients[1:] { // the key went to another owner on two masters
		if err := m.Set(ctx, "job", "another-owner", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Extend(ctx, 3*time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with another owner on two of three masters: %v, want ErrLockLost", err)
	}
	select {
	case <-lctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the watchdog's context is not done after Extend found the lock refused")
	}
	stop()
	lostOnce(t, rec, redlock.Refused, "another owner holds the key on two of three masters")
}

// TestCallersContextReachesGoRedis: a go-redis hook sees the caller's
// context values (its span) on the commands a lone caller's call sends,
// inline or through a lane's worker, and never the caller's cancellation.
func TestCallersContextReachesGoRedis(t *testing.T) {
	t.Parallel()
	for _, bounded := range []bool{true, false} {
		servers := redistest.Start(t, 1)
		rdb := servers[0].Client(func(o *redis.Options) { o.ContextTimeoutEnabled = bounded })
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		h := &valueHook{}
		rdb.AddHook(h)
		c := newClient(t, []redis.UniversalClient{rdb})
		ctx := context.WithValue(context.Background(), ctxKey{}, "span-1")
		l, err := c.Obtain(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "span-2"))
		if err := l.Release(cctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		h.mu.Lock()
		seen := h.seen
		h.mu.Unlock()
		var got []string // distinct in a row: a call may send several commands (a connection's CLIENT INFO)
		for _, v := range seen {
			if s, ok := v.(string); ok && (len(got) == 0 || got[len(got)-1] != s) {
				got = append(got, s)
			}
		}
		if strings.Join(got, ",") != "span-1,span-2" {
			t.Fatalf("inline=%v: hooks saw %v, want span-1 then span-2", bounded, seen)
		}
	}
}

// TestSlogObserverLogsALostLock: SlogObserver logs a lost lock at Warn,
// with its key.
func TestSlogObserverLogsALostLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := &capture{}
	_, clients, c := cluster(t, 3, redlock.WithObserver(redlock.SlogObserver(slog.New(h))))
	err := c.Do(ctx, "job", time.Second, func(ctx context.Context) error {
		for _, rdb := range clients {
			rdb.Set(ctx, "job", "intruder", time.Minute)
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}, redlock.WithRenewEvery(50*time.Millisecond))
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Message == "redlock: lock lost" && r.Level == slog.LevelWarn {
			key := ""
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "key" {
					key = a.Value.String()
				}
				return true
			})
			if key != "job" {
				t.Fatalf("lost-lock record's key %q", key)
			}
			return
		}
	}
	t.Fatalf("no lost-lock record among %d", len(h.records))
}

// TestReleaseDuringARenewalLogsNoFailure: a Release cancels the watchdog's
// renewal in flight, and that cancelled renewal is no failure: a clean
// Release on a slow network logs nothing at Warn ("redlock: renewal
// failed" is what a user's alert would watch).
func TestReleaseDuringARenewalLogsNoFailure(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	clients, proxies := proxied(t, servers, true)
	h := &capture{}
	c := newClient(t, clients, redlock.WithNodeTimeout(time.Second), redlock.WithObserver(redlock.SlogObserver(slog.New(h))))
	l := obtain(t, c, "k", 10*time.Second)
	if err := l.Extend(ctx, 10*time.Second); err != nil { // scripts loaded
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.DelayOpen(100*time.Millisecond, 100*time.Millisecond) // slow, not down
	}
	scripts := scriptsRun(t, direct...)
	_, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	redistest.Eventually(t, func() error { // a renewal reached the masters: its answers are 100ms away
		if scriptsRun(t, direct...) == scripts {
			return errors.New("no renewal yet")
		}
		return nil
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Level >= slog.LevelWarn {
			r.Attrs(func(a slog.Attr) bool { t.Logf("  %s=%v", a.Key, a.Value); return true })
			t.Errorf("a Release that succeeded, on masters that all answered, logged %q at %v", r.Message, r.Level)
		}
	}
}

// seen is what an Observer read of an event while Observe ran.
type seen struct {
	key     string
	outcome redlock.Outcome
	fence   int64
	answers []string // each master's address and answer
	err     error
}

func seenOf(e redlock.Event) (any, seen) {
	answers := func(ms []redlock.NodeError) []string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%s=%v", m.Addr, m.Err))
		}
		return out
	}
	switch e := e.(type) {
	case *redlock.ObtainEvent:
		return e, seen{e.Key, e.Outcome, e.Fence, answers(e.Masters), e.Err}
	case *redlock.ReleaseEvent:
		return e, seen{e.Key, e.Outcome, 0, answers(e.Masters), e.Err}
	case *redlock.ExtendEvent:
		return e, seen{e.Key, e.Outcome, 0, answers(e.Masters), e.Err}
	}
	return nil, seen{}
}

// copier is an Observer that keeps copies of the Obtain, Extend and
// Release events it sees, and which event values it was handed; transient says
// what its Transient answers (panic: it panics).
type copier struct {
	transient string
	mu        sync.Mutex
	seen      []seen
	ptrs      map[any]bool
	kept      []redlock.Event
}

func (c *copier) Transient() bool {
	if c.transient == "panic" {
		panic("Transient")
	}
	return c.transient == "yes"
}

func (c *copier) Observe(_ context.Context, e redlock.Event) {
	p, s := seenOf(e)
	if p == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, s)
	c.ptrs[p] = true
	c.kept = append(c.kept, e)
}

// TestATransientObserversEventsAreReused: a Client hands a
// TransientObserver the same Obtain, Extend and Release event values again, so
// that observing allocates nothing; each time they hold that call's
// values alone, nothing of an earlier call (a refusal's answers, a
// fence). An Observer that is not transient (Transient false, or a
// Transient that panics) gets new events, which it may keep: they keep
// their values (TestEventsAreTheObserversToKeep).
func TestATransientObserversEventsAreReused(t *testing.T) {
	ctx := context.Background()
	obs := &copier{transient: "yes", ptrs: map[any]bool{}}
	servers, clients, c := cluster(t, 3, redlock.WithObserver(obs))
	other := newClient(t, clients)
	held := obtain(t, other, "held", time.Minute)
	defer held.Release(ctx)
	// Obtain returns at a quorum: wait for the last master's grant, or a
	// refusal below could find that master still free.
	redistest.Eventually(t, func() error {
		if n := holdsAll(t, clients, held.Token(), "held"); n != len(clients) {
			return fmt.Errorf("%d of %d masters hold the key", n, len(clients))
		}
		return nil
	})
	want := func(key string, out redlock.Outcome, answer string) seen {
		var answers []string
		for _, s := range servers {
			answers = append(answers, s.Addr()+"="+answer)
		}
		return seen{key: key, outcome: out, answers: answers}
	}
	const cycles = 100
	var wants []seen
	for i := range cycles {
		key := fmt.Sprint("k", i)
		l := obtain(t, c, key, time.Minute)
		wants = append(wants, want(key, redlock.Obtained, "<nil>"))
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		wants = append(wants, want(key, redlock.Extended, "<nil>"))
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wants = append(wants, want(key, redlock.Released, "<nil>"))
		if i%10 == 0 { // a refusal between: its answers are the error's
			_, err := c.Obtain(ctx, "held", time.Minute)
			if !errors.Is(err, redlock.ErrTaken) {
				t.Fatalf("Obtain of a held key: %v", err)
			}
			w := want("held", redlock.Taken, redlock.ErrTaken.Error())
			w.err = err
			wants = append(wants, w)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.seen) != len(wants) {
		t.Fatalf("%d events seen, want %d", len(obs.seen), len(wants))
	}
	// A call returns at a quorum: a master may not have answered yet.
	const noReply = "redlock: no reply before the outcome was decided"
	for i, w := range wants {
		got := obs.seen[i]
		agreed := 0
		for j, a := range got.answers {
			addr, answer, _ := strings.Cut(a, "=")
			if j < len(w.answers) && a == w.answers[j] {
				agreed++
			} else if j >= len(w.answers) || answer != noReply || !strings.HasPrefix(w.answers[j], addr+"=") {
				agreed = -len(got.answers)
			}
		}
		got.answers, w.answers = nil, nil
		if !reflect.DeepEqual(got, w) || len(obs.seen[i].answers) != len(servers) || agreed < 2 {
			t.Fatalf("event %d: seen %+v, want %+v", i, obs.seen[i], wants[i])
		}
	}
	// sync.Pool may drop a value (at random under -race): most of each
	// kind are reused.
	events, values := map[string]int{}, map[string]int{}
	for _, e := range obs.kept {
		events[fmt.Sprintf("%T", e)]++
	}
	for p := range obs.ptrs {
		values[fmt.Sprintf("%T", p)]++
	}
	for kind, n := range events {
		if values[kind] > n/2 {
			t.Errorf("%d %s values for %d events: a transient Observer's events are not reused", values[kind], kind, n)
		}
	}
}

// TestEventsAreTheObserversToKeep: an Observer that is not transient gets
// a new event for each call, and may keep it: what it kept still holds
// that call's values after many more calls.
func TestEventsAreTheObserversToKeep(t *testing.T) {
	for _, transient := range []string{"no", "panic"} {
		t.Run("transient="+transient, func(t *testing.T) {
			ctx := context.Background()
			obs := &copier{transient: transient, ptrs: map[any]bool{}}
			_, _, c := cluster(t, 3, redlock.WithObserver(obs))
			for i := range 50 {
				l := obtain(t, c, fmt.Sprint("k", i), time.Minute)
				if err := l.Extend(ctx, time.Minute); err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.kept) != 150 {
				t.Fatalf("%d events, want 150", len(obs.kept))
			}
			for i, e := range obs.kept {
				if _, now := seenOf(e); !reflect.DeepEqual(now, obs.seen[i]) {
					t.Fatalf("kept event %d holds %+v, was %+v when observed", i, now, obs.seen[i])
				}
			}
			if len(obs.ptrs) != 150 {
				t.Errorf("%d event values for 150 events, want each its own", len(obs.ptrs))
			}
		})
	}
}

// TestATransientObserversEventsAreReusedBesideAKeepingOne: a Client whose
// Observer keeps its events takes no reused event from the pools it does
// not put back into: a transient Observer's Client in the same process,
// used in turn with it, still gets its Obtain events reused.
func TestATransientObserversEventsAreReusedBesideAKeepingOne(t *testing.T) {
	ctx := context.Background()
	transient := &copier{transient: "yes", ptrs: map[any]bool{}}
	keeping := &copier{transient: "no", ptrs: map[any]bool{}}
	_, clients, c := cluster(t, 3, redlock.WithObserver(transient))
	k := newClient(t, clients, redlock.WithObserver(keeping))
	const cycles = 100
	for i := range cycles {
		for _, c := range []*redlock.Client{c, k} {
			l := obtain(t, c, fmt.Sprint("k", i), time.Minute)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	transient.mu.Lock()
	defer transient.mu.Unlock()
	obtains := 0
	for p := range transient.ptrs {
		if _, ok := p.(*redlock.ObtainEvent); ok {
			obtains++
		}
	}
	// sync.Pool may drop a value (at random under -race): most are reused.
	if obtains > cycles/2 {
		t.Errorf("%d Obtain event values for %d Obtains: the keeping Observer's Client took the transient one's", obtains, cycles)
	}
}
