package redlockotel_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/redlockotel"
)

// TestContendedObtainAndRelease: an Obtain that waits for a lock held by
// another owner and gives up (taken), then one that gets it and a Release.
// The metrics count each by outcome, with their waits and the hold; the
// spans are children of the caller's span, cover the wait, and carry each
// master's answer; and the commands' own spans (a go-redis tracing hook's)
// are children of the caller's span too.
func TestContendedObtainAndRelease(t *testing.T) {
	bg := context.Background()
	tel := newTelemetry(t)
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	for _, rdb := range clients {
		rdb.AddHook(tracingHook{tel.tp.Tracer("test/redis")})
	}
	c := observed(t, clients, tel)
	other, err := redlock.New(redistest.Clients(t, servers)) // another owner, neither observed nor traced
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held, err := other.Obtain(bg, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	ctx, caller := tel.caller(bg)
	const wait = 100 * time.Millisecond
	wctx, cancel := context.WithTimeout(ctx, wait)
	_, err = c.Obtain(wctx, "k", time.Minute, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	cancel()
	if !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("contended Obtain: %v, want ErrTaken", err)
	}
	if err := held.Release(bg); err != nil {
		t.Fatal(err)
	}
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const hold = 20 * time.Millisecond
	time.Sleep(hold)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()

	m := tel.collect(t)
	if got := m.sum(t, "redlock.obtains", outcome(redlock.Taken)); got != 1 {
		t.Errorf("redlock.obtains{taken} = %d, want 1", got)
	}
	if got := m.sum(t, "redlock.obtains", outcome(redlock.Obtained)); got != 1 {
		t.Errorf("redlock.obtains{obtained} = %d, want 1", got)
	}
	if got := m.sum(t, "redlock.obtain.attempts", outcome(redlock.Taken)); got < 2 {
		t.Errorf("redlock.obtain.attempts{taken} = %d, want the retries counted (>= 2)", got)
	}
	if got := m.sum(t, "redlock.obtain.attempts", outcome(redlock.Obtained)); got != 1 {
		t.Errorf("redlock.obtain.attempts{obtained} = %d, want 1", got)
	}
	if h := m.hist(t, "redlock.obtain.duration", outcome(redlock.Taken)); h.Count != 1 || h.Sum < (wait/2).Seconds() {
		t.Errorf("redlock.obtain.duration{taken}: count %d, sum %gs; want 1 wait of about %v", h.Count, h.Sum, wait)
	}
	if h := m.hist(t, "redlock.obtain.duration", outcome(redlock.Obtained)); h.Count != 1 {
		t.Errorf("redlock.obtain.duration{obtained}: count %d, want 1", h.Count)
	}
	if got := m.sum(t, "redlock.releases", outcome(redlock.Released)); got != 1 {
		t.Errorf("redlock.releases{released} = %d, want 1", got)
	}
	if h := m.hist(t, "redlock.hold.duration", outcome(redlock.Released)); h.Count != 1 || h.Sum < hold.Seconds() {
		t.Errorf("redlock.hold.duration{released}: count %d, sum %gs; want 1 hold of at least %v", h.Count, h.Sum, hold)
	}
	// Units and buckets.
	for name, unit := range map[string]string{"redlock.obtain.duration": "s", "redlock.hold.duration": "s",
		"redlock.obtains": "{obtain}", "redlock.obtain.attempts": "{attempt}", "redlock.releases": "{release}"} {
		if got := m.get(t, name).Unit; got != unit {
			t.Errorf("%s: unit %q, want %q", name, got, unit)
		}
	}
	if b := m.hist(t, "redlock.obtain.duration", outcome(redlock.Taken)).Bounds; len(b) == 0 || b[0] != 0.0005 || b[len(b)-1] != 60 {
		t.Errorf("redlock.obtain.duration's buckets %v, want 0.5ms to 60s", b)
	}
	if b := m.hist(t, "redlock.hold.duration", outcome(redlock.Released)).Bounds; len(b) == 0 || b[len(b)-1] != 3600 {
		t.Errorf("redlock.hold.duration's buckets %v, want up to an hour", b)
	}
	// No lock key on any metric by default.
	for name := range m {
		for _, set := range m.points(name) {
			if set.HasValue(redlockotel.KeyLockKey) {
				t.Errorf("%s carries the lock key: %v", name, set.Encoded(nil))
			}
		}
	}

	obtains := tel.named("redlock.obtain")
	if len(obtains) != 2 {
		t.Fatalf("%d redlock.obtain spans, want 2", len(obtains))
	}
	taken, got := obtains[0], obtains[1]
	childOf(t, taken, caller)
	childOf(t, got, caller)
	if taken.Status().Code != codes.Error || !strings.Contains(taken.Status().Description, "held by another owner") {
		t.Errorf("taken obtain's status %+v, want Error with the error", taken.Status())
	}
	if v, _ := attr(taken, redlockotel.KeyErrorType); v.AsString() != "taken" {
		t.Errorf("taken obtain's error.type %q", v.AsString())
	}
	if v, _ := attr(taken, redlockotel.KeyAttempts); v.AsInt64() < 2 {
		t.Errorf("taken obtain's attempts %d, want >= 2", v.AsInt64())
	}
	if d := taken.EndTime().Sub(taken.StartTime()); d < wait/2 {
		t.Errorf("taken obtain's span lasts %v, want it to cover the wait (%v)", d, wait)
	}
	if v, _ := attr(taken, redlockotel.KeyMasters); !slices.Equal(v.AsStringSlice(), addrs(servers)) {
		t.Errorf("taken obtain's masters %v, want %v", v.AsStringSlice(), addrs(servers))
	}
	// A quorum decides; the other master may have answered otherwise (or
	// not yet, or been held back on a loaded machine).
	if v, _ := attr(taken, redlockotel.KeyAnswers); count(v.AsStringSlice(), "held by another owner") < 2 {
		t.Errorf("taken obtain's answers %q, want a quorum held by another owner", v.AsStringSlice())
	}
	answers, _ := attr(got, redlockotel.KeyAnswers)
	if ok := count(answers.AsStringSlice(), "ok"); ok < 2 {
		t.Errorf("obtain's answers %q, want ok from a quorum", answers.AsStringSlice())
	}
	if v, _ := attr(got, redlockotel.KeyAgreed); v.AsInt64() != int64(count(answers.AsStringSlice(), "ok")) {
		t.Errorf("obtain's agreed %d, answers %q", v.AsInt64(), answers.AsStringSlice())
	}
	if got.Status().Code != codes.Unset {
		t.Errorf("obtain's status %+v, want unset", got.Status())
	}
	if v, _ := attr(got, redlockotel.KeyLockKey); v.AsString() != "k" {
		t.Errorf("obtain's key %q", v.AsString())
	}
	if _, ok := attr(got, redlockotel.KeyFence); ok {
		t.Error("obtain without fencing has a fence attribute")
	}
	rel := tel.named("redlock.release")
	if len(rel) != 1 {
		t.Fatalf("%d redlock.release spans, want 1", len(rel))
	}
	childOf(t, rel[0], caller)
	if v, _ := attr(rel[0], redlockotel.KeyOutcome); v.AsString() != "released" || rel[0].Status().Code != codes.Unset {
		t.Errorf("release span's outcome %q, status %+v", v.AsString(), rel[0].Status())
	}
	if v, _ := attr(rel[0], redlockotel.KeyHeld); v.AsFloat64() < hold.Seconds() {
		t.Errorf("release span's held %gs, want >= %v", v.AsFloat64(), hold)
	}

	// The commands' spans. A command sent alone (not in a pipeline) is one
	// request's batch, and carries its caller's values: the acquires (SET
	// NX) are children of the caller's span, and so are the Release's
	// scripts. The library sends a failed attempt's cleanup (a release of
	// the key on the masters that had not answered when the attempt was
	// decided) without the caller's values, and a pipeline may carry it, or
	// carry several requests: those spans start traces of their own.
	// A command that finds no idle connection dials one: the dial's own
	// commands (redis.hello) are children of that command's span, so of
	// the caller's through it.
	sets, children := 0, 0
	ended := tel.spans.Ended()
	for _, s := range ended {
		if s.InstrumentationScope().Name != "test/redis" {
			continue
		}
		switch {
		case s.Name() == "redis.set":
			sets++
			childOf(t, s, caller)
		case s.Name() == "redis.hello" && s.Parent().IsValid():
			descendantOf(t, s, ended, caller)
		case s.Parent().IsValid():
			children++
			childOf(t, s, caller)
		case s.Name() != "redis.evalsha" && s.Name() != "redis.pipeline":
			t.Errorf("command span %s has no parent", s.Name())
		}
	}
	if sets+children < 3 {
		t.Errorf("%d acquire spans and %d other children of the caller, want at least 3", sets, children)
	}
}

// TestRenewalsFailWhileMastersFreeze: a lock kept alive while two of three
// masters are frozen (SIGSTOP). The renewals fail, the lock is lost when
// its validity runs out, the two masters are reported down and, once they
// thaw, up again.
func TestRenewalsFailWhileMastersFreeze(t *testing.T) {
	bg := context.Background()
	tel := newTelemetry(t)
	servers, _, c := cluster(t, 3, tel, redlock.WithNodeTimeout(200*time.Millisecond))
	ctx, caller := tel.caller(bg)
	l, err := c.Obtain(ctx, "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	redistest.Eventually(t, func() error {
		if tel.collect(t).sum(t, "redlock.extends", outcome(redlock.Extended), renewal(true)) == 0 {
			return errors.New("no good renewal yet")
		}
		return nil
	})
	frozen := servers[:2]
	for _, s := range frozen {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Cont() })
	}
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was never declared lost")
	}
	stop()

	m := tel.collect(t)
	if got := m.sum(t, "redlock.extends", outcome(redlock.Unavailable), renewal(true)); got == 0 {
		t.Error("no renewal failed unavailable while two masters were frozen")
	}
	for _, set := range m.points("redlock.extends") {
		if v, _ := set.Value(redlockotel.KeyRenewal); !v.AsBool() {
			t.Errorf("an extend that is no renewal: %v", set.Encoded(nil))
		}
		// Each counter point has its latency and validity points.
		kv := set.ToSlice()
		n := m.sum(t, "redlock.extends", kv...)
		if h := m.hist(t, "redlock.extend.duration", kv...); h.Count != uint64(n) {
			t.Errorf("redlock.extend.duration{%s} counts %d, redlock.extends %d", set.Encoded(nil), h.Count, n)
		}
		if h := m.hist(t, "redlock.extend.validity_left", kv...); h.Count != uint64(n) {
			t.Errorf("redlock.extend.validity_left{%s} counts %d, redlock.extends %d", set.Encoded(nil), h.Count, n)
		}
	}
	if h := m.hist(t, "redlock.extend.validity_left", outcome(redlock.Unavailable), renewal(true)); h.Sum <= 0 {
		t.Errorf("failed renewals started with %gs of validity in all, want some", h.Sum)
	}
	if got := m.sum(t, "redlock.lost.locks", redlockotel.KeyLostReason.String(string(redlock.RanOut))); got != 1 {
		t.Errorf("redlock.lost.locks{ran_out} = %d, want 1", got)
	}
	if _, ok := m["redlock.lost_locks"]; ok {
		t.Error("redlock.lost_locks is still emitted beside redlock.lost.locks")
	}
	if h := m.hist(t, "redlock.lost.since_renewal", redlockotel.KeyLostReason.String(string(redlock.RanOut))); h.Count != 1 || h.Sum <= 0 {
		t.Errorf("redlock.lost.since_renewal: count %d, sum %g; want 1 positive", h.Count, h.Sum)
	}
	for _, s := range frozen {
		if got, ok := m.gauge(t, "redlock.master.up", server(s)...); !ok || got != 0 {
			t.Errorf("redlock.master.up{%s} = %d (recorded: %v) while frozen, want 0", s.Addr(), got, ok)
		}
		if got := m.sum(t, "redlock.master.down", master(s.Addr())); got != 1 {
			t.Errorf("redlock.master.down{%s} (deprecated) = %d while frozen, want 1", s.Addr(), got)
		}
		if got := m.sum(t, "redlock.master.transitions", append(server(s), state("down"))...); got < 1 {
			t.Errorf("redlock.master.transitions{%s,down} = %d, want it counted", s.Addr(), got)
		}
	}
	// A master is named by server.address and server.port alone.
	for _, name := range []string{"redlock.master.up", "redlock.master.transitions"} {
		for _, set := range m.points(name) {
			if set.HasValue(redlockotel.KeyMaster) {
				t.Errorf("%s carries redlock.master: %v", name, set.Encoded(nil))
			}
		}
	}

	// The masters thaw: the next answers say so. (On a loaded machine the
	// live master may have been late too: it then went down and up as well.)
	for _, s := range frozen {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, func() error {
		if l, err := c.Obtain(ctx, "again", time.Minute); err == nil {
			_ = l.Release(ctx)
		}
		m := tel.collect(t)
		for _, s := range servers {
			if up, ok := m.gauge(t, "redlock.master.up", server(s)...); ok && up != 1 {
				return errors.New("a master's recovery was not recorded")
			}
			if m.sum(t, "redlock.master.down", master(s.Addr())) != 0 {
				return errors.New("a master's recovery was not counted on the deprecated redlock.master.down")
			}
		}
		return nil
	})
	caller.End()
	m = tel.collect(t)
	for _, s := range servers {
		down := m.sum(t, "redlock.master.transitions", append(server(s), state("down"))...)
		if up := m.sum(t, "redlock.master.transitions", append(server(s), state("up"))...); up != down {
			t.Errorf("redlock.master.transitions{%s}: %d down, %d up; want as many, the master answering again", s.Addr(), down, up)
		}
	}

	renewals := tel.named("redlock.renewal")
	var failed int
	for _, s := range renewals {
		childOf(t, s, caller)
		if v, _ := attr(s, redlockotel.KeyRenewal); !v.AsBool() {
			t.Errorf("renewal span without redlock.renewal=true")
		}
		if v, _ := attr(s, redlockotel.KeyOutcome); v.AsString() != "unavailable" {
			continue
		}
		failed++
		if s.Status().Code != codes.Error {
			t.Errorf("failed renewal's status %+v, want Error", s.Status())
		}
		answers, _ := attr(s, redlockotel.KeyAnswers)
		if a := answers.AsStringSlice(); len(a) != 3 || a[0] == "ok" || a[1] == "ok" {
			t.Errorf("failed renewal's answers %q, want the frozen two failed", a)
		}
	}
	if failed == 0 {
		t.Errorf("none of %d renewal spans failed unavailable", len(renewals))
	}
	if n := len(tel.named("redlock.extend")); n != 0 {
		t.Errorf("%d redlock.extend spans, want none: renewals are redlock.renewal", n)
	}
	lost := tel.named("redlock.lost")
	if len(lost) != 1 {
		t.Fatalf("%d redlock.lost spans, want 1", len(lost))
	}
	childOf(t, lost[0], caller)
	if lost[0].Status().Code != codes.Error || !strings.Contains(lost[0].Status().Description, "lock lost") {
		t.Errorf("lost span's status %+v", lost[0].Status())
	}
	if v, _ := attr(lost[0], redlockotel.KeySinceRenewal); v.AsFloat64() <= 0 {
		t.Errorf("lost span's since_renewal %g", v.AsFloat64())
	}
}

// TestDoLosesItsLock: a Do whose lock another owner takes while fn runs.
// Its parts (the Obtain, the renewals, the loss, the Release) are spans
// under the caller's span, and each is counted.
func TestDoLosesItsLock(t *testing.T) {
	tel := newTelemetry(t)
	_, clients, c := cluster(t, 3, tel)
	ctx, caller := tel.caller(context.Background())
	err := c.Do(ctx, "job", time.Second, func(ctx context.Context) error {
		for _, rdb := range clients {
			rdb.Set(ctx, "job", "intruder", time.Minute)
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}, redlock.WithRenewEvery(50*time.Millisecond))
	caller.End()
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}

	m := tel.collect(t)
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{"redlock.obtains", kvs(outcome(redlock.Obtained)), 1},
		{"redlock.extends", kvs(outcome(redlock.Lost), renewal(true)), 1},
		{"redlock.lost.locks", kvs(redlockotel.KeyLostReason.String(string(redlock.Refused))), 1},
		{"redlock.releases", kvs(outcome(redlock.Lost)), 1},
	} {
		if got := m.sum(t, c.name, c.attrs...); got != c.want {
			t.Errorf("%s%v = %d, want %d", c.name, c.attrs, got, c.want)
		}
	}
	if h := m.hist(t, "redlock.hold.duration", outcome(redlock.Lost)); h.Count != 1 {
		t.Errorf("redlock.hold.duration{lost}: count %d, want 1", h.Count)
	}

	want := map[string]string{"redlock.obtain": "obtained", "redlock.lost": "lost", "redlock.release": "lost"}
	for name, out := range want {
		spans := tel.named(name)
		if len(spans) != 1 {
			t.Errorf("%d %s spans, want 1", len(spans), name)
			continue
		}
		childOf(t, spans[0], caller)
		if v, _ := attr(spans[0], redlockotel.KeyOutcome); v.AsString() != out {
			t.Errorf("%s: outcome %q, want %q", name, v.AsString(), out)
		}
		if wantErr := out != "obtained"; (spans[0].Status().Code == codes.Error) != wantErr {
			t.Errorf("%s: status %+v", name, spans[0].Status())
		}
	}
	renewals := tel.named("redlock.renewal")
	if len(renewals) == 0 {
		t.Fatal("no redlock.renewal span")
	}
	last := renewals[len(renewals)-1]
	childOf(t, last, caller)
	if v, _ := attr(last, redlockotel.KeyErrorType); v.AsString() != "lost" {
		t.Errorf("the refused renewal's error.type %q, want lost", v.AsString())
	}
	answers, _ := attr(last, redlockotel.KeyAnswers)
	if a := answers.AsStringSlice(); len(a) != 3 || count(a, "held by another owner") < 2 || count(a, "ok") >= 2 {
		t.Errorf("the refused renewal's answers %q, want a quorum of refusals", a)
	}
}

// TestExtendWithKeyAttribute: a caller's Extend is a redlock.extend span
// and an extend with redlock.renewal=false; WithKeyAttribute puts the key
// on the metrics.
func TestExtendWithKeyAttribute(t *testing.T) {
	tel := newTelemetry(t, redlockotel.WithKeyAttribute())
	_, _, c := cluster(t, 1, tel, redlock.WithFencing())
	ctx, caller := tel.caller(context.Background())
	l, err := c.Obtain(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()

	key := redlockotel.KeyLockKey.String("a")
	m := tel.collect(t)
	if got := m.sum(t, "redlock.extends", outcome(redlock.Extended), renewal(false), key); got != 1 {
		t.Errorf("redlock.extends{extended,false,a} = %d, want 1", got)
	}
	if got := m.sum(t, "redlock.obtains", outcome(redlock.Obtained), key); got != 1 {
		t.Errorf("redlock.obtains{obtained,a} = %d, want 1", got)
	}
	if got := m.sum(t, "redlock.releases", outcome(redlock.Released), key); got != 1 {
		t.Errorf("redlock.releases{released,a} = %d, want 1", got)
	}
	ext := tel.named("redlock.extend")
	if len(ext) != 1 {
		t.Fatalf("%d redlock.extend spans, want 1", len(ext))
	}
	childOf(t, ext[0], caller)
	if v, _ := attr(ext[0], redlockotel.KeyRenewal); v.AsBool() {
		t.Error("a caller's Extend has redlock.renewal=true")
	}
	if v, _ := attr(ext[0], redlockotel.KeyValidityEnd); v.AsFloat64() <= 0 {
		t.Errorf("extend's validity after %g, want > 0", v.AsFloat64())
	}
	if v, _ := attr(tel.named("redlock.obtain")[0], redlockotel.KeyFence); v.AsInt64() < 1 {
		t.Errorf("fenced obtain's fence %d", v.AsInt64())
	}
}

// kvs lists attributes, for a table of expected points.
func kvs(kv ...attribute.KeyValue) []attribute.KeyValue { return kv }

// count returns how many of answers are one of want.
func count(answers []string, want ...string) int {
	n := 0
	for _, a := range answers {
		if slices.Contains(want, a) {
			n++
		}
	}
	return n
}

// TestEventsWithoutRedis: events handed to Observe directly. A span covers
// the operation's duration before Observe was called; an outcome the
// Observer does not know still gets its own series; and with the global
// providers (noop until set) nothing fails.
func TestEventsWithoutRedis(t *testing.T) {
	tel := newTelemetry(t)
	ctx, caller := tel.caller(context.Background())
	const wait = 250 * time.Millisecond
	tel.obs.Observe(ctx, &redlock.ObtainEvent{Key: "k", Attempts: 3, Wait: wait, Outcome: "expired", Fence: 7,
		Masters: []redlock.NodeError{{Addr: "a:1"}, {Addr: "b:2", Err: redlock.ErrTaken}, {Addr: "c:3", Err: context.DeadlineExceeded}},
		Err:     errors.New("something new")})
	caller.End()
	m := tel.collect(t)
	if got := m.sum(t, "redlock.obtains", outcome("expired")); got != 1 {
		t.Errorf("redlock.obtains{expired} = %d, want 1", got)
	}
	if got := m.sum(t, "redlock.obtain.attempts", outcome("expired")); got != 3 {
		t.Errorf("redlock.obtain.attempts{expired} = %d, want 3", got)
	}
	s := tel.named("redlock.obtain")[0]
	childOf(t, s, caller)
	if d := s.EndTime().Sub(s.StartTime()); d < wait {
		t.Errorf("span lasts %v, want it to cover the %v wait", d, wait)
	}
	want := map[attribute.Key]attribute.Value{
		redlockotel.KeyLockKey:   attribute.StringValue("k"),
		redlockotel.KeyOutcome:   attribute.StringValue("expired"),
		redlockotel.KeyErrorType: attribute.StringValue("expired"),
		redlockotel.KeyAttempts:  attribute.IntValue(3),
		redlockotel.KeyFence:     attribute.Int64Value(7),
		redlockotel.KeyMasters:   attribute.StringSliceValue([]string{"a:1", "b:2", "c:3"}),
		redlockotel.KeyAnswers:   attribute.StringSliceValue([]string{"ok", "held by another owner", "context deadline exceeded"}),
		redlockotel.KeyAgreed:    attribute.IntValue(1),
	}
	for k, v := range want {
		if got, _ := attr(s, k); got != v {
			t.Errorf("span attribute %s = %v, want %v", k, got.String(), v.String())
		}
	}
	if s.Status().Code != codes.Error || s.Status().Description != "something new" {
		t.Errorf("span status %+v", s.Status())
	}
	// The measurements were made in the span's context: their exemplars
	// link to it.
	if ex := m.hist(t, "redlock.obtain.duration", outcome("expired")).Exemplars; len(ex) != 1 || trace.SpanID(ex[0].SpanID) != s.SpanContext().SpanID() {
		t.Errorf("obtain duration's exemplars %+v, want one of span %s", ex, s.SpanContext().SpanID())
	}

	global, err := redlockotel.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []redlock.Event{
		&redlock.ObtainEvent{Key: "k", Outcome: redlock.Obtained},
		&redlock.ExtendEvent{Key: "k", Renewal: true, Outcome: redlock.Unavailable, Err: redlock.ErrUnavailable},
		&redlock.ReleaseEvent{Key: "k", Outcome: redlock.Released},
		&redlock.LostEvent{Key: "k", Cause: redlock.ErrLockLost},
		&redlock.MasterEvent{Addr: "a:1", Err: context.DeadlineExceeded},
		&redlock.MasterEvent{Addr: "a:1", Up: true},
	} {
		global.Observe(context.Background(), e)
	}
}

// TestMetricsAloneAllocateNothingPerEvent: with a noop TracerProvider the
// Observer starts no span, and its measurements use attribute sets made
// once, so recording an event of any kind allocates nothing (a master's
// sets are made on its first event).
func TestMetricsAloneAllocateNothingPerEvent(t *testing.T) {
	obs, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(newTelemetry(t).mp), redlockotel.WithTracerProvider(noop.NewTracerProvider()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, e := range everyEvent() {
		obs.Observe(ctx, e) // the masters' sets, and the SDK's series
		if n := testing.AllocsPerRun(100, func() { obs.Observe(ctx, e) }); n != 0 {
			t.Errorf("Observe(%T) allocates %v times per event, want 0", e, n)
		}
	}
}

// TestMasterNamedByServerAddressAndPort: a master's metrics name it by
// server.address and server.port, split from its address (an IPv6 host
// without brackets), or by server.address alone for an address without a
// port; redlock.master.up is 0 once it stopped answering, 1 once it
// answers again.
func TestMasterNamedByServerAddressAndPort(t *testing.T) {
	tel := newTelemetry(t)
	ctx := context.Background()
	for _, tc := range []struct {
		addr  string
		attrs []attribute.KeyValue
	}{
		{"10.0.0.2:6380", kvs(redlockotel.KeyServerAddress.String("10.0.0.2"), redlockotel.KeyServerPort.Int(6380))},
		{"[::1]:6379", kvs(redlockotel.KeyServerAddress.String("::1"), redlockotel.KeyServerPort.Int(6379))},
		{"/run/redis.sock", kvs(redlockotel.KeyServerAddress.String("/run/redis.sock"))},
	} {
		tel.obs.Observe(ctx, &redlock.MasterEvent{Addr: tc.addr, Err: context.DeadlineExceeded})
		m := tel.collect(t)
		if v, ok := m.gauge(t, "redlock.master.up", tc.attrs...); !ok || v != 0 {
			t.Errorf("%s down: redlock.master.up%v = %d (recorded: %v), want 0", tc.addr, tc.attrs, v, ok)
		}
		tel.obs.Observe(ctx, &redlock.MasterEvent{Addr: tc.addr, Up: true})
		m = tel.collect(t)
		if v, _ := m.gauge(t, "redlock.master.up", tc.attrs...); v != 1 {
			t.Errorf("%s up: redlock.master.up%v = %d, want 1", tc.addr, tc.attrs, v)
		}
		for _, s := range []string{"down", "up"} {
			if got := m.sum(t, "redlock.master.transitions", append(tc.attrs, state(s))...); got != 1 {
				t.Errorf("%s: redlock.master.transitions{%s} = %d, want 1", tc.addr, s, got)
			}
		}
	}
}

// TestRenewalsBehindIsAGaugeOfClients: a Client's renewals that fall
// behind count one backlog and one Client behind, until they catch up;
// two Clients behind at once count two.
func TestRenewalsBehindIsAGaugeOfClients(t *testing.T) {
	tel := newTelemetry(t)
	other, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(tel.mp))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	behind := &redlock.BacklogEvent{Behind: true, Due: 10, Late: 200 * time.Millisecond}
	tel.obs.Observe(ctx, behind)
	other.Observe(ctx, behind)
	m := tel.collect(t)
	if got := m.sum(t, "redlock.renewals.behind"); got != 2 {
		t.Errorf("two Clients behind: redlock.renewals.behind = %d, want 2", got)
	}
	tel.obs.Observe(ctx, &redlock.BacklogEvent{})
	m = tel.collect(t)
	if got := m.sum(t, "redlock.renewals.behind"); got != 1 {
		t.Errorf("one caught up: redlock.renewals.behind = %d, want 1", got)
	}
	if got := m.sum(t, "redlock.renewals.backlogs"); got != 2 {
		t.Errorf("redlock.renewals.backlogs = %d, want 2", got)
	}
}
