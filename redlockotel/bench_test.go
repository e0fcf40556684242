package redlockotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlockotel"
)

// BenchmarkObserve measures what the Observer adds to a lock call: one
// Obtain's and one Release's events, with the SDK's metrics and no spans,
// and with spans sampled too.
func BenchmarkObserve(b *testing.B) {
	masters := []redlock.NodeError{{Addr: "127.0.0.1:6379"}, {Addr: "127.0.0.1:6380"}, {Addr: "127.0.0.1:6381"}}
	for _, spans := range []bool{false, true} {
		name := "metrics"
		if spans {
			name = "metrics+spans"
		}
		b.Run(name, func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			defer mp.Shutdown(context.Background())
			var tp trace.TracerProvider = noop.NewTracerProvider()
			if spans {
				sdk := sdktrace.NewTracerProvider() // sampled spans, exported nowhere
				defer sdk.Shutdown(context.Background())
				tp = sdk
			}
			obs, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			obtain := &redlock.ObtainEvent{Key: "k", Attempts: 1, Wait: time.Millisecond, Outcome: redlock.Obtained, Masters: masters}
			release := &redlock.ReleaseEvent{Key: "k", Held: time.Second, Outcome: redlock.Released}
			b.ReportAllocs()
			for b.Loop() {
				obs.Observe(ctx, obtain)
				obs.Observe(ctx, release)
			}
		})
	}
}
