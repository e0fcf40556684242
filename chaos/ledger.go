package chaos

import (
	"slices"
	"sync"
	"time"
)

// An Interval is one critical section, all on this process's monotonic clock.
type Interval struct {
	Key        string
	Holder     string // the lock's token
	Fence      int64  // 0 without fencing
	Start      time.Time
	End        time.Time // just before Release (or when the holder gave up)
	ValidUntil time.Time // Start + Validity() read right after Obtain
}

// A Ledger records every holder's interval. One process sees every
// operation, so the overlap counts are exact.
type Ledger struct {
	mu sync.Mutex
	iv []Interval
}

// Record adds one interval.
func (l *Ledger) Record(iv Interval) {
	l.mu.Lock()
	l.iv = append(l.iv, iv)
	l.mu.Unlock()
}

// Intervals returns a copy of what was recorded.
func (l *Ledger) Intervals() []Interval {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.iv)
}

// Len is the number of recorded intervals.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.iv)
}

// LedgerStats are the safety figures of a ledger.
type LedgerStats struct {
	Intervals int
	// CSOverlaps counts pairs on one key whose [Start, End) overlap: both
	// believed they held the lock at the same instant.
	CSOverlaps int
	// PromisedOverlaps counts pairs whose [Start, min(End, ValidUntil))
	// overlap: a breach of Redlock's own promise.
	PromisedOverlaps int
	// Overruns counts intervals that ended after their validity.
	Overruns int
	// FenceRegressions counts holders, in order of Start on one key, whose
	// fence is not above every earlier holder's (fences in use only).
	FenceRegressions int
	// MaxFence is the largest fence seen.
	MaxFence int64
}

// Stats computes the overlap and fence figures.
func (l *Ledger) Stats() LedgerStats {
	iv := l.Intervals()
	s := LedgerStats{Intervals: len(iv)}
	byKey := map[string][]Interval{}
	for _, v := range iv {
		byKey[v.Key] = append(byKey[v.Key], v)
		if v.End.After(v.ValidUntil) {
			s.Overruns++
		}
		s.MaxFence = max(s.MaxFence, v.Fence)
	}
	for _, vs := range byKey {
		s.CSOverlaps += overlaps(vs, func(v Interval) time.Time { return v.End })
		s.PromisedOverlaps += overlaps(vs, func(v Interval) time.Time {
			if v.ValidUntil.Before(v.End) {
				return v.ValidUntil
			}
			return v.End
		})
		slices.SortStableFunc(vs, func(a, b Interval) int { return a.Start.Compare(b.Start) })
		var top int64
		for i, v := range vs {
			if v.Fence == 0 {
				continue
			}
			if i > 0 && v.Fence <= top {
				s.FenceRegressions++
			}
			top = max(top, v.Fence)
		}
	}
	return s
}

// overlaps counts the pairs of [Start, end(v)) that intersect.
func overlaps(vs []Interval, end func(Interval) time.Time) int {
	vs = slices.Clone(vs)
	slices.SortFunc(vs, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	n := 0
	for i := range vs {
		ei := end(vs[i])
		if !vs[i].Start.Before(ei) {
			continue // empty window
		}
		for j := i + 1; j < len(vs) && vs[j].Start.Before(ei); j++ {
			// j starts inside i; it counts if it is not empty itself.
			if vs[j].Start.Before(end(vs[j])) && vs[j].Holder != vs[i].Holder {
				n++
			}
		}
	}
	return n
}
