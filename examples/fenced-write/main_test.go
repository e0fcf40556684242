package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock"
)

// TestMain fails the tests if run leaves a goroutine behind: the lock
// client, the redis clients and the miniredis servers must all be closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFenceRefusesStaleWrite(t *testing.T) {
	single := func(t *testing.T) []string { // one master: NewSingle
		s := miniredis.RunT(t)
		s.ClockTTL(true) // let A's lease lapse in real time
		return []string{s.Addr()}
	}
	tests := []struct {
		name    string
		masters func(t *testing.T) []string
	}{
		{name: "3 masters"},
		{name: "single master", masters: single},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config{ttl: 200 * time.Millisecond, pause: 400 * time.Millisecond}
			if tt.masters != nil {
				cfg.masters = tt.masters(t)
			}
			var out strings.Builder
			fenced, plain, err := demo(t.Context(), cfg, &out)
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, out.String())
			}

			// With the fence check: B's fence is higher, A's write is
			// refused, B's value stays.
			if fenced.fenceB <= fenced.fenceA {
				t.Errorf("B's fence %d, A's %d: want B's higher", fenced.fenceB, fenced.fenceA)
			}
			var stale *redlock.StaleFenceError
			if !errors.As(fenced.errA, &stale) {
				t.Errorf("A's write returned %v, want a *redlock.StaleFenceError", fenced.errA)
			} else if stale.Fence != fenced.fenceA || stale.Highest != fenced.fenceB {
				t.Errorf("refusal says fence %d, highest %d; want %d and %d", stale.Fence, stale.Highest, fenced.fenceA, fenced.fenceB)
			}
			if fenced.errB != nil {
				t.Errorf("B's write returned %v, want nil", fenced.errB)
			}
			if got, want := fenced.final, valueB; got != want {
				t.Errorf("fenced resource holds %q, want %q", got, want)
			}

			// Without it: both writes are accepted and A's, the stale one,
			// overwrites B's.
			if plain.errA != nil || plain.errB != nil {
				t.Errorf("plain writes returned %v and %v, want nil", plain.errA, plain.errB)
			}
			if got, want := plain.final, valueA; got != want {
				t.Errorf("unfenced resource holds %q, want %q: B's write should be lost", got, want)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out.String())
			}
		})
	}
}

func TestRunPrintsAccount(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), config{ttl: 100 * time.Millisecond, pause: 250 * time.Millisecond}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"REFUSED: redlock: stale fence",
		`With the fence check:    B's write kept, A's stale write refused; resource = "report by B"`,
		`Without the fence check: A's stale write silently overwrote B's`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, cfg := range []config{
		{ttl: 300 * time.Millisecond, pause: 300 * time.Millisecond}, // A does not outlive its lease
		{ttl: time.Millisecond, pause: time.Second},
	} {
		if err := run(t.Context(), cfg, &strings.Builder{}); err == nil {
			t.Errorf("run(%+v) succeeded, want an error", cfg)
		}
	}
}
