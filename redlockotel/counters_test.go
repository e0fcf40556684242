package redlockotel_test

import (
	"context"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlockotel"
)

// TestCountersSumTheEventsOfEveryObserverOfAProvider: the event counters
// (redlock.obtains, redlock.obtain.attempts, redlock.extends,
// redlock.releases) give a reader the points synchronous counters would:
// monotonic sums, per attribute set, of the events of every Observer that
// shares the MeterProvider, cumulative collection after collection (and,
// to a delta reader, what each collection added); a series from the first
// event counted in it, even one that adds 0, and none for a set no event
// was counted in.
func TestCountersSumTheEventsOfEveryObserverOfAProvider(t *testing.T) {
	cumulative := sdkmetric.NewManualReader()
	delta := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality {
		return metricdata.DeltaTemporality
	}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(cumulative), sdkmetric.WithReader(delta))
	t.Cleanup(func() {
		if err := mp.Shutdown(context.Background()); err != nil {
			t.Errorf("meter provider shutdown: %v", err)
		}
	})
	var obs [2]*redlockotel.Observer
	for i := range obs {
		o, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(noop.NewTracerProvider()))
		if err != nil {
			t.Fatal(err)
		}
		obs[i] = o
	}
	ctx := context.Background()
	// counters collects the points of the event counters, by name and
	// attributes, checking that each is a monotonic sum of temporality tm.
	counters := func(r *sdkmetric.ManualReader, tm metricdata.Temporality) map[string]int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := r.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, x := range sm.Metrics {
				switch x.Name {
				case "redlock.obtains", "redlock.obtain.attempts", "redlock.extends", "redlock.releases":
				default:
					continue
				}
				s, ok := x.Data.(metricdata.Sum[int64])
				if !ok || !s.IsMonotonic || s.Temporality != tm {
					t.Errorf("%s is a %T (%+v), want a monotonic %v Sum[int64]", x.Name, x.Data, x.Data, tm)
					continue
				}
				for _, dp := range s.DataPoints {
					got[x.Name+"{"+dp.Attributes.Encoded(attribute.DefaultEncoder())+"}"] = dp.Value
				}
			}
		}
		return got
	}
	point := func(name string, kv ...attribute.KeyValue) string {
		set := attribute.NewSet(kv...)
		return name + "{" + set.Encoded(attribute.DefaultEncoder()) + "}"
	}
	check := func(what string, got, want map[string]int64) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Errorf("%s: points %v, want %v", what, got, want)
		}
	}

	obs[0].Observe(ctx, &redlock.ObtainEvent{Key: "a", Attempts: 2, Outcome: redlock.Obtained})
	obs[1].Observe(ctx, &redlock.ObtainEvent{Key: "b", Attempts: 3, Outcome: redlock.Obtained})
	obs[1].Observe(ctx, &redlock.ObtainEvent{Key: "c", Attempts: 0, Outcome: redlock.Cancelled})
	obs[0].Observe(ctx, &redlock.ReleaseEvent{Key: "a", Outcome: redlock.Released})
	first := map[string]int64{
		point("redlock.obtains", outcome(redlock.Obtained)):          2,
		point("redlock.obtain.attempts", outcome(redlock.Obtained)):  5,
		point("redlock.obtains", outcome(redlock.Cancelled)):         1,
		point("redlock.obtain.attempts", outcome(redlock.Cancelled)): 0,
		point("redlock.releases", outcome(redlock.Released)):         1,
	}
	check("first cumulative collection", counters(cumulative, metricdata.CumulativeTemporality), first)
	check("first delta collection", counters(delta, metricdata.DeltaTemporality), first)

	obs[1].Observe(ctx, &redlock.ObtainEvent{Key: "d", Attempts: 1, Outcome: redlock.Obtained})
	obs[0].Observe(ctx, &redlock.ExtendEvent{Key: "a", Renewal: true, Outcome: redlock.Extended})
	check("second cumulative collection", counters(cumulative, metricdata.CumulativeTemporality), map[string]int64{
		point("redlock.obtains", outcome(redlock.Obtained)):                3,
		point("redlock.obtain.attempts", outcome(redlock.Obtained)):        6,
		point("redlock.obtains", outcome(redlock.Cancelled)):               1,
		point("redlock.obtain.attempts", outcome(redlock.Cancelled)):       0,
		point("redlock.releases", outcome(redlock.Released)):               1,
		point("redlock.extends", outcome(redlock.Extended), renewal(true)): 1,
	})
	// A delta reader gets a point for every series observed, 0 for those
	// that did not move.
	check("second delta collection", counters(delta, metricdata.DeltaTemporality), map[string]int64{
		point("redlock.obtains", outcome(redlock.Obtained)):                1,
		point("redlock.obtain.attempts", outcome(redlock.Obtained)):        1,
		point("redlock.obtains", outcome(redlock.Cancelled)):               0,
		point("redlock.obtain.attempts", outcome(redlock.Cancelled)):       0,
		point("redlock.releases", outcome(redlock.Released)):               0,
		point("redlock.extends", outcome(redlock.Extended), renewal(true)): 1,
	})
}
