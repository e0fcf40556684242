package redlock_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// BenchmarkSporadic: one Obtain+Release on three masters now and then
// (every gap), the timer stopped while it waits: the cost of a lock taken
// by a service that locks rarely. go test -run '^$' -bench Sporadic -benchtime 20x
func BenchmarkSporadic(b *testing.B) {
	servers := redistest.Start(b, 3)
	clients := redistest.Clients(b, servers)
	c, err := redlock.New(clients)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	seq := 0
	for _, gap := range []time.Duration{30 * time.Millisecond, 300 * time.Millisecond, 1200 * time.Millisecond} {
		b.Run(fmt.Sprint("gap=", gap), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				time.Sleep(gap)
				b.StartTimer()
				seq++
				l, err := c.Obtain(ctx, "k"+strconv.Itoa(seq), 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
