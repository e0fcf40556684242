//go:build unix

package redlockotel_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/redlockotel"
)

// BenchmarkObservedLocks measures what the Observer costs a busy Client:
// 64 goroutines (b.SetParallelism) each Obtain and Release locks of their
// own on one redis-server, with no Observer, with an Observer that does
// nothing (what the library pays to report events: new ones, or reused
// ones for a TransientObserver, as redlockotel's is), with metrics alone (a
// noop TracerProvider) and with metrics and every span sampled. Compare the
// variants within one run: they share the server and the machine. Besides
// ns/op (wall time, which other load on the machine moves), it reports
// cpu-ns/op: the CPU time of this process (the Client, the Observer, the
// SDK; not redis-server's) per lock.
func BenchmarkObservedLocks(b *testing.B) {
	servers := redistest.Start(b, 1)
	clients := redistest.Clients(b, servers)
	for _, variant := range []string{"none", "empty", "empty-transient", "metrics", "metrics+spans"} {
		b.Run(variant, func(b *testing.B) {
			var opts []redlock.Option
			switch variant {
			case "none":
			case "empty":
				opts = append(opts, redlock.WithObserver(emptyObserver{}))
			case "empty-transient":
				opts = append(opts, redlock.WithObserver(transientObserver{}))
			default:
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer mp.Shutdown(context.Background())
				oo := []redlockotel.Option{redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(noop.NewTracerProvider())}
				if variant == "metrics+spans" {
					tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())) // exported nowhere
					defer tp.Shutdown(context.Background())
					oo = append(oo, redlockotel.WithTracerProvider(tp))
				}
				obs, err := redlockotel.NewObserver(oo...)
				if err != nil {
					b.Fatal(err)
				}
				opts = append(opts, redlock.WithObserver(obs))
			}
			c, err := redlock.New(clients, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var next atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				key := "cost:" + strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					l, err := c.Obtain(ctx, key, 10*time.Second)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// emptyObserver drops every event.
type emptyObserver struct{}

func (emptyObserver) Observe(context.Context, redlock.Event) {}

// transientObserver drops every event, and says it keeps none: the Client
// reuses its events.
type transientObserver struct{ emptyObserver }

func (transientObserver) Transient() bool { return true }

// cpuTime returns the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
