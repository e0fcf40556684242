package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeRun makes a run with cycles and refusals over one second and latencies of lat.
func fakeRun(name string, repeat int, cycles, taken uint64, lat time.Duration) *runResult {
	r := &runResult{Contender: name, Repeat: repeat, Elapsed: time.Second, Attempts: cycles + taken, Cycles: cycles, Taken: taken,
		Mallocs: 10 * (cycles + taken), Bytes: 1000 * (cycles + taken), ClientCPU: 0.5, ServerCPU: []float64{0.25}, Calls: []uint64{2 * cycles}, Reads: []uint64{cycles / 2}}
	for range cycles + taken {
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
		Meta:    meta{Date: "2026-11-30 00:00 UTC", CPU: "Test CPU <&>", CPUs: 2, Duration: "1s", Repeats: 2, Own: true, Hold: "100µs"},
		Ceiling: &ceiling{Clients: 64, Pipeline: 16, Requests: 1000},
		order:   order,
	}
	r.Ceiling.add(ceilingRun{Repeat: 0, SetRPS: 400_000, EvalshaRPS: 200_000, CyclesPerSec: 1 / (1/400_000.0 + 1/200_000.0)})
	r.Ceiling.add(ceilingRun{Repeat: 1, SetRPS: 300_000, EvalshaRPS: 100_000, CyclesPerSec: 1200 / 0.25})
	r.Cells = []cellReport{summarize(c1, 50, order, runs1), summarize(c5, 50, order, runs5)}
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
		{"vs redsync", rl.Ratio["redsync"], 8},
		{"vs redislock", rl.Ratio["redislock"], (4 + 4) / 2},
		{"allocs/cycle", rl.AllocsPerCycle, 10},
		{"allocs/attempt", rl.AllocsPerAttempt, 10},
		{"bytes/cycle", rl.BytesPerCycle, 1000},
		{"client CPU µs/cycle", rl.ClientCPU, 1.0 / 2200 * 1e6},
		{"Redis CPU µs/cycle", rl.ServerCPU, 0.5 / 2200 * 1e6},
		{"cycles per Redis core", rl.PerRedisCore, 2200 / 0.5},
		{"redsync vs redlock", c1.contender("redsync").Ratio["redlock"], (0.1 + 1.0/6) / 2},
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
	if _, ok := rl.Ratio["redlock"]; ok {
		t.Error("redlock has a ratio to itself")
	}
	// Contended cells compare decisions/s: redlock 1000 against redsync's 100;
	// per cycle, its allocations are 10000 over 300 cycles, per attempt over 1000.
	c5 := r.Cells[1]
	s5 := c5.contender("redlock")
	if got := s5.Ratio["redsync"]; got != 10 {
		t.Errorf("contended vs redsync = %v, want 10", got)
	}
	if math.Abs(s5.AllocsPerCycle-10000.0/300) > 1e-9 || s5.AllocsPerAttempt != 10 {
		t.Errorf("contended allocs/cycle %v, allocs/attempt %v; want 33.3, 10", s5.AllocsPerCycle, s5.AllocsPerAttempt)
	}
	if c5.contender("redislock") != nil {
		t.Error("redislock appears in a cell it did not run in")
	}
	if got := len(c1.Runs) + len(c5.Runs); got != 8 {
		t.Errorf("runs recorded = %d, want 8", got)
	}
}

// Without INFO a run has no Redis CPU: the summary says unknown, not zero.
func TestSummarizeWithoutInfo(t *testing.T) {
	a, b := fakeRun("redlock", 0, 100, 0, time.Millisecond), fakeRun("redsync", 0, 10, 0, time.Millisecond)
	a.ServerCPU, a.Calls = nil, nil
	cr := summarize(cell{N: 1, G: 1, HotKeys: 16}, 50, []string{"redlock", "redsync"}, []*runResult{a, b})
	if s := cr.contender("redlock"); s.ServerCPU != -1 || s.PerRedisCore != 0 {
		t.Errorf("no INFO: Redis CPU %v, per core %v; want -1, 0", s.ServerCPU, s.PerRedisCore)
	}
	if s := cr.contender("redsync"); s.ServerCPU <= 0 {
		t.Errorf("with INFO: Redis CPU %v", s.ServerCPU)
	}
}

// A cluster cell reports each shard's share of the commands and the CPU.
func TestSummarizeShards(t *testing.T) {
	r := fakeRun("redlock", 0, 100, 0, time.Millisecond)
	r.ServerCPU, r.Calls = []float64{0.1, 0.1, 0.2}, []uint64{10, 30, 60}
	cr := summarize(cell{N: 1, Shards: 3, Cluster: true, G: 64, HotKeys: 16}, 50, []string{"redlock"}, []*runResult{r})
	s := cr.contender("redlock")
	if fmt.Sprint(s.ShardCalls) != "[0.1 0.3 0.6]" || fmt.Sprint(s.ShardCPU) != "[0.25 0.25 0.5]" {
		t.Errorf("shares: calls %v, CPU %v", s.ShardCalls, s.ShardCPU)
	}
	if got := fmtShares(s.ShardCalls, 3); got != "10% 30% 60%" {
		t.Errorf("fmtShares = %q", got)
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
		"| cell | RTT | redlock | redsync | redislock |",
		"| n1-g64-uncontended | 50.0µs | 1.10k | 150 (8.00×) | 275 (4.00×) |",
		"| n5-g64-contended | 50.0µs | 1.00k | 100 (10.00×) | |",
		"| n1-g64-uncontended | 227µs (4.40k/core) | 1.67ms (600/core) | 909µs (1.10k/core) |",
		"| n1-g64-uncontended | redlock | 1.10k | 0 | 99.8µs | 99.8µs | 99.8µs | 10.0 | 10.0 | 1000 | 455µs | 227µs | 2.00 | 0.50 | – | 0 | 0 |",
		"| n5-g64-contended | redlock | 300 | 700 | 49.9µs | 49.9µs | 49.9µs | 33.3 | 10.0 | 3333 |",
		"SET NX PX 350k/s, EVALSHA release 150k/s, so 69.1k cycles/s (one of each per cycle); median of 2 measurement(s) each taken beside",
		"| half of redis-benchmark -P 16 | n1-g64-uncontended | redlock | 0.13 of 69.1k/s | >= 0.50 | no |",
		"- n5-g64-contended redsync (3): node #2: i/o timeout",
		"| zero overlapping holders (each lock held 100µs) | n5-g64-contended | redlock | 1 | 0 | no |",
		"- **redsync** (peer library), 2 cell(s): redlock ahead in 2 (up to 10.00×), even in 0, behind in 0. Redis CPU per cycle never higher. Lock p99 never higher.",
		"| redsync | peer library | github.com/go-redsync/redsync/v4",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q\n%s", want, md)
		}
	}
	if strings.Contains(md, "| N=5, 64 goroutines |") {
		t.Error("a target for a cell that did not run")
	}
	if strings.Contains(md, "issue") {
		t.Error("the report refers to an issue")
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

// The hand-over table gives the gap in release calls: 400µs against a
// 200µs release is two; a run that measured no release call says so.
func TestHandOverInReleases(t *testing.T) {
	a, b := fakeRun("redlock", 0, 100, 0, time.Millisecond), fakeRun("redsync", 0, 100, 0, time.Millisecond)
	for _, r := range []*runResult{a, b} {
		for range 100 {
			r.Gap.Record(400 * time.Microsecond)
			r.Hold.Record(time.Millisecond)
		}
	}
	for range 100 {
		a.Release.Record(200 * time.Microsecond)
	}
	r := &report{Meta: meta{Repeats: 1, Own: true}, order: []string{"redlock", "redsync"}}
	r.Cells = []cellReport{summarize(cell{N: 1, G: 64, Contended: true, HotKeys: 4}, 50, r.order, []*runResult{a, b})}
	var md strings.Builder
	writeHandOver(&md, r)
	for _, want := range []string{
		"| n1-g64-contended | redlock | 100 | 4.00k | 2% | 1.00ms | 399µs | 2.0 | 399µs |",
		"| n1-g64-contended | redsync | 100 | 4.00k | 2% | 1.00ms | 399µs | – | 399µs |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("hand-over table lacks %q\n%s", want, md.String())
		}
	}
}

// The reading says where the subject is behind, and by how much.
func TestReadingBehind(t *testing.T) {
	runs := []*runResult{fakeRun("redlock", 0, 800, 0, time.Millisecond), fakeRun("redsync", 0, 1000, 0, 500*time.Microsecond)}
	runs[0].ServerCPU = []float64{1}
	r := &report{order: []string{"redlock", "redsync"}}
	r.Cells = []cellReport{summarize(cell{N: 1, G: 64, HotKeys: 16}, 50, r.order, runs)}
	var b strings.Builder
	writeReading(&b, r)
	want := "- **redsync** (peer library), 1 cell(s): redlock ahead in 0, even in 0, behind in 1 (n1-g64-uncontended 0.80×). Redis CPU per cycle higher in 1: n1-g64-uncontended 1.25ms against 250µs. Lock p99 higher in 1: n1-g64-uncontended 1.00ms against 500µs."
	if !strings.Contains(b.String(), want) {
		t.Errorf("reading:\n%s\nwant %s", b.String(), want)
	}
}

func TestWriteMarkdownExternal(t *testing.T) {
	r := fakeReport()
	r.Meta.Own, r.Meta.Prefix, r.Meta.Cleaned = false, "redlock-bench:", 2
	r.Meta.Masters = masterInfo{Masters: []masterMeta{{Addr: "db1:6379", Version: "7.2.4", RTTus: 412}}}
	var b bytes.Buffer
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"keys under `redlock-bench:` only (never FLUSHALL); 2 key(s) left", "| db1:6379 | 7.2.4 | 412µs |", "INFO was not allowed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q", want)
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
				Name     string
				Ratio    map[string]float64 `json:"throughput_ratio_to"`
				RedisCPU float64            `json:"redis_cpu_us_per_cycle"`
				Overlaps uint64
			}
			Runs []struct{ Contender string }
		}
		Targets []struct{ Met bool }
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Meta.Repeats != 2 || len(got.Cells) != 2 || got.Cells[1].Name != "n5-g64-contended" {
		t.Fatalf("decoded %+v", got)
	}
	if c := got.Cells[0].Contenders[0]; c.Name != "redlock" || c.Ratio["redsync"] != 8 || c.RedisCPU <= 0 {
		t.Errorf("first contender = %+v", c)
	}
	if got.Cells[1].Contenders[0].Overlaps != 1 || len(got.Cells[0].Runs) != 6 || len(got.Targets) == 0 {
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
	// Well-formed XML; per contender per cell a cycles bar and a per-core bar,
	// and a light bar per cell with refusals.
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
					if a.Name.Local == "fill-opacity" && a.Value == "0.3" {
						light++
					}
				}
			}
		case xml.CharData:
			texts = append(texts, string(el))
		}
	}
	// background + 3 legend swatches + 2x3 bars (n1) + 2x2 bars (n5) + 2 refusal extensions (n5)
	if got, want := rects, 1+3+6+4+2; got != want {
		t.Errorf("rects = %d, want %d", got, want)
	}
	if light != 2 {
		t.Errorf("light bars = %d, want 2", light)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"N = 1 master (redis-benchmark -P 16 ceiling: 69.1k cycles/s)", "N = 5 masters", "Test CPU <&>", "300 +700 OVERLAPS 1", "g64-contended", "4.40k (227µs/cycle)", "50.0 +50.0 ERRORS 3"} {
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
	// A peer's errors are noted, not problems; this library's are problems.
	if n := smokeNotes(r); len(n) != 1 || !strings.Contains(n[0], "n5-g64-contended redsync (a peer library): 3 error(s), first: node #2: i/o timeout") {
		t.Errorf("notes = %q", n)
	}
	r.Cells[1].Contenders[0].Errors, r.Cells[1].Contenders[0].FirstErr = 2, "redlock: boom"
	if p := smokeProblems(r); len(p) != 2 || !slices.Contains(p, "n5-g64-contended redlock: 2 error(s), first: redlock: boom") {
		t.Errorf("problems with an error of this library's = %q", p)
	}
	r.Cells[1].Contenders[0].Errors = 0
	r.Cells[0].Contenders[1].Cycles = 0
	if p := smokeProblems(r); len(p) != 2 {
		t.Errorf("problems with a contender at 0 cycles = %q", p)
	}
	r.Cells[0].Contenders[0].Taken = 5
	if p := smokeProblems(r); len(p) != 3 || !slices.Contains(p, "n1-g64-uncontended redlock: 5 attempt(s) refused as held by another owner, on fresh keys") {
		t.Errorf("problems with a refusal on fresh keys = %q", p)
	}
	r.Goals = append(r.Goals,
		goalResult{allocGoal, "n5-g1-uncontended", "redlock", "16.3", "<= 30", true},
		goalResult{allocGoal, "n1-g1-uncontended", "redlock", "12.0", "<= 10", false})
	p = smokeProblems(r)
	if len(p) != 4 || p[3] != "n1-g1-uncontended redlock: 12.0 allocations per cycle, want <= 10" {
		t.Errorf("problems with an allocation target missed = %q", p)
	}
}

// The set section gives each key's cost against the subject's lock on one
// key: a set of 4 at half the subject's cycles/s locks twice its keys per
// second, and at four times its Redis CPU per cycle costs the same per key.
func TestSetsSection(t *testing.T) {
	order := []string{"redlock", "redlock-set4"}
	cl := cell{N: 1, G: 64, HotKeys: 16}
	runs := []*runResult{fakeRun("redlock", 0, 1000, 0, time.Millisecond), fakeRun("redlock-set4", 0, 500, 0, time.Millisecond)}
	runs[1].ServerCPU = []float64{0.5} // 1ms per cycle, against the subject's 250µs
	r := &report{order: order, Cells: []cellReport{summarize(cl, 50, order, runs)}}
	var b strings.Builder
	writeSets(&b, r)
	want := "| n1-g64-uncontended | redlock-set4 | 4 | 500 | 0.50× | 2.00× | 1.00ms | 250µs | 1.00× |"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("sets section:\n%s\nwant the row %s", b.String(), want)
	}
	var none strings.Builder
	writeSets(&none, fakeReport())
	if none.Len() != 0 {
		t.Fatalf("a report without set contenders has a sets section:\n%s", none.String())
	}
}
