package redlockotel_test

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlockotel"
)

// everyEvent is one event of each kind, with each lost reason, a master
// going down and up, on two masters.
func everyEvent() []redlock.Event {
	masters := []redlock.NodeError{{Addr: "10.0.0.1:6379"}, {Addr: "10.0.0.2:6380", Err: redlock.ErrTaken}}
	return []redlock.Event{
		&redlock.ObtainEvent{Key: "k", Attempts: 1, Wait: time.Millisecond, Outcome: redlock.Obtained, Masters: masters},
		&redlock.ExtendEvent{Key: "k", Renewal: true, Latency: time.Millisecond, Outcome: redlock.Extended, Before: time.Second, After: 2 * time.Second, Masters: masters},
		&redlock.ExtendEvent{Key: "k", Latency: time.Millisecond, Outcome: redlock.Extended, Before: time.Second, After: 2 * time.Second, Masters: masters},
		&redlock.ReleaseEvent{Key: "k", Held: time.Second, Latency: 200 * time.Millisecond, Outcome: redlock.Released, Masters: masters},
		&redlock.LostEvent{Key: "k", Reason: redlock.Refused, Cause: redlock.ErrLockLost, Held: time.Second, SinceRenewal: 10 * time.Millisecond},
		&redlock.LostEvent{Key: "k", Reason: redlock.RanOut, Cause: redlock.ErrLockLost, Held: time.Second, SinceRenewal: time.Second},
		&redlock.LostEvent{Key: "k", Reason: redlock.MaxHold, Cause: redlock.ErrLockLost, Held: time.Minute, SinceRenewal: time.Second},
		&redlock.MasterEvent{Addr: "10.0.0.2:6380", Err: context.DeadlineExceeded},
		&redlock.MasterEvent{Addr: "10.0.0.2:6380", Up: true},
		&redlock.BacklogEvent{Behind: true, Due: 120, Late: 150 * time.Millisecond},
		&redlock.BacklogEvent{},
	}
}

// TestPackageDocListsEveryMetricWithItsAttributesAndBuckets: the package
// doc's list of metrics names every metric the Observer emits, with each
// attribute its points carry and, for a histogram, the bucket set it uses.
func TestPackageDocListsEveryMetricWithItsAttributesAndBuckets(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "otel.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	tel := newTelemetry(t)
	for _, e := range everyEvent() {
		tel.obs.Observe(context.Background(), e)
	}
	// The bucket sets as the doc names them, by first and last bound.
	sets := map[string][2]float64{"latencies": {0.0005, 60}, "holds": {0.005, 3600}, "validity": {0.001, 300}}
	m := tel.collect(t)
	for name, x := range m {
		entry := docEntry(doc, name)
		if entry == "" {
			t.Errorf("the package doc does not list %s", name)
			continue
		}
		for _, set := range m.points(name) {
			for _, kv := range set.ToSlice() {
				if !strings.Contains(entry, string(kv.Key)) {
					t.Errorf("the package doc lists %s without its attribute %s: %q", name, kv.Key, entry)
				}
			}
		}
		if h, ok := x.Data.(metricdata.Histogram[float64]); ok {
			b := h.DataPoints[0].Bounds
			named := false
			for set, ends := range sets {
				if strings.Contains(entry, ", "+set) && b[0] == ends[0] && b[len(b)-1] == ends[1] {
					named = true
				}
			}
			if !named {
				t.Errorf("the package doc names no bucket set of %s (%g to %g): %q", name, b[0], b[len(b)-1], entry)
			}
		}
	}
	for _, name := range []string{"redlock.lost.locks", "redlock.lost.since_renewal", "redlock.master.up", "redlock.renewals.behind", "redlock.renewals.backlogs"} {
		if _, ok := m[name]; !ok {
			t.Errorf("no %s emitted", name)
		}
	}
}

// docEntry returns the doc's list item of metric name: from "- name ("
// to the next item or the end of the list, in one line.
func docEntry(doc, name string) string {
	var entry []string
	for line := range strings.Lines(doc) {
		item := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(item, "- "+name+" ("):
			entry = append(entry, item)
		case entry == nil:
		case item == "" || strings.HasPrefix(item, "- "):
			return strings.Join(entry, " ")
		default:
			entry = append(entry, item)
		}
	}
	return strings.Join(entry, " ")
}

// TestSpansCoverTheirEventAndCarryTheMastersAnswers: every span covers
// the duration its event carries (a Release's latency too), and the spans
// of Obtain, Extend, renewal and Release carry each master's answer, on
// success as on failure, as the package doc says.
func TestSpansCoverTheirEventAndCarryTheMastersAnswers(t *testing.T) {
	tel := newTelemetry(t)
	ctx, caller := tel.caller(context.Background())
	events := everyEvent()
	failed := &redlock.ReleaseEvent{Key: "k", Held: time.Second, Latency: 300 * time.Millisecond, Outcome: redlock.Unavailable,
		Masters: []redlock.NodeError{{Addr: "10.0.0.1:6379", Err: context.DeadlineExceeded}, {Addr: "10.0.0.2:6380"}}, Err: redlock.ErrUnavailable}
	events = append(events, failed)
	for _, e := range events {
		tel.obs.Observe(ctx, e)
	}
	caller.End()
	want := map[string]time.Duration{"redlock.obtain": time.Millisecond, "redlock.renewal": time.Millisecond,
		"redlock.extend": time.Millisecond, "redlock.release": 200 * time.Millisecond, "redlock.lost": 10 * time.Millisecond}
	for name, d := range want {
		spans := tel.named(name)
		if len(spans) == 0 {
			t.Errorf("no %s span", name)
			continue
		}
		s := spans[0]
		childOf(t, s, caller)
		if got := s.EndTime().Sub(s.StartTime()); got < d {
			t.Errorf("%s lasts %v, want it to cover the event's %v", name, got, d)
		}
		if name == "redlock.lost" {
			continue
		}
		addrs, _ := attr(s, redlockotel.KeyMasters)
		answers, _ := attr(s, redlockotel.KeyAnswers)
		agreed, _ := attr(s, redlockotel.KeyAgreed)
		if !slices.Equal(addrs.AsStringSlice(), []string{"10.0.0.1:6379", "10.0.0.2:6380"}) ||
			!slices.Equal(answers.AsStringSlice(), []string{"ok", "held by another owner"}) || agreed.AsInt64() != 1 {
			t.Errorf("%s: masters %q, answers %q, agreed %d; want both masters' answers", name, addrs.AsStringSlice(), answers.AsStringSlice(), agreed.AsInt64())
		}
	}
	rel := tel.named("redlock.release")
	if len(rel) != 2 {
		t.Fatalf("%d redlock.release spans, want 2", len(rel))
	}
	if answers, _ := attr(rel[1], redlockotel.KeyAnswers); !slices.Equal(answers.AsStringSlice(), []string{"context deadline exceeded", "ok"}) {
		t.Errorf("failed release's answers %q", answers.AsStringSlice())
	}
	// All "ok": the answers made once per set of masters must not carry
	// over to a set with a failure, nor the other way round.
	ok := []redlock.NodeError{{Addr: "10.0.0.1:6379"}, {Addr: "10.0.0.2:6380"}}
	tel.obs.Observe(ctx, &redlock.ReleaseEvent{Key: "k", Outcome: redlock.Released, Masters: ok})
	tel.obs.Observe(ctx, &redlock.ReleaseEvent{Key: "k", Outcome: redlock.Unavailable, Masters: failed.Masters, Err: errors.New("x")})
	tel.obs.Observe(ctx, &redlock.ReleaseEvent{Key: "k", Outcome: redlock.Released, Masters: ok[:1]})
	rel = tel.named("redlock.release")
	for i, want := range [][]string{{"ok", "ok"}, {"context deadline exceeded", "ok"}, {"ok"}} {
		s := rel[2+i]
		answers, _ := attr(s, redlockotel.KeyAnswers)
		addrs, _ := attr(s, redlockotel.KeyMasters)
		if !slices.Equal(answers.AsStringSlice(), want) || len(addrs.AsStringSlice()) != len(want) {
			t.Errorf("release %d: masters %q, answers %q; want answers %q", i, addrs.AsStringSlice(), answers.AsStringSlice(), want)
		}
	}
}
