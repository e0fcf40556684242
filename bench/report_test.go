package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// fakeRun makes a run with cycles and failures over one second and latencies of lat.
func fakeRun(name string, repeat int, cycles, failures uint64, lat time.Duration) *runResult {
	r := &runResult{Contender: name, Repeat: repeat, Elapsed: time.Second, Cycles: cycles, Failures: failures,
		Mallocs: 10 * (cycles + failures), Bytes: 1000 * (cycles + failures), ClientCPU: 0.5, ServerCPU: 0.25}
	for range cycles + failures {
		r.Lat.Record(lat)
	}
	return r
}

func fakeReport() *report {
	order := []string{"redlock", "redsync", "redislock"}
	c1 := cell{N: 1, G: 64, HotKeys: 16}
	c5 := cell{N: 5, G: 64, Contended: true, HotKeys: 16}
	runs1 := []*runResult{
		fakeRun("redlock", 0, 1000, 0, 100*time.Microsecond), fakeRun("redsync", 0, 100, 0, time.Millisecond), fakeRun("redislock", 0, 250, 0, time.Millisecond),
		fakeRun("redlock", 1, 1200, 0, 100*time.Microsecond), fakeRun("redsync", 1, 200, 0, time.Millisecond), fakeRun("redislock", 1, 300, 0, time.Millisecond),
	}
	runs5 := []*runResult{
		fakeRun("redlock", 0, 300, 700, 50*time.Microsecond), fakeRun("redsync", 0, 50, 50, 2*time.Millisecond),
	}
	runs5[0].Overlaps = 1
	runs5[1].Errors, runs5[1].FirstErr = 3, "node #2: i/o timeout"
	r := &report{
		Meta:    meta{Date: "2026-11-30 00:00 UTC", CPU: "Test CPU <&>", CPUs: 2, Duration: "1s", Repeats: 2},
		Ceiling: &ceiling{Clients: 64, Pipeline: 16, Requests: 1000},
		order:   order,
	}
	r.Ceiling.add(ceilingRun{Repeat: 0, SetRPS: 400_000, EvalshaRPS: 200_000, CyclesPerSec: 1 / (1/400_000.0 + 1/200_000.0)})
	r.Ceiling.add(ceilingRun{Repeat: 1, SetRPS: 300_000, EvalshaRPS: 100_000, CyclesPerSec: 1200 / 0.25})
	r.Cells = []cellReport{summarize(c1, order, runs1), summarize(c5, order, runs5)}
	r.Goals = checkGoals(r)
	return r
}

func TestSummarize(t *testing.T) {
	r := fakeReport()
	c1 := r.Cells[0]
	if got, want := c1.Name, "n1-g64-uncontended"; got != want {
		t.Fatalf("name = %q, want %q", got, want)
	}
	rl := c1.contender("redlock")
	// Per-repeat ratios to redsync are 10 and 6: the median is 8.
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"cycles/s", rl.CyclesPerSec, 1100},
		{"vs redsync", rl.VsRedsync, 8},
		{"vs redislock", rl.VsRedislock, (4 + 4) / 2},
		{"allocs/op", rl.AllocsPerOp, 10},
		{"bytes/op", rl.BytesPerOp, 1000},
		{"client CPU µs/op", rl.ClientCPU, 1.0 / 2200 * 1e6},
		{"server CPU µs/op", rl.ServerCPU, 0.5 / 2200 * 1e6},
		{"p50 ns", float64(rl.P50), 100_000},
	} {
		tol := 1e-6 * math.Max(1, tc.want)
		if strings.HasPrefix(tc.name, "p50") {
			tol = tc.want / 128 // histogram resolution
		}
		if math.Abs(tc.got-tc.want) > tol {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if rs := c1.contender("redsync"); rs.VsRedsync != 0 {
		t.Errorf("redsync vs itself = %v, want 0 (not shown)", rs.VsRedsync)
	}
	// Contended cells compare attempts/s: redlock 1000 against redsync's 100.
	c5 := r.Cells[1]
	if got := c5.contender("redlock").VsRedsync; got != 10 {
		t.Errorf("contended vs redsync = %v, want 10", got)
	}
	if c5.contender("redislock") != nil {
		t.Error("redislock appears in a cell it did not run in")
	}
	if got := len(c1.Runs) + len(c5.Runs); got != 8 {
		t.Errorf("runs recorded = %d, want 8", got)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := writeMarkdown(&b, fakeReport()); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| cell | redlock | redsync | redislock |",
		"| n1-g64-uncontended | 1.10k (8.00× rs, 4.00× rl) | 150 (0.53× rl) | 275 (2.00× rs) |",
		"| n5-g64-contended | 1.00k (10.00× rs) | 100 | |",
		"| n1-g64-uncontended | redlock | 1.10k | 0 | 8.00× | 4.00× | 99.8µs | 99.8µs | 99.8µs | 10.0 | 1000 | 455µs | 227µs | 0 | 0 |",
		"SET NX PX 350k/s, EVALSHA release 150k/s, so 69.1k cycles/s (one of each per cycle); median of 2 measurement(s) each taken beside",
		"| half of redis-benchmark -P 16 | n1-g64-uncontended | redlock | 0.13 of 69.1k/s | >= 0.50 | no |",
		"- n5-g64-contended redsync (3): node #2: i/o timeout",
		"| zero overlapping holders | n5-g64-contended | redlock | 1 | 0 | no |",
		"| N=5, 64 goroutines, uncontended |", // no such cell: the goal is absent
	} {
		present := strings.Contains(md, want)
		if want == "| N=5, 64 goroutines, uncontended |" {
			present = !present
		}
		if !present {
			t.Errorf("markdown lacks (or wrongly has) %q\n%s", want, md)
		}
	}
	// Every table row has as many cells as its header.
	for _, block := range strings.Split(md, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if !strings.HasPrefix(lines[0], "|") {
			continue
		}
		cols := strings.Count(lines[0], "|")
		for _, l := range lines[1:] {
			if got := strings.Count(l, "|"); got != cols {
				t.Errorf("row has %d bars, header %d: %q", got, cols, l)
			}
		}
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := writeJSON(&b, fakeReport()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Meta           struct{ Repeats int }
		RedisBenchmark struct {
			CyclesPerSec float64 `json:"cycles_per_sec"`
		} `json:"redis_benchmark"`
		Cells []struct {
			Name       string
			Contenders []struct {
				Name      string
				VsRedsync float64 `json:"vs_redsync"`
				Overlaps  uint64
			}
			Runs []struct{ Contender string }
		}
		Goals []struct{ Met bool }
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Meta.Repeats != 2 || len(got.Cells) != 2 || got.Cells[1].Name != "n5-g64-contended" {
		t.Fatalf("decoded %+v", got)
	}
	if c := got.Cells[0].Contenders[0]; c.Name != "redlock" || c.VsRedsync != 8 {
		t.Errorf("first contender = %+v", c)
	}
	if got.Cells[1].Contenders[0].Overlaps != 1 || len(got.Cells[0].Runs) != 6 || len(got.Goals) == 0 {
		t.Errorf("decoded %+v", got)
	}
	if math.Abs(got.RedisBenchmark.CyclesPerSec-(133333.33+4800)/2) > 1 {
		t.Errorf("ceiling = %v", got.RedisBenchmark.CyclesPerSec)
	}
}

func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	if err := writeSVG(&b, fakeReport()); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, one solid bar per contender per cell, one light bar per cell with failures.
	dec := xml.NewDecoder(&b)
	var rects, light int
	var texts []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if el.Name.Local == "rect" {
				rects++
				for _, a := range el.Attr {
					if a.Name.Local == "fill-opacity" {
						light++
					}
				}
			}
		case xml.CharData:
			texts = append(texts, string(el))
		}
	}
	// background + 3 legend swatches + 3 bars (n1) + 2 bars (n5) + 2 failure extensions (n5)
	if got, want := rects, 1+3+3+2+2; got != want {
		t.Errorf("rects = %d, want %d", got, want)
	}
	if light != 2 {
		t.Errorf("light bars = %d, want 2", light)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"N = 1 master (redis-benchmark -P 16 ceiling: 69.1k cycles/s)", "N = 5 masters", "Test CPU <&>", "300 +700 failed OVERLAPS 1", "g64-contended"} {
		if !strings.Contains(all, want) {
			t.Errorf("SVG text lacks %q: %s", want, all)
		}
	}
}

func TestNiceMax(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0, 1}, {1, 1}, {1.5, 2}, {3, 5}, {7, 10}, {1100, 2000}, {45_000, 50_000}} {
		if got := niceMax(tc.in); got != tc.want {
			t.Errorf("niceMax(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{fmtRate(0), "0"}, {fmtRate(5.5), "5.50"}, {fmtRate(950), "950"}, {fmtRate(12_345), "12.3k"}, {fmtRate(1_234_567), "1.23M"},
		{fmtDur(950), "0.95µs"}, {fmtDur(54_000), "54.0µs"}, {fmtDur(6_780_000), "6.78ms"}, {fmtDur(2e9), "2.00s"},
		{fmtRatio(0), "–"}, {fmtRatio(8), "8.00×"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestSmokeProblems(t *testing.T) {
	r := fakeReport()
	p := smokeProblems(r)
	if len(p) != 1 || !strings.Contains(p[0], "n5-g64-contended redlock: 1 overlapping holders") {
		t.Errorf("problems = %q", p)
	}
	r.Cells[0].Contenders[1].Cycles = 0
	if p := smokeProblems(r); len(p) != 2 {
		t.Errorf("problems with a contender at 0 cycles = %q", p)
	}
	r.Goals = append(r.Goals,
		goalResult{allocGoal, "n5-g1-uncontended", "redlock", "16.3", "<= 30", true},
		goalResult{allocGoal, "n1-g1-uncontended", "redlock", "12.0", "<= 10", false})
	p = smokeProblems(r)
	if len(p) != 3 || p[2] != "n1-g1-uncontended redlock: 12.0 allocations per cycle, want <= 10" {
		t.Errorf("problems with an allocation goal missed = %q", p)
	}
}
