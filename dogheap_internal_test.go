package redlock

import (
	"math/rand/v2"
	"testing"
)

// TestDogHeapGivesLiveEntriesInKeyOrder: pushes, moves (a later push of
// the same watchdog) and forgets in random order; the heap then gives each
// live watchdog once, under its last key, in key order, and nothing stale.
func TestDogHeapGivesLiveEntriesInKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 5, 17, 1000} {
		var h dogHeap
		dogs := make([]*watchdog, n)
		want := map[*watchdog]int64{}
		for i := range dogs {
			dogs[i] = &watchdog{}
		}
		for range 4 * n {
			w := dogs[rng.IntN(n)]
			switch rng.IntN(4) {
			case 0:
				forget(w)
				delete(want, w)
			default:
				key := rng.Int64N(int64(n)) // duplicates too
				h.push(w, key)
				want[w] = key
			}
		}
		last := int64(-1)
		for {
			e, ok := h.first()
			if !ok {
				break
			}
			h.pop()
			k, live := want[e.w]
			switch {
			case !live:
				t.Fatalf("n=%d: a stale or repeated entry came out", n)
			case k != e.key:
				t.Fatalf("n=%d: key %d came out, its last push was %d", n, e.key, k)
			case e.key < last:
				t.Fatalf("n=%d: key %d after %d", n, e.key, last)
			}
			last = e.key
			delete(want, e.w)
		}
		if len(want) != 0 {
			t.Fatalf("n=%d: %d live entries never came out", n, len(want))
		}
	}
}
