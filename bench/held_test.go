package main

import (
	"context"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The search ends with the largest L held and the smallest lost around the
// true limit, within the resolution, whatever the start, in few probes.
func TestNextProbeFindsTheLimit(t *testing.T) {
	for _, limit := range []int{1, 7, 999, 1000, 1001, 12_345, 60_000, 150_000, 200_000, 500_000} {
		for _, start := range []int{1000, 5000, 20_000} {
			var tried []heldProbe
			probes := 0
			for {
				l := nextProbe(tried, start, 200_000, heldSearchResolution)
				if l == 0 {
					break
				}
				if slices.ContainsFunc(tried, func(p heldProbe) bool { return p.L == l }) {
					t.Fatalf("limit %d start %d: %d tried twice (%v)", limit, start, l, tried)
				}
				if l < 1 || l > 200_000 {
					t.Fatalf("limit %d start %d: probe %d out of range", limit, start, l)
				}
				tried = append(tried, heldProbe{L: l, OK: l <= limit})
				if probes++; probes > 30 {
					t.Fatalf("limit %d start %d: no end after %v", limit, start, tried)
				}
			}
			lo, hi := bounds(tried)
			switch {
			case limit >= 200_000:
				if lo != 200_000 || hi != 0 {
					t.Errorf("limit %d start %d: got [%d, %d), want the cap held and nothing lost", limit, start, lo, hi)
				}
			case lo > limit || hi <= limit:
				t.Errorf("limit %d start %d: got [%d, %d), which does not bracket it", limit, start, lo, hi)
			case hi-lo > max(1, int(float64(lo)*heldSearchResolution)):
				t.Errorf("limit %d start %d: got [%d, %d), wider than the resolution", limit, start, lo, hi)
			}
			if probes > 16 {
				t.Errorf("limit %d start %d: %d probes (%v)", limit, start, probes, tried)
			}
		}
	}
}

// A loss from the table bounds the search; a run without loss at a
// shorter hold is only where it starts.
func TestNextProbeFromTheTable(t *testing.T) {
	tried := []heldProbe{{L: 20_000}}
	if l := nextProbe(tried, 5000, 200_000, 0.125); l != 5000 {
		t.Errorf("start 5000 below a loss at 20000: probe %d, want 5000", l)
	}
	if l := nextProbe(tried, 40_000, 200_000, 0.125); l != 10_000 {
		t.Errorf("start 40000 above a loss at 20000: probe %d, want 10000 (halving)", l)
	}
	tried = append(tried, heldProbe{L: 5000, OK: true})
	if l := nextProbe(tried, 5000, 200_000, 0.125); l != 13_000 {
		t.Errorf("held 5000, lost 20000: probe %d, want 13000 (the middle, two digits)", l)
	}
	// A loss below a hold (noise) does not bound it.
	tried = []heldProbe{{L: 1000}, {L: 8000, OK: true}}
	if l := nextProbe(tried, 8000, 200_000, 0.125); l != 16_000 {
		t.Errorf("lost 1000 but held 8000: probe %d, want 16000", l)
	}
	if l := nextProbe([]heldProbe{{L: 1}}, 1000, 200_000, 0.125); l != 0 {
		t.Errorf("lost at 1: probe %d, want the end", l)
	}
}

func TestRoundTwo(t *testing.T) {
	for in, want := range map[int]int{0: 0, 7: 7, 99: 99, 123: 120, 12_345: 12_000, 12_500: 13_000, 149_999: 150_000} {
		if got := roundTwo(in); got != want {
			t.Errorf("roundTwo(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestParseCounts(t *testing.T) {
	got, err := parseCounts(" 1000, 20k,1_500 ")
	if err != nil || !slices.Equal(got, []int{1000, 20_000, 1500}) {
		t.Errorf("parseCounts: %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-5", "x", "1.5k"} {
		if _, err := parseCounts(bad); err == nil {
			t.Errorf("parseCounts(%q): no error", bad)
		}
	}
	if d, err := parseDurations("2s,10s"); err != nil || !slices.Equal(d, []time.Duration{2 * time.Second, 10 * time.Second}) {
		t.Errorf("parseDurations: %v, %v", d, err)
	}
	if _, err := parseDurations("2s,0s"); err == nil {
		t.Error("parseDurations of 0s: no error")
	}
}

// A watchdog renews every ttl/3: L locks need 3L/TTL renewals a second.
func TestRenewalsNeeded(t *testing.T) {
	for _, tc := range []struct {
		held int
		ttl  time.Duration
		want float64
	}{{1000, 3 * time.Second, 1000}, {30_000, 2 * time.Second, 45_000}, {50_000, 10 * time.Second, 15_000}, {0, time.Second, 0}} {
		if got := renewalsNeeded(tc.held, tc.ttl); math.Abs(got-tc.want) > 1e-3*tc.want+1e-9 {
			t.Errorf("renewalsNeeded(%d, %v) = %v, want %v", tc.held, tc.ttl, got, tc.want)
		}
	}
}

func TestHeldDerive(t *testing.T) {
	r := &heldRun{Held: 1000, Locks: 1000, ttl: 3 * time.Second, WindowSecs: 10,
		Renewals:  map[string]uint64{"extended": 9000, "unavailable": 1000},
		ClientCPU: 0.25, ServerCPU: []float64{0.05, 0.05}, Calls: []uint64{40_000, 40_000}, Reads: []uint64{1000, 1000},
		Goroutines: 1003, HeapBytes: 3_000_000}
	r.derive()
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-6*math.Abs(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("needed/s", r.NeededPerSec, 1000)
	near("made/s", r.MadePerSec, 900)                     // extended only
	near("client CPU/renewal", r.ClientCPUPerRenewal, 25) // µs, over every renewal
	near("Redis CPU/renewal", r.ServerCPUPerRenewal, 10)
	near("cmds/renewal", r.CallsPerRenewal, 8)
	near("reads/renewal", r.ReadsPerRenewal, 0.2)
	near("goroutines/lock", r.GoroutinesPerLock, 1.003)
	near("heap/lock", r.HeapPerLock, 3000)
	r = &heldRun{Held: 10, Locks: 10, ttl: time.Second, WindowSecs: 1}
	r.derive()
	if r.ClientCPUPerRenewal != -1 || r.ServerCPUPerRenewal != -1 {
		t.Errorf("no renewal: per-renewal figures %v, %v, want -1 (unknown)", r.ClientCPUPerRenewal, r.ServerCPUPerRenewal)
	}
}

// The smoke checks fail on each kind of broken run.
func TestHeldProblems(t *testing.T) {
	good := func() *heldRun {
		return &heldRun{Masters: 1, TTL: "1s", Locks: 200, Held: 200, Released: 200,
			RenewalsAll: map[string]uint64{"extended": 600}, LostEvents: map[string]uint64{}}
	}
	if p := heldProblems(&heldReport{Runs: []*heldRun{good()}}); len(p) > 0 {
		t.Fatalf("a good run: %v", p)
	}
	for name, broken := range map[string]func(r *heldRun){
		"lost":              func(r *heldRun) { r.Lost = 3 },
		"lost event":        func(r *heldRun) { r.LostEvents = map[string]uint64{"refused": 1} },
		"not obtained":      func(r *heldRun) { r.Held, r.ObtainErrors, r.Released = 199, 1, 199 },
		"no renewal":        func(r *heldRun) { r.RenewalsAll = map[string]uint64{"unavailable": 600} },
		"too few renewals":  func(r *heldRun) { r.RenewalsAll = map[string]uint64{"extended": 199} },
		"release failed":    func(r *heldRun) { r.Released, r.ReleaseErrors = 199, 1 },
		"found lost at end": func(r *heldRun) { r.Released, r.ReleaseLost = 199, 1 },
		"key left":          func(r *heldRun) { r.KeysLeft = 1 },
	} {
		r := good()
		broken(r)
		if p := heldProblems(&heldReport{Runs: []*heldRun{r}}); len(p) == 0 {
			t.Errorf("%s: no problem found", name)
		}
	}
}

// The workload against a real master: every lock held, renewed and
// released, nothing left; and locks taken away midway by another owner are
// counted as lost, which fails the smoke checks.
func TestRunHeld(t *testing.T) {
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	logOut = io.Discard
	t.Cleanup(func() { logOut = os.Stderr })
	ctx := context.Background()
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
	}
	ms, err := externalMasters(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	if err := ms.describe(ctx); err != nil {
		t.Fatal(err)
	}
	ep, err := ms.endpoints(ctx, cell{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	const locks = 60
	r, err := runHeld(ctx, heldTarget{ep: ep}, time.Second, locks, 700*time.Millisecond, "held-test:a:")
	if err != nil {
		t.Fatal(err)
	}
	if p := heldProblems(&heldReport{Runs: []*heldRun{r}}); len(p) > 0 {
		t.Errorf("a small run: %v (%+v)", p, r)
	}
	if r.Masters != 3 || r.NeededPerSec < 179 || r.NeededPerSec > 181 || r.Renewals["extended"] == 0 || r.GoroutinesPerLock > 0.5 || r.HeapPerLock <= 0 { // no goroutine per held lock
		t.Errorf("figures: %+v", r)
	}

	// Another owner takes 5 keys on 2 of the 3 masters midway: their
	// next renewals are refused.
	taken := func(ctx context.Context, prefix string) {
		for i := range 5 {
			for _, c := range clients[:2] {
				c.Set(ctx, prefix+strconv.Itoa(i), "other", time.Minute)
			}
		}
	}
	r, err = runHeld(ctx, heldTarget{ep: ep, midway: taken}, time.Second, locks, 700*time.Millisecond, "held-test:b:")
	if err != nil {
		t.Fatal(err)
	}
	if r.Lost != 5 || r.LostEvents[string(redlock.Refused)] != 5 || r.ReleaseLost != 5 || r.Released != locks-5 {
		t.Errorf("5 taken away: lost %d, LostEvents %v, release found lost %d, released %d; want 5, 5 refused, 5, %d", r.Lost, r.LostEvents, r.ReleaseLost, r.Released, locks-5)
	}
	p := heldProblems(&heldReport{Runs: []*heldRun{r}})
	if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, "lost") }) {
		t.Errorf("5 taken away: problems %v, want a lost lock among them", p)
	}
	if left, err := countKeys(ctx, ep.admin, "held-test:"); err != nil || left != 0 {
		t.Errorf("after the runs: %d key(s) left (%v)", left, err)
	}
}

func TestFmtInt(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {28_783, "28,783"}, {1_234_567, "1,234,567"}, {-1500, "-1,500"}} {
		if got := fmtInt(tc.n); got != tc.want {
			t.Errorf("fmtInt(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
