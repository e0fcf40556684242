package redlockotel_test

import (
	"context"
	"runtime"
	"testing"
	"weak"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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
