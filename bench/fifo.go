package main

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"time"
)

// fifoP99 returns the lock p99 a perfect first-come, first-served
// hand-over would give in a contended cell: workers goroutines in a
// closed loop, each picking one of keys hot keys at random (as the
// harness does), and every key passing to its oldest waiter after a
// service of one hold and one gap, with no other delay. It is the fair
// tail the cell allows, not waiters per key x service: with random
// keys the queues' lengths wander (a closed system's queues share their
// waiters at random), so even this order leaves a tail near three times
// that. The simulation is deterministic (a fixed seed).
func fifoP99(workers, keys int, service time.Duration) time.Duration {
	if workers < 1 || keys < 1 || service <= 0 {
		return 0
	}
	const grants = 200_000
	rng := rand.New(rand.NewPCG(1, 2))
	queues := make([][]float64, keys) // arrival times, oldest first
	busy := make([]bool, keys)
	var ends endHeap // (time a holder releases, key)
	waits := make([]float64, 0, grants)
	s := float64(service)
	var start func(k int, now float64)
	arrive := func(now float64) {
		k := rng.IntN(keys)
		queues[k] = append(queues[k], now)
		if !busy[k] {
			start(k, now)
		}
	}
	start = func(k int, now float64) {
		if len(queues[k]) == 0 {
			busy[k] = false
			return
		}
		waits = append(waits, now-queues[k][0])
		queues[k] = queues[k][1:]
		busy[k] = true
		heap.Push(&ends, end{now + s, k})
	}
	for range workers {
		arrive(0)
	}
	for len(waits) < grants {
		e := heap.Pop(&ends).(end)
		start(e.k, e.t)
		arrive(e.t)
	}
	// The first rounds start from every worker arriving at once.
	waits = waits[grants/10:]
	slices.Sort(waits)
	return time.Duration(waits[len(waits)*99/100])
}

type end struct {
	t float64
	k int
}

type endHeap []end

func (h endHeap) Len() int { return len(h) }
func (h endHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].k < h[j].k
}
func (h endHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)   { *h = append(*h, x.(end)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
