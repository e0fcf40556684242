package chaos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
)

func TestLedgerOverlaps(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name                       string
		iv                         []Interval
		cs, promised, over, fenceR int
	}{
		{"empty", nil, 0, 0, 0, 0},
		{"disjoint", []Interval{
			{Key: "k", Holder: "a", Fence: 1, Start: at(0), End: at(10), ValidUntil: at(20)},
			{Key: "k", Holder: "b", Fence: 2, Start: at(10), End: at(20), ValidUntil: at(30)},
		}, 0, 0, 0, 0},
		{"overlap within validity", []Interval{
			{Key: "k", Holder: "a", Fence: 1, Start: at(0), End: at(15), ValidUntil: at(20)},
			{Key: "k", Holder: "b", Fence: 2, Start: at(10), End: at(20), ValidUntil: at(30)},
		}, 1, 1, 0, 0},
		{"pause past validity", []Interval{ // a overruns; b starts after a's validity
			{Key: "k", Holder: "a", Fence: 1, Start: at(0), End: at(50), ValidUntil: at(10)},
			{Key: "k", Holder: "b", Fence: 2, Start: at(20), End: at(30), ValidUntil: at(40)},
		}, 1, 0, 1, 0},
		{"other keys never overlap", []Interval{
			{Key: "k1", Holder: "a", Start: at(0), End: at(50), ValidUntil: at(60)},
			{Key: "k2", Holder: "b", Start: at(0), End: at(50), ValidUntil: at(60)},
		}, 0, 0, 0, 0},
		{"fence regression and equal fence", []Interval{
			{Key: "k", Holder: "a", Fence: 5, Start: at(0), End: at(10), ValidUntil: at(20)},
			{Key: "k", Holder: "b", Fence: 5, Start: at(20), End: at(30), ValidUntil: at(40)},
			{Key: "k", Holder: "c", Fence: 4, Start: at(40), End: at(50), ValidUntil: at(60)},
			{Key: "k", Holder: "d", Fence: 6, Start: at(60), End: at(70), ValidUntil: at(80)},
		}, 0, 0, 0, 2},
		{"three at once", []Interval{
			{Key: "k", Holder: "a", Start: at(0), End: at(30), ValidUntil: at(30)},
			{Key: "k", Holder: "b", Start: at(5), End: at(30), ValidUntil: at(30)},
			{Key: "k", Holder: "c", Start: at(10), End: at(30), ValidUntil: at(30)},
		}, 3, 3, 0, 0},
		{"zero validity never overlaps the promise", []Interval{
			{Key: "k", Holder: "a", Start: at(0), End: at(30), ValidUntil: at(0)},
			{Key: "k", Holder: "b", Start: at(5), End: at(30), ValidUntil: at(30)},
		}, 1, 0, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Ledger
			for _, iv := range tt.iv {
				l.Record(iv)
			}
			s := l.Stats()
			if s.CSOverlaps != tt.cs || s.PromisedOverlaps != tt.promised || s.Overruns != tt.over || s.FenceRegressions != tt.fenceR {
				t.Errorf("got cs=%d promised=%d overruns=%d fenceRegressions=%d, want %d %d %d %d",
					s.CSOverlaps, s.PromisedOverlaps, s.Overruns, s.FenceRegressions, tt.cs, tt.promised, tt.over, tt.fenceR)
			}
		})
	}
}

func TestFencedResource(t *testing.T) {
	var r FencedResource
	steps := []struct {
		holder string
		fence  int64
		want   bool
	}{
		{"a", 1, true},
		{"a", 1, true},  // same holder again
		{"b", 2, true},  // newer holder
		{"a", 1, false}, // stale
		{"c", 2, false}, // equal fence, other holder
		{"b", 2, true},
	}
	for i, s := range steps {
		if got := r.Write("k", s.holder, s.fence); got != s.want {
			t.Errorf("step %d: Write(%s, %d) = %v, want %v", i, s.holder, s.fence, got, s.want)
		}
	}
	got := r.Stats()
	want := FenceStats{Accepted: 4, StaleRejected: 1, EqualConflicts: 1}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}

	admit := FencedResource{AdmitEqual: true}
	admit.Write("k", "a", 3)
	admit.Write("k", "b", 3)
	admit.Write("k", "a", 3)
	if got, want := admit.Stats(), (FenceStats{Accepted: 3, EqualConflicts: 2, Interleaved: 1}); got != want {
		t.Errorf("AdmitEqual: got %+v, want %+v", got, want)
	}
}

func TestCounterLostUpdates(t *testing.T) {
	var serial Counter
	for range 5 {
		serial.Increment(0)
	}
	if serial.Lost() != 0 || serial.Done() != 5 {
		t.Errorf("serial: lost=%d done=%d, want 0 5", serial.Lost(), serial.Done())
	}
	var overlapped Counter
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { overlapped.Increment(20 * time.Millisecond) })
	}
	wg.Wait()
	if overlapped.Lost() < 1 {
		t.Errorf("4 overlapping increments lost %d, want >= 1", overlapped.Lost())
	}
}

func TestProber(t *testing.T) {
	fail := errors.New("down")
	var mu sync.Mutex
	down := true
	p := StartProber(5*time.Millisecond, 50*time.Millisecond, 1000, func(ctx context.Context, n int) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return fail
		}
		return nil
	})
	time.Sleep(30 * time.Millisecond)
	mu.Lock()
	down = false
	mu.Unlock()
	p.Healed()
	time.Sleep(30 * time.Millisecond)
	p.Stop()
	s := p.Stats(time.Time{}, time.Time{})
	if s.Attempts < 4 || s.Successes == 0 || s.Successes == s.Attempts {
		t.Errorf("attempts=%d successes=%d: want some of each", s.Attempts, s.Successes)
	}
	if s.RecoveryMS < 0 || s.RecoveryMS > 25 {
		t.Errorf("recovery %.1fms, want within 25ms of Healed", s.RecoveryMS)
	}
}

func TestQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	p50, p99, mx := Quantiles(ds)
	if p50 != 51 || p99 != 100 || mx != 100 {
		t.Errorf("got %v %v %v, want 51 100 100", p50, p99, mx)
	}
}

func TestClockFile(t *testing.T) {
	dir := t.TempDir()
	c, err := NewClock("/nonexistent.so", filepath.Join(dir, "clock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := time.Until(c.Now()); d > time.Second || d < -time.Second {
		t.Errorf("fresh clock is off by %v", d)
	}
	c.Jump(20 * time.Second)
	if d := time.Until(c.Now()); d < 19*time.Second || d > 21*time.Second {
		t.Errorf("after +20s jump clock is off by %v", d)
	}
	c.Rate(2)
	before := c.Now()
	time.Sleep(50 * time.Millisecond)
	if d := c.Now().Sub(before); d < 95*time.Millisecond {
		t.Errorf("at rate 2, 50ms real gave %v fake", d)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "clock"))
	if len(b) != 4096 || b[0]%2 != 0 {
		t.Errorf("control file: len %d seq %d: want 4096 bytes and an even seq", len(b), b[0])
	}
}

// TestClockShimRedis checks the shim end to end: a redis-server on a clock
// running twice as fast expires a PX key in half the time, and a jump
// expires it at once.
func TestClockShimRedis(t *testing.T) {
	clock := newClock(t)
	e := newEnv(t, library, 1, func(_ int, o *redistest.Options) { o.Env = clock.Env() })
	c := e.direct()[0]
	ctx := context.Background()
	if err := clock.Rate(2); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, "fast", "x", 400*time.Millisecond)
	t0 := time.Now()
	for c.Exists(ctx, "fast").Val() == 1 && time.Since(t0) < 2*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(t0); d < 150*time.Millisecond || d > 300*time.Millisecond {
		t.Errorf("PX 400 at x2 lasted %v, want about 200ms", d)
	}
	c.Set(ctx, "jump", "x", 10*time.Second)
	if err := clock.Jump(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, "jump").Val(); n != 0 {
		t.Errorf("PX 10s key exists after a +20s jump")
	}
}
