package redlock_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Benchmarks on real redis-server processes. Peers are compared in bench/, on
// the same masters; these track the library's own cost:
//
//	go test -run '^$' -bench . -benchmem -count 10 | benchstat -

// obtainRelease is one Obtain+Release of key, the cycle every benchmark
// here times.
func obtainRelease(b *testing.B, c *redlock.Client, key string) {
	ctx := context.Background()
	l, err := c.Obtain(ctx, key, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchClient is redlock.New over clients of servers, closed when the
// benchmark ends.
func benchClient(b *testing.B, servers []*redistest.Server, opts ...redlock.Option) *redlock.Client {
	c, err := redlock.New(redistest.Clients(b, servers), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// cycles runs obtainRelease on fresh keys, one goroutine at a time
// (N=n) and 64 goroutines on 2 cores (N=n/parallel).
func cycles(b *testing.B, c *redlock.Client, n int) {
	var seq atomic.Int64
	next := func() string { return "k" + strconv.FormatInt(seq.Add(1), 10) }
	b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obtainRelease(b, c, next())
		}
	})
	b.Run(fmt.Sprintf("N=%d/parallel", n), func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32) // 64 goroutines on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				obtainRelease(b, c, next())
			}
		})
	})
}

// BenchmarkObtainRelease: Obtain + Release over one master and over five.
func BenchmarkObtainRelease(b *testing.B) {
	for _, n := range []int{1, 5} {
		cycles(b, benchClient(b, redistest.Start(b, n)), n)
	}
}

// BenchmarkObtainReleaseReplicaAcks: the same cycle on a master with one
// replica, WithReplicaAcks(1): what waiting for the replica costs.
func BenchmarkObtainReleaseReplicaAcks(b *testing.B) {
	master := redistest.Start(b, 1)[0]
	redistest.StartReplica(b, master)
	c, err := redlock.NewSingle(redistest.Clients(b, []*redistest.Server{master})[0], redlock.WithNodeTimeout(time.Second), redlock.WithReplicaAcks(1, 500*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	cycles(b, c, 1)
}

// BenchmarkSporadic: one Obtain+Release on three masters now and then
// (every gap), the timer stopped while it waits: the cost of a lock taken
// by a service that locks rarely. go test -run '^$' -bench Sporadic -benchtime 20x
func BenchmarkSporadic(b *testing.B) {
	c := benchClient(b, redistest.Start(b, 3))
	seq := 0
	for _, gap := range []time.Duration{30 * time.Millisecond, 300 * time.Millisecond, 1200 * time.Millisecond} {
		b.Run(fmt.Sprint("gap=", gap), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				time.Sleep(gap) // the lock is taken now and then
				b.StartTimer()
				seq++
				obtainRelease(b, c, "k"+strconv.Itoa(seq))
			}
		})
	}
}
