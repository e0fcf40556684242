package redlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (r *recorder) Observe(_ context.Context, e redlock.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// all returns the events of type T seen so far.
func all[T redlock.Event](r *recorder) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []T
	for _, e := range r.events {
		if t, ok := e.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

func TestObserverSeesEveryLocksLife(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	servers, clients, c := cluster(t, 3, redlock.WithObserver(rec), redlock.WithNodeTimeout(100*time.Millisecond))
	other := newClient(t, clients)

	// An obtain, granted by every master.
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	obt := all[*redlock.ObtainEvent](rec)
	if len(obt) != 1 || obt[0].Outcome != redlock.Obtained || obt[0].Attempts != 1 || obt[0].Key != "k" || len(obt[0].Masters) != 3 {
		t.Fatalf("obtain events %+v", obt)
	}
	// A release, with how long the lock was held.
	time.Sleep(20 * time.Millisecond)
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
	_, err = c.Obtain(wctx, "held", time.Minute, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
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

// panicker is an Observer that panics.
type panicker struct{}

func (panicker) Observe(context.Context, redlock.Event) { panic("observer panics") }

func TestObserverPanicIsContained(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3, redlock.WithObserver(panicker{}))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
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

type ctxKey struct{}

// valueHook records the value under ctxKey of the contexts go-redis hooks
// see.
type valueHook struct {
	mu   sync.Mutex
	seen []any
}

func (h *valueHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *valueHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(ctx)
		return next(ctx, cmd)
	}
}
func (h *valueHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(ctx)
		return next(ctx, cmds)
	}
}
func (h *valueHook) record(ctx context.Context) {
	h.mu.Lock()
	h.seen = append(h.seen, ctx.Value(ctxKey{}))
	h.mu.Unlock()
}

// TestCallersContextReachesGoRedis: a go-redis hook sees the caller's
// context values (its span) on the commands a lone caller's call sends,
// inline or through a lane's worker, and never the caller's cancellation.
func TestCallersContextReachesGoRedis(t *testing.T) {
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

// capture is a slog.Handler that keeps records.
type capture struct {
	mu      sync.Mutex
	records []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.records = append(c.records, r)
	c.mu.Unlock()
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func TestSlogObserverLogsALostLock(t *testing.T) {
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
