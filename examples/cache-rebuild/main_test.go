package main

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestMain fails the tests if run leaves a goroutine behind: the lock
// client, the redis clients and the miniredis servers must all be closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// row is one line of the table run prints.
type row struct{ tried, rebuilt, discarded, stale, fresh, waited int }

func TestRunRebuildsEachEntryOnce(t *testing.T) {
	single := func(t *testing.T) []string { // one master: NewSingle
		s := miniredis.RunT(t)
		return []string{s.Addr()}
	}
	tests := []struct {
		name    string
		wait    time.Duration
		masters func(t *testing.T) []string
	}{
		{name: "serve stale", wait: 0},
		{name: "wait for fresh", wait: 10 * time.Second},
		{name: "single master", wait: 0, masters: single},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config{workers: 20, entries: 3, work: 50 * time.Millisecond, wait: tt.wait, ttl: 5 * time.Second}
			if tt.masters != nil {
				cfg.masters = tt.masters(t)
			}
			var out strings.Builder
			if err := run(t.Context(), cfg, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			rows := parseTable(t, out.String())
			if got, want := len(rows), cfg.entries; got != want {
				t.Fatalf("got %d entries in the table, want %d\n%s", got, want, out.String())
			}
			for key, r := range rows {
				if r.rebuilt != 1 || r.discarded != 0 {
					t.Errorf("%s: rebuilt %d, discarded %d; want 1 and 0", key, r.rebuilt, r.discarded)
				}
				if got := r.rebuilt + r.discarded + r.stale + r.fresh; got != cfg.workers {
					t.Errorf("%s: %d requests accounted for, want %d", key, got, cfg.workers)
				}
				if tt.wait > 0 && r.stale != 0 {
					t.Errorf("%s: %d served stale despite waiting %v, want 0", key, r.stale, tt.wait)
				}
			}
			if !strings.Contains(out.String(), "Every entry was rebuilt exactly once.") {
				t.Errorf("no success line in the output:\n%s", out.String())
			}
		})
	}
}

// TestRunReportsLapsedLock runs a rebuild that outlasts the lock's TTL: the
// validity check must discard the write, and run must report failure.
func TestRunReportsLapsedLock(t *testing.T) {
	cfg := config{workers: 5, entries: 1, work: 600 * time.Millisecond, ttl: 300 * time.Millisecond}
	var out strings.Builder
	if err := run(t.Context(), cfg, &out); err == nil {
		t.Fatalf("run succeeded, want an error\n%s", out.String())
	}
	if !strings.Contains(out.String(), "new value is discarded") {
		t.Errorf("output does not mention the discarded value:\n%s", out.String())
	}
	if r := parseTable(t, out.String())["product:1"]; r.rebuilt != 0 {
		t.Errorf("rebuilt %d, want 0: a lapsed lock's value must not be written", r.rebuilt)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	if err := run(t.Context(), config{workers: 0, entries: 1}, &strings.Builder{}); err == nil {
		t.Error("run with 0 workers succeeded, want an error")
	}
}

// parseTable reads the table's numeric columns, by entry.
func parseTable(t *testing.T, out string) map[string]row {
	t.Helper()
	rows := map[string]row{}
	in := false // between the header and the blank line after the table
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "entry":
			in = true
			continue
		case !in:
			continue
		case len(f) == 0:
			return rows
		case len(f) < 7:
			t.Fatalf("bad table line %q", line)
		}
		var n [6]int
		for i := range n {
			v, err := strconv.Atoi(f[i+1])
			if err != nil {
				t.Fatalf("bad table line %q: %v", line, err)
			}
			n[i] = v
		}
		rows[f[0]] = row{n[0], n[1], n[2], n[3], n[4], n[5]}
	}
	return rows
}

// TestRunIsCleanOnABusyMachine runs the documented modes with the default
// flags while spinning goroutines keep every CPU busy: every entry must be
// rebuilt once, and no worker may print an error (a Release or a wait that
// timed out on the in-process masters, a lapsed lock).
func TestRunIsCleanOnABusyMachine(t *testing.T) {
	redis := func(n int) func(t *testing.T) []string { // real servers, as -masters names them
		return func(t *testing.T) []string {
			var addrs []string
			for _, s := range redistest.Start(t, n) {
				addrs = append(addrs, s.Addr())
			}
			return addrs
		}
	}
	tests := []struct {
		name    string
		wait    time.Duration
		masters func(t *testing.T) []string
	}{
		{name: "in-process masters, serve stale", wait: 0},
		{name: "in-process masters, wait 1s", wait: time.Second},
		{name: "3 Redis masters, wait 1s", wait: time.Second, masters: redis(3)},
		{name: "1 Redis master, wait 1s", wait: time.Second, masters: redis(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaults()
			cfg.wait = tt.wait
			if tt.masters != nil {
				cfg.masters = tt.masters(t)
			}
			stop := spin(runtime.GOMAXPROCS(0))
			var out strings.Builder
			err := run(t.Context(), cfg, &out)
			stop()
			if err != nil {
				msg, _, _ := strings.Cut(err.Error(), "\n")
				t.Fatalf("run: %.300s", msg)
			}
			if lines := workerLines(out.String()); len(lines) > 0 {
				t.Errorf("workers printed %d lines, want none; the first: %s", len(lines), lines[0])
			}
		})
	}
}

// spin keeps n goroutines busy until the returned func is called; it
// returns once they have all stopped. They yield often, as other processes
// on a busy machine share its CPUs: every goroutine of the program still
// runs soon, on a smaller share of the CPUs.
func spin(n int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for x := 1; ; x++ {
				if x%4096 == 0 {
					select {
					case <-done:
						return
					default:
						runtime.Gosched()
					}
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// workerLines returns what the workers printed: the lines between the
// introduction's blank line and the table.
func workerLines(out string) []string {
	var lines []string
	intro := true
	for line := range strings.Lines(out) {
		switch {
		case intro:
			intro = strings.TrimSpace(line) != ""
		case strings.HasPrefix(line, "entry"):
			return lines
		default:
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return lines
}
