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

// Obtain + Release on real redis-server processes. Peers are compared in
// bench/, on the same masters; these track the library's own cost:
//
//	go test -run '^$' -bench . -benchmem -count 10 | benchstat -
func BenchmarkObtainRelease(b *testing.B) {
	for _, n := range []int{1, 5} {
		servers := redistest.Start(b, n)
		clients := redistest.Clients(b, servers)
		c, err := redlock.New(clients)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		ctx := context.Background()
		var seq atomic.Int64
		cycle := func(b *testing.B, key string) {
			l, err := c.Obtain(ctx, key, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cycle(b, "k"+strconv.FormatInt(seq.Add(1), 10))
			}
		})
		b.Run(fmt.Sprintf("N=%d/parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					cycle(b, "k"+strconv.FormatInt(seq.Add(1), 10))
				}
			})
		})
	}
}

// BenchmarkObtainReleaseReplicaAcks: the same cycle on a master with one
// replica, WithReplicaAcks(1): what waiting for the replica costs.
func BenchmarkObtainReleaseReplicaAcks(b *testing.B) {
	master := redistest.Start(b, 1)[0]
	redistest.StartReplica(b, master)
	clients := redistest.Clients(b, []*redistest.Server{master})
	c, err := redlock.NewSingle(clients[0], redlock.WithNodeTimeout(time.Second), redlock.WithReplicaAcks(1, 500*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	var seq atomic.Int64
	cycle := func(b *testing.B) {
		l, err := c.Obtain(ctx, "k"+strconv.FormatInt(seq.Add(1), 10), 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("N=1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cycle(b)
		}
	})
	b.Run("N=1/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				cycle(b)
			}
		})
	})
}
