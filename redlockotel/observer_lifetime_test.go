package redlockotel_test

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlockotel"
)

// TestADroppedObserverIsCollected: an Observer the program no longer
// references is garbage, also while its MeterProvider lives on: a program
// that makes an Observer per Client, Clients that come and go on one
// long-lived provider, does not grow with every Observer it ever made.
func TestADroppedObserverIsCollected(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	var ws []weak.Pointer[redlockotel.Observer]
	for range 100 {
		o, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(noop.NewTracerProvider()))
		if err != nil {
			t.Fatal(err)
		}
		o.Observe(context.Background(), &redlock.ObtainEvent{Key: "k", Attempts: 1, Outcome: redlock.Obtained})
		ws = append(ws, weak.Make(o))
	}
	runtime.GC()
	runtime.GC()
	live := 0
	for _, w := range ws {
		if w.Value() != nil {
			live++
		}
	}
	if live > 0 {
		t.Errorf("%d of %d dropped Observers are still reachable (their counters' callbacks stay registered with the MeterProvider)", live, len(ws))
	}
}

// TestADroppedMeterProviderIsCollected: the Observers of a MeterProvider
// share their counters' sums with it, and nothing else holds either: a
// provider the program shut down and dropped, with its Observers, is
// garbage (a test, a program that makes providers, does not grow with
// them).
func TestADroppedMeterProviderIsCollected(t *testing.T) {
	var ws []weak.Pointer[sdkmetric.MeterProvider]
	for range 20 {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		for range 3 {
			o, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(noop.NewTracerProvider()))
			if err != nil {
				t.Fatal(err)
			}
			o.Observe(context.Background(), &redlock.ObtainEvent{Key: "k", Attempts: 1, Outcome: redlock.Obtained})
		}
		if err := mp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, weak.Make(mp))
	}
	runtime.GC()
	runtime.GC()
	live := 0
	for _, w := range ws {
		if w.Value() != nil {
			live++
		}
	}
	if live > 0 {
		t.Errorf("%d of %d dropped MeterProviders are still reachable", live, len(ws))
	}
}

// TestADroppedObserverLeavesTheSumsOfTheOthersMonotonic: Clients that
// come and go, each with an Observer of its own, on one long-lived
// MeterProvider: an Observer the program dropped does not make a series
// that other Observers of the provider share fall while they live. Its
// counts stay in the sums: a cumulative reader never sees a monotonic sum
// fall with the same start time (Prometheus would count the rest again as
// new events), and a delta reader never gets a negative point.
func TestADroppedObserverLeavesTheSumsOfTheOthersMonotonic(t *testing.T) {
	cumulative := sdkmetric.NewManualReader()
	delta := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality {
		return metricdata.DeltaTemporality
	}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(cumulative), sdkmetric.WithReader(delta))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	ctx := context.Background()
	newObserver := func() *redlockotel.Observer {
		o, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(noop.NewTracerProvider()))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	obtains := func(r *sdkmetric.ManualReader) (int64, bool) {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := r.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, x := range sm.Metrics {
				if x.Name != "redlock.obtains" {
					continue
				}
				for _, dp := range x.Data.(metricdata.Sum[int64]).DataPoints {
					if v, ok := dp.Attributes.Value(redlockotel.KeyOutcome); ok && v.AsString() == string(redlock.Obtained) {
						return dp.Value, true
					}
				}
			}
		}
		return 0, false
	}

	kept := newObserver()
	kept.Observe(ctx, &redlock.ObtainEvent{Key: "a", Attempts: 1, Outcome: redlock.Obtained})
	dropped := weak.Make(func() *redlockotel.Observer {
		o := newObserver()
		o.Observe(ctx, &redlock.ObtainEvent{Key: "b", Attempts: 1, Outcome: redlock.Obtained})
		return o
	}())
	if n, _ := obtains(cumulative); n != 2 {
		t.Fatalf("cumulative redlock.obtains %d, want 2", n)
	}
	if n, _ := obtains(delta); n != 2 {
		t.Fatalf("delta redlock.obtains %d, want 2", n)
	}

	// The dropped Observer is garbage; give its cleanups time to run
	// (they run on goroutines of their own, in no set order), collecting
	// as a reader would meanwhile.
	for i := 0; i < 50; i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
		if dropped.Value() != nil {
			continue
		}
		c, cok := obtains(cumulative)
		d, dok := obtains(delta)
		if !cok || c != 2 {
			t.Errorf("round %d: cumulative redlock.obtains %d (a point: %v) while an Observer of the provider lives, want 2: a monotonic sum fell", i, c, cok)
		}
		if dok && d != 0 {
			t.Errorf("round %d: delta redlock.obtains %d, want 0: a monotonic sum got a negative point", i, d)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	if dropped.Value() != nil {
		t.Fatal("the dropped Observer is still reachable")
	}
	kept.Observe(ctx, &redlock.ObtainEvent{Key: "c", Attempts: 1, Outcome: redlock.Obtained})
	if n, _ := obtains(cumulative); n != 3 {
		t.Errorf("cumulative redlock.obtains %d after one more event, want 3", n)
	}
	runtime.KeepAlive(kept)
}
