package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// go-redis hooks, Observers and a retry strategy the tests plug into a
// Client or its go-redis clients, to see or steer what it sends: counters
// and recorders, and hooks that panic, refuse, hold or answer a command.

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

// counts is a go-redis hook that counts the round trips of a client (a
// command or a pipeline each), and the commands match takes (nil: none)
// as they go out (sent), once answered or given up on (answered), and
// once the master ran them: answered with a reply, not an error (ran).
type counts struct {
	match                      func(redis.Cmder) bool
	trips, sent, answered, ran atomic.Int64
}

func (h *counts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *counts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		h.add(&h.sent, cmd)
		err := next(ctx, cmd)
		h.add(&h.answered, cmd)
		h.addRan(cmd)
		return err
	}
}

func (h *counts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		h.add(&h.sent, cmds...)
		err := next(ctx, cmds)
		h.add(&h.answered, cmds...)
		h.addRan(cmds...)
		return err
	}
}

func (h *counts) add(n *atomic.Int64, cmds ...redis.Cmder) {
	for _, c := range cmds {
		if h.match != nil && h.match(c) {
			n.Add(1)
		}
	}
}

func (h *counts) addRan(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if err := c.Err(); err == nil || err == redis.Nil {
			h.add(&h.ran, c)
		}
	}
}

// scriptsRanOn adds to each client a counts of its scripts; add it before
// the client sends anything.
func scriptsRanOn(clients ...redis.UniversalClient) []*counts {
	cs := make([]*counts, len(clients))
	for i, rdb := range clients {
		cs[i] = &counts{match: isScript}
		rdb.AddHook(cs[i])
	}
	return cs
}

// ranNow returns how many scripts each master has run (counts.ran).
func ranNow(cs []*counts) []int64 {
	n := make([]int64, len(cs))
	for i, c := range cs {
		n[i] = c.ran.Load()
	}
	return n
}

// ranPast waits until each master has run more scripts than n says
// (ranNow): a request kept for it (a Release that got no answer) went out
// and ran.
func ranPast(t *testing.T, cs []*counts, n []int64) {
	t.Helper()
	redistest.Eventually(t, func() error {
		for i, c := range cs {
			if got := c.ran.Load(); got <= n[i] {
				return fmt.Errorf("master %d of these ran %d scripts, want more than %d", i, got, n[i])
			}
		}
		return nil
	})
}

// isScript matches the lock scripts (EVALSHA, EVAL).
func isScript(c redis.Cmder) bool {
	n := strings.ToLower(c.Name())
	return n == "evalsha" || n == "eval"
}

// isLockCommand matches what a lock request sends: a SET or a script.
func isLockCommand(c redis.Cmder) bool {
	return isScript(c) || strings.ToLower(c.Name()) == "set"
}

// lockTrips counts a client's round trips (a command, or a pipeline) of
// two kinds: those that carry a lock command (a SET or a script), and
// those that carry none but a CLIENT command: a lane's round trip to set
// up a connection it takes (CLIENT INFO, the barrier's kills), apart from
// its batch. Add it before the Client's lanes take their connections.
type lockTrips struct{ lock, setup atomic.Int64 }

func (h *lockTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lockTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *lockTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *lockTrips) count(cmds []redis.Cmder) {
	lock, client := false, false
	for _, c := range cmds {
		lock = lock || isLockCommand(c)
		client = client || strings.EqualFold(c.Name(), "client")
	}
	switch {
	case lock:
		h.lock.Add(1)
	case client:
		h.setup.Add(1)
	}
}

// trips returns the lock and setup round trips counted so far.
func (h *lockTrips) trips() (lock, setup int64) { return h.lock.Load(), h.setup.Load() }

// waitCounter counts the WAITs a client sends, and fails the test when a
// pipeline carries more than one or one not at its end.
type waitCounter struct {
	t     *testing.T
	mu    sync.Mutex
	waits int // WAIT commands sent
	cmds  int // commands sent, WAITs included
	kills int // CLIENT KILLs of a connection given up (the barrier), not the probe
}

func (w *waitCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *waitCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (w *waitCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		w.count(cmds)
		return next(ctx, cmds)
	}
}

func (w *waitCounter) count(cmds []redis.Cmder) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for i, c := range cmds {
		w.cmds++
		if a := c.Args(); len(a) > 3 && c.Name() == "client" && a[1] == "kill" && a[3] != int64(math.MaxInt64) {
			w.kills++
		}
		if c.Name() == "wait" {
			n++
			if i != len(cmds)-1 {
				w.t.Errorf("a WAIT at %d of a pipeline of %d: it must follow every write", i, len(cmds))
			}
		}
	}
	if n > 1 {
		w.t.Errorf("%d WAITs in one pipeline", n)
	}
	w.waits += n
}

func (w *waitCounter) get() (waits, cmds, kills int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waits, w.cmds, w.kills
}

// releases is a go-redis hook that notes the token of every Release of
// "k" (releaseScript: EVALSHA sha 1 k token) its client sends.
type releases struct {
	mu     sync.Mutex
	tokens []string
	at     []time.Time // when each of tokens' Releases was sent
}

func (h *releases) note(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		a := c.Args()
		if len(a) == 5 && (a[0] == "evalsha" || a[0] == "eval") && a[3] == "k" {
			h.tokens = append(h.tokens, fmt.Sprint(a[4]))
			h.at = append(h.at, time.Now())
		}
	}
}

func (h *releases) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.tokens)
}

func (h *releases) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *releases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}

func (h *releases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(cmds...)
		return next(ctx, cmds)
	}
}

// valueHook records the value under ctxKey of the contexts go-redis hooks
// see.
type valueHook struct {
	mu   sync.Mutex
	seen []any
}

type ctxKey struct{}

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

// faulty is a go-redis hook that, while armed, fails the commands and
// pipelines it sees without sending them, as a circuit breaker or a rate
// limiter does (go-redis's own Options.Limiter fails commands the same
// way): it returns errRefused, or, with panics, panics (a tracing hook
// with a bug). With once, it disarms itself at the first.
type faulty struct {
	armed        atomic.Bool
	once, panics bool
}

var errRefused = errors.New("circuit open")

func (h *faulty) fail() error {
	if h.once && !h.armed.CompareAndSwap(true, false) || !h.once && !h.armed.Load() {
		return nil
	}
	if h.panics {
		panic("hook panics")
	}
	return errRefused
}

func (h *faulty) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faulty) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.fail(); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *faulty) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.fail(); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// pipeRecorder panics on the pipelines it sees while armed, remembering
// their commands, and records the commands of every pipeline otherwise.
type pipeRecorder struct {
	mu       sync.Mutex
	armed    bool
	panicked []redis.Cmder   // the commands of the pipeline it panicked on
	sent     [][]redis.Cmder // the pipelines that went on
}

func (p *pipeRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pipeRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *pipeRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.mu.Lock()
		if p.armed {
			p.armed = false
			p.panicked = slices.Clone(cmds)
			p.mu.Unlock()
			panic("hook panics")
		}
		p.sent = append(p.sent, slices.Clone(cmds))
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

// lateSpanHook is a go-redis hook that panics after the pipeline has run
// (ending a span, say), on the lane's CLIENT INFO pipeline, while left > 0.
type lateSpanHook struct{ left atomic.Int32 }

func (h *lateSpanHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateSpanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *lateSpanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 0 && len(cmds[0].Args()) > 1 && cmds[0].Args()[0] == "client" && cmds[0].Args()[1] == "info" && h.left.Add(-1) >= 0 {
			panic("hook panics after the pipeline ran")
		}
		return err
	}
}

// failRaise fails, after a pause (a slow master), the command or the
// pipeline that carries a fence raise (an EVALSHA whose last argument is
// the fence, 11 here), without sending it.
type failRaise struct{}

var errRaise = errors.New("raise failed")

func (failRaise) fail(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if a := c.Args(); c.Name() == "evalsha" && len(a) == 7 && fmt.Sprint(a[6]) == "11" {
			time.Sleep(300 * time.Millisecond) // the other masters' answers come first
			for _, c := range cmds {
				c.SetErr(errRaise)
			}
			return true
		}
	}
	return false
}

func (failRaise) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failRaise) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if h.fail(c) {
			return errRaise
		}
		return next(ctx, c)
	}
}

func (h failRaise) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.fail(cmds...) {
			return errRaise
		}
		return next(ctx, cmds)
	}
}

// gateHook, once armed, holds the first script it sees, after the master
// answered it, until open is closed: a caller's Extend that the master ran,
// its call still holding the lock.
type gateHook struct {
	mu     sync.Mutex
	armed  bool
	inside chan struct{}
	open   chan struct{}
}

func (h *gateHook) hold(cmds []redis.Cmder) {
	h.mu.Lock()
	hit := h.armed && slices.ContainsFunc(cmds, isScript)
	if hit {
		h.armed = false
	}
	h.mu.Unlock()
	if hit {
		close(h.inside)
		<-h.open
	}
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.hold([]redis.Cmder{cmd})
		return err
	}
}

func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.hold(cmds)
		return err
	}
}

// dialHook runs f (when set) in every dial of the client it is added to.
type dialHook struct {
	f atomic.Pointer[func()]
}

// dialPanics is the f of a dialHook whose dials panic.
func dialPanics() { panic("dial hook panics") }

func (h *dialHook) set(f func()) {
	if f == nil {
		h.f.Store(nil)
		return
	}
	h.f.Store(&f)
}

func (h *dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if f := h.f.Load(); f != nil {
			(*f)()
		}
		return next(ctx, network, addr)
	}
}

func (h *dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// zeroNumSub makes every PUBSUB NUMSUB answer 0, as a proxy in front of
// several servers might.
type zeroNumSub struct{}

func (zeroNumSub) DialHook(next redis.DialHook) redis.DialHook { return next }

func (zeroNumSub) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.MapStringIntCmd); ok && cmd.Name() == "pubsub" {
			m := map[string]int64{}
			for k := range c.Val() {
				m[k] = 0
			}
			c.SetVal(m)
		}
		return err
	}
}

func (zeroNumSub) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isPlainAsk matches a plain SET NX; with marked, one whose value carries
// the wait mark (a woken head's plain ask).
func isPlainAsk(c redis.Cmder, marked bool) bool {
	a := c.Args()
	return len(a) > 3 && fmt.Sprint(a[0]) == "set" && (!marked || strings.Contains(fmt.Sprint(a[2]), "!")) && fmt.Sprint(a[3]) == "nx"
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
		if isPlainAsk(c, !o.bare) && o.armed.CompareAndSwap(true, false) {
			o.do()
			o.fired.Store(true)
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
			time.Sleep(5 * time.Millisecond) // the reply comes after the announcement
			return
		}
	}
}

func (s *sharedArm) check(cmds []redis.Cmder) {
	for _, c := range cmds {
		if !isPlainAsk(c, true) {
			continue
		}
		s.asks.Add(1)
		if s.shared.armed.CompareAndSwap(true, false) {
			s.own.do()
			s.shared.fired.Store(true)
		}
	}
}

// onScript, once armed, runs do just before the next EVALSHA goes out.
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

// lostOnce fails the test unless r saw exactly one LostEvent, with
// reason; why says what the test set up.
func lostOnce(t *testing.T, r *recorder, reason redlock.LostReason, why string) {
	t.Helper()
	lost := all[*redlock.LostEvent](r)
	if len(lost) != 1 || lost[0].Reason != reason {
		for _, e := range lost {
			t.Logf("lost: %s: %v", e.Reason, e.Cause)
		}
		t.Fatalf("%s: %d lost events, want one with reason %q", why, len(lost), reason)
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

func (c *capture) WithGroup(string) slog.Handler { return c }

// panicker is an Observer that panics.
type panicker struct{}

func (panicker) Observe(context.Context, redlock.Event) { panic("observer panics") }

// retryWhileTaken is a user's own strategy: wait while another owner holds
// the lock, give up at once when the masters are unavailable.
type retryWhileTaken struct{ calls *atomic.Int32 }

func (s retryWhileTaken) NextWait(n int, last error) (time.Duration, bool) {
	s.calls.Add(1)
	return 5 * time.Millisecond, errors.Is(last, redlock.ErrTaken)
}
