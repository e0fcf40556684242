package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketRoundTrip(t *testing.T) {
	// Every value lands in a bucket whose midpoint is within 1/128 of it.
	for _, v := range []int64{0, 1, 63, 64, 127, 128, 129, 255, 256, 1000, 12345, 999_999, 1 << 30, 1<<41 - 1} {
		i := bucketOf(v)
		mid := bucketMid(i)
		if err := math.Abs(float64(mid-v)) / math.Max(float64(v), 1); err > 1.0/128 {
			t.Errorf("v=%d: bucket %d mid %d, relative error %.4f", v, i, mid, err)
		}
	}
	// Buckets are monotonic in the value.
	prev := -1
	for v := int64(0); v < 1<<20; v += 7 {
		i := bucketOf(v)
		if i < prev {
			t.Fatalf("bucketOf(%d) = %d < %d", v, i, prev)
		}
		prev = i
	}
	if got, want := bucketOf(math.MaxInt64), histBuckets-1; got != want {
		t.Errorf("bucketOf(MaxInt64) = %d, want %d", got, want)
	}
	if got := bucketOf(-5); got != 0 {
		t.Errorf("bucketOf(-5) = %d, want 0", got)
	}
}

func TestQuantileExactSmall(t *testing.T) {
	var h histogram
	for v := 1; v <= 100; v++ {
		h.Record(time.Duration(v))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.01, 1}, {0.5, 50}, {0.99, 99}, {0.999, 100}, {1, 100}} {
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
}

func TestQuantileAgainstSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h histogram
	var xs []int64
	for range 100_000 {
		// log-normal-ish latencies from 10µs to a few ms
		v := int64(10_000 * math.Exp(rng.NormFloat64()))
		xs = append(xs, v)
		h.Record(time.Duration(v))
	}
	slices.Sort(xs)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := xs[int(math.Ceil(q*float64(len(xs))))-1]
		got := int64(h.Quantile(q))
		if err := math.Abs(float64(got-want)) / float64(want); err > 1.0/128 {
			t.Errorf("Quantile(%v) = %d, want %d within 1/128 (error %.4f)", q, got, want, err)
		}
	}
	if got, want := h.Count(), uint64(len(xs)); got != want {
		t.Errorf("Count() = %d, want %d", got, want)
	}
}

func TestQuantileEmptyAndMax(t *testing.T) {
	var h histogram
	if got := h.Quantile(0.99); got != 0 {
		t.Errorf("empty Quantile = %v, want 0", got)
	}
	h.Record(1000)
	// The midpoint of 1000's bucket may exceed 1000; the max caps it.
	if got := h.Quantile(1); got != 1000 {
		t.Errorf("single value Quantile(1) = %v, want 1µs", got)
	}
}

func TestMerge(t *testing.T) {
	var a, b histogram
	for v := 1; v <= 50; v++ {
		a.Record(time.Duration(v))
	}
	for v := 51; v <= 100; v++ {
		b.Record(time.Duration(v))
	}
	a.Merge(&b)
	if got, want := a.Count(), uint64(100); got != want {
		t.Errorf("Count = %d, want %d", got, want)
	}
	if got, want := a.Quantile(0.5), time.Duration(50); got != want {
		t.Errorf("median = %v, want %v", got, want)
	}
	if got, want := a.Quantile(1), time.Duration(100); got != want {
		t.Errorf("max = %v, want %v", got, want)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	var h histogram
	if n := testing.AllocsPerRun(1000, func() { h.Record(12345) }); n != 0 {
		t.Errorf("Record allocates %v times", n)
	}
}
