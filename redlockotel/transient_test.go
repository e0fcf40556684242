package redlockotel_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlockotel"
)

// TestTheObserverIsTransient: the Observer says it keeps nothing of an
// event once Observe returns (a Client then reuses its events), and it
// does not: an event overwritten after Observe, as a Client reusing it
// would, leaves the spans and the metrics with the values it had.
func TestTheObserverIsTransient(t *testing.T) {
	tel := newTelemetry(t, redlockotel.WithKeyAttribute())
	if tr, ok := any(tel.obs).(interface{ Transient() bool }); !ok || !tr.Transient() {
		t.Fatal("the Observer does not say it is transient")
	}
	ctx := context.Background()
	masters := []redlock.NodeError{{Addr: "a:1"}, {Addr: "b:2", Err: redlock.ErrTaken}, {Addr: "c:3"}}
	obtain := &redlock.ObtainEvent{Key: "k", Attempts: 1, Outcome: redlock.Obtained, Masters: masters}
	release := &redlock.ReleaseEvent{Key: "k", Outcome: redlock.Released, Masters: masters}
	tel.obs.Observe(ctx, obtain)
	tel.obs.Observe(ctx, release)
	// Reused: every value overwritten, the answers' slice too.
	for i := range masters {
		masters[i] = redlock.NodeError{Addr: "z:9", Err: errors.New("scribbled")}
	}
	*obtain = redlock.ObtainEvent{Key: "other", Outcome: redlock.Taken, Attempts: 5}
	*release = redlock.ReleaseEvent{Key: "other", Outcome: redlock.Lost}

	m := tel.collect(t)
	key := redlockotel.KeyLockKey.String("k")
	if got := m.sum(t, "redlock.obtains", outcome(redlock.Obtained), key); got != 1 {
		t.Errorf("redlock.obtains{obtained, k} = %d, want 1", got)
	}
	if got := m.sum(t, "redlock.releases", outcome(redlock.Released), key); got != 1 {
		t.Errorf("redlock.releases{released, k} = %d, want 1", got)
	}
	for _, name := range []string{"redlock.obtain", "redlock.release"} {
		spans := tel.named(name)
		if len(spans) != 1 {
			t.Fatalf("%d %s spans, want 1", len(spans), name)
		}
		want := map[attribute.Key]attribute.Value{
			redlockotel.KeyLockKey: attribute.StringValue("k"),
			redlockotel.KeyMasters: attribute.StringSliceValue([]string{"a:1", "b:2", "c:3"}),
			redlockotel.KeyAnswers: attribute.StringSliceValue([]string{"ok", "held by another owner", "ok"}),
			redlockotel.KeyAgreed:  attribute.IntValue(2),
		}
		for k, v := range want {
			if got, _ := attr(spans[0], k); got != v {
				t.Errorf("%s span attribute %s = %v, want %v", name, k, got.String(), v.String())
			}
		}
	}
}
