package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"
)

// TestMain fails the tests if run leaves a goroutine behind: the lock
// client, Do's watchdogs, the redis clients and the miniredis servers must
// all be done.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEverySlotRunsOnce(t *testing.T) {
	single := func(t *testing.T) []string { // one master: NewSingle
		return []string{miniredis.RunT(t).Addr()}
	}
	tests := []struct {
		name    string
		cfg     config
		masters func(t *testing.T) []string
	}{
		// Margins are generous (a skew well below the slot, a TTL whose
		// node timeout is TTL/10) so a loaded CI machine does not fail them.
		// The node timeout also bounds each Client's first request to each
		// master, which sets its connection up in several round trips
		// first, and a set-up that runs out of it is made again by the next
		// request: hence the default of 2s here, not 1s (100ms was too short
		// for the race detector on a loaded machine).
		{name: "5 masters", cfg: config{replicas: 5, slots: 4, slot: 200 * time.Millisecond, skew: 40 * time.Millisecond, work: 20 * time.Millisecond}},
		// A TTL shorter than the hold: Do's watchdog must keep the lock
		// until the slot ends.
		{name: "renewed hold", cfg: config{replicas: 3, slots: 2, slot: time.Second, skew: 100 * time.Millisecond, work: 10 * time.Millisecond, ttl: 400 * time.Millisecond}},
		{name: "single master", cfg: config{replicas: 5, slots: 3, slot: 200 * time.Millisecond, skew: 40 * time.Millisecond, work: 20 * time.Millisecond}, masters: single},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.hold = true
			if cfg.ttl == 0 {
				cfg.ttl = 2 * time.Second
			}
			if tt.masters != nil {
				cfg.masters = tt.masters(t)
			}
			var out strings.Builder
			if err := run(t.Context(), cfg, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			rows := parseTable(t, out.String())
			if got, want := len(rows), cfg.slots; got != want {
				t.Fatalf("got %d slots in the table, want %d\n%s", got, want, out.String())
			}
			for i, r := range rows {
				if len(r.ranOn) != 1 {
					t.Errorf("slot %d ran on %v, want exactly one replica", i+1, r.ranOn)
				}
				if got, want := len(r.ranOn)+r.skipped, cfg.replicas; got != want {
					t.Errorf("slot %d: %d ran + %d skipped, want %d replicas accounted for", i+1, len(r.ranOn), r.skipped, want)
				}
			}
			if !strings.Contains(out.String(), "Every slot ran exactly once.") {
				t.Errorf("no success line in the output:\n%s", out.String())
			}
		})
	}
}

// TestReleasingEarlyRunsSlotsAgain shows why the lock is held until the slot
// ends: released when the short job ends, the lock is free again before the
// replicas whose clocks run late have ticked, and they run the slot again.
func TestReleasingEarlyRunsSlotsAgain(t *testing.T) {
	cfg := config{replicas: 5, slots: 4, slot: 150 * time.Millisecond, skew: 120 * time.Millisecond,
		work: 5 * time.Millisecond, ttl: time.Second, hold: false}
	var out strings.Builder
	if err := run(t.Context(), cfg, &out); err == nil {
		t.Fatalf("run succeeded, want an error for slots run more than once\n%s", out.String())
	}
	dup := false
	for _, r := range parseTable(t, out.String()) {
		dup = dup || len(r.ranOn) > 1
	}
	if !dup || !strings.Contains(out.String(), "NOT every slot ran exactly once") {
		t.Errorf("no slot reported as run more than once:\n%s", out.String())
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, cfg := range []config{
		{replicas: 0, slots: 1, slot: time.Second, ttl: time.Second},
		{replicas: 1, slots: 1, slot: time.Second, skew: time.Second, ttl: time.Second}, // skew must stay below the slot
	} {
		if err := run(t.Context(), cfg, &strings.Builder{}); err == nil {
			t.Errorf("run(%+v) succeeded, want an error", cfg)
		}
	}
}

// row is one line of the table run prints.
type row struct {
	ranOn   []string // "replica 3", ...
	skipped int
}

// parseTable reads the table's rows, in slot order. tabwriter separates
// the columns by at least two spaces; a cell holds single spaces only.
func parseTable(t *testing.T, out string) []row {
	t.Helper()
	cols := regexp.MustCompile(`\s{2,}`)
	var rows []row
	in := false // between the header and the blank line after the table
	for line := range strings.Lines(out) {
		f := cols.Split(strings.TrimSpace(line), -1)
		switch {
		case f[0] == "slot":
			in = true
			continue
		case !in:
			continue
		case f[0] == "":
			return rows
		case len(f) != 5:
			t.Fatalf("bad table line %q", line)
		}
		// slot, minute, ran on ("replica 1, replica 4" or "nobody"), started, skipped
		var r row
		if f[2] != "nobody" {
			r.ranOn = strings.Split(f[2], ", ")
		}
		n, err := strconv.Atoi(f[4])
		if err != nil {
			t.Fatalf("bad table line %q: %v", line, err)
		}
		r.skipped = n
		rows = append(rows, r)
	}
	return rows
}
