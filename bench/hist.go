package main

import (
	"math"
	"math/bits"
	"time"
)

// histogram records durations in nanoseconds in log-linear buckets: exact
// below 128ns, then 64 buckets per power of two, so a reported percentile is
// within 1/128 (0.8%) of the true value. Record does not allocate, so the
// harness does not disturb the allocation counts it measures.
type histogram struct {
	counts [histBuckets]uint64
	total  uint64
	max    int64
}

// histBuckets covers values up to 2^41 ns (about 36 minutes); larger ones land in the last bucket.
const histBuckets = (41-6)*64 + 128

func bucketOf(v int64) int {
	if v < 0 {
		v = 0
	}
	k := bits.Len64(uint64(v)) - 7
	if k <= 0 {
		return int(v)
	}
	i := k*64 + int(uint64(v)>>uint(k))
	return min(i, histBuckets-1)
}

// bucketMid returns the midpoint of bucket i's value range.
func bucketMid(i int) int64 {
	if i < 128 {
		return int64(i)
	}
	k := i/64 - 1
	m := int64(i - k*64)
	lo := m << uint(k)
	hi := (m+1)<<uint(k) - 1
	return lo + (hi-lo)/2
}

func (h *histogram) Record(d time.Duration) {
	v := int64(d)
	h.counts[bucketOf(v)]++
	h.total++
	if v > h.max {
		h.max = v
	}
}

func (h *histogram) Merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

func (h *histogram) Count() uint64 { return h.total }

// Quantile returns the value at quantile q in [0, 1] (0.5 is the median), or 0 when empty.
// It takes the smallest recorded value v such that at least q of the values are <= v.
func (h *histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketMid(i), h.max))
		}
	}
	return time.Duration(h.max)
}
