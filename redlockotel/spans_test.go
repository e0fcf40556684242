package redlockotel_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlockotel"
)

// TestEachSpanCarriesTheAttributesOfItsOwnEventAlone: spans made at the
// same time, on many goroutines, from events with and without a fence,
// that succeeded or failed, with different sets of masters or none, each
// carry exactly the attributes of their own event: the Observer's pooled
// buffers never lend one span's attributes to another.
func TestEachSpanCarriesTheAttributesOfItsOwnEventAlone(t *testing.T) {
	tel := newTelemetry(t)
	sets := [2][]redlock.NodeError{
		{{Addr: "10.0.0.1:6379"}, {Addr: "10.0.0.2:6379"}, {Addr: "10.0.0.3:6379"}},
		{{Addr: "10.0.1.1:6379"}, {Addr: "10.0.1.2:6379", Err: redlock.ErrTaken}},
	}
	const goroutines, events = 8, 200
	// want is the attributes each span must carry, by name and key.
	want := make(map[string]map[attribute.Key]attribute.Value)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range events {
				key := fmt.Sprintf("g%d-%d", g, i)
				n := g*events + i
				obtain := &redlock.ObtainEvent{Key: key, Attempts: n, Wait: time.Millisecond, Outcome: redlock.Obtained}
				kv := map[attribute.Key]attribute.Value{
					redlockotel.KeyLockKey:  attribute.StringValue(key),
					redlockotel.KeyAttempts: attribute.IntValue(n),
				}
				if i%2 == 1 {
					obtain.Fence = int64(n)
					kv[redlockotel.KeyFence] = attribute.Int64Value(int64(n))
				}
				if i%3 == 0 {
					obtain.Outcome, obtain.Err = redlock.Taken, redlock.ErrTaken
					kv[redlockotel.KeyErrorType] = attribute.StringValue(string(redlock.Taken))
				}
				kv[redlockotel.KeyOutcome] = attribute.StringValue(string(obtain.Outcome))
				if i%4 != 3 {
					masters := sets[(g+i)%2]
					obtain.Masters = masters
					addrs, answers, agreed := []string{}, []string{}, 0
					for _, m := range masters {
						addrs = append(addrs, m.Addr)
						if m.Err == nil {
							answers, agreed = append(answers, "ok"), agreed+1
						} else {
							answers = append(answers, "held by another owner")
						}
					}
					kv[redlockotel.KeyMasters] = attribute.StringSliceValue(addrs)
					kv[redlockotel.KeyAnswers] = attribute.StringSliceValue(answers)
					kv[redlockotel.KeyAgreed] = attribute.IntValue(agreed)
				}
				held := time.Duration(n) * time.Millisecond
				release := &redlock.ReleaseEvent{Key: key, Held: held, Latency: time.Millisecond, Outcome: redlock.Released}
				mu.Lock()
				want["redlock.obtain "+key] = kv
				want["redlock.release "+key] = map[attribute.Key]attribute.Value{
					redlockotel.KeyLockKey: attribute.StringValue(key),
					redlockotel.KeyOutcome: attribute.StringValue(string(redlock.Released)),
					redlockotel.KeyHeld:    attribute.Float64Value(held.Seconds()),
				}
				mu.Unlock()
				tel.obs.Observe(context.Background(), obtain)
				tel.obs.Observe(context.Background(), release)
			}
		})
	}
	wg.Wait()
	spans := tel.spans.Ended()
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	bad := 0
	for _, s := range spans {
		got := map[attribute.Key]attribute.Value{}
		var key string
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value
			if kv.Key == redlockotel.KeyLockKey {
				key = kv.Value.AsString()
			}
		}
		w, ok := want[s.Name()+" "+key]
		if !ok || !maps.Equal(got, w) {
			if bad++; bad <= 5 {
				t.Errorf("span %s of %q carries %v, want %v", s.Name(), key, got, w)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%d spans in all carry attributes not their own", bad)
	}
}
